//! The connection manager's calls: ids, address and route resolution, QPs
//! and SRQs on an id, connect, listen, accept, reject, disconnect, the
//! endpoint helpers (`rdma_create_ep`), options, and the devices.
//!
//! Resolution is local: an address selects the device that owns it (or,
//! for a destination, the first device), and ADDR_RESOLVED and
//! ROUTE_RESOLVED are queued at once. The CM exchange (REQ, REP, RTU, REJ,
//! DREQ, DREP) is the engine's, through the CM port of rctb's libibverbs
//! (`capi/ibverbs/src/cmport.rs`); its events arrive through `id::sink`.
//!
//! A synchronous id (created with no channel) has a channel of its own,
//! and the calls that wait for an event on it (resolve, connect, accept,
//! `rdma_get_request`) return when it came, with errno the event's
//! failure; the event stays in `id->event` until the next such call or
//! `rdma_destroy_id`, as rdma-core keeps it.
//!
//! Multicast and ECE fail with EOPNOTSUPP for good: rctb's device is RC
//! only. The `_ex` creation calls and the 1.4 address-info calls fail with
//! ENOSYS: not implemented yet.

use std::ffi::{c_char, c_int, c_void};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::cmport::{ConnParams, driver};

use crate::abi::set_errno;
use crate::channel::{EventChannel, queued_requests_of};
use crate::id::{Event, Id, Phase, v4_of};
use crate::sys::*;
use crate::verbs::{self, Cm};

/// `ibv_context` pointers, as `rdma_get_devices` returns them.
type Devices = *mut *mut ibv_context;

/// The most READs and atomics in flight each way this device takes.
const MAX_RD_ATOMIC: u8 = 16;
/// The most private data a REQ carries past the CMA header.
const MAX_REQ_PRIVATE_DATA: u8 = 56;
/// The most private data a REP carries.
const MAX_REP_PRIVATE_DATA: u8 = 196;

/// -1 with errno `e`, or 0.
fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// An errno-returning port call as a Result.
fn ok(e: c_int) -> Result<(), c_int> {
    if e == 0 { Ok(()) } else { Err(e) }
}

/// A port of the ephemeral range (49152..=65535), one after another from
/// a start that differs by process.
fn ephemeral_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let start = (std::process::id() % 0x4000) as u16;
    0xC000 | (start.wrapping_add(n) & 0x3FFF)
}

/// The id behind `id`, or EINVAL.
///
/// # Safety
/// `id` is NULL or a live id of this library.
unsafe fn id_of<'a>(id: *mut rdma_cm_id) -> Result<&'a Id, c_int> {
    if id.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { Id::of(id) })
}

/// The device an id is on, and the CM.
fn dev_of(id: &Id) -> Result<(&'static Cm, usize), c_int> {
    let cm = verbs::get()?;
    let dev = id.lock().dev.ok_or(libc::EINVAL)?;
    Ok((cm, dev))
}

/// Acknowledges the event a synchronous call left in `id->event`.
fn ack_pending(id: &Id) {
    // SAFETY: the id's own event field; the program does not write it.
    let ev = unsafe { std::mem::replace(&mut (*id.c()).event, null_mut()) };
    if !ev.is_null() {
        // SAFETY: an event handed out to the id, not yet taken back.
        unsafe { Event::take_back(ev) };
    }
}

/// For a synchronous id: waits for the event that ends a call, keeps it
/// in `id->event`, and turns a failure into the call's errno.
fn complete(id: &Id, want: rdma_cm_event_type) -> Result<(), c_int> {
    if !id.lock().own_channel {
        return Ok(());
    }
    ack_pending(id);
    let ev = Event::hand_out(id.channel().next()?);
    // SAFETY: the id's own event field; `ev` is live until acknowledged.
    let (event, status) = unsafe {
        (*id.c()).event = ev;
        ((*ev).event, (*ev).status)
    };
    match (event, status) {
        (e, 0) if e == want => Ok(()),
        (RDMA_CM_EVENT_REJECTED, _) => Err(libc::ECONNREFUSED),
        (_, s) if s < 0 => Err(-s),
        (_, 0) => Err(libc::EPROTO),
        (_, s) => Err(s),
    }
}

// ---- devices ----

export!(
    "RDMACM_1.0",
    null_mut(),
    fn rdma_get_devices(num_devices: *mut c_int) -> Devices {
        let list: Vec<*mut ibv_context> = match verbs::get() {
            Ok(cm) => cm.devs.iter().map(|d| d.ctx).collect(),
            Err(_) => Vec::new(),
        };
        if !num_devices.is_null() {
            // SAFETY: a non-NULL `num_devices` points at the caller's int.
            unsafe { num_devices.write(list.len() as c_int) };
        }
        let list: Box<[*mut ibv_context]> = list.into_iter().chain(std::iter::once(null_mut())).collect();
        Box::into_raw(list).cast()
    }
);

export!(
    "RDMACM_1.0",
    (),
    fn rdma_free_devices(list: Devices) {
        if list.is_null() {
            return;
        }
        let mut n = 0;
        // SAFETY: a list from rdma_get_devices: contexts, then NULL.
        while !unsafe { *list.add(n) }.is_null() {
            n += 1;
        }
        // SAFETY: the boxed slice of n + 1 pointers rdma_get_devices leaked.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
    }
);

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
fn create_id(
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
unsafe fn destroy_id(id: *mut rdma_cm_id) -> Result<(), c_int> {
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
fn bind(id: *mut rdma_cm_id, me: &Id, addr: SocketAddrV4) -> Result<(), c_int> {
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
unsafe fn resolve_addr(id: *mut rdma_cm_id, src: *mut sockaddr, dst: *mut sockaddr) -> Result<(), c_int> {
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
unsafe fn resolve_route(id: *mut rdma_cm_id) -> Result<(), c_int> {
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

// ---- QPs and SRQs on an id ----

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
unsafe fn create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> Result<(), c_int> {
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
unsafe fn destroy_qp(id: *mut rdma_cm_id) {
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
unsafe fn destroy_srq(id: *mut rdma_cm_id) {
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

// ---- connections ----

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
unsafe fn reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> Result<(), c_int> {
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

// ---- not (yet) offered ----

/// Defines entries that fail with -1 and `errno`, with their C signatures.
macro_rules! fails {
    ($ver:literal, $errno:expr => $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $( export!($ver, -1, fn $name($($arg: $ty),*) -> c_int { set_errno($errno); -1 }); )*
    };
}

const NOT_YET: c_int = libc::ENOSYS;
const NEVER: c_int = libc::EOPNOTSUPP;

fails!("RDMACM_1.4", NOT_YET =>
    fn rdma_query_addrinfo(id: *mut rdma_cm_id, info: *mut *mut rdma_addrinfo);
    fn rdma_resolve_addrinfo(id: *mut rdma_cm_id, node: *const c_char, service: *const c_char,
        hints: *const rdma_addrinfo);
    fn rdma_write_cm_event(id: *mut rdma_cm_id, event: rdma_cm_event_type, status: c_int, data: u64);
);
fails!("RDMACM_1.0", NEVER =>
    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void);
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr);
);
fails!("RDMACM_1.1", NEVER =>
    fn rdma_join_multicast_ex(id: *mut rdma_cm_id, mc_join_attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void);
);
// ECE (`struct ibv_ece`, by pointer).
fails!("RDMACM_1.3", NEVER =>
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8);
);

/// The names `rdma_event_str` gives each `enum rdma_cm_event_type`, in order.
const EVENT_NAMES: [&std::ffi::CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

export!(
    "RDMACM_1.0",
    c"UNKNOWN EVENT".as_ptr(),
    fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
        EVENT_NAMES.get(event as usize).copied().unwrap_or(c"UNKNOWN EVENT").as_ptr()
    }
);

/// The port (network order) of an IPv4 or IPv6 address; 0 for another
/// family, or none.
///
/// # Safety
/// `addr` points at a sockaddr large enough for its family, as the address
/// unions of `struct rdma_addr` are.
unsafe fn port_of(addr: *const sockaddr) -> u16 {
    // SAFETY: the caller's promise: `addr` is readable for its family's size.
    unsafe {
        match c_int::from((*addr).sa_family) {
            libc::AF_INET => (*addr.cast::<sockaddr_in>()).sin_port,
            libc::AF_INET6 => (*addr.cast::<sockaddr_in6>()).sin6_port,
            _ => 0,
        }
    }
}

export!(
    "RDMACM_1.0",
    0,
    fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        if id.is_null() {
            return 0;
        }
        // SAFETY: a non-NULL id is an rdma_cm_id the program holds; its
        // source address union is as large as a sockaddr_storage.
        unsafe { port_of(&raw const (*id).route.addr.__bindgen_anon_1.src_addr) }
    }
);

export!(
    "RDMACM_1.0",
    0,
    fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        if id.is_null() {
            return 0;
        }
        // SAFETY: as in rdma_get_src_port, for the destination address.
        unsafe { port_of(&raw const (*id).route.addr.__bindgen_anon_2.dst_addr) }
    }
);
