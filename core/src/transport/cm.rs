//! RDMA CM-style connection management types.
//!
//! The shape follows librdmacm: a passive side listens on a port; an active
//! side connects to an (IPv4, port) with private data; the passive side
//! receives a connect request carrying that private data and accepts or
//! rejects it with private data of its own; both sides then see
//! `Established`, `Rejected` or `Unreachable`, and later `Disconnected`.
//! The QP of a CM connection is created by `cm_connect` / `cm_accept` and is
//! driven through INIT/RTR/RTS by the CM, as `rdma_create_qp` arranges.

use std::net::SocketAddrV4;

use super::{ConnId, ListenId, QpId, QpInit};

/// RDMA CM private data limits (IBA CM: REQ 92, REP 196, REJ 148 bytes;
/// librdmacm reserves none for RoCE with AF_IB, 56 for the IP header form on
/// REQ). rctb enforces the IP-form limits, which are what NVMe-oF uses.
pub const MAX_REQ_PRIVATE_DATA: usize = 56;
pub const MAX_REP_PRIVATE_DATA: usize = 196;
pub const MAX_REJ_PRIVATE_DATA: usize = 148;

/// Parameters of an active connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    pub remote: SocketAddrV4,
    pub qp: QpInit,
    pub private_data: Vec<u8>,
    /// Outstanding RDMA READs the peer may issue to us (our max_dest_rd_atomic).
    pub responder_resources: u8,
    /// Outstanding RDMA READs we may issue (our max_rd_atomic).
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

impl ConnectParams {
    pub fn new(remote: SocketAddrV4, qp: QpInit, private_data: Vec<u8>) -> Self {
        ConnectParams {
            remote,
            qp,
            private_data,
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

/// Parameters of a passive accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptParams {
    pub qp: QpInit,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
}

impl AcceptParams {
    pub fn new(qp: QpInit, private_data: Vec<u8>) -> Self {
        AcceptParams { qp, private_data, responder_resources: 16, initiator_depth: 16, rnr_retry_count: 7 }
    }
}

/// Why a connection attempt failed without a REJ from the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
pub enum CmEvent {
    /// A peer asks to connect to one of our listeners.
    ConnectRequest {
        listener: ListenId,
        conn: ConnId,
        remote: SocketAddrV4,
        private_data: Vec<u8>,
        /// The REQ's: RDMA READs and atomics the peer will serve for us at
        /// once (what our accept's `initiator_depth` may not exceed).
        responder_resources: u8,
        /// The REQ's: how many the peer will have in flight to us (what our
        /// accept's `responder_resources` need not exceed).
        initiator_depth: u8,
    },
    /// The connection is up; its QP is in RTS.
    Established { conn: ConnId, qp: QpId, private_data: Vec<u8> },
    /// The peer rejected our connect request.
    Rejected { conn: ConnId, private_data: Vec<u8> },
    /// The connect failed before the peer's application saw it.
    Unreachable { conn: ConnId, reason: UnreachableReason },
    /// Either side disconnected; the QP has been moved to ERR.
    Disconnected { conn: ConnId },
}

impl CmEvent {
    pub fn conn(&self) -> ConnId {
        match self {
            CmEvent::ConnectRequest { conn, .. }
            | CmEvent::Established { conn, .. }
            | CmEvent::Rejected { conn, .. }
            | CmEvent::Unreachable { conn, .. }
            | CmEvent::Disconnected { conn } => *conn,
        }
    }
}
