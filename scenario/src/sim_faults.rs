//! The fault cases of [`crate::fault_cases`] on the simulator: each
//! [`PacketFault`] becomes one packet rule ([`rctb_sim::PacketRule`]) on
//! the pair of nodes, so the same cases that run against rxe and over UDP
//! run deterministically, from a seed, in `cargo test`.
//!
//! Call order: build the fabric and the two transports, make a
//! [`SimPath`] for the two nodes (`a` requests, `b` responds), and pass it
//! to [`fault_cases::run`](crate::fault_cases::run). The counters are the
//! fabric's ([`rctb_sim::FabricStats`]), so both sides are seen.

use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_sim::{NodeId, PacketAction, PacketMatch, PacketRule, RuleId, Sim, SimTransport};

use crate::fault_cases::{FaultPath, PacketFault, Recovery};
use rctb_conformance::Endpoints;

/// The simulator's packet rules as a [`FaultPath`].
#[derive(Debug)]
pub struct SimPath {
    sim: Sim,
    a: NodeId,
    b: NodeId,
    rules: Vec<RuleId>,
    /// What the last rules did, kept when they are cleared.
    acted: u64,
}

impl SimPath {
    /// Faults between node `a` (the requester) and `b`.
    pub fn new(sim: &Sim, a: NodeId, b: NodeId) -> Self {
        SimPath { sim: sim.clone(), a, b, rules: Vec::new(), acted: 0 }
    }

    /// The rules for `fault` (one, or two for a fault on both directions).
    pub fn rules(&self, fault: PacketFault) -> Vec<PacketRule> {
        if let PacketFault::DropRequestDuplicateNaks(n) = fault {
            let seq_naks = PacketMatch::any()
                .from(self.b)
                .to(self.a)
                .opcode(Opcode::ACKNOWLEDGE)
                .when(|p| p.aeth.is_some_and(|a| a.kind() == AckKind::Nak(NakCode::PsnSequenceError)));
            return vec![self.rule(PacketFault::DropRequest(n)), PacketRule::new(seq_naks, PacketAction::Duplicate)];
        }
        vec![self.rule(fault)]
    }

    fn rule(&self, fault: PacketFault) -> PacketRule {
        let requests = PacketMatch::any().from(self.a).to(self.b).requests();
        match fault {
            PacketFault::DropRequest(n) | PacketFault::DropRequestDuplicateNaks(n) => {
                PacketRule::new(requests, PacketAction::Drop).skip(n.into()).once()
            }
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

    /// Packets the last installed rules acted on (also after `clear`).
    pub fn last_acted(&self) -> u64 {
        if self.rules.is_empty() {
            return self.acted;
        }
        self.rules.iter().filter_map(|r| self.sim.rule_stats(*r)).map(|s| s.applied).sum()
    }
}

impl FaultPath<SimTransport> for SimPath {
    fn install(&mut self, _x: &Endpoints<'_, SimTransport>, fault: PacketFault) -> Result<(), String> {
        for old in self.rules.drain(..) {
            self.sim.remove_rule(old);
        }
        self.acted = 0;
        for rule in self.rules(fault) {
            let id = self.sim.add_rule(rule).map_err(|e| e.to_string())?;
            self.rules.push(id);
        }
        Ok(())
    }

    fn acted(&self) -> u64 {
        self.last_acted()
    }

    fn clear(&mut self, _x: &Endpoints<'_, SimTransport>) {
        self.acted = self.rules.drain(..).filter_map(|id| self.sim.remove_rule(id)).map(|s| s.applied).sum();
    }

    fn recovery(&self, _x: &Endpoints<'_, SimTransport>) -> Recovery {
        let s = self.sim.stats();
        Recovery {
            // The fabric counts NAKs as sent; it does not tell which arrived.
            naks_received: None,
            naks_sent: Some(s.seq_naks),
            retransmitted: Some(s.retransmitted),
            timeouts: Some(s.timeouts),
            rnr_naks: Some(s.rnr_naks),
        }
    }
}
