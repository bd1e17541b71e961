//! Connections: connect, listen, accept, reject, disconnect, establish,
//! and the QP attributes of a connection the program drives.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use crate::cmport::{ConnParams, driver};

use crate::abi::set_errno;
use crate::id::Phase;
use crate::sys::*;
use crate::verbs;

use super::{MAX_RD_ATOMIC, MAX_REP_PRIVATE_DATA, MAX_REQ_PRIVATE_DATA, complete, dev_of, id_of, ok, ret};

/// The QP a connect or accept names: the id's (the CM drives it), or the
/// one numbered `conn_param->qp_num` (the program drives it).
fn qp_for(id: *mut rdma_cm_id, param: Option<&rdma_conn_param>) -> Result<(*mut c_void, u32, u32), c_int> {
    // SAFETY: the id's own field.
    let qp = unsafe { (*id).qp };
    if !qp.is_null() {
        return Ok((qp.cast(), 0, driver::CM));
    }
    param.map(|p| (null_mut(), p.qp_num, driver::APPLICATION)).ok_or(libc::EINVAL)
}

/// The private data of a connect or accept, at most `max` bytes.
fn private_of(param: Option<&rdma_conn_param>, max: u8) -> Result<(*const u8, u8), c_int> {
    match param {
        Some(p) if p.private_data_len > max => Err(libc::EINVAL),
        Some(p) if p.private_data_len > 0 && p.private_data.is_null() => Err(libc::EINVAL),
        Some(p) => Ok((p.private_data.cast(), p.private_data_len)),
        None => Ok((std::ptr::null(), 0)),
    }
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            // SAFETY: NULL or the caller's parameters.
            let param = unsafe { conn_param.as_ref() };
            let (cm, dev) = dev_of(me)?;
            let (qp, qp_num, drv) = qp_for(id, param)?;
            let (data, len) = private_of(param, MAX_REQ_PRIVATE_DATA)?;
            let (src, dst) = (me.src().ok_or(libc::EINVAL)?, me.dst().ok_or(libc::EINVAL)?);
            let p = ConnParams {
                private_data: data,
                private_data_len: len,
                responder_resources: param.map_or(MAX_RD_ATOMIC, |p| p.responder_resources.min(MAX_RD_ATOMIC)),
                initiator_depth: param.map_or(MAX_RD_ATOMIC, |p| p.initiator_depth.min(MAX_RD_ATOMIC)),
                retry_count: param.map_or(7, |p| p.retry_count.min(7)),
                rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count.min(7)),
                dst_ip: u32::from(*dst.ip()),
                dst_port: dst.port(),
                src_port: src.port(),
            };
            {
                let mut st = me.lock();
                if st.phase != Phase::RouteResolved {
                    return Err(libc::EINVAL);
                }
                st.phase = Phase::Connecting;
            }
            let mut conn = 0;
            let ctx = cm.devs[dev].ctx.cast();
            // SAFETY: an opened context, the id's QP (or none), the
            // parameters a local; the cookie is the id, live until its
            // connection leaves the engine.
            let e = unsafe { (cm.lib.port.connect)(ctx, qp, qp_num, drv, &p, id as u64, &mut conn) };
            if e != 0 {
                me.lock().phase = Phase::RouteResolved;
                return Err(e);
            }
            me.lock().conn = Some(conn);
            let want = if drv == driver::CM { RDMA_CM_EVENT_ESTABLISHED } else { RDMA_CM_EVENT_CONNECT_RESPONSE };
            complete(me, want)
        })())
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            let cm = verbs::get()?;
            let dev = {
                let st = me.lock();
                if st.phase != Phase::Bound {
                    return Err(libc::EINVAL);
                }
                st.dev
            };
            let port = me.src().ok_or(libc::EINVAL)?.port();
            let devs: Vec<usize> = dev.map_or_else(|| (0..cm.devs.len()).collect(), |d| vec![d]);
            let mut listeners: Vec<(usize, u32)> = Vec::new();
            for d in devs {
                let mut l = 0;
                // SAFETY: an opened context; the cookie is the id, live
                // until its listeners close.
                let e = unsafe { (cm.lib.port.listen)(cm.devs[d].ctx.cast(), port, id as u64, &mut l) };
                if e != 0 {
                    for (d, l) in listeners {
                        // SAFETY: a listener just opened.
                        unsafe { (cm.lib.port.close_listener)(cm.devs[d].ctx.cast(), l) };
                    }
                    return Err(e);
                }
                listeners.push((d, l));
            }
            let mut st = me.lock();
            st.listeners = listeners;
            st.phase = Phase::Listening;
            Ok(())
        })())
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            // SAFETY: NULL or the caller's parameters.
            let param = unsafe { conn_param.as_ref() };
            let (cm, dev) = dev_of(me)?;
            let (qp, qp_num, drv) = qp_for(id, param)?;
            let (data, len) = private_of(param, MAX_REP_PRIVATE_DATA)?;
            let (conn, (req_rr, req_id)) = {
                let st = me.lock();
                if st.phase != Phase::Requested {
                    return Err(libc::EINVAL);
                }
                (st.conn.ok_or(libc::EINVAL)?, st.req_depths)
            };
            // With no parameters, what the request offered, seen from here.
            let p = ConnParams {
                private_data: data,
                private_data_len: len,
                responder_resources: param.map_or(req_id, |p| p.responder_resources).min(MAX_RD_ATOMIC),
                initiator_depth: param.map_or(req_rr, |p| p.initiator_depth).min(MAX_RD_ATOMIC),
                retry_count: 7,
                rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count.min(7)),
                dst_ip: 0,
                dst_port: 0,
                src_port: 0,
            };
            me.lock().phase = Phase::Accepting;
            // SAFETY: an opened context, the request's connection, the
            // id's QP (or none), the parameters a local.
            let e = unsafe { (cm.lib.port.accept)(cm.devs[dev].ctx.cast(), conn, qp, qp_num, drv, &p) };
            if e != 0 {
                me.lock().phase = Phase::Requested;
                return Err(e);
            }
            complete(me, RDMA_CM_EVENT_ESTABLISHED)
        })())
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int {
        // SAFETY: a live id; the caller's bytes.
        ret(unsafe { reject(id, private_data, private_data_len) })
    }
);

/// `rdma_reject`.
///
/// # Safety
/// `id` NULL or live; `private_data` readable for `private_data_len` bytes.
pub(super) unsafe fn reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> Result<(), c_int> {
    // SAFETY: a live id of the program's.
    let me = unsafe { id_of(id)? };
    let (cm, dev) = dev_of(me)?;
    let conn = {
        let st = me.lock();
        if !matches!(st.phase, Phase::Requested | Phase::Connecting) {
            return Err(libc::EINVAL);
        }
        st.conn.ok_or(libc::EINVAL)?
    };
    if private_data_len > 0 && private_data.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: an opened context; the caller's bytes.
    ok(unsafe { (cm.lib.port.reject)(cm.devs[dev].ctx.cast(), conn, private_data.cast(), private_data_len) })?;
    me.lock().phase = Phase::Failed;
    Ok(())
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            let (cm, dev) = dev_of(me)?;
            let conn = me.lock().conn.ok_or(libc::EINVAL)?;
            // SAFETY: an opened context and the id's connection.
            ok(unsafe { (cm.lib.port.disconnect)(cm.devs[dev].ctx.cast(), conn) })
        })())
    }
);

export!(
    "RDMACM_1.2",
    -1,
    fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            let (cm, dev) = dev_of(me)?;
            let conn = me.lock().conn.ok_or(libc::EINVAL)?;
            // SAFETY: an opened context and the id's connection.
            ok(unsafe { (cm.lib.port.establish)(cm.devs[dev].ctx.cast(), conn) })?;
            me.lock().phase = Phase::Connected;
            Ok(())
        })())
    }
);

export!(
    "RDMACM_1.2",
    -1,
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            if qp_attr.is_null() || qp_attr_mask.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's attributes.
            let state = unsafe { (*qp_attr).qp_state };
            let conn = me.lock().conn;
            match conn {
                Some(conn) => {
                    let (cm, dev) = dev_of(me)?;
                    let ctx = cm.devs[dev].ctx.cast();
                    // SAFETY: an opened context; the caller's out structs.
                    ok(unsafe { (cm.lib.port.qp_attr)(ctx, conn, state as c_int, qp_attr.cast(), qp_attr_mask) })
                }
                // Before a connection, INIT is all there is to know.
                None if state == IBV_QPS_INIT => {
                    // SAFETY: the caller's out structs.
                    unsafe {
                        *qp_attr = ibv_qp_attr {
                            qp_state: IBV_QPS_INIT,
                            pkey_index: 0,
                            port_num: 1,
                            qp_access_flags: verbs::IBV_ACCESS_LOCAL_WRITE
                                | verbs::IBV_ACCESS_REMOTE_WRITE
                                | verbs::IBV_ACCESS_REMOTE_READ
                                | verbs::IBV_ACCESS_REMOTE_ATOMIC,
                            ..Default::default()
                        };
                        *qp_attr_mask = verbs::IBV_QP_STATE
                            | verbs::IBV_QP_PKEY_INDEX
                            | verbs::IBV_QP_PORT
                            | verbs::IBV_QP_ACCESS_FLAGS;
                    }
                    Ok(())
                }
                None => Err(libc::EINVAL),
            }
        })())
    }
);

export!(
    "RDMACM_1.0",
    0,
    fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
        // What the call reports (a first packet on a QP still in RTR) the
        // engine's CM sees itself.
        if id.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        0
    }
);
