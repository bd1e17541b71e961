//! The requester's side of what comes back: ACKs, NAKs, READ and atomic
//! responses, and the ACK timer when nothing does. What they acknowledge
//! is marked done and retired in order; a NAK, a gap or a timeout moves
//! the transmit point back (go-back-N) and spends a retry.

use rctb_core::time::Instant;
use rctb_core::transport::{Psn, WcStatus};
use rctb_core::wire::roce::{AckKind, NakCode, Opcode};

use crate::memory::Memory;
use crate::packet::Packet;
use crate::rc::{RcQp, RoutedCompletion};

/// Completes WRs at the head of the queue that are done, in order.
// Always inlined: it runs on every ACK, where the call cost more than its loop.
#[inline(always)]
pub(in crate::rc) fn retire(qp: &mut RcQp, out: &mut Vec<RoutedCompletion>) {
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
pub(in crate::rc) fn handle_response(
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
        qp.counters.dropped += 1;
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
        qp.counters.dropped += 1;
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
        AckKind::Reserved => qp.counters.dropped += 1,
    }
}

fn handle_read_response(qp: &mut RcQp, now: Instant, pkt: &Packet, mem: &mut Memory, out: &mut Vec<RoutedCompletion>) {
    let psn = pkt.bth.psn;
    let Some(idx) = qp.req.sq.iter().position(|w| w.contains(psn)) else {
        qp.counters.dropped += 1;
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
            qp.counters.dropped += 1; // duplicate
            return;
        }
        d if d > 0 => {
            // A response went missing: re-issue the READ from what we have.
            qp.counters.dropped += 1;
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
        qp.counters.dropped += 1;
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
        qp.counters.dropped += 1;
        return;
    };
    let (Some(orig), true) = (pkt.atomic_ack, qp.req.sq[idx].op.is_atomic()) else {
        // An atomic acknowledge for a PSN that is not an atomic (or without
        // its AtomicAckETH): a bad response.
        qp.enter_error(Some(WcStatus::BadRespErr), out);
        return;
    };
    if qp.req.sq[idx].done {
        qp.counters.dropped += 1; // duplicate
        return;
    }
    // Everything before the atomic is implicitly acknowledged -- unless an
    // earlier READ or atomic still waits for its response.
    if ack_before(qp, psn) {
        on_progress(qp, now);
    }
    if qp.req.una != psn {
        qp.counters.dropped += 1;
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

pub(in crate::rc) fn handle_timeout(qp: &mut RcQp, now: Instant, out: &mut Vec<RoutedCompletion>) {
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
