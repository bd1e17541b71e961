//! RDMA CM on a device's engine, for rctb's librdmacm.so.1: the table of
//! `capi/ibverbs/src/cmport.rs` (`rctb_cm_port@@RCTB_PRIVATE_1`), and the delivery of the
//! engine's CM events to the sink librdmacm attached.
//!
//! The engine's CM does the protocol (MADs on QP1, timers, QP
//! transitions); this module only names things for the other library:
//! `ibv_context` and `ibv_qp` pointers become the engine's handles, each
//! connection and listener carries librdmacm's cookie, and a
//! `QpTransition` becomes a `struct ibv_qp_attr` and its mask.

use std::ffi::{c_int, c_void};

use crate::cmport::{CmEventRecord, CmPort, ConnParams, Sink, driver, kind};
use rctb_core::transport::{
    AcceptParams, CmEvent, ConnId, ConnectParams, CqId, ListenId, PdId, QpCaps, QpId, QpInit, QpState,
    UnreachableReason,
};
use rctb_engine::QpDriver;

use crate::device::Owner;
use crate::objects::{Context, Qp};
use crate::sys;
use crate::verbs::{errno_of, obj};

/// Where a device's CM events go, and the cookies of its connections and
/// listeners (kept beside the engine, under its lock).
#[derive(Default)]
pub(crate) struct CmLinks {
    sink: Option<(Sink, usize)>,
    conns: std::collections::BTreeMap<ConnId, u64>,
    listeners: std::collections::BTreeMap<ListenId, u64>,
}

impl CmLinks {
    /// Hands one engine event to the sink (dropped when none is attached).
    pub(crate) fn deliver(&mut self, ev: CmEvent) {
        let Some((sink, user)) = self.sink else { return };
        let mut r = CmEventRecord { conn: ev.conn().0, ..Default::default() };
        match &ev {
            CmEvent::ConnectRequest {
                listener, remote, private_data, responder_resources, initiator_depth, ..
            } => {
                let Some(&cookie) = self.listeners.get(listener) else { return };
                r.kind = kind::CONNECT_REQUEST;
                r.cookie = cookie;
                r.remote_ip = u32::from(*remote.ip());
                r.remote_port = remote.port();
                r.responder_resources = *responder_resources;
                r.initiator_depth = *initiator_depth;
                r.set_private_data(private_data);
            }
            CmEvent::ConnectResponse { private_data, .. } => {
                r.kind = kind::CONNECT_RESPONSE;
                r.set_private_data(private_data);
            }
            CmEvent::Established { private_data, .. } => {
                r.kind = kind::ESTABLISHED;
                r.set_private_data(private_data);
            }
            CmEvent::Rejected { private_data, .. } => {
                r.kind = kind::REJECTED;
                r.status = crate::cmport::REJ_CONSUMER_DEFINED;
                r.set_private_data(private_data);
            }
            CmEvent::Unreachable { reason: UnreachableReason::NoListener, .. } => {
                // What rdma_cm reports for a REJ "invalid service ID".
                r.kind = kind::REJECTED;
                r.status = crate::cmport::REJ_INVALID_SERVICE_ID;
            }
            CmEvent::Unreachable { reason, .. } => {
                r.kind = kind::UNREACHABLE;
                r.status = match reason {
                    UnreachableReason::Timeout => -libc::ETIMEDOUT,
                    _ => -libc::EHOSTUNREACH,
                };
            }
            CmEvent::Disconnected { .. } => r.kind = kind::DISCONNECTED,
            #[allow(unreachable_patterns)]
            _ => return,
        }
        if r.kind != kind::CONNECT_REQUEST {
            let Some(&cookie) = self.conns.get(&ev.conn()) else { return };
            r.cookie = cookie;
        }
        // SAFETY: the sink and its user pointer are what librdmacm attached;
        // the record lives for the call.
        let back = unsafe { sink(user as *mut c_void, &r) };
        if r.kind == kind::CONNECT_REQUEST {
            self.conns.insert(ev.conn(), back);
        }
    }
}

/// Runs `f` on the engine and the links of `ctx`'s device, under the
/// engine's lock, then a turn (what `f` queued goes out, the events it
/// raised reach the sink).
///
/// # Safety
/// `ctx` must be a live context of this library.
unsafe fn with_engine(
    ctx: *mut c_void,
    f: impl FnOnce(&mut rctb_engine::Endpoint, rctb_core::time::Instant, &mut Owner) -> c_int,
) -> c_int {
    if ctx.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's promise.
    let ctx = unsafe { Context::from_ibv(ctx.cast()) };
    let mut guard = ctx.rt.progress.lock();
    let st = &mut *guard;
    let (engine, now) = st.driver.engine_mut(0);
    let r = f(engine, now, &mut st.owner);
    let _ = st.turn();
    // A REQ, REP or DREQ just sent is sent again on a timer the thread
    // must keep, whatever the program does next.
    let next = st.driver.next_wake();
    drop(guard);
    ctx.rt.progress.wake_for(next);
    r
}

/// The engine's QP behind an `ibv_qp` of this library, or the QP numbered
/// `qp_num` when `qp` is NULL.
///
/// # Safety
/// A non-NULL `qp` must be a live QP of this library.
unsafe fn qp_of(owner: &Owner, qp: *mut c_void, qp_num: u32) -> Option<QpId> {
    if qp.is_null() {
        return owner.qps.iter().find(|(_, (n, ..))| *n == qp_num).map(|(id, _)| *id);
    }
    // SAFETY: the caller's promise.
    let q = unsafe { obj::<Qp, c_void>(qp) };
    owner.qps.contains_key(&q.id).then_some(q.id)
}

/// A `QpInit` for the parameters of a connect or accept on a QP that
/// exists (the engine ignores it there).
fn placeholder_qp_init() -> QpInit {
    let caps = QpCaps { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    QpInit { pd: PdId(0), send_cq: CqId(0), recv_cq: CqId(0), caps, sq_sig_all: false, srq: None }
}

fn qp_driver(code: u32) -> Option<QpDriver> {
    match code {
        driver::CM => Some(QpDriver::Cm),
        driver::APPLICATION => Some(QpDriver::Application),
        _ => None,
    }
}

/// The private data of `p`.
///
/// # Safety
/// `p.private_data` is NULL or readable for `p.private_data_len` bytes.
unsafe fn private_data(p: &ConnParams) -> Vec<u8> {
    if p.private_data.is_null() || p.private_data_len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(p.private_data, usize::from(p.private_data_len)) }.to_vec()
}

/// The driver, parameters and private data of a connect or an accept;
/// `None` for an unknown driver or no parameters.
///
/// # Safety
/// `params` is NULL or the caller's parameters, valid for the call, their
/// private data readable for its length.
unsafe fn conn_args<'a>(drv: u32, params: *const ConnParams) -> Option<(QpDriver, &'a ConnParams, Vec<u8>)> {
    let drv = qp_driver(drv)?;
    // SAFETY: the caller's promise.
    let p = unsafe { params.as_ref() }?;
    // SAFETY: as above.
    Some((drv, p, unsafe { private_data(p) }))
}

unsafe extern "C" fn attach(ctx: *mut c_void, sink: Option<Sink>, user: *mut c_void) -> c_int {
    crate::abi::guard("rctb_cm_port.attach", libc::EIO, || {
        // SAFETY: librdmacm passes a context it opened with this library.
        unsafe {
            with_engine(ctx, |_, _, owner| {
                owner.cm.sink = sink.map(|s| (s, user as usize));
                0
            })
        }
    })
}

unsafe extern "C" fn listen(ctx: *mut c_void, port: u16, cookie: u64, out: *mut u32) -> c_int {
    crate::abi::guard("rctb_cm_port.listen", libc::EIO, || {
        if out.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: as in attach.
        unsafe {
            with_engine(ctx, |engine, _, owner| match engine.cm_listen(port) {
                Ok(l) => {
                    owner.cm.listeners.insert(l, cookie);
                    // SAFETY: `out` is the caller's u64.
                    *out = l.0;
                    0
                }
                Err(rctb_core::transport::TransportError::Busy { .. }) => libc::EADDRINUSE,
                Err(e) => errno_of(&e),
            })
        }
    })
}

unsafe extern "C" fn close_listener(ctx: *mut c_void, listener: u32) -> c_int {
    crate::abi::guard("rctb_cm_port.close_listener", libc::EIO, || {
        // SAFETY: as in attach.
        unsafe {
            with_engine(ctx, |engine, _, owner| {
                owner.cm.listeners.remove(&ListenId(listener));
                engine.cm_close_listener(ListenId(listener)).map_or_else(|e| errno_of(&e), |()| 0)
            })
        }
    })
}

unsafe extern "C" fn connect(
    ctx: *mut c_void,
    qp: *mut c_void,
    qp_num: u32,
    drv: u32,
    params: *const ConnParams,
    cookie: u64,
    out: *mut u32,
) -> c_int {
    crate::abi::guard("rctb_cm_port.connect", libc::EIO, || {
        if out.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's parameters, read for the call.
        let Some((drv, p, data)) = (unsafe { conn_args(drv, params) }) else { return libc::EINVAL };
        // SAFETY: as in attach; `qp` is NULL or a QP of this library.
        unsafe {
            with_engine(ctx, |engine, now, owner| {
                let Some(qp) = qp_of(owner, qp, qp_num) else { return libc::EINVAL };
                let remote = std::net::SocketAddrV4::new(p.dst_ip.into(), p.dst_port);
                // The QP exists: the parameters' QP description is unused.
                let mut cp = ConnectParams::new(remote, placeholder_qp_init(), data);
                cp.responder_resources = p.responder_resources;
                cp.initiator_depth = p.initiator_depth;
                cp.retry_count = p.retry_count;
                cp.rnr_retry_count = p.rnr_retry_count;
                cp.src_port = (p.src_port != 0).then_some(p.src_port);
                match engine.cm_connect_qp(now, qp, drv, &cp) {
                    Ok(conn) => {
                        owner.cm.conns.insert(conn, cookie);
                        // SAFETY: `out` is the caller's u64.
                        *out = conn.0;
                        0
                    }
                    Err(e) => errno_of(&e),
                }
            })
        }
    })
}

unsafe extern "C" fn accept(
    ctx: *mut c_void,
    conn: u32,
    qp: *mut c_void,
    qp_num: u32,
    drv: u32,
    params: *const ConnParams,
) -> c_int {
    crate::abi::guard("rctb_cm_port.accept", libc::EIO, || {
        // SAFETY: the caller's parameters, read for the call.
        let Some((drv, p, data)) = (unsafe { conn_args(drv, params) }) else { return libc::EINVAL };
        // SAFETY: as in connect.
        unsafe {
            with_engine(ctx, |engine, now, owner| {
                let Some(qp) = qp_of(owner, qp, qp_num) else { return libc::EINVAL };
                let mut ap = AcceptParams::new(placeholder_qp_init(), data);
                ap.responder_resources = p.responder_resources;
                ap.initiator_depth = p.initiator_depth;
                ap.rnr_retry_count = p.rnr_retry_count;
                engine.cm_accept_qp(now, ConnId(conn), qp, drv, &ap).map_or_else(|e| errno_of(&e), |()| 0)
            })
        }
    })
}

unsafe extern "C" fn reject(ctx: *mut c_void, conn: u32, data: *const u8, len: u8) -> c_int {
    crate::abi::guard("rctb_cm_port.reject", libc::EIO, || {
        let data = if data.is_null() || len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's `len` bytes at `data`.
            unsafe { std::slice::from_raw_parts(data, usize::from(len)) }.to_vec()
        };
        // SAFETY: as in attach.
        unsafe {
            with_engine(ctx, |engine, _, _| engine.cm_reject(ConnId(conn), &data).map_or_else(|e| errno_of(&e), |()| 0))
        }
    })
}

unsafe extern "C" fn disconnect(ctx: *mut c_void, conn: u32) -> c_int {
    crate::abi::guard("rctb_cm_port.disconnect", libc::EIO, || {
        // SAFETY: as in attach.
        unsafe {
            with_engine(ctx, |engine, now, _| {
                engine.cm_disconnect(now, ConnId(conn)).map_or_else(|e| errno_of(&e), |()| 0)
            })
        }
    })
}

unsafe extern "C" fn establish(ctx: *mut c_void, conn: u32) -> c_int {
    crate::abi::guard("rctb_cm_port.establish", libc::EIO, || {
        // SAFETY: as in attach.
        unsafe {
            with_engine(ctx, |engine, now, _| {
                engine.cm_establish(now, ConnId(conn)).map_or_else(|e| errno_of(&e), |()| 0)
            })
        }
    })
}

unsafe extern "C" fn destroy(ctx: *mut c_void, conn: u32) -> c_int {
    crate::abi::guard("rctb_cm_port.destroy", libc::EIO, || {
        // SAFETY: as in attach.
        unsafe {
            with_engine(ctx, |engine, _, owner| {
                owner.cm.conns.remove(&ConnId(conn));
                engine.cm_destroy(ConnId(conn)).map_or_else(|e| errno_of(&e), |()| 0)
            })
        }
    })
}

unsafe extern "C" fn qp_attr(ctx: *mut c_void, conn: u32, state: c_int, attr: *mut c_void, mask: *mut c_int) -> c_int {
    crate::abi::guard("rctb_cm_port.qp_attr", libc::EIO, || {
        if attr.is_null() || mask.is_null() {
            return libc::EINVAL;
        }
        let target = match state as sys::ibv_qp_state {
            sys::IBV_QPS_INIT => QpState::Init,
            sys::IBV_QPS_RTR => QpState::Rtr,
            sys::IBV_QPS_RTS => QpState::Rts,
            _ => return libc::EINVAL,
        };
        // SAFETY: as in attach.
        unsafe {
            with_engine(ctx, |engine, _, _| match engine.cm_qp_attr(ConnId(conn), target) {
                Ok(t) => {
                    let (a, m) = crate::verbs::attr_of_transition(&t);
                    // SAFETY: the caller's `struct ibv_qp_attr` and int.
                    *attr.cast::<sys::ibv_qp_attr>() = a;
                    *mask = m as c_int;
                    0
                }
                Err(e) => errno_of(&e),
            })
        }
    })
}

static PORT: CmPort = CmPort {
    version: crate::cmport::VERSION,
    size: std::mem::size_of::<CmPort>() as u32,
    attach,
    listen,
    close_listener,
    connect,
    accept,
    reject,
    disconnect,
    establish,
    destroy,
    qp_attr,
};

export!(
    "RCTB_PRIVATE_1",
    std::ptr::null(),
    fn rctb_cm_port() -> *const CmPort {
        &PORT
    }
);
