//! The server behind an `rc_server *` over [`RcService`]: its life (init,
//! destroy, the reaper thread), its hooks and snapshot, and what every
//! entry point shares. The session calls are in `calls.rs`.
//!
//! Every entry point runs inside [`guard`] (a panic becomes
//! `RC_E_INTERNAL`, never an unwind into C), checks its arguments in the
//! order versitygw's library does (`rc_prepare` refuses `op > 1` before it
//! looks at the server pointer), and, once it has let go of the server's
//! lock, delivers what the call produced for the caller's hooks: log lines
//! and one terminal notification per destroyed session.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use rctb_rcsession::{Ended, Op, RcError, RcService, ServerConfig, SessionId, SessionManager, SessionState};
use rctb_transport::time::Duration;

use crate::abi::*;
use crate::transport::DlTransport;
use crate::verbs;

type Service = RcService<DlTransport, ChaCha20Rng>;

/// A C callback and its context pointer (kept as an address: the caller
/// owns what it points at).
#[derive(Clone, Copy)]
struct Hook<F> {
    f: F,
    ctx: usize,
}

/// What a call leaves for the hooks, delivered with no lock held.
#[derive(Default)]
pub(crate) struct Outbox {
    pub(crate) logs: Vec<(c_int, String, u32)>,
    pub(crate) ended: Vec<Ended>,
}

/// The server behind an `rc_server *`.
pub(crate) struct Server {
    pub(crate) svc: Service,
    log: Mutex<Option<Hook<rc_log_fn>>>,
    terminal: Mutex<Option<Hook<rc_terminal_fn>>>,
    /// `rc_server_destroy` has begun: PREPARE and READY are refused, the
    /// calls that return leases and views still run.
    pub(crate) destroying: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
    reaper: Mutex<Option<JoinHandle<()>>>,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often the reaper looks for expired sessions.
const REAP_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Server {
    pub(crate) fn deliver(&self, out: Outbox) {
        // Copied out first: a hook may call back into the server, which
        // takes these locks again.
        let log = *lock(&self.log);
        if let Some(h) = log {
            if let Some(f) = h.f {
                let file = CString::new(file!()).unwrap_or_default();
                for (level, msg, line) in out.logs {
                    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
                    f(h.ctx as *mut c_void, level, msg.as_ptr(), file.as_ptr(), line as c_int);
                }
            }
        } else {
            for (level, msg, _) in out.logs.iter().filter(|(level, _, _)| *level == 0) {
                eprintln!("rcserver[{level}]: {msg}");
            }
        }
        if out.ended.is_empty() {
            return;
        }
        let hook = *lock(&self.terminal);
        for e in out.ended {
            let Some(Hook { f: Some(f), ctx }) = hook else { continue };
            let id = CString::new(e.session.to_string()).unwrap_or_default();
            let outcome = e.outcome.map_or(RC_READY_OK, |o| c_int::from(o.code()));
            f(ctx as *mut c_void, id.as_ptr(), outcome, e.bytes);
        }
    }

    /// Runs `f` on the manager under its lock, then delivers what ended.
    pub(crate) fn with<X>(
        &self,
        out: &mut Outbox,
        f: impl FnOnce(&mut SessionManager<DlTransport, ChaCha20Rng>) -> X,
    ) -> X {
        self.svc.with_manager(|m| {
            let x = f(m);
            out.ended.extend(m.take_ended());
            x
        })
    }

    fn reap_loop(self: Arc<Self>) {
        let mut stop = lock(&self.stop);
        while !*stop {
            stop = self.wake.wait_timeout(stop, REAP_EVERY).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            drop(stop);
            let mut out = Outbox::default();
            self.with(&mut out, |m| m.reap());
            self.deliver(out);
            stop = lock(&self.stop);
        }
    }
}

/// Runs an entry point: a panic becomes `RC_E_INTERNAL`.
pub(crate) fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(RC_E_INTERNAL)
}

/// The status code of an error.
pub(crate) fn code(e: &RcError) -> c_int {
    c_int::from(e.status().code())
}

/// The server behind a pointer (NULL: `RC_E_ARG`).
///
/// # Safety
/// `srv` is NULL or a pointer `rc_server_init` returned and
/// `rc_server_destroy` has not freed.
pub(crate) unsafe fn server<'a>(srv: *mut rc_server) -> Result<&'a Arc<Server>, c_int> {
    // SAFETY: the caller's promise.
    unsafe { srv.as_ref() }.map(|s| &s.inner).ok_or(RC_E_ARG)
}

/// A borrowed string: `{NULL, 0}` is "", NULL with a length is `RC_E_ARG`,
/// and so are bytes that are not UTF-8.
///
/// # Safety
/// A non-NULL `s.ptr` points at `s.len` readable bytes for the call.
pub(crate) unsafe fn text<'a>(s: rc_str_in) -> Result<&'a str, c_int> {
    if s.ptr.is_null() {
        return if s.len == 0 { Ok("") } else { Err(RC_E_ARG) };
    }
    // SAFETY: the caller's promise.
    let bytes = unsafe { std::slice::from_raw_parts(s.ptr.cast::<u8>(), s.len as usize) };
    std::str::from_utf8(bytes).map_err(|_| RC_E_ARG)
}

/// A session id: anything but 32 lowercase hex digits names no session
/// (`RC_E_NO_SESSION`, as an unknown id does: the shape of ids reveals
/// nothing).
///
/// # Safety
/// As for [`text`].
pub(crate) unsafe fn session(s: rc_str_in) -> Result<SessionId, c_int> {
    // SAFETY: the caller's promise.
    let t = unsafe { text(s) }?;
    SessionId::parse(t).map_err(|_| RC_E_NO_SESSION)
}

/// Copies `s` into a fixed C field, NUL-terminated when there is room;
/// `RC_E_TRUNC` when it does not fit `max` bytes.
pub(crate) fn put(dst: &mut [c_char], s: &str, max: usize) -> Result<u32, c_int> {
    if s.len() > max || s.len() > dst.len() {
        return Err(RC_E_TRUNC);
    }
    dst.fill(0);
    for (d, b) in dst.iter_mut().zip(s.bytes()) {
        *d = b as c_char;
    }
    Ok(s.len() as u32)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Opens the first RDMA device, or the one `gid_hint` names, and starts
/// the server on it (and its reaper thread).
///
/// # Safety
/// `opts` and `out` are NULL or valid; `opts.gid_hint` is NULL or a
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_server_init(opts: *const rc_device_opts, out: *mut *mut rc_server) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (Some(o), false) = (unsafe { opts.as_ref() }, out.is_null()) else { return RC_E_ARG };
        let hint = if o.gid_hint.is_null() {
            Ok(verbs::Hint::First)
        } else {
            // SAFETY: the caller's promise: a NUL-terminated string.
            let t = unsafe { CStr::from_ptr(o.gid_hint) };
            t.to_str().map_err(|_| "gid_hint: not UTF-8").and_then(verbs::Hint::parse)
        };
        let hint = match hint {
            Ok(h) => h,
            Err(why) => {
                eprintln!("rcserver: {why}");
                return RC_E_ARG;
            }
        };
        let port = o.port.max(1);
        let opened = verbs::lib().and_then(|lib| verbs::open(lib, hint, port, o.gid_index));
        let dev = match opened {
            Ok(d) => d,
            Err(why) => {
                eprintln!("rcserver: rc_server_init: {why}");
                return RC_E_INTERNAL;
            }
        };
        let mut cfg = ServerConfig::default();
        cfg.port = port;
        cfg.gid_index = dev.gid_index;
        cfg.limits.max_sessions = o.max_sessions;
        cfg.limits.max_user_sessions = o.max_user_sessions;
        cfg.limits.max_staging_bytes = o.max_staging_bytes;
        cfg.limits.max_user_staging_bytes = o.max_user_staging_bytes;
        cfg.limits.max_qps = o.max_qps;
        cfg.limits.max_user_qps = o.max_user_qps;
        cfg.t_prep = ms(o.t_prep_ms);
        cfg.t_exec = ms(o.t_exec_ms);
        cfg.max_ready_slots = o.max_ready_slots;
        cfg.max_stage_slots = o.max_stage_slots;
        let t = DlTransport::new(dev);
        let name = t.device_name().to_string();
        let mut m = match SessionManager::new(t, ChaCha20Rng::from_os_rng(), cfg) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("rcserver: rc_server_init on {name}: {e}");
                return RC_E_INTERNAL;
            }
        };
        m.record_ended();
        let server = Arc::new(Server {
            svc: RcService::new(m),
            log: Mutex::new(None),
            terminal: Mutex::new(None),
            destroying: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            reaper: Mutex::new(None),
        });
        let reaper = Arc::clone(&server);
        match std::thread::Builder::new().name("rcserver-reaper".into()).spawn(move || reaper.reap_loop()) {
            Ok(h) => *lock(&server.reaper) = Some(h),
            Err(e) => {
                eprintln!("rcserver: rc_server_init: the reaper thread: {e}");
                server.svc.close();
                return RC_E_INTERNAL;
            }
        }
        // SAFETY: checked non-NULL above; the caller's out-parameter.
        unsafe { *out = Box::into_raw(Box::new(rc_server { inner: server })) };
        RC_OK
    })
}

/// Stops the server: refuses new PREPAREs and READYs, marks every session
/// for reaping, waits until every staging lease and PUT view came back
/// (the caller may be touching their memory) and every admitted call
/// left, destroys every session (each with its terminal notification),
/// and frees the server. A completion nobody will finish (a GET without
/// `rc_finish_final`) does not hold it up.
///
/// # Safety
/// `srv` is NULL or a live server; no call on it starts after this one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_server_destroy(srv: *mut rc_server) {
    guard(|| {
        if srv.is_null() {
            return RC_OK;
        }
        // SAFETY: the caller's promise: a live server.
        let s = Arc::clone(unsafe { &(*srv).inner });
        s.destroying.store(true, Ordering::Release);
        *lock(&s.stop) = true;
        s.wake.notify_all();
        if let Some(h) = lock(&s.reaper).take() {
            let _ = h.join();
        }
        loop {
            let mut out = Outbox::default();
            let held = s.with(&mut out, |m| {
                m.cancel_all();
                m.sessions().iter().any(|x| x.lent)
            });
            s.deliver(out);
            if !held {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        s.svc.close();
        let mut out = Outbox::default();
        s.with(&mut out, |_| ());
        s.deliver(out);
        // SAFETY: made by rc_server_init with Box::into_raw; freed once.
        drop(unsafe { Box::from_raw(srv) });
        RC_OK
    });
}

/// Installs (or, with NULL, removes) the log sink.
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_server_set_log_sink(srv: *mut rc_server, f: rc_log_fn, ctx: *mut c_void) {
    guard(|| {
        // SAFETY: the caller's promise.
        match unsafe { server(srv) } {
            Ok(s) => admitted(s, false, |_| {
                *lock(&s.log) = f.map(|_| Hook { f, ctx: ctx as usize });
                RC_OK
            }),
            Err(e) => e,
        }
    });
}

/// Installs (or, with NULL, removes) the terminal notification.
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_server_set_terminal_notify(srv: *mut rc_server, f: rc_terminal_fn, ctx: *mut c_void) {
    guard(|| {
        // SAFETY: the caller's promise.
        match unsafe { server(srv) } {
            Ok(s) => admitted(s, false, |_| {
                *lock(&s.terminal) = f.map(|_| Hook { f, ctx: ctx as usize });
                RC_OK
            }),
            Err(e) => e,
        }
    });
}

fn snapshot_state(state: SessionState, published: bool, reap_pending: bool) -> u8 {
    let base = match (state, published) {
        (SessionState::Prepared, false) => 0,
        (SessionState::Prepared, true) => 1,
        (SessionState::Transferring, _) => 2,
        (SessionState::Completing, _) => 3,
    };
    if reap_pending { base | RC_SNAPSHOT_REAP_PENDING } else { base }
}

/// Copies every live session into a record under the lock, then calls
/// `cb` once per record without it, in session id order. A session whose
/// target does not fit its field is skipped.
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_server_sessions_snapshot(
    srv: *mut rc_server,
    cb: rc_snapshot_cb,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = or_return!(unsafe { server(srv) });
        let Some(cb) = cb else { return RC_E_ARG };
        admitted(s, false, |out| {
            let records: Vec<rc_session_snapshot> = s.with(out, |m| {
                let now = m.now();
                m.sessions()
                    .into_iter()
                    .filter_map(|x| {
                        let mut r = rc_session_snapshot {
                            session_id: [0; 33],
                            op: [0; 4],
                            target: [0; 2048],
                            target_len: 0,
                            state: snapshot_state(x.state, x.published, x.reap_pending),
                            age_ms: now.saturating_duration_since(x.created).as_millis() as u64,
                            staging_bytes: x.size,
                        };
                        put(&mut r.session_id, &x.session.to_string(), 32).ok()?;
                        put(&mut r.op, if x.op == Op::Get { "GET" } else { "PUT" }, 3).ok()?;
                        r.target_len = put(&mut r.target, &x.target, 2047).ok()?;
                        Some(r)
                    })
                    .collect()
            });
            for r in &records {
                cb(r, ctx);
            }
            RC_OK
        })
    })
}

/// Runs one admitted call: `RC_E_INTERNAL` once destroy has begun (for the
/// calls that start work) or the service is closing.
pub(crate) fn admitted(s: &Server, starts_work: bool, f: impl FnOnce(&mut Outbox) -> c_int) -> c_int {
    if starts_work && s.destroying.load(Ordering::Acquire) {
        return RC_E_INTERNAL;
    }
    let Some(adm) = s.svc.try_enter() else { return RC_E_INTERNAL };
    let mut out = Outbox::default();
    let rc = f(&mut out);
    // The hooks run inside the admission (it is a count, not a lock):
    // destroy waits for them, so the server outlives every use here.
    s.deliver(out);
    drop(adm);
    rc
}
