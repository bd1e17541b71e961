//! The session manager: the state chart of docs/protocols.md §3 over one
//! transport. PREPARE, the staging lease, finish_prepare, session info,
//! CANCEL and the PUT view live here; READY and the data phase in
//! `datapath.rs`; expiry and teardown in `reaper.rs`.
//!
//! Every method is a short, non-blocking step: the data phase is started by
//! `ready` and finished by `progress` (which polls the sessions' CQs), so
//! many clients and the server can share one thread and one simulator.
//! [`RcService`](super::RcService) wraps a manager for use across threads.

use std::collections::{BTreeMap, BTreeSet};

use rand_core::RngCore;

use super::config::ServerConfig;
use super::status::{LimitKind, RcError, ReadyOutcome};
use super::types::*;
use crate::hipobj::{ClientToken, MAX_OFFSET_PLUS_SIZE, MAX_TARGET_LEN, Op, PrincipalId, RdmaToken, SessionId};
use crate::time::Instant;
use crate::transport::{
    Access, CqId, Gid, InitAttr, MrInfo, MrVisitor, Mtu, PdId, Psn, QpCaps, QpInfo, QpInit, QpTransition, Transport,
};

/// Etags and version ids longer than this are TRUNC.
pub const MAX_ETAG_LEN: usize = 127;
/// CQ entries and QP work requests per session (§3).
pub(super) const SESSION_CQ_DEPTH: u32 = 16;
pub(super) const SESSION_QP_WRS: u32 = 16;

/// The data phase in flight for a session.
#[derive(Clone, Copy, Debug)]
pub(super) struct Transfer {
    pub ticket: ReadyTicket,
    pub deadline: Option<Instant>,
}

#[derive(Debug)]
pub(super) struct Session {
    pub id: SessionId,
    pub epoch: u64,
    pub next_nonce: u64,
    pub principal: PrincipalId,
    pub op: Op,
    pub target: String,
    pub size: u64,
    pub client_psn: Psn,
    pub cookie: u32,
    /// The peer GID from the PREPARE token; `None` = loopback (our own GID).
    pub peer_gid: Option<Gid>,
    pub client_mr: (u64, u32),
    pub state: SessionState,
    pub published: bool,
    pub stage_done: bool,
    pub reap_pending: bool,
    /// When PREPARE made it (the snapshot's age).
    pub created: Instant,
    pub prep_deadline: Option<Instant>,
    pub exec_deadline: Option<Instant>,
    /// The session's own PD: its QP can reach its staging region and no
    /// other session's, even with a leaked or guessed rkey.
    pub pd: PdId,
    pub qp: QpInfo,
    pub cq: CqId,
    pub staging: MrInfo,
    pub staging_lease: Option<Handle>,
    pub put_view: Option<Handle>,
    /// Held from READY's claim until finish_final (GET) or get_put_data (PUT).
    pub active_ref: u32,
    /// Held by a borrowed PUT view until finish_put.
    pub put_ref: u32,
    pub etag: String,
    pub version_id: String,
    pub last_outcome: Option<ReadyOutcome>,
    pub transfer: Option<Transfer>,
}

impl Session {
    pub fn server_psn(&self) -> Psn {
        Psn::wrapping(self.qp.qpn)
    }

    fn new_handle(&mut self) -> Handle {
        let h = Handle { epoch: self.epoch, nonce: self.next_nonce };
        self.next_nonce += 1;
        h
    }

    pub fn drained(&self) -> bool {
        self.staging_lease.is_none() && self.put_view.is_none() && self.active_ref == 0 && self.put_ref == 0
    }
}

#[derive(Debug, Default)]
pub(super) struct Accounting {
    pub sessions: u32,
    pub staging_bytes: u64,
    pub qps: u32,
    pub per_user: BTreeMap<PrincipalId, (u32, u64)>,
}

/// The hipobj-rc-v2 session server over a [`Transport`] (the C server's
/// `rc_server`), with session ids drawn from the injected RNG `R`.
///
/// # Calls
/// - GET: `prepare` -> `borrow_staging` -> `write_staging` ->
///   `finish_staging` -> `finish_prepare(true)` -> (client) `ready` ->
///   `progress` until `take_ready` gives the reply -> `finish_final`.
/// - PUT: `prepare` -> `finish_prepare(true)` -> `ready` -> `progress` /
///   `take_ready` -> `get_put_data` -> `read_put_data` -> `finish_put`.
/// - Anytime: `cancel`, `session_info`, `reap` (also run by the mutating
///   calls and by `progress`), `sessions`, `usage`.
///
/// # Thread safety
/// The manager is `Send` when `T` and `R` are; it is a plain state machine
/// with `&mut self` methods. Share it across threads through
/// [`RcService`](super::RcService) (a mutex plus TryEnter/Leave/Close).
#[derive(Debug)]
pub struct SessionManager<T: Transport, R: RngCore> {
    pub(super) t: T,
    rng: R,
    pub(super) cfg: ServerConfig,
    pub(super) own_gid: Gid,
    pub(super) active_mtu: Mtu,
    pub(super) sessions: BTreeMap<SessionId, Session>,
    pub(super) acct: Accounting,
    next_epoch: u64,
    pub(super) next_ticket: u64,
    pub(super) ready_slots_free: u32,
    pub(super) stage_slots_free: u32,
    /// Sessions with a data phase in flight.
    pub(super) in_flight: BTreeSet<SessionId>,
    /// Finished data phases not yet taken.
    pub(super) results: BTreeMap<ReadyTicket, Result<ReadyReply, RcError>>,
    pub(super) leaked_mrs: Vec<MrInfo>,
    pub(super) leaked_qps: u32,
    /// Destroyed sessions not yet taken, when [`Self::record_ended`] is on.
    pub(super) ended: Option<Vec<Ended>>,
}

impl<T: Transport, R: RngCore> SessionManager<T, R> {
    /// Opens the server: reads the port's active MTU and our GID at
    /// `cfg.gid_index` once.
    pub fn new(t: T, rng: R, cfg: ServerConfig) -> Result<Self, RcError> {
        let port = t.port(cfg.port())?;
        let own_gid = port
            .gids
            .iter()
            .find(|g| g.index == cfg.gid_index)
            .map(|g| g.gid)
            .ok_or(RcError::Arg { field: "gid_index", rule: "no such entry in the port's GID table" })?;
        Ok(SessionManager {
            t,
            rng,
            ready_slots_free: cfg.ready_slots(),
            stage_slots_free: cfg.stage_slots(),
            cfg,
            own_gid,
            active_mtu: port.active_mtu,
            sessions: BTreeMap::new(),
            acct: Accounting::default(),
            next_epoch: 1,
            next_ticket: 1,
            in_flight: BTreeSet::new(),
            results: BTreeMap::new(),
            leaked_mrs: Vec::new(),
            leaked_qps: 0,
            ended: None,
        })
    }

    /// The configuration the server was opened with.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// The transport the sessions live on.
    pub fn transport(&self) -> &T {
        &self.t
    }

    /// The transport, e.g. to `wait` on [`Self::wait_set`].
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.t
    }

    /// From now on, every destroyed session leaves an [`Ended`] record for
    /// [`Self::take_ended`] (the C ABI's terminal notification: one per
    /// session, delivered by the caller after it let go of the lock). Off
    /// by default, so a caller that never takes them does not grow a list.
    pub fn record_ended(&mut self) {
        self.ended.get_or_insert_with(Vec::new);
    }

    /// The sessions destroyed since the last call, in the order they went
    /// (empty unless [`Self::record_ended`] is on).
    pub fn take_ended(&mut self) -> Vec<Ended> {
        self.ended.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The staging region of a live session: where a GET's data is staged
    /// and a PUT's lands. Its `addr` is what the transport registered (a
    /// host address on verbs, where the C ABI lends it out as a pointer).
    pub fn staging_region(&self, id: &SessionId) -> Option<MrInfo> {
        self.sessions.get(id).map(|s| s.staging)
    }

    /// The transport's clock: the time every deadline is measured in.
    pub fn now(&self) -> Instant {
        self.t.now()
    }

    // ---- PREPARE ----

    /// PREPARE: validates, takes the limits, creates the session's CQ, QP
    /// (INIT) and zeroed staging region, and draws its id.
    pub fn prepare(&mut self, req: &PrepareRequest) -> Result<PrepareReply, RcError> {
        if req.size == 0 || req.size > MAX_OFFSET_PLUS_SIZE {
            return Err(RcError::Arg { field: "size", rule: "must be 1..=0x7FFFFFFF" });
        }
        if req.offset > MAX_OFFSET_PLUS_SIZE - req.size {
            return Err(RcError::Arg { field: "offset", rule: "offset + size must be at most 0x7FFFFFFF" });
        }
        let client_psn =
            Psn::new(req.client_psn).map_err(|_| RcError::Arg { field: "psn", rule: "must fit 24 bits" })?;
        self.take_limits(&req.principal, req.size)?;
        match self.prepare_resources(req, client_psn) {
            Ok(reply) => Ok(reply),
            Err(e) => {
                self.release_limits(&req.principal, req.size);
                Err(e)
            }
        }
    }

    fn prepare_resources(&mut self, req: &PrepareRequest, client_psn: Psn) -> Result<PrepareReply, RcError> {
        if req.target.len() > MAX_TARGET_LEN {
            return Err(RcError::Trunc { field: "target", len: req.target.len(), max: MAX_TARGET_LEN });
        }
        let token = match req.client_token.as_deref() {
            None | Some("") => None,
            Some(s) => match ClientToken::parse(s)? {
                ClientToken::Loopback => None,
                ClientToken::Rc { token, .. } => Some(token),
            },
        };
        let pd = self.t.alloc_pd()?;
        let cq = match self.t.create_cq(SESSION_CQ_DEPTH) {
            Ok(cq) => cq,
            Err(e) => {
                self.rollback(pd, None, None, None);
                return Err(e.into());
            }
        };
        let qp = match self.t.create_qp(&QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            caps: QpCaps {
                max_send_wr: SESSION_QP_WRS,
                max_recv_wr: SESSION_QP_WRS,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
            srq: None,
        }) {
            Ok(qp) => qp,
            Err(e) => {
                self.rollback(pd, None, Some(cq), None);
                return Err(e.into());
            }
        };
        let init = QpTransition::Init(InitAttr {
            pkey_index: 0,
            port: self.cfg.port(),
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        });
        if let Err(e) = self.t.modify_qp(qp.id, &init) {
            self.rollback(pd, Some(qp), Some(cq), None);
            return Err(e.into());
        }
        let staging = match self.t.reg_mr(pd, req.size, Access::LOCAL_WRITE | Access::REMOTE_WRITE) {
            Ok(mr) => mr,
            Err(e) => {
                self.rollback(pd, Some(qp), Some(cq), None);
                return Err(e.into());
            }
        };
        let mut id_bytes = [0u8; 16];
        self.rng.fill_bytes(&mut id_bytes);
        let id = SessionId(u128::from_be_bytes(id_bytes));
        if self.sessions.contains_key(&id) {
            self.rollback(pd, Some(qp), Some(cq), Some(staging));
            return Err(RcError::Internal("session id collision"));
        }
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let now = self.t.now();
        let session = Session {
            id,
            epoch,
            next_nonce: 1,
            principal: req.principal,
            op: req.op,
            target: req.target.clone(),
            size: req.size,
            client_psn,
            cookie: req.cookie,
            peer_gid: token.map(|t| t.gid),
            client_mr: token.map_or((0, 0), |t| (t.remote_addr, t.rkey)),
            state: SessionState::Prepared,
            published: false,
            stage_done: false,
            reap_pending: false,
            created: now,
            prep_deadline: deadline(now, self.cfg.t_prep),
            exec_deadline: None,
            pd,
            qp,
            cq,
            staging,
            staging_lease: None,
            put_view: None,
            active_ref: 0,
            put_ref: 0,
            etag: String::new(),
            version_id: String::new(),
            last_outcome: None,
            transfer: None,
        };
        let reply = PrepareReply {
            session: id,
            server_qpn: qp.qpn,
            server_psn: session.server_psn().get(),
            staging_addr: staging.addr,
            staging_rkey: staging.rkey,
            reply_token: token.map(|_| RdmaToken::rc(qp.qpn, self.own_gid, self.cfg.port())),
        };
        self.sessions.insert(id, session);
        Ok(reply)
    }

    /// Undoes a half-made PREPARE (or tears a session down): QP, CQ, staging
    /// region, PD, in that order. What fails to go is leaked with everything
    /// after it: never free what the device may still hold.
    pub(super) fn rollback(&mut self, pd: PdId, qp: Option<QpInfo>, cq: Option<CqId>, mr: Option<MrInfo>) {
        let qp_ok = qp.is_none_or(|qp| self.t.destroy_qp(qp.id).is_ok());
        let cq_ok = qp_ok && cq.is_none_or(|cq| self.t.destroy_cq(cq).is_ok());
        if !(qp_ok && cq_ok) {
            self.leaked_qps += 1;
            self.leaked_mrs.extend(mr);
            return;
        }
        if let Some(mr) = mr
            && self.t.dereg_mr(mr.id).is_err()
        {
            self.leaked_mrs.push(mr);
            return;
        }
        // A PD that will not go holds nothing the NIC can write: no leak count.
        let _ = self.t.dealloc_pd(pd);
    }

    fn take_limits(&mut self, who: &PrincipalId, staging: u64) -> Result<(), RcError> {
        let l = self.cfg.limits;
        let a = &self.acct;
        let (user_sessions, user_staging) = a.per_user.get(who).copied().unwrap_or((0, 0));
        let refused = if a.sessions + 1 > l.max_sessions {
            Some(LimitKind::Sessions)
        } else if a.staging_bytes + staging > l.max_staging_bytes {
            Some(LimitKind::StagingBytes)
        } else if a.qps + 1 > l.max_qps {
            Some(LimitKind::Qps)
        } else if user_sessions + 1 > l.max_user_sessions {
            Some(LimitKind::UserSessions)
        } else if user_staging + staging > l.max_user_staging_bytes {
            Some(LimitKind::UserStagingBytes)
        } else if l.max_user_qps != 0 && user_sessions + 1 > l.max_user_qps {
            Some(LimitKind::UserQps)
        } else {
            None
        };
        if let Some(kind) = refused {
            return Err(RcError::Limit(kind));
        }
        let a = &mut self.acct;
        a.sessions += 1;
        a.staging_bytes += staging;
        a.qps += 1;
        let u = a.per_user.entry(*who).or_default();
        u.0 += 1;
        u.1 += staging;
        Ok(())
    }

    pub(super) fn release_limits(&mut self, who: &PrincipalId, staging: u64) {
        let a = &mut self.acct;
        a.sessions = a.sessions.saturating_sub(1);
        a.staging_bytes = a.staging_bytes.saturating_sub(staging);
        a.qps = a.qps.saturating_sub(1);
        if let Some(u) = a.per_user.get_mut(who) {
            u.0 = u.0.saturating_sub(1);
            u.1 = u.1.saturating_sub(staging);
            if *u == (0, 0) {
                a.per_user.remove(who);
            }
        }
    }

    // ---- finish_prepare, staging ----

    /// Commits (publishes) or aborts a PREPARE. Commit needs a GET to be
    /// staged already; abort marks the session for reaping.
    pub fn finish_prepare(&mut self, id: &SessionId, committed: bool) -> Result<(), RcError> {
        let s = self.sessions.get_mut(id).ok_or(RcError::NoSession)?;
        if s.state != SessionState::Prepared {
            return Err(RcError::Stale("finish_prepare: the session is past Prepared"));
        }
        if !committed {
            s.reap_pending = true;
        } else if s.op == Op::Get && !s.stage_done {
            return Err(RcError::State("finish_prepare: a GET must be staged before it is committed"));
        } else {
            s.published = true;
        }
        self.reap();
        Ok(())
    }

    /// Borrows the staging buffer (GET): one lease at a time, while Prepared.
    pub fn borrow_staging(&mut self, id: &SessionId) -> Result<StagingLease, RcError> {
        let s = self.sessions.get_mut(id).ok_or(RcError::NoSession)?;
        if s.state != SessionState::Prepared {
            return Err(RcError::Stale("borrow_staging: the session is past Prepared"));
        }
        if s.staging_lease.is_some() {
            return Err(RcError::Double("the staging buffer"));
        }
        let handle = s.new_handle();
        s.staging_lease = Some(handle);
        Ok(StagingLease { handle, capacity: s.size })
    }

    fn find_by_lease(&mut self, h: Handle) -> Option<&mut Session> {
        if h.nonce == 0 {
            return None;
        }
        self.sessions.values_mut().find(|s| s.staging_lease == Some(h))
    }

    fn find_by_view(&mut self, h: Handle) -> Option<&mut Session> {
        if h.nonce == 0 {
            return None;
        }
        self.sessions.values_mut().find(|s| s.put_view == Some(h))
    }

    /// Copies `data` into a leased staging buffer at `offset`.
    pub fn write_staging(&mut self, lease: &StagingLease, offset: u64, data: &[u8]) -> Result<(), RcError> {
        let mr = self.find_by_lease(lease.handle).ok_or(RcError::Stale("staging lease"))?.staging.id;
        self.t.mr_write(mr, offset, data)?;
        Ok(())
    }

    /// Returns a staging lease. Not `ok`: the session is reaped (OK).
    /// `written` short of the size: SHORT and reaped. Etag or version id
    /// over 127 bytes: TRUNC and reaped.
    pub fn finish_staging(
        &mut self,
        lease: StagingLease,
        ok: bool,
        written: u64,
        etag: &str,
        version_id: &str,
    ) -> Result<(), RcError> {
        let s = self.find_by_lease(lease.handle).ok_or(RcError::Stale("staging lease"))?;
        s.staging_lease = None;
        let result = if !ok {
            s.reap_pending = true;
            Ok(())
        } else if written != s.size {
            s.reap_pending = true;
            Err(RcError::Short { written, expected: s.size })
        } else if let Some(e) = too_long(etag, version_id) {
            s.reap_pending = true;
            Err(e)
        } else {
            s.etag = etag.to_string();
            s.version_id = version_id.to_string();
            s.stage_done = true;
            Ok(())
        };
        self.reap();
        result
    }

    /// Takes a staging slot (a bound on concurrent backend reads).
    pub fn try_acquire_stage(&mut self) -> Result<(), RcError> {
        if self.stage_slots_free == 0 {
            return Err(RcError::Limit(LimitKind::StageSlots));
        }
        self.stage_slots_free -= 1;
        Ok(())
    }

    /// Takes a READY slot outside READY (the C ABI's
    /// `rc_try_acquire_ready`: a gateway bounds its READY handlers with it);
    /// READY itself takes one too.
    pub fn try_acquire_ready(&mut self) -> Result<(), RcError> {
        if self.ready_slots_free == 0 {
            return Err(RcError::Limit(LimitKind::ReadySlots));
        }
        self.ready_slots_free -= 1;
        Ok(())
    }

    /// Returns a READY slot taken by [`Self::try_acquire_ready`]. Extra
    /// releases are ignored (the pool never exceeds its size).
    pub fn release_ready(&mut self) {
        self.ready_slots_free = (self.ready_slots_free + 1).min(self.cfg.ready_slots());
    }

    /// Returns a staging slot taken by [`Self::try_acquire_stage`]. Extra
    /// releases are ignored (the pool never exceeds its size).
    pub fn release_stage(&mut self) {
        self.stage_slots_free = (self.stage_slots_free + 1).min(self.cfg.stage_slots());
    }

    /// A session's op and target, for READY's re-authorisation. Owner-checked.
    pub fn session_info(&self, id: &SessionId, who: &PrincipalId) -> Result<SessionInfo, RcError> {
        let s = self.sessions.get(id).ok_or(RcError::NoSession)?;
        if s.principal != *who {
            return Err(RcError::Session);
        }
        Ok(SessionInfo { op: s.op, target: s.target.clone() })
    }

    // ---- PUT completion ----

    /// Borrows the received PUT data: needs Completing and PUT. The
    /// completion reference moves to the view.
    pub fn get_put_data(&mut self, id: &SessionId) -> Result<PutView, RcError> {
        let s = self.sessions.get_mut(id).ok_or(RcError::NoSession)?;
        if s.state != SessionState::Completing {
            return Err(RcError::State("get_put_data: the session is not Completing"));
        }
        if s.op != Op::Put {
            return Err(RcError::State("get_put_data: not a PUT session"));
        }
        if s.put_view.is_some() {
            return Err(RcError::Double("the PUT view"));
        }
        let handle = s.new_handle();
        s.put_view = Some(handle);
        s.active_ref = s.active_ref.saturating_sub(1);
        s.put_ref += 1;
        Ok(PutView { handle, len: s.size })
    }

    /// Copies PUT data at `offset` into `buf`.
    pub fn read_put_data(&mut self, view: &PutView, offset: u64, buf: &mut [u8]) -> Result<(), RcError> {
        let mr = self.find_by_view(view.handle).ok_or(RcError::Stale("PUT view"))?.staging.id;
        self.t.mr_read(mr, offset, buf)?;
        Ok(())
    }

    /// Calls `f` with the whole PUT data, without copying.
    pub fn with_put_data(&mut self, view: &PutView, f: &mut dyn MrVisitor) -> Result<(), RcError> {
        let s = self.find_by_view(view.handle).ok_or(RcError::Stale("PUT view"))?;
        let (mr, len) = (s.staging.id, s.size);
        self.t.mr_view(mr, 0, len, f)?;
        Ok(())
    }

    /// Returns a PUT view; the session is always marked for reaping.
    /// Committed with an etag or version id over 127 bytes: TRUNC.
    pub fn finish_put(&mut self, view: PutView, committed: bool, etag: &str, version_id: &str) -> Result<(), RcError> {
        let s = self.find_by_view(view.handle).ok_or(RcError::Stale("PUT view"))?;
        s.put_view = None;
        s.put_ref = s.put_ref.saturating_sub(1);
        s.reap_pending = true;
        let result = match committed.then(|| too_long(etag, version_id)).flatten() {
            Some(e) => Err(e),
            None => {
                if committed {
                    s.etag = etag.to_string();
                    s.version_id = version_id.to_string();
                }
                Ok(())
            }
        };
        self.reap();
        result
    }

    /// Marks the final response committed: drops the completion reference
    /// and marks the session for reaping.
    pub fn finish_final(&mut self, id: &SessionId) -> Result<(), RcError> {
        let s = self.sessions.get_mut(id).ok_or(RcError::NoSession)?;
        if s.state == SessionState::Transferring {
            return Err(RcError::State("finish_final: the data phase is still running"));
        }
        s.active_ref = s.active_ref.saturating_sub(1);
        s.reap_pending = true;
        self.reap();
        Ok(())
    }

    // ---- CANCEL ----

    /// CANCEL: owner-checked; a session already gone succeeds.
    pub fn cancel(&mut self, id: &SessionId, who: &PrincipalId) -> Result<Cancelled, RcError> {
        let Some(s) = self.sessions.get_mut(id) else { return Ok(Cancelled::AlreadyGone) };
        if s.principal != *who {
            return Err(RcError::Session);
        }
        s.reap_pending = true;
        self.reap();
        Ok(Cancelled::Marked)
    }

    /// Marks every session for reaping (shutdown).
    pub fn cancel_all(&mut self) {
        for s in self.sessions.values_mut() {
            s.reap_pending = true;
        }
        self.reap();
    }

    // ---- introspection ----

    /// Live sessions (the admin listing), in id order.
    pub fn sessions(&self) -> Vec<SessionSummary> {
        self.sessions
            .values()
            .map(|s| SessionSummary {
                session: s.id,
                principal: s.principal,
                op: s.op,
                target: s.target.clone(),
                size: s.size,
                state: s.state,
                published: s.published,
                staged: s.stage_done,
                reap_pending: s.reap_pending,
                handles: u32::from(s.staging_lease.is_some())
                    + u32::from(s.put_view.is_some())
                    + s.active_ref
                    + s.put_ref,
                lent: s.staging_lease.is_some() || s.put_view.is_some(),
                server_qpn: s.qp.qpn,
                created: s.created,
            })
            .collect()
    }

    /// What the live sessions hold against the limits, free slots, and
    /// what was leaked on purpose.
    pub fn usage(&self) -> Usage {
        Usage {
            sessions: self.acct.sessions,
            staging_bytes: self.acct.staging_bytes,
            qps: self.acct.qps,
            per_user: self.acct.per_user.clone(),
            ready_slots_free: self.ready_slots_free,
            stage_slots_free: self.stage_slots_free,
            leaked_mrs: self.leaked_mrs.len() as u32,
            leaked_qps: self.leaked_qps,
        }
    }
}

fn too_long(etag: &str, version_id: &str) -> Option<RcError> {
    if etag.len() > MAX_ETAG_LEN {
        return Some(RcError::Trunc { field: "etag", len: etag.len(), max: MAX_ETAG_LEN });
    }
    if version_id.len() > MAX_ETAG_LEN {
        return Some(RcError::Trunc { field: "version-id", len: version_id.len(), max: MAX_ETAG_LEN });
    }
    None
}

/// `now + d`, or no deadline when `d` is zero.
pub(super) fn deadline(now: Instant, d: crate::time::Duration) -> Option<Instant> {
    (!d.is_zero()).then(|| now + d)
}
