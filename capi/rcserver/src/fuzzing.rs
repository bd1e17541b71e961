//! The fuzz target's check (`fuzz/fuzz_targets/rcserver_abi.rs`): arbitrary
//! calls of the C entry points with arbitrary argument structs: NULL
//! pointers, strings of any bytes (and NULL with a length), any op, size,
//! offset and token, handles real, stale and forged, sessions of any id.
//! Nothing may panic or be refused with `RC_E_INTERNAL`, and after the
//! input's leases and views are returned and every session cancelled,
//! nothing is live and every session made has ended exactly once.
//!
//! The server runs on a device of the libibverbs the process loaded:
//! rctb's libibverbs.so.1 on `LD_LIBRARY_PATH`, with `RCTB_IBV_ADDR` set
//! (fuzz/smoke.sh and the corpus replay do this). One server serves every
//! input of a run, as a long-lived gateway's does.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, OnceLock};

use crate::abi::*;
use crate::calls::*;
use crate::server::*;

struct Fuzzed(usize);

/// Session id -> how often it ended.
static ENDED: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

extern "C" fn on_terminal(_ctx: *mut c_void, id: *const c_char, _outcome: i32, _bytes: u64) {
    // SAFETY: the server passes a NUL-terminated id that lives for the call.
    let id = unsafe { std::ffi::CStr::from_ptr(id) }.to_string_lossy().into_owned();
    *ENDED.lock().unwrap_or_else(|p| p.into_inner()).entry(id).or_default() += 1;
}

fn the_server() -> Result<usize, String> {
    static SERVER: OnceLock<Result<Fuzzed, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let opts = rc_device_opts {
                gid_hint: std::ptr::null(),
                port: 1,
                gid_index: -1,
                max_sessions: 8,
                max_user_sessions: 4,
                max_staging_bytes: 1 << 16,
                max_user_staging_bytes: 1 << 15,
                max_qps: 8,
                max_user_qps: 0,
                t_prep_ms: 0,
                t_exec_ms: 5,
                max_ready_slots: 2,
                max_stage_slots: 2,
            };
            let mut srv = std::ptr::null_mut();
            // SAFETY: valid options and out-pointer.
            let rc = unsafe { rc_server_init(&opts, &mut srv) };
            if rc != RC_OK {
                return Err(format!(
                    "rc_server_init = {rc}: run with rctb's libibverbs.so.1 on LD_LIBRARY_PATH and RCTB_IBV_ADDR set"
                ));
            }
            // SAFETY: a live server; the hook is this module's.
            unsafe { rc_server_set_terminal_notify(srv, Some(on_terminal), std::ptr::null_mut()) };
            Ok(Fuzzed(srv as usize))
        })
        .as_ref()
        .map(|f| f.0)
        .map_err(Clone::clone)
}

/// A cursor over the input; zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// Up to `max` bytes of the input, as they are.
    fn take(&mut self, max: usize) -> &'a [u8] {
        let n = (usize::from(self.u8()) % (max + 1)).min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the input holds on to: ids of sessions it made, leases and views.
#[derive(Default)]
struct Held {
    ids: Vec<String>,
    leases: Vec<rc_staging_lease>,
    views: Vec<rc_put_view>,
}

impl Held {
    fn pick_id(&self, b: &mut Bytes<'_>) -> Option<&str> {
        (!self.ids.is_empty()).then(|| self.ids[usize::from(b.u8()) % self.ids.len()].as_str())
    }
}

/// A string argument: one of the session ids made, bytes of the input, the
/// empty string, or NULL with a length.
fn str_arg(b: &mut Bytes<'_>, held: &Held) -> rc_str_in {
    match b.u8() % 5 {
        0 | 1 => match held.pick_id(b) {
            Some(id) => rc_str_in { ptr: id.as_ptr().cast(), len: id.len() as u32 },
            None => rc_str_in { ptr: std::ptr::null(), len: 0 },
        },
        2 => {
            let bytes = b.take(40);
            rc_str_in { ptr: bytes.as_ptr().cast(), len: bytes.len() as u32 }
        }
        3 => rc_str_in { ptr: std::ptr::null(), len: 0 },
        _ => rc_str_in { ptr: std::ptr::null(), len: 1 + u32::from(b.u8()) },
    }
}

fn who(b: &mut Bytes<'_>) -> rc_principal_id {
    rc_principal_id { id: [b.u8() % 3; 32] }
}

fn handle(b: &mut Bytes<'_>, real: Option<rc_handle>) -> rc_handle {
    match (b.u8() % 3, real) {
        (0, Some(h)) => h,
        (1, Some(h)) => rc_handle { session_epoch: h.session_epoch, nonce: h.nonce.wrapping_add(u64::from(b.u8())) },
        _ => rc_handle { session_epoch: u64::from(b.u8()), nonce: u64::from(b.u8()) },
    }
}

fn no_internal(call: &str, rc: i32) -> Result<(), String> {
    if rc == RC_E_INTERNAL || !(RC_OK..=RC_E_INTERNAL).contains(&rc) {
        return Err(format!("{call} returned {rc}"));
    }
    Ok(())
}

/// Runs one input's calls; see the module docs for what is checked.
pub fn abi_calls(data: &[u8]) -> Result<(), String> {
    let srv = the_server()? as *mut rc_server;
    let mut b = Bytes(data);
    let mut held = Held::default();
    let made_before: usize = ENDED.lock().unwrap_or_else(|p| p.into_inner()).len();
    let mut made = 0usize;
    let mut steps = 0;
    while !b.done() && steps < 64 {
        steps += 1;
        // Some calls get NULL for the server (always refused with ARG).
        let s = if b.u8() % 16 == 0 { std::ptr::null_mut() } else { srv };
        match b.u8() % 12 {
            0 => {
                let target = str_arg(&mut b, &held);
                let token = str_arg(&mut b, &held);
                let req = rc_prepare_req {
                    principal: who(&mut b),
                    op: b.u8() % 3,
                    target,
                    offset: u64::from(b.u8()) << (b.u8() % 40),
                    size: u64::from(b.u32() % 5000),
                    client_psn: b.u32() >> (b.u8() % 8),
                    cookie: b.u32(),
                    client_token: token,
                };
                // SAFETY: a zeroed plain C struct.
                let mut resp: rc_prepare_resp = unsafe { std::mem::zeroed() };
                let null_resp = b.u8() % 8 == 0;
                let out = if null_resp { std::ptr::null_mut() } else { &mut resp as *mut _ };
                // SAFETY: `s` is NULL or the live server; `req`'s strings are
                // NULL or point at readable bytes of their length (a NULL
                // with a length is refused before it is read).
                let rc = unsafe { rc_prepare(s, &req, out) };
                no_internal("rc_prepare", rc)?;
                if rc == RC_OK {
                    if s.is_null() || null_resp || req.op > 1 {
                        return Err("rc_prepare accepted a NULL pointer or op > 1".into());
                    }
                    let id: String =
                        resp.session_id[..resp.session_len as usize].iter().map(|&c| c as u8 as char).collect();
                    held.ids.push(id);
                    made += 1;
                }
            }
            1 => {
                let id = str_arg(&mut b, &held);
                // SAFETY: as above.
                no_internal("rc_finish_prepare", unsafe { rc_finish_prepare(s, id, i32::from(b.u8() % 3)) })?;
            }
            2 => {
                let id = str_arg(&mut b, &held);
                // SAFETY: a zeroed plain C struct.
                let mut lease: rc_staging_lease = unsafe { std::mem::zeroed() };
                // SAFETY: as above; the lease is writable.
                let rc = unsafe { rc_borrow_staging(s, id, &mut lease) };
                no_internal("rc_borrow_staging", rc)?;
                if rc == RC_OK {
                    if lease.capacity > 0 {
                        // SAFETY: the lease lends `capacity` bytes until returned.
                        unsafe { std::slice::from_raw_parts_mut(lease.buf, lease.capacity) }.fill(b.u8());
                    }
                    held.leases.push(lease);
                }
            }
            3 => {
                let real =
                    (!held.leases.is_empty()).then(|| held.leases.remove(usize::from(b.u8()) % held.leases.len()));
                let h = handle(&mut b, real.map(|l| l.handle));
                let lease = rc_staging_lease { buf: std::ptr::null_mut(), capacity: 0, handle: h };
                let written = match (b.u8() % 3, real) {
                    (0, Some(l)) => l.capacity,
                    _ => usize::from(b.u8()),
                };
                let (etag, version) = (str_arg(&mut b, &held), str_arg(&mut b, &held));
                // SAFETY: as above.
                let rc = unsafe { rc_finish_staging(s, lease, i32::from(b.u8() % 2), written, etag, version) };
                no_internal("rc_finish_staging", rc)?;
                if let Some(l) = real.filter(|l| {
                    l.handle.nonce != h.nonce
                        || l.handle.session_epoch != h.session_epoch
                        || s.is_null()
                        || rc == RC_E_ARG
                }) {
                    held.leases.push(l); // not returned: return it at the end
                }
            }
            4 => {
                let id = str_arg(&mut b, &held);
                // SAFETY: a zeroed plain C struct.
                let mut info: rc_session_info_resp = unsafe { std::mem::zeroed() };
                // SAFETY: as above; `info` is writable.
                no_internal("rc_session_info", unsafe { rc_session_info(s, id, who(&mut b), &mut info) })?;
            }
            5 => {
                let id = str_arg(&mut b, &held);
                let req = rc_ready_req {
                    principal: who(&mut b),
                    session_id: id,
                    cookie: if b.u8() % 2 == 0 { 0 } else { b.u32() },
                    // Mostly the control-plane-only mode; sometimes a QP that
                    // does not exist (the 5 ms data phase deadline ends it).
                    client_qpn: if b.u8() % 8 == 0 { 0x00AB_CDEF } else { 0 },
                    client_mr_addr: b.u64(),
                    client_mr_rkey: b.u32(),
                };
                // SAFETY: a zeroed plain C struct.
                let mut resp: rc_ready_resp = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                no_internal("rc_ready_transfer", unsafe { rc_ready_transfer(s, &req, &mut resp) })?;
            }
            6 => {
                let id = str_arg(&mut b, &held);
                // SAFETY: a zeroed plain C struct.
                let mut view: rc_put_view = unsafe { std::mem::zeroed() };
                // SAFETY: as above; `view` is writable.
                let rc = unsafe { rc_get_put_data(s, id, &mut view) };
                no_internal("rc_get_put_data", rc)?;
                if rc == RC_OK {
                    if view.len > 0 {
                        // SAFETY: the view lends `len` bytes until returned.
                        let data = unsafe { std::slice::from_raw_parts(view.buf, view.len) };
                        std::hint::black_box(data.iter().map(|&x| u64::from(x)).sum::<u64>());
                    }
                    held.views.push(view);
                }
            }
            7 => {
                let real = (!held.views.is_empty()).then(|| held.views.remove(usize::from(b.u8()) % held.views.len()));
                let h = handle(&mut b, real.map(|v| v.handle));
                let view = rc_put_view { handle: h, buf: std::ptr::null(), len: 0 };
                let (etag, version) = (str_arg(&mut b, &held), str_arg(&mut b, &held));
                // SAFETY: as above.
                let rc = unsafe { rc_finish_put(s, view, i32::from(b.u8() % 2), etag, version) };
                no_internal("rc_finish_put", rc)?;
                if let Some(v) = real.filter(|v| {
                    v.handle.nonce != h.nonce
                        || v.handle.session_epoch != h.session_epoch
                        || s.is_null()
                        || rc == RC_E_ARG
                }) {
                    held.views.push(v);
                }
            }
            8 => {
                let id = str_arg(&mut b, &held);
                // SAFETY: as above.
                no_internal("rc_finish_final", unsafe { rc_finish_final(s, id) })?;
            }
            9 => {
                let id = str_arg(&mut b, &held);
                // SAFETY: as above.
                no_internal("rc_cancel", unsafe { rc_cancel(s, id, who(&mut b)) })?;
            }
            10 => {
                // SAFETY: as above.
                let rc = unsafe { if b.u8() % 2 == 0 { rc_try_acquire_ready(s) } else { rc_try_acquire_stage(s) } };
                no_internal("rc_try_acquire", rc)?;
                if rc == RC_OK {
                    // SAFETY: as above; returns the slot just taken.
                    unsafe { if b.u8() % 2 == 0 { rc_release_ready(s) } else { rc_release_stage(s) } };
                }
            }
            _ => {
                // op > 1 is refused before the server pointer is looked at.
                let req = rc_prepare_req {
                    principal: who(&mut b),
                    op: 2 + b.u8() % 254,
                    target: rc_str_in { ptr: std::ptr::null(), len: 0 },
                    offset: 0,
                    size: 1,
                    client_psn: 1,
                    cookie: 1,
                    client_token: rc_str_in { ptr: std::ptr::null(), len: 0 },
                };
                // SAFETY: a zeroed plain C struct.
                let mut resp: rc_prepare_resp = unsafe { std::mem::zeroed() };
                // SAFETY: the bogus server pointer is never read: op > 1 is checked first.
                let rc = unsafe { rc_prepare(0x10 as *mut rc_server, &req, &mut resp) };
                if rc != RC_E_ARG {
                    return Err(format!("rc_prepare with op {} and a bogus server = {rc}", req.op));
                }
            }
        }
    }
    // Return what is still out, cancel everything: nothing may stay.
    for l in held.leases.drain(..) {
        // SAFETY: the live server; a lease it lent.
        let rc = unsafe {
            rc_finish_staging(
                srv,
                l,
                0,
                0,
                rc_str_in { ptr: std::ptr::null(), len: 0 },
                rc_str_in { ptr: std::ptr::null(), len: 0 },
            )
        };
        if rc != RC_OK && rc != RC_E_STALE {
            return Err(format!("returning a lease at the end: {rc}"));
        }
    }
    for v in held.views.drain(..) {
        // SAFETY: the live server; a view it lent.
        let rc = unsafe {
            rc_finish_put(
                srv,
                v,
                0,
                rc_str_in { ptr: std::ptr::null(), len: 0 },
                rc_str_in { ptr: std::ptr::null(), len: 0 },
            )
        };
        if rc != RC_OK && rc != RC_E_STALE {
            return Err(format!("returning a view at the end: {rc}"));
        }
    }
    // A data phase that ran leaves a completion reference until the final
    // commit; then cancel everything.
    for id in &held.ids {
        // SAFETY: the live server; an id of this input.
        let rc = unsafe { rc_finish_final(srv, rc_str_in { ptr: id.as_ptr().cast(), len: id.len() as u32 }) };
        no_internal("rc_finish_final at the end", rc)?;
    }
    // SAFETY: the live server.
    unsafe { rc_cancel_all(srv) };
    let mut live = 0usize;
    extern "C" fn count(_rec: *const rc_session_snapshot, ctx: *mut c_void) {
        // SAFETY: `ctx` is the `live` counter below, alive for the call.
        unsafe { *(ctx as *mut usize) += 1 };
    }
    // SAFETY: the live server; `live` outlives the call.
    let rc = unsafe { rc_server_sessions_snapshot(srv, Some(count), (&mut live as *mut usize).cast()) };
    if rc != RC_OK || live != 0 {
        return Err(format!("after cancel_all: snapshot = {rc}, {live} sessions live"));
    }
    let ended = ENDED.lock().unwrap_or_else(|p| p.into_inner());
    if ended.len() != made_before + made {
        return Err(format!("{made} sessions made, {} ended", ended.len() - made_before));
    }
    if let Some((id, n)) = ended.iter().find(|(_, n)| **n != 1) {
        return Err(format!("session {id} ended {n} times"));
    }
    Ok(())
}
