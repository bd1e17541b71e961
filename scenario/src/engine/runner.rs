//! Runs a scenario: builds the fabric, starts every stream, and drives them
//! all on one thread.
//!
//! [`run`] builds the simulated fabric; [`run_on`] runs the streams on any
//! [`Fabric`]: the simulator's ([`SimFabric`]) or real UDP endpoints
//! (`crate::udp_run`). The loop steps every stream until none can make
//! progress, and only then lets time move ([`Fabric::idle`]: on the
//! simulator one `Sim::step`, or a jump to a stream's start time; on a
//! real network a wait on its sockets). When nothing is pending anywhere
//! but streams are unfinished the run is reported as stalled; past the time
//! limit it is stopped. It never hangs.

use rctb_core::Transport;
use rctb_core::time::Instant;
use rctb_sim::{FabricStats, LiveResources, NodeId, Sim, SimError, SimTransport};

use rctb_core::roce::{ServerConfig, TransportConfig};
use rctb_core::transport::RnrTimer;
use rctb_models::fpga::{Payload, StreamConfig as EngineStream};

use crate::expect;
use crate::nvme_stream::NvmeStream;
use crate::pattern::StreamPattern;
use crate::report::Report;
use crate::roce::check::FrameCheck;
use crate::roce::pair::{PairConfig, RocePair};
use crate::scenario::{RoceSpec, Scenario, StreamSpec};
use crate::session_stream::SessionStream;
use crate::traffic::{Progress, Role, Stream, StreamStats};

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every stream finished.
    Completed,
    /// Nothing could happen any more, with these streams unfinished (also
    /// how a run ends when the network fails: the report's notes say why).
    Stalled {
        /// The fabric's time when the run stopped.
        at: Instant,
        /// The names of the unfinished streams, in scenario order.
        waiting: Vec<String>,
    },
    /// The scenario's time limit passed with these streams unfinished.
    TimeLimit {
        /// The fabric's time when the run stopped (the limit, on the
        /// simulator).
        at: Instant,
        /// The names of the unfinished streams, in scenario order.
        waiting: Vec<String>,
    },
    /// Streams kept reporting progress for a million rounds without
    /// virtual time moving (checked only where [`Fabric::virtual_time`]).
    Livelock {
        /// The virtual time that stood still.
        at: Instant,
        /// The names of the unfinished streams, in scenario order.
        waiting: Vec<String>,
    },
}

/// Everything one run produced.
#[derive(Debug)]
pub struct RunOutput {
    /// The report: streams, counters, notes and every check with its
    /// verdict ([`Report::passed`]).
    pub report: Report,
    /// The pcap bytes, when capture was asked for.
    pub pcap: Option<Vec<u8>>,
}

/// A stream and the nodes its two ends live on.
struct Placed<T: Transport> {
    name: String,
    stream: Workload<T>,
    requester: usize,
    responder: usize,
}

/// What a stream runs: verbs-level traffic, or an FPGA engine feeding a
/// RoCEv2 receive server (`op = "roce"`), on the fabric's transports; or a
/// peer model that runs on the simulator (rcsession, nvme).
enum Workload<T: Transport> {
    Traffic(Box<Stream<T>>),
    Roce(Box<RocePair<T>>),
    Session(Box<SessionStream>),
    Nvme(Box<NvmeStream>),
}

impl<T: Transport> Workload<T> {
    fn step(&mut self) -> Progress {
        match self {
            Workload::Traffic(s) => s.step(),
            Workload::Roce(p) => p.step(),
            Workload::Session(w) => w.step(),
            Workload::Nvme(w) => w.step(),
        }
    }
    fn is_done(&self) -> bool {
        match self {
            Workload::Traffic(s) => s.is_done(),
            Workload::Roce(p) => p.is_done(),
            Workload::Session(w) => w.is_done(),
            Workload::Nvme(w) => w.is_done(),
        }
    }
    fn abort(&mut self) {
        match self {
            Workload::Traffic(s) => s.abort(),
            Workload::Roce(p) => p.abort(),
            Workload::Session(w) => w.abort(),
            Workload::Nvme(w) => w.abort(),
        }
    }
    fn stats(&self) -> &StreamStats {
        match self {
            Workload::Traffic(s) => s.stats(),
            Workload::Roce(p) => p.stats(),
            Workload::Session(w) => w.stats(),
            Workload::Nvme(w) => w.stats(),
        }
    }
    /// The engine and server set up through registers: no CM events.
    fn offer_cm(&mut self, role: Role, ev: &rctb_core::transport::CmEvent) -> bool {
        match self {
            Workload::Traffic(s) => s.offer_cm(role, ev),
            Workload::Roce(_) | Workload::Session(_) | Workload::Nvme(_) => false,
        }
    }
    fn roce_check(&self) -> Option<FrameCheck> {
        match self {
            Workload::Traffic(_) | Workload::Session(_) | Workload::Nvme(_) => None,
            Workload::Roce(p) => Some(p.check().clone()),
        }
    }
}

/// The pair a `op = "roce"` stream runs. Frame sizes: the fixed size, or 16
/// sizes drawn from the seed in `min..=max`, cycled.
fn roce_pair<T: Transport>(
    spec: &StreamSpec,
    roce: &RoceSpec,
    scenario: &Scenario,
    seed: u64,
    host: T,
    fpga: T,
) -> RocePair<T> {
    let c = &spec.config;
    let node = |name: &str| scenario.nodes.iter().find(|n| n.name == name).expect("validated node");
    let (fpga_node, host_node) = (node(&spec.from), node(&spec.to));
    // The server checks that it runs on the device it is configured for:
    // the host's, whichever backend it is (a failing query fails its start).
    let device = host.device().map_or_else(|_| host_node.name.clone(), |d| d.name);
    let server = ServerConfig::builder(fpga_node.ip, device)
        .max_payload(roce.max_payload)
        .rx_queue_depth(c.recv_depth)
        .build()
        .expect("the scenario validator checks max_payload, recv_depth and the slab size");
    let timer = RnrTimer::from_code(c.qp.min_rnr_timer).expect("validated: 0..=31");
    let tc = TransportConfig::new(host_node.mtu, timer, c.qp.rnr_retry, c.qp.retry_cnt).expect("validated: 0..=7");
    let pattern = StreamPattern::new(seed, &c.name);
    let sizes = if c.min_size == c.max_size {
        vec![c.min_size]
    } else {
        (0..16).map(|i| pattern.size(i, c.min_size, c.max_size)).collect()
    };
    let stream = EngineStream {
        channels: roce.channels.clone(),
        sizes,
        count: c.count,
        gap: roce.gap,
        window: c.queue_depth,
        payload: Payload::Prbs,
    };
    let cfg = PairConfig {
        server,
        tc,
        stream,
        consumer_delay: roce.consumer_delay,
        verify: true,
        fpga_sgid_index: 1,
        start: Instant::ZERO + c.start,
    };
    RocePair::new(cfg, host, fpga, host_node.ip, pattern.draw("roce-psn"))
}

/// Rounds of progress without virtual time moving before the run is called
/// a livelock (far above anything a real scenario needs).
const MAX_BUSY_ROUNDS: u64 = 1_000_000;

/// What a scenario runs on: one transport per scenario node (in the
/// scenario's order), how time moves while every stream is idle, and what
/// the report reads (the clock, the counters, the live verbs objects, the
/// capture). The simulator ([`SimFabric`]) and real UDP endpoints
/// (`crate::udp_run`) provide it.
pub trait Fabric {
    /// The transport each node's streams post on.
    type Transport: Transport;
    /// A handle to the transport of node `index` (each call a new handle).
    fn transport(&self, index: usize) -> Self::Transport;
    /// The simulator and its node of every scenario node, where the peer
    /// models (the session client, the NVMe-oF target) run as its actors;
    /// `None` when the fabric is not simulated.
    fn models(&self) -> Option<(&Sim, &[NodeId])>;
    /// The run's clock: virtual time on the simulator, real time since the
    /// fabric was made on a real network; the time limit and the report's
    /// times are on it.
    fn now(&self) -> Instant;
    /// What the fabric counted (frames, ACKs, NAKs, retransmissions, drops).
    fn stats(&self) -> FabricStats;
    /// Verbs objects alive on every node (the leak check).
    fn live_resources(&self) -> LiveResources;
    /// Starts recording every frame.
    fn enable_pcap(&self);
    /// The frames recorded (recording stops).
    fn take_pcap(&self) -> Option<Vec<u8>>;
    /// Called on every round of the loop (a real network moves frames here).
    fn poll(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Every stream is idle, the earliest waiting for `wake`: let time move.
    fn idle(&mut self, wake: Option<Instant>, limit: Instant) -> Idle;
    /// Whether streams reporting progress while time stands still is a
    /// livelock (only where time moves only when told to).
    fn virtual_time(&self) -> bool {
        true
    }
}

/// What [`Fabric::idle`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Idle {
    /// Time moved (an event ran, a wake time came, or a wait returned): step
    /// the streams again.
    Moved,
    /// Nothing can happen any more.
    Stalled,
    /// The run's time limit is reached before anything else happens (the
    /// simulator runs up to the limit first): the run stops.
    TimeLimit,
    /// The network failed (a socket error): the run stops, stalled.
    Failed(String),
}

/// The simulated fabric: its nodes in the scenario's order, its virtual
/// time (jump to the next event or wake time).
#[derive(Debug)]
pub struct SimFabric<'a> {
    /// The simulator the nodes live in (already built: nodes, links, faults).
    pub sim: &'a Sim,
    /// The simulator's node of each scenario node, in the scenario's order.
    pub nodes: Vec<NodeId>,
}

impl Fabric for SimFabric<'_> {
    type Transport = SimTransport;

    fn transport(&self, index: usize) -> SimTransport {
        self.sim.transport(self.nodes[index])
    }

    fn models(&self) -> Option<(&Sim, &[NodeId])> {
        Some((self.sim, &self.nodes))
    }

    fn now(&self) -> Instant {
        self.sim.now()
    }

    fn stats(&self) -> FabricStats {
        self.sim.stats()
    }

    fn live_resources(&self) -> LiveResources {
        self.sim.live_resources()
    }

    fn enable_pcap(&self) {
        self.sim.enable_pcap();
    }

    fn take_pcap(&self) -> Option<Vec<u8>> {
        self.sim.take_pcap()
    }

    fn idle(&mut self, wake: Option<Instant>, limit: Instant) -> Idle {
        let sim = self.sim;
        let event = sim.next_event_at();
        let next = match (event, wake) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return Idle::Stalled,
        };
        if next > limit {
            sim.run_until(limit);
            return Idle::TimeLimit;
        }
        if event == Some(next) {
            sim.step();
        } else {
            sim.run_until(next);
        }
        Idle::Moved
    }
}

/// Runs `scenario` with `seed`; `capture` records a pcap of every frame.
pub fn run(scenario: &Scenario, seed: u64, capture: bool) -> Result<RunOutput, SimError> {
    let sim = Sim::new(seed);
    let mut nodes = Vec::new();
    for cfg in &scenario.nodes {
        nodes.push(sim.add_node(cfg.clone())?);
    }
    sim.set_default_link(scenario.default_link);
    sim.set_cm_faults(scenario.cm_faults);
    for link in &scenario.links {
        sim.set_link(sim.node(&link.a)?, sim.node(&link.b)?, link.config);
    }
    for fault in &scenario.faults {
        sim.schedule(fault.clone());
    }
    let mut swarm_notes = Vec::new();
    if let Some(swarm) = &scenario.swarm {
        let names: Vec<String> = scenario.nodes.iter().map(|n| n.name.clone()).collect();
        let drawn = swarm.draw(seed, &names);
        swarm_notes = crate::scenario::describe_swarm(&drawn);
        for fault in drawn {
            sim.schedule(fault);
        }
    }
    run_on(scenario, seed, capture, &mut SimFabric { sim: &sim, nodes }, swarm_notes)
}

/// Runs the streams of `scenario` on `fabric` (one node per scenario node,
/// in order), starting the report's notes with `notes`; builds the report.
pub fn run_on<F: Fabric>(
    scenario: &Scenario,
    seed: u64,
    capture: bool,
    fabric: &mut F,
    notes: Vec<String>,
) -> Result<RunOutput, SimError> {
    let swarm_notes = notes;
    if capture {
        fabric.enable_pcap();
    }
    let index = |name: &str| {
        scenario.nodes.iter().position(|n| n.name == name).ok_or_else(|| SimError::UnknownNode(name.into()))
    };
    let mut transports: Vec<F::Transport> = (0..scenario.nodes.len()).map(|i| fabric.transport(i)).collect();
    let mut placed = Vec::new();
    for spec in &scenario.streams {
        let (requester, responder) = (index(&spec.from)?, index(&spec.to)?);
        let (req_t, resp_t) = (fabric.transport(requester), fabric.transport(responder));
        let models = || {
            fabric.models().ok_or_else(|| {
                SimError::UnknownNode(format!("stream {}: its peer model runs on the simulator only", spec.config.name))
            })
        };
        let stream = match (&spec.roce, &spec.session) {
            _ if spec.nvme.is_some() => {
                let nvme = spec.nvme.clone().expect("checked");
                let (sim, nodes) = models()?;
                match NvmeStream::new(sim, spec.config.clone(), nvme, seed, nodes[requester], nodes[responder]) {
                    Ok(s) => Workload::Nvme(Box::new(s)),
                    Err(e) => return Err(SimError::UnknownNode(format!("nvme stream {}: {e}", spec.config.name))),
                }
            }
            (Some(roce), _) => Workload::Roce(Box::new(roce_pair(spec, roce, scenario, seed, resp_t, req_t))),
            (None, Some(cfg)) => {
                let start = Instant::ZERO + spec.config.start;
                let (sim, nodes) = models()?;
                let (server, client) = (nodes[responder], nodes[requester]);
                match SessionStream::new(sim, cfg.clone(), server, client, start) {
                    Ok(s) => Workload::Session(Box::new(s)),
                    Err(e) => return Err(SimError::UnknownNode(format!("rcsession stream {}: {e}", spec.config.name))),
                }
            }
            (None, None) => Workload::Traffic(Box::new(Stream::new(spec.config.clone(), seed, req_t, resp_t))),
        };
        placed.push(Placed { name: spec.config.name.clone(), stream, requester, responder });
    }

    let limit = Instant::ZERO + scenario.time_limit;
    let (outcome, drive_notes) = drive(scenario, fabric, &mut transports, &mut placed, limit);
    let mut notes: Vec<String> = swarm_notes.into_iter().chain(drive_notes).collect();
    let finished_at = fabric.now();
    for p in placed.iter_mut() {
        p.stream.abort();
    }
    for p in &placed {
        if let Workload::Session(w) = &p.stream {
            notes.push(format!("{}: {}", p.name, w.summary()));
        }
        if let Workload::Nvme(w) = &p.stream {
            notes.push(format!("{}: {}", p.name, w.summary()));
        }
    }
    let leaked = fabric.live_resources();
    let fabric_stats = fabric.stats();
    let streams: Vec<_> = placed.iter().map(|p| p.stream.stats().clone()).collect();
    let roce: Vec<Option<FrameCheck>> = placed.iter().map(|p| p.stream.roce_check()).collect();
    let mut checks = expect::evaluate(scenario, &outcome, &streams, finished_at, &fabric_stats, &leaked);
    checks.extend(expect::roce_checks(scenario, &streams, &roce));
    for (p, spec) in placed.iter().zip(&scenario.streams) {
        if let Workload::Nvme(w) = &p.stream {
            checks.extend(crate::nvme_stream::checks(spec, w.stats(), w.tally()));
        }
    }
    let mut report =
        Report::build(scenario, seed, &outcome, finished_at, &streams, &fabric_stats, &leaked, notes, checks);
    report.add_roce(scenario, &roce);
    let pcap = fabric.take_pcap();
    Ok(RunOutput { report, pcap })
}

fn unfinished<T: Transport>(placed: &[Placed<T>]) -> Vec<String> {
    placed.iter().filter(|p| !p.stream.is_done()).map(|p| p.name.clone()).collect()
}

/// The event loop. Returns how it ended and notes worth reporting.
fn drive<F: Fabric>(
    scenario: &Scenario,
    fabric: &mut F,
    transports: &mut [F::Transport],
    placed: &mut [Placed<F::Transport>],
    limit: Instant,
) -> (Outcome, Vec<String>) {
    let mut notes = Vec::new();
    let mut busy_rounds = 0u64;
    loop {
        if let Err(e) = fabric.poll() {
            notes.push(e);
            return (Outcome::Stalled { at: fabric.now(), waiting: unfinished(placed) }, notes);
        }
        let mut busy = dispatch_cm(scenario, transports, placed, &mut notes);
        let mut wake: Option<Instant> = None;
        let mut all_done = true;
        for p in placed.iter_mut() {
            match p.stream.step() {
                Progress::Busy => {
                    busy = true;
                    all_done = false;
                }
                Progress::Idle { wake_at } => {
                    all_done = false;
                    wake = match (wake, wake_at) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Progress::Done => {}
            }
        }
        if all_done {
            return (Outcome::Completed, notes);
        }
        if busy {
            busy_rounds += 1;
            if busy_rounds > MAX_BUSY_ROUNDS && fabric.virtual_time() {
                return (Outcome::Livelock { at: fabric.now(), waiting: unfinished(placed) }, notes);
            }
            continue;
        }
        busy_rounds = 0;
        // Every stream is idle: let time move to the next thing that happens.
        match fabric.idle(wake, limit) {
            Idle::Moved => {}
            Idle::Stalled => return (Outcome::Stalled { at: fabric.now(), waiting: unfinished(placed) }, notes),
            Idle::TimeLimit => return (Outcome::TimeLimit { at: fabric.now(), waiting: unfinished(placed) }, notes),
            Idle::Failed(why) => {
                notes.push(why);
                return (Outcome::Stalled { at: fabric.now(), waiting: unfinished(placed) }, notes);
            }
        }
    }
}

/// Hands every pending CM event to the stream it belongs to: a node's CM
/// event queue is shared by all streams with an end on that node.
fn dispatch_cm<T: Transport>(
    scenario: &Scenario,
    transports: &mut [T],
    placed: &mut [Placed<T>],
    notes: &mut Vec<String>,
) -> bool {
    let mut any = false;
    for (node, t) in transports.iter_mut().enumerate() {
        // The nodes of an nvme stream poll their own CM events.
        let own = |p: &Placed<T>| matches!(p.stream, Workload::Nvme(_)) && (p.requester == node || p.responder == node);
        if placed.iter().any(own) {
            continue;
        }
        while let Some(ev) = t.cm_poll() {
            any = true;
            let claimed = placed.iter_mut().any(|p| {
                (p.requester == node && p.stream.offer_cm(Role::Requester, &ev))
                    || (p.responder == node && p.stream.offer_cm(Role::Responder, &ev))
            });
            if !claimed {
                notes.push(format!("{}: CM event no stream claimed: {ev:?}", scenario.nodes[node].name));
            }
        }
    }
    any
}

/// Live resources as a short phrase for reports.
pub fn describe_leaks(l: &LiveResources) -> String {
    if *l == LiveResources::default() {
        "none".to_string()
    } else {
        let srqs = if l.srqs > 0 { format!(", {} SRQs", l.srqs) } else { String::new() };
        format!("{} PDs, {} MRs, {} CQs, {} QPs{srqs}", l.pds, l.mrs, l.cqs, l.qps)
    }
}
