//! Runs a scenario on the simulator: builds the fabric, starts every stream,
//! and drives them all on one thread.
//!
//! The loop steps every stream until none can make progress, and only then
//! lets virtual time move (one `Sim::step`, or a jump to a stream's start
//! time). When nothing is pending anywhere but streams are unfinished the run
//! is reported as stalled; past the time limit it is stopped. It never hangs.

use rctb_core::Transport;
use rctb_core::time::Instant;
use rctb_sim::{LiveResources, Sim, SimError, SimTransport};

use crate::expect;
use crate::report::Report;
use crate::scenario::Scenario;
use crate::traffic::{Progress, Role, Stream};

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every stream finished.
    Completed,
    /// Nothing could happen any more, with these streams unfinished.
    Stalled { at: Instant, waiting: Vec<String> },
    /// The scenario's time limit passed with these streams unfinished.
    TimeLimit { at: Instant, waiting: Vec<String> },
    /// Streams kept reporting progress without time moving.
    Livelock { at: Instant, waiting: Vec<String> },
}

/// Everything one run produced.
#[derive(Debug)]
pub struct RunOutput {
    pub report: Report,
    /// The pcap bytes, when capture was asked for.
    pub pcap: Option<Vec<u8>>,
}

/// A stream and the nodes its two ends live on.
struct Placed {
    stream: Stream<SimTransport>,
    requester: usize,
    responder: usize,
}

/// Rounds of progress without virtual time moving before the run is called
/// a livelock (far above anything a real scenario needs).
const MAX_BUSY_ROUNDS: u64 = 1_000_000;

/// Runs `scenario` with `seed`; `capture` records a pcap of every frame.
pub fn run(scenario: &Scenario, seed: u64, capture: bool) -> Result<RunOutput, SimError> {
    let sim = Sim::new(seed);
    let mut nodes = Vec::new();
    for cfg in &scenario.nodes {
        nodes.push(sim.add_node(cfg.clone())?);
    }
    sim.set_default_link(scenario.default_link);
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
    if capture {
        sim.enable_pcap();
    }
    let mut transports: Vec<SimTransport> = nodes.iter().map(|&n| sim.transport(n)).collect();
    let mut placed = Vec::new();
    for spec in &scenario.streams {
        let (requester, responder) = (sim.node(&spec.from)?.0, sim.node(&spec.to)?.0);
        let stream =
            Stream::new(spec.config.clone(), seed, transports[requester].clone(), transports[responder].clone());
        placed.push(Placed { stream, requester, responder });
    }

    let (outcome, drive_notes) = drive(&sim, &mut transports, &mut placed, Instant::ZERO + scenario.time_limit);
    let notes: Vec<String> = swarm_notes.into_iter().chain(drive_notes).collect();
    let finished_at = sim.now();
    for p in placed.iter_mut() {
        p.stream.abort();
    }
    let leaked = sim.live_resources();
    let streams: Vec<_> = placed.iter().map(|p| p.stream.stats().clone()).collect();
    let checks = expect::evaluate(scenario, &outcome, &streams, finished_at, &sim.stats(), &leaked);
    let report = Report::build(scenario, seed, &outcome, finished_at, &streams, &sim.stats(), &leaked, notes, checks);
    let pcap = sim.take_pcap();
    Ok(RunOutput { report, pcap })
}

fn unfinished(placed: &[Placed]) -> Vec<String> {
    placed.iter().filter(|p| !p.stream.is_done()).map(|p| p.stream.config().name.clone()).collect()
}

/// The event loop. Returns how it ended and notes worth reporting.
fn drive(sim: &Sim, transports: &mut [SimTransport], placed: &mut [Placed], limit: Instant) -> (Outcome, Vec<String>) {
    let mut notes = Vec::new();
    let mut busy_rounds = 0u64;
    loop {
        let mut busy = dispatch_cm(transports, placed, &mut notes);
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
            if busy_rounds > MAX_BUSY_ROUNDS {
                return (Outcome::Livelock { at: sim.now(), waiting: unfinished(placed) }, notes);
            }
            continue;
        }
        busy_rounds = 0;
        // Every stream is idle: let time move to the next thing that happens.
        let event = sim.next_event_at();
        let next = match (event, wake) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return (Outcome::Stalled { at: sim.now(), waiting: unfinished(placed) }, notes),
        };
        if next > limit {
            sim.run_until(limit);
            return (Outcome::TimeLimit { at: sim.now(), waiting: unfinished(placed) }, notes);
        }
        if event == Some(next) {
            sim.step();
        } else {
            sim.run_until(next);
        }
    }
}

/// Hands every pending CM event to the stream it belongs to: a node's CM
/// event queue is shared by all streams with an end on that node.
fn dispatch_cm(transports: &mut [SimTransport], placed: &mut [Placed], notes: &mut Vec<String>) -> bool {
    let mut any = false;
    for (node, t) in transports.iter_mut().enumerate() {
        while let Some(ev) = t.cm_poll() {
            any = true;
            let claimed = placed.iter_mut().any(|p| {
                (p.requester == node && p.stream.offer_cm(Role::Requester, &ev))
                    || (p.responder == node && p.stream.offer_cm(Role::Responder, &ev))
            });
            if !claimed {
                notes.push(format!("{}: CM event no stream claimed: {ev:?}", t.node_name()));
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
        format!("{} PDs, {} MRs, {} CQs, {} QPs", l.pds, l.mrs, l.cqs, l.qps)
    }
}
