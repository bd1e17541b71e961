//! The endpoint helpers: `rdma_create_ep`, `rdma_get_request` on the
//! synchronous listener it makes, and `rdma_destroy_ep`.

use std::ffi::c_int;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::null_mut;

use crate::channel::EventChannel;
use crate::id::{Event, Id, Phase, v4_of};
use crate::sys::*;

use super::conn::reject;
use super::ids::{bind, create_id, destroy_id, resolve_addr, resolve_route};
use super::qp::{create_qp, destroy_qp, destroy_srq};
use super::{ack_pending, id_of, ret};

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
        // SAFETY: a live listening id; the caller's out pointer.
        ret(unsafe { get_request(listen, id) })
    }
);

/// `rdma_get_request` on a synchronous listener: the next request's id,
/// made synchronous, with a QP when `rdma_create_ep` gave attributes.
///
/// # Safety
/// `listen` NULL or live; `out` NULL or the caller's.
unsafe fn get_request(listen: *mut rdma_cm_id, out: *mut *mut rdma_cm_id) -> Result<(), c_int> {
    // SAFETY: the caller's promise.
    let l = unsafe { id_of(listen)? };
    if out.is_null() {
        return Err(libc::EINVAL);
    }
    let ep_qp = {
        let st = l.lock();
        if !st.own_channel || st.phase != Phase::Listening {
            return Err(libc::EINVAL);
        }
        st.ep_qp
    };
    ack_pending(l);
    let ev = loop {
        let ev = l.channel().next()?;
        if ev.c.event == RDMA_CM_EVENT_CONNECT_REQUEST {
            break ev;
        }
        // Anything else on a listener's channel has no one to go to.
        // SAFETY: handed out and taken back at once.
        unsafe { Event::take_back(Event::hand_out(ev)) };
    };
    let child = ev.c.id;
    // SAFETY: the request's id, made by the sink, not yet handed out.
    let c = unsafe { Id::of(child) };
    // Synchronous as its listener: a channel of its own.
    let ch = EventChannel::create()?;
    // SAFETY: the new id's own fields; no event of it can be queued on the
    // listener's channel while its channel changes (the id lock is held).
    unsafe {
        let _g = c.lock();
        (*child).channel = ch;
    }
    c.lock().own_channel = true;
    // SAFETY: the new id's event field: the request, until its next call.
    unsafe { (*child).event = Event::hand_out(ev) };
    if let Some((pd, mut attr)) = ep_qp {
        // SAFETY: the new id; the listener's PD and a copy of its attributes.
        if let Err(e) = unsafe { create_qp(child, pd as *mut ibv_pd, &mut attr) } {
            // SAFETY: the request's id: refused, then destroyed.
            unsafe {
                let _ = reject(child, std::ptr::null(), 0);
                let _ = destroy_id(child);
            }
            return Err(e);
        }
    }
    // SAFETY: the caller's out pointer.
    unsafe { *out = child };
    Ok(())
}

// ---- endpoints ----

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        ret((|| {
            if id.is_null() || res.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's address information.
            let r = unsafe { &*res };
            let ps = if r.ai_port_space == 0 { RDMA_PS_TCP } else { r.ai_port_space as rdma_port_space };
            let mut new = null_mut();
            // A synchronous id.
            create_id(null_mut(), &mut new, null_mut(), ps)?;
            // SAFETY: just created.
            let me = unsafe { Id::of(new) };
            let r2 = if r.ai_flags as u32 & RAI_PASSIVE != 0 {
                // SAFETY: the caller's source address, or NULL.
                let src = unsafe { v4_of(r.ai_src_addr) }.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
                bind(new, me, src).map(|()| {
                    if !qp_init_attr.is_null() {
                        // SAFETY: the caller's attributes, copied.
                        me.lock().ep_qp = Some((pd as usize, unsafe { *qp_init_attr }));
                    }
                })
            } else {
                // SAFETY: the new id; the caller's addresses, attributes.
                unsafe {
                    resolve_addr(new, r.ai_src_addr, r.ai_dst_addr)
                        .and_then(|()| resolve_route(new))
                        .and_then(|()| if qp_init_attr.is_null() { Ok(()) } else { create_qp(new, pd, qp_init_attr) })
                }
            };
            if let Err(e) = r2 {
                // SAFETY: the new id, destroyed once.
                let _ = unsafe { destroy_id(new) };
                return Err(e);
            }
            // SAFETY: the caller's out pointer.
            unsafe { *id = new };
            Ok(())
        })())
    }
);

export!(
    "RDMACM_1.0",
    (),
    fn rdma_destroy_ep(id: *mut rdma_cm_id) {
        if id.is_null() {
            return;
        }
        // SAFETY: a live id; its QP, SRQ and then itself, each once.
        unsafe {
            destroy_qp(id);
            destroy_srq(id);
            let _ = destroy_id(id);
        }
    }
);
