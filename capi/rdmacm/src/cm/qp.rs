//! QPs and SRQs on an id, and the CQs `rdma_create_qp` makes for them.

use std::ffi::c_int;
use std::ptr::null_mut;

use crate::sys::*;
use crate::verbs;

use super::{dev_of, id_of, ret};

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int {
        // SAFETY: a live id; the caller's PD and attributes.
        ret(unsafe { create_qp(id, pd, qp_init_attr) })
    }
);

/// `rdma_create_qp`: the QP on the id's device (its PD, or the device's
/// own), CQs with completion channels when the attributes name none, and
/// the QP brought to INIT, as rdma-core's librdmacm does, so that the
/// program may post receives before it connects.
///
/// # Safety
/// `id` NULL or live; `pd` NULL or a PD of the id's device; `attr` NULL or
/// the caller's attributes.
pub(super) unsafe fn create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> Result<(), c_int> {
    // SAFETY: the caller's promise.
    let me = unsafe { id_of(id)? };
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    let (cm, dev) = dev_of(me)?;
    let lib = &cm.lib;
    let ctx = cm.devs[dev].ctx;
    let pd = if pd.is_null() { cm.devs[dev].pd(lib) } else { pd };
    if pd.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    // Programs leave the type to the id (rdma_create_ep's examples do).
    if a.qp_type == 0 {
        // SAFETY: the id's own field.
        a.qp_type = unsafe { (*me.c()).qp_type };
    }
    let made_cqs = a.send_cq.is_null() || a.recv_cq.is_null();
    if made_cqs {
        // SAFETY: the id's own fields and an opened context.
        unsafe { create_cqs(lib, id, ctx, a)? };
    }
    let fail = |e: c_int| {
        if made_cqs {
            // SAFETY: the CQs just made for the id.
            unsafe { destroy_cqs(lib, id) };
        }
        Err(e)
    };
    // SAFETY: a PD of the device and the caller's attributes.
    let qp = unsafe { (lib.create_qp)(pd, attr) };
    if qp.is_null() {
        // SAFETY: errno as libibverbs left it.
        return fail(unsafe { *libc::__errno_location() });
    }
    let mut init = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: verbs::IBV_ACCESS_LOCAL_WRITE
            | verbs::IBV_ACCESS_REMOTE_WRITE
            | verbs::IBV_ACCESS_REMOTE_READ
            | verbs::IBV_ACCESS_REMOTE_ATOMIC,
        ..Default::default()
    };
    let mask = verbs::IBV_QP_STATE | verbs::IBV_QP_PKEY_INDEX | verbs::IBV_QP_PORT | verbs::IBV_QP_ACCESS_FLAGS;
    // SAFETY: the QP just made; the attributes a local.
    let e = unsafe { (lib.modify_qp)(qp, &mut init, mask) };
    if e != 0 {
        // SAFETY: the QP just made, destroyed once.
        unsafe { (lib.destroy_qp)(qp) };
        return fail(e);
    }
    // SAFETY: the id's own fields, written in a call on the id.
    unsafe {
        (*id).qp = qp;
        (*id).pd = pd;
    }
    me.lock().own_cqs = made_cqs;
    Ok(())
}

/// A send and a receive CQ, each with its completion channel, for an id
/// whose QP attributes name none (as rdma-core's librdmacm makes them).
///
/// # Safety
/// `id` live; `ctx` its device's context.
unsafe fn create_cqs(
    lib: &verbs::Lib,
    id: *mut rdma_cm_id,
    ctx: *mut ibv_context,
    a: &mut ibv_qp_init_attr,
) -> Result<(), c_int> {
    let errno = || {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() }
    };
    // SAFETY: an opened context, and the id's own fields.
    unsafe {
        for (send, depth) in [(false, a.cap.max_recv_wr), (true, a.cap.max_send_wr)] {
            let ch = (lib.create_comp_channel)(ctx);
            if ch.is_null() {
                let e = errno();
                destroy_cqs(lib, id);
                return Err(e);
            }
            let cq = (lib.create_cq)(ctx, depth.max(1) as c_int, id.cast(), ch, 0);
            if cq.is_null() {
                let e = errno();
                (lib.destroy_comp_channel)(ch);
                destroy_cqs(lib, id);
                return Err(e);
            }
            if send {
                (*id).send_cq_channel = ch;
                (*id).send_cq = cq;
            } else {
                (*id).recv_cq_channel = ch;
                (*id).recv_cq = cq;
            }
        }
        a.send_cq = (*id).send_cq;
        a.recv_cq = (*id).recv_cq;
    }
    Ok(())
}

/// Destroys the CQs and channels `create_cqs` made (those that exist).
///
/// # Safety
/// `id` live.
unsafe fn destroy_cqs(lib: &verbs::Lib, id: *mut rdma_cm_id) {
    // SAFETY: the id's own CQs and channels, each destroyed once.
    unsafe {
        let c = &mut *id;
        for cq in [std::mem::replace(&mut c.send_cq, null_mut()), std::mem::replace(&mut c.recv_cq, null_mut())] {
            if !cq.is_null() {
                (lib.destroy_cq)(cq);
            }
        }
        for ch in [
            std::mem::replace(&mut c.send_cq_channel, null_mut()),
            std::mem::replace(&mut c.recv_cq_channel, null_mut()),
        ] {
            if !ch.is_null() {
                (lib.destroy_comp_channel)(ch);
            }
        }
    }
}

export!(
    "RDMACM_1.0",
    (),
    fn rdma_destroy_qp(id: *mut rdma_cm_id) {
        // SAFETY: a live id of the program's.
        unsafe { destroy_qp(id) }
    }
);

/// `rdma_destroy_qp`: the id's QP, and the CQs `create_qp` made for it.
///
/// # Safety
/// `id` NULL or live.
pub(super) unsafe fn destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: the caller's promise.
    let Ok(me) = (unsafe { id_of(id) }) else { return };
    let Ok(cm) = verbs::get() else { return };
    // SAFETY: the id's QP, destroyed once.
    unsafe {
        let qp = std::mem::replace(&mut (*id).qp, null_mut());
        if !qp.is_null() {
            (cm.lib.destroy_qp)(qp);
        }
    }
    if std::mem::take(&mut me.lock().own_cqs) {
        // SAFETY: the CQs create_qp made for the id.
        unsafe { destroy_cqs(&cm.lib, id) };
    }
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            if attr.is_null() {
                return Err(libc::EINVAL);
            }
            let (cm, dev) = dev_of(me)?;
            let pd = if pd.is_null() { cm.devs[dev].pd(&cm.lib) } else { pd };
            // SAFETY: a PD of the device and the caller's attributes.
            let srq = unsafe { (cm.lib.create_srq)(pd, attr) };
            if srq.is_null() {
                // SAFETY: errno as libibverbs left it.
                return Err(unsafe { *libc::__errno_location() });
            }
            // SAFETY: the id's own fields.
            unsafe {
                (*id).srq = srq;
                (*id).pd = pd;
            }
            Ok(())
        })())
    }
);

export!(
    "RDMACM_1.0",
    (),
    fn rdma_destroy_srq(id: *mut rdma_cm_id) {
        // SAFETY: a live id of the program's.
        unsafe { destroy_srq(id) }
    }
);

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` NULL or live.
pub(super) unsafe fn destroy_srq(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    let Ok(cm) = verbs::get() else { return };
    // SAFETY: the id's SRQ, destroyed once.
    unsafe {
        let srq = std::mem::replace(&mut (*id).srq, null_mut());
        if !srq.is_null() {
            (cm.lib.destroy_srq)(srq);
        }
    }
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> c_int {
        ret(Err(libc::ENOSYS))
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
        ret(Err(libc::ENOSYS))
    }
);
