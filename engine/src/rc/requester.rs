//! The requester half of an RC QP: segments send WRs into packets, tracks
//! what the responder acknowledged, retransmits (go-back-N) on NAK, timeout
//! or RNR, and completes WRs in order. READs and atomics wait for their
//! response data; an ACK past one of them means the response was lost, and
//! the request is sent again.
//!
//! This file holds the requester's state: the send queue's WRs, the PSNs
//! and the transmit point, the retry budgets. `ack.rs` takes what comes
//! back (ACKs, NAKs, READ and atomic responses, the ACK timer) and retires
//! WRs in order; `transmit.rs` builds the next request packet.

mod ack;
mod transmit;

use rctb_core::time::Instant;
use rctb_core::transport::{Psn, SendOp, SendWr, WcStatus};

use super::ring::Ring;
use super::{MAX_WINDOW_PACKETS, SgeList};

pub(super) use ack::{handle_response, handle_timeout, retire};
pub(super) use transmit::poll_transmit;

#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr_id: u64,
    pub op: SendOp,
    pub sges: SgeList,
    pub len: u64,
    pub signaled: bool,
    pub solicited: bool,
    pub first_psn: Psn,
    /// PSNs this WR consumes: its packets, or a READ's response packets.
    pub npkts: u32,
    /// READ or atomic: response packets received in order so far.
    pub read_done: u32,
    /// Fully acknowledged (or, for READ and atomics, all data received).
    pub done: bool,
    /// A local error found when the WR was processed.
    pub local_error: Option<WcStatus>,
}

/// An unused ring slot's placeholder, never read as a WR.
impl Default for SendWqe {
    fn default() -> Self {
        SendWqe {
            wr_id: 0,
            op: SendOp::Send,
            sges: SgeList::new(),
            len: 0,
            signaled: false,
            solicited: false,
            first_psn: Psn::default(),
            npkts: 0,
            read_done: 0,
            done: false,
            local_error: None,
        }
    }
}

impl SendWqe {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }

    fn contains(&self, psn: Psn) -> bool {
        let d = psn.diff(self.first_psn);
        d >= 0 && (d as u32) < self.npkts
    }

    fn is_read(&self) -> bool {
        matches!(self.op, SendOp::Read { .. })
    }

    /// A READ or an atomic: done when its response data arrives, not on an ACK.
    fn awaits_response(&self) -> bool {
        self.op.is_read_or_atomic()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Requester {
    sq: Ring<SendWqe>,
    /// PSN the next posted WR starts at.
    next_psn: Psn,
    /// Oldest PSN not yet acknowledged.
    una: Psn,
    /// One past the highest PSN transmitted so far.
    sent_end: Psn,
    /// Next packet to transmit: index into `sq` and packet within that WR.
    tx_idx: usize,
    tx_pkt: u32,
    retry_left: u8,
    rnr_left: u8,
    /// A retry (go-back after a sequence NAK or a timeout) is under way:
    /// until a response makes progress, a further sequence NAK starts no
    /// new one (rxe's `started_retry`).
    started_retry: bool,
    ack_deadline: Option<Instant>,
    rnr_until: Option<Instant>,
    /// rxe's `noack_pkts`: packets sent since the last AckReq.
    pkts_since_ack_req: u32,
    /// The READ response PSN we last re-issued a READ for: responses of the
    /// original flight keep arriving after a gap, and each must not trigger
    /// another re-issue (one per gap; a timeout clears it).
    read_gap: Option<Psn>,
}

impl Requester {
    pub(crate) fn reset_for_rts(&mut self, sq_psn: Psn, retry_cnt: u8, rnr_retry: u8) {
        *self = Requester {
            next_psn: sq_psn,
            una: sq_psn,
            sent_end: sq_psn,
            retry_left: retry_cnt,
            rnr_left: rnr_retry,
            ..Requester::default()
        };
    }

    pub(crate) fn queued(&self) -> usize {
        self.sq.len()
    }

    #[inline]
    pub(crate) fn post(&mut self, wr: &SendWr<'_>, len: u64, signaled: bool, pmtu: u32) {
        // One packet, the usual case, needs no division.
        let npkts = if len <= pmtu as u64 { 1 } else { len.div_ceil(pmtu as u64) as u32 };
        self.sq.push_back(SendWqe {
            wr_id: wr.wr_id,
            op: wr.op,
            sges: super::sge_list(wr.sges),
            len,
            signaled,
            solicited: wr.solicited,
            first_psn: self.next_psn,
            npkts,
            read_done: 0,
            done: false,
            local_error: None,
        });
        self.next_psn = self.next_psn.add(npkts);
    }

    pub(crate) fn mark_local_error(&mut self, status: WcStatus) {
        if let Some(w) = self.sq.back_mut() {
            w.local_error = Some(status);
        }
    }

    pub(crate) fn drain(&mut self) -> impl Iterator<Item = SendWqe> + '_ {
        self.ack_deadline = None;
        self.rnr_until = None;
        self.tx_idx = 0;
        self.tx_pkt = 0;
        self.sq.take_all().into_iter()
    }

    #[inline]
    fn outstanding(&self) -> u32 {
        self.sent_end.diff(self.una).max(0) as u32
    }

    /// Moves the transmit point up to `una` when it is behind it: after a
    /// go-back (timeout, NAK, RNR) rewound it, ACKs of the first flight
    /// still arrive, and what they cover must not be sent again. READs keep
    /// their own rewind (`ack_before` stops at them).
    #[inline]
    fn skip_acked(&mut self) {
        match self.sq.get(self.tx_idx) {
            // Everything queued was sent: no WR holding `una` lies at or
            // after the transmit point, so it cannot be behind.
            None => {}
            // The transmit point's packet is at or past `una` (WRs hold
            // rising PSNs, and the point is inside its WR), so it is not
            // behind: the usual case, answered without the search.
            Some(w) if !w.awaits_response() && w.first_psn.add(self.tx_pkt).diff(self.una) >= 0 => {}
            Some(_) => self.skip_acked_search(),
        }
    }

    /// [`Self::skip_acked`] past its usual case (kept out of line so that
    /// the usual case inlines into every ACK).
    #[inline(never)]
    fn skip_acked_search(&mut self) {
        let Some(idx) = self.sq.iter().position(|w| w.contains(self.una)) else { return };
        let w = &self.sq[idx];
        if w.awaits_response() {
            return;
        }
        let acked = self.una.diff(w.first_psn) as u32;
        if self.tx_idx < idx || (self.tx_idx == idx && self.tx_pkt < acked) {
            // Every WR before `idx` ends before `una`: acknowledged, done.
            self.tx_idx = idx;
            self.tx_pkt = acked;
        }
    }

    // Always inlined: asked after every packet and every post.
    #[inline(always)]
    pub(crate) fn can_transmit(&self, now: Instant, max_rd_atomic: u8) -> bool {
        if self.tx_idx >= self.sq.len() || self.rnr_until.is_some_and(|t| now < t) {
            // Nothing left to send, or waiting out an RNR NAK.
            return false;
        }
        // Usually the WR at the transmit point is unfinished (its packet is
        // the transmit point's); skip done ones otherwise (from their first).
        let (w, pkt) = match self.sq.get(self.tx_idx) {
            Some(w) if !w.done => (w, self.tx_pkt),
            _ => match self.sq.iter().skip(self.tx_idx).find(|w| !w.done) {
                Some(w) => (w, 0),
                None => return false,
            },
        };
        if w.local_error.is_some() {
            // The error completes once everything before it has.
            return false;
        }
        let awaits = w.awaits_response();
        let psn = if awaits { w.first_psn.add(w.read_done) } else { w.first_psn.add(pkt) };
        let is_new = psn.diff(self.sent_end) >= 0;
        if is_new && self.outstanding() >= MAX_WINDOW_PACKETS {
            return false;
        }
        if awaits && is_new && self.reads_outstanding() >= max_rd_atomic as usize {
            return false;
        }
        true
    }

    /// READs and atomics sent and not yet retired: what `max_rd_atomic`
    /// bounds. One whose response arrived still counts until every WR before
    /// it retired: the responder keeps the results of only its last
    /// `max_dest_rd_atomic` requests, and an older one whose response was
    /// lost is asked again, so none newer than the window may have
    /// recycled its result (or the repeat would go unanswered forever).
    /// Asked only when the next new request is a READ or an atomic.
    fn reads_outstanding(&self) -> usize {
        let sent_end = self.sent_end;
        self.sq.iter().take_while(|w| w.first_psn.diff(sent_end) < 0).filter(|w| w.awaits_response()).count()
    }

    #[inline]
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        // Without an RNR wait (the usual case) only the ACK deadline is left to look at.
        match self.rnr_until {
            None => self.ack_deadline,
            Some(a) => Some(self.ack_deadline.map_or(a, |b| a.min(b))),
        }
    }

    /// Spends one transport retry of a budget of `retry_cnt`; false when
    /// none is left. 7 is never spent, as rxe does (IBA gives 7 that meaning
    /// only for the RNR retry count; ConnectX retries 7 times).
    fn spend_retry(&mut self, retry_cnt: u8) -> bool {
        if retry_cnt == 7 {
            return true;
        }
        if self.retry_left == 0 {
            return false;
        }
        self.retry_left -= 1;
        true
    }

    /// Moves the transmit point back to `psn` (go-back-N).
    fn go_back(&mut self, psn: Psn) {
        if let Some(idx) = self.sq.iter().position(|w| w.contains(psn)) {
            let w = &self.sq[idx];
            self.tx_idx = idx;
            self.tx_pkt = if w.awaits_response() { 0 } else { psn.diff(w.first_psn) as u32 };
        }
    }
}
