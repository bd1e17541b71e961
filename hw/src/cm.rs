//! RDMA CM objects: the event channel and `rdma_cm_id`s, reading events
//! without blocking, and the pure mapping from librdmacm events to the
//! trait's [`CmEvent`] vocabulary. The connection state machine that drives
//! them lives in `transport/cm.rs`.

use std::net::SocketAddrV4;
use std::ptr::NonNull;
use std::sync::Arc;

use rctb_core::transport::{Result, UnreachableReason, Verb};
use rdma_sys::{
    ibv_context, rdma_ack_cm_event, rdma_cm_event, rdma_cm_event_type as ev, rdma_cm_id, rdma_create_event_channel,
    rdma_create_id, rdma_destroy_event_channel, rdma_destroy_id, rdma_event_channel, rdma_get_cm_event,
    rdma_get_peer_addr, rdma_get_src_port, rdma_port_space,
};

use crate::device::Context;
use crate::sys::{errno, last_os_error, os_error, set_nonblocking, socket_addr_v4};

/// IB CM REJ reason "invalid service ID": the peer's CM has no listener
/// for the port (IBA table 112; the kernel's `IB_CM_REJ_INVALID_SERVICE_ID`).
pub const REJ_INVALID_SERVICE_ID: i32 = 8;
/// IB CM REJ reason "consumer defined": `rdma_reject` by the peer's
/// application (`IB_CM_REJ_CONSUMER_DEFINED`).
pub const REJ_CONSUMER_DEFINED: i32 = 28;

/// The librdmacm event channel, its fd non-blocking. CM ids hold an `Arc`
/// of it: `rdma_destroy_id` still talks through it.
#[derive(Debug)]
pub(crate) struct EventChannel {
    ch: NonNull<rdma_event_channel>,
}

impl EventChannel {
    pub(crate) fn create() -> Result<Self> {
        // SAFETY: no arguments; NULL (with errno) on failure.
        let ch = unsafe { rdma_create_event_channel() };
        let ch = NonNull::new(ch).ok_or_else(|| last_os_error(Verb::CmListen, "rdma_create_event_channel"))?;
        let me = EventChannel { ch };
        set_nonblocking(me.fd(), Verb::CmListen)?;
        Ok(me)
    }

    pub(crate) fn fd(&self) -> i32 {
        // SAFETY: the channel is live while `self` is.
        unsafe { (*self.ch.as_ptr()).fd }
    }

    /// The next event, copied out and already acknowledged; `None` when
    /// nothing is pending (the fd is non-blocking).
    pub(crate) fn next_event(&self) -> Result<Option<RawEvent>> {
        let mut event: *mut rdma_cm_event = std::ptr::null_mut();
        loop {
            // SAFETY: the channel is live; `event` is a valid out-pointer.
            let rc = unsafe { rdma_get_cm_event(self.ch.as_ptr(), &mut event) };
            if rc == 0 {
                break;
            }
            match errno() {
                libc::EINTR => continue,
                libc::EAGAIN => return Ok(None),
                e => return Err(os_error(Verb::Wait, "rdma_get_cm_event", e)),
            }
        }
        // SAFETY: rdma_get_cm_event succeeded, so `event` points to a live
        // event until it is acknowledged below.
        let raw = unsafe { RawEvent::copy(&*event) };
        // Acknowledge at once: rdma_destroy_id waits for every event of its
        // id to be acknowledged, so holding one could deadlock a destroy.
        // SAFETY: `event` came from rdma_get_cm_event and is acked once.
        unsafe { rdma_ack_cm_event(event) };
        Ok(Some(raw))
    }
}

// SAFETY: librdmacm's event channel may be read from any thread
// (rdma_get_cm_event is thread-safe) and `EventChannel` holds no Rust-side
// state besides the pointer.
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every CM id holds an Arc of this channel, so none is left.
        unsafe { rdma_destroy_event_channel(self.ch.as_ptr()) }
    }
}

/// What the state machine needs from one CM event, copied out of it.
#[derive(Debug)]
pub(crate) struct RawEvent {
    pub(crate) kind: u32,
    pub(crate) status: i32,
    /// The id the event is for (for CONNECT_REQUEST: the new child id).
    pub(crate) id: *mut rdma_cm_id,
    /// The listener, for CONNECT_REQUEST.
    pub(crate) listen_id: *mut rdma_cm_id,
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
}

impl RawEvent {
    /// # Safety
    /// `e` is a live event from `rdma_get_cm_event`, not yet acknowledged.
    unsafe fn copy(e: &rdma_cm_event) -> Self {
        // SAFETY: every connected-mode (RC) event carries `param.conn`; for
        // the others librdmacm zeroed the whole event first, so the fields
        // read as empty.
        let conn = unsafe { e.param.conn };
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm points `private_data` at the event's own
            // buffer of `private_data_len` bytes, valid until the ack.
            unsafe { std::slice::from_raw_parts(conn.private_data.cast::<u8>(), conn.private_data_len.into()) }.to_vec()
        };
        RawEvent {
            kind: e.event,
            status: e.status,
            id: e.id,
            listen_id: e.listen_id,
            private_data,
            responder_resources: conn.responder_resources,
            initiator_depth: conn.initiator_depth,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        event_name(self.kind)
    }
}

/// An `rdma_cm_id` (RDMA_PS_TCP, RC).
#[derive(Debug)]
pub(crate) struct CmId {
    id: Option<NonNull<rdma_cm_id>>,
    _channel: Arc<EventChannel>,
    /// The device list stays referenced while ids exist.
    _ctx: Arc<Context>,
}

impl CmId {
    pub(crate) fn create(channel: &Arc<EventChannel>, ctx: &Arc<Context>, verb: Verb) -> Result<Self> {
        let mut id: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live; `id` is a valid out-pointer; no
        // user context pointer is used (ids are looked up by address).
        let rc =
            unsafe { rdma_create_id(channel.ch.as_ptr(), &mut id, std::ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) };
        if rc != 0 {
            return Err(last_os_error(verb, "rdma_create_id"));
        }
        let id = NonNull::new(id).ok_or_else(|| os_error(verb, "rdma_create_id", libc::ENOMEM))?;
        Ok(CmId { id: Some(id), _channel: Arc::clone(channel), _ctx: Arc::clone(ctx) })
    }

    /// Takes ownership of an id librdmacm created (a CONNECT_REQUEST's child).
    pub(crate) fn adopt(id: NonNull<rdma_cm_id>, channel: &Arc<EventChannel>, ctx: &Arc<Context>) -> Self {
        CmId { id: Some(id), _channel: Arc::clone(channel), _ctx: Arc::clone(ctx) }
    }

    /// The raw id; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut rdma_cm_id {
        self.id.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    /// The id's address: how events are matched to their owner.
    pub(crate) fn key(&self) -> usize {
        self.as_ptr() as usize
    }

    /// The device context the id is bound to (null before binding).
    pub(crate) fn verbs(&self) -> *mut ibv_context {
        // SAFETY: the id is live; `verbs` is a plain pointer field.
        unsafe { (*self.as_ptr()).verbs }
    }

    /// The peer's address (`rdma_get_peer_addr`).
    pub(crate) fn peer_addr(&self) -> Option<SocketAddrV4> {
        // SAFETY: the id is live; the address is a field of it.
        socket_addr_v4(unsafe { rdma_get_peer_addr(&*self.as_ptr()) })
    }

    /// The local port (`rdma_get_src_port`), host order.
    pub(crate) fn src_port(&self) -> u16 {
        // SAFETY: the id is live.
        u16::from_be(unsafe { rdma_get_src_port(self.as_ptr()) })
    }

    /// Forgets the id's QP after we destroyed it ourselves (what
    /// `rdma_destroy_qp` does besides `ibv_destroy_qp`; our CQs are not the
    /// id's, so there is nothing else to release), so `rdma_disconnect`
    /// does not touch a freed QP.
    pub(crate) fn forget_qp(&self) {
        // SAFETY: the id is live; `qp` is a plain pointer field librdmacm
        // reads only inside calls we make on this thread.
        unsafe { (*self.as_ptr()).qp = std::ptr::null_mut() }
    }

    /// Destroys the id now, reporting failure (the id then stays).
    pub(crate) fn destroy(&mut self, verb: Verb) -> Result<()> {
        let Some(id) = self.id else { return Ok(()) };
        // SAFETY: our live id. Every event read for it was acknowledged
        // (`next_event` acks at once), so this does not block.
        let rc = unsafe { rdma_destroy_id(id.as_ptr()) };
        if rc != 0 {
            return Err(last_os_error(verb, "rdma_destroy_id"));
        }
        self.id = None;
        Ok(())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            // SAFETY: as in `destroy`.
            if unsafe { rdma_destroy_id(id.as_ptr()) } != 0 {
                tracing::warn!(errno = errno(), "rdma_destroy_id failed during drop");
            }
        }
    }
}

/// How a failed connection attempt is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    Rejected,
    Unreachable(UnreachableReason),
}

/// The trait's view of a REJECTED event on the active side. The IB CM
/// carries a reason: "invalid service ID" is the peer's CM saying nobody
/// listens on that port, so it is `Unreachable { NoListener }`; everything
/// else (notably 28, "consumer defined", which is what `rdma_reject` sends,
/// and what the peer's rdma_cm sends when no listener matches the
/// destination address) is the peer refusing: `Rejected`.
pub(crate) fn rejection(status: i32) -> Failure {
    if status == REJ_INVALID_SERVICE_ID {
        Failure::Unreachable(UnreachableReason::NoListener)
    } else {
        Failure::Rejected
    }
}

/// The reason for the error events (ADDR_ERROR, ROUTE_ERROR, UNREACHABLE,
/// CONNECT_ERROR). `status` is a negative errno for these.
pub(crate) fn unreachable_reason(kind: u32, status: i32) -> UnreachableReason {
    match kind {
        ev::RDMA_CM_EVENT_UNREACHABLE if status == -libc::ETIMEDOUT => UnreachableReason::Timeout,
        _ if status == -libc::ETIMEDOUT && kind == ev::RDMA_CM_EVENT_CONNECT_ERROR => UnreachableReason::Timeout,
        _ => UnreachableReason::NoRoute,
    }
}

pub(crate) fn event_name(kind: u32) -> &'static str {
    match kind {
        ev::RDMA_CM_EVENT_ADDR_RESOLVED => "ADDR_RESOLVED",
        ev::RDMA_CM_EVENT_ADDR_ERROR => "ADDR_ERROR",
        ev::RDMA_CM_EVENT_ROUTE_RESOLVED => "ROUTE_RESOLVED",
        ev::RDMA_CM_EVENT_ROUTE_ERROR => "ROUTE_ERROR",
        ev::RDMA_CM_EVENT_CONNECT_REQUEST => "CONNECT_REQUEST",
        ev::RDMA_CM_EVENT_CONNECT_RESPONSE => "CONNECT_RESPONSE",
        ev::RDMA_CM_EVENT_CONNECT_ERROR => "CONNECT_ERROR",
        ev::RDMA_CM_EVENT_UNREACHABLE => "UNREACHABLE",
        ev::RDMA_CM_EVENT_REJECTED => "REJECTED",
        ev::RDMA_CM_EVENT_ESTABLISHED => "ESTABLISHED",
        ev::RDMA_CM_EVENT_DISCONNECTED => "DISCONNECTED",
        ev::RDMA_CM_EVENT_DEVICE_REMOVAL => "DEVICE_REMOVAL",
        ev::RDMA_CM_EVENT_MULTICAST_JOIN => "MULTICAST_JOIN",
        ev::RDMA_CM_EVENT_MULTICAST_ERROR => "MULTICAST_ERROR",
        ev::RDMA_CM_EVENT_ADDR_CHANGE => "ADDR_CHANGE",
        ev::RDMA_CM_EVENT_TIMEWAIT_EXIT => "TIMEWAIT_EXIT",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections() {
        assert_eq!(rejection(REJ_INVALID_SERVICE_ID), Failure::Unreachable(UnreachableReason::NoListener));
        assert_eq!(rejection(REJ_CONSUMER_DEFINED), Failure::Rejected);
        assert_eq!(rejection(1), Failure::Rejected);
    }

    #[test]
    fn unreachable_reasons() {
        assert_eq!(unreachable_reason(ev::RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT), UnreachableReason::Timeout);
        assert_eq!(unreachable_reason(ev::RDMA_CM_EVENT_UNREACHABLE, -libc::EHOSTUNREACH), UnreachableReason::NoRoute);
        assert_eq!(unreachable_reason(ev::RDMA_CM_EVENT_ADDR_ERROR, -libc::ETIMEDOUT), UnreachableReason::NoRoute);
        assert_eq!(unreachable_reason(ev::RDMA_CM_EVENT_ROUTE_ERROR, -libc::ENODEV), UnreachableReason::NoRoute);
        assert_eq!(unreachable_reason(ev::RDMA_CM_EVENT_CONNECT_ERROR, -libc::ETIMEDOUT), UnreachableReason::Timeout);
    }

    #[test]
    fn names() {
        assert_eq!(event_name(ev::RDMA_CM_EVENT_ESTABLISHED), "ESTABLISHED");
        assert_eq!(event_name(999), "UNKNOWN");
    }
}
