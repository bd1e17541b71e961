//! The QP verbs of an [`Endpoint`]: creating, modifying, querying and
//! destroying QPs, posting sends and receives, polling CQs, and shared
//! receive queues.

use std::net::Ipv4Addr;

use rctb_core::time::Instant;
use rctb_core::transport::*;

use crate::endpoint::Endpoint;
use crate::memory::Memory;
use crate::rc::{PostError, RcQp, RoutedCompletion, Srq};

use super::{MAX_QP_WR, MAX_SGE, MAX_SRQ_WR};

fn post_error(verb: Verb, e: PostError) -> TransportError {
    match e {
        PostError::State(state) => TransportError::InvalidState { verb, state, what: "posting work requests" },
        PostError::QueueFull(limit) => TransportError::QueueFull { verb, what: "work requests", limit },
        PostError::TooManySge(limit) => {
            TransportError::invalid(verb, "num_sge", limit as u64 + 1, "exceeds the QP's max SGE count")
        }
        PostError::HasSrq => TransportError::invalid(
            verb,
            "qp",
            0,
            "the QP takes its receives from a shared receive queue: post them with post_srq_recv",
        ),
    }
}

impl Endpoint {
    /// Runs `f` on the QP, then takes its completions and outputs.
    /// `timers`: `f` may start a timer or move one earlier; a post cannot
    /// (a local error that moves the QP to ERR stops them), and then the
    /// timers are not asked about (`after_change` would find nothing to arm).
    #[inline]
    fn with_qp<R>(
        &mut self,
        now: Instant,
        verb: Verb,
        qp: QpId,
        timers: bool,
        f: impl FnOnce(&mut RcQp, &Memory, Ipv4Addr, &mut Vec<RoutedCompletion>) -> R,
    ) -> Result<R> {
        let ip = self.cfg.ip;
        let q = self.qps.get_mut(qp.0).ok_or_else(|| TransportError::handle(verb, qp))?;
        let r = f(q, &self.mem, ip, &mut self.comps);
        // The QP stays in hand for its outputs (no second lookup).
        crate::endpoint::route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
        if timers {
            self.out.after_change(q, now, qp);
        } else {
            self.out.queue_if_ready(q, now, qp);
        }
        Ok(r)
    }

    /// Creates an RC QP in RESET.
    pub fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        let n = &mut *self;
        check_qp_init(n, init)?;
        let id = QpId(n.alloc_id());
        let qpn = n.alloc_qpn();
        n.qps.insert(id.0, RcQp::new(id, qpn, *init));
        n.qpn_to_qp.insert(qpn, id);
        n.last_qpn = None;
        Ok(QpInfo { id, qpn, state: QpState::Reset })
    }

    /// Moves a QP to the next state (INIT, RTR, RTS, ERR, RESET).
    pub fn modify_qp(&mut self, now: Instant, qp: QpId, transition: &QpTransition) -> Result<()> {
        if let QpTransition::Rtr(rtr) = transition {
            let port = self.port(1)?;
            if !port.gids.iter().any(|g| g.index == rtr.av.sgid_index) {
                return Err(TransportError::invalid(
                    Verb::ModifyQp,
                    "sgid_index",
                    rtr.av.sgid_index as u64,
                    "no such entry in the port's GID table",
                ));
            }
            if rtr.path_mtu > port.active_mtu {
                return Err(TransportError::invalid(
                    Verb::ModifyQp,
                    "path_mtu",
                    rtr.path_mtu.bytes() as u64,
                    "exceeds the port's active MTU",
                ));
            }
        }
        let r = self.with_qp(now, Verb::ModifyQp, qp, true, |q, _, ip, out| {
            let state = q.state;
            q.modify(transition, ip, out).map_err(|rule| (state, rule))
        })?;
        r.map_err(|(state, rule)| match transition.allowed_from(state) {
            false => TransportError::InvalidState { verb: Verb::ModifyQp, state, what: transition.name() },
            true => TransportError::invalid(Verb::ModifyQp, transition.name(), 0, rule),
        })
    }

    /// A QP's state and attributes.
    pub fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        let q = self.qps.get(qp.0).ok_or_else(|| TransportError::handle(Verb::QueryQp, qp))?;
        Ok(QpInfo { id: qp, qpn: q.qpn, state: q.state })
    }

    /// Destroys a QP (its outstanding work is dropped, not completed).
    pub fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let n = &mut *self;
        let q = n.qps.remove(qp.0).ok_or_else(|| TransportError::handle(Verb::DestroyQp, qp))?;
        n.retire_qp_counters(&q);
        n.qpn_to_qp.remove(&q.qpn);
        n.last_qpn = None;
        for c in n.conns.values_mut() {
            if c.qp == Some(qp) {
                c.qp = None;
            }
        }
        Ok(())
    }

    #[inline]
    /// Posts a send-queue work request (SEND, WRITE, READ, with or without immediate).
    pub fn post_send<'a>(&mut self, now: Instant, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        let len = wr.len();
        if len > u32::MAX as u64 {
            return Err(TransportError::invalid(Verb::PostSend, "length", len, "a message is at most 2^32-1 bytes"));
        }
        if wr.op.is_atomic() {
            if len != ATOMIC_LEN as u64 {
                return Err(TransportError::invalid(
                    Verb::PostSend,
                    "length",
                    len,
                    "an atomic's scatter/gather list holds exactly 8 bytes (the original value)",
                ));
            }
            // rxe's provider refuses it here too (EINVAL); the responder's
            // own check (a NAK invalid request) then sees only other
            // requesters' misaligned atomics.
            let addr = wr.op.remote().map_or(0, |r| r.addr);
            if !addr.is_multiple_of(ATOMIC_LEN as u64) {
                return Err(TransportError::invalid(
                    Verb::PostSend,
                    "remote_addr",
                    addr,
                    "an atomic's remote address is a multiple of 8",
                ));
            }
        }
        self.with_qp(now, Verb::PostSend, qp, false, |q, mem, _, out| q.post_send(wr, len, mem, out))?
            .map_err(|e| post_error(Verb::PostSend, e))
    }

    #[inline]
    /// Posts a receive. It starts no protocol work (`now` is taken as by
    /// the other posts): a receive is consumed only when a message comes,
    /// so the QP's outputs (packets, timers) are left as they are, as
    /// [`post_srq_recv`](Self::post_srq_recv) leaves them.
    pub fn post_recv<'a>(&mut self, _now: Instant, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        let q = self.qps.get_mut(qp.0).ok_or_else(|| TransportError::handle(Verb::PostRecv, qp))?;
        let r = q.post_recv(wr, &self.mem, &mut self.comps);
        // A QP in ERR flushes the receive at once.
        self.route();
        r.map_err(|e| post_error(Verb::PostRecv, e))
    }

    #[inline]
    /// Moves up to `max` completions of `cq` into `out`; how many.
    pub fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let c = self.cqs.get_mut(cq.0).ok_or_else(|| TransportError::handle(Verb::PollCq, cq))?;
        let k = max.min(c.entries.len());
        if k == 0 {
            return Ok(0);
        }
        if k == 1 {
            // One, the usual case: without the loop.
            if let Some(wc) = c.entries.pop_front() {
                out.push(wc.0);
            }
            return Ok(1);
        }
        // Moved one at a time from the front, in order: for the few
        // completions a poll usually takes this is cheaper than a drain.
        out.reserve(k);
        for _ in 0..k {
            out.extend(c.entries.pop_front().map(|wc| wc.0));
        }
        Ok(k)
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId> {
        if !self.pds.contains(&init.pd) {
            return Err(TransportError::handle(Verb::CreateSrq, init.pd));
        }
        for (field, v, max, rule) in [
            ("max_wr", init.max_wr, MAX_SRQ_WR, "must be 1..=max_srq_wr (32768)"),
            ("max_sge", init.max_sge, MAX_SGE, "must be 1..=max_sge (32)"),
        ] {
            if v == 0 || v > max {
                return Err(TransportError::invalid(Verb::CreateSrq, field, v as u64, rule));
            }
        }
        check_srq_limit(Verb::CreateSrq, init.limit, init.max_wr)?;
        let id = SrqId(self.alloc_id());
        self.srqs.insert(id.0, Srq::new(id, init.pd, init.max_wr, init.max_sge, init.limit));
        Ok(id)
    }

    /// Arms (or, with 0, disarms) a shared receive queue's limit.
    pub fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()> {
        let s = self.srqs.get_mut(srq.0).ok_or_else(|| TransportError::handle(Verb::ModifySrq, srq))?;
        check_srq_limit(Verb::ModifySrq, limit, s.max_wr)?;
        s.limit = limit;
        Ok(())
    }

    /// Destroys a shared receive queue (refused while a QP uses it).
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        if !self.srqs.contains_key(srq.0) {
            return Err(TransportError::handle(Verb::DestroySrq, srq));
        }
        let users = self.qps.values().filter(|q| q.init.srq == Some(srq)).count();
        if users > 0 {
            return Err(TransportError::Busy {
                verb: Verb::DestroySrq,
                what: srq.to_string(),
                by: format!("{users} queue pairs"),
            });
        }
        self.srqs.remove(srq.0);
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()> {
        let verb = Verb::PostSrqRecv;
        let s = self.srqs.get_mut(srq.0).ok_or_else(|| TransportError::handle(verb, srq))?;
        if wr.sges.len() as u32 > s.max_sge {
            return Err(post_error(verb, PostError::TooManySge(s.max_sge)));
        }
        if s.len() >= s.max_wr as usize {
            return Err(post_error(verb, PostError::QueueFull(s.max_wr)));
        }
        let bad = self.mem.check_sges(s.pd, wr.sges).is_err();
        s.post(wr, bad);
        Ok(())
    }
}

fn check_qp_init(n: &Endpoint, init: &QpInit) -> Result<()> {
    if !n.pds.contains(&init.pd) {
        return Err(TransportError::handle(Verb::CreateQp, init.pd));
    }
    for cq in [init.send_cq, init.recv_cq] {
        if !n.cqs.contains_key(cq.0) {
            return Err(TransportError::handle(Verb::CreateQp, cq));
        }
    }
    if let Some(srq) = init.srq
        && !n.srqs.contains_key(srq.0)
    {
        return Err(TransportError::handle(Verb::CreateQp, srq));
    }
    let c = &init.caps;
    for (field, v, max) in [
        ("max_send_wr", c.max_send_wr, MAX_QP_WR),
        ("max_recv_wr", c.max_recv_wr, MAX_QP_WR),
        ("max_send_sge", c.max_send_sge, MAX_SGE),
        ("max_recv_sge", c.max_recv_sge, MAX_SGE),
    ] {
        if v > max {
            return Err(TransportError::invalid(Verb::CreateQp, field, v as u64, "exceeds the device limit"));
        }
    }
    Ok(())
}

fn check_srq_limit(verb: Verb, limit: u32, max_wr: u32) -> Result<()> {
    if limit > max_wr {
        return Err(TransportError::invalid(verb, "limit", limit as u64, "exceeds the SRQ's max_wr"));
    }
    Ok(())
}
