//! One NVMe/RDMA queue: an RC QP connected with NVMe/RDMA private data,
//! command capsule slots, response receive slots and command ids.
//!
//! Contract, in call order:
//! 1. [`Queue::start`] makes the CQ, QP and buffers, sends the RDMA CM
//!    request (NVMe/RDMA private data) and posts a receive per entry. It
//!    does not block; the queue is *connecting* ([`Queue::is_connecting`]).
//! 2. Every CM event of the transport goes to [`Queue::handle_cm`] (it
//!    says whether the event was this queue's). `Established` connects the
//!    queue; `Rejected`, `Unreachable` or `Disconnected` fail it.
//!    [`Queue::poll`] fails a queue still connecting at its deadline
//!    ([`Queue::connect_deadline`]) with `Timeout` ("RDMA CM connect").
//! 3. Connected: [`Queue::submit`] posts a capsule, [`Queue::poll`]
//!    processes completions (and expires commands past their deadline),
//!    [`Queue::take`] hands over finished commands. A command is finished
//!    only when both its capsule SEND completed and its response arrived.
//! 4. [`Queue::close`] disconnects and releases everything.
//!
//! Only [`Queue::connect`], [`Queue::execute`] and [`Queue::wait`] block
//! (in the transport's time, bounded by the queue's timeout): they are thin
//! loops over the steps above. Fabrics Connect is the controller's.
//!
//! Errors: `Rejected` / `Unreachable` (the CM answer, with the NVMe/RDMA
//! reject status when the target gave one), `Timeout` (the CM connect or a
//! command past its deadline), `Disconnected`, `Completion` (a work request
//! failed), `UnknownCid` and `Protocol` (the target broke the protocol),
//! `QueueFull` (every command id in use; the queue stays usable).
//!
//! Any failure of the connection (an error completion, a response for a
//! command id nobody sent, a timeout, a disconnect) fails the whole queue:
//! its QP goes to ERR so the target can no longer touch host memory, and
//! every outstanding command finishes with the error.

use std::net::SocketAddrV4;

use super::error::NvmeError;
use super::protocol::{COMMAND_LEN, COMPLETION_LEN, CmAccept, CmReject, CmRequest, Completion, NvmeCommand, Sgl};
use crate::time::{Duration, Instant};
use crate::transport::*;

/// How a queue is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueConfig {
    /// The target's NVMe/RDMA listener the RDMA CM request goes to.
    pub addr: SocketAddrV4,
    /// Queue id: 0 for the admin queue, 1.. for I/O queues; carried in the
    /// CM private data and in Fabrics Connect.
    pub qid: u16,
    /// Entries (2..=256); at most depth - 1 commands are outstanding.
    pub depth: u16,
    /// 0 for the admin queue; the controller id for I/O queues.
    pub cntlid: u16,
    /// In-capsule data bytes a command slot can carry (0: none).
    pub in_capsule: u32,
    /// Per-command timeout.
    pub timeout: Duration,
}

impl QueueConfig {
    /// An admin queue of `depth` entries to `addr` (queue id 0, controller
    /// id 0, no in-capsule data), each command timing out after `timeout`;
    /// an I/O queue sets `qid`, `cntlid` and `in_capsule` after.
    pub fn new(addr: SocketAddrV4, depth: u16, timeout: Duration) -> Self {
        QueueConfig { addr, qid: 0, depth, cntlid: 0, in_capsule: 0, timeout }
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    busy: bool,
    command: &'static str,
    send_done: bool,
    response: Option<Completion>,
    deadline: Instant,
}

const FREE: Slot = Slot { busy: false, command: "", send_done: false, response: None, deadline: Instant::ZERO };

/// Where [`Queue::poll_with`] gets the time for its deadline check.
#[derive(Clone, Copy)]
enum Clock {
    /// No check this time.
    Skip,
    /// Read the transport's clock (only when commands are outstanding).
    Read,
    /// A reading the caller made.
    At(Instant),
}

const WR_SEND: u64 = 1 << 32;
const WR_RECV: u64 = 2 << 32;

/// One connected queue. Owns its CQ, QP, CM id and buffers (not the PD).
#[derive(Debug)]
pub struct Queue {
    qid: u16,
    depth: u16,
    addr: SocketAddrV4,
    conn: ConnId,
    qp: QpId,
    cq: CqId,
    cmd_mr: MrInfo,
    rsp_mr: MrInfo,
    capsule_len: u64,
    timeout: Duration,
    slots: Vec<Slot>,
    outstanding: u16,
    /// Per command id: its result, once finished and until taken (a slot
    /// per id, so finishing a command allocates nothing).
    finished: Vec<Option<Result<Completion, NvmeError>>>,
    failed: Option<NvmeError>,
    closed: bool,
    scratch: Vec<crate::transport::Completion>,
    /// While the RDMA CM connect is in progress: its deadline.
    connecting: Option<Instant>,
    /// Connected and not closed (one flag for the hot paths).
    open: bool,
    /// Deadlines are stamped at the next clock read rather than at submit
    /// (see [`Queue::set_lazy_deadlines`]).
    lazy_deadlines: bool,
    /// Busy slots whose deadline is not stamped yet ([`Instant::FAR_FUTURE`]).
    unstamped: u16,
}

impl Queue {
    /// Connects: [`Queue::start`], then waits (in transport time, up to the
    /// timeout) for the CM answer. Does not send Fabrics Connect (the
    /// controller does). CM events of other connections are dropped: a
    /// caller driving several connections on one transport uses `start`
    /// and hands each event to its queue instead.
    pub fn connect<T: Transport>(t: &mut T, pd: PdId, cfg: &QueueConfig) -> Result<Queue, NvmeError> {
        let mut q = Queue::start(t, pd, cfg)?;
        loop {
            while let Some(ev) = t.cm_poll() {
                q.handle_cm(t, &ev);
            }
            q.poll(t)?;
            if let Some(e) = q.failed.clone() {
                q.release(t);
                return Err(e);
            }
            let Some(deadline) = q.connecting else { return Ok(q) };
            if let Err(e) = t.wait(&[], deadline) {
                q.release(t);
                return Err(e.into());
            }
        }
    }

    /// Starts connecting without waiting: makes the CQ, the QP (through
    /// RDMA CM, with the NVMe/RDMA request as private data) and the
    /// buffers, and posts a receive per entry. The queue is connecting
    /// until [`Queue::handle_cm`] sees its answer or [`Queue::poll`] its
    /// deadline. Everything made is released again on error.
    pub fn start<T: Transport>(t: &mut T, pd: PdId, cfg: &QueueConfig) -> Result<Queue, NvmeError> {
        let req = CmRequest::new(cfg.qid, cfg.depth, cfg.cntlid).map_err(NvmeError::Build)?;
        let depth = cfg.depth;
        let capsule_len = COMMAND_LEN as u64 + cfg.in_capsule as u64;
        let cq = t.create_cq(2 * depth as u32)?;
        let mut q = Queue {
            qid: cfg.qid,
            depth,
            addr: cfg.addr,
            conn: ConnId(u32::MAX),
            qp: QpId(u32::MAX),
            cq,
            cmd_mr: MrInfo { id: MrId(u32::MAX), addr: 0, len: 0, lkey: 0, rkey: 0, access: Access::NONE },
            rsp_mr: MrInfo { id: MrId(u32::MAX), addr: 0, len: 0, lkey: 0, rkey: 0, access: Access::NONE },
            capsule_len,
            timeout: cfg.timeout,
            slots: vec![FREE; depth as usize - 1],
            outstanding: 0,
            finished: vec![None; depth as usize - 1],
            failed: None,
            closed: false,
            scratch: Vec::new(),
            connecting: None,
            open: false,
            lazy_deadlines: false,
            unstamped: 0,
        };
        match q.start_inner(t, pd, req) {
            Ok(()) => Ok(q),
            Err(e) => {
                q.release(t);
                Err(e)
            }
        }
    }

    fn start_inner<T: Transport>(&mut self, t: &mut T, pd: PdId, req: CmRequest) -> Result<(), NvmeError> {
        let depth = self.depth as u64;
        self.cmd_mr = t.reg_mr(pd, self.capsule_len * depth, Access::LOCAL_WRITE)?;
        self.rsp_mr = t.reg_mr(pd, COMPLETION_LEN as u64 * depth, Access::LOCAL_WRITE)?;
        let caps = QpCaps {
            max_send_wr: self.depth as u32,
            max_recv_wr: self.depth as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInit { pd, send_cq: self.cq, recv_cq: self.cq, caps, sq_sig_all: false, srq: None };
        let mut params = ConnectParams::new(self.addr, init, req.encode().to_vec());
        let dev = t.device()?;
        // docs/protocols.md §2.2: min(255, max_qp_rd_atom); the u8 field holds that.
        params.responder_resources = dev.max_qp_rd_atom;
        params.initiator_depth = dev.max_qp_init_rd_atom.min(16);
        let (conn, qp) = t.cm_connect(&params)?;
        self.conn = conn;
        self.qp = qp;
        // Receives go up before the target can answer anything.
        for i in 0..self.depth as u64 {
            let sge = [Sge::new(self.rsp_mr.id, i * COMPLETION_LEN as u64, COMPLETION_LEN as u32)];
            t.post_recv(qp, &RecvWr::new(WR_RECV | i, &sge))?;
        }
        self.connecting = Some(t.now() + self.timeout);
        Ok(())
    }

    /// The CM answer for a connecting queue.
    fn on_connect_event(&mut self, ev: &CmEvent) {
        let e = match ev {
            CmEvent::Established { private_data, .. } => match CmAccept::decode(private_data) {
                Ok(accept) => {
                    // The target may hold fewer commands than we asked for.
                    if accept.crqsize < self.depth {
                        let n = accept.crqsize.max(2) as usize - 1;
                        self.slots.truncate(n);
                    }
                    self.connecting = None;
                    self.open = true;
                    return;
                }
                Err(e) => NvmeError::Protocol(e),
            },
            CmEvent::Rejected { private_data, .. } => {
                let reason = CmReject::decode(private_data).ok().map(|r| r.status);
                NvmeError::Rejected { addr: self.addr, reason }
            }
            CmEvent::Unreachable { reason, .. } => NvmeError::Unreachable { addr: self.addr, reason: *reason },
            CmEvent::Disconnected { .. } => NvmeError::Disconnected { qid: self.qid },
            CmEvent::ConnectRequest { .. } => return,
            // An event a later transport adds answers no connect of ours.
            _ => return,
        };
        // Nothing was posted but receives: the queue is released by its
        // owner (close), its QP never reached RTS.
        self.connecting = None;
        self.failed = Some(e);
    }

    /// Why a closed or still connecting queue takes no command.
    #[cold]
    fn not_open(&self) -> NvmeError {
        if self.closed {
            NvmeError::Disconnected { qid: self.qid }
        } else {
            InvalidValue::new("queue state", self.qid.into(), "the queue is still connecting (RDMA CM)").into()
        }
    }

    /// `poll` of a queue not open: nothing to do when closed; a connecting
    /// queue fails at its deadline. True when `poll` is done.
    #[cold]
    fn poll_not_open<T: Transport>(&mut self, t: &mut T) -> bool {
        if self.closed {
            return true;
        }
        let Some(deadline) = self.connecting else { return false };
        if t.now() >= deadline {
            self.connecting = None;
            self.failed = Some(NvmeError::Timeout { command: "RDMA CM connect", qid: self.qid, after: self.timeout });
        }
        true
    }

    /// Whether the RDMA CM connect is still in progress.
    pub fn is_connecting(&self) -> bool {
        self.connecting.is_some()
    }

    /// The deadline of the RDMA CM connect, while it is in progress.
    pub fn connect_deadline(&self) -> Option<Instant> {
        self.connecting
    }

    /// The queue id (0 = admin).
    pub fn qid(&self) -> u16 {
        self.qid
    }
    /// Entries of the queue; at most `depth - 1` commands are outstanding.
    pub fn depth(&self) -> u16 {
        self.depth
    }
    /// Commands the queue can hold at once.
    pub fn capacity(&self) -> u16 {
        self.slots.len() as u16
    }
    /// Commands submitted and not finished yet (a command finishes once
    /// both its SEND completion and its response have arrived).
    pub fn outstanding(&self) -> u16 {
        self.outstanding
    }
    /// The one CQ of the queue's sends and receives: what a driver loop
    /// waits on before [`Queue::poll`].
    pub fn cq(&self) -> CqId {
        self.cq
    }
    /// The RDMA CM connection id; CM events naming it belong to this
    /// queue (see [`Queue::handle_cm`]).
    pub fn conn(&self) -> ConnId {
        self.conn
    }
    /// In-capsule data bytes a command may carry.
    pub fn in_capsule(&self) -> u64 {
        self.capsule_len - COMMAND_LEN as u64
    }
    /// Why the queue failed, if it did.
    pub fn failure(&self) -> Option<&NvmeError> {
        self.failed.as_ref()
    }
    /// Whether the queue was closed and its resources released; a closed
    /// queue refuses commands with `Disconnected`.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The earliest deadline of an outstanding command (commands whose
    /// deadline is not stamped yet, see [`Queue::set_lazy_deadlines`], count
    /// from the next clock read: [`Queue::stamp_deadlines`]).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.slots.iter().filter(|s| s.busy && s.deadline != Instant::FAR_FUTURE).map(|s| s.deadline).min()
    }

    /// With `lazy`, a submitted command's deadline is not stamped from a
    /// clock read of its own but at the queue's next clock read
    /// ([`Queue::stamp_deadlines`], or [`Queue::poll`]): its timeout then
    /// counts from a little later than its submission, and a busy-polling
    /// initiator reads no clock per command. Off by default (exact
    /// deadlines, a clock read per command).
    pub fn set_lazy_deadlines(&mut self, lazy: bool) {
        self.lazy_deadlines = lazy;
    }

    /// Whether a command waits for its lazy deadline (see
    /// [`Queue::set_lazy_deadlines`]).
    pub fn has_unstamped(&self) -> bool {
        self.unstamped > 0
    }

    /// Gives every command submitted without a deadline (lazy deadlines)
    /// the deadline `now` + the timeout.
    pub fn stamp_deadlines(&mut self, now: Instant) {
        if self.unstamped == 0 {
            return;
        }
        for s in self.slots.iter_mut().filter(|s| s.busy && s.deadline == Instant::FAR_FUTURE) {
            s.deadline = now + self.timeout;
        }
        self.unstamped = 0;
    }

    /// Submits `cmd` without waiting; returns its command id. With
    /// `in_capsule` = (region, offset, len), that data travels inside the
    /// capsule (the command's SGL must be `Sgl::InCapsule`).
    pub fn submit<T: Transport>(
        &mut self,
        t: &mut T,
        cmd: &NvmeCommand,
        in_capsule: Option<(MrId, u64, u32)>,
    ) -> Result<u16, NvmeError> {
        let cid = self.free_slot()?;
        let data_len = in_capsule.map_or(0, |(_, _, len)| len);
        if data_len as u64 > self.in_capsule() {
            return Err(
                InvalidValue::new("in-capsule length", data_len as u64, "exceeds the queue's in-capsule size").into()
            );
        }
        if in_capsule.is_some() != matches!(cmd.sgl(), Sgl::InCapsule { .. }) {
            return Err(InvalidValue::new("sgl", 0, "in-capsule data needs an in-capsule SGL, and only then").into());
        }
        let bytes = cmd.to_command(cid).encode();
        self.post(t, cid, &bytes, in_capsule, cmd.name())
    }

    /// Submits a 64-byte command capsule exactly as the caller built it,
    /// only its command id (bytes 2..4) replaced by the one the queue
    /// picks, which it returns. Nothing is decoded: the caller answers for
    /// the command (the Python `RDMAQueue`, which mirrors a package that
    /// posts the caller's bytes). No in-capsule data.
    pub fn submit_capsule<T: Transport>(&mut self, t: &mut T, capsule: &[u8; COMMAND_LEN]) -> Result<u16, NvmeError> {
        let cid = self.free_slot()?;
        let mut bytes = *capsule;
        bytes[2..4].copy_from_slice(&cid.to_le_bytes());
        self.post(t, cid, &bytes, None, "command")
    }

    /// A free command id, or why there is none (failed, not open, full).
    #[inline]
    fn free_slot(&self) -> Result<u16, NvmeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.open {
            return Err(self.not_open());
        }
        match self.slots.iter().position(|s| !s.busy) {
            Some(cid) => Ok(cid as u16),
            None => Err(NvmeError::QueueFull { qid: self.qid, depth: self.depth, outstanding: self.outstanding }),
        }
    }

    /// Writes the capsule (and its in-capsule data) into slot `cid` and
    /// posts its SEND.
    #[inline]
    fn post<T: Transport>(
        &mut self,
        t: &mut T,
        cid: u16,
        bytes: &[u8; COMMAND_LEN],
        in_capsule: Option<(MrId, u64, u32)>,
        name: &'static str,
    ) -> Result<u16, NvmeError> {
        let data_len = in_capsule.map_or(0, |(_, _, len)| len);
        let at = cid as u64 * self.capsule_len;
        t.mr_write(self.cmd_mr.id, at, bytes)?;
        if let Some((mr, offset, len)) = in_capsule {
            let mut data = vec![0u8; len as usize];
            t.mr_read(mr, offset, &mut data)?;
            t.mr_write(self.cmd_mr.id, at + COMMAND_LEN as u64, &data)?;
        }
        let sge = [Sge::new(self.cmd_mr.id, at, COMMAND_LEN as u32 + data_len)];
        t.post_send(self.qp, &SendWr::new(WR_SEND | cid as u64, SendOp::Send, &sge))?;
        let deadline = if self.lazy_deadlines {
            self.unstamped = self.unstamped.saturating_add(1);
            Instant::FAR_FUTURE
        } else {
            t.now() + self.timeout
        };
        self.slots[cid as usize] = Slot { busy: true, command: name, send_done: false, response: None, deadline };
        self.outstanding += 1;
        Ok(cid)
    }

    /// Processes completions and deadlines without blocking. Finished
    /// commands wait in the queue for [`Queue::take`].
    pub fn poll<T: Transport>(&mut self, t: &mut T) -> Result<(), NvmeError> {
        self.poll_clocked(t, true).map(|_| ())
    }

    /// [`Queue::poll`]; with `clocked` false the clock is not read, so
    /// deadlines are not checked (nor lazy ones stamped) this time.
    /// Returns how many completions it took off the CQ.
    pub fn poll_clocked<T: Transport>(&mut self, t: &mut T, clocked: bool) -> Result<usize, NvmeError> {
        self.poll_with(t, if clocked { Clock::Read } else { Clock::Skip })
    }

    /// [`Queue::poll`] against a clock reading the caller already made
    /// (one read for several queues, or for a whole wait): deadlines are
    /// checked, and lazy ones stamped, with `now`. The reading must be
    /// later than every submission still waiting for its lazy deadline
    /// (else that deadline would come early); older than the true time it
    /// otherwise only delays a timeout, never reports one early.
    pub fn poll_at<T: Transport>(&mut self, t: &mut T, now: Instant) -> Result<usize, NvmeError> {
        self.poll_with(t, Clock::At(now))
    }

    fn poll_with<T: Transport>(&mut self, t: &mut T, clock: Clock) -> Result<usize, NvmeError> {
        if !self.open && self.poll_not_open(t) {
            return Ok(0);
        }
        if self.failed.is_some() {
            // A failed queue's QP is in ERR: its outstanding work flushes
            // into the CQ. Drain and drop it, or a wait on this CQ would
            // report it ready forever.
            let mut comps = std::mem::take(&mut self.scratch);
            comps.clear();
            let _ = t.poll_cq(self.cq, usize::MAX, &mut comps);
            self.scratch = comps;
            return Ok(0);
        }
        let mut comps = std::mem::take(&mut self.scratch);
        comps.clear();
        let r = t.poll_cq(self.cq, usize::MAX, &mut comps);
        let r = r.map_err(NvmeError::from).and_then(|_| {
            for c in &comps {
                self.on_completion(t, c)?;
            }
            Ok(())
        });
        let n = comps.len();
        self.scratch = comps;
        if let Err(e) = r {
            self.fail(t, e);
            return Ok(n);
        }
        if self.outstanding == 0 {
            self.unstamped = 0;
            return Ok(n);
        }
        let now = match clock {
            Clock::Skip => return Ok(n),
            Clock::Read => t.now(),
            Clock::At(now) => now,
        };
        self.stamp_deadlines(now);
        if let Some(late) = self.slots.iter().find(|s| s.busy && s.deadline <= now) {
            let e = NvmeError::Timeout { command: late.command, qid: self.qid, after: self.timeout };
            self.fail(t, e);
        }
        Ok(n)
    }

    fn on_completion<T: Transport>(&mut self, t: &mut T, c: &crate::transport::Completion) -> Result<(), NvmeError> {
        let is_send = c.wr_id & WR_SEND != 0;
        if !c.status.is_success() {
            let op = if is_send { "command SEND" } else { "response receive" };
            return Err(NvmeError::Completion { qid: self.qid, op, status: c.status });
        }
        let idx = (c.wr_id & 0xFFFF_FFFF) as usize;
        if is_send {
            if let Some(s) = self.slots.get_mut(idx).filter(|s| s.busy) {
                s.send_done = true;
            }
            self.finish_if_done(idx);
            return Ok(());
        }
        let mut bytes = [0u8; COMPLETION_LEN];
        t.mr_read(self.rsp_mr.id, idx as u64 * COMPLETION_LEN as u64, &mut bytes)?;
        let sge = [Sge::new(self.rsp_mr.id, idx as u64 * COMPLETION_LEN as u64, COMPLETION_LEN as u32)];
        t.post_recv(self.qp, &RecvWr::new(c.wr_id, &sge))?;
        if (c.byte_len as usize) < COMPLETION_LEN {
            return Err(NvmeError::Protocol(super::protocol::ProtocolError::Short {
                what: "response capsule",
                len: c.byte_len as usize,
                need: COMPLETION_LEN,
            }));
        }
        let resp = Completion::decode(&bytes).map_err(NvmeError::Protocol)?;
        let cid = resp.cid as usize;
        match self.slots.get_mut(cid) {
            Some(s) if s.busy && s.response.is_none() => s.response = Some(resp),
            _ => return Err(NvmeError::UnknownCid { qid: self.qid, cid: resp.cid }),
        }
        self.finish_if_done(cid);
        Ok(())
    }

    fn finish_if_done(&mut self, cid: usize) {
        let Some(s) = self.slots.get_mut(cid) else { return };
        if s.busy
            && s.send_done
            && let Some(resp) = s.response
        {
            *s = FREE;
            self.outstanding -= 1;
            self.finished[cid] = Some(Ok(resp));
        }
    }

    /// Fails the queue: QP to ERR, every outstanding command finishes with `e`.
    fn fail<T: Transport>(&mut self, t: &mut T, e: NvmeError) {
        let _ = t.modify_qp(self.qp, &QpTransition::Err);
        for (cid, s) in self.slots.iter_mut().enumerate() {
            if s.busy {
                self.finished[cid] = Some(Err(e.clone()));
                *s = FREE;
            }
        }
        self.outstanding = 0;
        self.failed = Some(e);
    }

    /// A CM event that may concern this queue: the answer to a connecting
    /// queue's request, or a disconnect (which fails a connected queue).
    /// Returns whether the event was this queue's.
    pub fn handle_cm<T: Transport>(&mut self, t: &mut T, ev: &CmEvent) -> bool {
        if ev.conn() != self.conn || self.closed {
            return ev.conn() == self.conn;
        }
        if self.connecting.is_some() {
            self.on_connect_event(ev);
            return true;
        }
        if matches!(ev, CmEvent::Disconnected { .. }) && self.failed.is_none() && !self.closed {
            self.fail(t, NvmeError::Disconnected { qid: self.qid });
        }
        true
    }

    /// The result of command `cid`, once finished (status not checked).
    pub fn take(&mut self, cid: u16) -> Option<Result<Completion, NvmeError>> {
        self.finished.get_mut(cid as usize).and_then(Option::take)
    }

    /// Every finished command.
    pub fn take_all(&mut self) -> Vec<(u16, Result<Completion, NvmeError>)> {
        self.finished.iter_mut().enumerate().filter_map(|(cid, r)| r.take().map(|r| (cid as u16, r))).collect()
    }

    /// Blocks until something happens on this queue or `deadline` passes.
    pub fn wait<T: Transport>(&mut self, t: &mut T, deadline: Instant) -> Result<(), NvmeError> {
        let deadline = self.next_deadline().or(self.connecting).map_or(deadline, |d| d.min(deadline));
        if t.wait(&[self.cq], deadline)? == Readiness::Ready {
            while let Some(ev) = t.cm_poll() {
                self.handle_cm(t, &ev);
            }
        }
        self.poll(t)
    }

    /// Submits `cmd` and waits for it; an NVMe error status is an error.
    pub fn execute<T: Transport>(&mut self, t: &mut T, cmd: &NvmeCommand) -> Result<Completion, NvmeError> {
        let cid = self.submit(t, cmd, None)?;
        loop {
            self.poll(t)?;
            if let Some(r) = self.take(cid) {
                let c = r?;
                c.check().map_err(|error| NvmeError::Status { command: cmd.name(), error })?;
                return Ok(c);
            }
            self.wait(t, Instant::FAR_FUTURE)?;
        }
    }

    /// Disconnects and releases everything. Commands still outstanding
    /// finish with `Disconnected`.
    pub fn close<T: Transport>(&mut self, t: &mut T) {
        if !self.closed {
            if self.failed.is_none() {
                self.fail(t, NvmeError::Disconnected { qid: self.qid });
            }
            self.release(t);
        }
    }

    fn release<T: Transport>(&mut self, t: &mut T) {
        self.closed = true;
        self.open = false;
        if self.conn.0 != u32::MAX {
            let _ = t.cm_disconnect(self.conn);
            let _ = t.modify_qp(self.qp, &QpTransition::Err);
            let _ = t.destroy_qp(self.qp);
            let _ = t.cm_destroy(self.conn);
        }
        let _ = t.destroy_cq(self.cq);
        for mr in [self.cmd_mr, self.rsp_mr] {
            if mr.id.0 != u32::MAX {
                let _ = t.dereg_mr(mr.id);
            }
        }
    }

    /// The target address the queue connects (or connected) to.
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }
}
