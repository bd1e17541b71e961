//! Errors of the initiator: local misuse, transport failures, the peer
//! breaking the protocol, and NVMe statuses, each its own variant.

use std::net::SocketAddrV4;

use thiserror::Error;

use super::protocol::{InvalidParameter, ProtocolError, RejectStatus, StatusError};
use crate::time::Duration;
use crate::transport::{InvalidValue, TransportError, UnreachableReason, WcStatus};

/// Everything an NVMe-oF operation can fail with.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum NvmeError {
    /// A local verb failed (names the verb).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Bad argument from the caller (names the field and the rule).
    #[error("invalid argument: {0}")]
    Invalid(#[from] InvalidValue),
    /// Building a structure failed (e.g. an NQN of the wrong length).
    #[error("{0}")]
    Build(ProtocolError),
    /// The target sent something that breaks the protocol.
    #[error("protocol error from the target: {0}")]
    Protocol(ProtocolError),
    /// A response named a command id with no command outstanding.
    #[error("protocol error from the target: response for unknown command id {cid} on queue {qid}")]
    UnknownCid { qid: u16, cid: u16 },
    /// Every command id of the queue is in use.
    #[error("queue {qid} is full ({outstanding} commands outstanding, depth {depth})")]
    QueueFull { qid: u16, depth: u16, outstanding: u16 },
    /// The command completed with an NVMe error status.
    #[error("{command} failed: {error}")]
    Status { command: &'static str, error: StatusError },
    /// Fabrics Connect was refused for an invalid parameter.
    #[error("connect refused: invalid {} ({error})", parameter.name())]
    ConnectInvalid { parameter: InvalidParameter, error: StatusError },
    /// The controller demands in-band authentication, which rctb does not do.
    #[error("the controller requires authentication (NVMe in-band authentication is not supported)")]
    AuthRequired,
    /// The target rejected the RDMA CM connect request.
    #[error("connect to {addr} rejected by the target: {}", reason.map_or("no NVMe/RDMA reason given".to_string(), |r| r.to_string()))]
    Rejected { addr: SocketAddrV4, reason: Option<RejectStatus> },
    /// Nothing answered, or nothing listens at the address.
    #[error("cannot reach an NVMe/RDMA target at {addr}: {}", unreachable_text(*.reason))]
    Unreachable { addr: SocketAddrV4, reason: UnreachableReason },
    /// A command did not complete in time (the queue is unusable after it).
    #[error("{command} on queue {qid} timed out after {after:?}")]
    Timeout { command: &'static str, qid: u16, after: Duration },
    /// A work request of the queue failed (the connection is gone).
    #[error("queue {qid}: {op} completed with {}", status.name())]
    Completion { qid: u16, op: &'static str, status: WcStatus },
    /// The queue was disconnected (by the target or a failure).
    #[error("queue {qid} is disconnected")]
    Disconnected { qid: u16 },
    /// CSTS.CFS: the controller reports a fatal error.
    #[error("the controller reports a fatal status (CSTS.CFS)")]
    ControllerFatal,
    /// CSTS.RDY did not come up within CAP.TO.
    #[error("the controller did not become ready within {waited:?} (CAP.TO)")]
    NotReady { waited: Duration },
    /// The target lacks something this initiator needs.
    #[error("unsupported by this initiator: {0}")]
    Unsupported(String),
}

fn unreachable_text(r: UnreachableReason) -> &'static str {
    match r {
        UnreachableReason::NoRoute => "no route (nothing answered)",
        UnreachableReason::NoListener => "nothing listens on that port",
        UnreachableReason::Timeout => "the connection attempt timed out",
    }
}

impl NvmeError {
    /// The NVMe status, when the error is one.
    pub fn status(&self) -> Option<StatusError> {
        match self {
            NvmeError::Status { error, .. } | NvmeError::ConnectInvalid { error, .. } => Some(*error),
            _ => None,
        }
    }
}
