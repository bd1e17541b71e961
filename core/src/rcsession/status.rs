//! Status codes, READY outcomes and the error type of the session API
//! (`rc_server_abi.h`). Every [`RcError`] maps to exactly one [`Status`],
//! and every status to the HTTP answer the gateway gives (§3).

use std::fmt;

use thiserror::Error;

use crate::transport::TransportError;
use crate::wire::hipobj::{ChecksumError, ParamError, TokenError};

/// A `#[repr(u8)]` code enum of the ABI (`rc_server_abi.h`) with its
/// table: `ALL` in code order, `code`, `name` (the ABI's spelling) and
/// `Display` (the name).
macro_rules! abi_codes {
    (
        $(#[$meta:meta])*
        pub enum $ty:ident { $($(#[$vmeta:meta])* $v:ident = $code:literal => $name:literal,)+ }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum $ty {
            $($(#[$vmeta])* $v = $code,)+
        }

        impl $ty {
            /// Every value, in code order.
            pub const ALL: [$ty; [$($ty::$v),+].len()] = [$($ty::$v),+];

            pub fn code(self) -> u8 {
                self as u8
            }

            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name,)+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

abi_codes! {
    /// The ABI status codes.
    pub enum Status {
        Ok = 0 => "OK",
        Arg = 1 => "ARG",
        State = 2 => "STATE",
        Session = 3 => "SESSION",
        Stale = 4 => "STALE",
        NoSession = 5 => "NO_SESSION",
        Double = 6 => "DOUBLE",
        Wire = 7 => "WIRE",
        Short = 8 => "SHORT",
        Trunc = 9 => "TRUNC",
        Limit = 10 => "LIMIT",
        Internal = 11 => "INTERNAL",
    }
}

impl Status {
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

abi_codes! {
    /// The outcome of a READY's data phase (`RC_READY_*`).
    pub enum ReadyOutcome {
        Ok = 0 => "OK",
        /// The peer was not ready (RNR or transport retries exhausted): the QP
        /// went back to INIT, the session to Prepared; READY may be retried.
        Busy = 1 => "BUSY",
        Timeout = 2 => "TIMEOUT",
        VerifyFail = 3 => "VERIFY_FAIL",
        WireFail = 4 => "WIRE_FAIL",
    }
}

impl ReadyOutcome {
    /// The HTTP status and S3-style code of a READY whose data phase ended
    /// with this outcome but gave no successful answer (§3a): TIMEOUT 504
    /// `RdmaTransferTimeout`, VERIFY_FAIL 502 `RdmaTransferVerifyFailed`,
    /// WIRE_FAIL 502 `RdmaTransferFailed`, BUSY 409 `RdmaSessionConflict`
    /// (READY may be retried), and OK 500 `SessionExpired`: the data moved
    /// but the session ended before its answer (it expired or was torn
    /// down meanwhile).
    pub fn http(self) -> (u16, &'static str) {
        match self {
            ReadyOutcome::Ok => (500, "SessionExpired"),
            ReadyOutcome::Busy => (409, "RdmaSessionConflict"),
            ReadyOutcome::Timeout => (504, "RdmaTransferTimeout"),
            ReadyOutcome::VerifyFail => (502, "RdmaTransferVerifyFailed"),
            ReadyOutcome::WireFail => (502, "RdmaTransferFailed"),
        }
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

    /// The HTTP answer: 503 while shutting down; a WIRE error by its
    /// outcome ([`ReadyOutcome::http`]: timeout 504, verify failure and
    /// wire failure 502 with their own codes; a BUSY that could not be
    /// retried, because the session was cancelled meanwhile, is a wire
    /// failure); else the status's.
    pub fn http(&self) -> (u16, &'static str) {
        match self {
            RcError::ShuttingDown => (503, "RdmaServiceUnavailable"),
            RcError::Wire { outcome: o @ (ReadyOutcome::Timeout | ReadyOutcome::VerifyFail), .. } => o.http(),
            other => other.status().http(),
        }
    }
}

#[cfg(test)]
mod codes {
    use super::*;

    #[test]
    fn status_codes_names_and_http_answers_are_the_abis() {
        let table: Vec<(u8, String, u16)> = Status::ALL.iter().map(|s| (s.code(), s.to_string(), s.http().0)).collect();
        let want = [
            (0, "OK", 200),
            (1, "ARG", 400),
            (2, "STATE", 409),
            (3, "SESSION", 404),
            (4, "STALE", 409),
            (5, "NO_SESSION", 404),
            (6, "DOUBLE", 409),
            (7, "WIRE", 502),
            (8, "SHORT", 400),
            (9, "TRUNC", 400),
            (10, "LIMIT", 429),
            (11, "INTERNAL", 500),
        ]
        .map(|(c, n, h)| (c, n.to_string(), h));
        assert_eq!(table, want);
        // SESSION is never told apart from NO_SESSION
        assert_eq!(Status::Session.http(), Status::NoSession.http());
    }

    #[test]
    fn ready_outcomes_are_the_abis() {
        let table: Vec<(u8, &str)> = ReadyOutcome::ALL.iter().map(|o| (o.code(), o.name())).collect();
        assert_eq!(table, [(0, "OK"), (1, "BUSY"), (2, "TIMEOUT"), (3, "VERIFY_FAIL"), (4, "WIRE_FAIL")]);
        assert_eq!(ReadyOutcome::VerifyFail.to_string(), "VERIFY_FAIL");
    }

    #[test]
    fn ready_outcomes_map_to_versitygws_http_answers() {
        let table: Vec<(&str, u16, &str)> =
            ReadyOutcome::ALL.iter().map(|o| (o.name(), o.http().0, o.http().1)).collect();
        assert_eq!(
            table,
            [
                ("OK", 500, "SessionExpired"),
                ("BUSY", 409, "RdmaSessionConflict"),
                ("TIMEOUT", 504, "RdmaTransferTimeout"),
                ("VERIFY_FAIL", 502, "RdmaTransferVerifyFailed"),
                ("WIRE_FAIL", 502, "RdmaTransferFailed"),
            ]
        );
        // The session API's WIRE error answers by its outcome.
        let wire = |outcome| RcError::Wire { outcome, detail: String::new() }.http();
        assert_eq!(wire(ReadyOutcome::Timeout), (504, "RdmaTransferTimeout"));
        assert_eq!(wire(ReadyOutcome::VerifyFail), (502, "RdmaTransferVerifyFailed"));
        assert_eq!(wire(ReadyOutcome::WireFail), (502, "RdmaTransferFailed"));
        assert_eq!(wire(ReadyOutcome::Busy), (502, "RdmaTransferFailed"), "a BUSY that cannot be retried");
        assert_eq!(RcError::Wire { outcome: ReadyOutcome::Timeout, detail: String::new() }.status(), Status::Wire);
        assert_eq!(RcError::ShuttingDown.http(), (503, "RdmaServiceUnavailable"));
    }
}
