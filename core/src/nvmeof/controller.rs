//! A connected NVMe-oF controller: the admin queue, bring-up exactly as
//! PROTOCOLS.md §2 orders it, I/O queues, namespaces, and data transfer on
//! registered memory (split by MDTS, up to the queues' depth in flight),
//! keep-alive, and the discovery client.

use std::net::SocketAddrV4;

use super::error::NvmeError;
use super::protocol::Completion;
use super::protocol::*;
use super::queue::{Queue, QueueConfig};
use crate::time::{Duration, Instant};
use crate::transport::*;

/// How to connect to a controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    pub addr: SocketAddrV4,
    pub subnqn: Nqn,
    pub host_id: [u8; 16],
    pub hostnqn: Nqn,
    /// Requested I/O queue depth (2..=256); the target may allow fewer.
    pub queue_depth: u16,
    /// I/O queues to create (1..).
    pub io_queues: u16,
    /// Keep-alive timeout; zero disables keep-alive.
    pub keep_alive: Duration,
    /// Timeout of each command (and of each connect).
    pub timeout: Duration,
    /// Send small writes as in-capsule data when the target allows it.
    pub in_capsule_writes: bool,
}

impl ControllerConfig {
    /// Defaults: queue depth 128, one I/O queue, no keep-alive, 30 s
    /// timeouts, in-capsule writes on; host NQN derived from `host_id`.
    pub fn new(addr: SocketAddrV4, subnqn: Nqn, host_id: [u8; 16]) -> Self {
        ControllerConfig {
            addr,
            subnqn,
            hostnqn: Nqn::from_host_id(&host_id),
            host_id,
            queue_depth: 128,
            io_queues: 1,
            keep_alive: Duration::ZERO,
            timeout: Duration::from_secs(30),
            in_capsule_writes: true,
        }
    }
}

/// An identified namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub info: NamespaceInfo,
}

impl Namespace {
    pub fn nsid(&self) -> u32 {
        self.info.nsid
    }
    pub fn lba_size(&self) -> u64 {
        self.info.lba_size()
    }
    pub fn blocks(&self) -> u64 {
        self.info.nsze
    }
}

/// The kind of memory a transfer lands in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    Host,
    /// Device memory written by GPUDirect RDMA: the writes must be flushed
    /// (made visible to the device) before the data is used. The initiator
    /// calls the given hook after a read completes.
    Gpu,
}

/// Registered memory to transfer from or to: `len` bytes at `offset` of `mr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub mr: MrInfo,
    pub offset: u64,
    pub len: u64,
    pub kind: MemoryKind,
}

impl Buffer {
    pub fn host(mr: MrInfo) -> Self {
        Buffer { mr, offset: 0, len: mr.len, kind: MemoryKind::Host }
    }
    pub fn slice(mr: MrInfo, offset: u64, len: u64) -> Self {
        Buffer { mr, offset, len, kind: MemoryKind::Host }
    }
}

/// Makes GPUDirect writes visible before read data is handed over (on real
/// hardware: a flush of the GPU's PCIe write path; in the simulator: the
/// GPU memory model's flush).
pub trait GpuFlush {
    fn flush(&mut self, mr: MrId) -> Result<(), NvmeError>;
}

/// An I/O command submitted without waiting ([`Controller::submit_read`],
/// [`Controller::submit_write`], [`Controller::submit_flush`]); its result
/// comes back from [`Controller::take_finished`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// A submitted command waiting for its queue.
#[derive(Clone, Copy, Debug)]
struct Pending {
    ticket: Ticket,
    name: &'static str,
    /// A GPU buffer to flush before the read is reported done.
    gpu: Option<MrId>,
}

/// Scratch of the admin queue: connect data and Identify / log pages.
const SCRATCH_LEN: u64 = 64 * 1024;

/// A connected controller over transport `T`.
#[derive(Debug)]
pub struct Controller<T: Transport> {
    t: T,
    cfg: ControllerConfig,
    pd: PdId,
    scratch: MrInfo,
    admin: Queue,
    io: Vec<Queue>,
    cap: Cap,
    info: ControllerInfo,
    cntlid: u16,
    max_transfer: u64,
    next_keep_alive: Option<Instant>,
    keep_alive_cid: Option<u16>,
    next_queue: usize,
    closed: bool,
    gpu_flush: Option<Box<dyn GpuFlushDebug>>,
    /// Tickets in flight, by (I/O queue index, command id).
    pending: std::collections::BTreeMap<(usize, u16), Pending>,
    finished: Vec<(Ticket, Result<(), NvmeError>)>,
    next_ticket: u64,
}

/// `GpuFlush` that can be shown in Debug output.
pub trait GpuFlushDebug: GpuFlush + std::fmt::Debug {}
impl<X: GpuFlush + std::fmt::Debug> GpuFlushDebug for X {}

/// What an I/O request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

impl<T: Transport> Controller<T> {
    /// Connects and brings the controller up: admin queue, Fabrics Connect,
    /// CAP, CC.EN, CSTS.RDY (bounded by CAP.TO), Identify Controller, Set
    /// Features Number of Queues, then the I/O queues. Everything made is
    /// released again on failure.
    pub fn connect(mut t: T, cfg: ControllerConfig) -> Result<Self, (T, NvmeError)> {
        let pd = match t.alloc_pd() {
            Ok(pd) => pd,
            Err(e) => return Err((t, e.into())),
        };
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let scratch = match t.reg_mr(pd, SCRATCH_LEN, access) {
            Ok(m) => m,
            Err(e) => {
                let _ = t.dealloc_pd(pd);
                return Err((t, e.into()));
            }
        };
        let admin = match connect_admin(&mut t, pd, scratch, &cfg, &cfg.subnqn, cfg.keep_alive) {
            Ok(a) => a,
            Err(e) => {
                let _ = t.dereg_mr(scratch.id);
                let _ = t.dealloc_pd(pd);
                return Err((t, e));
            }
        };
        let mut c = Controller {
            t,
            cfg,
            pd,
            scratch,
            admin: admin.0,
            io: Vec::new(),
            cap: Cap(0),
            info: ControllerInfo::decode(&[0u8; IDENTIFY_LEN]).expect("zeros decode"),
            cntlid: admin.1,
            max_transfer: 0,
            next_keep_alive: None,
            keep_alive_cid: None,
            next_queue: 0,
            closed: false,
            gpu_flush: None,
            pending: std::collections::BTreeMap::new(),
            finished: Vec::new(),
            next_ticket: 1,
        };
        match c.bring_up() {
            Ok(()) => Ok(c),
            Err(e) => {
                c.close();
                Err((c.t, e))
            }
        }
    }

    fn bring_up(&mut self) -> Result<(), NvmeError> {
        // Each CSTS poll counts as traffic for the keep-alive timer: poll
        // well within KATO (a Keep Alive is not sent before the controller is up).
        let mut poll = Duration::from_millis(10);
        if self.cfg.keep_alive > Duration::ZERO {
            poll = poll.min(self.cfg.keep_alive / 4);
        }
        self.cap = enable(&mut self.t, &mut self.admin, poll)?;
        let info = self.identify_controller()?;
        if info.cntlid != self.cntlid {
            return Err(NvmeError::Protocol(ProtocolError::field(
                "IdentifyController",
                "cntlid",
                info.cntlid.into(),
                "must match the id Fabrics Connect returned",
            )));
        }
        if !info.keyed_sgl() {
            return Err(NvmeError::Unsupported("the controller lacks keyed SGL data blocks (SGLS bit 2)".into()));
        }
        if info.icdoff != 0 {
            return Err(NvmeError::Unsupported(format!("in-capsule data offset {} (ICDOFF must be 0)", info.icdoff)));
        }
        self.max_transfer = max_transfer(self.cap.page_size(), info.mdts);
        let mut depth = self.cfg.queue_depth.min(self.cap.mqes().saturating_add(1)).min(MAX_QUEUE_DEPTH);
        if info.maxcmd != 0 {
            depth = depth.min(info.maxcmd);
        }
        if depth < MIN_QUEUE_DEPTH {
            return Err(
                InvalidValue::new("queue depth", depth.into(), "the negotiated depth must be at least 2").into()
            );
        }
        let want = self.cfg.io_queues.max(1);
        let value = (want - 1) as u32 | ((want - 1) as u32) << 16;
        let c = self
            .admin
            .execute(&mut self.t, &NvmeCommand::SetFeatures { fid: FEAT_NUMBER_OF_QUEUES, nsid: 0, value })?;
        let allowed = (c.dw0() as u16).min((c.dw0() >> 16) as u16).saturating_add(1);
        let n = want.min(allowed);
        let in_capsule = if self.cfg.in_capsule_writes { info.in_capsule_bytes().min(16 * 1024) as u32 } else { 0 };
        self.info = info;
        for qid in 1..=n {
            let qcfg = QueueConfig {
                addr: self.cfg.addr,
                qid,
                depth,
                cntlid: self.cntlid,
                in_capsule,
                timeout: self.cfg.timeout,
            };
            let mut q = Queue::connect(&mut self.t, self.pd, &qcfg, &mut |_| {})?;
            let r = fabrics_connect(&mut self.t, &mut q, self.scratch, &self.cfg, &self.cfg.subnqn, self.cntlid, 0);
            if let Err(e) = r {
                q.close(&mut self.t);
                return Err(e);
            }
            self.io.push(q);
        }
        if self.cfg.keep_alive > Duration::ZERO {
            self.next_keep_alive = Some(self.t.now() + self.cfg.keep_alive / 2);
        }
        Ok(())
    }

    fn identify_controller(&mut self) -> Result<ControllerInfo, NvmeError> {
        let sgl = Sgl::for_region(&self.scratch, 0, IDENTIFY_LEN as u64).map_err(NvmeError::Build)?;
        self.admin_execute(&NvmeCommand::Identify { cns: CNS_CONTROLLER, cntid: 0, nsid: 0, sgl })?;
        let mut b = vec![0u8; IDENTIFY_LEN];
        self.t.mr_read(self.scratch.id, 0, &mut b)?;
        ControllerInfo::decode(&b).map_err(NvmeError::Protocol)
    }

    /// Runs an admin command, keeping keep-alive going meanwhile.
    fn admin_execute(&mut self, cmd: &NvmeCommand) -> Result<Completion, NvmeError> {
        self.keep_alive_tick()?;
        let cid = self.admin.submit(&mut self.t, cmd, None)?;
        loop {
            self.pump(Instant::FAR_FUTURE)?;
            if let Some(r) = self.admin.take(cid) {
                let c = r?;
                c.check().map_err(|error| NvmeError::Status { command: cmd.name(), error })?;
                return Ok(c);
            }
        }
    }

    /// The completion queues worth waiting on and the time the controller
    /// next needs [`Controller::service`] without any completion: the
    /// earliest command deadline or keep-alive due. A driver loop waits on
    /// these (`transport.wait(&cqs, until)`), then calls `service`.
    pub fn wait_set(&self) -> (Vec<CqId>, Instant) {
        // Only live queues: a failed one has nothing left to wait for.
        let live =
            || std::iter::once(&self.admin).chain(self.io.iter()).filter(|q| q.failure().is_none() && !q.is_closed());
        let cqs = live().map(|q| q.cq()).collect();
        let mut until = Instant::FAR_FUTURE;
        for q in live() {
            if let Some(d) = q.next_deadline() {
                until = until.min(d);
            }
        }
        // While a Keep Alive is outstanding its deadline counts, not the
        // next one's due time (already past: nothing to send until it answers).
        if let (Some(k), None) = (self.next_keep_alive, self.keep_alive_cid) {
            until = until.min(k);
        }
        (cqs, until)
    }

    /// Waits for anything (completions, CM events, a keep-alive due, a
    /// deadline) once, then processes it.
    fn pump(&mut self, deadline: Instant) -> Result<(), NvmeError> {
        let (cqs, until) = self.wait_set();
        self.t.wait(&cqs, until.min(deadline))?;
        self.service()
    }

    /// Does everything that is due without blocking: CM events (a
    /// disconnect fails its queue), completions, command deadlines,
    /// finished tickets, and a Keep Alive when one is due (on the
    /// transport's clock, whether or not the application is calling
    /// anything else). An application that sits idle with a keep-alive
    /// timeout set must call this by [`Controller::wait_set`]'s time.
    ///
    /// Errors: the admin queue failed (a Keep Alive or admin command timed
    /// out, the target disconnected) or a Keep Alive was refused; the
    /// controller is then unusable until [`Controller::reconnect`]. I/O
    /// queue failures are reported through the tickets they fail.
    pub fn service(&mut self) -> Result<(), NvmeError> {
        while let Some(ev) = self.t.cm_poll() {
            self.admin.handle_cm(&mut self.t, &ev);
            for q in &mut self.io {
                q.handle_cm(&mut self.t, &ev);
            }
        }
        self.admin.poll(&mut self.t)?;
        for q in &mut self.io {
            q.poll(&mut self.t)?;
        }
        self.collect_tickets();
        self.keep_alive_tick()?;
        match self.admin.failure() {
            Some(e) => Err(e.clone()),
            None if self.admin.is_closed() => Err(NvmeError::Disconnected { qid: 0 }),
            None => Ok(()),
        }
    }

    /// Moves finished ticketed commands to `finished`.
    fn collect_tickets(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let keys: Vec<(usize, u16)> = self.pending.keys().copied().collect();
        for (qi, cid) in keys {
            let Some(r) = self.io.get_mut(qi).and_then(|q| q.take(cid)) else { continue };
            let p = self.pending.remove(&(qi, cid)).expect("listed");
            let mut r = r.and_then(|c| c.check().map_err(|error| NvmeError::Status { command: p.name, error }));
            if let (Ok(()), Some(mr)) = (&r, p.gpu) {
                r = match self.gpu_flush.as_mut() {
                    Some(f) => f.flush(mr),
                    None => Err(NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into())),
                };
            }
            self.finished.push((p.ticket, r.map(|_| ())));
        }
    }

    /// Sends a Keep Alive when one is due (and checks the last one's answer).
    pub fn keep_alive_tick(&mut self) -> Result<(), NvmeError> {
        if let Some(cid) = self.keep_alive_cid {
            match self.admin.take(cid) {
                None => return Ok(()),
                Some(r) => {
                    self.keep_alive_cid = None;
                    r?.check().map_err(|error| NvmeError::Status { command: "Keep Alive", error })?;
                }
            }
        }
        let Some(due) = self.next_keep_alive else { return Ok(()) };
        let now = self.t.now();
        if now >= due {
            self.keep_alive_cid = Some(self.admin.submit(&mut self.t, &NvmeCommand::KeepAlive, None)?);
            self.next_keep_alive = Some(now + self.cfg.keep_alive / 2);
        }
        Ok(())
    }

    /// Keeps the controller alive (and drives its queues) until `deadline`:
    /// the blocking form of a `wait_set` / `service` loop.
    pub fn idle_until(&mut self, deadline: Instant) -> Result<(), NvmeError> {
        self.service()?;
        while self.t.now() < deadline {
            self.pump(deadline)?;
        }
        Ok(())
    }

    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    pub fn cap(&self) -> Cap {
        self.cap
    }
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }
    /// Largest transfer of one command (MDTS and the keyed SGL limit).
    pub fn max_transfer(&self) -> u64 {
        self.max_transfer
    }
    pub fn io_queues(&self) -> &[Queue] {
        &self.io
    }
    pub fn pd(&self) -> PdId {
        self.pd
    }
    pub fn transport(&self) -> &T {
        &self.t
    }
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.t
    }

    /// Sets the hook that flushes GPUDirect writes (see [`MemoryKind::Gpu`]).
    pub fn set_gpu_flush(&mut self, f: Box<dyn GpuFlushDebug>) {
        self.gpu_flush = Some(f);
    }

    /// Registers `len` bytes of host memory for I/O (in this controller's PD).
    pub fn alloc(&mut self, len: u64) -> Result<MrInfo, NvmeError> {
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        Ok(self.t.reg_mr(self.pd, len, access)?)
    }

    pub fn free(&mut self, mr: MrInfo) -> Result<(), NvmeError> {
        Ok(self.t.dereg_mr(mr.id)?)
    }

    /// Identifies namespace `nsid`. Namespaces with separate metadata are
    /// refused: this initiator moves data blocks only.
    pub fn namespace(&mut self, nsid: u32) -> Result<Namespace, NvmeError> {
        if nsid == 0 || nsid == u32::MAX {
            return Err(InvalidValue::new("nsid", nsid.into(), "a namespace id is 1..=0xFFFFFFFE").into());
        }
        let sgl = Sgl::for_region(&self.scratch, 0, IDENTIFY_LEN as u64).map_err(NvmeError::Build)?;
        self.admin_execute(&NvmeCommand::Identify { cns: CNS_NAMESPACE, cntid: 0, nsid, sgl })?;
        let mut b = vec![0u8; IDENTIFY_LEN];
        self.t.mr_read(self.scratch.id, 0, &mut b)?;
        let info = NamespaceInfo::decode(nsid, &b).map_err(NvmeError::Protocol)?;
        if info.nsze == 0 {
            return Err(NvmeError::Status {
                command: "Identify",
                error: StatusError { status: Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), result: 0 },
            });
        }
        if info.separate_metadata() {
            return Err(NvmeError::Unsupported(format!(
                "namespace {nsid} uses {} bytes of separate metadata per block",
                info.metadata_size()
            )));
        }
        Ok(Namespace { info })
    }

    /// Active namespace ids (Identify CNS 2).
    pub fn active_namespaces(&mut self) -> Result<Vec<u32>, NvmeError> {
        let sgl = Sgl::for_region(&self.scratch, 0, IDENTIFY_LEN as u64).map_err(NvmeError::Build)?;
        self.admin_execute(&NvmeCommand::Identify { cns: CNS_ACTIVE_NAMESPACES, cntid: 0, nsid: 0, sgl })?;
        let mut b = vec![0u8; IDENTIFY_LEN];
        self.t.mr_read(self.scratch.id, 0, &mut b)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .take_while(|&id| id != 0)
            .collect())
    }

    /// Reads `buf.len` bytes (whole blocks) from block `slba` into `buf`.
    pub fn read(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<(), NvmeError> {
        self.transfer(Dir::Read, ns, slba, buf)?;
        if buf.kind == MemoryKind::Gpu {
            // GPUDirect writes must be visible before the data is used.
            match self.gpu_flush.as_mut() {
                Some(f) => f.flush(buf.mr.id)?,
                None => return Err(NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into())),
            }
        }
        Ok(())
    }

    /// Writes `buf.len` bytes (whole blocks) from `buf` at block `slba`.
    pub fn write(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<(), NvmeError> {
        self.transfer(Dir::Write, ns, slba, buf)
    }

    /// Commits volatile writes of `ns` to non-volatile media.
    pub fn flush(&mut self, ns: &Namespace) -> Result<(), NvmeError> {
        let q = self.io.first_mut().ok_or_else(|| NvmeError::Unsupported("no I/O queue".into()))?;
        let cmd = NvmeCommand::Flush { nsid: ns.nsid() };
        let cid = q.submit(&mut self.t, &cmd, None)?;
        self.wait_for(&[(0, cid)], cmd.name())
    }

    /// Waits for every (queue index, cid) and returns the first error.
    fn wait_for(&mut self, pending: &[(usize, u16)], name: &'static str) -> Result<(), NvmeError> {
        let mut left: Vec<(usize, u16)> = pending.to_vec();
        let mut first: Option<NvmeError> = None;
        while !left.is_empty() {
            self.pump(Instant::FAR_FUTURE)?;
            let io = &mut self.io;
            left.retain(|&(qi, cid)| match io[qi].take(cid) {
                None => true,
                Some(r) => {
                    let r = r.and_then(|c| c.check().map_err(|error| NvmeError::Status { command: name, error }));
                    if let Err(e) = r {
                        first.get_or_insert(e);
                    }
                    false
                }
            });
        }
        first.map_or(Ok(()), Err)
    }

    fn transfer(&mut self, dir: Dir, ns: &Namespace, slba: u64, buf: Buffer) -> Result<(), NvmeError> {
        self.transfer_many(dir, ns, &[(slba, buf)], usize::MAX)
    }

    /// Reads every (block, buffer) pair, keeping at most `depth` commands in
    /// flight (and the queues full up to that): random I/O at a queue depth.
    pub fn read_many(&mut self, ns: &Namespace, reqs: &[(u64, Buffer)], depth: usize) -> Result<(), NvmeError> {
        self.transfer_many(Dir::Read, ns, reqs, depth.max(1))?;
        if reqs.iter().any(|(_, b)| b.kind == MemoryKind::Gpu) {
            let mut mrs: Vec<MrId> =
                reqs.iter().filter(|(_, b)| b.kind == MemoryKind::Gpu).map(|(_, b)| b.mr.id).collect();
            mrs.dedup();
            let f = self
                .gpu_flush
                .as_mut()
                .ok_or_else(|| NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into()))?;
            for mr in mrs {
                f.flush(mr)?;
            }
        }
        Ok(())
    }

    fn transfer_many(
        &mut self,
        dir: Dir,
        ns: &Namespace,
        reqs: &[(u64, Buffer)],
        depth: usize,
    ) -> Result<(), NvmeError> {
        let lba = ns.lba_size();
        for &(slba, buf) in reqs {
            check_request(ns, slba, &buf)?;
        }
        if self.io.is_empty() {
            return Err(NvmeError::Unsupported("no I/O queue".into()));
        }
        // Chunks of whole blocks within MDTS and the NLB field.
        let per_cmd = (self.max_transfer / lba).clamp(1, MAX_BLOCKS_PER_COMMAND as u64);
        let name = if dir == Dir::Read { "Read" } else { "Write" };
        let (mut req, mut next) = (0usize, 0u64); // request, and blocks of it submitted
        let mut inflight: Vec<(usize, u16)> = Vec::new();
        let mut first: Option<NvmeError> = None;
        loop {
            // Fill the queues up to their capacity (and `depth`).
            while first.is_none() && req < reqs.len() && inflight.len() < depth {
                let (slba, buf) = reqs[req];
                let blocks = buf.len / lba;
                let n = per_cmd.min(blocks - next);
                let Some(qi) = self.pick_queue() else { break };
                let off = buf.offset + next * lba;
                let submitted = self.submit_one(qi, dir, ns, slba + next, buf.mr, off, n);
                match submitted {
                    Ok(cid) => {
                        inflight.push((qi, cid));
                        next += n;
                        if next == blocks {
                            req += 1;
                            next = 0;
                        }
                    }
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
            if inflight.is_empty() {
                break;
            }
            // Commands stay in flight until they finish or their queue
            // fails: the buffers are the caller's until then.
            if let Err(e) = self.pump(Instant::FAR_FUTURE) {
                for q in &mut self.io {
                    q.close(&mut self.t);
                }
                first.get_or_insert(e);
            }
            let io = &mut self.io;
            inflight.retain(|&(qi, cid)| match io[qi].take(cid) {
                None => !io[qi].is_closed(),
                Some(r) => {
                    let r = r.and_then(|c| c.check().map_err(|error| NvmeError::Status { command: name, error }));
                    if let Err(e) = r {
                        first.get_or_insert(e);
                    }
                    false
                }
            });
        }
        first.map_or(Ok(()), Err)
    }

    /// Submits one command of `blocks` blocks at `slba`, its data at `off`
    /// of `mr` (in-capsule for a small write when the queue allows it).
    #[allow(clippy::too_many_arguments)]
    fn submit_one(
        &mut self,
        qi: usize,
        dir: Dir,
        ns: &Namespace,
        slba: u64,
        mr: MrInfo,
        off: u64,
        blocks: u64,
    ) -> Result<u16, NvmeError> {
        let len = blocks * ns.lba_size();
        let q = &mut self.io[qi];
        let small = dir == Dir::Write && len <= q.in_capsule();
        let built = if small {
            Ok((Sgl::InCapsule { offset: 0, len: len as u32 }, Some((mr.id, off, len as u32))))
        } else {
            Sgl::for_region(&mr, off, len).map(|sgl| (sgl, None))
        };
        let cmd = built.and_then(|(sgl, inline)| {
            let cmd = match dir {
                Dir::Read => NvmeCommand::read(ns.nsid(), slba, blocks as u32, sgl),
                Dir::Write => NvmeCommand::write(ns.nsid(), slba, blocks as u32, sgl),
            };
            cmd.map(|c| (c, inline))
        });
        match cmd {
            Ok((cmd, inline)) => q.submit(&mut self.t, &cmd, inline),
            Err(e) => Err(NvmeError::Build(e)),
        }
    }

    /// Submits a read of `buf.len` bytes (whole blocks, at most
    /// [`Controller::max_transfer`]: one command) from block `slba` without
    /// waiting. A `MemoryKind::Gpu` buffer is flushed (through the hook)
    /// before its ticket is reported finished.
    pub fn submit_read(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<Ticket, NvmeError> {
        if buf.kind == MemoryKind::Gpu && self.gpu_flush.is_none() {
            return Err(NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into()));
        }
        self.submit_io(Dir::Read, ns, slba, buf)
    }

    /// Submits a write of `buf` at block `slba` without waiting (one
    /// command, as [`Controller::submit_read`]).
    pub fn submit_write(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<Ticket, NvmeError> {
        self.submit_io(Dir::Write, ns, slba, buf)
    }

    fn submit_io(&mut self, dir: Dir, ns: &Namespace, slba: u64, buf: Buffer) -> Result<Ticket, NvmeError> {
        check_request(ns, slba, &buf)?;
        if buf.len > self.max_transfer {
            return Err(InvalidValue::new(
                "length",
                buf.len,
                "a submitted command moves at most max_transfer bytes (MDTS); read/write split larger ones",
            )
            .into());
        }
        let qi = self.ticket_queue()?;
        let cid = self.submit_one(qi, dir, ns, slba, buf.mr, buf.offset, buf.len / ns.lba_size())?;
        let name = if dir == Dir::Read { "Read" } else { "Write" };
        let gpu = (dir == Dir::Read && buf.kind == MemoryKind::Gpu).then_some(buf.mr.id);
        Ok(self.track(qi, cid, name, gpu))
    }

    /// Submits a Flush of `ns` without waiting.
    pub fn submit_flush(&mut self, ns: &Namespace) -> Result<Ticket, NvmeError> {
        let qi = self.ticket_queue()?;
        let cmd = NvmeCommand::Flush { nsid: ns.nsid() };
        let cid = self.io[qi].submit(&mut self.t, &cmd, None)?;
        Ok(self.track(qi, cid, cmd.name(), None))
    }

    /// The queue a submitted command goes to; every queue full is `QueueFull`.
    fn ticket_queue(&mut self) -> Result<usize, NvmeError> {
        let Some(first) = self.io.first() else { return Err(NvmeError::Unsupported("no I/O queue".into())) };
        let (qid, depth, outstanding) = (first.qid(), first.depth(), first.outstanding());
        self.pick_queue().ok_or(NvmeError::QueueFull { qid, depth, outstanding })
    }

    fn track(&mut self, qi: usize, cid: u16, name: &'static str, gpu: Option<MrId>) -> Ticket {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.pending.insert((qi, cid), Pending { ticket, name, gpu });
        ticket
    }

    /// Submitted commands not finished yet.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Commands the I/O queues can take now (free slots of live queues).
    pub fn free_slots(&self) -> usize {
        self.io
            .iter()
            .filter(|q| q.failure().is_none() && !q.is_closed())
            .map(|q| (q.capacity() - q.outstanding()) as usize)
            .sum()
    }

    /// Every ticket finished since the last call, with its result (an
    /// NVMe status is an error), in the order `service` saw them finish.
    pub fn take_finished(&mut self) -> Vec<(Ticket, Result<(), NvmeError>)> {
        std::mem::take(&mut self.finished)
    }

    /// The first failure of the admin queue or an I/O queue, if any: the
    /// controller needs [`Controller::reconnect`] to be whole again.
    pub fn failure(&self) -> Option<&NvmeError> {
        std::iter::once(&self.admin).chain(self.io.iter()).find_map(|q| q.failure())
    }

    /// Tears every queue down and brings the controller up again (admin
    /// queue, Fabrics Connect, enable, Identify, I/O queues) on the same PD
    /// and buffers: the recovery after a target crash and restart, a
    /// timed-out command or a dropped connection. The target assigns a new
    /// controller id. Tickets still in flight finish with `Disconnected`;
    /// namespaces and registered buffers stay valid. Blocks in transport
    /// time (bounded by the command timeout). On error the controller is
    /// left disconnected, and `reconnect` may be called again.
    pub fn reconnect(&mut self) -> Result<(), NvmeError> {
        if self.closed {
            return Err(NvmeError::Disconnected { qid: 0 });
        }
        for q in &mut self.io {
            q.close(&mut self.t);
        }
        self.admin.close(&mut self.t);
        self.collect_tickets();
        for (_, p) in std::mem::take(&mut self.pending) {
            self.finished.push((p.ticket, Err(NvmeError::Disconnected { qid: 0 })));
        }
        self.io.clear();
        self.next_keep_alive = None;
        self.keep_alive_cid = None;
        self.next_queue = 0;
        let (admin, cntlid) =
            connect_admin(&mut self.t, self.pd, self.scratch, &self.cfg, &self.cfg.subnqn, self.cfg.keep_alive)?;
        self.admin = admin;
        self.cntlid = cntlid;
        if let Err(e) = self.bring_up() {
            for q in &mut self.io {
                q.close(&mut self.t);
            }
            self.io.clear();
            self.admin.close(&mut self.t);
            self.next_keep_alive = None;
            return Err(e);
        }
        Ok(())
    }

    /// A queue with a free slot, round-robin.
    fn pick_queue(&mut self) -> Option<usize> {
        let n = self.io.len();
        for i in 0..n {
            let qi = (self.next_queue + i) % n;
            let q = &self.io[qi];
            if q.failure().is_none() && q.outstanding() < q.capacity() {
                self.next_queue = (qi + 1) % n;
                return Some(qi);
            }
        }
        // Every queue is full or failed: a failed one reports its error.
        self.io.iter().position(|q| q.failure().is_some())
    }

    /// Shuts down (CC.SHN when the admin queue still works) and releases
    /// every queue, buffer and the PD. Idempotent.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        for q in &mut self.io {
            q.close(&mut self.t);
        }
        if self.admin.failure().is_none() && !self.admin.is_closed() {
            let cc = cc_enable(self.cap) | CC_SHN_NORMAL;
            let _ = self.admin.execute(
                &mut self.t,
                &NvmeCommand::PropertySet { size: PropSize::Four, offset: REG_CC, value: cc as u64 },
            );
        }
        self.admin.close(&mut self.t);
        let _ = self.t.dereg_mr(self.scratch.id);
        let _ = self.t.dealloc_pd(self.pd);
    }

    /// Closes and hands the transport back.
    pub fn into_transport(mut self) -> T {
        self.close();
        self.t
    }
}

/// The caller's side of a transfer: whole blocks, inside the buffer and
/// the namespace.
fn check_request(ns: &Namespace, slba: u64, buf: &Buffer) -> Result<(), NvmeError> {
    let lba = ns.lba_size();
    if buf.len == 0 || buf.len % lba != 0 {
        return Err(InvalidValue::new("length", buf.len, "must be a non-zero multiple of the LBA size").into());
    }
    if buf.offset.checked_add(buf.len).is_none_or(|end| end > buf.mr.len) {
        return Err(InvalidValue::new(
            "offset+length",
            buf.offset.saturating_add(buf.len),
            "exceeds the registered buffer",
        )
        .into());
    }
    let blocks = buf.len / lba;
    if slba.checked_add(blocks).is_none_or(|end| end > ns.blocks()) {
        return Err(InvalidValue::new("slba+blocks", slba.saturating_add(blocks), "beyond the namespace's size").into());
    }
    Ok(())
}

/// Connects the admin queue and sends Fabrics Connect; returns the queue
/// and the controller id.
fn connect_admin<T: Transport>(
    t: &mut T,
    pd: PdId,
    scratch: MrInfo,
    cfg: &ControllerConfig,
    subnqn: &Nqn,
    kato: Duration,
) -> Result<(Queue, u16), NvmeError> {
    let qcfg = QueueConfig {
        addr: cfg.addr,
        qid: 0,
        depth: ADMIN_QUEUE_DEPTH,
        cntlid: 0,
        in_capsule: 0,
        timeout: cfg.timeout,
    };
    let mut q = Queue::connect(t, pd, &qcfg, &mut |_| {})?;
    let kato_ms = u32::try_from(kato.as_millis()).unwrap_or(u32::MAX);
    match fabrics_connect(t, &mut q, scratch, cfg, subnqn, CNTLID_DYNAMIC, kato_ms) {
        Ok(cntlid) => Ok((q, cntlid)),
        Err(e) => {
            q.close(t);
            Err(e)
        }
    }
}

/// Fabrics Connect on `q`; returns the controller id.
fn fabrics_connect<T: Transport>(
    t: &mut T,
    q: &mut Queue,
    scratch: MrInfo,
    cfg: &ControllerConfig,
    subnqn: &Nqn,
    cntlid: u16,
    kato_ms: u32,
) -> Result<u16, NvmeError> {
    let data = ConnectData { host_id: cfg.host_id, cntlid, subnqn: subnqn.clone(), hostnqn: cfg.hostnqn.clone() };
    // Connect data lives past the Identify area of the scratch region.
    let at = SCRATCH_LEN - CONNECT_DATA_LEN as u64;
    t.mr_write(scratch.id, at, &data.encode())?;
    let sgl = Sgl::for_region(&scratch, at, CONNECT_DATA_LEN as u64).map_err(NvmeError::Build)?;
    let cmd = NvmeCommand::connect(q.qid(), q.depth(), kato_ms, sgl).map_err(NvmeError::Build)?;
    let c = match q.execute(t, &cmd) {
        Ok(c) => c,
        Err(NvmeError::Status { error, .. })
            if error.sct() == SCT_COMMAND_SPECIFIC && error.sc() == SC_CONNECT_INVALID_PARAMETERS =>
        {
            return Err(NvmeError::ConnectInvalid {
                parameter: InvalidParameter::from_dw0(error.result as u32),
                error,
            });
        }
        Err(NvmeError::Status { error, .. })
            if error.sct() == SCT_COMMAND_SPECIFIC && error.sc() == SC_AUTH_REQUIRED =>
        {
            return Err(NvmeError::AuthRequired);
        }
        Err(e) => return Err(e),
    };
    let r = ConnectResult::from_dw0(c.dw0());
    if r.auth_required {
        return Err(NvmeError::AuthRequired);
    }
    if q.qid() != 0 && r.cntlid != cntlid {
        return Err(NvmeError::Protocol(ProtocolError::field(
            "ConnectResponse",
            "cntlid",
            r.cntlid.into(),
            "an I/O queue's connect must return the admin queue's controller id",
        )));
    }
    Ok(r.cntlid)
}

/// Reads CAP, enables the controller and polls CSTS.RDY every `poll` (10 ms,
/// less with a short KATO) up to max(0.5 s, (CAP.TO + 1) x 0.5 s); CSTS.CFS
/// is fatal.
fn enable<T: Transport>(t: &mut T, q: &mut Queue, poll: Duration) -> Result<Cap, NvmeError> {
    let cap = Cap(q.execute(t, &NvmeCommand::PropertyGet { size: PropSize::Eight, offset: REG_CAP })?.result);
    q.execute(t, &NvmeCommand::PropertySet { size: PropSize::Four, offset: REG_CC, value: cc_enable(cap) as u64 })?;
    let limit = ready_timeout(cap);
    let start = t.now();
    loop {
        let csts = q.execute(t, &NvmeCommand::PropertyGet { size: PropSize::Four, offset: REG_CSTS })?.dw0();
        if csts & CSTS_FATAL != 0 {
            return Err(NvmeError::ControllerFatal);
        }
        if csts & CSTS_READY != 0 {
            return Ok(cap);
        }
        let waited = t.now() - start;
        if waited >= limit {
            return Err(NvmeError::NotReady { waited });
        }
        q.wait(t, t.now() + poll)?;
    }
}

/// Connects to the discovery controller at `addr` and reads its log page
/// (as `nvme discover` does).
pub fn discover<T: Transport>(
    t: &mut T,
    addr: SocketAddrV4,
    host_id: [u8; 16],
    timeout: Duration,
) -> Result<DiscoveryLog, NvmeError> {
    let subnqn = Nqn::new(DISCOVERY_NQN).map_err(NvmeError::Build)?;
    let mut cfg = ControllerConfig::new(addr, subnqn.clone(), host_id);
    cfg.timeout = timeout;
    let pd = t.alloc_pd()?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let scratch = match t.reg_mr(pd, SCRATCH_LEN, access) {
        Ok(m) => m,
        Err(e) => {
            let _ = t.dealloc_pd(pd);
            return Err(e.into());
        }
    };
    let r = connect_admin(t, pd, scratch, &cfg, &subnqn, Duration::ZERO).and_then(|(mut q, _)| {
        let r = discovery_log(t, &mut q, scratch);
        q.close(t);
        r
    });
    let _ = t.dereg_mr(scratch.id);
    let _ = t.dealloc_pd(pd);
    r
}

fn discovery_log<T: Transport>(t: &mut T, q: &mut Queue, scratch: MrInfo) -> Result<DiscoveryLog, NvmeError> {
    enable(t, q, Duration::from_millis(10))?;
    let read = |t: &mut T, q: &mut Queue, len: u64| -> Result<Vec<u8>, NvmeError> {
        let sgl = Sgl::for_region(&scratch, 0, len).map_err(NvmeError::Build)?;
        let cmd = NvmeCommand::get_log_page(LID_DISCOVERY, len as u32, 0, sgl).map_err(NvmeError::Build)?;
        q.execute(t, &cmd)?;
        let mut b = vec![0u8; len as usize];
        t.mr_read(scratch.id, 0, &mut b)?;
        Ok(b)
    };
    let header = DiscoveryLogHeader::decode(&read(t, q, DISCOVERY_HEADER_LEN as u64)?).map_err(NvmeError::Protocol)?;
    let max = (SCRATCH_LEN - CONNECT_DATA_LEN as u64 - DISCOVERY_HEADER_LEN as u64) / DISCOVERY_ENTRY_LEN as u64;
    if header.numrec > max {
        return Err(NvmeError::Unsupported(format!("{} discovery records (at most {max})", header.numrec)));
    }
    let page = read(t, q, DiscoveryLog::len_for(header.numrec))?;
    DiscoveryLog::decode(&page).map_err(NvmeError::Protocol)
}
