//! Faults a test puts on the fabric by hand, turmoil-style: verbs on
//! [`Sim`] for a pair of nodes or one node, and per-packet rules.
//!
//! # The verbs
//!
//! Each takes effect at once (at [`Sim::now`]); [`Sim::schedule`] with a
//! [`FaultAction`] runs the same code at a later virtual time, and the
//! scenario engine's timed `partition`/`heal` faults are these verbs too.
//! Every verb returns [`SimError::NoSuchNode`] for a node id this fabric
//! did not give, and does nothing then.
//!
//! - [`hold(a, b)`](Sim::hold): both directions between `a` and `b` keep
//!   every RoCEv2 packet and CM message that *arrives* (also those already
//!   on the wire when the hold starts), in arrival order. Nothing is lost
//!   and nothing is delivered; the senders' timers keep running.
//!   [`release(a, b)`](Sim::release) delivers what was kept at once, in
//!   the order it arrived, then lets traffic through again. Holding a held
//!   pair or releasing a free one does nothing.
//! - [`partition(a, b)`](Sim::partition): both directions lose every packet
//!   and CM message *put on the wire* from now on (counted in
//!   `dropped_partition`); what is already on the wire still arrives, what a
//!   hold keeps stays kept. [`repair(a, b)`](Sim::repair) ends it.
//! - [`crash(node)`](Sim::crash): the node loses power. Its engine endpoint
//!   is gone at once with everything in it: PDs, MRs, CQs, QPs and CM
//!   connections with their state, its timers, the packets its QPs had not
//!   sent. Its port is down: what reaches it is lost (`dropped_partition`),
//!   it sends nothing, its actors do not run. Packets it had already put on
//!   the wire still arrive. Its [`SimTransport`](crate::SimTransport)
//!   handles now act on an empty endpoint whose port reports `Down`; nothing
//!   they do leaves the node, and [`bounce`](Sim::bounce) discards it.
//!   Crashing a crashed node does nothing.
//! - [`bounce(node)`](Sim::bounce): the node boots again (a node that is up
//!   crashes first): a fresh endpoint with its port up, the same name,
//!   address and MAC, QPNs handed out from 0x11 again, memory keys drawn
//!   from the seed for this boot. This is what a reboot looks like to an RC
//!   peer: silence. RC has no message for "that QP is gone", so the
//!   peer's packets for the old QPs are dropped as rxe drops packets for an
//!   unknown QPN (`dropped_no_qp`, no NAK), or, if the rebooted node made a
//!   new QP that got the same number, that QP judges them by its own state
//!   and PSNs. The peer's requester retries until its `retry_cnt` is spent
//!   and completes the WR with `RetryExceeded` (the rest flush). Actors are
//!   not restarted: remove them ([`Sim::remove_actor`]) and add new ones.
//!
//! # Packet rules
//!
//! [`Sim::add_rule`] installs a [`PacketRule`]: a [`PacketMatch`] (sender,
//! receiver, destination QPN, opcode, PSN, a predicate over the decoded
//! packet), a [`PacketAction`] (drop, delay, duplicate, corrupt), how many
//! matches to let by first (`skip`), how many to act on (`limit`) and a
//! probability (`chance`, drawn from the fabric's seeded RNG for rules, so
//! one seed gives one run). [`Sim::rule_stats`] says how many packets a
//! rule matched and acted on; [`Sim::remove_rule`] and [`Sim::clear_rules`]
//! take rules away. With no rule installed a packet costs one branch more.
//!
//! Where a packet meets each fault, in this order, when a node transmits it:
//!
//! 1. It is counted (`frames_sent`) and recorded in the pcap, as at the
//!    sender's port: a packet a rule drops still shows there.
//! 2. No node owns its address: `dropped_no_route`. The pair is
//!    partitioned or the receiver is down: `dropped_partition`.
//! 3. The rules, in the order they were added: every rule whose matcher
//!    matches counts the packet; the first of them that is past its `skip`,
//!    under its `limit` and wins its `chance` acts on it, and no later rule
//!    sees it. `Drop`: lost (`dropped_rule`). `Delay(d)`: it arrives `d`
//!    later, and later packets overtake it (`delayed`). `Duplicate`: a copy
//!    arrives 1 ns after it (`duplicated`). `Corrupt`: it is damaged so its
//!    ICRC fails ([`Packet::corrupt`]); it crosses the link and the receiver
//!    drops it silently, as rxe does (`dropped_corrupt`).
//! 4. The link's random faults ([`LinkFaults`](crate::LinkFaults)), as
//!    without rules.
//! 5. It arrives; a held pair keeps it (`held`) until released.
//! 6. The receiver: damaged: `dropped_corrupt`; down: `dropped_partition`;
//!    no QP with its destination QPN: `dropped_no_qp`; else `delivered`.

use std::fmt;
use std::rc::Rc;

use rctb_core::time::Duration;
use rctb_core::transport::Psn;
use rctb_core::wire::roce::Opcode;
use rctb_engine::Packet;

use crate::rng::SimRng;
use crate::world::NodeIdx;
use crate::{FaultAction, NodeId, Sim, SimError};

/// A test over a decoded packet (see [`PacketMatch::when`]).
pub type PacketPredicate = Rc<dyn Fn(&Packet) -> bool>;

/// Which packets a [`PacketRule`] looks at: every field that is set must
/// match. [`PacketMatch::any`] matches every packet; the builder methods
/// narrow it.
#[derive(Clone, Default)]
pub struct PacketMatch {
    /// The node that sent it.
    pub from: Option<NodeId>,
    /// The node its destination address belongs to.
    pub to: Option<NodeId>,
    /// The BTH's destination QP number.
    pub dest_qp: Option<u32>,
    /// The BTH's opcode.
    pub opcode: Option<Opcode>,
    /// The BTH's PSN.
    pub psn: Option<Psn>,
    /// Any test over the decoded packet (BTH, RETH, AETH, payload).
    pub when: Option<PacketPredicate>,
}

impl fmt::Debug for PacketMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketMatch")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("dest_qp", &self.dest_qp)
            .field("opcode", &self.opcode)
            .field("psn", &self.psn)
            .field("when", &self.when.as_ref().map(|_| ".."))
            .finish()
    }
}

impl PacketMatch {
    /// Every packet.
    pub fn any() -> Self {
        Self::default()
    }

    /// ... sent by `node`.
    pub fn from(mut self, node: NodeId) -> Self {
        self.from = Some(node);
        self
    }

    /// ... addressed to `node`.
    pub fn to(mut self, node: NodeId) -> Self {
        self.to = Some(node);
        self
    }

    /// ... for destination QP `qpn`.
    pub fn dest_qp(mut self, qpn: u32) -> Self {
        self.dest_qp = Some(qpn);
        self
    }

    /// ... with opcode `op`.
    pub fn opcode(mut self, op: Opcode) -> Self {
        self.opcode = Some(op);
        self
    }

    /// ... with PSN `psn`.
    pub fn psn(mut self, psn: Psn) -> Self {
        self.psn = Some(psn);
        self
    }

    /// Also requires `f` to hold for the packet.
    pub fn when(mut self, f: impl Fn(&Packet) -> bool + 'static) -> Self {
        self.when = Some(Rc::new(f));
        self
    }

    /// Request packets only: not ACKs (or NAKs), atomic ACKs or READ responses.
    pub fn requests(self) -> Self {
        self.when(|p| !p.bth.opcode.is_response())
    }

    #[inline]
    fn matches(&self, from: NodeIdx, to: NodeIdx, pkt: &Packet) -> bool {
        self.from.is_none_or(|n| n.0 == from)
            && self.to.is_none_or(|n| n.0 == to)
            && self.dest_qp.is_none_or(|q| q == pkt.bth.dest_qp)
            && self.opcode.is_none_or(|op| op == pkt.bth.opcode)
            && self.psn.is_none_or(|p| p == pkt.bth.psn)
            && self.when.as_ref().is_none_or(|f| f(pkt))
    }
}

/// What a [`PacketRule`] does to a packet it acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PacketAction {
    /// Lost on the link.
    Drop,
    /// Arrives this much later than it would have; later packets overtake it.
    Delay(Duration),
    /// Arrives twice (the copy 1 ns after it).
    Duplicate,
    /// Damaged on the link: its ICRC fails and the receiver drops it.
    Corrupt,
}

/// One per-packet rule: which packets, what to do, how often.
#[derive(Clone, Debug)]
pub struct PacketRule {
    /// Which packets.
    pub matcher: PacketMatch,
    /// What becomes of them.
    pub action: PacketAction,
    /// Matching packets let through before it acts (0: from the first).
    pub skip: u64,
    /// The most packets it acts on (`None`: every one after `skip`).
    pub limit: Option<u64>,
    /// Probability it acts on a packet it could act on (1.0: always).
    pub chance: f64,
}

impl PacketRule {
    /// Acts on every packet `matcher` matches.
    pub fn new(matcher: PacketMatch, action: PacketAction) -> Self {
        PacketRule { matcher, action, skip: 0, limit: None, chance: 1.0 }
    }

    /// Lets the first `n` matching packets through.
    pub fn skip(mut self, n: u64) -> Self {
        self.skip = n;
        self
    }

    /// Acts on `n` packets at most.
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// Acts on one packet only.
    pub fn once(self) -> Self {
        self.limit(1)
    }

    /// Acts on each packet it could act on with probability `p` (a draw
    /// from the fabric's seed).
    pub fn chance(mut self, p: f64) -> Self {
        self.chance = p;
        self
    }
}

/// Identifies an installed rule. Only the fabric that installs a rule hands
/// its id out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId(pub(crate) u64);

/// What a rule saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleStats {
    /// Packets its matcher matched (and it saw: an earlier rule that acted
    /// hides a packet from the later ones).
    pub matched: u64,
    /// Packets it acted on.
    pub applied: u64,
}

#[derive(Debug)]
struct Installed {
    id: RuleId,
    rule: PacketRule,
    stats: RuleStats,
}

/// The installed rules, in order, and the RNG of their `chance`.
#[derive(Debug)]
pub(crate) struct Rules {
    list: Vec<Installed>,
    next: u64,
    rng: SimRng,
}

impl Rules {
    pub fn new(seed: u64) -> Self {
        Rules { list: Vec::new(), next: 0, rng: SimRng::child(seed, "rules") }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// What the rules do to a packet from `from` to `to` (step 3 of the
    /// module docs).
    pub fn decide(&mut self, from: NodeIdx, to: NodeIdx, pkt: &Packet) -> Option<PacketAction> {
        for r in &mut self.list {
            if !r.rule.matcher.matches(from, to, pkt) {
                continue;
            }
            r.stats.matched += 1;
            let due = r.stats.matched > r.rule.skip && r.rule.limit.is_none_or(|l| r.stats.applied < l);
            // `chance` 1.0 draws nothing, so rules without one leave the RNG alone.
            if due && (r.rule.chance >= 1.0 || self.rng.chance(r.rule.chance)) {
                r.stats.applied += 1;
                return Some(r.rule.action);
            }
        }
        None
    }
}

impl Sim {
    fn check(&self, node: NodeId) -> Result<NodeIdx, SimError> {
        if node.0 < self.world.borrow().nodes.len() { Ok(node.0) } else { Err(SimError::NoSuchNode(node)) }
    }

    fn names(&self, a: NodeId, b: NodeId) -> Result<(String, String), SimError> {
        let (a, b) = (self.check(a)?, self.check(b)?);
        let w = self.world.borrow();
        Ok((w.nodes[a].cfg.name.clone(), w.nodes[b].cfg.name.clone()))
    }

    fn name(&self, node: NodeId) -> Result<String, SimError> {
        let n = self.check(node)?;
        Ok(self.world.borrow().nodes[n].cfg.name.clone())
    }

    /// Keeps what arrives between `a` and `b`, both ways, until
    /// [`release`](Self::release) (module docs: `faults`).
    pub fn hold(&self, a: NodeId, b: NodeId) -> Result<(), SimError> {
        let (a, b) = self.names(a, b)?;
        self.apply(FaultAction::Hold { a, b });
        Ok(())
    }

    /// Delivers what a [`hold`](Self::hold) kept, in arrival order, and
    /// ends it.
    pub fn release(&self, a: NodeId, b: NodeId) -> Result<(), SimError> {
        let (a, b) = self.names(a, b)?;
        self.apply(FaultAction::Release { a, b });
        Ok(())
    }

    /// Loses what `a` and `b` put on the wire to each other from now on,
    /// until [`repair`](Self::repair).
    pub fn partition(&self, a: NodeId, b: NodeId) -> Result<(), SimError> {
        let (a, b) = self.names(a, b)?;
        self.apply(FaultAction::Partition { a, b });
        Ok(())
    }

    /// Ends a [`partition`](Self::partition).
    pub fn repair(&self, a: NodeId, b: NodeId) -> Result<(), SimError> {
        let (a, b) = self.names(a, b)?;
        self.apply(FaultAction::Heal { a, b });
        Ok(())
    }

    /// Whether `a` and `b` are partitioned.
    pub fn partitioned(&self, a: NodeId, b: NodeId) -> Result<bool, SimError> {
        let (a, b) = (self.check(a)?, self.check(b)?);
        Ok(self.world.borrow().partitioned(a, b))
    }

    /// Whether a hold keeps what arrives between `a` and `b`.
    pub fn held(&self, a: NodeId, b: NodeId) -> Result<bool, SimError> {
        let (a, b) = (self.check(a)?, self.check(b)?);
        Ok(self.world.borrow().held(a, b))
    }

    /// Powers `node` off: its endpoint and everything in it is gone, its
    /// port is down (module docs: `faults`).
    pub fn crash(&self, node: NodeId) -> Result<(), SimError> {
        let node = self.name(node)?;
        self.apply(FaultAction::Crash { node });
        Ok(())
    }

    /// Boots `node` again with a fresh endpoint (crashing it first if it
    /// is up).
    pub fn bounce(&self, node: NodeId) -> Result<(), SimError> {
        let node = self.name(node)?;
        self.apply(FaultAction::Bounce { node });
        Ok(())
    }

    /// Whether `node` is powered (not crashed, or bounced since).
    pub fn is_up(&self, node: NodeId) -> Result<bool, SimError> {
        let n = self.check(node)?;
        Ok(!self.world.borrow().nodes[n].down)
    }

    /// Installs a packet rule after the ones installed before.
    ///
    /// Errors: [`SimError::NoSuchNode`] for a `from`/`to` this fabric did
    /// not give; [`SimError::InvalidRule`] for a `chance` outside 0..=1 or
    /// a `Delay` longer than an hour.
    pub fn add_rule(&self, rule: PacketRule) -> Result<RuleId, SimError> {
        for n in [rule.matcher.from, rule.matcher.to].into_iter().flatten() {
            self.check(n)?;
        }
        if !(0.0..=1.0).contains(&rule.chance) {
            return Err(SimError::InvalidRule { field: "chance", rule: "a probability within 0..=1" });
        }
        if let PacketAction::Delay(d) = rule.action
            && d > Duration::from_secs(3600)
        {
            return Err(SimError::InvalidRule { field: "action.delay", rule: "at most 3600 s" });
        }
        let mut w = self.world.borrow_mut();
        let rules = &mut w.rules;
        rules.next += 1;
        let id = RuleId(rules.next);
        rules.list.push(Installed { id, rule, stats: RuleStats::default() });
        w.update_by_hand();
        Ok(id)
    }

    /// What an installed rule has seen; `None` if it is not installed.
    pub fn rule_stats(&self, id: RuleId) -> Option<RuleStats> {
        self.world.borrow().rules.list.iter().find(|r| r.id == id).map(|r| r.stats)
    }

    /// Uninstalls a rule; returns what it saw.
    pub fn remove_rule(&self, id: RuleId) -> Option<RuleStats> {
        let mut w = self.world.borrow_mut();
        let i = w.rules.list.iter().position(|r| r.id == id)?;
        let stats = w.rules.list.remove(i).stats;
        w.update_by_hand();
        Some(stats)
    }

    /// Uninstalls every rule.
    pub fn clear_rules(&self) {
        let mut w = self.world.borrow_mut();
        w.rules.list.clear();
        w.update_by_hand();
    }
}
