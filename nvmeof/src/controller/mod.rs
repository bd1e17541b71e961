//! A connected NVMe-oF controller: the admin queue, bring-up exactly as
//! docs/protocols.md §2.7 orders it, I/O queues, namespaces, and data transfer on
//! registered memory (split by MDTS, up to the queues' depth in flight),
//! keep-alive, and the discovery client.
//!
//! Contract, in call order:
//! 1. [`Controller::start`] (non-blocking) or [`Controller::connect`]
//!    (blocking). `start` hands back a controller in
//!    [`ControllerState::AdminConnecting`]; [`Controller::service`] moves
//!    it through the bring-up states (`bringup`) to `Ready` without ever
//!    blocking; a driver loop waits on [`Controller::wait_set`] (the live
//!    CQs and the next deadline: a command, a CM connect, the next CSTS
//!    read or Keep Alive) between calls. `connect` is exactly that loop.
//! 2. Ready: [`Controller::namespace`], the blocking `read` / `write` /
//!    `flush` / `read_many`, or tickets (`submit_read` / `submit_write` /
//!    `submit_flush`, then `service` and `take_finished`; module `io`).
//!    Calling these before `Ready` is an `Invalid` error.
//! 3. After a failure, [`Controller::reconnect`] (blocking) or
//!    [`Controller::start_reconnect`] (then `service` as after `start`).
//! 4. [`Controller::close`]: CC.SHN when the admin queue works, then every
//!    resource released. Idempotent.
//!
//! What blocks (always in the transport's time, so a simulated 30 s costs
//! nothing): `connect`, `reconnect`, `close`, `namespace`,
//! `active_namespaces`, `read` / `write` / `flush` / `read_many`,
//! `idle_until` and [`discover`]; each is a thin loop of `service` and the
//! transport's wait. `start`, `start_reconnect`, `service`, `submit_*` and
//! `take_finished` never block.
//!
//! Errors ([`NvmeError`]): `Rejected` / `Unreachable` (RDMA CM), `Timeout`
//! (a CM connect or a command past the configured timeout), `NotReady`
//! (CSTS.RDY not within CAP.TO), `ControllerFatal` (CSTS.CFS),
//! `ConnectInvalid` / `AuthRequired` (Fabrics Connect refused), `Status`
//! (another command's NVMe status), `Disconnected`, `Completion`,
//! `Protocol` / `UnknownCid` (the target broke the protocol), `Unsupported`
//! (the target lacks something this initiator needs), `Invalid` (bad
//! arguments, or a call in the wrong state), `QueueFull`, `Transport` (a
//! local verb). A failed bring-up leaves the controller
//! [`ControllerState::Failed`]; a failure once ready is reported by
//! `service` (admin queue) or by the tickets it fails (I/O queues), and
//! [`Controller::failure`] keeps it until `reconnect`.
//!
//! Several controllers (and the target model, in tests) can be driven from
//! one loop: each owns its transport, and a transport's CM events must
//! reach the controller whose connection they name, so two controllers
//! share a node only if the caller routes events (each simulator node
//! keeps its own event queue).

mod bringup;
mod discovery;
mod io;

use std::net::SocketAddrV4;

use super::error::{ConnectError, NvmeError};
use super::protocol::Completion;
use super::protocol::*;
use super::queue::{Queue, QueueConfig};
use crate::time::{Duration, Instant};
use crate::transport::*;
use bringup::{AdminPhase, Phase, finished};

pub use bringup::ControllerState;
pub use discovery::{Discovery, discover};

/// How to connect to a controller.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ControllerConfig {
    /// The target's NVMe/RDMA listener (normally port 4420,
    /// [`NVME_RDMA_PORT`]); every queue connects there.
    pub addr: SocketAddrV4,
    /// NQN of the subsystem to attach to, sent in each queue's Connect data.
    pub subnqn: Nqn,
    /// The host identifier (a 16-byte UUID) sent in each queue's Connect
    /// data.
    pub host_id: [u8; 16],
    /// This host's NQN, sent in each queue's Connect data;
    /// [`ControllerConfig::new`] derives it from `host_id`
    /// (`nqn.2014-08.org.nvmexpress:uuid:<uuid>`).
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
    /// What Identify Namespace returned: sizes in blocks and the LBA
    /// formats.
    pub info: NamespaceInfo,
}

impl Namespace {
    /// The namespace id (1..=0xFFFFFFFE).
    pub fn nsid(&self) -> u32 {
        self.info.nsid
    }
    /// Bytes per logical block of the format in use (512 to 65536); every
    /// transfer is a whole number of these.
    pub fn lba_size(&self) -> u64 {
        self.info.lba_size()
    }
    /// Size of the namespace in logical blocks (NSZE); I/O must end at or
    /// before this block.
    pub fn blocks(&self) -> u64 {
        self.info.nsze
    }
}

/// The kind of memory a transfer lands in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Ordinary host memory: read data is usable as soon as the command
    /// completes.
    Host,
    /// Device memory written by GPUDirect RDMA: the writes must be flushed
    /// (made visible to the device) before the data is used. The initiator
    /// calls the given hook after a read completes.
    Gpu,
}

/// Registered memory to transfer from or to: `len` bytes at `offset` of `mr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// The registered region: in the controller's PD ([`Controller::pd`]),
    /// allowing remote write for reads and remote read for writes.
    pub mr: MrInfo,
    /// Byte offset of the transfer's start inside `mr`.
    pub offset: u64,
    /// Bytes to transfer: a non-zero multiple of the namespace's block
    /// size, with `offset + len` within `mr` (else an `Invalid` error).
    pub len: u64,
    /// Host or GPU memory (whether a read needs the GPU flush hook).
    pub kind: MemoryKind,
}

impl Buffer {
    /// The whole of `mr`, as host memory.
    pub fn host(mr: MrInfo) -> Self {
        Buffer { mr, offset: 0, len: mr.len, kind: MemoryKind::Host }
    }
    /// `len` bytes at byte `offset` of `mr`, as host memory (checked only
    /// when used for I/O).
    pub fn slice(mr: MrInfo, offset: u64, len: u64) -> Self {
        Buffer { mr, offset, len, kind: MemoryKind::Host }
    }
}

/// Makes GPUDirect writes visible before read data is handed over (on real
/// hardware: a flush of the GPU's PCIe write path; in the simulator: the
/// GPU memory model's flush).
pub trait GpuFlush {
    /// Makes the GPUDirect writes that landed in `mr` visible to the GPU.
    /// Called after a read into a [`MemoryKind::Gpu`] buffer completed; an
    /// error becomes that read's (or ticket's) error.
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

/// A controller over transport `T`: bringing up, up, or failed (see
/// [`Controller::state`]).
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
    /// The bring-up step, `Ready`, or the end.
    phase: Phase,
    /// Why the last bring-up failed.
    down: Option<NvmeError>,
    gpu_flush: Option<Box<dyn GpuFlushDebug>>,
    /// Tickets in flight, by (I/O queue index, command id).
    pending: std::collections::BTreeMap<(usize, u16), Pending>,
    finished: Vec<(Ticket, Result<(), NvmeError>)>,
    next_ticket: u64,
    /// How the blocking calls wait for completions.
    poller: Poller,
    /// The CQs to wait on, reused (no allocation per wait).
    wait_cqs: Vec<CqId>,
    /// Turns of the ready wait loop since the clock was last read.
    unclocked_turns: u32,
}

/// Once ready, the initiator's wait loop reads the clock (command
/// deadlines, CM events, keep-alive) once in this many turns, before every
/// sleep, and after a sleep that timed out.
const CLOCK_EVERY: u32 = 256;

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
    /// Where the controller is: a bring-up step, `Ready`, `Failed` or `Closed`.
    pub fn state(&self) -> ControllerState {
        self.phase.state()
    }

    /// `Ok` when the controller may take commands: ready, or failed or
    /// closed (the queues then give their own errors, as before bring-up
    /// was polled); a bring-up or shutdown in progress is `Invalid`.
    fn check_ready(&self) -> Result<(), NvmeError> {
        match self.phase {
            Phase::Ready | Phase::Failed | Phase::Closed => Ok(()),
            _ => Err(InvalidValue::new(
                "controller state",
                0,
                "commands need a ready controller: call service() until state() is Ready",
            )
            .into()),
        }
    }

    /// Runs an admin command, keeping keep-alive going meanwhile.
    fn admin_execute(&mut self, cmd: &NvmeCommand) -> Result<Completion, NvmeError> {
        self.check_ready()?;
        self.keep_alive_tick()?;
        let cid = self.admin.submit(&mut self.t, cmd, None)?;
        loop {
            self.pump(Instant::FAR_FUTURE)?;
            if let Some(r) = finished(&mut self.admin, cid, cmd.name()) {
                return r;
            }
        }
    }

    /// The completion queues worth waiting on and the time the controller
    /// next needs [`Controller::service`] without any completion: the
    /// earliest command deadline, CM connect deadline, CSTS read or
    /// keep-alive due. A driver loop waits on these
    /// (`transport.wait(&cqs, until)`), then calls `service`.
    pub fn wait_set(&self) -> (Vec<CqId>, Instant) {
        let mut cqs = Vec::new();
        let until = self.fill_wait_set(&mut cqs, true);
        (cqs, until)
    }

    /// [`Controller::wait_set`] into `cqs` (cleared first). With `clock`
    /// false the clock is not read: commands without a deadline yet do not
    /// count, and the caller stamps them before it sleeps.
    fn fill_wait_set(&self, cqs: &mut Vec<CqId>, clock: bool) -> Instant {
        // Only live queues: a failed one has nothing left to wait for.
        let live =
            || std::iter::once(&self.admin).chain(self.io.iter()).filter(|q| q.failure().is_none() && !q.is_closed());
        cqs.clear();
        cqs.extend(live().map(|q| q.cq()));
        let mut until = Instant::FAR_FUTURE;
        for q in live() {
            if let Some(d) = q.next_deadline() {
                until = until.min(d);
            }
        }
        if clock && live().any(|q| q.has_unstamped()) {
            // A lazy deadline counts from a clock read still to come: wake
            // by the earliest it can be (the next `service` stamps it).
            until = until.min(self.t.now() + self.cfg.timeout);
        }
        if matches!(self.phase, Phase::Ready) {
            // While a Keep Alive is outstanding its deadline counts, not the
            // next one's due time (already past: nothing to send until it answers).
            if let (Some(k), None) = (self.next_keep_alive, self.keep_alive_cid) {
                until = until.min(k);
            }
        } else {
            until = until.min(self.bring_up_due());
        }
        until
    }

    /// When the bring-up next needs `service` without a completion: a CM
    /// connect's deadline or the next CSTS read.
    #[cold]
    fn bring_up_due(&self) -> Instant {
        let at = match self.phase {
            Phase::Admin(a) => a.poll_at().or(self.admin.connect_deadline()),
            Phase::Io { .. } => self.io.last().and_then(|q| q.connect_deadline()),
            _ => None,
        };
        at.unwrap_or(Instant::FAR_FUTURE)
    }

    /// Waits for anything (completions, CM events, a keep-alive due, a
    /// deadline) once, then processes it.
    ///
    /// Once ready, every mode first polls the CQs without reading the clock
    /// or the CM channel; only an empty poll idles per the mode (event
    /// mode sleeps at once). The clock is read once before a sleep (it
    /// stamps the lazy deadlines and bounds the sleep), and every
    /// `CLOCK_EVERY` turns that found work (deadlines, CM events, Keep
    /// Alive), not per command.
    fn pump(&mut self, deadline: Instant) -> Result<(), NvmeError> {
        if !matches!(self.phase, Phase::Ready) {
            return self.pump_not_ready(deadline);
        }
        self.unclocked_turns += 1;
        let clocked = self.unclocked_turns >= CLOCK_EVERY;
        if self.service_ready(clocked.then(|| self.t.now()))? > 0 {
            self.poller.progress();
            return Ok(());
        }
        // No clock read per empty turn: busy never sleeps, so needs no wait
        // set; adaptive and event stamp the new commands' deadlines in the
        // closure, only when about to sleep.
        let mut cqs = std::mem::take(&mut self.wait_cqs);
        let until = match self.poller.mode() {
            PollMode::Busy => Instant::FAR_FUTURE,
            _ => self.fill_wait_set(&mut cqs, false),
        };
        let (admin, io) = (&mut self.admin, &mut self.io);
        let mut before_sleep = None;
        let idle = self.poller.idle(&mut self.t, &cqs, |t| {
            // About to sleep: commands submitted since the last clock read
            // get their deadlines now, and the sleep ends by the earliest.
            let now = t.now();
            before_sleep = Some(now);
            let mut until = until.min(deadline);
            for q in std::iter::once(&mut *admin).chain(io.iter_mut()) {
                q.stamp_deadlines(now);
                if let Some(d) = q.next_deadline() {
                    until = until.min(d);
                }
            }
            until
        });
        self.wait_cqs = cqs;
        match idle? {
            Idle::Spun => Ok(()),
            // Woken before the deadline: the reading made before the sleep
            // serves the deadline check (every deadline was at or after the
            // sleep's end, so none can be missed for good: the next sleep
            // reads the clock again), and no clock read is spent per wake.
            Idle::Slept(Readiness::Ready) => {
                let now = before_sleep.unwrap_or_else(|| self.t.now());
                self.service_ready(Some(now)).map(|_| ())
            }
            Idle::Slept(Readiness::TimedOut) => {
                let now = self.t.now();
                self.service_ready(Some(now)).map(|_| ())
            }
        }
    }

    /// [`Controller::pump`] during bring-up and shutdown: the wait set
    /// (lazy deadlines stamped first, so a timeout counts from now, not
    /// from the end of this wait), one wait, then `service`.
    #[cold]
    fn pump_not_ready(&mut self, deadline: Instant) -> Result<(), NvmeError> {
        if std::iter::once(&self.admin).chain(self.io.iter()).any(|q| q.has_unstamped()) {
            let now = self.t.now();
            for q in std::iter::once(&mut self.admin).chain(self.io.iter_mut()) {
                q.stamp_deadlines(now);
            }
        }
        let mut cqs = std::mem::take(&mut self.wait_cqs);
        let until = self.fill_wait_set(&mut cqs, false);
        let r = self.t.wait(&cqs, until.min(deadline));
        self.wait_cqs = cqs;
        r?;
        self.service()
    }

    /// Sets how the blocking calls (`read_many`, `read`, `write`, admin
    /// commands) wait for completions: [`PollMode::Event`] (the default:
    /// arm the CQs and sleep on their channels whenever nothing is ready),
    /// [`PollMode::Busy`] (poll without sleeping) or
    /// [`PollMode::Adaptive`] (poll, sleep after `spin` empty polls). In
    /// every mode the blocking calls read the clock only every few hundred
    /// turns and before a sleep, never per command: I/O command deadlines
    /// count from the first clock read after the submission (lazy
    /// deadlines; in event mode that is at the latest the read before the
    /// next sleep), CM events are taken at those reads, and a Keep Alive
    /// goes out at them. Busy and adaptive stamp admin commands lazily
    /// too; event mode stamps them, and submitted tickets, at submission,
    /// for loops that drive [`Controller::wait_set`] themselves.
    pub fn set_poll_mode(&mut self, mode: PollMode) {
        self.poller = Poller::new(mode);
        self.admin.set_lazy_deadlines(mode != PollMode::Event);
        for q in &mut self.io {
            q.set_lazy_deadlines(true);
        }
    }

    /// How the blocking calls wait (see [`Controller::set_poll_mode`]).
    pub fn poll_mode(&self) -> PollMode {
        self.poller.mode()
    }

    /// `service` once ready, for [`Controller::pump`]: with `now` `None`
    /// no clock is read and no CM event taken; with a reading, deadlines,
    /// CM events and Keep Alive are handled against it (one reading for
    /// every queue). Returns the completions taken.
    fn service_ready(&mut self, now: Option<Instant>) -> Result<usize, NvmeError> {
        let Some(now) = now else {
            let mut n = self.admin.poll_clocked(&mut self.t, false)?;
            for q in &mut self.io {
                n += q.poll_clocked(&mut self.t, false)?;
            }
            self.collect_tickets();
            return match self.admin.failure() {
                Some(e) => Err(e.clone()),
                None => Ok(n),
            };
        };
        self.unclocked_turns = 0;
        while let Some(ev) = self.t.cm_poll() {
            self.admin.handle_cm(&mut self.t, &ev);
            for q in &mut self.io {
                q.handle_cm(&mut self.t, &ev);
            }
        }
        let mut n = self.admin.poll_at(&mut self.t, now)?;
        for q in &mut self.io {
            n += q.poll_at(&mut self.t, now)?;
        }
        self.collect_tickets();
        self.keep_alive_at(Some(now))?;
        match self.admin.failure() {
            Some(e) => Err(e.clone()),
            None if self.admin.is_closed() => Err(NvmeError::Disconnected { qid: 0 }),
            None => Ok(n),
        }
    }

    /// CM events (to the queue they name) and completions of every queue.
    /// Inlined: it is the ready path of [`Controller::service`].
    #[inline]
    fn poll_queues(&mut self) -> Result<(), NvmeError> {
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
        Ok(())
    }

    /// Does everything that is due without blocking: CM events (a CM
    /// answer connects or fails its queue, a disconnect fails it),
    /// completions, command deadlines, the next bring-up step (see
    /// [`ControllerState`]), finished tickets, and a Keep Alive when one
    /// is due (on the transport's clock, whether or not the application is
    /// calling anything else). An application that sits idle with a
    /// keep-alive timeout set must call this by [`Controller::wait_set`]'s
    /// time.
    ///
    /// Errors: during bring-up, the step's failure (the controller is then
    /// `Failed`, and each later call repeats it); once ready, the admin
    /// queue failed (a Keep Alive or admin command timed out, the target
    /// disconnected) or a Keep Alive was refused; the controller is then
    /// unusable until [`Controller::reconnect`]. I/O queue failures are
    /// reported through the tickets they fail. A closed controller is
    /// `Disconnected`.
    pub fn service(&mut self) -> Result<(), NvmeError> {
        if !matches!(self.phase, Phase::Ready) {
            return self.service_not_ready();
        }
        self.poll_queues()?;
        self.collect_tickets();
        self.keep_alive_tick()?;
        match self.admin.failure() {
            Some(e) => Err(e.clone()),
            None if self.admin.is_closed() => Err(NvmeError::Disconnected { qid: 0 }),
            None => Ok(()),
        }
    }

    /// `service` before `Ready` or after the end: the next bring-up step.
    #[cold]
    #[inline(never)]
    fn service_not_ready(&mut self) -> Result<(), NvmeError> {
        if let Phase::ShuttingDown { cid } = self.phase {
            self.service_shutdown(cid);
            return Ok(());
        }
        self.poll_queues()?;
        match self.phase {
            Phase::Ready | Phase::ShuttingDown { .. } => Ok(()),
            Phase::Failed => Err(self.down.clone().unwrap_or(NvmeError::Disconnected { qid: 0 })),
            Phase::Closed => Err(NvmeError::Disconnected { qid: 0 }),
            _ => self.advance().inspect_err(|e| {
                self.phase = Phase::Failed;
                self.down = Some(e.clone());
            }),
        }
    }

    /// Sends a Keep Alive when one is due (and checks the last one's answer).
    pub fn keep_alive_tick(&mut self) -> Result<(), NvmeError> {
        self.keep_alive_at(None)
    }

    /// [`Controller::keep_alive_tick`] with a clock reading already made
    /// (`None`: read the clock if a Keep Alive is scheduled).
    fn keep_alive_at(&mut self, now: Option<Instant>) -> Result<(), NvmeError> {
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
        let now = now.unwrap_or_else(|| self.t.now());
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

    /// The controller's Identify Controller data (serial, model, MDTS,
    /// MAXCMD, SGL support, capsule sizes); all zeros until the bring-up
    /// has passed [`ControllerState::Identify`].
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    /// The CAP register (MQES, TO, CSS, MPSMIN) as read during bring-up;
    /// zero before [`ControllerState::ReadCap`] answered.
    pub fn cap(&self) -> Cap {
        self.cap
    }
    /// The controller id Fabrics Connect on the admin queue returned (0
    /// before the first answer); a reconnect may change it.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }
    /// Largest transfer of one command (MDTS and the keyed SGL limit).
    pub fn max_transfer(&self) -> u64 {
        self.max_transfer
    }
    /// The I/O queues made so far, in qid order (index 0 is qid 1); a
    /// reconnect replaces them.
    pub fn io_queues(&self) -> &[Queue] {
        &self.io
    }
    /// The protection domain of every queue: memory for I/O must be
    /// registered in it (as [`Controller::alloc`] does).
    pub fn pd(&self) -> PdId {
        self.pd
    }
    /// The transport the controller drives.
    pub fn transport(&self) -> &T {
        &self.t
    }
    /// The transport, e.g. to fill or read registered buffers. CM events
    /// and completions of the controller's queues polled here are lost to
    /// the controller.
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

    /// Deregisters a region from [`Controller::alloc`]; `Transport` when the
    /// verb fails. Free a buffer only once no command using it is in
    /// flight.
    pub fn free(&mut self, mr: MrInfo) -> Result<(), NvmeError> {
        Ok(self.t.dereg_mr(mr.id)?)
    }

    /// The first failure of the last bring-up, the admin queue or an I/O
    /// queue, if any: the controller needs [`Controller::reconnect`] to be
    /// whole again.
    pub fn failure(&self) -> Option<&NvmeError> {
        self.down.as_ref().or_else(|| std::iter::once(&self.admin).chain(self.io.iter()).find_map(|q| q.failure()))
    }

    /// Starts the shutdown without blocking: closes the I/O queues and,
    /// when the admin queue still works, sends CC.SHN (state
    /// `ShuttingDown`); [`Controller::service`] then ends it when the
    /// answer comes, the admin queue fails or the command's deadline
    /// passes. With no working admin queue it ends at once. At the end the
    /// state is `Closed` and every queue, buffer and the PD are released.
    /// Idempotent.
    pub fn start_close(&mut self) {
        if matches!(self.phase, Phase::Closed | Phase::ShuttingDown { .. }) {
            return;
        }
        for q in &mut self.io {
            q.close(&mut self.t);
        }
        if self.admin.failure().is_none() && !self.admin.is_closed() && !self.admin.is_connecting() {
            let cc = cc_enable(self.cap) | CC_SHN_NORMAL;
            let cmd = NvmeCommand::PropertySet { size: PropSize::Four, offset: REG_CC, value: cc as u64 };
            if let Ok(cid) = self.admin.submit(&mut self.t, &cmd, None) {
                self.phase = Phase::ShuttingDown { cid };
                return;
            }
        }
        self.finish_close();
    }

    /// The shutdown's `service` step: ends it once CC.SHN is answered (or
    /// the admin queue failed, or the command timed out). Either is fine:
    /// the controller is going away.
    fn service_shutdown(&mut self, cid: u16) {
        let over = self.poll_queues().is_err()
            || self.admin.take(cid).is_some()
            || self.admin.failure().is_some()
            || self.admin.is_closed();
        if over {
            self.finish_close();
        }
    }

    /// Releases the admin queue, the scratch buffer and the PD.
    fn finish_close(&mut self) {
        self.phase = Phase::Closed;
        self.admin.close(&mut self.t);
        let _ = self.t.dereg_mr(self.scratch.id);
        let _ = self.t.dealloc_pd(self.pd);
    }

    /// Shuts down and releases everything, blocking: [`Controller::start_close`],
    /// then [`Controller::service`] until `Closed` (at most the command
    /// timeout). Idempotent.
    pub fn close(&mut self) {
        self.start_close();
        while matches!(self.phase, Phase::ShuttingDown { .. }) {
            let (cqs, until) = self.wait_set();
            if self.t.wait(&cqs, until).is_err() {
                self.finish_close();
                break;
            }
            let _ = self.service();
        }
    }

    /// Closes and hands the transport back.
    pub fn into_transport(mut self) -> T {
        self.close();
        self.t
    }
}
