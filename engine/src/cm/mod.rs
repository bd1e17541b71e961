//! RDMA CM: REQ / MRA / REP / RTU / REJ / DREQ / DREP, each side's
//! connection state, and the timers that retransmit what got no answer.
//!
//! Contract: the endpoint's CM verbs (`cm_connect`, `cm_accept`,
//! `cm_reject`, `cm_disconnect`, in `verbs/cm.rs`) and
//! [`Endpoint::handle_cm`] queue [`CmTransmit`]s. An owner carries them
//! one of two ways:
//!
//! - as values: [`Endpoint::poll_cm_transmit`], delivered to the endpoint
//!   at [`CmTransmit::dst`] through its `handle_cm` (the simulator);
//! - as MADs on QP1, the way RDMA CM sends them on RoCEv2:
//!   [`Endpoint::poll_cm_packet`] gives UD packets to put on the wire, and
//!   [`Endpoint::handle_packet`] takes the ones addressed to QP1 (the udp
//!   backend, against another rctb or the kernel's `rdma_cm`). [`mad`]
//!   holds the encoding.
//!
//! The carrier may lose, duplicate or delay messages. As IBA 12.6 asks,
//! each message that expects an answer (REQ, REP, DREQ) is sent again when
//! none came within the response timeout, up to the retry count; a
//! duplicate is answered from the state it finds (a REQ whose REP went out
//! gets the REP again, one still with the application gets an MRA; a REP
//! already answered gets the RTU again; a DREQ gets a DREP unless this
//! side has not yet sent or applied a REP, or closed the connection). The
//! active side waits `(CM_MAX_RETRIES + 1) × cm_time(CM_RESPONSE_TIMEOUT)`
//! ([`CM_TIMEOUT`]) for REP or REJ, then reports
//! `Unreachable { reason: Timeout }` and sends a REJ with reason TIMEOUT.
//! A passive side times its REP by the REQ's own timeout and retry count.
//!
//! The QP transitions are the ones librdmacm makes (INIT at creation,
//! RTR/RTS with the peer's QPN and starting PSN, the path MTU the smaller
//! of both ports' active MTUs, ERR on disconnect).
//!
//! The QP is the CM's creation (`cm_connect`, `cm_accept`) or the
//! application's (`cm_connect_qp`, `cm_accept_qp`); [`QpDriver`] says
//! whether the CM moves the latter as it moves its own, or leaves it to the
//! application, which takes the values from `cm_qp_attr` and sends the RTU
//! with `cm_establish`. One `Connect` record per connection holds the RTR
//! and RTS values, so what `cm_qp_attr` reports is what the CM applies.
//! The CM never destroys a QP (docs/protocols.md §0.6).

pub mod mad;

use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{
    Access, AddressVector, CmEvent, ConnId, Gid, InitAttr, Mtu, Psn, QpId, QpTransition, RnrTimer, RtrAttr, RtsAttr,
    UnreachableReason,
};

use crate::endpoint::{Endpoint, TimerKey};
use mad::reason;

/// The CM response timeout this engine asks for and answers within, as
/// the IBA 5-bit code: 4.096 µs × 2^12 ≈ 16.8 ms.
pub const CM_RESPONSE_TIMEOUT: u8 = 12;
/// How many times an unanswered REQ, REP or DREQ is sent again.
pub const CM_MAX_RETRIES: u8 = 5;
/// How long an active side waits for REP or REJ, retries included.
pub const CM_TIMEOUT: Duration = Duration::from_nanos(cm_time_nanos(CM_RESPONSE_TIMEOUT) * (CM_MAX_RETRIES as u64 + 1));
/// The local ACK timeout code librdmacm's path records usually give on RoCE.
pub const CM_QP_TIMEOUT: u8 = 14;

const fn cm_time_nanos(code: u8) -> u64 {
    let code = if code > 31 { 31 } else { code };
    4096 << code
}

/// An IBA CM time code (4.096 µs × 2^code) as a duration.
pub const fn cm_time(code: u8) -> Duration {
    Duration::from_nanos(cm_time_nanos(code))
}

/// A CM message between two endpoints. Every one names the sender's
/// connection (`src_conn`) and, past the REQ, the receiver's (`dst_conn`):
/// the communication ids of the MADs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMessage {
    /// Connect request (REQ).
    Req {
        /// The sender's communication id.
        src_conn: ConnId,
        /// The active side's source port (the CMA header's).
        src_port: u16,
        /// The service: the port the passive side listens on.
        port: u16,
        /// The sender's QP number.
        qpn: u32,
        /// The starting PSN the sender receives from.
        psn: Psn,
        /// The path MTU asked for.
        mtu: Mtu,
        /// The application's private data.
        private_data: Vec<u8>,
        /// READs the sender serves at once.
        responder_resources: u8,
        /// READs the sender has in flight at once.
        initiator_depth: u8,
        /// The transport retry count the sender asks for.
        retry_count: u8,
        /// The RNR retry count the sender asks for.
        rnr_retry_count: u8,
        /// The active side's CM response timeout (IBA code): how long the
        /// passive side waits for the RTU before it sends the REP again.
        response_timeout: u8,
        /// How many times the passive side may send the REP again.
        max_retries: u8,
    },
    /// "Message received, the answer will take a while" (for a REQ).
    Mra {
        /// The receiver's communication id.
        dst_conn: ConnId,
        /// The sender's communication id.
        src_conn: ConnId,
        /// How much longer to wait (IBA code), on top of the response timeout.
        service_timeout: u8,
    },
    /// Connect reply (REP).
    Rep {
        /// The receiver's communication id.
        dst_conn: ConnId,
        /// The sender's communication id.
        src_conn: ConnId,
        /// The sender's QP number.
        qpn: u32,
        /// The starting PSN the sender receives from.
        psn: Psn,
        /// The path MTU the passive side chose: min of both ports' active MTUs.
        mtu: Mtu,
        /// The application's private data.
        private_data: Vec<u8>,
        /// READs the sender serves at once.
        responder_resources: u8,
        /// READs the sender has in flight at once.
        initiator_depth: u8,
        /// The RNR retry count the sender asks for.
        rnr_retry_count: u8,
    },
    /// Ready to use (RTU): the active side is up.
    Rtu {
        /// The receiver's communication id.
        dst_conn: ConnId,
        /// The sender's communication id.
        src_conn: ConnId,
    },
    /// Reject (REJ).
    Rej {
        /// The receiver's communication id.
        dst_conn: ConnId,
        /// `ConnId(0)` when the sender has no connection (no listener).
        src_conn: ConnId,
        /// Which message is refused (the MAD's Message REJected).
        rejected: Rejected,
        /// IBA table 112 ([`mad::reason`]).
        reason: u16,
        /// The application's private data.
        private_data: Vec<u8>,
    },
    /// Disconnect request (DREQ).
    Dreq {
        /// The receiver's communication id.
        dst_conn: ConnId,
        /// The sender's communication id.
        src_conn: ConnId,
        /// The receiver's QPN (a DREQ for another QP is dropped).
        remote_qpn: u32,
    },
    /// Disconnect reply (DREP).
    Drep {
        /// The receiver's communication id.
        dst_conn: ConnId,
        /// The sender's communication id.
        src_conn: ConnId,
    },
}

/// Which message a REJ refuses (its "Message REJected" field, IBA 12.6):
/// how the receiver finds the connection the REJ is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// The REQ: a passive side's answer (no listener, or its application
    /// refused).
    Req,
    /// The REP: an active side that cannot take the REP it got.
    Rep,
    /// Neither: a timeout, from either side.
    Other,
}

/// A CM message to deliver to the endpoint at `dst`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmTransmit {
    /// The receiving endpoint's address.
    pub dst: Ipv4Addr,
    /// The message.
    pub msg: CmMessage,
}

/// Who moves a connection's QP through its states: what
/// [`Endpoint::cm_connect_qp`] and [`Endpoint::cm_accept_qp`] take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QpDriver {
    /// The CM, as for a QP it created: INIT at once if in RESET, RTR and
    /// RTS with the peer's values (the active side on the REP, the passive
    /// side before its REP goes out), ERR on a disconnect, and on the
    /// passive side when the active side rejects or times out the REP.
    /// What librdmacm does to a QP made with `rdma_create_qp`.
    #[default]
    Cm,
    /// The application (librdmacm with no QP on the id, `rping -q`): the
    /// CM never changes the QP's state and only puts its QPN in the REQ or
    /// REP. The application reads the attributes from
    /// [`Endpoint::cm_qp_attr`] and applies them with `modify_qp`: on the
    /// passive side before it accepts, on the active side after
    /// [`CmEvent::ConnectResponse`], which it answers with
    /// [`Endpoint::cm_establish`] (the RTU). It moves the QP to ERR itself
    /// on a disconnect.
    Application,
}

/// CM connection state on one side.
#[derive(Debug)]
pub(crate) struct Conn {
    /// The QP the CM drives (created by `cm_connect` / `cm_accept`, or the
    /// caller's, given to `cm_connect_qp` / `cm_accept_qp`); bound to this
    /// connection until it is destroyed, never destroyed by the CM.
    pub qp: Option<QpId>,
    /// The peer's address and connection id, once known.
    pub peer: Option<(Ipv4Addr, ConnId)>,
    pub state: ConnState,
    /// What the REQ carried (passive side) or what we sent (active side).
    pub remote_qpn: u32,
    pub remote_psn: Psn,
    pub local_psn: Psn,
    pub remote_ip: Ipv4Addr,
    pub mtu: Mtu,
    /// Passive side: what the REQ offered (the reads we may have
    /// outstanding at most). Active side: what we offered (the peer's
    /// reads we take at once).
    pub responder_resources: u8,
    /// Active side: the reads we want outstanding (bounded by the REP's
    /// responder resources).
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// When the message in `sent` is sent again (or given up on).
    pub deadline: Option<Instant>,
    /// The last message that expects an answer, or that answers a duplicate.
    pub sent: Option<CmMessage>,
    /// How many more times `sent` goes out when unanswered.
    pub retries_left: u8,
    /// The wait for an answer to `sent`.
    pub response_timeout: Duration,
    /// The attributes the QP is (or would be) brought to RTR and RTS with,
    /// once the peer's QPN and PSN are known: from the REQ on the passive
    /// side (its read depths and RNR retry count the REQ's until the accept
    /// sets them), from the REP on the active side.
    pub attrs: Option<Connect>,
    /// Who moves `qp` through its states.
    pub driver: QpDriver,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Active side: REQ sent.
    ReqSent,
    /// Passive side: REQ received, application deciding.
    ReqRcvd,
    /// Passive side: REP sent.
    RepSent,
    /// Active side, the application driving the QP: REP received, the
    /// application has yet to send the RTU (`cm_establish`).
    RepRcvd,
    Established,
    /// DREQ sent, waiting for the DREP.
    DreqSent,
    /// Disconnected; still answers a late DREQ with a DREP.
    TimeWait,
    Closed,
}

impl Conn {
    /// A connection in `state` towards `remote_ip`.
    pub fn new(state: ConnState, remote_ip: Ipv4Addr, local_psn: Psn, mtu: Mtu) -> Conn {
        Conn {
            qp: None,
            peer: None,
            state,
            remote_qpn: 0,
            remote_psn: Psn::default(),
            local_psn,
            remote_ip,
            mtu,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            deadline: None,
            sent: None,
            retries_left: 0,
            response_timeout: cm_time(CM_RESPONSE_TIMEOUT),
            attrs: None,
            driver: QpDriver::Cm,
        }
    }
}

impl Conn {
    /// The QP, when the CM drives it.
    pub(crate) fn driven_qp(&self) -> Option<QpId> {
        self.qp.filter(|_| self.driver == QpDriver::Cm)
    }

    /// Moves to `state` with nothing kept to send again and no timer.
    fn settle(&mut self, state: ConnState) {
        self.state = state;
        self.deadline = None;
        self.sent = None;
    }
}

/// INIT attributes rdma_cm uses for a connected RC QP.
pub(crate) fn init_attr() -> QpTransition {
    QpTransition::Init(InitAttr {
        pkey_index: 0,
        port: 1,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    })
}

/// The QP attributes a connection brings a QP from INIT to RTS with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Connect {
    pub peer_ip: Ipv4Addr,
    pub mtu: Mtu,
    pub dest_qpn: u32,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

impl Connect {
    /// The INIT -> RTR attributes of these.
    pub(crate) fn rtr(&self) -> RtrAttr {
        RtrAttr {
            path_mtu: self.mtu,
            dest_qpn: self.dest_qpn,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.responder_resources,
            min_rnr_timer: RnrTimer::default(),
            av: AddressVector::new(Gid::from_ipv4(self.peer_ip), 1),
        }
    }

    /// The RTR -> RTS attributes of these.
    pub(crate) fn rts(&self) -> RtsAttr {
        RtsAttr {
            sq_psn: self.sq_psn,
            timeout: CM_QP_TIMEOUT,
            retry_cnt: self.retry_count.min(7),
            rnr_retry: self.rnr_retry_count.min(7),
            max_rd_atomic: self.initiator_depth,
        }
    }
}

impl Endpoint {
    pub(crate) fn send_cm(&mut self, dst: Ipv4Addr, msg: CmMessage) {
        self.cm_out.push_back(CmTransmit { dst, msg });
    }

    /// Sends `msg` on `conn` and keeps it to send again after
    /// `conn.response_timeout` when no answer comes, `retries` times.
    pub(crate) fn send_reliably(&mut self, now: Instant, conn: ConnId, msg: CmMessage, retries: u8) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let at = now + c.response_timeout;
        c.deadline = Some(at);
        c.retries_left = retries;
        c.sent = Some(msg.clone());
        let dst = c.remote_ip;
        self.arm(at, TimerKey::Cm(conn));
        self.send_cm(dst, msg);
    }

    /// Sends `conn`'s kept message again, as the answer to a duplicate.
    fn resend(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else { return };
        if let Some(msg) = c.sent.clone() {
            let dst = c.remote_ip;
            self.counters.cm_retransmitted += 1;
            self.send_cm(dst, msg);
        }
    }

    /// Brings `qp` from INIT to RTS towards the peer.
    pub(crate) fn connect_qp(&mut self, qp: QpId, c: Connect) -> Result<(), &'static str> {
        let src_ip = self.cfg.ip;
        let q = self.qps.get_mut(qp.0).ok_or("QP destroyed")?;
        // The same values `cm_qp_attr` reports: one source for both.
        let rtr = QpTransition::Rtr(c.rtr());
        let rts = QpTransition::Rts(c.rts());
        let r = q.modify(&rtr, src_ip, &mut self.comps).and_then(|()| q.modify(&rts, src_ip, &mut self.comps));
        self.route();
        r
    }

    pub(crate) fn init_qp(&mut self, qp: QpId) {
        let ip = self.cfg.ip;
        if let Some(q) = self.qps.get_mut(qp.0) {
            let _ = q.modify(&init_attr(), ip, &mut self.comps);
        }
        self.route();
    }

    /// Moves `qp` to ERR (its outstanding work completes flushed).
    fn error_qp(&mut self, now: Instant, qp: QpId) {
        let ip = self.cfg.ip;
        if let Some(q) = self.qps.get_mut(qp.0) {
            let _ = q.modify(&QpTransition::Err, ip, &mut self.comps);
        }
        self.route();
        self.after_qp_change(now, qp);
    }

    /// The connection whose peer is `peer` (a duplicate REQ's sender).
    fn conn_of_peer(&self, peer: (Ipv4Addr, ConnId)) -> Option<ConnId> {
        self.conns.iter().find(|(_, c)| c.peer == Some(peer)).map(|(id, _)| *id)
    }

    /// `conn`, when it exists and is in `state` (anything else is a stale
    /// or duplicate message: counted).
    fn conn_in(&mut self, conn: ConnId, state: ConnState) -> bool {
        let ok = self.conns.get(&conn).is_some_and(|c| c.state == state);
        if !ok {
            self.counters.cm_ignored += 1;
        }
        ok
    }

    /// Takes one CM message that the endpoint at `from` sent, at `now`.
    pub fn handle_cm(&mut self, now: Instant, from: Ipv4Addr, msg: CmMessage) {
        self.take_cm(now, from, msg, false);
    }

    /// `on_wire`: it came as a MAD. A REP on the wire has no MTU, so there
    /// the passive side takes the REQ's path MTU as it is (as the kernel's
    /// does: the active side chose it); carried as a value, the REP tells
    /// the active side the smaller of both ports' MTUs.
    pub(crate) fn take_cm(&mut self, now: Instant, from: Ipv4Addr, msg: CmMessage, on_wire: bool) {
        match msg {
            CmMessage::Req {
                src_conn,
                src_port,
                port,
                qpn,
                psn,
                mtu,
                private_data,
                responder_resources,
                initiator_depth,
                retry_count,
                rnr_retry_count,
                response_timeout,
                max_retries,
            } => {
                if let Some(conn) = self.conn_of_peer((from, src_conn)) {
                    self.counters.cm_duplicates += 1;
                    match self.conns.get(&conn).map(|c| c.state) {
                        // Our REP (or REJ) was lost or is late: send it again.
                        Some(ConnState::RepSent | ConnState::Closed) => self.resend(conn),
                        // The application has not answered yet: say so, and
                        // ask for four more response timeouts.
                        Some(ConnState::ReqRcvd) => {
                            let service_timeout = CM_RESPONSE_TIMEOUT + 2;
                            let mra = CmMessage::Mra { dst_conn: src_conn, src_conn: conn, service_timeout };
                            self.send_cm(from, mra);
                        }
                        _ => {}
                    }
                    return;
                }
                let Some(&listener) = self.listeners.get(&port) else {
                    self.reject_req(from, src_conn, reason::INVALID_SERVICE_ID);
                    return;
                };
                let conn = ConnId(self.alloc_id());
                let local_psn = self.random_psn();
                let mtu = if on_wire { mtu } else { mtu.min(self.cfg.mtu) };
                let mut c = Conn::new(ConnState::ReqRcvd, from, local_psn, mtu);
                c.peer = Some((from, src_conn));
                c.remote_qpn = qpn;
                c.remote_psn = psn;
                c.responder_resources = responder_resources;
                c.retry_count = retry_count;
                c.rnr_retry_count = rnr_retry_count;
                c.response_timeout = cm_time(response_timeout);
                c.retries_left = max_retries;
                // What `cm_qp_attr` reports before the accept: the REQ's
                // depths seen from this side (as the kernel's CM keeps
                // them); the accept replaces them with its own.
                c.attrs = Some(Connect {
                    peer_ip: from,
                    mtu,
                    dest_qpn: qpn,
                    rq_psn: local_psn,
                    sq_psn: psn,
                    responder_resources: initiator_depth,
                    initiator_depth: responder_resources,
                    retry_count,
                    rnr_retry_count,
                });
                self.conns.insert(conn, c);
                self.cm_events.push_back(CmEvent::ConnectRequest {
                    listener,
                    conn,
                    remote: SocketAddrV4::new(from, src_port),
                    private_data,
                    responder_resources,
                    initiator_depth,
                });
            }
            CmMessage::Mra { dst_conn, service_timeout, .. } => {
                let Some(c) = self.conns.get_mut(&dst_conn) else { return };
                if c.state != ConnState::ReqSent {
                    self.counters.cm_ignored += 1;
                    return;
                }
                // The REQ arrived: wait for the answer without resending.
                let at = now + cm_time(service_timeout) + c.response_timeout;
                c.deadline = Some(at);
                self.arm(at, TimerKey::Cm(dst_conn));
            }
            CmMessage::Rep {
                dst_conn,
                src_conn,
                qpn,
                psn,
                mtu,
                private_data,
                responder_resources,
                initiator_depth,
                rnr_retry_count: _,
            } => {
                if self
                    .conns
                    .get(&dst_conn)
                    .is_some_and(|c| c.state == ConnState::Established && c.peer == Some((from, src_conn)))
                {
                    // Our RTU was lost: the passive side sent its REP again.
                    self.counters.cm_duplicates += 1;
                    self.resend(dst_conn);
                    return;
                }
                if !self.conn_in(dst_conn, ConnState::ReqSent) {
                    return;
                }
                let c = self.conns.get_mut(&dst_conn).expect("checked above");
                c.peer = Some((from, src_conn));
                c.remote_qpn = qpn;
                c.remote_psn = psn;
                // Both ends must segment and reassemble at the same path MTU.
                c.mtu = c.mtu.min(mtu);
                c.deadline = None;
                // We take as many of the peer's reads at once as we
                // offered; ours outstanding are bounded by what it takes.
                // Each side's starting PSN is the one it receives from: we
                // send from the REP's, and take what follows our REQ's.
                let _ = initiator_depth;
                let attrs = Connect {
                    peer_ip: c.remote_ip,
                    mtu: c.mtu,
                    dest_qpn: qpn,
                    rq_psn: c.local_psn,
                    sq_psn: psn,
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth.min(responder_resources),
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                };
                c.attrs = Some(attrs);
                if c.driver == QpDriver::Application {
                    // The application moves its QP, then sends the RTU.
                    c.state = ConnState::RepRcvd;
                    self.cm_events.push_back(CmEvent::ConnectResponse { conn: dst_conn, private_data });
                    return;
                }
                let Some(qp) = c.qp else { return };
                let ok = self.connect_qp(qp, attrs);
                let c = self.conns.get_mut(&dst_conn).expect("checked above");
                if ok.is_ok() {
                    c.state = ConnState::Established;
                    let rtu = CmMessage::Rtu { dst_conn: src_conn, src_conn: dst_conn };
                    // Kept, not timed: it answers a REP that comes again.
                    c.sent = Some(rtu.clone());
                    self.send_cm(from, rtu);
                    self.cm_events.push_back(CmEvent::Established { conn: dst_conn, qp, private_data });
                } else {
                    c.state = ConnState::Closed;
                    let rej = CmMessage::Rej {
                        dst_conn: src_conn,
                        src_conn: dst_conn,
                        rejected: Rejected::Rep,
                        reason: reason::CONSUMER_DEFINED,
                        private_data: Vec::new(),
                    };
                    self.send_cm(from, rej);
                    let ev = CmEvent::Unreachable { conn: dst_conn, reason: UnreachableReason::NoRoute };
                    self.cm_events.push_back(ev);
                }
                self.after_qp_change(now, qp);
            }
            CmMessage::Rtu { dst_conn, .. } => {
                if !self.conn_in(dst_conn, ConnState::RepSent) {
                    return;
                }
                let c = self.conns.get_mut(&dst_conn).expect("checked above");
                c.settle(ConnState::Established);
                if let Some(qp) = c.qp {
                    self.awaiting_rtu.remove(&qp);
                    self.cm_events.push_back(CmEvent::Established { conn: dst_conn, qp, private_data: Vec::new() });
                }
            }
            CmMessage::Rej { dst_conn, src_conn, reason: why, private_data, .. } => {
                // A REJ "timeout" from an active side that never saw our REP
                // names only its own connection.
                let target = if dst_conn == ConnId(0) { self.conn_of_peer((from, src_conn)) } else { Some(dst_conn) };
                let open = |c: &&mut Conn| {
                    matches!(c.state, ConnState::ReqSent | ConnState::ReqRcvd | ConnState::RepSent | ConnState::RepRcvd)
                };
                let Some((conn, c)) = target.and_then(|id| Some((id, self.conns.get_mut(&id).filter(open)?))) else {
                    self.counters.cm_ignored += 1;
                    return;
                };
                let passive = matches!(c.state, ConnState::ReqRcvd | ConnState::RepSent);
                c.settle(ConnState::Closed);
                let qp = c.driven_qp();
                let ev = match why {
                    reason::INVALID_SERVICE_ID => CmEvent::Unreachable { conn, reason: UnreachableReason::NoListener },
                    reason::TIMEOUT => CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout },
                    _ => CmEvent::Rejected { conn, private_data },
                };
                if passive && let Some(qp) = qp {
                    self.error_qp(now, qp);
                }
                self.cm_events.push_back(ev);
            }
            CmMessage::Dreq { dst_conn, src_conn, remote_qpn } => {
                let drep = CmMessage::Drep { dst_conn: src_conn, src_conn: dst_conn };
                let Some(c) = self.conns.get(&dst_conn) else {
                    // Gone already (destroyed): IBA still answers.
                    self.send_cm(from, drep);
                    return;
                };
                let own_qpn = c.qp.and_then(|qp| self.qps.get(qp.0)).map(|q| q.qpn);
                if c.peer.is_some_and(|(_, p)| p != src_conn) || own_qpn.is_some_and(|n| n != remote_qpn) {
                    self.counters.cm_ignored += 1;
                    return;
                }
                match c.state {
                    ConnState::Established => self.disconnect_local(now, dst_conn, false),
                    // The RTU was lost and the active side, up since the
                    // REP, disconnects already: the connection was up, and
                    // goes down (the kernel's CM takes a DREQ in REP_SENT).
                    ConnState::RepSent => {
                        if let Some(c) = self.conns.get_mut(&dst_conn) {
                            c.settle(ConnState::Established);
                        }
                        self.disconnect_local(now, dst_conn, false);
                    }
                    // Both sides disconnect at once: each answers the other.
                    ConnState::DreqSent | ConnState::TimeWait => self.counters.cm_duplicates += 1,
                    _ => {
                        self.counters.cm_ignored += 1;
                        return;
                    }
                }
                if let Some(c) = self.conns.get_mut(&dst_conn) {
                    c.state = ConnState::TimeWait;
                    c.deadline = None;
                    c.sent = Some(drep.clone());
                }
                self.send_cm(from, drep);
            }
            CmMessage::Drep { dst_conn, .. } => {
                if !self.conn_in(dst_conn, ConnState::DreqSent) {
                    return;
                }
                self.conns.get_mut(&dst_conn).expect("checked above").settle(ConnState::TimeWait);
            }
        }
    }

    /// A packet came on `qp` from the peer: if its connection still waits
    /// for the RTU, the peer is up (it sends only from RTS), and so is the
    /// connection, as if the RTU came: every RTU may have been lost.
    pub(crate) fn communication_established(&mut self, qp: QpId) {
        let Some(conn) = self.awaiting_rtu.remove(&qp) else { return };
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.state != ConnState::RepSent || c.qp != Some(qp) {
            return;
        }
        c.settle(ConnState::Established);
        self.counters.cm_established_by_data += 1;
        self.cm_events.push_back(CmEvent::Established { conn, qp, private_data: Vec::new() });
    }

    /// Refuses a REQ for which no connection was made.
    pub(crate) fn reject_req(&mut self, to: Ipv4Addr, req_conn: ConnId, why: u16) {
        self.counters.cm_rejected += 1;
        let rej = CmMessage::Rej {
            dst_conn: req_conn,
            src_conn: ConnId(0),
            rejected: Rejected::Req,
            reason: why,
            private_data: Vec::new(),
        };
        self.send_cm(to, rej);
    }

    /// Tears a connection down: QP to ERR, Disconnected event, and, when
    /// we started it, a DREQ to the peer (sent again until a DREP comes).
    pub(crate) fn disconnect_local(&mut self, now: Instant, conn: ConnId, notify_peer: bool) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.state != ConnState::Established {
            return;
        }
        c.settle(ConnState::Closed);
        let (qp, peer, remote_qpn) = (c.driven_qp(), c.peer, c.remote_qpn);
        if let Some(qp) = qp {
            self.error_qp(now, qp);
        }
        self.cm_events.push_back(CmEvent::Disconnected { conn });
        if notify_peer && let Some((_, peer_conn)) = peer {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.state = ConnState::DreqSent;
                c.response_timeout = cm_time(CM_RESPONSE_TIMEOUT);
            }
            let dreq = CmMessage::Dreq { dst_conn: peer_conn, src_conn: conn, remote_qpn };
            self.send_reliably(now, conn, dreq, CM_MAX_RETRIES);
        }
    }
}

/// The timer of `conn` came up: send its message again, or give up.
pub(crate) fn timeout(ep: &mut Endpoint, now: Instant, conn: ConnId) {
    let Some(c) = ep.conns.get_mut(&conn) else { return };
    if c.deadline.is_none_or(|d| d > now) {
        return; // moved later (MRA) or answered: a later entry or none
    }
    if !matches!(c.state, ConnState::ReqSent | ConnState::RepSent | ConnState::DreqSent) {
        c.deadline = None;
        return;
    }
    if c.retries_left > 0 {
        c.retries_left -= 1;
        let at = now + c.response_timeout;
        c.deadline = Some(at);
        ep.arm(at, TimerKey::Cm(conn));
        ep.resend(conn);
        return;
    }
    // Out of retries.
    let (state, peer, qp, dst) = (c.state, c.peer, c.driven_qp(), c.remote_ip);
    ep.counters.cm_timeouts += 1;
    if state == ConnState::DreqSent {
        c.settle(ConnState::TimeWait);
        return;
    }
    // REQ or REP: tell the peer, so it drops its half (IBA: REJ "timeout";
    // an active side that never heard back names only its own id).
    c.settle(ConnState::Closed);
    let dst_conn = peer.map_or(ConnId(0), |(_, p)| p);
    let rej = CmMessage::Rej {
        dst_conn,
        src_conn: conn,
        rejected: Rejected::Other,
        reason: reason::TIMEOUT,
        private_data: Vec::new(),
    };
    ep.send_cm(dst, rej);
    if state == ConnState::RepSent
        && let Some(qp) = qp
    {
        ep.error_qp(now, qp);
    }
    ep.cm_events.push_back(CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout });
}
