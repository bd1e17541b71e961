//! The RDMA CM state machine of `VerbsTransport`: non-blocking, driven by
//! `cm_poll` and `wait` (which read the event channel and act on each event).
//!
//! Active side: `cm_connect` creates the id and starts address resolution;
//! ADDR_RESOLVED -> `rdma_resolve_route`; ROUTE_RESOLVED -> `rdma_create_qp`
//! (the QP handle `cm_connect` returned becomes real) and `rdma_connect`;
//! librdmacm turns the REP into ESTABLISHED after moving the QP to RTS.
//! Passive side: CONNECT_REQUEST -> `ConnectRequest` with a new connection
//! id; `cm_accept` creates the QP on it and `rdma_accept` brings it to RTS;
//! the RTU gives ESTABLISHED.
//!
//! Two places do not wait for the application to drive this transport,
//! because the other side may be waiting on *its* transport only (one
//! thread driving several actors, as the conformance harness does):
//! - `cm_connect` drives address and route resolution itself, for at most
//!   [`CONNECT_SETTLE`]: both are local on RoCE (routing table, ARP), so
//!   the REQ is normally on the wire when it returns. Whatever is left
//!   (an ARP that goes unanswered) continues from `cm_poll`/`wait`.
//! - `cm_disconnect` reports `Disconnected` for the local side at once (its
//!   QP is in ERR then), as the simulator does, instead of waiting for the
//!   peer's DREP, which the peer's CM sends only when that peer's
//!   transport is driven. The peer answers our DREQ when it processes its
//!   own DISCONNECTED.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::NonNull;
use std::sync::Arc;

use rctb_core::transport::*;
use rdma_sys::{
    rdma_accept, rdma_bind_addr, rdma_cm_event_type as ev, rdma_conn_param, rdma_connect, rdma_create_qp,
    rdma_disconnect, rdma_listen, rdma_reject, rdma_resolve_addr, rdma_resolve_route,
};

use super::{PendingQp, QpSlot, VerbsTransport};
use crate::cm::{CmId, EventChannel, Failure, RawEvent, rejection, unreachable_reason};
use crate::qp::{QueuePair, init_attr};
use crate::sys::{errno, last_os_error, monotonic_nanos, os_error, sockaddr_in};

/// Address and route resolution timeout (what librdmacm's own
/// `rdma_create_ep` uses).
const RESOLVE_TIMEOUT_MS: i32 = 2000;
/// Pending connect requests a listener queues in the kernel.
const LISTEN_BACKLOG: i32 = 128;
/// How long `cm_connect` drives address and route resolution itself
/// before leaving the rest to `cm_poll`/`wait` (see the module docs).
pub const CONNECT_SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// Who owns an `rdma_cm_id`.
#[derive(Clone, Copy, Debug)]
pub(super) enum CmOwner {
    Listener(ListenId),
    Conn(ConnId),
}

/// One connection attempt (active or passive) and its CM id.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) id: CmId,
    side: Side,
    state: ConnState,
    /// The connection's QP handle (pending or real), once there is one.
    qp: Option<QpId>,
}

#[derive(Debug)]
enum Side {
    Active(ActiveParams),
    Passive {
        /// What the REQ offered: bounds for our accept.
        peer_responder_resources: u8,
        peer_initiator_depth: u8,
    },
}

/// What `rdma_connect` needs once the route is resolved.
#[derive(Debug)]
struct ActiveParams {
    private_data: Vec<u8>,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    ResolvingAddr,
    ResolvingRoute,
    /// REQ sent.
    Connecting,
    /// A connect request waits for `cm_accept` / `cm_reject`.
    RequestReceived,
    /// REP sent.
    Accepting,
    Established,
    Closed,
}

fn check_len(verb: Verb, data: &[u8], max: usize, rule: &'static str) -> Result<()> {
    if data.len() > max {
        return Err(TransportError::invalid(verb, "private_data", data.len() as u64, rule));
    }
    Ok(())
}

fn check_3bit(verb: Verb, field: &'static str, v: u8) -> Result<()> {
    if v > 7 {
        return Err(TransportError::invalid(verb, field, v.into(), "must be 0..=7"));
    }
    Ok(())
}

fn conn_param(
    private_data: &[u8],
    responder_resources: u8,
    initiator_depth: u8,
    retry: u8,
    rnr: u8,
) -> rdma_conn_param {
    rdma_conn_param {
        private_data: if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() },
        // Callers checked the length against the CM limits (<= 196).
        private_data_len: private_data.len() as u8,
        responder_resources,
        initiator_depth,
        flow_control: 0,
        retry_count: retry,
        rnr_retry_count: rnr,
        srq: 0,
        qp_num: 0,
    }
}

impl VerbsTransport {
    /// The CM event channel, created on first use.
    fn channel(&mut self, verb: Verb) -> Result<Arc<EventChannel>> {
        if let Some(ch) = &self.channel {
            return Ok(Arc::clone(ch));
        }
        let ch = Arc::new(EventChannel::create().map_err(|e| match e {
            TransportError::Os { what, errno, message, .. } => TransportError::Os { verb, what, errno, message },
            other => other,
        })?);
        self.channel = Some(Arc::clone(&ch));
        Ok(ch)
    }

    fn local_ipv4(&self, verb: Verb) -> Result<Ipv4Addr> {
        self.device_ipv4().ok_or(TransportError::Unsupported {
            verb,
            what: "RDMA CM without an IPv4 address (no RoCE v2 IPv4-mapped GID on this device)",
        })
    }

    fn check_bound(&self, id: &CmId, verb: Verb) -> Result<()> {
        if id.verbs() != self.ctx.as_ptr() {
            return Err(TransportError::Unsupported {
                verb,
                what: "an RDMA CM id bound to another device than this transport's (the address routes elsewhere)",
            });
        }
        Ok(())
    }

    fn conn(&self, conn: ConnId, verb: Verb) -> Result<&Conn> {
        self.conns.get(&conn).ok_or_else(|| TransportError::handle(verb, conn))
    }

    pub(super) fn listen(&mut self, port: u16) -> Result<ListenId> {
        let verb = Verb::CmListen;
        let ch = self.channel(verb)?;
        let ip = self.local_ipv4(verb)?;
        let id = CmId::create(&ch, &self.ctx, verb)?;
        let busy = || TransportError::Busy { verb, what: format!("port {port}"), by: "another listener".into() };
        let mut addr = sockaddr_in(SocketAddrV4::new(ip, port));
        // SAFETY: the id is live; `addr` is a valid sockaddr_in, which
        // librdmacm reads by its family.
        if unsafe { rdma_bind_addr(id.as_ptr(), (&mut addr as *mut libc::sockaddr_in).cast()) } != 0 {
            return Err(match errno() {
                libc::EADDRINUSE => busy(),
                e => os_error(verb, "rdma_bind_addr", e),
            });
        }
        self.check_bound(&id, verb)?;
        // SAFETY: the id is live and bound.
        if unsafe { rdma_listen(id.as_ptr(), LISTEN_BACKLOG) } != 0 {
            return Err(match errno() {
                libc::EADDRINUSE => busy(),
                e => os_error(verb, "rdma_listen", e),
            });
        }
        let l = ListenId(self.alloc_id());
        self.cm_owner.insert(id.key(), CmOwner::Listener(l));
        self.listeners.insert(l, id);
        Ok(l)
    }

    pub(super) fn connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        let verb = Verb::CmConnect;
        check_len(verb, &params.private_data, MAX_REQ_PRIVATE_DATA, "REQ private data is at most 56 bytes")?;
        check_3bit(verb, "retry_count", params.retry_count)?;
        check_3bit(verb, "rnr_retry_count", params.rnr_retry_count)?;
        let parents = self.qp_parents(&params.qp, verb)?;
        let ch = self.channel(verb)?;
        let src = self.local_ipv4(verb)?;
        let id = CmId::create(&ch, &self.ctx, verb)?;
        let mut src_addr = sockaddr_in(SocketAddrV4::new(src, 0));
        let mut dst_addr = sockaddr_in(params.remote);
        // Binding to our own address keeps the id on this device.
        // SAFETY: the id is live; both addresses are valid sockaddr_in.
        let rc = unsafe {
            rdma_resolve_addr(
                id.as_ptr(),
                (&mut src_addr as *mut libc::sockaddr_in).cast(),
                (&mut dst_addr as *mut libc::sockaddr_in).cast(),
                RESOLVE_TIMEOUT_MS,
            )
        };
        if rc != 0 {
            return Err(last_os_error(verb, "rdma_resolve_addr"));
        }
        let dev = &self.ctx.info;
        // librdmacm refuses depths above the device's (EINVAL): clamp.
        let active = ActiveParams {
            private_data: params.private_data.clone(),
            responder_resources: params.responder_resources.min(dev.max_qp_rd_atom),
            initiator_depth: params.initiator_depth.min(dev.max_qp_init_rd_atom),
            retry_count: params.retry_count,
            rnr_retry_count: params.rnr_retry_count,
        };
        let conn = ConnId(self.alloc_id());
        let qp = QpId(self.alloc_id());
        self.qps.insert(qp, QpSlot::Pending(PendingQp { conn: Some(conn), init: params.qp, parents }));
        self.cm_owner.insert(id.key(), CmOwner::Conn(conn));
        self.conns.insert(conn, Conn { id, side: Side::Active(active), state: ConnState::ResolvingAddr, qp: Some(qp) });
        self.settle_connect(conn, &ch);
        Ok((conn, qp))
    }

    /// Drives the CM until `conn` is past route resolution (its REQ sent,
    /// or failed) or [`CONNECT_SETTLE`] passed. Events of other ids met on
    /// the way are handled and queued as usual.
    fn settle_connect(&mut self, conn: ConnId, ch: &EventChannel) {
        let until = monotonic_nanos().saturating_add(CONNECT_SETTLE.as_nanos() as u64);
        loop {
            self.pump_cm();
            let resolving = self
                .conns
                .get(&conn)
                .is_some_and(|c| matches!(c.state, ConnState::ResolvingAddr | ConnState::ResolvingRoute));
            let left = until.saturating_sub(monotonic_nanos());
            if !resolving || left == 0 {
                return;
            }
            let mut fd = libc::pollfd { fd: ch.fd(), events: libc::POLLIN, revents: 0 };
            let ts = libc::timespec {
                tv_sec: (left / 1_000_000_000) as libc::time_t,
                tv_nsec: (left % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: one valid pollfd, a live timespec, no signal mask.
            // Errors (EINTR) just mean another round.
            unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
        }
    }

    pub(super) fn accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        let verb = Verb::CmAccept;
        check_len(verb, &params.private_data, MAX_REP_PRIVATE_DATA, "REP private data is at most 196 bytes")?;
        check_3bit(verb, "rnr_retry_count", params.rnr_retry_count)?;
        let c = self.conn(conn, verb)?;
        let (ConnState::RequestReceived, Side::Passive { peer_responder_resources, peer_initiator_depth }) =
            (c.state, &c.side)
        else {
            return Err(TransportError::Busy {
                verb,
                what: conn.to_string(),
                by: "a connection past its request".into(),
            });
        };
        let (peer_rr, peer_id) = (*peer_responder_resources, *peer_initiator_depth);
        let parents = self.qp_parents(&params.qp, verb)?;
        let id_ptr = self.conn(conn, verb)?.id.as_ptr();
        let mut attr = init_attr(&params.qp, &parents);
        // SAFETY: the id is live and bound to our context (checked when the
        // request arrived); the PD and CQs are ours and alive; `attr` is a
        // valid init attr that librdmacm updates with the granted caps.
        if unsafe { rdma_create_qp(id_ptr, parents.pd.as_ptr(), &mut attr) } != 0 {
            return Err(last_os_error(verb, "rdma_create_qp"));
        }
        // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP.
        let raw = NonNull::new(unsafe { (*id_ptr).qp }).ok_or_else(|| os_error(verb, "rdma_create_qp", libc::EIO))?;
        let qp = QpId(self.alloc_id());
        let mut q = QueuePair::adopt(qp, raw, QueuePair::caps_from(&attr), QpState::Init, parents);
        q.cm = Some(conn);
        let dev = &self.ctx.info;
        // IB CM: what we take may not exceed what the peer offered.
        let mut param = conn_param(
            &params.private_data,
            params.responder_resources.min(dev.max_qp_rd_atom).min(peer_id),
            params.initiator_depth.min(dev.max_qp_init_rd_atom).min(peer_rr),
            0,
            params.rnr_retry_count,
        );
        // SAFETY: the id is live with its QP; `param` and the private data
        // it points to outlive the call (librdmacm copies them).
        if unsafe { rdma_accept(id_ptr, &mut param) } != 0 {
            let e = last_os_error(verb, "rdma_accept");
            self.conns[&conn].id.forget_qp();
            drop(q); // ibv_destroy_qp
            return Err(e);
        }
        // rdma_accept moved the QP through RTR to RTS.
        q.state = QpState::Rts;
        self.insert_qp(q);
        let c = self.conns.get_mut(&conn).expect("looked up above");
        c.qp = Some(qp);
        c.state = ConnState::Accepting;
        Ok(qp)
    }

    pub(super) fn reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        let verb = Verb::CmReject;
        check_len(verb, private_data, MAX_REJ_PRIVATE_DATA, "REJ private data is at most 148 bytes")?;
        let c = self.conn(conn, verb)?;
        if c.state != ConnState::RequestReceived {
            return Err(TransportError::Busy {
                verb,
                what: conn.to_string(),
                by: "a connection past its request".into(),
            });
        }
        let data = if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() };
        // SAFETY: the id is live; `data` is null or `private_data`, whose
        // length (<= 148) is passed along and which librdmacm copies.
        if unsafe { rdma_reject(c.id.as_ptr(), data, private_data.len() as u8) } != 0 {
            return Err(last_os_error(verb, "rdma_reject"));
        }
        self.conns.get_mut(&conn).expect("looked up above").state = ConnState::Closed;
        Ok(())
    }

    pub(super) fn disconnect(&mut self, conn: ConnId) -> Result<()> {
        let verb = Verb::CmDisconnect;
        let c = self.conn(conn, verb)?;
        // Like the simulator: only a connection that got as far as a REP
        // has anything to tear down; anything else is a no-op (cm_destroy
        // abandons a connect in progress).
        if !matches!(c.state, ConnState::Established | ConnState::Accepting) {
            return Ok(());
        }
        // SAFETY: the id is live. If we destroyed its QP, `id->qp` was
        // cleared (`forget_qp`), so librdmacm does not touch it.
        if unsafe { rdma_disconnect(c.id.as_ptr()) } != 0 {
            return Err(last_os_error(verb, "rdma_disconnect"));
        }
        // rdma_disconnect moved the QP to ERR (RoCE/IB transports). Report
        // at once (see the module docs); librdmacm's own DISCONNECTED for
        // this id comes after the peer's DREP and is ignored then.
        self.set_qp_state(conn, QpState::Err);
        self.conns.get_mut(&conn).expect("looked up above").state = ConnState::Closed;
        self.cm_events.push_back(CmEvent::Disconnected { conn });
        Ok(())
    }

    pub(super) fn destroy_conn(&mut self, conn: ConnId) -> Result<()> {
        let c = self.conns.get_mut(&conn).ok_or_else(|| TransportError::handle(Verb::CmDestroy, conn))?;
        let key = c.id.key();
        c.id.destroy(Verb::CmDestroy)?;
        let qp = c.qp;
        self.conns.remove(&conn);
        self.cm_owner.remove(&key);
        // The QP outlives its id (destroy_qp releases it).
        match qp.and_then(|qp| self.qps.get_mut(&qp)) {
            Some(QpSlot::Ready(q)) => q.cm = None,
            Some(QpSlot::Pending(p)) => p.conn = None,
            None => {}
        }
        Ok(())
    }

    pub(super) fn close_listener(&mut self, listener: ListenId) -> Result<()> {
        let id = self.listeners.get_mut(&listener).ok_or_else(|| TransportError::handle(Verb::CmDestroy, listener))?;
        let key = id.key();
        id.destroy(Verb::CmDestroy)?;
        self.listeners.remove(&listener);
        self.cm_owner.remove(&key);
        Ok(())
    }

    /// Reads every pending CM event and acts on it. Never blocks.
    pub(super) fn pump_cm(&mut self) {
        let Some(ch) = self.channel.clone() else { return };
        loop {
            match ch.next_event() {
                Ok(Some(event)) => self.on_event(&ch, event),
                Ok(None) => break,
                Err(e) => {
                    self.record_error(e);
                    break;
                }
            }
        }
        // Read to the end (or failed): nothing known to be waiting.
        self.cm_channel = super::CmChannelState::Unknown;
    }

    fn record_error(&mut self, e: TransportError) {
        tracing::warn!(error = %e, "RDMA CM");
        self.cm_errors.push_back(e);
    }

    fn on_event(&mut self, ch: &Arc<EventChannel>, e: RawEvent) {
        tracing::debug!(event = e.name(), status = e.status, "RDMA CM event");
        if e.kind == ev::RDMA_CM_EVENT_CONNECT_REQUEST {
            return self.on_connect_request(ch, e);
        }
        let Some(&CmOwner::Conn(conn)) = self.cm_owner.get(&(e.id as usize)) else {
            // Listener events other than requests (device removal, ...) and
            // late events of ids we no longer track: nothing to do.
            return;
        };
        match e.kind {
            ev::RDMA_CM_EVENT_ADDR_RESOLVED => self.on_addr_resolved(conn),
            ev::RDMA_CM_EVENT_ROUTE_RESOLVED => self.on_route_resolved(conn),
            ev::RDMA_CM_EVENT_ESTABLISHED => self.on_established(conn, e.private_data),
            ev::RDMA_CM_EVENT_REJECTED => {
                let active = matches!(self.conns.get(&conn).map(|c| &c.side), Some(Side::Active(_)));
                // librdmacm moved the QP to ERR.
                self.set_qp_state(conn, QpState::Err);
                // On the passive side the peer refused our REP.
                let failure =
                    if active { rejection(e.status) } else { Failure::Unreachable(UnreachableReason::NoRoute) };
                self.finish(conn, failure, e.private_data);
            }
            ev::RDMA_CM_EVENT_ADDR_ERROR
            | ev::RDMA_CM_EVENT_ROUTE_ERROR
            | ev::RDMA_CM_EVENT_UNREACHABLE
            | ev::RDMA_CM_EVENT_CONNECT_ERROR => {
                self.finish(conn, Failure::Unreachable(unreachable_reason(e.kind, e.status)), Vec::new());
            }
            ev::RDMA_CM_EVENT_CONNECT_RESPONSE => {
                // Only reported when the id has no QP: it was destroyed
                // while the REQ was out.
                self.fail(conn, os_error(Verb::CmConnect, "rdma_connect (QP destroyed before the REP)", libc::ENOENT));
            }
            ev::RDMA_CM_EVENT_DISCONNECTED => self.on_disconnected(conn, true),
            ev::RDMA_CM_EVENT_DEVICE_REMOVAL => self.on_disconnected(conn, false),
            _ => {} // TIMEWAIT_EXIT, ADDR_CHANGE, multicast: nothing to report.
        }
    }

    fn on_connect_request(&mut self, ch: &Arc<EventChannel>, e: RawEvent) {
        let Some(child) = NonNull::new(e.id) else { return };
        let id = CmId::adopt(child, ch, &self.ctx);
        let Some(&CmOwner::Listener(listener)) = self.cm_owner.get(&(e.listen_id as usize)) else {
            return; // Listener gone: dropping the child id rejects the request.
        };
        if let Err(err) = self.check_bound(&id, Verb::CmAccept) {
            return self.record_error(err); // Dropping the id rejects it.
        }
        let remote = id.peer_addr().unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        let conn = ConnId(self.alloc_id());
        self.cm_owner.insert(id.key(), CmOwner::Conn(conn));
        self.conns.insert(
            conn,
            Conn {
                id,
                // ib_cm hands the passive side the REQ's two fields
                // swapped, as they apply to it (cm_format_req_event): its
                // `responder_resources` is the REQ's initiator depth.
                side: Side::Passive {
                    peer_responder_resources: e.initiator_depth,
                    peer_initiator_depth: e.responder_resources,
                },
                state: ConnState::RequestReceived,
                qp: None,
            },
        );
        self.cm_events.push_back(CmEvent::ConnectRequest {
            listener,
            conn,
            remote,
            private_data: e.private_data,
            responder_resources: e.initiator_depth,
            initiator_depth: e.responder_resources,
        });
    }

    fn on_addr_resolved(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else { return };
        if c.state != ConnState::ResolvingAddr {
            return;
        }
        if let Err(err) = self.check_bound(&c.id, Verb::CmConnect) {
            return self.fail(conn, err);
        }
        // SAFETY: the id is live and its address resolved.
        if unsafe { rdma_resolve_route(c.id.as_ptr(), RESOLVE_TIMEOUT_MS) } != 0 {
            return self.fail(conn, last_os_error(Verb::CmConnect, "rdma_resolve_route"));
        }
        self.conns.get_mut(&conn).expect("looked up above").state = ConnState::ResolvingRoute;
    }

    fn on_route_resolved(&mut self, conn: ConnId) {
        let verb = Verb::CmConnect;
        let Some(c) = self.conns.get(&conn) else { return };
        if c.state != ConnState::ResolvingRoute {
            return;
        }
        let id_ptr = c.id.as_ptr();
        let Some(qp) = c.qp else { return };
        let pending = match self.qps.remove(&qp) {
            Some(QpSlot::Pending(p)) => p,
            Some(other) => {
                self.qps.insert(qp, other);
                return;
            }
            None => {
                let err = os_error(verb, "rdma_create_qp (QP destroyed before the route resolved)", libc::ENOENT);
                return self.fail(conn, err);
            }
        };
        let mut attr = init_attr(&pending.init, &pending.parents);
        // SAFETY: the id is live and bound to our context (checked at
        // ADDR_RESOLVED); PD and CQs are alive (held by `pending`).
        if unsafe { rdma_create_qp(id_ptr, pending.parents.pd.as_ptr(), &mut attr) } != 0 {
            let err = last_os_error(verb, "rdma_create_qp");
            self.qps.insert(qp, QpSlot::Pending(pending));
            return self.fail(conn, err);
        }
        // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP.
        let Some(raw) = NonNull::new(unsafe { (*id_ptr).qp }) else {
            self.qps.insert(qp, QpSlot::Pending(pending));
            return self.fail(conn, os_error(verb, "rdma_create_qp", libc::EIO));
        };
        let mut q = QueuePair::adopt(qp, raw, QueuePair::caps_from(&attr), QpState::Init, pending.parents);
        q.cm = Some(conn);
        self.insert_qp(q);
        let Some(Side::Active(a)) = self.conns.get(&conn).map(|c| &c.side) else { return };
        let mut param =
            conn_param(&a.private_data, a.responder_resources, a.initiator_depth, a.retry_count, a.rnr_retry_count);
        // SAFETY: the id is live with its QP; `param` and the private data
        // it points to (owned by the connection) outlive the call.
        if unsafe { rdma_connect(id_ptr, &mut param) } != 0 {
            return self.fail(conn, last_os_error(verb, "rdma_connect"));
        }
        self.conns.get_mut(&conn).expect("looked up above").state = ConnState::Connecting;
    }

    fn on_established(&mut self, conn: ConnId, private_data: Vec<u8>) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if !matches!(c.state, ConnState::Connecting | ConnState::Accepting) {
            return;
        }
        c.state = ConnState::Established;
        let qp = c.qp.unwrap_or(QpId(0));
        // librdmacm moved the active side's QP to RTS before reporting it.
        self.set_qp_state(conn, QpState::Rts);
        self.cm_events.push_back(CmEvent::Established { conn, qp, private_data });
    }

    /// DISCONNECTED (`answer_peer`: the peer sent a DREQ) or
    /// DEVICE_REMOVAL for `conn`.
    fn on_disconnected(&mut self, conn: ConnId, answer_peer: bool) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.state == ConnState::Closed {
            return;
        }
        c.state = ConnState::Closed;
        let qp = c.qp;
        // The peer disconnected (we would be Closed had we started it):
        // answer its DREQ. The IB CM sends the DREP only when this side
        // calls rdma_disconnect too; without it the peer's CM retries its
        // DREQ until it times out. This also moves our QP to ERR.
        // SAFETY: the id is live; `id->qp` is ours or null (forget_qp).
        if answer_peer && unsafe { rdma_disconnect(c.id.as_ptr()) } != 0 {
            let e = last_os_error(Verb::CmDisconnect, "rdma_disconnect (answering the peer's DREQ)");
            self.record_error(e);
        }
        // The trait promises a QP in ERR on both sides, whatever happened
        // above (a device removal, a failed rdma_disconnect).
        if let Some(QpSlot::Ready(q)) = qp.and_then(|qp| self.qps.get_mut(&qp))
            && q.device_state(Verb::CmDisconnect).ok() != Some(QpState::Err)
            && let Err(e) = q.modify(&QpTransition::Err)
        {
            self.record_error(e);
        }
        self.set_qp_state(conn, QpState::Err);
        self.cm_events.push_back(CmEvent::Disconnected { conn });
    }

    fn set_qp_state(&mut self, conn: ConnId, state: QpState) {
        let qp = self.conns.get(&conn).and_then(|c| c.qp);
        if let Some(QpSlot::Ready(q)) = qp.and_then(|qp| self.qps.get_mut(&qp)) {
            q.state = state;
        }
    }

    /// A local failure while driving a connection: record the error and
    /// report the connection unreachable.
    fn fail(&mut self, conn: ConnId, err: TransportError) {
        self.record_error(err);
        self.finish(conn, Failure::Unreachable(UnreachableReason::NoRoute), Vec::new());
    }

    fn finish(&mut self, conn: ConnId, failure: Failure, private_data: Vec<u8>) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.state == ConnState::Closed {
            return;
        }
        c.state = ConnState::Closed;
        // librdmacm may have moved the QP (to ERR) on the way: re-read it.
        if let Some(QpSlot::Ready(q)) = c.qp.and_then(|qp| self.qps.get_mut(&qp)) {
            let _ = q.query_state(Verb::CmConnect);
        }
        self.cm_events.push_back(match failure {
            Failure::Rejected => CmEvent::Rejected { conn, private_data },
            Failure::Unreachable(reason) => CmEvent::Unreachable { conn, reason },
        });
    }
}
