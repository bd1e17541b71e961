//! An `op = "nvme"` stream: the NVMe-oF initiator (`rctb_core::nvmeof`) on
//! one node runs `count` reads, writes and flushes against the target model
//! (`rctb_models::nvme`, an actor) on another, with the target's
//! faults applied at their virtual times.
//!
//! Commands go through the controller's non-blocking tickets and
//! `service` (which also sends Keep Alives), so the runner keeps stepping
//! every stream; only connect and reconnect block, for their round trips.
//! The stream keeps a model of the namespace (`model.rs`): every read is
//! compared with what the writes, flushes and crashes before it leave
//! there. A write whose outcome is unknown (its response lost) makes its
//! blocks unknown until written again; a crash puts every block written
//! since the last successful flush back to its flushed value, as the
//! target does.
//! Overlapping commands are never in flight together and a flush waits for
//! the queues to drain, so the model is exact.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::rc::Rc;

use rctb_core::Transport;
use rctb_core::nvmeof::protocol::{NVME_RDMA_PORT, Nqn};
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig, Namespace, NvmeError, Ticket};
use rctb_core::time::Instant;
use rctb_core::transport::MrInfo;
use rctb_models::nvme::{NamespaceConfig, NvmeTarget, SubsystemConfig, TargetConfig};
use rctb_sim::{ActorId, NodeId, Sim, SimTransport};

use crate::pattern::StreamPattern;
use crate::scenario::{NvmeFaultAction, NvmeSpec};
use crate::traffic::{Progress, StreamConfig, StreamStats};

mod model;

use model::Model;

/// The subsystem every nvme stream's target serves.
pub const NQN: &str = "nqn.2026-01.io.rctb:scenario";

/// The kind `expect.errors` counts an error as.
pub fn error_kind(e: &NvmeError) -> &'static str {
    match e {
        NvmeError::Timeout { .. } => "timeout",
        NvmeError::Disconnected { .. } => "disconnected",
        NvmeError::Completion { .. } => "completion",
        NvmeError::Status { .. } | NvmeError::ConnectInvalid { .. } => "status",
        NvmeError::Rejected { .. } => "rejected",
        NvmeError::Unreachable { .. } => "unreachable",
        NvmeError::Protocol(_) | NvmeError::UnknownCid { .. } => "protocol",
        NvmeError::QueueFull { .. } => "queue_full",
        NvmeError::AuthRequired
        | NvmeError::ControllerFatal
        | NvmeError::NotReady { .. }
        | NvmeError::Unsupported(_) => "controller",
        NvmeError::Transport(_) | NvmeError::Invalid(_) | NvmeError::Build(_) => "local",
        // An error a later initiator adds counts as local until it gets a
        // kind of its own here.
        _ => "local",
    }
}

/// What the stream counted beyond [`StreamStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmeTally {
    /// Reads that completed successfully (those in flight across a target
    /// crash included, their data then unchecked).
    pub reads: u64,
    /// Writes that completed successfully.
    pub writes: u64,
    /// Flushes that completed successfully.
    pub flushes: u64,
    /// Failed commands by kind.
    pub errors: BTreeMap<&'static str, u64>,
    /// The first failure, for the report.
    pub first_error: Option<String>,
    /// Reconnects that brought a failed controller back.
    pub reconnects: u64,
    /// Reconnect attempts that failed, each attempt counted.
    pub reconnect_failures: u64,
    /// Blocks a read could not check (their last write's outcome unknown).
    pub unchecked_blocks: u64,
    /// Keep Alive commands the target received; read from the target when
    /// the stream ends ([`NvmeStream::abort`]), 0 before.
    pub keep_alives: u64,
    /// Target crashes the stream's fault schedule applied.
    pub crashes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Flush,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    kind: Kind,
    index: u64,
    slba: u64,
    blocks: u64,
    slot: usize,
    /// Target crashes before the command was submitted.
    epoch: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    NotStarted,
    Running,
    /// Connection lost; reconnect (when allowed) from this time.
    Down {
        retry_at: Instant,
        attempts: u32,
    },
    Finished,
}

/// The nvme workload as a scenario stream.
#[derive(Debug)]
pub struct NvmeStream {
    cfg: StreamConfig,
    spec: NvmeSpec,
    sim: Sim,
    host: Option<SimTransport>,
    ctrl: Option<Controller<SimTransport>>,
    target: Rc<RefCell<NvmeTarget>>,
    target_node: NodeId,
    actor: Option<ActorId>,
    addr: SocketAddrV4,
    pattern: StreamPattern,
    ns: Option<Namespace>,
    buf: Option<MrInfo>,
    slot_len: u64,
    free: Vec<usize>,
    inflight: BTreeMap<Ticket, InFlight>,
    model: Model,
    next: u64,
    faults_done: usize,
    epoch: u64,
    /// A controller failure `service` reported, counted once.
    service_failed: bool,
    state: State,
    stats: StreamStats,
    tally: NvmeTally,
}

impl NvmeStream {
    /// The target model on `target_node` (an actor), the initiator on
    /// `host_node`, connecting at `cfg.start`.
    pub fn new(
        sim: &Sim,
        cfg: StreamConfig,
        spec: NvmeSpec,
        seed: u64,
        host_node: NodeId,
        target_node: NodeId,
    ) -> Result<Self, String> {
        let host = sim.transport(host_node);
        let ip = sim.transport(target_node).ip();
        let mut tc = TargetConfig::new(NQN);
        tc.subsystems = vec![SubsystemConfig {
            nqn: NQN.into(),
            namespaces: vec![NamespaceConfig { nsid: 1, lba_size: spec.lba_size, blocks: spec.blocks }],
        }];
        tc.mdts = spec.mdts;
        tc.ioccsz = 4 + spec.in_capsule / 16;
        tc.ready_delay = spec.ready_delay;
        tc.max_io_queues = spec.io_queues;
        let mut target = NvmeTarget::new(tc, ip).map_err(|e| e.to_string())?;
        target.faults_mut().response_delay = spec.response_delay;
        let target = Rc::new(RefCell::new(target));
        let shared = target.clone();
        let actor = sim.add_actor(target_node, Box::new(move |t: &mut SimTransport| shared.borrow_mut().run(t)));
        let model = Model::new(spec.lba_size as usize, spec.blocks);
        Ok(NvmeStream {
            pattern: StreamPattern::new(seed, &cfg.name),
            slot_len: cfg.max_size as u64,
            cfg,
            spec,
            sim: sim.clone(),
            host: Some(host),
            ctrl: None,
            target,
            target_node,
            actor: Some(actor),
            addr: SocketAddrV4::new(ip, NVME_RDMA_PORT),
            ns: None,
            buf: None,
            free: Vec::new(),
            inflight: BTreeMap::new(),
            model,
            next: 0,
            faults_done: 0,
            epoch: 0,
            service_failed: false,
            state: State::NotStarted,
            stats: StreamStats::default(),
            tally: NvmeTally::default(),
        })
    }

    /// The stream's counters: `posted` commands submitted, `completed` and
    /// `bytes` of the successful ones, `mismatches` reads that differ from
    /// the namespace model.
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }
    /// The NVMe-specific counters: commands by kind, failures by kind,
    /// reconnects, crashes, Keep Alives.
    pub fn tally(&self) -> &NvmeTally {
        &self.tally
    }
    /// The stream's `[streams.nvme]` settings as validated.
    pub fn spec(&self) -> &NvmeSpec {
        &self.spec
    }
    /// Whether the stream is over: every command done, or given up (no
    /// connection, a failed controller it may not or could not reconnect),
    /// or aborted.
    pub fn is_done(&self) -> bool {
        self.state == State::Finished
    }

    fn start_at(&self) -> Instant {
        Instant::ZERO + self.cfg.start
    }

    /// Applies the target faults that are due; returns the next one's time.
    fn apply_faults(&mut self, now: Instant) -> Option<Instant> {
        while let Some(f) = self.spec.faults.get(self.faults_done) {
            let at = Instant::ZERO + f.at;
            if at > now {
                return Some(at);
            }
            self.faults_done += 1;
            let mut t = self.sim.transport(self.target_node);
            let mut target = self.target.borrow_mut();
            match f.action {
                NvmeFaultAction::Delay(d) => target.faults_mut().response_delay = d,
                NvmeFaultAction::Drop(n) => target.faults_mut().drop_responses += n,
                NvmeFaultAction::Crash => {
                    target.crash(&mut t);
                    // Commands in flight now either ran before the crash
                    // (and were undone unless flushed) or never run: the
                    // model settles them here, and ignores their outcome.
                    let flushing = self.inflight.values().any(|f| f.kind == Kind::Flush);
                    self.model.crash(flushing);
                    self.epoch += 1;
                    self.tally.crashes += 1;
                }
                NvmeFaultAction::Restart => target.restart(&mut t),
            }
        }
        None
    }

    fn config(&self) -> ControllerConfig {
        let mut c = ControllerConfig::new(self.addr, Nqn::new(NQN).expect("a valid NQN"), [0x5c; 16]);
        c.queue_depth = 128;
        c.io_queues = self.spec.io_queues;
        c.keep_alive = self.spec.keep_alive;
        c.timeout = self.spec.timeout;
        c
    }

    /// Connects, identifies the namespace and registers the buffer.
    fn connect(&mut self) -> Result<(), String> {
        let host = self.host.take().expect("connect once");
        let mut ctrl = match Controller::connect(host, self.config()) {
            Ok(c) => c,
            Err(e) => {
                let (t, e) = e.into_parts();
                self.host = Some(t);
                return Err(e.to_string());
            }
        };
        let setup = ctrl.namespace(1).and_then(|ns| {
            let buf = ctrl.alloc(self.slot_len * self.cfg.queue_depth as u64)?;
            Ok((ns, buf))
        });
        match setup {
            Ok((ns, buf)) => {
                self.ns = Some(ns);
                self.buf = Some(buf);
                self.free = (0..self.cfg.queue_depth as usize).rev().collect();
                self.ctrl = Some(ctrl);
                Ok(())
            }
            Err(e) => {
                self.host = Some(ctrl.into_transport());
                Err(e.to_string())
            }
        }
    }

    /// Applies the target faults that are due, then connects (at
    /// `cfg.start`; a failure ends the stream with `connect_error`),
    /// services and submits commands, or reconnects after the controller
    /// failed; connect and reconnect block for their round trips.
    pub fn step(&mut self) -> Progress {
        if self.state == State::Finished {
            return Progress::Done;
        }
        let now = self.sim.now();
        let next_fault = self.apply_faults(now);
        if now < self.start_at() {
            return Progress::Idle { wake_at: Some(self.start_at()) };
        }
        match self.state {
            State::Finished => Progress::Done,
            State::NotStarted => {
                if let Err(e) = self.connect() {
                    self.stats.connect_error = Some(e);
                    self.finish();
                    return Progress::Done;
                }
                self.stats.started_at = Some(self.sim.now());
                self.state = State::Running;
                Progress::Busy
            }
            State::Down { retry_at, attempts } => {
                if now < retry_at {
                    return Progress::Idle { wake_at: Some(min_opt(retry_at, next_fault)) };
                }
                let ctrl = self.ctrl.as_mut().expect("connected before");
                match ctrl.reconnect() {
                    Ok(()) => {
                        self.service_failed = false;
                        self.tally.reconnects += 1;
                        self.state = State::Running;
                    }
                    Err(e) => {
                        self.tally.reconnect_failures += 1;
                        if attempts + 1 >= self.spec.reconnect_attempts {
                            self.stats
                                .local_errors
                                .push(format!("gave up after {} reconnect attempts, the last: {e}", attempts + 1));
                            self.finish();
                            return Progress::Done;
                        }
                        let retry_at = self.sim.now() + self.spec.reconnect_delay;
                        self.state = State::Down { retry_at, attempts: attempts + 1 };
                    }
                }
                Progress::Busy
            }
            State::Running => self.run(next_fault),
        }
    }

    fn run(&mut self, next_fault: Option<Instant>) -> Progress {
        let ctrl = self.ctrl.as_mut().expect("running");
        let before = (self.next, self.inflight.len());
        // A failed service is a failed controller (a Keep Alive timed out,
        // the target went away): counted once, its tickets fail too.
        let served = ctrl.service();
        let done = ctrl.take_finished();
        if let Err(e) = served
            && !self.service_failed
        {
            self.service_failed = true;
            self.count_failure(&e);
        }
        let progressed = !done.is_empty();
        for (ticket, r) in done {
            self.finished(ticket, r);
        }
        let broken = self.ctrl.as_ref().expect("running").failure().is_some();
        if !broken {
            self.submit();
        }
        if self.next >= self.cfg.count && self.inflight.is_empty() {
            self.stats.finished_at = Some(self.sim.now());
            self.finish();
            return Progress::Done;
        }
        if broken && self.inflight.is_empty() {
            if !self.spec.reconnect {
                self.stats.finished_at = Some(self.sim.now());
                self.finish();
                return Progress::Done;
            }
            self.state = State::Down { retry_at: self.sim.now() + self.spec.reconnect_delay, attempts: 0 };
            return Progress::Busy;
        }
        if progressed || (self.next, self.inflight.len()) != before {
            return Progress::Busy;
        }
        let (_, until) = self.ctrl.as_ref().expect("running").wait_set();
        let wake = (until != Instant::FAR_FUTURE).then_some(until);
        Progress::Idle { wake_at: [wake, next_fault].into_iter().flatten().min() }
    }

    /// Submits commands while the depth, the slots and the rules allow.
    fn submit(&mut self) {
        let lba = self.spec.lba_size as u64;
        while self.next < self.cfg.count && self.inflight.len() < self.cfg.queue_depth as usize {
            let i = self.next;
            let draw = (self.pattern.draw(&format!("op{i}")) >> 11) as f64 / (1u64 << 53) as f64;
            let kind = if draw < self.spec.read {
                Kind::Read
            } else if draw < self.spec.read + self.spec.flush {
                Kind::Flush
            } else {
                Kind::Write
            };
            // A flush is a barrier: alone on the queues.
            if self.inflight.values().any(|f| f.kind == Kind::Flush)
                || (kind == Kind::Flush && !self.inflight.is_empty())
            {
                return;
            }
            let ctrl = self.ctrl.as_mut().expect("running");
            if ctrl.free_slots() == 0 {
                return;
            }
            let ns = self.ns.clone().expect("identified");
            let (slba, blocks) = if kind == Kind::Flush {
                (0, 0)
            } else {
                let len = self.pattern.size(i, self.cfg.min_size, self.cfg.max_size) as u64 / lba * lba;
                let blocks = (len / lba).max(1);
                let slba = self.pattern.draw(&format!("lba{i}")) % (self.spec.blocks - blocks + 1);
                (slba, blocks)
            };
            if kind != Kind::Flush
                && self
                    .inflight
                    .values()
                    .any(|f| f.kind != Kind::Flush && slba < f.slba + f.blocks && f.slba < slba + blocks)
            {
                return; // Overlapping commands would make the order matter.
            }
            let slot = self.free.pop().expect("a free slot per queue_depth");
            let buf = self.buf.expect("registered");
            let b = Buffer::slice(buf, slot as u64 * self.slot_len, blocks * lba);
            let r = match kind {
                Kind::Read => ctrl.submit_read(&ns, slba, b),
                Kind::Write => {
                    let mut data = vec![0u8; (blocks * lba) as usize];
                    self.pattern.fill(i, &mut data);
                    match ctrl.transport_mut().mr_write(buf.id, b.offset, &data) {
                        Ok(()) => ctrl.submit_write(&ns, slba, b),
                        Err(e) => Err(e.into()),
                    }
                }
                Kind::Flush => ctrl.submit_flush(&ns),
            };
            self.next += 1;
            self.stats.posted += 1;
            match r {
                Ok(t) => {
                    self.inflight.insert(t, InFlight { kind, index: i, slba, blocks, slot, epoch: self.epoch });
                }
                Err(e) => {
                    self.free.push(slot);
                    self.fail(kind, slba, blocks, &e);
                    return;
                }
            }
        }
    }

    fn finished(&mut self, ticket: Ticket, r: Result<(), NvmeError>) {
        let Some(f) = self.inflight.remove(&ticket) else { return };
        self.free.push(f.slot);
        let lba = self.spec.lba_size as u64;
        // In flight across a crash: settled by the model at the crash (and a
        // read may hold data from before it).
        let settled = f.epoch != self.epoch;
        match r {
            Err(e) if settled => {
                self.count_failure(&e);
            }
            Err(e) => self.fail(f.kind, f.slba, f.blocks, &e),
            Ok(()) if settled => {
                self.stats.completed += 1;
                self.stats.bytes += f.blocks * lba;
                match f.kind {
                    Kind::Write => self.tally.writes += 1,
                    Kind::Flush => self.tally.flushes += 1,
                    Kind::Read => {
                        self.tally.reads += 1;
                        self.tally.unchecked_blocks += f.blocks;
                    }
                }
            }
            Ok(()) => {
                self.stats.completed += 1;
                self.stats.bytes += f.blocks * lba;
                match f.kind {
                    Kind::Flush => {
                        self.tally.flushes += 1;
                        self.model.flushed(true);
                    }
                    Kind::Write => {
                        self.tally.writes += 1;
                        let mut data = vec![0u8; (f.blocks * lba) as usize];
                        self.pattern.fill(f.index, &mut data);
                        self.model.write(f.slba, &data);
                    }
                    Kind::Read => {
                        self.tally.reads += 1;
                        let mut data = vec![0u8; (f.blocks * lba) as usize];
                        let buf = self.buf.expect("registered");
                        let ctrl = self.ctrl.as_ref().expect("running");
                        if let Err(e) = ctrl.transport().mr_read(buf.id, f.slot as u64 * self.slot_len, &mut data) {
                            self.stats.local_errors.push(e.to_string());
                            return;
                        }
                        let (bad, unknown) = self.model.check(f.slba, &data);
                        self.tally.unchecked_blocks += unknown;
                        if let Some((block, off)) = bad {
                            self.stats.mismatches += 1;
                            self.stats.first_mismatch.get_or_insert_with(|| {
                                format!(
                                    "command {} (read of {} blocks at {}): block {block} differs at byte {off}",
                                    f.index, f.blocks, f.slba
                                )
                            });
                        }
                    }
                }
            }
        }
    }

    /// A command failed: count it, and update the model for what may have happened.
    fn fail(&mut self, kind: Kind, slba: u64, blocks: u64, e: &NvmeError) {
        let k = self.count_failure(e);
        match kind {
            // An NVMe status: the target refused it, nothing changed.
            Kind::Write if k == "status" => {}
            Kind::Write => self.model.forget(slba, blocks),
            Kind::Flush if k == "status" => {}
            Kind::Flush => self.model.flushed(false),
            Kind::Read => {}
        }
    }

    fn count_failure(&mut self, e: &NvmeError) -> &'static str {
        let k = error_kind(e);
        *self.tally.errors.entry(k).or_default() += 1;
        self.tally.first_error.get_or_insert_with(|| e.to_string());
        k
    }

    fn finish(&mut self) {
        self.state = State::Finished;
    }

    /// The end of the run: closes the controller, shuts the target down and
    /// unregisters it, so nothing stays allocated.
    pub fn abort(&mut self) {
        if self.actor.is_none() {
            return;
        }
        self.state = State::Finished;
        if let Some(mut c) = self.ctrl.take() {
            if let Some(buf) = self.buf.take() {
                let _ = c.free(buf);
            }
            self.host = Some(c.into_transport());
        }
        self.tally.keep_alives = self.target.borrow().stats().keep_alives;
        let mut t = self.sim.transport(self.target_node);
        self.target.borrow_mut().shutdown(&mut t);
        if let Some(id) = self.actor.take() {
            self.sim.remove_actor(id);
        }
        // CM events the teardown left on the nodes (disconnects) are ours.
        while t.cm_poll().is_some() {}
        if let Some(h) = self.host.as_mut() {
            while h.cm_poll().is_some() {}
        }
    }

    /// Counters for the report's note line.
    pub fn summary(&self) -> String {
        let t = &self.tally;
        let errors: Vec<String> = t.errors.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        format!(
            "nvme: {} reads, {} writes, {} flushes ok; failed: {}; {} reconnects ({} failed attempts); {} crashes; {} keep-alives; {} blocks unchecked (outcome unknown){}",
            t.reads,
            t.writes,
            t.flushes,
            if errors.is_empty() { "none".to_string() } else { errors.join(", ") },
            t.reconnects,
            t.reconnect_failures,
            t.crashes,
            t.keep_alives,
            t.unchecked_blocks,
            t.first_error.as_ref().map_or(String::new(), |e| format!("; first error: {e}")),
        )
    }
}

fn min_opt(a: Instant, b: Option<Instant>) -> Instant {
    b.map_or(a, |b| a.min(b))
}

/// The checks of an nvme stream (instead of the verbs streams' ones):
/// connected, no local errors, commands delivered (all `count` unless
/// errors are expected), failures by kind as expected and no others,
/// reconnects as expected, data intact.
pub fn checks(spec: &crate::scenario::StreamSpec, s: &StreamStats, t: &NvmeTally) -> Vec<crate::expect::Check> {
    use crate::expect::Check;
    use crate::scenario::CountExpect;
    let Some(n) = &spec.nvme else { return Vec::new() };
    let name = &spec.config.name;
    let e = &spec.expect;
    let check = |passed: bool, what: String, got: String| Check { passed, what, got };
    let count = |what: String, x: CountExpect, got: u64| check(x.matches(got), format!("{what} {x}"), got.to_string());
    let mut out = Vec::new();
    if let Some(why) = &s.connect_error {
        out.push(check(false, format!("{name}: connected"), why.clone()));
    }
    out.push(check(
        s.local_errors.is_empty(),
        format!("{name}: no local errors"),
        match s.local_errors.first() {
            None => "none".to_string(),
            Some(first) => format!("{} ({first})", s.local_errors.len()),
        },
    ));
    let clean = n.errors.is_empty();
    if let Some(x) = e.delivered.or(clean.then_some(CountExpect::exactly(spec.config.count))) {
        out.push(count(format!("{name}: commands completed"), x, s.completed));
    }
    for (kind, x) in &n.errors {
        out.push(count(format!("{name}: {kind} failures"), *x, t.errors.get(kind.as_str()).copied().unwrap_or(0)));
    }
    let unexpected: Vec<String> =
        t.errors.iter().filter(|(k, _)| !n.errors.contains_key(**k)).map(|(k, v)| format!("{k} x{v}")).collect();
    let what = if clean { "no failed commands" } else { "no other failures" };
    let got = if unexpected.is_empty() {
        "none".to_string()
    } else {
        format!("{} (first: {})", unexpected.join(", "), t.first_error.as_deref().unwrap_or("?"))
    };
    out.push(check(unexpected.is_empty(), format!("{name}: {what}"), got));
    if let Some(x) = n.reconnects {
        out.push(count(format!("{name}: reconnects"), x, t.reconnects));
    }
    let got = match &s.first_mismatch {
        None => "0 mismatches".to_string(),
        Some(first) => format!("{} mismatches, first: {first}", s.mismatches),
    };
    let what = if e.data_integrity { "data intact" } else { "a data mismatch detected" };
    out.push(check((s.mismatches == 0) == e.data_integrity, format!("{name}: {what}"), got));
    out
}
