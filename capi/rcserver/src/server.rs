//! The `rc_*` entry points over [`RcService`].
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
use rctb_rcsession::{
    Ended, Handle, Op, PrepareRequest, PrincipalId, PutView, RcError, RcService, ReadyOutcome, ReadyRequest,
    ServerConfig, SessionId, SessionManager, SessionState, StagingLease,
};
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
struct Outbox {
    logs: Vec<(c_int, String, u32)>,
    ended: Vec<Ended>,
}

/// The server behind an `rc_server *`.
pub(crate) struct Server {
    svc: Service,
    log: Mutex<Option<Hook<rc_log_fn>>>,
    terminal: Mutex<Option<Hook<rc_terminal_fn>>>,
    /// `rc_server_destroy` has begun: PREPARE and READY are refused, the
    /// calls that return leases and views still run.
    destroying: AtomicBool,
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
    fn deliver(&self, out: Outbox) {
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
    fn with<X>(&self, out: &mut Outbox, f: impl FnOnce(&mut SessionManager<DlTransport, ChaCha20Rng>) -> X) -> X {
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
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(RC_E_INTERNAL)
}

/// The status code of an error.
fn code(e: &RcError) -> c_int {
    c_int::from(e.status().code())
}

/// The server behind a pointer (NULL: `RC_E_ARG`).
///
/// # Safety
/// `srv` is NULL or a pointer `rc_server_init` returned and
/// `rc_server_destroy` has not freed.
unsafe fn server<'a>(srv: *mut rc_server) -> Result<&'a Arc<Server>, c_int> {
    // SAFETY: the caller's promise.
    unsafe { srv.as_ref() }.map(|s| &s.inner).ok_or(RC_E_ARG)
}

/// A borrowed string: `{NULL, 0}` is "", NULL with a length is `RC_E_ARG`,
/// and so are bytes that are not UTF-8.
///
/// # Safety
/// A non-NULL `s.ptr` points at `s.len` readable bytes for the call.
unsafe fn text<'a>(s: rc_str_in) -> Result<&'a str, c_int> {
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
unsafe fn session(s: rc_str_in) -> Result<SessionId, c_int> {
    // SAFETY: the caller's promise.
    let t = unsafe { text(s) }?;
    SessionId::parse(t).map_err(|_| RC_E_NO_SESSION)
}

/// Copies `s` into a fixed C field, NUL-terminated when there is room;
/// `RC_E_TRUNC` when it does not fit `max` bytes.
fn put(dst: &mut [c_char], s: &str, max: usize) -> Result<u32, c_int> {
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
        if let Ok(s) = unsafe { server(srv) } {
            *lock(&s.log) = f.map(|_| Hook { f, ctx: ctx as usize });
        }
        RC_OK
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
        if let Ok(s) = unsafe { server(srv) } {
            *lock(&s.terminal) = f.map(|_| Hook { f, ctx: ctx as usize });
        }
        RC_OK
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
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        let Some(cb) = cb else { return RC_E_ARG };
        let mut out = Outbox::default();
        let records: Vec<rc_session_snapshot> = s.with(&mut out, |m| {
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
        s.deliver(out);
        for r in &records {
            cb(r, ctx);
        }
        RC_OK
    })
}

/// Runs one admitted call: `RC_E_INTERNAL` once destroy has begun (for the
/// calls that start work) or the service is closing.
fn admitted(s: &Server, starts_work: bool, f: impl FnOnce(&mut Outbox) -> c_int) -> c_int {
    if starts_work && s.destroying.load(Ordering::Acquire) {
        return RC_E_INTERNAL;
    }
    let Some(_adm) = s.svc.try_enter() else { return RC_E_INTERNAL };
    let mut out = Outbox::default();
    let rc = f(&mut out);
    drop(_adm);
    s.deliver(out);
    rc
}

/// PREPARE: a new session with its QP (INIT) and zeroed staging region.
///
/// # Safety
/// `srv` is NULL or a live server; `req` and `resp` are NULL or valid, and
/// the strings `req` holds are readable for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_prepare(
    srv: *mut rc_server,
    req: *const rc_prepare_req,
    resp: *mut rc_prepare_resp,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (Some(r), Some(resp)) = (unsafe { req.as_ref() }, unsafe { resp.as_mut() }) else { return RC_E_ARG };
        // Before the server is looked at: versitygw's own test calls this
        // with op 2 and a bogus server pointer.
        let op = match r.op {
            0 => Op::Get,
            1 => Op::Put,
            _ => return RC_E_ARG,
        };
        // SAFETY: the caller's promise (both strings).
        let (target, token) = match (unsafe { text(r.target) }, unsafe { text(r.client_token) }) {
            (Ok(t), Ok(k)) => (t, k),
            _ => return RC_E_ARG,
        };
        // SAFETY: the caller's promise.
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        let request = PrepareRequest {
            principal: PrincipalId::from_digest(r.principal.id),
            op,
            target: target.to_string(),
            offset: r.offset,
            size: r.size,
            client_psn: r.client_psn,
            cookie: r.cookie,
            client_token: (!token.is_empty()).then(|| token.to_string()),
        };
        admitted(s, true, |out| {
            let reply = match s.with(out, |m| m.prepare(&request)) {
                Ok(reply) => reply,
                Err(e) => {
                    out.logs.push((2, format!("PREPARE refused: {e}"), line!()));
                    return code(&e);
                }
            };
            let mut fresh = rc_prepare_resp {
                session_id: [0; 33],
                session_len: 0,
                server_qpn: reply.server_qpn,
                server_psn: reply.server_psn,
                staging_addr: reply.staging_addr,
                staging_rkey: reply.staging_rkey,
                reply_token: [0; 88],
                reply_len: 0,
            };
            let token = reply.reply_header();
            let token = token.strip_prefix("200:").unwrap_or(&token);
            fresh.session_len = put(&mut fresh.session_id, &reply.session.to_string(), 32).unwrap_or(0);
            fresh.reply_len = put(&mut fresh.reply_token, token, 88).unwrap_or(0);
            *resp = fresh;
            out.logs.push((2, format!("PREPARE {} {op:?} {} bytes", reply.session, request.size), line!()));
            RC_OK
        })
    })
}

/// Commits (non-zero) or abandons (zero, the session is reaped) a PREPARE.
///
/// # Safety
/// `srv` is NULL or a live server; `session_id` is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_finish_prepare(
    srv: *mut rc_server,
    session_id: rc_str_in,
    prepare_committed: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise.
        let id = match unsafe { session(session_id) } {
            Ok(id) => id,
            Err(e) => return e,
        };
        admitted(s, false, |out| match s.with(out, |m| m.finish_prepare(&id, prepare_committed != 0)) {
            Ok(()) => RC_OK,
            Err(e) => code(&e),
        })
    })
}

/// Lends a GET's staging buffer (once per session until returned).
///
/// # Safety
/// `srv` is NULL or a live server; `lease` is NULL or writable;
/// `session_id` is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_borrow_staging(
    srv: *mut rc_server,
    session_id: rc_str_in,
    lease: *mut rc_staging_lease,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, Some(lease)) = (unsafe { server(srv) }, unsafe { lease.as_mut() }) else { return RC_E_ARG };
        let s = match s {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise.
        let id = match unsafe { session(session_id) } {
            Ok(id) => id,
            Err(e) => return e,
        };
        admitted(s, false, |out| {
            let lent = s.with(out, |m| m.borrow_staging(&id).map(|l| (l, m.staging_region(&id))));
            match lent {
                Ok((l, Some(region))) => {
                    *lease = rc_staging_lease {
                        buf: region.addr as *mut u8,
                        capacity: l.capacity as usize,
                        handle: rc_handle { session_epoch: l.handle.epoch, nonce: l.handle.nonce },
                    };
                    RC_OK
                }
                Ok((_, None)) => RC_E_INTERNAL,
                Err(e) => code(&e),
            }
        })
    })
}

/// Returns a staging lease (matched by its handle alone).
///
/// # Safety
/// `srv` is NULL or a live server; the strings are readable for their
/// lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_finish_staging(
    srv: *mut rc_server,
    lease: rc_staging_lease,
    ok: c_int,
    written: usize,
    etag: rc_str_in,
    version_id: rc_str_in,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise (both strings).
        let (etag, version) = match (unsafe { text(etag) }, unsafe { text(version_id) }) {
            (Ok(e), Ok(v)) => (e, v),
            _ => return RC_E_ARG,
        };
        let l = StagingLease {
            handle: Handle { epoch: lease.handle.session_epoch, nonce: lease.handle.nonce },
            capacity: lease.capacity as u64,
        };
        admitted(s, false, |out| match s.with(out, |m| m.finish_staging(l, ok != 0, written as u64, etag, version)) {
            Ok(()) => RC_OK,
            Err(e) => code(&e),
        })
    })
}

/// A session's target and op, for its owner.
///
/// # Safety
/// `srv` is NULL or a live server; `out` is NULL or writable;
/// `session_id` is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_session_info(
    srv: *mut rc_server,
    session_id: rc_str_in,
    who: rc_principal_id,
    out: *mut rc_session_info_resp,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, Some(resp)) = (unsafe { server(srv) }, unsafe { out.as_mut() }) else { return RC_E_ARG };
        let s = match s {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise.
        let id = match unsafe { session(session_id) } {
            Ok(id) => id,
            Err(e) => return e,
        };
        admitted(s, false, |o| match s.with(o, |m| m.session_info(&id, &PrincipalId::from_digest(who.id))) {
            Ok(info) => {
                resp.target_len = match put(&mut resp.target, &info.target, 2047) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                resp.op = u8::from(info.op == Op::Put);
                RC_OK
            }
            Err(e) => code(&e),
        })
    })
}

/// READY: connects the session's QP to the client's and moves the data,
/// blocking until it moved, the deadline passed, or the wire failed
/// (`RC_E_WIRE`: `resp` is left alone; the outcome reaches the terminal
/// notification). Takes a READY slot for its duration.
///
/// # Safety
/// `srv` is NULL or a live server; `req` and `resp` are NULL or valid, and
/// the string `req` holds is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_ready_transfer(
    srv: *mut rc_server,
    req: *const rc_ready_req,
    resp: *mut rc_ready_resp,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (Some(r), Some(resp)) = (unsafe { req.as_ref() }, unsafe { resp.as_mut() }) else { return RC_E_ARG };
        // SAFETY: the caller's promise.
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise.
        let id = match unsafe { session(r.session_id) } {
            Ok(id) => id,
            Err(e) => return e,
        };
        let request = ReadyRequest {
            principal: PrincipalId::from_digest(r.principal.id),
            session: id,
            cookie: r.cookie,
            client_qpn: r.client_qpn,
            client_mr_addr: r.client_mr_addr,
            client_mr_rkey: r.client_mr_rkey,
        };
        if s.destroying.load(Ordering::Acquire) {
            return RC_E_INTERNAL;
        }
        let Some(adm) = s.svc.try_enter() else { return RC_E_INTERNAL };
        let result = adm.ready(&request);
        let mut out = Outbox::default();
        adm.with(|m| out.ended.extend(m.take_ended()));
        drop(adm);
        let rc = match result {
            Ok(reply) => {
                let mut fresh = rc_ready_resp {
                    bytes_transferred: reply.bytes_transferred,
                    cookie_echo: reply.cookie_echo,
                    outcome: c_int::from(reply.outcome.code()),
                    etag: [0; 128],
                    etag_len: 0,
                    version_id: [0; 128],
                    version_len: 0,
                };
                match (put(&mut fresh.etag, &reply.etag, 127), put(&mut fresh.version_id, &reply.version_id, 127)) {
                    (Ok(e), Ok(v)) => {
                        fresh.etag_len = e;
                        fresh.version_len = v;
                        *resp = fresh;
                        if reply.outcome == ReadyOutcome::Busy {
                            out.logs.push((2, format!("READY {id}: BUSY"), line!()));
                        }
                        RC_OK
                    }
                    _ => RC_E_TRUNC,
                }
            }
            Err(e) => {
                if matches!(e, RcError::Wire { .. }) {
                    out.logs.push((0, format!("READY {id}: {e}"), line!()));
                }
                code(&e)
            }
        };
        s.deliver(out);
        rc
    })
}

/// Lends a PUT's received data (Completing PUT sessions, once).
///
/// # Safety
/// `srv` is NULL or a live server; `view` is NULL or writable;
/// `session_id` is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_get_put_data(srv: *mut rc_server, session_id: rc_str_in, view: *mut rc_put_view) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, Some(view)) = (unsafe { server(srv) }, unsafe { view.as_mut() }) else { return RC_E_ARG };
        let s = match s {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise.
        let id = match unsafe { session(session_id) } {
            Ok(id) => id,
            Err(e) => return e,
        };
        admitted(s, false, |out| {
            let lent = s.with(out, |m| m.get_put_data(&id).map(|v| (v, m.staging_region(&id))));
            match lent {
                Ok((v, Some(region))) => {
                    *view = rc_put_view {
                        handle: rc_handle { session_epoch: v.handle.epoch, nonce: v.handle.nonce },
                        buf: region.addr as *const u8,
                        len: v.len as usize,
                    };
                    RC_OK
                }
                Ok((_, None)) => RC_E_INTERNAL,
                Err(e) => code(&e),
            }
        })
    })
}

/// Returns a PUT view; the session is reaped either way.
///
/// # Safety
/// `srv` is NULL or a live server; the strings are readable for their
/// lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_finish_put(
    srv: *mut rc_server,
    view: rc_put_view,
    committed: c_int,
    etag: rc_str_in,
    version_id: rc_str_in,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise (both strings).
        let (etag, version) = match (unsafe { text(etag) }, unsafe { text(version_id) }) {
            (Ok(e), Ok(v)) => (e, v),
            _ => return RC_E_ARG,
        };
        let v = PutView {
            handle: Handle { epoch: view.handle.session_epoch, nonce: view.handle.nonce },
            len: view.len as u64,
        };
        admitted(s, false, |out| match s.with(out, |m| m.finish_put(v, committed != 0, etag, version)) {
            Ok(()) => RC_OK,
            Err(e) => code(&e),
        })
    })
}

/// The final response was committed: the session is reaped.
///
/// # Safety
/// `srv` is NULL or a live server; `session_id` is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_finish_final(srv: *mut rc_server, session_id: rc_str_in) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise.
        let id = match unsafe { session(session_id) } {
            Ok(id) => id,
            Err(e) => return e,
        };
        admitted(s, false, |out| match s.with(out, |m| m.finish_final(&id)) {
            Ok(()) => RC_OK,
            Err(e) => code(&e),
        })
    })
}

/// CANCEL by the session's owner: reaped once its handles drain.
///
/// # Safety
/// `srv` is NULL or a live server; `session_id` is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_cancel(srv: *mut rc_server, session_id: rc_str_in, who: rc_principal_id) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = match unsafe { server(srv) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the caller's promise.
        let id = match unsafe { session(session_id) } {
            Ok(id) => id,
            Err(e) => return e,
        };
        admitted(s, false, |out| match s.with(out, |m| m.cancel(&id, &PrincipalId::from_digest(who.id))) {
            Ok(rctb_rcsession::Cancelled::Marked) => RC_OK,
            Ok(_) => RC_E_NO_SESSION,
            Err(e) => code(&e),
        })
    })
}

fn slot(
    srv: *mut rc_server,
    f: impl FnOnce(&mut SessionManager<DlTransport, ChaCha20Rng>) -> Result<(), RcError>,
) -> c_int {
    // SAFETY: the entry point's caller promised a NULL or live server.
    let s = match unsafe { server(srv) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    let mut out = Outbox::default();
    let rc = match s.with(&mut out, f) {
        Ok(()) => RC_OK,
        Err(e) => code(&e),
    };
    s.deliver(out);
    rc
}

/// Takes a READY slot (`RC_E_LIMIT` when none is free).
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_try_acquire_ready(srv: *mut rc_server) -> c_int {
    guard(|| slot(srv, |m| m.try_acquire_ready()))
}

/// Returns a READY slot.
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_release_ready(srv: *mut rc_server) {
    guard(|| {
        slot(srv, |m| {
            m.release_ready();
            Ok(())
        })
    });
}

/// Takes a staging slot (`RC_E_LIMIT` when none is free).
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_try_acquire_stage(srv: *mut rc_server) -> c_int {
    guard(|| slot(srv, |m| m.try_acquire_stage()))
}

/// Returns a staging slot.
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_release_stage(srv: *mut rc_server) {
    guard(|| {
        slot(srv, |m| {
            m.release_stage();
            Ok(())
        })
    });
}

/// Marks every session for reaping (shutdown's first step).
///
/// # Safety
/// `srv` is NULL or a live server.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rc_cancel_all(srv: *mut rc_server) {
    guard(|| {
        slot(srv, |m| {
            m.cancel_all();
            Ok(())
        })
    });
}
