//! The data phase: post requests within the queue depth, consume completions
//! on both ends, verify every message byte for byte, repost receives.
//!
//! Slots: message `i` uses requester slot `i % queue_depth` (its source, or
//! its destination for READ) and, for RDMA, the same slot of the responder's
//! region. A slot is reused only after the message in it completed and was
//! checked, so a check never sees a later message's bytes.

use rctb_core::Transport;
use rctb_core::transport::{Completion, MrId, RemoteAddr, SendOp, SendWr, Sge, TransportError, WcOpcode};

use super::{Op, Phase, Progress, Stream};

/// Completions taken per poll.
const POLL_BATCH: usize = 32;

impl<T: Transport> Stream<T> {
    pub(super) fn run_data_path(&mut self) -> Progress {
        let mut busy = false;
        for part in [Self::poll_responder, Self::poll_requester, Self::post_requests] {
            match part(self) {
                Ok(did) => busy |= did,
                Err((what, e)) => {
                    self.fail(what, e);
                    return Progress::Busy;
                }
            }
        }
        if self.data_done() {
            self.close();
            return Progress::Busy;
        }
        if busy { Progress::Busy } else { Progress::Idle { wake_at: None } }
    }

    fn data_done(&self) -> bool {
        let failed = self.req_failed || self.resp_failed;
        let requester_done = self.outstanding == 0 && (failed || self.next_post == self.cfg.count);
        let responder_done = !self.cfg.op.consumes_recv() || failed || self.stats.received >= self.cfg.count;
        requester_done && responder_done
    }

    fn slot_offset(&self, index: u64) -> u64 {
        (index % self.cfg.queue_depth as u64) * self.cfg.slot_len()
    }

    fn size_of(&self, index: u64) -> u32 {
        self.pattern.size(index, self.cfg.min_size, self.cfg.max_size)
    }

    /// Compares `len` bytes at `offset` of `mr` with message `index`.
    fn check_bytes(
        &mut self,
        on_responder: bool,
        mr: MrId,
        offset: u64,
        len: u32,
        index: u64,
    ) -> Result<(), TransportError> {
        let pattern = self.pattern;
        let mut bad = None;
        let t = if on_responder { &self.resp.t } else { &self.req.t };
        t.mr_view(mr, offset, len as u64, &mut |bytes: &[u8]| bad = pattern.first_mismatch(index, bytes))?;
        if let Some(at) = bad {
            let side = if on_responder { "responder" } else { "requester" };
            self.stats.mismatch(format!("message {index}: byte {at} of {len} differs ({side} memory)"));
        }
        Ok(())
    }

    fn poll_responder(&mut self) -> Result<bool, (&'static str, TransportError)> {
        let (Some(cq), Some(mr)) = (self.resp.cq, self.resp.mr) else { return Ok(false) };
        if !self.cfg.op.consumes_recv() || self.resp.qp.is_none() {
            return Ok(false);
        }
        let mut comps = Vec::new();
        self.resp.t.poll_cq(cq, POLL_BATCH, &mut comps).map_err(|e| ("poll_cq (responder)", e))?;
        for wc in &comps {
            if !wc.status.is_success() {
                *self.stats.recv_errors.entry(wc.status).or_default() += 1;
                self.resp_failed = true;
                continue;
            }
            let index = self.stats.received;
            self.stats.received += 1;
            self.check_receive(wc, index, mr.id).map_err(|e| ("mr_view (responder)", e))?;
            if self.recvs_posted < self.cfg.count {
                self.post_recv(wc.wr_id).map_err(|e| ("post_recv", e))?;
            }
        }
        Ok(!comps.is_empty())
    }

    /// Checks receive completion `wc` against message `index` (RC delivers in order).
    pub(super) fn check_receive(&mut self, wc: &Completion, index: u64, mr: MrId) -> Result<(), TransportError> {
        let op = self.cfg.op;
        let want_len = self.size_of(index);
        let want_opcode = if op == Op::WriteImm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
        let want_imm = op.carries_imm().then(|| self.pattern.imm(index));
        if wc.opcode != want_opcode {
            self.stats.mismatch(format!(
                "message {index}: opcode {} instead of {}",
                wc.opcode.name(),
                want_opcode.name()
            ));
        } else if wc.byte_len != want_len {
            self.stats.mismatch(format!("message {index}: byte_len {} instead of {want_len}", wc.byte_len));
        } else if wc.imm != want_imm {
            self.stats.mismatch(format!("message {index}: immediate {:?} instead of {want_imm:?}", wc.imm));
        } else {
            let offset = match op {
                Op::WriteImm => self.slot_offset(index),
                _ => wc.wr_id * self.cfg.slot_len(),
            };
            self.check_bytes(true, mr, offset, want_len, index)?;
        }
        Ok(())
    }

    fn poll_requester(&mut self) -> Result<bool, (&'static str, TransportError)> {
        let Some(cq) = self.req.cq else { return Ok(false) };
        let mut comps = Vec::new();
        self.req.t.poll_cq(cq, POLL_BATCH, &mut comps).map_err(|e| ("poll_cq (requester)", e))?;
        for wc in &comps {
            self.outstanding = self.outstanding.saturating_sub(1);
            let index = wc.wr_id;
            if index != self.next_complete {
                self.stats.mismatch(format!("completion for message {index} while {} was due", self.next_complete));
            }
            self.next_complete = index + 1;
            if !wc.status.is_success() {
                *self.stats.errors.entry(wc.status).or_default() += 1;
                self.req_failed = true;
                continue;
            }
            self.stats.completed += 1;
            let len = self.size_of(index);
            self.stats.bytes += len as u64;
            // WRITE is checked where it landed; READ where it was fetched to.
            // SEND and the immediates are checked by the responder.
            let offset = self.slot_offset(index);
            let result = match (self.cfg.op, self.resp.mr, self.req.mr) {
                (Op::Write, Some(mr), _) => self.check_bytes(true, mr.id, offset, len, index),
                (Op::Read, _, Some(mr)) => self.check_bytes(false, mr.id, offset, len, index),
                _ => Ok(()),
            };
            result.map_err(|e| ("mr_view (data check)", e))?;
        }
        Ok(!comps.is_empty())
    }

    /// Whether message `index` may be posted now. WRITE_WITH_IMM reuses a
    /// responder slot only after the responder checked what was in it.
    fn may_post(&self, index: u64) -> bool {
        let qd = self.cfg.queue_depth as u64;
        index < self.cfg.count
            && self.outstanding < self.cfg.queue_depth
            && !self.req_failed
            && !self.resp_failed
            && (self.cfg.op != Op::WriteImm || index < self.stats.received + qd)
    }

    fn post_requests(&mut self) -> Result<bool, (&'static str, TransportError)> {
        let (Some(qp), Some(mr)) = (self.req.qp, self.req.mr) else { return Ok(false) };
        if self.phase != Phase::Running {
            return Ok(false);
        }
        let mut posted = false;
        while self.may_post(self.next_post) {
            let index = self.next_post;
            let len = self.size_of(index);
            let offset = self.slot_offset(index);
            self.scratch.resize(len as usize, 0);
            self.pattern.fill(index, &mut self.scratch);
            if self.cfg.op == Op::Read {
                // The responder's application prepares what will be read.
                let Some(resp_mr) = self.resp.mr else { return Ok(posted) };
                self.resp.t.mr_write(resp_mr.id, offset, &self.scratch).map_err(|e| ("mr_write (responder)", e))?;
            } else {
                self.req.t.mr_write(mr.id, offset, &self.scratch).map_err(|e| ("mr_write", e))?;
            }
            let remote = self.remote.map(|r| RemoteAddr { addr: r.addr.wrapping_add(offset), rkey: r.rkey });
            let op = match (self.cfg.op, remote) {
                (Op::Send, _) => SendOp::Send,
                (Op::SendImm, _) => SendOp::SendWithImm { imm: self.pattern.imm(index) },
                (Op::Write, Some(remote)) => SendOp::Write { remote },
                (Op::WriteImm, Some(remote)) => SendOp::WriteWithImm { remote, imm: self.pattern.imm(index) },
                (Op::Read, Some(remote)) => SendOp::Read { remote },
                (_, None) => return Ok(posted),
            };
            let sge = [Sge::new(mr.id, offset, len)];
            // A zero-length message has no SGE at all (as verbs callers do).
            let sges: &[Sge] = if len == 0 { &[] } else { &sge };
            self.req.t.post_send(qp, &SendWr::new(index, op, sges)).map_err(|e| ("post_send", e))?;
            self.next_post += 1;
            self.outstanding += 1;
            self.stats.posted += 1;
            posted = true;
        }
        Ok(posted)
    }
}
