//! The value types of the session API: requests, replies and the
//! consume-once handles, mirroring the Go binding's structs.

use std::fmt;

use super::status::ReadyOutcome;
use crate::hipobj::{Op, PrincipalId, RdmaToken, SessionId};
use crate::transport::Qpn;

/// A consume-once lease identifier: the session's epoch (unique per
/// session for the server's lifetime) and a per-session nonce (never 0).
/// Both parts must match for a handle to be accepted, and each is accepted
/// once. Being plain data, a handle can be copied or forged; the server's
/// bookkeeping, not the type, is what refuses a second use.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Handle {
    /// The session's epoch: 1 for the server's first session, one more for
    /// each after it.
    pub epoch: u64,
    /// The session's handle counter, from 1; a nonce of 0 is never accepted.
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
    /// Which lease this is; accepted until `finish_staging` returns it.
    pub handle: Handle,
    /// Bytes of the staging buffer: the session's size, which
    /// `finish_staging` must report as written.
    pub capacity: u64,
}

/// A borrowed PUT data view: read it with `read_put_data` or
/// `with_put_data`, return it with `finish_put` exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutView {
    /// Which view this is; accepted until `finish_put` returns it.
    pub handle: Handle,
    /// Bytes of PUT data received: the session's size.
    pub len: u64,
}

/// PREPARE's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareRequest {
    /// The requester; it owns the session, and only it may READY, CANCEL
    /// or query it.
    pub principal: PrincipalId,
    /// GET (the server writes into the client's memory) or PUT (the client
    /// writes into the staging region).
    pub op: Op,
    /// `/bucket/key[?query]` as the request carried it, at most 2047 bytes
    /// (else TRUNC); stored for [`SessionInfo`], not parsed here.
    pub target: String,
    /// Byte offset into the object; `offset + size` must be at most
    /// 0x7FFFFFFF (else ARG). Checked, not stored: the gateway applies it.
    pub offset: u64,
    /// Bytes to move, 1..=0x7FFFFFFF (else ARG); also the staging
    /// region's size and what the limits are charged.
    pub size: u64,
    /// The client QP's first PSN, 24 bits (else ARG): the server QP's
    /// receive PSN at READY.
    pub client_psn: u32,
    /// The value the data's immediate must carry and READY must repeat
    /// (else SESSION); the header codec requires it non-zero.
    pub cookie: u32,
    /// The client's 88-hex token (optionally `:addr:size`); `None` or empty
    /// is no token (loopback).
    pub client_token: Option<String>,
}

/// PREPARE's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareReply {
    /// The new session's id: 128 random bits.
    pub session: SessionId,
    /// The server QP's number: the client QP's RTR destination.
    pub server_qpn: Qpn,
    /// The server QP's first send PSN: its QPN & 0xFFFFFF.
    pub server_psn: u32,
    /// Address of the staging region, where a PUT client writes.
    pub staging_addr: u64,
    /// Remote key of the staging region.
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
            None => format!("200:{}", "0".repeat(crate::hipobj::TOKEN_HEX_LEN)),
        }
    }
}

/// READY's parameters. `client_qpn` 0 is the C layer's control-plane-only
/// test mode (§3): no data moves and the reply says OK with `bytes = size`.
/// It is a test mode, not a production answer (§3a): the gateway's HTTP
/// route refuses QPN 0 unless it was started in that mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyRequest {
    /// The requester; must be the session's owner (else SESSION).
    pub principal: PrincipalId,
    /// The session PREPARE returned.
    pub session: SessionId,
    /// Must equal PREPARE's cookie (else SESSION).
    pub cookie: u32,
    /// The client QP the server's QP connects to; 0 selects the
    /// control-plane-only test mode.
    pub client_qpn: Qpn,
    /// Address of the client region a GET writes into; 0 keeps the one
    /// from PREPARE's token.
    pub client_mr_addr: u64,
    /// Remote key of that region; 0 keeps the one from PREPARE's token.
    pub client_mr_rkey: u32,
}

/// READY's reply. `outcome` is OK or BUSY (the other outcomes are
/// [`RcError::Wire`](super::RcError::Wire)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyReply {
    /// Bytes moved: the session's size on OK, 0 on BUSY.
    pub bytes_transferred: u64,
    /// The session's cookie (sent back as `%08X`).
    pub cookie_echo: u32,
    /// OK, or BUSY: the session is Prepared again and READY may be retried.
    pub outcome: ReadyOutcome,
    /// The etag given when the GET was staged; empty if none was (and for
    /// a PUT, whose etag is only known at `finish_put`).
    pub etag: String,
    /// The version id given when the GET was staged; empty as `etag` is.
    pub version_id: String,
}

/// What READY started: finished at once, or a data phase in flight whose
/// result [`SessionManager::take_ready`](super::SessionManager::take_ready)
/// hands out once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyStart {
    /// A data phase is in flight: `progress` drives it, and `take_ready`
    /// with this ticket returns its result.
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
    /// The session's operation.
    pub op: Op,
    /// The target PREPARE carried.
    pub target: String,
}

/// CANCEL's success: the session is marked for reaping, or was already gone
/// (both answer 200).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// The session was marked; it is destroyed once its handles drain.
    Marked,
    /// No session had the id.
    AlreadyGone,
}

/// The session states of §3 (reaping is a flag beside them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SessionState {
    /// After PREPARE, and again after a BUSY: waiting for the commit and
    /// for READY.
    Prepared,
    /// READY claimed the session; its data phase is running.
    Transferring,
    /// The data moved (or a control-plane-only READY ran): waiting for
    /// `get_put_data` (PUT) or `finish_final` (GET).
    Completing,
}

/// One live session, for the admin listing (`GET /rc-sessions`) and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session's id.
    pub session: SessionId,
    /// Its owner.
    pub principal: PrincipalId,
    /// GET or PUT.
    pub op: Op,
    /// The target PREPARE carried.
    pub target: String,
    /// Bytes to move (and of staging).
    pub size: u64,
    /// Where the session is in the state chart.
    pub state: SessionState,
    /// `finish_prepare` committed it, so READY may come.
    pub published: bool,
    /// A GET's staging lease came back complete.
    pub staged: bool,
    /// Marked for reaping: destroyed once its handles have drained.
    pub reap_pending: bool,
    /// Outstanding staging lease / put view / completion refs.
    pub handles: u32,
    /// A staging lease or PUT view is out: the caller holds memory of the
    /// session's staging region.
    pub lent: bool,
    /// The session's server QP.
    pub server_qpn: Qpn,
    /// When PREPARE made it, on the transport's clock.
    pub created: crate::time::Instant,
}

/// A destroyed session (the C ABI's terminal notification), recorded once
/// [`SessionManager::record_ended`](super::SessionManager::record_ended) is
/// on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The session's id.
    pub session: SessionId,
    /// Its last READY's outcome; `None` when no READY finished (cancelled,
    /// expired or abandoned before its data moved).
    pub outcome: Option<ReadyOutcome>,
    /// Bytes its data phase moved: the size after an OK, else 0.
    pub bytes: u64,
}

/// Resources held against the limits, and what was leaked on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Sessions charged against the limits (live until destroyed).
    pub sessions: u32,
    /// Staging bytes charged: the sum of those sessions' sizes.
    pub staging_bytes: u64,
    /// QPs charged, one per session.
    pub qps: u32,
    /// Per principal: (sessions, staging bytes). Principals at zero are absent.
    pub per_user: std::collections::BTreeMap<PrincipalId, (u32, u64)>,
    /// READY slots free now (of `max_ready_slots`, default 64).
    pub ready_slots_free: u32,
    /// Staging slots free now (of `max_stage_slots`, default 32).
    pub stage_slots_free: u32,
    /// Staging regions whose deregistration failed: kept registered (never
    /// freed) because the NIC may still touch them.
    pub leaked_mrs: u32,
    /// QPs or CQs whose destroy failed (their staging region is leaked too).
    pub leaked_qps: u32,
}
