//! rctb-sim: a deterministic, packet-level RoCEv2 RC fabric implementing
//! [`rctb_core::Transport`].
//!
//! One `u64` seed decides everything: node keys and PSNs, link faults, the
//! order of simultaneous events. Time is virtual and jumps to the next event
//! when nothing else can happen. The same seed and the same code give the same
//! trace and the same pcap bytes. Each node, link direction, the fault rules
//! and the CM faults draw from their own generator, derived from the seed and
//! a label by `rctb_core::transport::seed` (whose docs give the convention).
//!
//! ```
//! use rctb_sim::{NodeConfig, Sim};
//! let sim = Sim::new(42);
//! let a = sim.add_node(NodeConfig::new("a", "10.0.0.1".parse().unwrap())).unwrap();
//! let b = sim.add_node(NodeConfig::new("b", "10.0.0.2".parse().unwrap())).unwrap();
//! let (_ta, _tb) = (sim.transport(a), sim.transport(b));
//! ```
//!
//! # Contract
//!
//! - **Call order.** [`Sim::new`]`(seed)`, [`Sim::add_node`] for each node,
//!   [`Sim::transport`] for each node's [`SimTransport`] (cheap clones of
//!   one handle), peer models as actors ([`Sim::add_actor`]), then drive
//!   time: an application's blocking call (`Transport::wait`) moves virtual
//!   time itself; a test that steps by hand uses [`Sim::step`],
//!   [`Sim::run_until`] or [`Sim::run_until_idle`].
//! - **What blocks.** Nothing waits on the wall clock. `wait` runs events
//!   (and the actors after each instant) until a watched CQ has a
//!   completion, a CM event is pending or the deadline passes, jumping over
//!   idle time. Everything runs on the caller's thread; the handles are
//!   `!Send`.
//! - **Errors.** Local misuse of a verb is a `TransportError` naming the
//!   verb, as verbs returns it; a peer's failure is a completion status;
//!   a bad node or rule is a [`SimError`] naming the field. A panic here is
//!   a bug: the fuzz targets (`fuzzing`) feed the receive path.
//!
//! The protocol is not here: each node is one sans-IO [`rctb_engine::Endpoint`]
//! (verbs resources, QPs, the RC requester and responder, RDMA CM). This
//! crate is its owner in virtual time: it carries the endpoints' packets
//! over simulated links (latency, faults, partitions), their CM messages,
//! runs their timers, records the pcap, and runs the actors. `SimTransport`
//! is a thin adapter from `Transport` to an endpoint's verbs.
//!
//! Each node has one egress port with a bandwidth; its transmit pipeline
//! commits up to 16 packets at a time (each leaves at its own serialization
//! slot), so an ACK can wait behind a committed burst, as on a real NIC.
//!
//! Faults: random ones per link ([`LinkFaults`]), and the ones a test puts
//! by hand: the verbs [`Sim::hold`]/[`Sim::release`],
//! [`Sim::partition`]/[`Sim::repair`], [`Sim::crash`]/[`Sim::bounce`], and
//! per-packet rules ([`Sim::add_rule`], [`PacketRule`]). Where each acts on
//! a packet, in order, and what a crash does to a node's QPs: the `faults`
//! module below ([`faults`]).
//!
//! CM messages travel as values with the link's latency; partitions,
//! holds and crashes cut them, and [`Sim::set_cm_faults`] loses or
//! duplicates them ([`CmFaults`]), which the engine's CM survives by
//! retransmission and duplicate detection (`rctb_engine::cm`).
//!
//! Atomics (compare-and-swap, fetch-and-add) are modelled as rxe does
//! them: 8-byte aligned targets, REMOTE_ATOMIC on the QP and the region,
//! responder resources shared with READ, and a duplicate request answered
//! from the saved original value, never applied twice.
//!
//! Shared receive queues are modelled as rxe has them: QPs of one node
//! created with `QpInit::srq` take receives from it in order, a dry SRQ is
//! answered with RNR NAKs, and an armed limit raises
//! `AsyncEvent::SrqLimitReached` once.
//!
//! A CQ holds the entries it was created with. A completion that finds it
//! full is lost and raises `AsyncEvent::CqErr` (`poll_async_event`); a
//! receive completion that does not fit also moves its QP to ERR without
//! acknowledging the message, as rxe does, while a lost send completion
//! leaves the QP as it is.
//!
//! What it does not model: UD/UC, memory windows, the async events verbs
//! devices raise beyond CQ overflow and the SRQ limit (QP_FATAL,
//! LAST_WQE_REACHED, port events), and congestion control (ECN/CNP).

#![warn(missing_docs)]

mod actor;
mod config;
pub mod faults;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing_rcsession;
mod node;
mod rng;
mod stats;
mod transport;
mod world;

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;

use rctb_core::time::Instant;
use thiserror::Error;

pub use actor::{Actor, ActorId};
pub use config::{CmFaultStats, CmFaults, FaultAction, LinkConfig, LinkFaults, NodeConfig, ScheduledFault};
pub use faults::{PacketAction, PacketMatch, PacketPredicate, PacketRule, RuleId, RuleStats};
pub use rctb_engine::{Packet, cm, rc};
pub use rng::SimRng;
pub use stats::FabricStats;
pub use transport::SimTransport;

use world::{EventKind, World};

// The README's Rust example runs as a doctest here: it is written against
// this crate, and a doctest keeps the README's code from drifting from the
// API. Only compiled by `cargo test --doc`, so `cargo doc` never renders it.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExample;

/// A node of the fabric.
///
/// Only [`Sim::add_node`] hands ids out, so an id names a node that some
/// fabric added; [`Sim`]'s methods still check that it is one of theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(usize);

impl NodeId {
    /// The node's position in its fabric: 0 for the first node added, then 1, ...
    pub fn index(self) -> usize {
        self.0
    }
}

/// Errors building a fabric.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SimError {
    /// Two nodes with one name.
    #[error("node name {0:?} is already used")]
    DuplicateName(String),
    /// Two nodes with one address.
    #[error("node address {0} is already used")]
    DuplicateIp(Ipv4Addr),
    /// No node has this name.
    #[error("unknown node {0:?}")]
    UnknownNode(String),
    /// A node id of another fabric.
    #[error("node id {} is not a node of this fabric", .0.0)]
    NoSuchNode(NodeId),
    /// A packet rule's field broke its rule.
    #[error("packet rule: {field} must be {rule}")]
    InvalidRule {
        /// The [`PacketRule`] field.
        field: &'static str,
        /// What it must be.
        rule: &'static str,
    },
}

/// The simulated world. A cheap handle: clones share the same world.
#[derive(Clone, Debug)]
pub struct Sim {
    world: Rc<RefCell<World>>,
}

impl Sim {
    /// An empty fabric whose every random draw comes from `seed`.
    pub fn new(seed: u64) -> Self {
        Sim { world: Rc::new(RefCell::new(World::new(seed))) }
    }

    /// The fabric's seed.
    pub fn seed(&self) -> u64 {
        self.world.borrow().seed
    }

    /// Adds a node (names and addresses must be unique).
    pub fn add_node(&self, cfg: NodeConfig) -> Result<NodeId, SimError> {
        let mut w = self.world.borrow_mut();
        if w.node_by_name(&cfg.name).is_some() {
            return Err(SimError::DuplicateName(cfg.name));
        }
        if w.by_ip.contains_key(&cfg.ip) {
            return Err(SimError::DuplicateIp(cfg.ip));
        }
        let (idx, seed) = (w.nodes.len(), w.seed);
        Ok(NodeId(w.add_node(node::Node::new(idx, cfg, seed))))
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Result<NodeId, SimError> {
        self.world.borrow().node_by_name(name).map(NodeId).ok_or_else(|| SimError::UnknownNode(name.into()))
    }

    /// The `Transport` of a node.
    pub fn transport(&self, node: NodeId) -> SimTransport {
        SimTransport { world: self.world.clone(), node: node.0 }
    }

    /// The link configuration used for pairs without one of their own.
    pub fn set_default_link(&self, cfg: LinkConfig) {
        self.world.borrow_mut().set_default_link(cfg);
    }

    /// Configures both directions between `a` and `b`.
    pub fn set_link(&self, a: NodeId, b: NodeId, cfg: LinkConfig) {
        let mut w = self.world.borrow_mut();
        w.set_link(a.0, b.0, cfg);
        w.set_link(b.0, a.0, cfg);
    }

    /// Loses or duplicates CM messages from now on ([`CmFaults`]; the
    /// default, none, turns it off).
    pub fn set_cm_faults(&self, faults: CmFaults) {
        self.world.borrow_mut().cm_faults = faults;
    }

    /// What the CM faults did so far.
    pub fn cm_fault_stats(&self) -> CmFaultStats {
        self.world.borrow().cm_stats
    }

    /// Applies a fault now.
    pub fn apply(&self, action: FaultAction) {
        self.world.borrow_mut().apply_fault(action);
    }

    /// Applies a fault at virtual time `at`.
    /// Applies `fault.action` when virtual time reaches `fault.at`.
    pub fn schedule(&self, fault: ScheduledFault) {
        self.world.borrow_mut().schedule(fault.at, EventKind::Fault(Box::new(fault.action)));
    }

    /// The fabric's virtual time.
    pub fn now(&self) -> Instant {
        self.world.borrow().now
    }

    /// The time of the next pending event.
    pub fn next_event_at(&self) -> Option<Instant> {
        self.world.borrow().next_event_at()
    }

    /// Runs every event of the next pending instant, then the actors;
    /// `None` when idle.
    pub fn step(&self) -> Option<Instant> {
        let at = self.world.borrow_mut().run_next_instant();
        if at.is_some() {
            actor::run_actors(&self.world);
        }
        at
    }

    /// Runs every event up to and including `deadline` (and the actors after
    /// each instant), then sets the clock to it.
    pub fn run_until(&self, deadline: Instant) {
        while self.next_event_at().is_some_and(|t| t <= deadline) {
            self.step();
        }
        self.world.borrow_mut().run_until(deadline);
    }

    /// Registers a peer model on `node`; it runs once now (to listen, say)
    /// and then after every instant.
    pub fn add_actor(&self, node: NodeId, actor: Box<dyn Actor>) -> ActorId {
        let id = {
            let mut w = self.world.borrow_mut();
            w.next_actor += 1;
            let id = ActorId(w.next_actor);
            w.actors.push(actor::ActorSlot { id, node: node.0, actor, wake: None });
            id
        };
        actor::run_actors(&self.world);
        id
    }

    /// Unregisters an actor and hands it back.
    pub fn remove_actor(&self, id: ActorId) -> Option<Box<dyn Actor>> {
        let mut w = self.world.borrow_mut();
        let i = w.actors.iter().position(|s| s.id == id)?;
        Some(w.actors.remove(i).actor)
    }

    /// Runs until no event is pending.
    pub fn run_until_idle(&self) {
        while self.step().is_some() {}
    }

    /// What the fabric counted so far.
    pub fn stats(&self) -> FabricStats {
        self.world.borrow().stats()
    }

    /// Starts recording every frame into a pcap.
    pub fn enable_pcap(&self) {
        self.world.borrow_mut().pcap = Some(rctb_engine::pcap::PcapSink::in_memory());
    }

    /// The pcap recorded so far (recording stops).
    pub fn take_pcap(&self) -> Option<Vec<u8>> {
        self.world.borrow_mut().pcap.take().map(|p| p.into_inner())
    }

    /// Verbs objects (PDs, MRs, CQs, QPs) alive on one node.
    pub fn node_objects(&self, node: NodeId) -> usize {
        let w = self.world.borrow();
        let r = w.nodes[node.0].ep.resources();
        r.pds + r.cqs + r.qps + r.mrs
    }

    /// Sums of the per-QP resources still alive on every node, for leak checks.
    pub fn live_resources(&self) -> LiveResources {
        let w = self.world.borrow();
        let mut r = LiveResources::default();
        for n in &w.nodes {
            let e = n.ep.resources();
            r.pds += e.pds;
            r.cqs += e.cqs;
            r.qps += e.qps;
            r.mrs += e.mrs;
            r.srqs += e.srqs;
        }
        r
    }
}

/// Live verbs objects across the fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveResources {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
}
