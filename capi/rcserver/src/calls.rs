//! The session calls of the ABI: PREPARE and its commit, the staging
//! lease, session info, READY, the PUT view, the final commit, CANCEL, and
//! the READY and staging slots. Each runs inside [`guard`], checks its
//! arguments before it looks at the server, and runs as an admitted call
//! whose hooks fire after the server's lock is let go.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use rand_chacha::ChaCha20Rng;
use rctb_rcsession::{
    Handle, Op, PrepareRequest, PrincipalId, PutView, RcError, ReadyOutcome, ReadyRequest, SessionManager, StagingLease,
};

use crate::abi::*;
use crate::server::{Outbox, admitted, code, guard, put, server, session, text};
use crate::transport::DlTransport;

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
        let s = or_return!(unsafe { server(srv) });
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
        let s = or_return!(unsafe { server(srv) });
        // SAFETY: the caller's promise.
        let id = or_return!(unsafe { session(session_id) });
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
        let s = or_return!(s);
        // SAFETY: the caller's promise.
        let id = or_return!(unsafe { session(session_id) });
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
        let s = or_return!(unsafe { server(srv) });
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
        let s = or_return!(s);
        // SAFETY: the caller's promise.
        let id = or_return!(unsafe { session(session_id) });
        admitted(s, false, |o| match s.with(o, |m| m.session_info(&id, &PrincipalId::from_digest(who.id))) {
            Ok(info) => {
                resp.target_len = or_return!(put(&mut resp.target, &info.target, 2047));
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
        let s = or_return!(unsafe { server(srv) });
        // SAFETY: the caller's promise.
        let id = or_return!(unsafe { session(r.session_id) });
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
        // Left last: until then destroy waits, and the server stays.
        drop(adm);
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
        let s = or_return!(s);
        // SAFETY: the caller's promise.
        let id = or_return!(unsafe { session(session_id) });
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
        let s = or_return!(unsafe { server(srv) });
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
        let s = or_return!(unsafe { server(srv) });
        // SAFETY: the caller's promise.
        let id = or_return!(unsafe { session(session_id) });
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
        let s = or_return!(unsafe { server(srv) });
        // SAFETY: the caller's promise.
        let id = or_return!(unsafe { session(session_id) });
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
    let s = or_return!(unsafe { server(srv) });
    admitted(s, false, |out| match s.with(out, f) {
        Ok(()) => RC_OK,
        Err(e) => code(&e),
    })
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
