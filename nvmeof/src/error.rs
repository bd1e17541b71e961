//! Errors of the initiator: local misuse, transport failures, the peer
//! breaking the protocol, and NVMe statuses, each its own variant.

use std::net::SocketAddrV4;

use thiserror::Error;

use super::protocol::{InvalidParameter, ProtocolError, RejectStatus, StatusError};
use crate::time::Duration;
use crate::transport::{InvalidValue, TransportError, UnreachableReason, WcStatus};

/// Everything an NVMe-oF operation can fail with.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
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
    /// A response named a command id with no command outstanding (or one
    /// already answered); the queue fails with it.
    #[error("protocol error from the target: response for unknown command id {cid} on queue {qid}")]
    UnknownCid {
        /// The queue the response arrived on (0 = admin).
        qid: u16,
        /// The command id the response carried.
        cid: u16,
    },
    /// Every command id of the queue is in use. Unlike the other queue
    /// errors it leaves the queue usable: submit again once a command
    /// finishes.
    #[error("queue {qid} is full ({outstanding} commands outstanding, depth {depth})")]
    QueueFull {
        /// The refusing queue (for tickets: the first I/O queue, standing
        /// for all of them).
        qid: u16,
        /// That queue's depth in entries.
        depth: u16,
        /// Commands it had outstanding when it refused.
        outstanding: u16,
    },
    /// The command completed with an NVMe error status; the queue stays
    /// usable.
    #[error("{command} failed: {error}")]
    Status {
        /// The command's name, e.g. `"Read"`, `"Identify"`, `"Keep Alive"`.
        command: &'static str,
        /// The status (SCT, SC, DNR) and the completion's DW0/DW1.
        error: StatusError,
    },
    /// Fabrics Connect was refused for an invalid parameter (command
    /// specific status "Connect Invalid Parameters").
    #[error("connect refused: invalid {} ({error})", parameter.name())]
    ConnectInvalid {
        /// The parameter the target named in DW0 (command or connect data,
        /// and its byte offset).
        parameter: InvalidParameter,
        /// The full status of the refused Connect.
        error: StatusError,
    },
    /// The controller demands in-band authentication, which rctb does not do.
    #[error("the controller requires authentication (NVMe in-band authentication is not supported)")]
    AuthRequired,
    /// The target rejected the RDMA CM connect request.
    #[error("connect to {addr} rejected by the target: {}", reason.map_or("no NVMe/RDMA reason given".to_string(), |r| r.to_string()))]
    Rejected {
        /// The target's address.
        addr: SocketAddrV4,
        /// The NVMe/RDMA reject status from the reject's private data;
        /// `None` when it carried none or it did not decode.
        reason: Option<RejectStatus>,
    },
    /// Nothing answered, or nothing listens at the address.
    #[error("cannot reach an NVMe/RDMA target at {addr}: {}", unreachable_text(*.reason))]
    Unreachable {
        /// The address the connect went to.
        addr: SocketAddrV4,
        /// What the RDMA CM reported: no route, no listener, or a timeout.
        reason: UnreachableReason,
    },
    /// A command did not complete in time (the queue is unusable after it).
    #[error("{command} on queue {qid} timed out after {after:?}")]
    Timeout {
        /// The command's name, or `"RDMA CM connect"` for a connect.
        command: &'static str,
        /// The queue it ran on (0 = admin).
        qid: u16,
        /// The configured timeout that elapsed (transport time).
        after: Duration,
    },
    /// A work request of the queue failed (the connection is gone).
    #[error("queue {qid}: {op} completed with {}", status.name())]
    Completion {
        /// The queue whose work request failed (0 = admin).
        qid: u16,
        /// `"command SEND"` or `"response receive"`.
        op: &'static str,
        /// The work completion's error status.
        status: WcStatus,
    },
    /// The queue was disconnected (by the target or a failure), or closed
    /// locally; also the error of a closed controller and of tickets a
    /// reconnect cut short.
    #[error("queue {qid} is disconnected")]
    Disconnected {
        /// The queue (0 = admin, and for controller-wide cases).
        qid: u16,
    },
    /// CSTS.CFS: the controller reports a fatal error.
    #[error("the controller reports a fatal status (CSTS.CFS)")]
    ControllerFatal,
    /// CSTS.RDY did not come up within CAP.TO.
    #[error("the controller did not become ready within {waited:?} (CAP.TO)")]
    NotReady {
        /// Transport time from the answer to the CC.EN write to the last
        /// CSTS read that still lacked RDY: at least (CAP.TO + 1) x 500 ms.
        waited: Duration,
    },
    /// The target lacks something this initiator needs.
    #[error("unsupported by this initiator: {0}")]
    Unsupported(String),
}

fn unreachable_text(r: UnreachableReason) -> &'static str {
    match r {
        UnreachableReason::NoRoute => "no route (nothing answered)",
        UnreachableReason::NoListener => "nothing listens on that port",
        UnreachableReason::Timeout => "the connection attempt timed out",
        _ => "the connection attempt failed",
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

/// Bringing a controller up failed ([`Controller::connect`] or
/// [`Controller::start`]): the error, and the transport handed back so the
/// caller can retry on it or close it.
///
/// It is a [`std::error::Error`] whose [`source`](std::error::Error::source)
/// is the [`NvmeError`], so `?` carries it into `Box<dyn Error>` (and into
/// `anyhow` when `T` is `Send + Sync + 'static`); `?` into a function that
/// returns [`NvmeError`] drops the transport and keeps the error.
///
/// [`Controller::connect`]: crate::Controller::connect
/// [`Controller::start`]: crate::Controller::start
pub struct ConnectError<T> {
    transport: T,
    error: NvmeError,
}

impl<T> ConnectError<T> {
    pub(crate) fn new(transport: T, error: NvmeError) -> Self {
        ConnectError { transport, error }
    }

    /// Why the bring-up failed.
    pub fn error(&self) -> &NvmeError {
        &self.error
    }

    /// The transport the bring-up ran on (everything it made is released).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, for another attempt; the error is dropped.
    pub fn into_transport(self) -> T {
        self.transport
    }

    /// The error; the transport is dropped.
    pub fn into_error(self) -> NvmeError {
        self.error
    }

    /// The transport and the error.
    pub fn into_parts(self) -> (T, NvmeError) {
        (self.transport, self.error)
    }
}

// By hand, not derived: a transport need not be `Debug` for its error to be.
impl<T> std::fmt::Debug for ConnectError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectError").field("error", &self.error).finish_non_exhaustive()
    }
}

impl<T> std::fmt::Display for ConnectError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NVMe-oF controller bring-up failed")
    }
}

impl<T> std::error::Error for ConnectError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<T> From<ConnectError<T>> for NvmeError {
    fn from(e: ConnectError<T>) -> Self {
        e.error
    }
}
