//! The value types of the session API: requests, replies and the
//! consume-once handles, mirroring the Go binding's structs.

use std::fmt;

use super::status::ReadyOutcome;
use crate::transport::Qpn;
use crate::wire::hipobj::{Op, PrincipalId, RdmaToken, SessionId};

/// A consume-once lease identifier: the session's epoch (unique per
/// session for the server's lifetime) and a per-session nonce (never 0).
/// Both parts must match for a handle to be accepted, and each is accepted
/// once. Being plain data, a handle can be copied or forged; the server's
/// bookkeeping, not the type, is what refuses a second use.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Handle {
    pub epoch: u64,
    pub nonce: u64,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Handle({}:{})", self.epoch, self.nonce)
    }
}

/// A borrowed GET staging buffer: fill it with
/// [`SessionManager::write_staging`](super::SessionManager::write_staging),
/// return it with `finish_staging` exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingLease {
    pub handle: Handle,
    pub capacity: u64,
}

/// A borrowed PUT data view: read it with `read_put_data` or
/// `with_put_data`, return it with `finish_put` exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutView {
    pub handle: Handle,
    pub len: u64,
}

/// PREPARE's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareRequest {
    pub principal: PrincipalId,
    pub op: Op,
    pub target: String,
    pub offset: u64,
    pub size: u64,
    pub client_psn: u32,
    pub cookie: u32,
    /// The client's 88-hex token (optionally `:addr:size`); `None` or empty
    /// is no token (loopback).
    pub client_token: Option<String>,
}

/// PREPARE's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareReply {
    pub session: SessionId,
    pub server_qpn: Qpn,
    pub server_psn: u32,
    pub staging_addr: u64,
    pub staging_rkey: u32,
    /// The server's endpoint token; `None` when the client sent no token
    /// (the reply header then carries 88 zeros).
    pub reply_token: Option<RdmaToken>,
}

impl PrepareReply {
    /// The `x-amz-rdma-reply` header value: `200:<88 hex>`.
    pub fn reply_header(&self) -> String {
        match &self.reply_token {
            Some(t) => format!("200:{}", t.to_hex()),
            None => format!("200:{}", "0".repeat(crate::wire::hipobj::TOKEN_HEX_LEN)),
        }
    }
}

/// READY's parameters. `client_qpn` 0 is the C layer's control-plane-only
/// test mode (§3): no data moves and the reply says OK with `bytes = size`.
/// It is a test mode, not a production answer (§3a): the gateway's HTTP
/// route refuses QPN 0 unless it was started in that mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyRequest {
    pub principal: PrincipalId,
    pub session: SessionId,
    pub cookie: u32,
    pub client_qpn: Qpn,
    pub client_mr_addr: u64,
    pub client_mr_rkey: u32,
}

/// READY's reply. `outcome` is OK or BUSY (the other outcomes are
/// [`RcError::Wire`](super::RcError::Wire)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyReply {
    pub bytes_transferred: u64,
    pub cookie_echo: u32,
    pub outcome: ReadyOutcome,
    pub etag: String,
    pub version_id: String,
}

/// What READY started: finished at once, or a data phase in flight whose
/// result [`SessionManager::take_ready`](super::SessionManager::take_ready)
/// hands out once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyStart {
    Pending(ReadyTicket),
    /// Control-plane-only (client QPN 0): done, OK.
    Done,
}

/// Identifies one READY's data phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadyTicket(pub(super) u64);

/// READY re-authorisation facts (`SessionInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    pub op: Op,
    pub target: String,
}

/// CANCEL's success: the session is marked for reaping, or was already gone
/// (both answer 200).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    Marked,
    AlreadyGone,
}

/// The session states of §3 (reaping is a flag beside them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SessionState {
    Prepared,
    Transferring,
    Completing,
}

/// One live session, for the admin listing (`GET /rc-sessions`) and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    pub session: SessionId,
    pub principal: PrincipalId,
    pub op: Op,
    pub target: String,
    pub size: u64,
    pub state: SessionState,
    pub published: bool,
    pub staged: bool,
    pub reap_pending: bool,
    /// Outstanding staging lease / put view / completion refs.
    pub handles: u32,
    pub server_qpn: Qpn,
}

/// Resources held against the limits, and what was leaked on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub sessions: u32,
    pub staging_bytes: u64,
    pub qps: u32,
    /// Per principal: (sessions, staging bytes). Principals at zero are absent.
    pub per_user: std::collections::BTreeMap<PrincipalId, (u32, u64)>,
    pub ready_slots_free: u32,
    pub stage_slots_free: u32,
    /// Staging regions whose deregistration failed: kept registered (never
    /// freed) because the NIC may still touch them.
    pub leaked_mrs: u32,
    /// QPs or CQs whose destroy failed (their staging region is leaked too).
    pub leaked_qps: u32,
}
