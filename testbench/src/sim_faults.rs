//! The fault cases of [`crate::fault_cases`] on the simulator: each
//! [`PacketFault`] becomes one packet rule ([`rctb_sim::PacketRule`]) on
//! the pair of nodes, so the same cases that run against rxe and over UDP
//! run deterministically, from a seed, in `cargo test`.
//!
//! Call order: build the fabric and the two transports, make a
//! [`SimPath`] for the two nodes (`a` requests, `b` responds), and pass it
//! to [`fault_cases::run`](crate::fault_cases::run). The counters are the
//! fabric's ([`rctb_sim::FabricStats`]), so both sides are seen.

use rctb_core::wire::roce::Opcode;
use rctb_sim::{NodeId, PacketAction, PacketMatch, PacketRule, RuleId, Sim, SimTransport};

use crate::fault_cases::{FaultPath, PacketFault, Recovery};
use rctb_conformance::Endpoints;

/// The simulator's packet rules as a [`FaultPath`].
#[derive(Debug)]
pub struct SimPath {
    sim: Sim,
    a: NodeId,
    b: NodeId,
    rule: Option<RuleId>,
    /// What the last rule did, kept when it is cleared.
    acted: u64,
}

impl SimPath {
    /// Faults between node `a` (the requester) and `b`.
    pub fn new(sim: &Sim, a: NodeId, b: NodeId) -> Self {
        SimPath { sim: sim.clone(), a, b, rule: None, acted: 0 }
    }

    /// The rule for `fault`.
    pub fn rule(&self, fault: PacketFault) -> PacketRule {
        let requests = PacketMatch::any().from(self.a).to(self.b).requests();
        match fault {
            PacketFault::DropRequest(n) => PacketRule::new(requests, PacketAction::Drop).skip(n.into()).once(),
            PacketFault::DuplicateRequests => PacketRule::new(requests, PacketAction::Duplicate),
            PacketFault::DropFirstRequests(n) => PacketRule::new(requests, PacketAction::Drop).limit(n.into()),
            PacketFault::DropFirstAck => {
                let acks = PacketMatch::any().from(self.b).to(self.a).opcode(Opcode::ACKNOWLEDGE);
                PacketRule::new(acks, PacketAction::Drop).once()
            }
            PacketFault::DropFirstAtomicAck => {
                let acks = PacketMatch::any().from(self.b).to(self.a).opcode(Opcode::ATOMIC_ACKNOWLEDGE);
                PacketRule::new(acks, PacketAction::Drop).once()
            }
        }
    }

    /// Packets the last installed rule acted on (also after `clear`).
    pub fn last_acted(&self) -> u64 {
        self.rule.and_then(|r| self.sim.rule_stats(r)).map_or(self.acted, |s| s.applied)
    }
}

impl FaultPath<SimTransport> for SimPath {
    fn install(&mut self, _x: &Endpoints<'_, SimTransport>, fault: PacketFault) -> Result<(), String> {
        if let Some(old) = self.rule.take() {
            self.sim.remove_rule(old);
        }
        self.acted = 0;
        let id = self.sim.add_rule(self.rule(fault)).map_err(|e| e.to_string())?;
        self.rule = Some(id);
        Ok(())
    }

    fn acted(&self) -> u64 {
        self.last_acted()
    }

    fn clear(&mut self, _x: &Endpoints<'_, SimTransport>) {
        if let Some(id) = self.rule.take() {
            self.acted = self.sim.remove_rule(id).map_or(0, |s| s.applied);
        }
    }

    fn recovery(&self, _x: &Endpoints<'_, SimTransport>) -> Recovery {
        let s = self.sim.stats();
        Recovery {
            // The fabric counts NAKs as sent; it does not tell which arrived.
            naks_received: None,
            naks_sent: Some(s.seq_naks),
            retransmitted: Some(s.retransmitted),
            timeouts: Some(s.timeouts),
        }
    }
}
