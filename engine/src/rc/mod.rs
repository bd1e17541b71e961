//! The RC transport engine: one queue pair's requester and responder.
//!
//! Sans-IO in the quinn style: the owner feeds it work requests
//! (`post_send`/`post_recv`), packets (`handle_packet`) and timer expiries
//! (`handle_timeout`), all with the current time, and pulls outputs:
//! packets to transmit (`poll_transmit`), the next timer (`poll_timeout`) and
//! completions (pushed to the caller's vector). It never reads a clock, so the
//! simulator drives it in virtual time and a UDP backend can drive it in real
//! time.
//!
//! What it models (IBA Vol 1 ch. 9, and rxe where the spec leaves room):
//! PSN sequencing with 24-bit wrap; segmentation at the path MTU; AckReq on
//! the last packet of a message (and every 64 packets) with coalesced ACKs;
//! RDMA READ responses; PSN sequence error NAK (once per gap) and go-back-N;
//! the local ACK timeout with `retry_cnt`; RNR NAK with the responder's min
//! RNR timer and `rnr_retry` (7 = forever); remote access checks; a receive
//! too small failing as rxe fails it (LOC_QP_OP_ERR there, REM_OP_ERR here);
//! flush on ERR. Packets whose PSN is far from the
//! expected one are dropped or re-ACKed exactly as the spec's duplicate and
//! out-of-sequence rules say, which is why a wrong RTR PSN looks like silence.

mod requester;
mod responder;
pub(crate) mod ring;

use std::net::Ipv4Addr;

use rctb_core::time::Instant;
use rctb_core::transport::{
    Access, Completion, CqId, InitAttr, PdId, QpId, QpInit, QpState, QpTransition, RecvWr, RnrTimer, RtrAttr, RtsAttr,
    SendWr, WcOpcode, WcStatus, local_ack_timeout,
};

use rctb_core::wire::roce::{Aeth, Bth, Reth};

use crate::memory::Memory;
use crate::packet::Packet;

pub(crate) use requester::Requester;
pub(crate) use responder::{RecvCtx, Responder, Srq};

/// A WR's scatter/gather list, inline for the usual one or two entries.
pub(crate) type SgeList = smallvec::SmallVec<[rctb_core::transport::Sge; 2]>;

/// A WR's SGEs as an [`SgeList`]: one or two are built in place (the
/// usual cases, without `from_slice`'s out-of-line copy), more spill.
/// One is pushed into an empty list: built from a whole inline array
/// (`from_buf_and_len([a, a], 1)`) it was copied around on the stack.
#[inline]
pub(crate) fn sge_list(sges: &[rctb_core::transport::Sge]) -> SgeList {
    match *sges {
        [a] => {
            let mut v = SgeList::new();
            v.push(a);
            v
        }
        [a, b] => SgeList::from_buf([a, b]),
        _ => SgeList::from_slice(sges),
    }
}

/// Most unacknowledged packets a requester keeps in flight.
pub const MAX_WINDOW_PACKETS: u32 = 1024;
/// rxe's RXE_MAX_PKT_PER_ACK: within a long message the requester asks for
/// an ACK once more than this many packets went without one.
pub const ACK_REQ_EVERY: u32 = 64;

/// Where a completion goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutedCompletion {
    /// The CQ it goes to.
    pub cq: CqId,
    /// The completion.
    pub wc: Completion,
    /// It wakes a CQ armed for solicited completions only: a receive of a
    /// message with the solicited-event bit, or a receive that failed.
    pub solicited: bool,
}

/// A local misuse reported at post time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The QP's state does not take this work request.
    State(QpState),
    /// The queue is full (its depth).
    QueueFull(u32),
    /// More scatter/gather entries than the QP takes (its limit).
    TooManySge(u32),
    /// A receive posted to a QP that takes its receives from an SRQ.
    HasSrq,
}

/// What [`RcQp::poll_transmit`] built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Built {
    /// No packet.
    Nothing,
    /// The responder's: an ACK, NAK, READ response or atomic acknowledge.
    /// It leaves the requester (and so the QP's timers) as it was.
    Response,
    /// The requester's: a request packet, the ACK timer already running
    /// (the QP's timers are as they were).
    Request,
    /// The requester's: a request packet that started the ACK timer.
    TimedRequest,
}

/// Path facts fixed at RTR/RTS.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    pub pmtu: u32,
    pub dest_qpn: u32,
    pub src_ip: Ipv4Addr,
    pub dest_ip: Ipv4Addr,
    pub udp_src_port: u16,
}

impl Path {
    /// A packet on this path; sets the BTH pad count for `payload`.
    /// Writes a packet of this path into `pkt`, whose payload is already
    /// in place (every other field is overwritten: a packet slot is reused
    /// as it is, without moving a packet value around).
    #[inline]
    pub(crate) fn fill(
        &self,
        pkt: &mut Packet,
        mut bth: Bth,
        reth: Option<Reth>,
        aeth: Option<Aeth>,
        imm: Option<u32>,
    ) {
        bth.pad = ((4 - pkt.payload.len() % 4) % 4) as u8;
        pkt.src_ip = self.src_ip;
        pkt.dst_ip = self.dest_ip;
        pkt.udp_src_port = self.udp_src_port;
        pkt.bth = bth;
        pkt.reth = reth;
        pkt.atomic = None;
        pkt.aeth = aeth;
        pkt.atomic_ack = None;
        pkt.deth = None;
        pkt.imm = imm;
        pkt.corrupt = false;
    }
}

/// One RC queue pair.
#[derive(Debug)]
pub struct RcQp {
    /// Its handle.
    pub id: QpId,
    /// Its QP number on the wire.
    pub qpn: u32,
    /// Its state.
    pub state: QpState,
    pub(crate) init: QpInit,
    pub(crate) access: Access,
    pub(crate) path: Option<Path>,
    pub(crate) min_rnr_timer: RnrTimer,
    /// The local ACK timeout in nanoseconds (saturated), kept so that a
    /// deadline is one add ([`RcQp::ack_deadline`]).
    pub(crate) ack_timeout_ns: Option<u64>,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) req: Requester,
    pub(crate) resp: Responder,
    /// What its requester and responder counted.
    pub counters: QpCounters,
    /// Owner bookkeeping: queued for egress.
    pub(crate) tx_queued: bool,
    /// Owner bookkeeping: the earliest timer event scheduled for this QP.
    pub(crate) timer_event: Option<Instant>,
    /// The instant at which the requester was last found able to send
    /// after a request packet
    /// ([`wants_transmit_after_packet`](Self::wants_transmit_after_packet)),
    /// if nothing changed the QP since: the next request packet built at
    /// that same instant skips asking again (a burst asks once per packet,
    /// not twice). Every other `&mut` entry into the QP clears it.
    tx_ok_at: Option<Instant>,
}

/// Requester events worth reporting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Request packets sent again (go-back-N after NAK, timeout or RNR).
    pub retransmitted: u64,
    /// Local ACK timeouts that fired with packets outstanding.
    pub timeouts: u64,
    /// Duplicate atomics the responder answered from a saved result,
    /// without executing them again.
    pub atomics_replayed: u64,
    /// PSN sequence NAKs the requester ignored because a retry was already
    /// under way (rxe starts no second retry before progress).
    pub seq_naks_ignored: u64,
    /// Packets the QP could not take, and dropped unanswered: no path yet,
    /// another source, a state that takes none (a response in RTR), an
    /// opcode it does not know, a request past a PSN gap (after its one
    /// NAK), a response for nothing outstanding, a duplicate or misplaced
    /// response.
    pub dropped: u64,
}

impl RcQp {
    /// A QP in RESET.
    pub fn new(id: QpId, qpn: u32, init: QpInit) -> Self {
        RcQp {
            id,
            qpn,
            state: QpState::Reset,
            init,
            access: Access::NONE,
            path: None,
            min_rnr_timer: RnrTimer::default(),
            ack_timeout_ns: None,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 0,
            req: Requester::default(),
            resp: Responder::default(),
            counters: QpCounters::default(),
            tx_queued: false,
            timer_event: None,
            tx_ok_at: None,
        }
    }

    /// Its protection domain.
    pub fn pd(&self) -> PdId {
        self.init.pd
    }

    /// Applies a state transition. `src_ip` is this node's address; `local_gid_ok`
    /// says whether the RTR source GID index exists. Returns completions
    /// produced by a move to ERR.
    pub(crate) fn modify(
        &mut self,
        t: &QpTransition,
        src_ip: Ipv4Addr,
        out: &mut Vec<RoutedCompletion>,
    ) -> Result<(), &'static str> {
        self.tx_ok_at = None;
        if !t.allowed_from(self.state) {
            return Err("transition not allowed from the current state");
        }
        match *t {
            QpTransition::Init(InitAttr { access, port, .. }) => {
                if port != 1 {
                    return Err("port must be 1");
                }
                self.access = access;
                self.state = QpState::Init;
            }
            QpTransition::Rtr(RtrAttr { path_mtu, dest_qpn, rq_psn, max_dest_rd_atomic, min_rnr_timer, av }) => {
                let dest_ip =
                    av.dest_gid.to_ipv4().ok_or("dest GID must be IPv4-mapped (::ffff:a.b.c.d) for RoCEv2")?;
                if dest_qpn > rctb_core::transport::MAX_24BIT || dest_qpn == 0 {
                    return Err("dest_qpn must be 1..=0xFFFFFF");
                }
                self.path = Some(Path {
                    pmtu: path_mtu.bytes(),
                    dest_qpn,
                    src_ip,
                    dest_ip,
                    udp_src_port: crate::packet::udp_src_port(self.qpn, dest_qpn),
                });
                self.min_rnr_timer = min_rnr_timer;
                self.max_dest_rd_atomic = max_dest_rd_atomic;
                self.resp.reset_for_rtr(rq_psn);
                self.state = QpState::Rtr;
            }
            QpTransition::Rts(attr) => {
                let RtsAttr { sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic } = attr;
                attr.validate().map_err(|e| e.rule)?;
                self.ack_timeout_ns =
                    local_ack_timeout(timeout).map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
                self.retry_cnt = retry_cnt;
                self.rnr_retry = rnr_retry;
                self.max_rd_atomic = max_rd_atomic.max(1);
                if self.state == QpState::Rtr {
                    self.req.reset_for_rts(sq_psn, retry_cnt, rnr_retry);
                }
                self.state = QpState::Rts;
            }
            QpTransition::Err => self.enter_error(None, out),
            QpTransition::Reset => {
                self.req = Requester::default();
                self.resp = Responder::default();
                self.path = None;
                self.state = QpState::Reset;
            }
        }
        Ok(())
    }

    /// Posts `wr`, whose length (`wr.len()`) is `len`.
    #[inline]
    pub(crate) fn post_send(
        &mut self,
        wr: &SendWr<'_>,
        len: u64,
        mem: &Memory,
        out: &mut Vec<RoutedCompletion>,
    ) -> Result<(), PostError> {
        self.tx_ok_at = None;
        if wr.sges.len() as u32 > self.init.caps.max_send_sge.max(1) {
            return Err(PostError::TooManySge(self.init.caps.max_send_sge));
        }
        match self.state {
            QpState::Rts => {}
            QpState::Err => {
                // Work posted to a QP in ERR completes at once with a flush.
                out.push(self.send_completion(wr.wr_id, wr.op.wc_opcode(), WcStatus::WrFlushErr, 0));
                return Ok(());
            }
            s => return Err(PostError::State(s)),
        }
        if self.req.queued() >= self.init.caps.max_send_wr as usize {
            return Err(PostError::QueueFull(self.init.caps.max_send_wr));
        }
        let Some(path) = self.path else { return Err(PostError::State(self.state)) };
        let signaled = wr.signaled || self.init.sq_sig_all;
        self.req.post(wr, len, signaled, path.pmtu);
        // A bad local SGE is found when the NIC processes the WR; model that as
        // an immediate error completion in order.
        if let Err(fault) = mem.check_sges(self.pd(), wr.sges) {
            let status = match fault {
                crate::memory::LocalFault::Protection => WcStatus::LocProtErr,
                crate::memory::LocalFault::Length => WcStatus::LocLenErr,
            };
            self.req.mark_local_error(status);
            requester::retire(self, out);
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn post_recv(
        &mut self,
        wr: &RecvWr<'_>,
        mem: &Memory,
        out: &mut Vec<RoutedCompletion>,
    ) -> Result<(), PostError> {
        if self.init.srq.is_some() {
            return Err(PostError::HasSrq);
        }
        if wr.sges.len() as u32 > self.init.caps.max_recv_sge.max(1) {
            return Err(PostError::TooManySge(self.init.caps.max_recv_sge));
        }
        match self.state {
            QpState::Reset => return Err(PostError::State(QpState::Reset)),
            QpState::Err => {
                out.push(self.recv_completion(wr.wr_id, WcOpcode::Recv, WcStatus::WrFlushErr, 0, None));
                return Ok(());
            }
            _ => {}
        }
        if self.resp.rq_len() >= self.init.caps.max_recv_wr as usize {
            return Err(PostError::QueueFull(self.init.caps.max_recv_wr));
        }
        let bad = mem.check_sges(self.pd(), wr.sges).is_err();
        self.resp.post(wr, bad);
        Ok(())
    }

    /// Processes one arriving packet addressed to this QP.
    #[inline]
    pub(crate) fn handle_packet(
        &mut self,
        now: Instant,
        pkt: &Packet,
        mem: &mut Memory,
        ctx: &mut RecvCtx<'_>,
        out: &mut Vec<RoutedCompletion>,
    ) {
        self.tx_ok_at = None;
        let Some(path) = self.path else {
            self.counters.dropped += 1;
            return;
        };
        // rxe accepts packets only from the QP's destination address.
        if pkt.src_ip != path.dest_ip || !matches!(self.state, QpState::Rtr | QpState::Rts) {
            self.counters.dropped += 1;
            return;
        }
        let op = pkt.bth.opcode;
        if op.is_response() {
            if self.state == QpState::Rts {
                requester::handle_response(self, now, pkt, mem, out);
            } else {
                self.counters.dropped += 1;
            }
        } else {
            responder::handle_request(self, pkt, mem, ctx, out);
        }
    }

    /// The next packet to put on the wire, if any is ready at `now`.
    /// Builds the next packet into `pkt` (its payload is the buffer);
    /// whether there was one, and which half built it.
    #[inline]
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &Memory,
        pkt: &mut Packet,
        out: &mut Vec<RoutedCompletion>,
    ) -> Built {
        // The path is borrowed where it lies for the responder, and copied
        // only for the requester (which takes the whole QP): copied up
        // front, it was loaded and kept in registers across both.
        let Some(path) = &self.path else { return Built::Nothing };
        // A QP that failed as responder still sends the NAK that says why.
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Err) {
            return Built::Nothing;
        }
        if self.resp.has_output() && responder::poll_transmit(&mut self.resp, path, mem, pkt) {
            return Built::Response;
        }
        if self.state != QpState::Rts {
            return Built::Nothing;
        }
        let path = *path;
        // Asked at this instant with nothing changed since: the requester can send.
        let checked = self.tx_ok_at == Some(now);
        self.tx_ok_at = None;
        requester::poll_transmit(self, now, checked, &path, mem, pkt, out)
    }

    /// The ACK deadline from `now`: `now + ack_timeout`, saturating as `+`
    /// does, or `None` without a timeout.
    #[inline]
    pub(crate) fn ack_deadline(&self, now: Instant) -> Option<Instant> {
        self.ack_timeout_ns.map(|t| Instant::from_nanos(now.as_nanos().saturating_add(t)))
    }

    /// Whether `poll_transmit` would produce a packet at `now`.
    // Always inlined: asked after every packet built, where the call cost more.
    #[inline(always)]
    pub(crate) fn wants_transmit(&self, now: Instant) -> bool {
        if self.path.is_none() {
            return false;
        }
        match self.state {
            QpState::Rts => self.resp.has_output() || self.req.can_transmit(now, self.max_rd_atomic),
            QpState::Rtr | QpState::Err => self.resp.has_output(),
            _ => false,
        }
    }

    /// [`wants_transmit`](Self::wants_transmit), asked after `built` (a
    /// packet): the path and the state are as they were when it was built
    /// (building changes neither), so only what a packet changes is asked.
    /// When the requester can send, that is noted for `now` (the next
    /// [`poll_transmit`](Self::poll_transmit) at the same instant then
    /// does not ask again).
    #[inline(always)]
    pub(crate) fn wants_transmit_after_packet(&mut self, now: Instant, built: Built) -> bool {
        match built {
            // Built by the requester: the QP is in RTS.
            Built::Request | Built::TimedRequest => {
                if self.req.can_transmit(now, self.max_rd_atomic) {
                    self.tx_ok_at = Some(now);
                    return true;
                }
                self.resp.has_output()
            }
            // Built by the responder: in RTR, RTS or ERR.
            Built::Response => {
                self.resp.has_output() || (self.state == QpState::Rts && self.req.can_transmit(now, self.max_rd_atomic))
            }
            Built::Nothing => self.wants_transmit(now),
        }
    }

    /// The next time `handle_timeout` must run.
    #[inline]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.state != QpState::Rts {
            return None;
        }
        self.req.next_timer()
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant, out: &mut Vec<RoutedCompletion>) {
        self.tx_ok_at = None;
        if self.state == QpState::Rts {
            requester::handle_timeout(self, now, out);
        }
    }

    /// Moves to ERR: `failed` (if any) completes with its status first, then
    /// every outstanding send and receive WR completes with WR_FLUSH_ERR.
    pub(crate) fn enter_error(&mut self, failed: Option<WcStatus>, out: &mut Vec<RoutedCompletion>) {
        self.tx_ok_at = None;
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        let mut first = failed;
        let sends: Vec<_> = self.req.drain().map(|w| (w.wr_id, w.op.wc_opcode())).collect();
        for (wr_id, opcode) in sends {
            let status = first.take().unwrap_or(WcStatus::WrFlushErr);
            out.push(self.send_completion(wr_id, opcode, status, 0));
        }
        let recvs: Vec<_> = self.resp.drain().collect();
        for (wr_id, status) in recvs {
            out.push(self.recv_completion(wr_id, WcOpcode::Recv, status, 0, None));
        }
    }

    pub(crate) fn send_completion(&self, wr_id: u64, opcode: WcOpcode, status: WcStatus, len: u32) -> RoutedCompletion {
        RoutedCompletion {
            cq: self.init.send_cq,
            wc: Completion { wr_id, status, opcode, byte_len: len, imm: None, qp: self.id, vendor_err: 0 },
            solicited: false,
        }
    }

    pub(crate) fn recv_completion(
        &self,
        wr_id: u64,
        opcode: WcOpcode,
        status: WcStatus,
        len: u32,
        imm: Option<u32>,
    ) -> RoutedCompletion {
        RoutedCompletion {
            cq: self.init.recv_cq,
            wc: Completion { wr_id, status, opcode, byte_len: len, imm, qp: self.id, vendor_err: 0 },
            solicited: status != WcStatus::Success,
        }
    }
}
