//! Status codes, READY outcomes and the error type of the session API
//! (`rc_server_abi.h`). Every [`RcError`] maps to exactly one [`Status`],
//! and every status to the HTTP answer the gateway gives (§3).

use std::fmt;

use thiserror::Error;

use crate::hipobj::{ChecksumError, ParamError, TokenError};
use crate::transport::TransportError;

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

            /// The ABI's numeric code (the enum's `u8` discriminant).
            pub fn code(self) -> u8 {
                self as u8
            }

            /// The ABI's spelling, e.g. `"NO_SESSION"`; `Display` prints the
            /// same.
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
        /// Code 0: the call succeeded (HTTP 200).
        Ok = 0 => "OK",
        /// Code 1: a parameter is malformed or out of range: a header
        /// value, the token, the checksum, size, offset or PSN (HTTP 400
        /// `InvalidRdmaRequest`).
        Arg = 1 => "ARG",
        /// Code 2: the call does not fit the session's state, e.g. READY
        /// twice or before the PREPARE was committed, or committing a GET
        /// that is not staged (HTTP 409 `RdmaSessionConflict`).
        State = 2 => "STATE",
        /// Code 3: the session belongs to another principal, or READY's
        /// cookie does not match; answered exactly as NO_SESSION (HTTP 404
        /// `NoSuchRdmaSession`).
        Session = 3 => "SESSION",
        /// Code 4: the session is past the step the call belongs to, was
        /// cancelled or expired, or a lease / view handle is unknown or
        /// already returned (HTTP 409 `RdmaSessionConflict`).
        Stale = 4 => "STALE",
        /// Code 5: no live session has this id (HTTP 404
        /// `NoSuchRdmaSession`).
        NoSession = 5 => "NO_SESSION",
        /// Code 6: the staging buffer or PUT view is already borrowed
        /// (HTTP 409 `RdmaSessionConflict`).
        Double = 6 => "DOUBLE",
        /// Code 7: READY's data phase failed; the session is reaped (HTTP
        /// 502 `RdmaTransferFailed`; [`RcError::http`] answers a timeout
        /// and a verify failure with their own codes).
        Wire = 7 => "WIRE",
        /// Code 8: the staged object is not the session's size; the session
        /// is reaped (HTTP 400 `InvalidRdmaRequest`).
        Short = 8 => "SHORT",
        /// Code 9: a value is longer than the protocol carries: a target
        /// over 2047 bytes, an etag or version id over 127 (HTTP 400
        /// `InvalidRdmaRequest`).
        Trunc = 9 => "TRUNC",
        /// Code 10: a resource limit or slot pool refused the call (HTTP
        /// 429 `RdmaResourceLimit`).
        Limit = 10 => "LIMIT",
        /// Code 11: a local verb failed, or something that should not
        /// happen did (HTTP 500 `InternalError`).
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
        /// Code 0: the data moved; the reply's `bytes_transferred` is the
        /// session's size.
        Ok = 0 => "OK",
        /// The peer was not ready (RNR or transport retries exhausted): the QP
        /// went back to INIT, the session to Prepared; READY may be retried.
        Busy = 1 => "BUSY",
        /// Code 2: no completion before the data phase's deadline
        /// (`t_exec`); the session is reaped.
        Timeout = 2 => "TIMEOUT",
        /// Code 3: a successful completion that was not the expected one
        /// (PUT: not a receive of RDMA WRITE with immediate, immediate not
        /// the cookie, or length not the size; GET: not an RDMA WRITE); the
        /// session is reaped.
        VerifyFail = 3 => "VERIFY_FAIL",
        /// Code 4: the data phase could not start (a QP transition or post
        /// failed), completed with another error status, its CQ could not be
        /// polled, or it was cancelled; the session is reaped.
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
#[non_exhaustive]
pub enum LimitKind {
    /// Live sessions of the whole server ([`Limits::max_sessions`](super::Limits::max_sessions)).
    Sessions,
    /// Staging bytes of the whole server ([`Limits::max_staging_bytes`](super::Limits::max_staging_bytes)).
    StagingBytes,
    /// QPs of the whole server, one per session ([`Limits::max_qps`](super::Limits::max_qps)).
    Qps,
    /// Live sessions of the principal ([`Limits::max_user_sessions`](super::Limits::max_user_sessions)).
    UserSessions,
    /// Staging bytes of the principal ([`Limits::max_user_staging_bytes`](super::Limits::max_user_staging_bytes)).
    UserStagingBytes,
    /// QPs of the principal ([`Limits::max_user_qps`](super::Limits::max_user_qps), when non-zero).
    UserQps,
    /// No free READY slot.
    ReadySlots,
    /// No free staging slot.
    StageSlots,
}

/// An error of the session API. [`RcError::status`] gives its ABI code.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RcError {
    /// An `x-amz-rdma-*` parameter broke its rule: ARG, or TRUNC for
    /// [`ParamError::TooLong`].
    #[error("ARG: {0}")]
    Param(#[from] ParamError),
    /// The client token did not decode or is not an RC token: ARG.
    #[error("ARG: {0}")]
    Token(#[from] TokenError),
    /// The checksum header is malformed: ARG.
    #[error("ARG: {0}")]
    Checksum(#[from] ChecksumError),
    /// A value broke a rule the session API checks itself (PREPARE's size,
    /// offset and PSN, the server's `gid_index`, the op of an in-process
    /// helper): ARG.
    #[error("ARG: {field}: {rule}")]
    Arg {
        /// The value's name, e.g. `"size"`, `"offset"`, `"psn"`.
        field: &'static str,
        /// The rule it broke.
        rule: &'static str,
    },
    /// The call does not fit the session's state (the text names the call
    /// and what was wrong): STATE.
    #[error("STATE: {0}")]
    State(&'static str),
    /// The caller is not the owner, or the cookie does not match.
    #[error("SESSION: owner or cookie mismatch")]
    Session,
    /// The session is past Prepared, was cancelled or expired (READY), or
    /// a staging lease / PUT view is unknown or already returned; the text
    /// says which: STALE.
    #[error("STALE: {0}")]
    Stale(&'static str),
    /// No live session has this id (never made, or already reaped):
    /// NO_SESSION.
    #[error("NO_SESSION: no such session")]
    NoSession,
    /// The staging buffer or the PUT view (the text names it) is already
    /// borrowed: DOUBLE.
    #[error("DOUBLE: {0} is already borrowed")]
    Double(&'static str),
    /// READY's data phase failed and the session is marked for reaping:
    /// WIRE.
    #[error("WIRE: data phase {outcome}: {detail}")]
    Wire {
        /// TIMEOUT, VERIFY_FAIL or WIRE_FAIL; BUSY when a BUSY could not
        /// be retried (the session was cancelled meanwhile, or its QP could
        /// not be re-armed).
        outcome: ReadyOutcome,
        /// What happened, for logs: the completion or the verb that failed.
        detail: String,
    },
    /// `finish_staging` reported a byte count other than the session's
    /// size; the session is reaped: SHORT.
    #[error("SHORT: {written} bytes staged, {expected} requested")]
    Short {
        /// Bytes the caller said it staged.
        written: u64,
        /// The session's size.
        expected: u64,
    },
    /// A value is longer than the protocol carries: TRUNC.
    #[error("TRUNC: {field} is {len} bytes, at most {max}")]
    Trunc {
        /// `"target"`, `"etag"` or `"version-id"`.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The most allowed: 2047 for the target, 127 for the others.
        max: usize,
    },
    /// A limit or slot pool refused the call (the kind names which): LIMIT.
    #[error("LIMIT: {0:?}")]
    Limit(LimitKind),
    /// A local verb failed (making a session's resources, copying staging
    /// or PUT data, waiting on the transport): INTERNAL.
    #[error("INTERNAL: {0}")]
    Transport(#[from] TransportError),
    /// Something that should not happen, such as a session id drawn twice:
    /// INTERNAL.
    #[error("INTERNAL: {0}")]
    Internal(&'static str),
    /// The service is closing: no new calls are admitted (HTTP 503).
    #[error("INTERNAL: the service is shutting down")]
    ShuttingDown,
}

impl RcError {
    /// The ABI status code this error maps to (see each variant).
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
