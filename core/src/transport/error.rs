//! Errors of the transport: local errors of a verb call. Errors the peer
//! causes arrive as completion statuses, never as `TransportError`.

use std::fmt;

use thiserror::Error;

use super::QpState;

/// A value that broke a rule: names the field, the value and the rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{field} = {value}: {rule}")]
pub struct InvalidValue {
    pub field: &'static str,
    pub value: u64,
    pub rule: &'static str,
}

impl InvalidValue {
    pub fn new(field: &'static str, value: u64, rule: &'static str) -> Self {
        InvalidValue { field, value, rule }
    }
}

/// The verb (transport entry point) an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    QueryDevice,
    QueryPort,
    AllocPd,
    DeallocPd,
    RegMr,
    DeregMr,
    MrAccess,
    CreateCq,
    DestroyCq,
    CreateQp,
    ModifyQp,
    QueryQp,
    DestroyQp,
    PostSend,
    PostRecv,
    PollCq,
    Wait,
    CmListen,
    CmConnect,
    CmAccept,
    CmReject,
    CmDisconnect,
    CmDestroy,
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Verb::QueryDevice => "query_device",
            Verb::QueryPort => "query_port",
            Verb::AllocPd => "alloc_pd",
            Verb::DeallocPd => "dealloc_pd",
            Verb::RegMr => "reg_mr",
            Verb::DeregMr => "dereg_mr",
            Verb::MrAccess => "mr_access",
            Verb::CreateCq => "create_cq",
            Verb::DestroyCq => "destroy_cq",
            Verb::CreateQp => "create_qp",
            Verb::ModifyQp => "modify_qp",
            Verb::QueryQp => "query_qp",
            Verb::DestroyQp => "destroy_qp",
            Verb::PostSend => "post_send",
            Verb::PostRecv => "post_recv",
            Verb::PollCq => "poll_cq",
            Verb::Wait => "wait",
            Verb::CmListen => "cm_listen",
            Verb::CmConnect => "cm_connect",
            Verb::CmAccept => "cm_accept",
            Verb::CmReject => "cm_reject",
            Verb::CmDisconnect => "cm_disconnect",
            Verb::CmDestroy => "cm_destroy",
        };
        f.write_str(s)
    }
}

/// A local error of a transport call. Every variant names the verb.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TransportError {
    #[error("{verb}: no RDMA device{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    NoDevice { verb: Verb, hint: Option<&'static str> },
    #[error("{verb}: unknown or destroyed {handle}")]
    InvalidHandle { verb: Verb, handle: String },
    #[error("{verb}: {source}")]
    InvalidArgument {
        verb: Verb,
        #[source]
        source: InvalidValue,
    },
    #[error("{verb}: QP in state {state:?} does not allow {what}")]
    InvalidState { verb: Verb, state: QpState, what: &'static str },
    #[error("{verb}: {what} still in use ({by})")]
    Busy { verb: Verb, what: String, by: String },
    #[error("{verb}: queue full ({what}: {limit})")]
    QueueFull { verb: Verb, what: &'static str, limit: u32 },
    #[error("{verb}: out of {what}")]
    Exhausted { verb: Verb, what: &'static str },
    #[error("{verb}: {what} failed: errno {errno} ({message})")]
    Os { verb: Verb, what: &'static str, errno: i32, message: String },
    #[error("{verb}: not supported: {what}")]
    Unsupported { verb: Verb, what: &'static str },
}

impl TransportError {
    pub fn invalid(verb: Verb, field: &'static str, value: u64, rule: &'static str) -> Self {
        TransportError::InvalidArgument { verb, source: InvalidValue::new(field, value, rule) }
    }

    pub fn handle(verb: Verb, handle: impl fmt::Display) -> Self {
        TransportError::InvalidHandle { verb, handle: handle.to_string() }
    }

    /// The verb this error came from.
    pub fn verb(&self) -> Verb {
        match self {
            TransportError::NoDevice { verb, .. }
            | TransportError::InvalidHandle { verb, .. }
            | TransportError::InvalidArgument { verb, .. }
            | TransportError::InvalidState { verb, .. }
            | TransportError::Busy { verb, .. }
            | TransportError::QueueFull { verb, .. }
            | TransportError::Exhausted { verb, .. }
            | TransportError::Os { verb, .. }
            | TransportError::Unsupported { verb, .. } => *verb,
        }
    }
}

pub type Result<T, E = TransportError> = std::result::Result<T, E>;
