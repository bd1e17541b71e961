//! RDMA CM-style connection management types.
//!
//! The shape follows librdmacm: a passive side listens on a port; an active
//! side connects to an (IPv4, port) with private data; the passive side
//! receives a connect request carrying that private data and accepts or
//! rejects it with private data of its own; both sides then see
//! `Established`, `Rejected` or `Unreachable`, and later `Disconnected`.
//! The QP of a CM connection is created by `cm_connect` / `cm_accept` and is
//! driven through INIT/RTR/RTS by the CM, as `rdma_create_qp` arranges.
//! (rctb-engine's `Endpoint` also connects and accepts on a QP the
//! application created, and lets an application drive that QP itself.)

use std::net::SocketAddrV4;

use super::{ConnId, ListenId, QpId, QpInit};

/// RDMA CM private data limits (IBA CM: REQ 92, REP 196, REJ 148 bytes;
/// librdmacm reserves none for RoCE with AF_IB, 56 for the IP header form on
/// REQ). rctb enforces the IP-form limits, which are what NVMe-oF uses.
pub const MAX_REQ_PRIVATE_DATA: usize = 56;
/// Most private data an accept (REP) carries, in bytes; more is
/// `InvalidArgument` from `cm_accept`.
pub const MAX_REP_PRIVATE_DATA: usize = 196;
/// Most private data a reject (REJ) carries, in bytes; more is
/// `InvalidArgument` from `cm_reject`.
pub const MAX_REJ_PRIVATE_DATA: usize = 148;

/// Parameters of an active connect.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectParams {
    /// The passive side's IPv4 address and CM port (NVMe-oF: 4420).
    pub remote: SocketAddrV4,
    /// How to create the connection's QP; the CM then drives it to RTS.
    pub qp: QpInit,
    /// Carried in the REQ to the listener's [`CmEvent::ConnectRequest`]; at
    /// most [`MAX_REQ_PRIVATE_DATA`] bytes, else `InvalidArgument`.
    pub private_data: Vec<u8>,
    /// Outstanding RDMA READs the peer may issue to us (our max_dest_rd_atomic).
    pub responder_resources: u8,
    /// Outstanding RDMA READs we may issue (our max_rd_atomic).
    pub initiator_depth: u8,
    /// Transport retries before RETRY_EXC_ERR, 0..=7
    /// (`rdma_conn_param.retry_count`). The REQ carries it and both sides'
    /// QPs use it.
    pub retry_count: u8,
    /// RNR NAK retries before RNR_RETRY_EXC_ERR, 0..=7 with 7 = forever
    /// (`rdma_conn_param.rnr_retry_count`); the REQ carries it.
    pub rnr_retry_count: u8,
    /// The active side's CM source port, which the REQ's CMA header
    /// carries and the listener's [`CmEvent::ConnectRequest`] reports
    /// (`rdma_bind_addr` before `rdma_connect`); `None` takes an ephemeral
    /// one, as rdma_cm does for an unbound id.
    pub src_port: Option<u16>,
}

impl ConnectParams {
    /// Parameters with 16 READs/atomics each way and retry counts 7
    /// (`rnr_retry_count` 7 = forever).
    pub fn new(remote: SocketAddrV4, qp: QpInit, private_data: Vec<u8>) -> Self {
        ConnectParams {
            remote,
            qp,
            private_data,
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            src_port: None,
        }
    }
}

/// Parameters of a passive accept.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcceptParams {
    /// How to create the accepted connection's QP; `cm_accept` brings it to RTS.
    pub qp: QpInit,
    /// Carried in the REP to the requester's [`CmEvent::Established`]; at most
    /// [`MAX_REP_PRIVATE_DATA`] bytes, else `InvalidArgument`.
    pub private_data: Vec<u8>,
    /// RDMA READs and atomics we serve for the peer at once (our
    /// `max_dest_rd_atomic`); need not exceed the request's `initiator_depth`.
    pub responder_resources: u8,
    /// RDMA READs and atomics we may have in flight to the peer (our
    /// `max_rd_atomic`); lowered to the request's `responder_resources`.
    pub initiator_depth: u8,
    /// RNR NAK retries before RNR_RETRY_EXC_ERR, 0..=7 with 7 = forever
    /// (`rdma_conn_param.rnr_retry_count`); the REP carries it.
    pub rnr_retry_count: u8,
}

impl AcceptParams {
    /// Parameters with 16 READs/atomics each way and `rnr_retry_count` 7
    /// (forever).
    pub fn new(qp: QpInit, private_data: Vec<u8>) -> Self {
        AcceptParams { qp, private_data, responder_resources: 16, initiator_depth: 16, rnr_retry_count: 7 }
    }
}

/// Why a connection attempt failed without a REJ from the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnreachableReason {
    /// Nothing answered the address (no route, partition, node down).
    NoRoute,
    /// Nobody listens on that port (the peer's CM rejects with consumer
    /// reason "no listener", which librdmacm reports as REJECTED status 28;
    /// rctb keeps it apart from an application reject).
    NoListener,
    /// The CM exchange timed out.
    Timeout,
}

/// An RDMA CM event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmEvent {
    /// A peer asks to connect to one of our listeners.
    ConnectRequest {
        /// The listener the request arrived at.
        listener: ListenId,
        /// The new connection: answer it with `cm_accept` or `cm_reject`.
        conn: ConnId,
        /// The requester's IPv4 address and CM source port.
        remote: SocketAddrV4,
        /// The REQ's private data (NVMe-oF: the 32-byte CM request); a
        /// hardware CM may hand it over zero-padded to the field's full length.
        private_data: Vec<u8>,
        /// The REQ's: RDMA READs and atomics the peer will serve for us at
        /// once (what our accept's `initiator_depth` may not exceed).
        responder_resources: u8,
        /// The REQ's: how many the peer will have in flight to us (what our
        /// accept's `responder_resources` need not exceed).
        initiator_depth: u8,
    },
    /// The connection is up; its QP is in RTS (a QP its application drives
    /// is as the application left it).
    Established {
        /// The connection that came up.
        conn: ConnId,
        /// The connection's QP, now in RTS: post to it.
        qp: QpId,
        /// On the active side, the private data of the peer's accept (REP);
        /// empty on the passive side.
        private_data: Vec<u8>,
    },
    /// The REP arrived for a connect whose QP the application drives
    /// itself (`RDMA_CM_EVENT_CONNECT_RESPONSE`): the application moves its
    /// QP to RTR and RTS, then completes the connection with the RTU (the
    /// engine's `cm_establish`, librdmacm's `rdma_establish`). Only the
    /// engine's application-driven connects report it.
    ConnectResponse {
        /// The connection whose REP arrived.
        conn: ConnId,
        /// The REP's private data.
        private_data: Vec<u8>,
    },
    /// The peer rejected our connect request.
    Rejected {
        /// The connection attempt that was refused.
        conn: ConnId,
        /// The private data of the peer's REJ (NVMe-oF: recfmt and status).
        private_data: Vec<u8>,
    },
    /// The connect failed before the peer's application saw it.
    Unreachable {
        /// The connection attempt that failed.
        conn: ConnId,
        /// Why no peer application answered.
        reason: UnreachableReason,
    },
    /// Either side disconnected; the QP has been moved to ERR (a QP its
    /// application drives is left to the application).
    Disconnected {
        /// The connection that went down.
        conn: ConnId,
    },
}

impl CmEvent {
    /// The connection the event is about (for `ConnectRequest`, the new one).
    pub fn conn(&self) -> ConnId {
        match self {
            CmEvent::ConnectRequest { conn, .. }
            | CmEvent::Established { conn, .. }
            | CmEvent::ConnectResponse { conn, .. }
            | CmEvent::Rejected { conn, .. }
            | CmEvent::Unreachable { conn, .. }
            | CmEvent::Disconnected { conn } => *conn,
        }
    }
}
