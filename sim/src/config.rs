//! Fabric configuration: nodes, links and faults.

use std::net::Ipv4Addr;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::Mtu;

/// A simulated host with one RoCEv2 port.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NodeConfig {
    /// The node's name (unique in the fabric; scenarios and faults use it).
    pub name: String,
    /// Its IPv4 address (its GID is the IPv4-mapped one).
    pub ip: Ipv4Addr,
    /// The port's active MTU (what `ibv_query_port` reports).
    pub mtu: Mtu,
    /// Egress bandwidth in bits per second; 0 = unlimited.
    pub bandwidth_bps: u64,
}

impl NodeConfig {
    /// A node `name` at `ip`: MTU 4096, 100 Gb/s.
    pub fn new(name: impl Into<String>, ip: Ipv4Addr) -> Self {
        NodeConfig { name: name.into(), ip, mtu: Mtu::Mtu4096, bandwidth_bps: 100_000_000_000 }
    }
}

/// Per-packet fault probabilities of one link direction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct LinkFaults {
    /// Probability a packet is lost.
    pub drop: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet is held back by up to `reorder_window`, so later
    /// packets overtake it.
    pub reorder: f64,
    /// How far back a reordered packet is held, at most.
    pub reorder_window: Duration,
    /// Probability a packet is damaged (the receiver's ICRC check drops it).
    pub corrupt: f64,
    /// Extra delay drawn uniformly from [0, jitter] for every packet.
    pub jitter: Duration,
}

impl LinkFaults {
    /// Whether no fault is set.
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
#[non_exhaustive]
pub struct CmFaults {
    /// Probability a CM message is lost.
    pub drop: f64,
    /// Probability a CM message arrives twice.
    pub duplicate: f64,
}

/// What [`CmFaults`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmFaultStats {
    /// CM messages lost.
    pub dropped: u64,
    /// CM messages delivered twice.
    pub duplicated: u64,
}

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct LinkConfig {
    /// One-way propagation latency.
    pub latency: Duration,
    /// Its random faults.
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
#[non_exhaustive]
pub enum FaultAction {
    /// Cut both directions between two nodes (by name): [`Sim::partition`](crate::Sim::partition).
    Partition {
        /// One node, by name.
        a: String,
        /// The other.
        b: String,
    },
    /// Restore both directions: [`Sim::repair`](crate::Sim::repair).
    Heal {
        /// One node, by name.
        a: String,
        /// The other.
        b: String,
    },
    /// Replace the fault probabilities of both directions.
    SetFaults {
        /// One node, by name.
        a: String,
        /// The other.
        b: String,
        /// The new probabilities.
        faults: LinkFaults,
    },
    /// Keep what arrives in both directions until released: [`Sim::hold`](crate::Sim::hold).
    Hold {
        /// One node, by name.
        a: String,
        /// The other.
        b: String,
    },
    /// Deliver what a hold kept, in order: [`Sim::release`](crate::Sim::release).
    Release {
        /// One node, by name.
        a: String,
        /// The other.
        b: String,
    },
    /// Power a node off: [`Sim::crash`](crate::Sim::crash).
    Crash {
        /// The node, by name.
        node: String,
    },
    /// Boot a node afresh: [`Sim::bounce`](crate::Sim::bounce).
    Bounce {
        /// The node, by name.
        node: String,
    },
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

/// A fault to apply at a virtual instant ([`Sim::schedule`](crate::Sim::schedule)).
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledFault {
    /// When.
    pub at: Instant,
    /// What.
    pub action: FaultAction,
}
