//! READY and the data phase: the checks in §3's order, the QP's RTR/RTS
//! towards the client, one WRITE_WITH_IMM (GET) or one receive (PUT), and
//! the outcome: OK, BUSY (QP back to INIT, session back to Prepared), or
//! WIRE with the session reaped.

use rand_core::RngCore;

use super::manager::{SessionManager, Transfer, deadline};
use super::status::{LimitKind, RcError, ReadyOutcome};
use super::types::*;
use crate::hipobj::{Op, SessionId};
use crate::time::Instant;
use crate::transport::{
    Access, AddressVector, Completion, CqId, InitAttr, QpTransition, RecvWr, RemoteAddr, RnrTimer, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, Transport, WcOpcode, WcStatus,
};

/// wr_id of the data phase's one work request.
const DATA_WR: u64 = 1;
/// READY's fixed RTR/RTS values (§3).
const MIN_RNR_TIMER: u8 = 12;
const HOP_LIMIT: u8 = 64;

impl<T: Transport, R: RngCore> SessionManager<T, R> {
    /// READY: takes a ready slot, checks the session in §3's order, claims
    /// it (Transferring, completion reference, exec deadline), connects
    /// the QP and starts the data phase. With client QPN 0 no data moves:
    /// the session goes straight to Completing ([`ReadyStart::Done`]), the
    /// C layer's control-plane-only test mode (an HTTP route refuses QPN 0
    /// unless its server runs in that mode, §3a).
    pub fn ready(&mut self, req: &ReadyRequest) -> Result<ReadyStart, RcError> {
        if self.ready_slots_free == 0 {
            return Err(RcError::Limit(LimitKind::ReadySlots));
        }
        let now = self.t.now();
        let s = self.sessions.get_mut(&req.session).ok_or(RcError::NoSession)?;
        if s.principal != req.principal {
            return Err(RcError::Session);
        }
        if matches!(s.state, SessionState::Transferring | SessionState::Completing) {
            return Err(RcError::State("READY: the data phase already ran or is running"));
        }
        // (Prepared is the only other state; §3's "not Prepared: STALE" is
        // the Reaping case, which the reap flag covers below.)
        if !s.published {
            return Err(RcError::State("READY: the PREPARE was not committed"));
        }
        if s.reap_pending {
            return Err(RcError::Stale("READY: the session was cancelled or expired"));
        }
        if req.cookie != s.cookie {
            return Err(RcError::Session);
        }
        if req.client_mr_addr != 0 {
            s.client_mr.0 = req.client_mr_addr;
        }
        if req.client_mr_rkey != 0 {
            s.client_mr.1 = req.client_mr_rkey;
        }
        s.state = SessionState::Transferring;
        s.active_ref = 1;
        s.prep_deadline = None;
        s.exec_deadline = deadline(now, self.cfg.t_exec);
        if req.client_qpn == 0 {
            s.state = SessionState::Completing;
            s.last_outcome = Some(ReadyOutcome::Ok);
            return Ok(ReadyStart::Done);
        }
        self.ready_slots_free -= 1;
        let ticket = ReadyTicket(self.next_ticket);
        self.next_ticket += 1;
        if let Err(detail) = self.connect_and_post(&req.session, req.client_qpn) {
            self.ready_slots_free += 1;
            let s = self.sessions.get_mut(&req.session).expect("checked above");
            s.reap_pending = true;
            s.active_ref = 0;
            s.last_outcome = Some(ReadyOutcome::WireFail);
            self.reap();
            return Err(RcError::Wire { outcome: ReadyOutcome::WireFail, detail });
        }
        let s = self.sessions.get_mut(&req.session).expect("checked above");
        s.transfer = Some(Transfer { ticket, deadline: s.exec_deadline });
        self.in_flight.insert(req.session);
        Ok(ReadyStart::Pending(ticket))
    }

    /// The reply for a control-plane-only READY ([`ReadyStart::Done`]), or
    /// the reply a finished data phase left: built from the session.
    fn reply_of(&self, id: &SessionId, outcome: ReadyOutcome) -> ReadyReply {
        let s = &self.sessions[id];
        ReadyReply {
            bytes_transferred: if outcome == ReadyOutcome::Ok { s.size } else { 0 },
            cookie_echo: s.cookie,
            outcome,
            etag: s.etag.clone(),
            version_id: s.version_id.clone(),
        }
    }

    /// The reply of a READY that returned [`ReadyStart::Done`].
    pub fn done_reply(&self, id: &SessionId) -> Result<ReadyReply, RcError> {
        if !self.sessions.contains_key(id) {
            return Err(RcError::NoSession);
        }
        Ok(self.reply_of(id, ReadyOutcome::Ok))
    }

    fn connect_and_post(&mut self, id: &SessionId, client_qpn: u32) -> Result<(), String> {
        let s = &self.sessions[id];
        let (qp, size, cookie, op, staging, client_mr) = (s.qp.id, s.size, s.cookie, s.op, s.staging, s.client_mr);
        let rtr = RtrAttr {
            path_mtu: self.active_mtu,
            dest_qpn: client_qpn,
            rq_psn: s.client_psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::from_code(MIN_RNR_TIMER).expect("12 is a table 45 code"),
            av: AddressVector {
                hop_limit: HOP_LIMIT,
                port: self.cfg.port(),
                ..AddressVector::new(s.peer_gid.unwrap_or(self.own_gid), self.cfg.gid_index)
            },
        };
        let rts = RtsAttr {
            sq_psn: s.server_psn(),
            timeout: self.cfg.timeout,
            retry_cnt: self.cfg.retry_cnt,
            rnr_retry: self.cfg.rnr_retry,
            max_rd_atomic: 1,
        };
        let sge = [Sge::new(staging.id, 0, size as u32)];
        if op == Op::Put {
            // The receive goes first so the client's WRITE_WITH_IMM finds it.
            self.t.post_recv(qp, &RecvWr::new(DATA_WR, &sge)).map_err(|e| e.to_string())?;
        }
        self.t.modify_qp(qp, &QpTransition::Rtr(rtr)).map_err(|e| format!("RTR: {e}"))?;
        self.t.modify_qp(qp, &QpTransition::Rts(rts)).map_err(|e| format!("RTS: {e}"))?;
        if op == Op::Get {
            let remote = RemoteAddr { addr: client_mr.0, rkey: client_mr.1 };
            let wr = SendWr::new(DATA_WR, SendOp::WriteWithImm { remote, imm: cookie }, &sge);
            self.t.post_send(qp, &wr).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Drives every data phase in flight (polls their CQs, expires their
    /// deadlines), then expires and reaps sessions. Never blocks.
    pub fn progress(&mut self) {
        let now = self.t.now();
        let ids: Vec<SessionId> = self.in_flight.iter().copied().collect();
        let mut wcs = Vec::new();
        for id in ids {
            let Some(s) = self.sessions.get(&id) else {
                self.in_flight.remove(&id);
                continue;
            };
            let (cq, transfer) = (s.cq, s.transfer.expect("in flight"));
            wcs.clear();
            let verdict = match self.t.poll_cq(cq, 4, &mut wcs) {
                Err(e) => Some(Verdict::Wire(ReadyOutcome::WireFail, format!("poll_cq: {e}"))),
                Ok(_) => wcs.iter().find(|wc| wc.wr_id == DATA_WR).map(|wc| self.judge(&id, wc)),
            };
            let verdict = verdict.or_else(|| {
                transfer
                    .deadline
                    .filter(|d| now >= *d)
                    .map(|_| Verdict::Wire(ReadyOutcome::Timeout, "the data phase passed its deadline".into()))
            });
            // CANCEL or Close during a data phase: without a deadline
            // (t_exec 0) a PUT whose client never writes would hold the
            // session forever. Stop the QP (nothing more lands in staging)
            // and end the phase as a wire failure; the reaper frees it.
            let verdict = verdict.or_else(|| {
                let s = &self.sessions[&id];
                s.reap_pending.then(|| {
                    let stopped = self.t.modify_qp(s.qp.id, &QpTransition::Err);
                    Verdict::Wire(
                        ReadyOutcome::WireFail,
                        match stopped {
                            Ok(()) => "cancelled during the data phase".into(),
                            Err(e) => format!("cancelled during the data phase; stopping the QP: {e}"),
                        },
                    )
                })
            });
            if let Some(v) = verdict {
                self.finish_transfer(&id, transfer.ticket, v);
            }
        }
        self.reap();
    }

    fn judge(&self, id: &SessionId, wc: &Completion) -> Verdict {
        let s = &self.sessions[id];
        match wc.status {
            WcStatus::Success => {
                let expected = match s.op {
                    Op::Get => wc.opcode == WcOpcode::RdmaWrite,
                    Op::Put => {
                        wc.opcode == WcOpcode::RecvRdmaWithImm
                            && wc.imm == Some(s.cookie)
                            && u64::from(wc.byte_len) == s.size
                    }
                };
                if expected {
                    Verdict::Ok
                } else {
                    Verdict::Wire(
                        ReadyOutcome::VerifyFail,
                        format!(
                            "{} of {} bytes with immediate {:?}, expected {} bytes with {:#010x}",
                            wc.opcode.name(),
                            wc.byte_len,
                            wc.imm,
                            s.size,
                            s.cookie
                        ),
                    )
                }
            }
            WcStatus::RnrRetryExcErr | WcStatus::RetryExcErr => Verdict::Busy(wc.status),
            other => Verdict::Wire(ReadyOutcome::WireFail, format!("completion {other}")),
        }
    }

    fn finish_transfer(&mut self, id: &SessionId, ticket: ReadyTicket, v: Verdict) {
        self.in_flight.remove(id);
        self.ready_slots_free += 1;
        let now = self.t.now();
        let t_prep = self.cfg.t_prep;
        let s = self.sessions.get_mut(id).expect("in flight sessions are live");
        s.transfer = None;
        let result = match v {
            Verdict::Ok => {
                s.state = SessionState::Completing;
                s.last_outcome = Some(ReadyOutcome::Ok);
                Ok(self.reply_of(id, ReadyOutcome::Ok))
            }
            Verdict::Busy(status) => {
                s.last_outcome = Some(ReadyOutcome::Busy);
                s.exec_deadline = None;
                s.prep_deadline = deadline(now, t_prep);
                let qp = s.qp.id;
                // verbs has no RTS->INIT edge: RESET, then INIT again.
                let init = QpTransition::Init(InitAttr {
                    pkey_index: 0,
                    port: self.cfg.port(),
                    access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                });
                let rearmed = self.t.modify_qp(qp, &QpTransition::Reset).and_then(|_| self.t.modify_qp(qp, &init));
                let s = self.sessions.get_mut(id).expect("live");
                s.active_ref = s.active_ref.saturating_sub(1);
                match rearmed {
                    Ok(()) if !s.reap_pending => {
                        s.state = SessionState::Prepared;
                        Ok(self.reply_of(id, ReadyOutcome::Busy))
                    }
                    Ok(()) => {
                        s.state = SessionState::Prepared;
                        Err(RcError::Wire {
                            outcome: ReadyOutcome::Busy,
                            detail: format!("{status} and the session was cancelled meanwhile"),
                        })
                    }
                    Err(e) => {
                        s.state = SessionState::Prepared;
                        s.reap_pending = true;
                        Err(RcError::Wire { outcome: ReadyOutcome::Busy, detail: format!("{status}; re-arm: {e}") })
                    }
                }
            }
            Verdict::Wire(outcome, detail) => {
                s.last_outcome = Some(outcome);
                s.reap_pending = true;
                s.active_ref = 0;
                Err(RcError::Wire { outcome, detail })
            }
        };
        self.results.insert(ticket, result);
    }

    /// The result of a READY's data phase, once it finished; each result is
    /// handed out once.
    pub fn take_ready(&mut self, ticket: ReadyTicket) -> Option<Result<ReadyReply, RcError>> {
        self.results.remove(&ticket)
    }

    /// The CQs of the data phases in flight (to `wait` on), and the
    /// earliest deadline among them and the sessions' expiry.
    pub fn wait_set(&self) -> (Vec<CqId>, Instant) {
        let cqs = self.in_flight.iter().filter_map(|id| self.sessions.get(id)).map(|s| s.cq).collect();
        let next = self
            .sessions
            .values()
            .flat_map(|s| [s.prep_deadline, s.exec_deadline, s.transfer.and_then(|t| t.deadline)])
            .flatten()
            .min()
            .unwrap_or(Instant::FAR_FUTURE);
        (cqs, next)
    }

    /// Blocking READY (what an HTTP handler does): starts it, then drives
    /// `progress` and waits on the transport until its data phase ends.
    pub fn ready_blocking(&mut self, req: &ReadyRequest) -> Result<ReadyReply, RcError> {
        match self.ready(req)? {
            ReadyStart::Done => self.done_reply(&req.session),
            ReadyStart::Pending(ticket) => loop {
                self.progress();
                if let Some(r) = self.take_ready(ticket) {
                    return r;
                }
                let (cqs, next) = self.wait_set();
                self.t.wait(&cqs, next)?;
            },
        }
    }
}

/// How a data phase ended.
enum Verdict {
    Ok,
    Busy(WcStatus),
    Wire(ReadyOutcome, String),
}
