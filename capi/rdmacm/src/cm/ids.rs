//! Ids: creating and destroying them, binding, address and route
//! resolution, moving an id to another channel, and its options.

use std::ffi::{c_int, c_void};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::null_mut;

use crate::channel::{EventChannel, queued_requests_of};
use crate::id::{Id, Phase, v4_of};
use crate::sys::*;
use crate::verbs;

use super::{ack_pending, complete, ephemeral_port, id_of, ret};

// ---- ids ----

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int {
        ret(create_id(channel, id, context, ps))
    }
);

/// `rdma_create_id` (also for `rdma_create_ep`: an exported entry is never
/// called from inside the library, whose `.symver` must stay with it).
pub(super) fn create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> Result<(), c_int> {
    if id.is_null() {
        return Err(libc::EINVAL);
    }
    // UDP and IPoIB port spaces are UD QPs; this device is RC only.
    if ps != RDMA_PS_TCP && ps != RDMA_PS_IB {
        return Err(libc::EOPNOTSUPP);
    }
    verbs::get()?;
    let (ch, own) = if channel.is_null() { (EventChannel::create()?, true) } else { (channel, false) };
    // SAFETY: the caller's out pointer.
    unsafe { *id = Id::create(ch, own, context, ps).cast() };
    Ok(())
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
        // SAFETY: a live id of the program's, destroyed once.
        ret(unsafe { destroy_id(id) })
    }
);

/// `rdma_destroy_id`: waits until the program acknowledged the id's
/// events, takes it out of the engine, drops what its channel still holds
/// for it, and frees it.
///
/// # Safety
/// `id` is NULL or a live id, destroyed once.
pub(super) unsafe fn destroy_id(id: *mut rdma_cm_id) -> Result<(), c_int> {
    // SAFETY: the caller's promise.
    let me = unsafe { id_of(id)? };
    ack_pending(me);
    let (conn, dev, listeners, own) = {
        let mut st = me.lock();
        while st.events_out > 0 {
            st = me.acked.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        (st.conn.take(), st.dev, std::mem::take(&mut st.listeners), st.own_channel)
    };
    if let Ok(cm) = verbs::get() {
        if let (Some(conn), Some(dev)) = (conn, dev) {
            // SAFETY: an opened context; after this no event names the id.
            unsafe { (cm.lib.port.destroy)(cm.devs[dev].ctx.cast(), conn) };
        }
        for (dev, l) in listeners {
            // SAFETY: as above, for a listener.
            unsafe { (cm.lib.port.close_listener)(cm.devs[dev].ctx.cast(), l) };
        }
    }
    let ch = me.channel();
    drop(ch.take_where(|e| e.c.id == id));
    // Requests that came to a listener and were never taken: refused.
    for ev in queued_requests_of(ch, me) {
        let child = ev.c.id;
        drop(ev);
        // SAFETY: a request's id, created by the sink and never handed out.
        let c = unsafe { Id::of(child) };
        if let (Ok(cm), Some(conn), Some(dev)) = (verbs::get(), c.lock().conn.take(), c.lock().dev) {
            let ctx = cm.devs[dev].ctx.cast();
            // SAFETY: an opened context and the request's connection.
            unsafe {
                (cm.lib.port.reject)(ctx, conn, std::ptr::null(), 0);
                (cm.lib.port.destroy)(ctx, conn);
            }
        }
        // SAFETY: the request's id, now out of the engine and the queue.
        drop(unsafe { Box::from_raw(child.cast::<Id>()) });
    }
    // SAFETY: the id's channel field, read before the id goes.
    let channel = unsafe { (*me.c()).channel };
    // SAFETY: the id leaked by Id::create; nothing refers to it any more.
    drop(unsafe { Box::from_raw(id.cast::<Id>()) });
    if own {
        // SAFETY: the id's own channel, created with it.
        unsafe { EventChannel::destroy(channel) };
    }
    Ok(())
}

/// Binds `id` to `addr`: the device that owns the address (none for the
/// wildcard address), and the port (an ephemeral one for 0).
pub(super) fn bind(id: *mut rdma_cm_id, me: &Id, addr: SocketAddrV4) -> Result<(), c_int> {
    let cm = verbs::get()?;
    if me.lock().phase != Phase::Idle {
        return Err(libc::EINVAL);
    }
    let dev = if addr.ip().is_unspecified() { None } else { Some(cm.dev_of(*addr.ip()).ok_or(libc::EADDRNOTAVAIL)?) };
    let port = if addr.port() == 0 { ephemeral_port() } else { addr.port() };
    me.set_src(SocketAddrV4::new(*addr.ip(), port));
    if let Some(d) = dev {
        // SAFETY: the id's own fields, written in a call on the id.
        unsafe {
            (*id).verbs = cm.devs[d].ctx;
            (*id).port_num = 1;
        }
    }
    let mut st = me.lock();
    st.dev = dev;
    st.phase = Phase::Bound;
    Ok(())
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            if addr.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's address, as large as its family says.
            let a = unsafe { v4_of(addr) }.ok_or(libc::EAFNOSUPPORT)?;
            bind(id, me, a)
        })())
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src_addr: *mut sockaddr,
        dst_addr: *mut sockaddr,
        timeout_ms: c_int,
    ) -> c_int {
        // SAFETY: a live id; the caller's addresses.
        ret(unsafe { resolve_addr(id, src_addr, dst_addr) })
    }
);

/// # Safety
/// `id` is NULL or live; the addresses NULL or readable for their family.
pub(super) unsafe fn resolve_addr(id: *mut rdma_cm_id, src: *mut sockaddr, dst: *mut sockaddr) -> Result<(), c_int> {
    // SAFETY: the caller's promise.
    let me = unsafe { id_of(id)? };
    let cm = verbs::get()?;
    if dst.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise.
    let dst = unsafe { v4_of(dst) }.ok_or(libc::EAFNOSUPPORT)?;
    if me.lock().phase == Phase::Idle {
        // SAFETY: the caller's promise.
        let src = unsafe { v4_of(src) };
        let from = src.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        bind(id, me, from)?;
    }
    let dev = {
        let st = me.lock();
        if st.phase != Phase::Bound {
            return Err(libc::EINVAL);
        }
        st.dev
    };
    let dev = dev.unwrap_or_else(|| cm.route_to(*dst.ip()));
    let port = me.src().map_or_else(ephemeral_port, |a| a.port());
    me.set_src(SocketAddrV4::new(cm.devs[dev].ip, port));
    me.set_dst(dst);
    // SAFETY: the id's own fields, written in a call on the id.
    unsafe {
        (*id).verbs = cm.devs[dev].ctx;
        (*id).port_num = 1;
    }
    {
        let mut st = me.lock();
        st.dev = Some(dev);
        st.phase = Phase::AddrResolved;
    }
    me.post(RDMA_CM_EVENT_ADDR_RESOLVED, 0, null_mut(), None);
    complete(me, RDMA_CM_EVENT_ADDR_RESOLVED)
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
        // SAFETY: a live id of the program's.
        ret(unsafe { resolve_route(id) })
    }
);

/// # Safety
/// `id` is NULL or live.
pub(super) unsafe fn resolve_route(id: *mut rdma_cm_id) -> Result<(), c_int> {
    // SAFETY: the caller's promise.
    let me = unsafe { id_of(id)? };
    {
        let mut st = me.lock();
        if st.phase != Phase::AddrResolved {
            return Err(libc::EINVAL);
        }
        st.phase = Phase::RouteResolved;
    }
    me.set_route();
    me.post(RDMA_CM_EVENT_ROUTE_RESOLVED, 0, null_mut(), None);
    complete(me, RDMA_CM_EVENT_ROUTE_RESOLVED)
}

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int {
        ret((|| {
            if id.is_null() || optval.is_null() {
                return Err(libc::EINVAL);
            }
            match (level as u32, optname as u32) {
                // The address options hold as asked: one address family
                // (IPv4), and ports are this process's to reuse.
                (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) => Ok(()),
                // Type of service and ACK timeout: not carried yet.
                (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT) => Err(libc::ENOSYS),
                // Path records: routes here are resolved locally.
                (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => Err(libc::ENOSYS),
                _ => Err(libc::EINVAL),
            }
        })())
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
        ret((|| {
            // SAFETY: a live id of the program's.
            let me = unsafe { id_of(id)? };
            let own_new = channel.is_null();
            let new = if own_new { EventChannel::create()? } else { channel };
            let (old, own_old) = {
                let mut st = me.lock();
                // SAFETY: the id's channel field, under its lock.
                let old = unsafe { (*me.c()).channel };
                // SAFETY: the id's channel field, changed under its lock
                // (the sink reads it under the same lock).
                unsafe { (*id).channel = new };
                let own_old = std::mem::replace(&mut st.own_channel, own_new);
                (old, own_old)
            };
            // SAFETY: the old channel is live until destroyed below.
            let old_ch = unsafe { EventChannel::of(old) };
            // SAFETY: the new channel, live.
            let new_ch = unsafe { EventChannel::of(new) };
            for ev in old_ch.take_where(|e| e.c.id == id) {
                new_ch.push(ev);
            }
            if own_old {
                // SAFETY: the id's own old channel, now empty of its events.
                unsafe { EventChannel::destroy(old) };
            }
            Ok(())
        })())
    }
);
