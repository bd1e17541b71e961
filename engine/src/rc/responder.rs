//! The responder half of an RC QP: checks PSNs, places SEND data into posted
//! receives and WRITE data into registered memory, answers READs, executes
//! atomics (saving each result to replay a duplicate), and sends ACK, RNR
//! NAK and NAK as IBA's responder rules (and rxe) do.

use std::collections::VecDeque;

use rctb_core::transport::{ATOMIC_LEN, Access, MrId, PdId, Psn, RecvWr, SrqId, WcOpcode, WcStatus};
use rctb_core::wire::roce::{Aeth, AtomicAckEth, AtomicEth, Bth, NakCode, Opcode, Reth};

use super::ring::Ring;
use super::{Path, RcQp, RoutedCompletion, SgeList};
use crate::endpoint::Cq;
use crate::idmap::IdMap;
use crate::memory::Memory;
use crate::packet::Packet;

/// (`Default`: an unused ring slot's placeholder.)
#[derive(Debug, Default)]
struct RecvWqe {
    wr_id: u64,
    sges: SgeList,
    /// The SGE list failed its local check at post time.
    bad: bool,
}

/// A shared receive queue: receives any attached QP takes, oldest first.
/// A QP takes one when a message that needs a receive starts and its own
/// queue is empty; the receive is then the QP's (completed, or flushed, on
/// its CQ), so several QPs' multi-packet messages never share one.
#[derive(Debug)]
pub(crate) struct Srq {
    pub id: SrqId,
    pub pd: PdId,
    pub max_wr: u32,
    pub max_sge: u32,
    /// The armed limit, 0 for none.
    pub limit: u32,
    /// The limit fired since the owner last looked.
    pub limit_reached: bool,
    wqes: VecDeque<RecvWqe>,
}

impl Srq {
    pub(crate) fn new(id: SrqId, pd: PdId, max_wr: u32, max_sge: u32, limit: u32) -> Self {
        Srq { id, pd, max_wr, max_sge, limit, limit_reached: false, wqes: VecDeque::new() }
    }

    pub(crate) fn len(&self) -> usize {
        self.wqes.len()
    }

    pub(crate) fn post(&mut self, wr: &RecvWr<'_>, bad: bool) {
        self.wqes.push_back(RecvWqe { wr_id: wr.wr_id, sges: super::sge_list(wr.sges), bad });
    }

    /// Takes the oldest receive; fires the armed limit when fewer than it
    /// remain (rxe's `get_srq_wqe`).
    fn take(&mut self) -> Option<RecvWqe> {
        let w = self.wqes.pop_front()?;
        if self.limit > 0 && self.wqes.len() < self.limit as usize {
            self.limit = 0;
            self.limit_reached = true;
        }
        Some(w)
    }
}

/// What the responder needs from outside its QP for one packet.
#[derive(Debug)]
pub(crate) struct RecvCtx<'a> {
    /// The QP's shared receive queue, if it has one.
    pub srq: Option<&'a mut Srq>,
    /// The endpoint's CQs, to see whether a receive completion fits, and
    /// to take it.
    pub cqs: &'a mut IdMap<Cq>,
}

impl RecvCtx<'_> {
    /// `qp`'s receive CQ when it can take one more completion: a message
    /// that ends looks its CQ up once, for the room and for the completion
    /// ([`complete_into`]).
    #[inline]
    fn recv_cq_with_room(&mut self, qp: &RcQp) -> Option<&mut Cq> {
        self.cqs.get_mut(qp.init.recv_cq.0).filter(|c| c.entries.len() < c.depth as usize)
    }
}

/// A receive completion for `cq`, its CQ, found with room by
/// [`RecvCtx::recv_cq_with_room`]: straight into it when nothing waits in
/// `out` to be routed before it; else into `out`, behind the others, for
/// the endpoint to route. Either way the CQ gets it in the same order (a
/// packet's one completion, usually, skips the routing).
#[inline]
fn complete_into(cq: &mut Cq, rc: RoutedCompletion, out: &mut Vec<RoutedCompletion>) {
    if out.is_empty() {
        cq.push(rc.wc, rc.solicited);
    } else {
        out.push(rc);
    }
}

/// A multi-packet message in progress.
#[derive(Debug, Clone, Copy)]
enum InMsg {
    Send { received: u64 },
    Write { target: Option<(MrId, u64)>, done: u64, total: u32 },
}

/// Something the responder still has to transmit.
#[derive(Debug)]
enum Reply {
    Ack { psn: Psn, aeth: Aeth },
    Read { psn: Psn, target: Option<(MrId, u64)>, sent: u64, total: u64, msn: u32 },
    Atomic { psn: Psn, orig: u64, msn: u32 },
}

/// One of the `max_dest_rd_atomic` responder resources (IBA 9.7.5.1.4): a
/// READ or an atomic the responder executed, oldest first. READs and
/// atomics share them, so a newer one recycles the oldest, as rxe does.
#[derive(Debug, Clone, Copy)]
enum Resource {
    Read,
    /// The atomic at `psn` found `orig` and answered with it: a duplicate
    /// gets the same answer and is not executed again.
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

#[derive(Debug, Default)]
pub(crate) struct Responder {
    epsn: Psn,
    msn: u32,
    rq: Ring<RecvWqe>,
    cur: Option<InMsg>,
    /// A PSN sequence error NAK was sent for the current gap.
    nak_sent: bool,
    /// Replies to send, oldest first; `tail_ack` comes after them.
    replies: VecDeque<Reply>,
    /// The newest reply when it is an ACK not yet sent (the coalescing
    /// point): kept out of `replies` so the usual lone ACK skips the queue.
    tail_ack: Option<(Psn, Aeth)>,
    /// READs and atomics executed, oldest first, at most `max_dest_rd_atomic`.
    resources: VecDeque<Resource>,
}

impl Responder {
    pub(crate) fn reset_for_rtr(&mut self, rq_psn: Psn) {
        self.epsn = rq_psn;
        self.msn = 0;
        self.cur = None;
        self.nak_sent = false;
        self.replies.clear();
        self.tail_ack = None;
        self.resources.clear();
    }

    pub(crate) fn rq_len(&self) -> usize {
        self.rq.len()
    }

    #[inline]
    pub(crate) fn post(&mut self, wr: &RecvWr<'_>, bad: bool) {
        self.rq.push_back(RecvWqe { wr_id: wr.wr_id, sges: super::sge_list(wr.sges), bad });
    }

    pub(crate) fn has_output(&self) -> bool {
        // Both asked with one branch (asked around every packet).
        (self.replies.len() | self.tail_ack.is_some() as usize) != 0
    }

    /// Empties the receive queue for a flush: (wr_id, status) per WR.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (u64, WcStatus)> + '_ {
        self.cur = None;
        self.replies.clear();
        self.tail_ack = None;
        self.rq.take_all().into_iter().map(|w| (w.wr_id, WcStatus::WrFlushErr))
    }

    fn queue_ack(&mut self, psn: Psn, aeth: Aeth) {
        if let Some((p, a)) = &mut self.tail_ack
            && aeth.kind() == a.kind()
        {
            // A newer ACK covers the older one that has not left yet.
            *p = psn;
            *a = aeth;
            return;
        }
        if let Some((p, a)) = self.tail_ack.replace((psn, aeth)) {
            self.replies.push_back(Reply::Ack { psn: p, aeth: a });
        }
    }

    fn queue_nak(&mut self, psn: Psn, aeth: Aeth) {
        self.push_reply(Reply::Ack { psn, aeth });
    }

    /// Queues a reply no later ACK may replace.
    fn push_reply(&mut self, reply: Reply) {
        if let Some((psn, aeth)) = self.tail_ack.take() {
            self.replies.push_back(Reply::Ack { psn, aeth });
        }
        self.replies.push_back(reply);
    }

    /// Takes every queued reply out, for [`Self::restore_replies`].
    fn take_replies(&mut self) -> (VecDeque<Reply>, Option<(Psn, Aeth)>) {
        (std::mem::take(&mut self.replies), self.tail_ack.take())
    }

    fn restore_replies(&mut self, (replies, tail_ack): (VecDeque<Reply>, Option<(Psn, Aeth)>)) {
        self.replies = replies;
        self.tail_ack = tail_ack;
    }

    /// Takes a responder resource, recycling the oldest when all `max` are in use.
    fn take_resource(&mut self, max: u8, resource: Resource) {
        while self.resources.len() >= max.max(1) as usize {
            self.resources.pop_front();
        }
        self.resources.push_back(resource);
    }

    /// The saved result of the atomic at `psn`, while its resource lasts.
    fn saved_atomic(&self, psn: Psn) -> Option<u64> {
        self.resources.iter().rev().find_map(|r| match *r {
            Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
            _ => None,
        })
    }
}

fn access_error(qp: &mut RcQp, psn: Psn, out: &mut Vec<RoutedCompletion>) {
    let msn = qp.resp.msn;
    qp.resp.queue_nak(psn, Aeth::nak(NakCode::RemoteAccessError, msn));
    // The responder moves to ERR after sending the NAK (rxe: class C error).
    fatal(qp, None, out);
}

fn invalid_request(qp: &mut RcQp, psn: Psn, failed_recv: Option<WcStatus>, out: &mut Vec<RoutedCompletion>) {
    let msn = qp.resp.msn;
    qp.resp.queue_nak(psn, Aeth::nak(NakCode::InvalidRequest, msn));
    fatal(qp, failed_recv, out);
}

/// The posted receive cannot take the message (too small, or a bad local
/// key). IBA (and mlx5) complete it with LOC_LEN_ERR and NAK an invalid
/// request; rxe treats it as a malformed WQE (class A): the receive completes
/// with LOC_QP_OP_ERR and the NAK is a remote operational error, so the
/// requester sees REM_OP_ERR. The simulator follows rxe, the reference the
/// conformance suite runs against (case `receive_too_small`).
fn malformed_wqe(qp: &mut RcQp, psn: Psn, out: &mut Vec<RoutedCompletion>) {
    let msn = qp.resp.msn;
    qp.resp.queue_nak(psn, Aeth::nak(NakCode::RemoteOperationalError, msn));
    fatal(qp, Some(WcStatus::LocQpOpErr), out);
}

/// Moves the QP to ERR but keeps the NAK queued so it still goes out.
fn fatal(qp: &mut RcQp, failed_recv: Option<WcStatus>, out: &mut Vec<RoutedCompletion>) {
    let replies = qp.resp.take_replies();
    if let Some(status) = failed_recv
        && let Some(wr_id) = qp.resp.rq.pop_front().map(|w| w.wr_id)
    {
        out.push(qp.recv_completion(wr_id, WcOpcode::Recv, status, 0, None));
    }
    qp.enter_error(None, out);
    qp.resp.restore_replies(replies);
}

#[inline]
pub(super) fn handle_request(
    qp: &mut RcQp,
    pkt: &Packet,
    mem: &mut Memory,
    ctx: &mut RecvCtx<'_>,
    out: &mut Vec<RoutedCompletion>,
) {
    let op = pkt.bth.opcode;
    // SEND Only, the usual request, is known, RC, starts a message and is a
    // SEND: asked first, it skips the opcode tests (table lookups) below.
    let send_only = op == Opcode::SEND_ONLY;
    if !send_only && (!op.is_known() || !op.is_rc()) {
        qp.counters.dropped += 1;
        return;
    }
    let psn = pkt.bth.psn;
    let d = psn.diff(qp.resp.epsn);
    if d > 0 {
        // Sequence gap: NAK once per gap, drop until the missing PSN arrives.
        if !qp.resp.nak_sent {
            qp.resp.nak_sent = true;
            let (epsn, msn) = (qp.resp.epsn, qp.resp.msn);
            qp.resp.queue_nak(epsn, Aeth::nak(NakCode::PsnSequenceError, msn));
        }
        qp.counters.dropped += 1;
        return;
    }
    if d < 0 {
        handle_duplicate(qp, pkt, mem);
        return;
    }
    // The expected PSN arrived: a later gap may be NAKed again, even if this
    // packet is itself refused (RNR), as rxe's check_psn does.
    qp.resp.nak_sent = false;
    // In sequence: the opcode must continue (or start) a message correctly.
    let continuing = qp.resp.cur;
    let ok = match continuing {
        None => send_only || op.starts_message() || op == Opcode::READ_REQUEST || op.has_atomic_eth(),
        Some(InMsg::Send { .. }) => op.is_send() && !op.starts_message(),
        Some(InMsg::Write { .. }) => op.is_write() && !op.starts_message(),
    };
    if !ok {
        invalid_request(qp, psn, None, out);
        return;
    }
    if send_only || op.is_send() {
        handle_send(qp, pkt, send_only || op.ends_message(), mem, ctx, out);
    } else if op == Opcode::READ_REQUEST {
        handle_read_request(qp, pkt, mem, out);
    } else if op.has_atomic_eth() {
        handle_atomic(qp, pkt, mem, out);
    } else {
        handle_write(qp, pkt, mem, ctx, out);
    }
}

fn handle_duplicate(qp: &mut RcQp, pkt: &Packet, mem: &Memory) {
    if pkt.bth.opcode == Opcode::READ_REQUEST {
        // A duplicate READ is executed again (IBA 9.7.5.1.2).
        if let Some(reth) = pkt.reth
            && qp.access.contains(Access::REMOTE_READ)
            && let Ok(target) =
                mem.resolve_remote(qp.pd(), reth.rkey, reth.va, reth.dma_len as u64, Access::REMOTE_READ)
        {
            let msn = qp.resp.msn;
            qp.resp.push_reply(Reply::Read { psn: pkt.bth.psn, target, sent: 0, total: reth.dma_len as u64, msn });
        }
        return;
    }
    if pkt.bth.opcode.has_atomic_eth() {
        // A duplicate atomic gets the answer saved when it was executed and
        // is not executed again (IBA 9.7.5.1.4, C9-112). Once a newer READ
        // or atomic recycled its resource, it is dropped (rxe: class D).
        if let Some(orig) = qp.resp.saved_atomic(pkt.bth.psn) {
            let msn = qp.resp.msn;
            qp.resp.push_reply(Reply::Atomic { psn: pkt.bth.psn, orig, msn });
            qp.counters.atomics_replayed += 1;
        } else {
            qp.counters.dropped += 1;
        }
        return;
    }
    // Every duplicate SEND or WRITE packet is acknowledged again, AckReq or
    // not (C9-105, and rxe's duplicate_request): the requester lost our ACK.
    let (epsn, msn) = (qp.resp.epsn, qp.resp.msn);
    qp.resp.queue_ack(epsn.add(MAX_PSN_BACK), Aeth::ack(msn));
}

/// `epsn - 1` as an addition in the 24-bit space.
const MAX_PSN_BACK: u32 = rctb_core::transport::MAX_24BIT;

#[inline]
fn finish_packet(qp: &mut RcQp, pkt: &Packet) {
    qp.resp.epsn = qp.resp.epsn.add(1);
    if pkt.bth.ack_req {
        let msn = qp.resp.msn;
        qp.resp.queue_ack(pkt.bth.psn, Aeth::ack(msn));
    }
}

/// Makes sure the QP holds a receive, taking one from its SRQ when its own
/// queue is empty; whether it has one now.
#[inline]
fn have_recv(qp: &mut RcQp, ctx: &mut RecvCtx<'_>) -> bool {
    !qp.resp.rq.is_empty() || take_from_srq(qp, ctx)
}

fn take_from_srq(qp: &mut RcQp, ctx: &mut RecvCtx<'_>) -> bool {
    match ctx.srq.as_deref_mut().and_then(Srq::take) {
        Some(w) => {
            qp.resp.rq.push_back(w);
            true
        }
        None => false,
    }
}

/// The message is complete but its receive completion would not fit the
/// full CQ: as rxe (`RESPST_ERR_CQ_OVERFLOW`), the QP goes to ERR without
/// acknowledging it; the receive stays posted and is flushed with the rest.
/// What was queued for earlier packets still goes out.
#[cold]
fn cq_overflow(qp: &mut RcQp, out: &mut Vec<RoutedCompletion>) {
    let replies = qp.resp.take_replies();
    qp.enter_error(None, out);
    qp.resp.restore_replies(replies);
}

/// A SEND packet; `ends`: it ends its message (asked once, by the caller:
/// the opcode test is a table lookup the compiler repeated).
#[inline]
fn handle_send(
    qp: &mut RcQp,
    pkt: &Packet,
    ends: bool,
    mem: &mut Memory,
    ctx: &mut RecvCtx<'_>,
    out: &mut Vec<RoutedCompletion>,
) {
    let psn = pkt.bth.psn;
    if !have_recv(qp, ctx) {
        // No receive posted: RNR NAK with our min RNR timer; the requester
        // retries this PSN after that wait.
        let (timer, msn) = (qp.min_rnr_timer.code(), qp.resp.msn);
        qp.resp.queue_nak(psn, Aeth::rnr_nak(timer, msn));
        return;
    }
    let Some(wqe) = qp.resp.rq.front() else { return };
    if wqe.bad {
        malformed_wqe(qp, psn, out);
        return;
    }
    // First and Middle packets carry exactly one PMTU; Last and Only at most one.
    let pmtu = qp.path.map_or(4096, |p| p.pmtu) as usize;
    let len_ok = if ends { pkt.payload.len() <= pmtu } else { pkt.payload.len() == pmtu };
    if !len_ok {
        invalid_request(qp, psn, None, out);
        return;
    }
    let offset = match qp.resp.cur {
        Some(InMsg::Send { received }) => received,
        _ => 0,
    };
    if mem.scatter(&qp.resp.rq[0].sges, offset, &pkt.payload).is_err() {
        malformed_wqe(qp, psn, out);
        return;
    }
    let received = offset + pkt.payload.len() as u64;
    if ends {
        let Some(cq) = ctx.recv_cq_with_room(qp) else {
            cq_overflow(qp, out);
            return;
        };
        qp.resp.cur = None;
        qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
        if let Some(wr_id) = qp.resp.rq.pop_front().map(|w| w.wr_id) {
            let mut rc = qp.recv_completion(wr_id, WcOpcode::Recv, WcStatus::Success, received as u32, pkt.imm);
            rc.solicited = pkt.bth.se;
            complete_into(cq, rc, out);
        }
    } else {
        qp.resp.cur = Some(InMsg::Send { received });
    }
    finish_packet(qp, pkt);
}

fn handle_write(qp: &mut RcQp, pkt: &Packet, mem: &mut Memory, ctx: &mut RecvCtx<'_>, out: &mut Vec<RoutedCompletion>) {
    let op = pkt.bth.opcode;
    let psn = pkt.bth.psn;
    let (target, done, total) = match (qp.resp.cur, pkt.reth) {
        (None, Some(Reth { va, rkey, dma_len })) => {
            if !qp.access.contains(Access::REMOTE_WRITE) {
                access_error(qp, psn, out);
                return;
            }
            match mem.resolve_remote(qp.pd(), rkey, va, dma_len as u64, Access::REMOTE_WRITE) {
                Ok(t) => (t, 0u64, dma_len),
                Err(_) => {
                    access_error(qp, psn, out);
                    return;
                }
            }
        }
        (Some(InMsg::Write { target, done, total }), _) => (target, done, total),
        _ => {
            invalid_request(qp, psn, None, out);
            return;
        }
    };
    let end = done + pkt.payload.len() as u64;
    let pmtu = qp.path.map_or(4096, |p| p.pmtu) as usize;
    let size_ok = if op.ends_message() {
        end == total as u64 && pkt.payload.len() <= pmtu
    } else {
        pkt.payload.len() == pmtu && end < total as u64
    };
    if !size_ok {
        invalid_request(qp, psn, None, out);
        return;
    }
    // WRITE with immediate needs a receive for its completion, checked on the
    // packet that carries the immediate (as rxe does).
    let needs_recv = op.has_immdt();
    if needs_recv && !have_recv(qp, ctx) {
        let (timer, msn) = (qp.min_rnr_timer.code(), qp.resp.msn);
        qp.resp.queue_nak(psn, Aeth::rnr_nak(timer, msn));
        return;
    }
    if let Some((mr, off)) = target {
        mem.write_resolved(mr, off + done, &pkt.payload);
    }
    let recv_cq = if needs_recv {
        let Some(cq) = ctx.recv_cq_with_room(qp) else {
            cq_overflow(qp, out);
            return;
        };
        Some(cq)
    } else {
        None
    };
    if op.ends_message() {
        qp.resp.cur = None;
        qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
        if let Some(cq) = recv_cq
            && let Some(wr_id) = qp.resp.rq.pop_front().map(|w| w.wr_id)
        {
            let mut rc = qp.recv_completion(wr_id, WcOpcode::RecvRdmaWithImm, WcStatus::Success, total, pkt.imm);
            rc.solicited = pkt.bth.se;
            complete_into(cq, rc, out);
        }
    } else {
        qp.resp.cur = Some(InMsg::Write { target, done: end, total });
    }
    finish_packet(qp, pkt);
}

fn handle_read_request(qp: &mut RcQp, pkt: &Packet, mem: &mut Memory, out: &mut Vec<RoutedCompletion>) {
    let psn = pkt.bth.psn;
    let Some(Reth { va, rkey, dma_len }) = pkt.reth else {
        invalid_request(qp, psn, None, out);
        return;
    };
    // rxe refuses READs only when the QP takes none at all; otherwise it
    // trusts the requester's max_rd_atomic and recycles its resources.
    if qp.max_dest_rd_atomic == 0 {
        invalid_request(qp, psn, None, out);
        return;
    }
    if !qp.access.contains(Access::REMOTE_READ) {
        access_error(qp, psn, out);
        return;
    }
    let target = match mem.resolve_remote(qp.pd(), rkey, va, dma_len as u64, Access::REMOTE_READ) {
        Ok(t) => t,
        Err(_) => {
            access_error(qp, psn, out);
            return;
        }
    };
    let pmtu = qp.path.map_or(4096, |p| p.pmtu) as u64;
    let npkts = (dma_len as u64).div_ceil(pmtu).max(1) as u32;
    qp.resp.take_resource(qp.max_dest_rd_atomic, Resource::Read);
    qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
    let msn = qp.resp.msn;
    qp.resp.push_reply(Reply::Read { psn, target, sent: 0, total: dma_len as u64, msn });
    qp.resp.epsn = qp.resp.epsn.add(npkts);
}

/// CmpSwap or FetchAdd, checked in rxe's order: the QP must grant remote
/// atomics (else an invalid request: rxe's unsupported opcode), take READs
/// or atomics at all, the rkey must cover 8 bytes with REMOTE_ATOMIC (else
/// a remote access error), and the address must be 8-byte aligned (else an
/// invalid request). Each is a class C error: NAK, then ERR.
fn handle_atomic(qp: &mut RcQp, pkt: &Packet, mem: &mut Memory, out: &mut Vec<RoutedCompletion>) {
    let psn = pkt.bth.psn;
    let Some(AtomicEth { va, rkey, swap_add, compare }) = pkt.atomic else {
        invalid_request(qp, psn, None, out);
        return;
    };
    if !qp.access.contains(Access::REMOTE_ATOMIC) || qp.max_dest_rd_atomic == 0 {
        invalid_request(qp, psn, None, out);
        return;
    }
    let Ok(Some((mr, offset))) = mem.resolve_remote(qp.pd(), rkey, va, ATOMIC_LEN as u64, Access::REMOTE_ATOMIC) else {
        access_error(qp, psn, out);
        return;
    };
    if va % ATOMIC_LEN as u64 != 0 {
        invalid_request(qp, psn, None, out);
        return;
    }
    let mut bytes = Vec::with_capacity(ATOMIC_LEN as usize);
    mem.read_resolved(mr, offset, ATOMIC_LEN as usize, &mut bytes);
    // Memory holds the operand in the host's order (little-endian), the
    // wire in network order; both conversions happen here and in the
    // requester, nowhere else.
    let orig = u64::from_le_bytes(bytes.as_slice().try_into().unwrap_or_default());
    let new = if pkt.bth.opcode == Opcode::COMPARE_SWAP {
        if orig == compare { swap_add } else { orig }
    } else {
        orig.wrapping_add(swap_add)
    };
    if new != orig {
        mem.write_resolved(mr, offset, &new.to_le_bytes());
    }
    qp.resp.take_resource(qp.max_dest_rd_atomic, Resource::Atomic { psn, orig });
    qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
    let msn = qp.resp.msn;
    qp.resp.push_reply(Reply::Atomic { psn, orig, msn });
    qp.resp.epsn = qp.resp.epsn.add(1);
}

/// Builds the next ACK, NAK, READ response or atomic acknowledge packet
/// into `pkt`; whether there was one.
#[inline]
pub(super) fn poll_transmit(resp: &mut Responder, path: &Path, mem: &Memory, pkt: &mut Packet) -> bool {
    let Some(reply) = resp.replies.front_mut() else {
        // Nothing older waits: the newest ACK, if any, goes now.
        let Some((psn, aeth)) = resp.tail_ack.take() else { return false };
        pkt.payload.clear();
        path.fill(pkt, Bth::new(Opcode::ACKNOWLEDGE, path.dest_qpn, psn), None, Some(aeth), None);
        return true;
    };
    pkt.payload.clear();
    let (bth, aeth) = match reply {
        Reply::Atomic { psn, orig, msn } => {
            let bth = Bth::new(Opcode::ATOMIC_ACKNOWLEDGE, path.dest_qpn, *psn);
            let (aeth, orig) = (Aeth::ack(*msn), *orig);
            resp.replies.pop_front();
            path.fill(pkt, bth, None, Some(aeth), None);
            pkt.atomic_ack = Some(AtomicAckEth { orig });
            return true;
        }
        Reply::Ack { psn, aeth } => {
            let bth = Bth::new(Opcode::ACKNOWLEDGE, path.dest_qpn, *psn);
            let aeth = *aeth;
            resp.replies.pop_front();
            (bth, Some(aeth))
        }
        Reply::Read { psn, target, sent, total, msn } => {
            let pmtu = path.pmtu as u64;
            let chunk = (*total - *sent).min(pmtu);
            let first = *sent == 0;
            let last = *sent + chunk == *total;
            let opcode = match (first, last) {
                (true, true) => Opcode::READ_RESPONSE_ONLY,
                (true, false) => Opcode::READ_RESPONSE_FIRST,
                (false, false) => Opcode::READ_RESPONSE_MIDDLE,
                (false, true) => Opcode::READ_RESPONSE_LAST,
            };
            if let Some((mr, off)) = *target {
                mem.read_resolved(mr, off + *sent, chunk as usize, &mut pkt.payload);
            }
            let bth = Bth::new(opcode, path.dest_qpn, *psn);
            let aeth = (first || last).then(|| Aeth::ack(*msn));
            *psn = psn.add(1);
            *sent += chunk;
            if last {
                resp.replies.pop_front();
            }
            (bth, aeth)
        }
    };
    path.fill(pkt, bth, None, aeth, None);
    true
}
