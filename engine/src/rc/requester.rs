//! The requester half of an RC QP: segments send WRs into packets, tracks
//! what the responder acknowledged, retransmits (go-back-N) on NAK, timeout
//! or RNR, and completes WRs in order. READs and atomics wait for their
//! response data; an ACK past one of them means the response was lost, and
//! the request is sent again.

use rctb_core::time::Instant;
use rctb_core::transport::{Psn, SendOp, SendWr, WcStatus};
use rctb_core::wire::roce::{AckKind, AtomicEth, Bth, NakCode, Opcode, Reth};

use super::ring::Ring;
use super::{ACK_REQ_EVERY, Built, MAX_WINDOW_PACKETS, Path, RcQp, RoutedCompletion, SgeList};
use crate::memory::Memory;
use crate::packet::Packet;

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

/// Completes WRs at the head of the queue that are done, in order.
// Always inlined: it runs on every ACK, where the call cost more than its loop.
#[inline(always)]
pub(super) fn retire(qp: &mut RcQp, out: &mut Vec<RoutedCompletion>) {
    while let Some(w) = qp.req.sq.front() {
        if let Some(status) = w.local_error {
            // The failing WR completes with its error, everything after it flushes.
            qp.enter_error(Some(status), out);
            return;
        }
        if !w.done {
            break;
        }
        // What the completion needs, read in place: the WR itself is
        // dropped where it is, not moved out.
        let completion = w.signaled.then(|| (w.wr_id, w.op.wc_opcode(), w.len as u32));
        qp.req.sq.pop_front();
        if qp.req.tx_idx == 0 {
            // The transmit point was on the WR just retired (a go-back raced
            // its ACK): start the next WR from its first packet.
            qp.req.tx_pkt = 0;
        } else {
            qp.req.tx_idx -= 1;
        }
        if let Some((wr_id, opcode, len)) = completion {
            out.push(qp.send_completion(wr_id, opcode, WcStatus::Success, len));
        }
    }
}

/// Marks every PSN before `psn` acknowledged. Stops at a READ whose data has
/// not all arrived: an ACK past it means responses were lost, so the READ is
/// re-issued (an implied NAK). Returns whether anything advanced.
// Always inlined, as `retire`: every ACK runs it.
#[inline(always)]
fn ack_before(qp: &mut RcQp, psn: Psn) -> bool {
    let req = &mut qp.req;
    if psn.diff(req.una) <= 0 {
        return false;
    }
    let mut new_una = psn;
    // The usual case, answered without walking the queue: the ACK ends
    // exactly at the front WR's last packet, so it covers all of it and
    // the next WR (WRs hold consecutive PSNs) starts at `psn`. The walk
    // below would mark it done and stop at the next WR.
    if let Some(w) = req.sq.front_mut()
        && !w.done
        && !w.awaits_response()
        && w.last_psn().add(1) == psn
        && w.first_psn.diff(psn) < 0
    {
        w.done = true;
        req.una = psn;
        // A transmit point past the front WR lies at or after the next WR,
        // which starts at `una`: it is not behind, no need to ask.
        if req.tx_idx == 0 {
            req.skip_acked();
        }
        return true;
    }
    for (i, w) in req.sq.iter_mut().enumerate() {
        if w.done {
            continue;
        }
        if w.first_psn.diff(psn) >= 0 {
            break;
        }
        if w.awaits_response() {
            new_una = w.first_psn.add(w.read_done);
            if req.tx_idx > i {
                req.tx_idx = i;
                req.tx_pkt = 0;
            }
            break;
        }
        if w.last_psn().diff(psn) < 0 {
            w.done = true;
        }
    }
    let advanced = new_una.diff(req.una) > 0;
    if advanced {
        req.una = new_una;
        req.skip_acked();
    }
    advanced
}

#[inline]
fn on_progress(qp: &mut RcQp, now: Instant) {
    let req = &mut qp.req;
    req.retry_left = qp.retry_cnt;
    req.rnr_left = qp.rnr_retry;
    req.started_retry = false;
    rearm(qp, now);
}

/// The ACK timer from `now`, while anything is outstanding.
#[inline]
fn rearm(qp: &mut RcQp, now: Instant) {
    qp.req.ack_deadline = if qp.req.outstanding() > 0 { qp.ack_deadline(now) } else { None };
}

/// Handles an ACK, NAK or READ response.
#[inline]
pub(super) fn handle_response(
    qp: &mut RcQp,
    now: Instant,
    pkt: &Packet,
    mem: &mut Memory,
    out: &mut Vec<RoutedCompletion>,
) {
    let psn = pkt.bth.psn;
    // Responses for PSNs we have not sent, or already retired, are ignored:
    // this is what makes a peer with a stale PSN look like silence.
    if psn.diff(qp.req.una) < 0 || psn.diff(qp.req.sent_end) >= 0 {
        qp.dropped += 1;
        return;
    }
    if pkt.bth.opcode.is_read_response() {
        handle_read_response(qp, now, pkt, mem, out);
        return;
    }
    if pkt.bth.opcode == Opcode::ATOMIC_ACKNOWLEDGE {
        handle_atomic_ack(qp, now, pkt, mem, out);
        return;
    }
    let Some(aeth) = pkt.aeth else {
        qp.dropped += 1;
        return;
    };
    match aeth.kind() {
        AckKind::Ack { .. } => {
            if ack_before(qp, psn.add(1)) {
                on_progress(qp, now);
            }
            retire(qp, out);
        }
        AckKind::RnrNak { timer } => {
            if ack_before(qp, psn) {
                on_progress(qp, now);
            }
            retire(qp, out);
            if qp.state != rctb_core::transport::QpState::Rts {
                return;
            }
            if qp.rnr_retry != 7 {
                if qp.req.rnr_left == 0 {
                    qp.enter_error(Some(WcStatus::RnrRetryExcErr), out);
                    return;
                }
                qp.req.rnr_left -= 1;
            }
            let wait = rctb_core::transport::RnrTimer::from_code(timer).map(|t| t.duration()).unwrap_or_default();
            qp.req.rnr_until = Some(now + wait);
            qp.req.ack_deadline = None;
            qp.req.go_back(psn);
        }
        AckKind::Nak(code) => {
            // A NAK acknowledges what lies before its PSN. As in rxe, that
            // is progress (a fresh retry budget, no retry under way) only
            // when it completes the oldest WR, a SEND or WRITE: an implied
            // ACK inside a message, or past a READ or atomic still owed its
            // response, is not.
            let completes_head = qp.req.sq.front().is_some_and(|w| !w.awaits_response() && w.last_psn().diff(psn) < 0);
            if ack_before(qp, psn) {
                if completes_head {
                    on_progress(qp, now);
                } else {
                    rearm(qp, now);
                }
            }
            retire(qp, out);
            if qp.state != rctb_core::transport::QpState::Rts {
                return;
            }
            let status = match code {
                NakCode::PsnSequenceError => {
                    if qp.req.started_retry {
                        qp.counters.seq_naks_ignored += 1;
                        return;
                    }
                    if !qp.req.spend_retry(qp.retry_cnt) {
                        qp.enter_error(Some(WcStatus::RetryExcErr), out);
                        return;
                    }
                    qp.req.started_retry = true;
                    qp.req.go_back(psn);
                    qp.req.ack_deadline = qp.ack_deadline(now);
                    return;
                }
                NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                NakCode::InvalidRdRequest | NakCode::Reserved(_) => WcStatus::BadRespErr,
            };
            qp.enter_error(Some(status), out);
        }
        AckKind::Reserved => qp.dropped += 1,
    }
}

fn handle_read_response(qp: &mut RcQp, now: Instant, pkt: &Packet, mem: &mut Memory, out: &mut Vec<RoutedCompletion>) {
    let psn = pkt.bth.psn;
    let Some(idx) = qp.req.sq.iter().position(|w| w.contains(psn)) else {
        qp.dropped += 1;
        return;
    };
    if !qp.req.sq[idx].is_read() {
        // A READ response for a PSN that is not a READ: IBA calls it a bad response.
        qp.enter_error(Some(WcStatus::BadRespErr), out);
        return;
    }
    let expected = {
        let w = &qp.req.sq[idx];
        w.first_psn.add(w.read_done)
    };
    match psn.diff(expected) {
        d if d < 0 => {
            qp.dropped += 1; // duplicate
            return;
        }
        d if d > 0 => {
            // A response went missing: re-issue the READ from what we have.
            qp.dropped += 1;
            if qp.req.read_gap != Some(expected) {
                qp.req.read_gap = Some(expected);
                qp.req.go_back(expected);
            }
            return;
        }
        _ => {}
    }
    // In order: everything before this READ is implicitly acknowledged --
    // unless an earlier READ still lacks data (a late response of a READ
    // behind it must not overtake it).
    if ack_before(qp, qp.req.sq[idx].first_psn) {
        on_progress(qp, now);
    }
    if qp.req.una != expected {
        qp.dropped += 1;
        return;
    }
    let pmtu = qp.path.map_or(4096, |p| p.pmtu) as u64;
    let w = &mut qp.req.sq[idx];
    let offset = w.read_done as u64 * pmtu;
    if mem.scatter(&w.sges, offset, &pkt.payload).is_err() {
        qp.enter_error(Some(WcStatus::LocLenErr), out);
        return;
    }
    w.read_done += 1;
    qp.req.una = psn.add(1);
    qp.req.read_gap = None;
    if w.read_done == w.npkts {
        w.done = true;
    }
    on_progress(qp, now);
    retire(qp, out);
}

/// An atomic acknowledge: the original remote value goes to the WR's
/// 8-byte SGE, in the host's order, and the atomic is done.
fn handle_atomic_ack(qp: &mut RcQp, now: Instant, pkt: &Packet, mem: &mut Memory, out: &mut Vec<RoutedCompletion>) {
    let psn = pkt.bth.psn;
    let Some(idx) = qp.req.sq.iter().position(|w| w.contains(psn)) else {
        qp.dropped += 1;
        return;
    };
    let (Some(orig), true) = (pkt.atomic_ack, qp.req.sq[idx].op.is_atomic()) else {
        // An atomic acknowledge for a PSN that is not an atomic (or without
        // its AtomicAckETH): a bad response.
        qp.enter_error(Some(WcStatus::BadRespErr), out);
        return;
    };
    if qp.req.sq[idx].done {
        qp.dropped += 1; // duplicate
        return;
    }
    // Everything before the atomic is implicitly acknowledged -- unless an
    // earlier READ or atomic still waits for its response.
    if ack_before(qp, psn) {
        on_progress(qp, now);
    }
    if qp.req.una != psn {
        qp.dropped += 1;
        return;
    }
    let w = &mut qp.req.sq[idx];
    if mem.scatter(&w.sges, 0, &orig.orig.to_le_bytes()).is_err() {
        qp.enter_error(Some(WcStatus::LocLenErr), out);
        return;
    }
    w.read_done = 1;
    w.done = true;
    qp.req.una = psn.add(1);
    qp.req.read_gap = None;
    on_progress(qp, now);
    retire(qp, out);
}

pub(super) fn handle_timeout(qp: &mut RcQp, now: Instant, out: &mut Vec<RoutedCompletion>) {
    if qp.req.rnr_until.is_some_and(|t| t <= now) {
        qp.req.rnr_until = None;
        qp.req.ack_deadline = qp.ack_deadline(now);
    }
    let Some(deadline) = qp.req.ack_deadline else { return };
    if deadline > now {
        return;
    }
    if qp.req.outstanding() == 0 {
        qp.req.ack_deadline = None;
        return;
    }
    qp.counters.timeouts += 1;
    // A timeout always retries (and spends), a retry under way or not.
    if !qp.req.spend_retry(qp.retry_cnt) {
        qp.enter_error(Some(WcStatus::RetryExcErr), out);
        return;
    }
    qp.req.started_retry = true;
    qp.req.read_gap = None;
    let una = qp.req.una;
    qp.req.go_back(una);
    qp.req.ack_deadline = qp.ack_deadline(now);
}

/// The WR to send from: the transmit point's (`tx_idx`, `tx_pkt`), once
/// moved past WRs that are already finished (a go-back never needs to
/// resend them). On the requester's fields, so that the WR stays borrowed
/// while the packet is built and the transmit point moves.
#[inline]
fn next_to_send<'a>(sq: &'a Ring<SendWqe>, tx_idx: &mut usize, tx_pkt: &mut u32) -> Option<&'a SendWqe> {
    loop {
        let w = sq.get(*tx_idx)?;
        if !w.done {
            return Some(w);
        }
        *tx_idx += 1;
        *tx_pkt = 0;
    }
}

/// Builds the next request packet into `pkt`: [`Built::Nothing`] when
/// there was none, [`Built::TimedRequest`] when it started the ACK timer,
/// else [`Built::Request`]. `checked`: [`Requester::can_transmit`] is known to hold (asked at `now`,
/// nothing changed since), so it is not asked again.
#[inline]
pub(super) fn poll_transmit(
    qp: &mut RcQp,
    now: Instant,
    checked: bool,
    path: &Path,
    mem: &Memory,
    pkt: &mut Packet,
    out: &mut Vec<RoutedCompletion>,
) -> Built {
    if !checked && !qp.req.can_transmit(now, qp.max_rd_atomic) {
        // A local error at the head completes now.
        if qp.req.sq.front().is_some_and(|w| w.local_error.is_some()) {
            retire(qp, out);
        }
        return Built::Nothing;
    }
    let pmtu = path.pmtu as u64;
    let req = &mut qp.req;
    let Some(w) = next_to_send(&req.sq, &mut req.tx_idx, &mut req.tx_pkt) else { return Built::Nothing };
    pkt.payload.clear();
    let (opcode, psn, reth, imm, ends, retx);
    let mut atomic = None;
    let atomic_op = match w.op {
        SendOp::CompareSwap { remote, compare, swap } => Some((Opcode::COMPARE_SWAP, remote, swap, compare)),
        SendOp::FetchAdd { remote, add } => Some((Opcode::FETCH_ADD, remote, add, 0)),
        _ => None,
    };
    if let Some((op, remote, swap_add, compare)) = atomic_op {
        psn = w.first_psn;
        retx = psn.diff(req.sent_end) < 0;
        opcode = op;
        atomic = Some(AtomicEth { va: remote.addr, rkey: remote.rkey, swap_add, compare });
        (reth, imm, ends) = (None, None, true);
        if psn.diff(req.sent_end) >= 0 {
            req.sent_end = psn.add(1);
        }
        req.tx_idx += 1;
        req.tx_pkt = 0;
    } else if let SendOp::Read { remote } = w.op {
        let done = w.read_done as u64 * pmtu;
        psn = w.first_psn.add(w.read_done);
        retx = psn.diff(req.sent_end) < 0;
        opcode = Opcode::READ_REQUEST;
        reth = Some(Reth {
            va: remote.addr.wrapping_add(done),
            rkey: remote.rkey,
            dma_len: w.len.saturating_sub(done) as u32,
        });
        imm = None;
        ends = true;
        // The READ consumes PSNs up to its last response.
        let end = w.last_psn().add(1);
        if end.diff(req.sent_end) > 0 {
            req.sent_end = end;
        }
        req.tx_idx += 1;
        req.tx_pkt = 0;
    } else {
        let k = req.tx_pkt;
        let offset = k as u64 * pmtu;
        let chunk = (w.len - offset.min(w.len)).min(pmtu);
        // First: fewer values live across its call.
        mem.gather(&w.sges, offset, chunk, &mut pkt.payload);
        let first = k == 0;
        let last = k + 1 == w.npkts;
        psn = w.first_psn.add(k);
        retx = psn.diff(req.sent_end) < 0;
        let (with_imm, is_write) = match w.op {
            SendOp::Send => (false, false),
            SendOp::SendWithImm { .. } => (true, false),
            SendOp::Write { .. } => (false, true),
            SendOp::WriteWithImm { .. } => (true, true),
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => {
                unreachable!("handled above")
            }
        };
        opcode = match (is_write, first, last, with_imm) {
            (false, true, true, false) => Opcode::SEND_ONLY,
            (false, true, true, true) => Opcode::SEND_ONLY_IMM,
            (false, true, false, _) => Opcode::SEND_FIRST,
            (false, false, false, _) => Opcode::SEND_MIDDLE,
            (false, false, true, false) => Opcode::SEND_LAST,
            (false, false, true, true) => Opcode::SEND_LAST_IMM,
            (true, true, true, false) => Opcode::WRITE_ONLY,
            (true, true, true, true) => Opcode::WRITE_ONLY_IMM,
            (true, true, false, _) => Opcode::WRITE_FIRST,
            (true, false, false, _) => Opcode::WRITE_MIDDLE,
            (true, false, true, false) => Opcode::WRITE_LAST,
            (true, false, true, true) => Opcode::WRITE_LAST_IMM,
        };
        reth = match (first, w.op.remote()) {
            (true, Some(r)) => Some(Reth { va: r.addr, rkey: r.rkey, dma_len: w.len as u32 }),
            _ => None,
        };
        imm = if last { w.op.imm() } else { None };
        ends = last;
        if last {
            req.tx_idx += 1;
            req.tx_pkt = 0;
        } else {
            req.tx_pkt += 1;
        }
        if psn.diff(req.sent_end) >= 0 {
            req.sent_end = psn.add(1);
        }
    }
    if retx {
        qp.counters.retransmitted += 1;
    }
    let solicited = ends && w.solicited;
    // rxe: `(END) || (noack_pkts++ > RXE_MAX_PKT_PER_ACK)`: the count is
    // compared before it grows and not counted on a message's last packet,
    // so a long message asks for an ACK at its packets 65, 131, 197, ...
    let ack_req = ends || {
        let before = req.pkts_since_ack_req;
        req.pkts_since_ack_req += 1;
        before > ACK_REQ_EVERY
    };
    if ack_req {
        req.pkts_since_ack_req = 0;
    }
    let timed = req.ack_deadline.is_none();
    if timed {
        req.ack_deadline = qp.ack_timeout_ns.map(|t| Instant::from_nanos(now.as_nanos().saturating_add(t)));
    }
    let mut bth = Bth::new(opcode, path.dest_qpn, psn);
    bth.ack_req = ack_req;
    bth.se = solicited;
    path.fill(pkt, bth, None, None, imm);
    // The extended headers a SEND lacks are stored only when present
    // (`fill` cleared them): storing an `Option` whole writes every field.
    if let Some(reth) = reth {
        pkt.reth = Some(reth);
    }
    if let Some(atomic) = atomic {
        pkt.atomic = Some(atomic);
    }
    if timed { Built::TimedRequest } else { Built::Request }
}
