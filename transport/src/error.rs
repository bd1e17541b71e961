//! Errors of the transport: local errors of a verb call. Errors the peer
//! causes arrive as completion statuses, never as `TransportError`.

use std::fmt;

use thiserror::Error;

use super::QpState;

/// A value that broke a rule: names the field, the value and the rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{field} = {value}: {rule}")]
pub struct InvalidValue {
    /// The argument or field that broke the rule, as the API names it (e.g.
    /// `rx_queue_depth`, `private_data`).
    pub field: &'static str,
    /// The offending value; a byte string's length, or 0 when the value is not
    /// a number (an empty name).
    pub value: u64,
    /// The rule it broke, with the valid range (e.g. "must be 0..=7").
    pub rule: &'static str,
}

impl InvalidValue {
    /// An error saying `field` = `value` breaks `rule`.
    pub fn new(field: &'static str, value: u64, rule: &'static str) -> Self {
        InvalidValue { field, value, rule }
    }
}

/// The verb (transport entry point) an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// [`Transport::device`](super::Transport::device) (`ibv_query_device`).
    QueryDevice,
    /// [`Transport::port`](super::Transport::port) (`ibv_query_port`, `ibv_query_gid`).
    QueryPort,
    /// [`Transport::alloc_pd`](super::Transport::alloc_pd) (`ibv_alloc_pd`).
    AllocPd,
    /// [`Transport::dealloc_pd`](super::Transport::dealloc_pd) (`ibv_dealloc_pd`).
    DeallocPd,
    /// [`Transport::reg_mr`](super::Transport::reg_mr) (`ibv_reg_mr`).
    RegMr,
    /// [`Transport::dereg_mr`](super::Transport::dereg_mr) (`ibv_dereg_mr`).
    DeregMr,
    /// [`mr_info`](super::Transport::mr_info), [`mr_read`](super::Transport::mr_read),
    /// [`mr_write`](super::Transport::mr_write) and [`mr_view`](super::Transport::mr_view): the
    /// application's own access to registered memory.
    MrAccess,
    /// [`Transport::create_cq`](super::Transport::create_cq) (`ibv_create_cq`).
    CreateCq,
    /// [`Transport::destroy_cq`](super::Transport::destroy_cq) (`ibv_destroy_cq`).
    DestroyCq,
    /// [`Transport::create_qp`](super::Transport::create_qp) (`ibv_create_qp`).
    CreateQp,
    /// [`Transport::modify_qp`](super::Transport::modify_qp) (`ibv_modify_qp`).
    ModifyQp,
    /// [`Transport::query_qp`](super::Transport::query_qp) (`ibv_query_qp`).
    QueryQp,
    /// [`Transport::destroy_qp`](super::Transport::destroy_qp) (`ibv_destroy_qp`).
    DestroyQp,
    /// [`Transport::post_send`](super::Transport::post_send) (`ibv_post_send`).
    PostSend,
    /// [`Transport::post_recv`](super::Transport::post_recv) (`ibv_post_recv`).
    PostRecv,
    /// [`Transport::poll_cq`](super::Transport::poll_cq) (`ibv_poll_cq`).
    PollCq,
    /// [`Transport::create_srq`](super::Transport::create_srq) (`ibv_create_srq`).
    CreateSrq,
    /// [`Transport::modify_srq`](super::Transport::modify_srq) (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    ModifySrq,
    /// [`Transport::destroy_srq`](super::Transport::destroy_srq) (`ibv_destroy_srq`).
    DestroySrq,
    /// [`Transport::post_srq_recv`](super::Transport::post_srq_recv) (`ibv_post_srq_recv`).
    PostSrqRecv,
    /// [`Transport::poll_async_event`](super::Transport::poll_async_event) (`ibv_get_async_event`).
    AsyncEvent,
    /// [`Transport::wait`](super::Transport::wait) (`ibv_req_notify_cq`,
    /// `ibv_get_cq_event`, `rdma_get_cm_event`).
    Wait,
    /// [`Transport::cm_listen`](super::Transport::cm_listen) (`rdma_bind_addr`, `rdma_listen`).
    CmListen,
    /// [`Transport::cm_connect`](super::Transport::cm_connect) (`rdma_resolve_addr`, `rdma_connect`).
    CmConnect,
    /// [`Transport::cm_accept`](super::Transport::cm_accept) (`rdma_accept`).
    CmAccept,
    /// [`Transport::cm_reject`](super::Transport::cm_reject) (`rdma_reject`).
    CmReject,
    /// [`Transport::cm_disconnect`](super::Transport::cm_disconnect) (`rdma_disconnect`).
    CmDisconnect,
    /// [`Transport::cm_destroy`](super::Transport::cm_destroy) and
    /// [`Transport::cm_close_listener`](super::Transport::cm_close_listener) (`rdma_destroy_id`).
    CmDestroy,
    /// The attributes the CM would move a connection's QP with
    /// (`rdma_init_qp_attr`); not a `Transport` method: the engine's
    /// `Endpoint::cm_qp_attr`.
    CmQpAttr,
    /// Sending the RTU for a connection whose QP the application drives
    /// (`rdma_establish`); not a `Transport` method: the engine's
    /// `Endpoint::cm_establish`.
    CmEstablish,
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
            Verb::CreateSrq => "create_srq",
            Verb::ModifySrq => "modify_srq",
            Verb::DestroySrq => "destroy_srq",
            Verb::PostSrqRecv => "post_srq_recv",
            Verb::AsyncEvent => "get_async_event",
            Verb::Wait => "wait",
            Verb::CmListen => "cm_listen",
            Verb::CmConnect => "cm_connect",
            Verb::CmAccept => "cm_accept",
            Verb::CmReject => "cm_reject",
            Verb::CmDisconnect => "cm_disconnect",
            Verb::CmDestroy => "cm_destroy",
            Verb::CmQpAttr => "cm_qp_attr",
            Verb::CmEstablish => "cm_establish",
        };
        f.write_str(s)
    }
}

/// A local error of a transport call. Every variant names the verb.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No RDMA device is present, or none has the configured name.
    #[error("{verb}: no RDMA device{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    NoDevice {
        /// The verb that failed.
        verb: Verb,
        /// What to check (e.g. load rxe, or the device list), when the
        /// backend knows.
        hint: Option<&'static str>,
    },
    /// A handle is unknown to this transport or already destroyed.
    #[error("{verb}: unknown or destroyed {handle}")]
    InvalidHandle {
        /// The verb that failed.
        verb: Verb,
        /// The handle in its display form, e.g. `QpId#3`.
        handle: String,
    },
    /// An argument broke a rule (a range, a length, a device limit).
    #[error("{verb}: {source}")]
    InvalidArgument {
        /// The verb that failed.
        verb: Verb,
        /// The field, its value and the rule.
        #[source]
        source: InvalidValue,
    },
    /// The QP's state does not allow the call: posting before RTS (receives:
    /// in RESET), or a transition not allowed from that state.
    #[error("{verb}: QP in state {state:?} does not allow {what}")]
    InvalidState {
        /// The verb that failed.
        verb: Verb,
        /// The QP's state when the call was made.
        state: QpState,
        /// What was refused: "posting work requests" or a transition name
        /// such as "INIT->RTR".
        what: &'static str,
    },
    /// The resource still has users, as verbs returns EBUSY: a PD with MRs or
    /// QPs, a CQ with QPs, a port with a listener, or a connection past its
    /// request.
    #[error("{verb}: {what} still in use ({by})")]
    Busy {
        /// The verb that failed.
        verb: Verb,
        /// The resource refused, e.g. `PdId#1` or `port 4420`.
        what: String,
        /// What still holds it, e.g. "2 memory regions, 0 queue pairs".
        by: String,
    },
    /// The send or receive queue already holds its capacity of work requests
    /// (verbs: ENOMEM from a post).
    #[error("{verb}: queue full ({what}: {limit})")]
    QueueFull {
        /// The verb that failed.
        verb: Verb,
        /// What filled up ("work requests").
        what: &'static str,
        /// The capacity: the QP's `max_send_wr` or `max_recv_wr`.
        limit: u32,
    },
    /// A resource ran out: memory for a region, or CQ entries (an overrun
    /// lost completions).
    #[error("{verb}: out of {what}")]
    Exhausted {
        /// The verb that failed.
        verb: Verb,
        /// The resource that ran out.
        what: &'static str,
    },
    /// An OS or library call failed (verbs and UDP backends).
    #[error("{verb}: {what} failed: errno {errno} ({message})")]
    Os {
        /// The verb that failed.
        verb: Verb,
        /// The C function or system call that failed, e.g. `ibv_modify_qp`.
        what: &'static str,
        /// Its `errno` (0 when the OS gave none).
        errno: i32,
        /// The error's text (`strerror`).
        message: String,
    },
    /// The backend cannot do this, e.g. RDMA CM on a device without a RoCE v2
    /// IPv4-mapped GID.
    #[error("{verb}: not supported: {what}")]
    Unsupported {
        /// The verb that failed.
        verb: Verb,
        /// What is not supported.
        what: &'static str,
    },
}

impl TransportError {
    /// An [`InvalidArgument`](Self::InvalidArgument) of `verb`: `field` =
    /// `value` breaks `rule`.
    pub fn invalid(verb: Verb, field: &'static str, value: u64, rule: &'static str) -> Self {
        TransportError::InvalidArgument { verb, source: InvalidValue::new(field, value, rule) }
    }

    /// An [`InvalidHandle`](Self::InvalidHandle) of `verb` naming `handle`.
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

/// The result of a transport call; the error defaults to [`TransportError`].
pub type Result<T, E = TransportError> = std::result::Result<T, E>;
