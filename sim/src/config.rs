//! Fabric configuration: nodes, links and faults.

use std::net::Ipv4Addr;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::Mtu;

/// A simulated host with one RoCEv2 port.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeConfig {
    pub name: String,
    pub ip: Ipv4Addr,
    /// The port's active MTU (what `ibv_query_port` reports).
    pub mtu: Mtu,
    /// Egress bandwidth in bits per second; 0 = unlimited.
    pub bandwidth_bps: u64,
}

impl NodeConfig {
    pub fn new(name: impl Into<String>, ip: Ipv4Addr) -> Self {
        NodeConfig { name: name.into(), ip, mtu: Mtu::Mtu4096, bandwidth_bps: 100_000_000_000 }
    }
}

/// Per-packet fault probabilities of one link direction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFaults {
    /// Probability a packet is lost.
    pub drop: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet is held back by up to `reorder_window`, so later
    /// packets overtake it.
    pub reorder: f64,
    pub reorder_window: Duration,
    /// Probability a packet is damaged (the receiver's ICRC check drops it).
    pub corrupt: f64,
    /// Extra delay drawn uniformly from [0, jitter] for every packet.
    pub jitter: Duration,
}

impl LinkFaults {
    pub fn is_clean(&self) -> bool {
        self.drop == 0.0 && self.duplicate == 0.0 && self.reorder == 0.0 && self.corrupt == 0.0 && self.jitter.is_zero()
    }
}

/// Loss and duplication of RDMA CM messages, fabric-wide and apart from
/// the links' packet faults (`Sim::set_cm_faults`): CM retransmits what
/// got no answer and answers duplicates (see `rctb_engine::cm`), so under
/// these a connect or disconnect takes longer, or ends in the typed
/// timeout, but never in two outcomes. Draws come from a random stream of
/// their own: turning them on changes no packet's fate.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CmFaults {
    /// Probability a CM message is lost.
    pub drop: f64,
    /// Probability a CM message arrives twice.
    pub duplicate: f64,
}

/// What [`CmFaults`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmFaultStats {
    pub dropped: u64,
    pub duplicated: u64,
}

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation latency.
    pub latency: Duration,
    pub faults: LinkFaults,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig { latency: Duration::from_micros(1), faults: LinkFaults::default() }
    }
}

/// A fault on named nodes, applied now ([`Sim::apply`](crate::Sim::apply))
/// or at a point in virtual time ([`Sim::schedule`](crate::Sim::schedule)).
/// Each is one of the fault verbs of [`Sim`](crate::Sim) (see the crate's
/// `faults` docs for what each does); an unknown name makes it a no-op.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Cut both directions between two nodes (by name): [`Sim::partition`](crate::Sim::partition).
    Partition { a: String, b: String },
    /// Restore both directions: [`Sim::repair`](crate::Sim::repair).
    Heal { a: String, b: String },
    /// Replace the fault probabilities of both directions.
    SetFaults { a: String, b: String, faults: LinkFaults },
    /// Keep what arrives in both directions until released: [`Sim::hold`](crate::Sim::hold).
    Hold { a: String, b: String },
    /// Deliver what a hold kept, in order: [`Sim::release`](crate::Sim::release).
    Release { a: String, b: String },
    /// Power a node off: [`Sim::crash`](crate::Sim::crash).
    Crash { node: String },
    /// Boot a node afresh: [`Sim::bounce`](crate::Sim::bounce).
    Bounce { node: String },
}

impl FaultAction {
    /// The names of the nodes it acts on.
    pub fn nodes(&self) -> Vec<&str> {
        match self {
            FaultAction::Partition { a, b }
            | FaultAction::Heal { a, b }
            | FaultAction::SetFaults { a, b, .. }
            | FaultAction::Hold { a, b }
            | FaultAction::Release { a, b } => vec![a, b],
            FaultAction::Crash { node } | FaultAction::Bounce { node } => vec![node],
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledFault {
    pub at: Instant,
    pub action: FaultAction,
}
