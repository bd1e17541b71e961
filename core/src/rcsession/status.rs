//! Status codes, READY outcomes and the error type of the session API
//! (`rc_server_abi.h`). Every [`RcError`] maps to exactly one [`Status`],
//! and every status to the HTTP answer the gateway gives (§3).

use std::fmt;

use thiserror::Error;

use crate::transport::TransportError;
use crate::wire::hipobj::{ChecksumError, ParamError, TokenError};

/// The ABI status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    Arg = 1,
    State = 2,
    Session = 3,
    Stale = 4,
    NoSession = 5,
    Double = 6,
    Wire = 7,
    Short = 8,
    Trunc = 9,
    Limit = 10,
    Internal = 11,
}

impl Status {
    pub const ALL: [Status; 12] = [
        Status::Ok,
        Status::Arg,
        Status::State,
        Status::Session,
        Status::Stale,
        Status::NoSession,
        Status::Double,
        Status::Wire,
        Status::Short,
        Status::Trunc,
        Status::Limit,
        Status::Internal,
    ];

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Arg => "ARG",
            Status::State => "STATE",
            Status::Session => "SESSION",
            Status::Stale => "STALE",
            Status::NoSession => "NO_SESSION",
            Status::Double => "DOUBLE",
            Status::Wire => "WIRE",
            Status::Short => "SHORT",
            Status::Trunc => "TRUNC",
            Status::Limit => "LIMIT",
            Status::Internal => "INTERNAL",
        }
    }

    /// The HTTP status and S3-style error code the gateway answers with.
    /// SESSION answers exactly as NO_SESSION: a session that exists for
    /// someone else is never revealed.
    pub fn http(self) -> (u16, &'static str) {
        match self {
            Status::Ok => (200, "OK"),
            Status::Arg | Status::Short | Status::Trunc => (400, "InvalidRdmaRequest"),
            Status::NoSession | Status::Session => (404, "NoSuchRdmaSession"),
            Status::Stale | Status::State | Status::Double => (409, "RdmaSessionConflict"),
            Status::Limit => (429, "RdmaResourceLimit"),
            Status::Wire => (502, "RdmaTransferFailed"),
            Status::Internal => (500, "InternalError"),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of a READY's data phase (`RC_READY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ReadyOutcome {
    Ok = 0,
    /// The peer was not ready (RNR or transport retries exhausted): the QP
    /// went back to INIT, the session to Prepared; READY may be retried.
    Busy = 1,
    Timeout = 2,
    VerifyFail = 3,
    WireFail = 4,
}

impl ReadyOutcome {
    pub fn name(self) -> &'static str {
        match self {
            ReadyOutcome::Ok => "OK",
            ReadyOutcome::Busy => "BUSY",
            ReadyOutcome::Timeout => "TIMEOUT",
            ReadyOutcome::VerifyFail => "VERIFY_FAIL",
            ReadyOutcome::WireFail => "WIRE_FAIL",
        }
    }
}

impl fmt::Display for ReadyOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which limit refused a PREPARE (checked in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LimitKind {
    Sessions,
    StagingBytes,
    Qps,
    UserSessions,
    UserStagingBytes,
    UserQps,
    /// No free READY slot.
    ReadySlots,
    /// No free staging slot.
    StageSlots,
}

/// An error of the session API. [`RcError::status`] gives its ABI code.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RcError {
    #[error("ARG: {0}")]
    Param(#[from] ParamError),
    #[error("ARG: {0}")]
    Token(#[from] TokenError),
    #[error("ARG: {0}")]
    Checksum(#[from] ChecksumError),
    #[error("ARG: {field}: {rule}")]
    Arg { field: &'static str, rule: &'static str },
    #[error("STATE: {0}")]
    State(&'static str),
    /// The caller is not the owner, or the cookie does not match.
    #[error("SESSION: owner or cookie mismatch")]
    Session,
    #[error("STALE: {0}")]
    Stale(&'static str),
    #[error("NO_SESSION: no such session")]
    NoSession,
    #[error("DOUBLE: {0} is already borrowed")]
    Double(&'static str),
    #[error("WIRE: data phase {outcome}: {detail}")]
    Wire { outcome: ReadyOutcome, detail: String },
    #[error("SHORT: {written} bytes staged, {expected} requested")]
    Short { written: u64, expected: u64 },
    #[error("TRUNC: {field} is {len} bytes, at most {max}")]
    Trunc { field: &'static str, len: usize, max: usize },
    #[error("LIMIT: {0:?}")]
    Limit(LimitKind),
    #[error("INTERNAL: {0}")]
    Transport(#[from] TransportError),
    #[error("INTERNAL: {0}")]
    Internal(&'static str),
    /// The service is closing: no new calls are admitted (HTTP 503).
    #[error("INTERNAL: the service is shutting down")]
    ShuttingDown,
}

impl RcError {
    pub fn status(&self) -> Status {
        match self {
            RcError::Param(ParamError::TooLong { .. }) => Status::Trunc,
            RcError::Param(_) | RcError::Token(_) | RcError::Checksum(_) | RcError::Arg { .. } => Status::Arg,
            RcError::State(_) => Status::State,
            RcError::Session => Status::Session,
            RcError::Stale(_) => Status::Stale,
            RcError::NoSession => Status::NoSession,
            RcError::Double(_) => Status::Double,
            RcError::Wire { .. } => Status::Wire,
            RcError::Short { .. } => Status::Short,
            RcError::Trunc { .. } => Status::Trunc,
            RcError::Limit(_) => Status::Limit,
            RcError::Transport(_) | RcError::Internal(_) | RcError::ShuttingDown => Status::Internal,
        }
    }

    /// The HTTP answer (503 while shutting down, else the status's).
    pub fn http(&self) -> (u16, &'static str) {
        match self {
            RcError::ShuttingDown => (503, "RdmaServiceUnavailable"),
            other => other.status().http(),
        }
    }
}
