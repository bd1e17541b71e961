//! The receive server itself: resources, connection hand-off, receive path
//! and teardown (docs/protocols.md §1).

use std::fmt;
use std::net::Ipv4Addr;

use super::config::{GidIndex, ServerConfig, TransportConfig};
use super::types::{Channel, Frame, HostParams, RoceError, RxCounters, Status};
use crate::time::Instant;
use crate::transport::{
    Access, AddressVector, Completion, CqId, Gid, GidType, InitAttr, InvalidValue, MAX_24BIT, MrId, MrInfo, MrVisitor,
    Mtu, PdId, PortInfo, Psn, QpCaps, QpInfo, QpInit, QpTransition, Qpn, Readiness, RecvWr, RtrAttr, RtsAttr, Sge,
    Transport, TransportError, WcOpcode, WcStatus,
};

/// Completions taken from the CQ per `poll_cq` call (rogue's batch size).
const POLL_BATCH: usize = 16;

/// Receives chained into one `post_recv_many` call at most (a stack array:
/// no allocation per re-post).
const REPOST_CHAIN: usize = 32;

/// Host QP values §1 fixes (they do not come from `TransportConfig`).
const MAX_DEST_RD_ATOMIC: u8 = 16;
const MAX_RD_ATOMIC: u8 = 16;
const HOST_TIMEOUT: u8 = 14;
const HOST_RETRY: u8 = 3;
const HOST_RNR_RETRY: u8 = 7;
const HOP_LIMIT: u8 = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Created, QP in INIT, waiting for the FPGA's parameters.
    Created,
    /// `complete_connection` was called (successfully or not: it is once only).
    Connected,
    /// `stop` ran: QP and CQ are gone; the slab lives while frames are held.
    Stopped,
}

/// The RoCEv2 RC receive server (rogue `RoCEv2Server`), generic over the
/// transport.
///
/// # Lifecycle
/// [`create`](Self::create) -> [`host_params`](Self::host_params) (to the FPGA
/// engine) -> [`complete_connection`](Self::complete_connection) once ->
/// [`poll`](Self::poll) / [`wait_frames`](Self::wait_frames), reading and
/// [`release`](Self::release)-ing frames -> [`stop`](Self::stop).
///
/// # Frame ownership
/// The server owns the transport (`T` is a cheap handle in every backend), so
/// frames cannot borrow it: they are plain handles, their data is read
/// through the server with `mr_view` (no copy), and their slot goes back to the
/// receive queue only in `release`. Until then the slot stays out of the queue;
/// once every slot is held the NIC answers RNR NAK and the FPGA backs off.
/// After `stop` held frames stay readable; the slab and PD are freed when the
/// last one is released (or when the server is dropped, after which a frame
/// handle can no longer be read at all: there is nothing to dangle).
pub struct RoceServer<T: Transport> {
    t: T,
    cfg: ServerConfig,
    pd: PdId,
    mr: MrInfo,
    /// `None` once stopped.
    cq: Option<CqId>,
    qp: Option<QpInfo>,
    gid_index: u32,
    host_gid: Gid,
    /// Kept after the QP is destroyed, for the status and frame ownership.
    host_qpn: Qpn,
    /// The port's active MTU: rxe's follows the netdev (1500 gives 1024).
    active_mtu: Mtu,
    rq_psn: Psn,
    sq_psn: Psn,
    fpga: Option<(Qpn, u32)>,
    phase: Phase,
    /// Per slot: held by the consumer.
    held: Vec<bool>,
    held_count: u32,
    /// Slab and PD are freed.
    freed: bool,
    counters: RxCounters,
    scratch: Vec<Completion>,
    /// Released slots not re-posted yet (at most `repost_batch - 1` between
    /// calls, and none after an empty poll).
    unposted: Vec<u32>,
    /// Re-post released slots once this many accumulated (1: at once).
    repost_batch: u32,
}

impl<T: Transport> fmt::Debug for RoceServer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoceServer")
            .field("phase", &self.phase)
            .field("qp", &self.qp)
            .field("held", &self.held_count)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// The GID index §1's detection picks: the first entry, in index order, of
/// type RoCE v2 whose GID is IPv4-mapped on the FPGA's /24.
pub fn detect_gid_index(port: &PortInfo, fpga_ip: Ipv4Addr) -> Option<u32> {
    let net = |ip: Ipv4Addr| u32::from(ip) >> 8;
    let mut gids = port.gids.clone();
    gids.sort_by_key(|g| g.index);
    gids.into_iter()
        .find(|g| g.gid_type == GidType::RoceV2 && g.gid.to_ipv4().is_some_and(|ip| net(ip) == net(fpga_ip)))
        .map(|g| g.index)
}

/// Resources made so far by `create`, released in reverse if a later step fails.
#[derive(Default)]
struct Partial {
    pd: Option<PdId>,
    mr: Option<MrInfo>,
    cq: Option<CqId>,
    qp: Option<QpInfo>,
}

impl Partial {
    /// Best effort: the first error is the one reported, so cleanup errors
    /// are ignored (each release is still attempted).
    fn release<T: Transport>(self, t: &mut T) {
        if let Some(qp) = self.qp {
            let _ = t.destroy_qp(qp.id);
        }
        if let Some(cq) = self.cq {
            let _ = t.destroy_cq(cq);
        }
        if let Some(mr) = self.mr {
            let _ = t.dereg_mr(mr.id);
        }
        if let Some(pd) = self.pd {
            let _ = t.dealloc_pd(pd);
        }
    }
}

impl<T: Transport> RoceServer<T> {
    /// Allocates the slab MR, the CQ and the RC QP and brings the QP to INIT.
    /// The host RQ and SQ PSNs are the low 24 bits of two draws of `psn_rng`.
    /// On error every resource made so far is released.
    pub fn create(mut t: T, cfg: ServerConfig, psn_rng: &mut impl FnMut() -> u32) -> Result<Self, RoceError> {
        let dev = t.device()?;
        if dev.name != cfg.device() {
            return Err(RoceError::DeviceMismatch { configured: cfg.device().into(), actual: dev.name });
        }
        let depth = cfg.rx_queue_depth();
        if depth > dev.max_qp_wr || depth > dev.max_cqe {
            return Err(InvalidValue::new(
                "rx_queue_depth",
                depth as u64,
                "must not exceed the device's max_qp_wr and max_cqe",
            )
            .into());
        }
        let port = t.port(cfg.ib_port())?;
        let gid_index = match cfg.gid_index() {
            GidIndex::Index(i) => i,
            GidIndex::Auto => detect_gid_index(&port, cfg.fpga_ip())
                .ok_or(RoceError::NoGid { fpga_ip: cfg.fpga_ip(), port: cfg.ib_port() })?,
        };
        // rxe reports unused slots as zero GIDs; an absent index is as unusable.
        let host_gid = port.gids.iter().find(|g| g.index == gid_index).map(|g| g.gid).unwrap_or_default();
        if host_gid.is_zero() {
            return Err(RoceError::ZeroGid { index: gid_index, port: cfg.ib_port() });
        }
        let rq_psn = Psn::wrapping(psn_rng());
        let sq_psn = Psn::wrapping(psn_rng());

        let mut made = Partial::default();
        match Self::make_resources(&mut t, &cfg, &mut made) {
            Ok(()) => {}
            Err(e) => {
                made.release(&mut t);
                return Err(e);
            }
        }
        let (Some(pd), Some(mr), Some(cq), Some(qp)) = (made.pd, made.mr, made.cq, made.qp) else {
            unreachable!("make_resources fills every resource when it succeeds")
        };
        Ok(RoceServer {
            t,
            cfg,
            pd,
            mr,
            cq: Some(cq),
            qp: Some(qp),
            gid_index,
            host_gid,
            host_qpn: qp.qpn,
            active_mtu: port.active_mtu,
            rq_psn,
            sq_psn,
            fpga: None,
            phase: Phase::Created,
            held: vec![false; depth as usize],
            held_count: 0,
            freed: false,
            counters: RxCounters::default(),
            scratch: Vec::with_capacity(POLL_BATCH),
            unposted: Vec::with_capacity(depth as usize),
            repost_batch: 1,
        })
    }

    fn make_resources(t: &mut T, cfg: &ServerConfig, made: &mut Partial) -> Result<(), RoceError> {
        let depth = cfg.rx_queue_depth();
        let pd = t.alloc_pd()?;
        made.pd = Some(pd);
        made.mr = Some(t.reg_mr(pd, cfg.slab_len(), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?);
        let cq = t.create_cq(depth)?;
        made.cq = Some(cq);
        let caps = QpCaps { max_send_wr: 1, max_recv_wr: depth, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false, srq: None })?;
        made.qp = Some(qp);
        let access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE;
        t.modify_qp(qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: cfg.ib_port(), access }))?;
        Ok(())
    }

    /// The values the FPGA engine's setup takes.
    pub fn host_params(&self) -> HostParams {
        HostParams {
            qpn: self.host_qpn,
            rq_psn: self.rq_psn,
            sq_psn: self.sq_psn,
            mr_addr: self.mr.addr,
            mr_len: self.mr.len,
            rkey: self.mr.rkey,
        }
    }

    /// Finishes the host QP with the FPGA's QPN and lkey: pre-posts every slot
    /// (wr_id = slot), then RTR and RTS as §1 fixes them. The path MTU is the
    /// smaller of `tc.pmtu()` and the port's active MTU (give the FPGA the
    /// same, see [`path_mtu`](Self::path_mtu)). Callable once; a
    /// failed call is not retried (the QP may hold posted receives), so a
    /// second call is [`RoceError::AlreadyConnected`] either way.
    pub fn complete_connection(
        &mut self,
        fpga_qpn: Qpn,
        tc: &TransportConfig,
        fpga_lkey: u32,
    ) -> Result<(), RoceError> {
        match self.phase {
            Phase::Created => {}
            Phase::Connected => return Err(RoceError::AlreadyConnected),
            Phase::Stopped => return Err(RoceError::Stopped),
        }
        if fpga_qpn > MAX_24BIT {
            return Err(InvalidValue::new("fpga_qpn", fpga_qpn as u64, "must fit 24 bits (0..=0xFFFFFF)").into());
        }
        self.phase = Phase::Connected;
        self.fpga = Some((fpga_qpn, fpga_lkey));
        let qp = self.qp.expect("a created server has a QP").id;
        for slot in 0..self.cfg.rx_queue_depth() {
            self.post_slot(slot)?;
        }
        let av = AddressVector {
            port: self.cfg.ib_port(),
            hop_limit: HOP_LIMIT,
            sl: 0,
            ..AddressVector::new(Gid::from_ipv4(self.cfg.fpga_ip()), self.gid_index)
        };
        self.t.modify_qp(
            qp,
            &QpTransition::Rtr(RtrAttr {
                // A path MTU above the port's active MTU fails on rxe.
                path_mtu: tc.pmtu().min(self.active_mtu),
                dest_qpn: fpga_qpn,
                // The first PSN the FPGA sends is its RTS sq_psn = host SQ PSN.
                rq_psn: self.sq_psn,
                max_dest_rd_atomic: MAX_DEST_RD_ATOMIC,
                min_rnr_timer: tc.min_rnr_timer(),
                av,
            }),
        )?;
        self.t.modify_qp(
            qp,
            &QpTransition::Rts(RtsAttr {
                sq_psn: self.sq_psn,
                timeout: HOST_TIMEOUT,
                retry_cnt: HOST_RETRY,
                rnr_retry: HOST_RNR_RETRY,
                max_rd_atomic: MAX_RD_ATOMIC,
            }),
        )?;
        Ok(())
    }

    /// Re-posts released slots in batches: a released frame's slot goes back
    /// to the receive queue once `k` slots are waiting, or when a
    /// [`poll`](Self::poll) finds the CQ empty (so no slot waits while the
    /// consumer idles), as one chained post. 1 (the default) re-posts each
    /// slot at once. `k` must be 1..=the receive queue depth, an
    /// [`InvalidValue`] naming `repost_batch` otherwise. Only the cost
    /// changes: every slot still goes back, exactly once.
    pub fn set_repost_batch(&mut self, k: u32) -> Result<(), RoceError> {
        if k == 0 || k > self.cfg.rx_queue_depth() {
            return Err(InvalidValue::new("repost_batch", k as u64, "must be 1..=the receive queue depth").into());
        }
        self.repost_batch = k;
        if self.unposted.len() >= k as usize {
            self.flush_reposts()?;
        }
        Ok(())
    }

    /// The re-post batch size (see [`set_repost_batch`](Self::set_repost_batch)).
    pub fn repost_batch(&self) -> u32 {
        self.repost_batch
    }

    /// Released slots waiting to be re-posted.
    pub fn unposted_slots(&self) -> u32 {
        self.unposted.len() as u32
    }

    /// Posts every waiting released slot, `REPOST_CHAIN` per chained call.
    /// On an error the slots not posted stay waiting (a later flush retries).
    fn flush_reposts(&mut self) -> Result<(), RoceError> {
        if self.unposted.is_empty() {
            return Ok(());
        }
        let Some(qp) = self.qp.map(|q| q.id) else {
            self.unposted.clear();
            return Ok(());
        };
        let max = self.cfg.max_payload();
        let mr = self.mr.id;
        let result = (|| {
            for chunk in self.unposted.chunks(REPOST_CHAIN) {
                let sges: [Sge; REPOST_CHAIN] = std::array::from_fn(|i| {
                    let slot = chunk.get(i).copied().unwrap_or(0);
                    Sge::new(mr, slot as u64 * max as u64, max)
                });
                let wrs: [RecvWr<'_>; REPOST_CHAIN] = std::array::from_fn(|i| {
                    RecvWr::new(chunk.get(i).copied().unwrap_or(0) as u64, std::slice::from_ref(&sges[i]))
                });
                self.t.post_recv_many(qp, &wrs[..chunk.len()])?;
            }
            Ok::<(), TransportError>(())
        })();
        // No slot stays queued, even on an error: which WRs of a failing
        // chain went in is not known (the default post_recv_many posts one
        // by one; ibv_post_recv stops at its bad_wr), and posting one again
        // could put two receives on one slot and overwrite a held frame.
        // The slots not known to be posted are given up instead: the ring
        // gets smaller, no frame is lost or overwritten.
        self.unposted.clear();
        Ok(result?)
    }

    fn post_slot(&mut self, slot: u32) -> Result<(), RoceError> {
        let qp = self.qp.ok_or(RoceError::Stopped)?.id;
        let max = self.cfg.max_payload();
        let sge = [Sge::new(self.mr.id, slot as u64 * max as u64, max)];
        self.t.post_recv(qp, &RecvWr::new(slot as u64, &sge))?;
        Ok(())
    }

    /// Takes every completion ready now (never blocks) and appends the good
    /// frames to `out`; returns how many were appended.
    pub fn poll(&mut self, out: &mut Vec<Frame>) -> Result<usize, RoceError> {
        let cq = match self.phase {
            Phase::Created => return Err(RoceError::NotConnected),
            Phase::Stopped => return Err(RoceError::Stopped),
            Phase::Connected => self.cq.expect("a connected server has a CQ"),
        };
        let before = out.len();
        loop {
            let mut batch = std::mem::take(&mut self.scratch);
            batch.clear();
            let n = self.t.poll_cq(cq, POLL_BATCH, &mut batch);
            // Every completion of the batch is handled even if one re-post
            // fails, so no slot is lost; the first error is reported.
            let result = n.map_err(RoceError::from).and_then(|_| {
                let mut first = Ok(());
                for c in &batch {
                    if let Err(e) = self.on_completion(c, out)
                        && first.is_ok()
                    {
                        first = Err(e);
                    }
                }
                first
            });
            let got = batch.len();
            self.scratch = batch;
            result?;
            if got == 0 && !self.unposted.is_empty() {
                // The CQ is empty: give the waiting slots back before the
                // consumer idles (or the sender runs out of credit).
                self.flush_reposts()?;
            }
            if got < POLL_BATCH {
                return Ok(out.len() - before);
            }
        }
    }

    /// The receive path of §1 for one completion.
    fn on_completion(&mut self, c: &Completion, out: &mut Vec<Frame>) -> Result<(), RoceError> {
        let depth = self.cfg.rx_queue_depth() as u64;
        if c.wr_id >= depth {
            self.counters.bad_wr_id += 1;
            return Ok(());
        }
        let slot = c.wr_id as u32;
        if c.status != WcStatus::Success {
            if c.status == WcStatus::WrFlushErr {
                // The QP is going down: the slot is not re-posted.
                self.counters.flushed += 1;
                return Ok(());
            }
            self.counters.errors += 1;
            return self.post_slot(slot);
        }
        // SEND with immediate completes as RECV carrying the immediate; a
        // WRITE with immediate (RECV_RDMA_WITH_IMM) or a plain SEND is not a frame.
        let imm = match (c.opcode, c.imm) {
            (WcOpcode::Recv, Some(imm)) => imm,
            _ => {
                self.counters.wrong_opcode += 1;
                return self.post_slot(slot);
            }
        };
        if c.byte_len == 0 || c.byte_len > self.cfg.max_payload() {
            self.counters.bad_length += 1;
            return self.post_slot(slot);
        }
        self.held[slot as usize] = true;
        self.held_count += 1;
        self.counters.frames += 1;
        self.counters.bytes += c.byte_len as u64;
        out.push(Frame {
            slot,
            channel: (imm & 0xFF) as u8,
            ring_position: imm >> 8,
            len: c.byte_len,
            owner: self.owner(),
        });
        Ok(())
    }

    /// Like [`poll`](Self::poll) but keeps only frames of `channel`: frames
    /// of other channels are released at once (counted in `filtered_out`).
    pub fn poll_channel(&mut self, channel: Channel, out: &mut Vec<Frame>) -> Result<usize, RoceError> {
        let mut all = Vec::new();
        self.poll(&mut all)?;
        let before = out.len();
        for f in all {
            if f.channel == channel.get() {
                out.push(f);
            } else {
                self.counters.filtered_out += 1;
                self.release(f)?;
            }
        }
        Ok(out.len() - before)
    }

    /// Polls; when nothing is ready, waits (in the transport's time) for the
    /// CQ until `deadline`, then polls once more. Returns the frames appended.
    pub fn wait_frames(&mut self, out: &mut Vec<Frame>, deadline: Instant) -> Result<usize, RoceError> {
        loop {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            let cq = self.cq.ok_or(RoceError::Stopped)?;
            if self.t.wait(&[cq], deadline)? == Readiness::TimedOut {
                return self.poll(out);
            }
        }
    }

    fn owner(&self) -> (u32, u32, u32) {
        (self.mr.id.0, self.mr.rkey, self.host_qpn)
    }

    fn check_frame(&self, frame: &Frame) -> Result<(), RoceError> {
        let owned = frame.owner == self.owner() && !self.freed && self.held.get(frame.slot as usize) == Some(&true);
        if owned { Ok(()) } else { Err(RoceError::ForeignFrame { slot: frame.slot }) }
    }

    /// Calls `f` with the frame's bytes in the slab, without copying.
    pub fn with_frame_data(&self, frame: &Frame, f: &mut dyn MrVisitor) -> Result<(), RoceError> {
        self.check_frame(frame)?;
        let offset = frame.slot as u64 * self.cfg.max_payload() as u64;
        self.t.mr_view(self.mr.id, offset, frame.len as u64, f)?;
        Ok(())
    }

    /// Where a held frame's bytes are: the slab's region, the offset in it
    /// and the length (for zero-copy access from outside the transport).
    pub fn frame_span(&self, frame: &Frame) -> Result<(MrId, u64, u64), RoceError> {
        self.check_frame(frame)?;
        Ok((self.mr.id, frame.slot as u64 * self.cfg.max_payload() as u64, frame.len as u64))
    }

    /// A copy of the frame's bytes (convenience for tests and tools).
    pub fn frame_data(&self, frame: &Frame) -> Result<Vec<u8>, RoceError> {
        let mut data = Vec::new();
        self.with_frame_data(frame, &mut |b: &[u8]| data.extend_from_slice(b))?;
        Ok(data)
    }

    /// Gives a frame back: its slot is re-posted while connected; after `stop`
    /// the slab is freed with the last held frame.
    pub fn release(&mut self, frame: Frame) -> Result<(), RoceError> {
        self.check_frame(&frame)?;
        self.held[frame.slot as usize] = false;
        self.held_count -= 1;
        match self.phase {
            Phase::Connected if self.repost_batch == 1 => self.post_slot(frame.slot),
            Phase::Connected => {
                self.unposted.push(frame.slot);
                if self.unposted.len() >= self.repost_batch as usize {
                    self.flush_reposts()?;
                }
                Ok(())
            }
            Phase::Stopped => {
                if self.held_count == 0 {
                    self.free_slab()?;
                }
                Ok(())
            }
            Phase::Created => unreachable!("no frame exists before the connection"),
        }
    }

    /// The completion queue of the host QP (to wait on it, e.g. with a
    /// [`Poller`](crate::transport::Poller)); `None` once stopped.
    pub fn cq(&self) -> Option<CqId> {
        self.cq
    }

    /// Frames currently held by the consumer.
    pub fn held_frames(&self) -> u32 {
        self.held_count
    }

    /// Moves the QP to ERR, then destroys QP and CQ. The slab stays while
    /// frames are held. Idempotent.
    pub fn stop(&mut self) -> Result<(), RoceError> {
        if self.phase == Phase::Stopped {
            return Ok(());
        }
        self.phase = Phase::Stopped;
        let mut first: Option<RoceError> = None;
        let mut note = |r: Result<(), TransportError>| {
            if let Err(e) = r {
                first.get_or_insert(e.into());
            }
        };
        // Slots waiting for a re-post die with the QP.
        self.unposted.clear();
        if let Some(qp) = self.qp.take() {
            note(self.t.modify_qp(qp.id, &QpTransition::Err));
            note(self.t.destroy_qp(qp.id));
        }
        if let Some(cq) = self.cq.take() {
            note(self.t.destroy_cq(cq));
        }
        if self.held_count == 0
            && let Err(e) = self.free_slab()
        {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }

    fn free_slab(&mut self) -> Result<(), RoceError> {
        if self.freed {
            return Ok(());
        }
        self.freed = true;
        let mr = self.t.dereg_mr(self.mr.id);
        let pd = self.t.dealloc_pd(self.pd);
        mr?;
        pd?;
        Ok(())
    }

    /// Whether `stop` has run.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// The receive path's counters so far.
    pub fn counters(&self) -> RxCounters {
        self.counters
    }

    /// The configuration the server was created with.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// The path MTU `complete_connection` uses for `tc`.
    pub fn path_mtu(&self, tc: &TransportConfig) -> Mtu {
        tc.pmtu().min(self.active_mtu)
    }

    /// The GID index in use (detected when the config said `Auto`).
    pub fn gid_index(&self) -> u32 {
        self.gid_index
    }

    /// The 15 status fields.
    pub fn status(&self) -> Status {
        let p = self.host_params();
        Status {
            fpga_ip: self.cfg.fpga_ip(),
            fpga_gid: Gid::from_ipv4(self.cfg.fpga_ip()),
            host_qpn: p.qpn,
            host_gid: self.host_gid,
            host_ip: self.host_gid.to_ipv4(),
            mr_addr: p.mr_addr,
            mr_rkey: p.rkey,
            rx_frame_count: self.counters.frames,
            rx_byte_count: self.counters.bytes,
            max_payload: self.cfg.max_payload(),
            rx_queue_depth: self.cfg.rx_queue_depth(),
            host_rq_psn: self.rq_psn,
            host_sq_psn: self.sq_psn,
            fpga_qpn: self.fpga.map(|f| f.0),
            fpga_lkey: self.fpga.map(|f| f.1),
        }
    }

    /// The transport the server owns.
    pub fn transport(&self) -> &T {
        &self.t
    }

    /// The transport, e.g. to wait on other queues in the same loop.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.t
    }
}

impl<T: Transport> Drop for RoceServer<T> {
    /// Stops and frees everything: frame handles still around become inert
    /// (they can only be read through a server).
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = self.free_slab();
    }
}
