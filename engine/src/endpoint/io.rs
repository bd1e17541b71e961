//! An endpoint's inputs and outputs: packets and timers in; packets, CM
//! messages, CM and asynchronous events out; and the transmit queue and
//! timers that order them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rctb_core::time::Instant;
use rctb_core::transport::{AsyncEvent, CmEvent, ConnId, QpId};

use crate::cm::CmTransmit;
use crate::cm::mad::{self, MadDrop};
use crate::packet::Packet;
use crate::rc::ring::Ring;
use crate::rc::{Built, RcQp, RecvCtx};

use super::cq::route;
use super::{Endpoint, PacketDrop, Transmit};

/// An endpoint's transmit queue and timers.
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    /// QPs with something to transmit (their numbers), served round-robin.
    tx_ready: Ring<u32>,
    /// Pending timers: (due, order of arming, what). Entries a later
    /// change superseded stay until they come up and are skipped.
    timers: BinaryHeap<Reverse<(Instant, u64, TimerKey)>>,
    timer_seq: u64,
}

impl Outputs {
    fn arm(&mut self, at: Instant, key: TimerKey) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, key)));
    }

    /// After any change to `q` (QP `qp`): queue it for transmission if it
    /// has output, and arm its timer. Returns whether it has output (a QP
    /// already queued is not asked again: `poll_transmit_into` asks when it
    /// comes up).
    #[inline(always)]
    pub(crate) fn after_change(&mut self, q: &mut RcQp, now: Instant, qp: QpId) -> bool {
        let want_tx = self.queue_if_ready(q, now, qp);
        self.arm_timer(q, qp);
        want_tx
    }

    /// The transmit half of [`after_change`](Self::after_change), for a
    /// change that cannot start or advance the QP's timers (a post).
    #[inline(always)]
    pub(crate) fn queue_if_ready(&mut self, q: &mut RcQp, now: Instant, qp: QpId) -> bool {
        let want_tx = q.tx_queued || q.wants_transmit(now);
        if want_tx && !q.tx_queued {
            q.tx_queued = true;
            self.tx_ready.push_back(qp.0);
        }
        want_tx
    }

    /// The timer half of [`after_change`](Self::after_change).
    #[inline(always)]
    fn arm_timer(&mut self, q: &mut RcQp, qp: QpId) {
        // Timers are lazy: an entry is armed only when the QP needs one
        // earlier than the one already pending. A deadline that merely moved
        // later (every ACK moves it) is picked up when the pending one fires.
        let timer = q.poll_timeout();
        let arm = match (timer, q.timer_event) {
            (Some(t), Some(pending)) => t < pending,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if arm {
            q.timer_event = timer;
            if let Some(t) = timer {
                self.arm(t, TimerKey::Qp(qp));
            }
        }
    }
}

/// What a timer entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// A QP's ACK / RNR timer (its `timer_event` says which entry is live).
    Qp(QpId),
    /// An active CM connection waiting for REP or REJ.
    Cm(ConnId),
}

impl Endpoint {
    /// The next asynchronous event (a CQ overflow, an SRQ limit), if any.
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.async_events.pop_front()
    }

    pub(crate) fn arm(&mut self, at: Instant, key: TimerKey) {
        self.out.arm(at, key);
    }

    /// After any change to a QP: queue it for transmission if it has output,
    /// and arm its timer ([`Outputs::after_change`]).
    pub(crate) fn after_qp_change(&mut self, now: Instant, qp: QpId) -> bool {
        let Some(q) = self.qps.get_mut(qp.0) else { return false };
        self.out.after_change(q, now, qp)
    }

    // ---- inputs ----

    /// Takes one RoCEv2 packet addressed to this endpoint, arrived at `now`.
    /// The owner has checked the ICRC (a damaged frame never gets here).
    /// The packet's payload buffer stays the caller's.
    #[inline]
    pub fn handle_packet(&mut self, now: Instant, pkt: &Packet) -> Result<(), PacketDrop> {
        let dest = pkt.bth.dest_qp;
        let qp = match self.last_qpn {
            Some((qpn, qp)) if qpn == dest => qp,
            _ => {
                let Some(&qp) = self.qpn_to_qp.get(&dest) else { return self.handle_gsi(now, pkt) };
                self.last_qpn = Some((dest, qp));
                qp
            }
        };
        let Some(q) = self.qps.get_mut(qp.0) else {
            self.route();
            return Ok(());
        };
        {
            let srq = match q.init.srq {
                Some(s) => self.srqs.get_mut(s.0),
                None => None,
            };
            let mut ctx = RecvCtx { srq, cqs: &mut self.cqs };
            q.handle_packet(now, pkt, &mut self.mem, &mut ctx, &mut self.comps);
            if let Some(srq) = ctx.srq
                && std::mem::take(&mut srq.limit_reached)
            {
                self.async_events.push_back(AsyncEvent::SrqLimitReached { srq: srq.id });
            }
        }
        // The QP stays in hand for its outputs (no second lookup).
        route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
        self.out.after_change(q, now, qp);
        if !self.awaiting_rtu.is_empty() {
            self.communication_established(qp);
        }
        Ok(())
    }

    /// A packet for no QP: a CM MAD when it is for QP1.
    #[cold]
    fn handle_gsi(&mut self, now: Instant, pkt: &Packet) -> Result<(), PacketDrop> {
        if !mad::is_gsi(pkt) {
            return Err(PacketDrop::NoSuchQp);
        }
        match mad::from_mad(&pkt.payload) {
            Ok(msg) => self.take_cm(now, pkt.src_ip, msg, true),
            Err(MadDrop::Reject { to, reason }) => self.reject_req(pkt.src_ip, to, reason),
            Err(MadDrop::Malformed(e)) => {
                self.counters.cm_dropped += 1;
                return Err(PacketDrop::BadMad(e));
            }
        }
        Ok(())
    }

    /// Runs every timer due at `now` (late ones fire once, now).
    #[inline]
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, _, key))) = self.out.timers.peek() {
            if at > now {
                break;
            }
            self.out.timers.pop();
            match key {
                TimerKey::Qp(qp) => self.qp_timer(now, qp, at),
                TimerKey::Cm(conn) => crate::cm::timeout(self, now, conn),
            }
        }
    }

    fn qp_timer(&mut self, now: Instant, qp: QpId, at: Instant) {
        let Some(q) = self.qps.get_mut(qp.0) else { return };
        if q.timer_event != Some(at) {
            return; // superseded by an earlier entry
        }
        q.timer_event = None;
        if q.poll_timeout().is_some_and(|t| t <= now) {
            q.handle_timeout(now, &mut self.comps);
            self.route();
        }
        // Re-arms at the QP's current deadline, if it has one.
        self.after_qp_change(now, qp);
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run next (`None`:
    /// no timer is pending). It may be in the past: call it at once then.
    /// It may also be a timer a later change made moot (the QP was
    /// destroyed, the deadline moved): handling it then does nothing.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.out.timers.peek().map(|&Reverse((at, _, _))| at)
    }

    /// Whether a CM message waits ([`poll_cm_transmit`](Self::poll_cm_transmit),
    /// [`poll_cm_packet`](Self::poll_cm_packet)).
    #[inline]
    pub fn wants_cm_transmit(&self) -> bool {
        !self.cm_out.is_empty()
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) may have a packet.
    #[inline]
    pub fn wants_transmit(&self) -> bool {
        !self.out.tx_ready.is_empty()
    }

    /// The next packet to put on the wire at `now`, from the QPs with
    /// output in round-robin order. Its payload is built in `buf` (the
    /// buffer moves into the packet; on `None` it stays the caller's).
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let mut packet = Packet::empty(std::mem::take(buf));
        match self.poll_transmit_into(now, &mut packet) {
            Some(more) => Some(Transmit { packet, more }),
            None => {
                *buf = packet.payload;
                None
            }
        }
    }

    /// [`poll_transmit`](Self::poll_transmit) for an owner that keeps its
    /// packets in place: the next packet is written into `pkt` (every field;
    /// its payload buffer is reused). Returns `Some(more)` when there was a
    /// packet (`more` as in [`Transmit::more`]), `None` when there was none
    /// (then `pkt` holds no new packet).
    #[inline]
    pub fn poll_transmit_into(&mut self, now: Instant, pkt: &mut Packet) -> Option<bool> {
        loop {
            let qp = QpId(*self.out.tx_ready.front()?);
            let Some(q) = self.qps.get_mut(qp.0) else {
                self.out.tx_ready.pop_front();
                continue;
            };
            let built = q.poll_transmit(now, &self.mem, pkt, &mut self.comps);
            if built == Built::Nothing {
                // Only a QP that built nothing completes anything here (a
                // send WR's local error at the head of its queue).
                route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
            }
            // Round-robin: a QP with more goes to the back of the queue. A
            // lone one stays where it is, which is the same place.
            let more = q.wants_transmit_after_packet(now, built);
            if !more || self.out.tx_ready.len() > 1 {
                self.out.tx_ready.pop_front();
                if more {
                    self.out.tx_ready.push_back(qp.0);
                } else {
                    q.tx_queued = false;
                }
            }
            if matches!(built, Built::Nothing | Built::TimedRequest) {
                // A response, or a request packet sent while the ACK timer
                // runs, leaves the QP's timers as the last change armed them
                // (every change ends by arming them).
                self.out.arm_timer(q, qp);
            }
            if built != Built::Nothing {
                return Some(more);
            }
        }
    }

    /// The next CM message to carry to its destination, as a value (for an
    /// owner that delivers it to the other endpoint's
    /// [`handle_cm`](Self::handle_cm)).
    #[inline]
    pub fn poll_cm_transmit(&mut self) -> Option<CmTransmit> {
        self.cm_out.pop_front()
    }

    /// The next CM message to carry, as RDMA CM puts it on RoCEv2: a UD
    /// packet to QP1 holding the MAD, built in `buf` (the buffer moves into
    /// the packet; on `None` it stays the caller's, as with
    /// [`poll_transmit`](Self::poll_transmit)). The other side's
    /// [`handle_packet`](Self::handle_packet) takes it, as does the
    /// kernel's GSI.
    pub fn poll_cm_packet(&mut self, buf: &mut Vec<u8>) -> Option<Packet> {
        loop {
            let t = self.cm_out.pop_front()?;
            match mad::to_mad(&t.msg, self.cfg.ip, t.dst, mad::ca_guid(self.cfg.mac)) {
                Ok(bytes) => {
                    let psn = self.gsi_psn;
                    self.gsi_psn = psn.add(1);
                    return Some(mad::gsi_packet(self.cfg.ip, t.dst, psn, &bytes, std::mem::take(buf)));
                }
                // The verbs bound every field, so this is not expected;
                // counted rather than sent malformed.
                Err(_) => self.counters.cm_dropped += 1,
            }
        }
    }

    /// The next CM event for the application (`cm_poll` of the transport).
    #[inline]
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.cm_events.pop_front()
    }
}
