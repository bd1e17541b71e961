//! The requester's transmit side: the next request packet built from the
//! WR at the transmit point (segmented at the path MTU, READ and atomic
//! requests, AckReq and the ACK timer's start).

use rctb_core::time::Instant;
use rctb_core::transport::SendOp;
use rctb_core::wire::roce::{AtomicEth, Bth, Opcode, Reth};

use super::{SendWqe, retire};
use crate::memory::Memory;
use crate::packet::Packet;
use crate::rc::ring::Ring;
use crate::rc::{ACK_REQ_EVERY, Built, Path, RcQp, RoutedCompletion};

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
///
/// [`Requester::can_transmit`]: super::Requester::can_transmit
#[inline]
pub(in crate::rc) fn poll_transmit(
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
