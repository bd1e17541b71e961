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
//!
//! This file holds the messages, the per-connection state and the QP
//! attributes a connection carries; `exchange.rs` the endpoint's side of
//! the exchange (sending, resending, taking messages in, the timer);
//! `mad.rs` the MAD encoding.

pub mod mad;

use std::net::Ipv4Addr;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{
    Access, AddressVector, ConnId, Gid, InitAttr, Mtu, Psn, QpId, QpTransition, RnrTimer, RtrAttr, RtsAttr,
};

#[cfg(doc)]
use crate::endpoint::Endpoint;
#[cfg(doc)]
use rctb_core::transport::CmEvent;

mod exchange;

pub(crate) use exchange::timeout;

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
