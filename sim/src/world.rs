//! The simulated world: virtual clock, event queue, nodes, links, faults.
//!
//! Events at the same instant run in the order they were scheduled (a
//! sequence number breaks ties), and every random draw comes from a seeded
//! child RNG, so one seed gives one trace. The fault verbs and the packet
//! rules' place on the path are in `world/faults.rs` (the contract: the
//! crate's `faults` module); the packet path from egress to delivery is
//! `world/path.rs`.

mod faults;
mod path;

use std::cmp::{Ordering, Reverse};
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::net::Ipv4Addr;

use rctb_core::time::{Duration, Instant};
use rctb_engine::{CmMessage, CmTransmit, Packet, PacketDrop, SentCounts};

use crate::config::{CmFaultStats, CmFaults, FaultAction, LinkConfig, LinkFaults};
use crate::faults::Rules;
use crate::node::Node;
use crate::rng::SimRng;
use crate::stats::FabricStats;
use path::second_arrival;

pub(crate) type NodeIdx = usize;

/// Nodes as events name them: 32 bits, so that an event is 16 bytes and
/// the heap moves and compares little ([`World::add_node`] keeps the count
/// within it).
pub(crate) type EvNode = u32;

#[derive(Debug)]
pub(crate) enum EventKind {
    /// `pkt` indexes `World::in_flight` (keeps events small for the heap).
    Deliver {
        from: EvNode,
        to: EvNode,
        pkt: u32,
    },
    /// The head of a link's in-order queue arrives.
    LinkDeliver {
        from: EvNode,
        to: EvNode,
    },
    Egress {
        node: EvNode,
    },
    /// The node's endpoint asked to run its timers now.
    Timer {
        node: EvNode,
    },
    // Rare and large: boxed so the common events stay small in the heap.
    Cm(Box<CmDelivery>),
    Fault(Box<FaultAction>),
    /// Nothing happens: an actor asked to run at this time.
    Wake,
}

/// A CM message on its way.
#[derive(Debug)]
pub(crate) struct CmDelivery {
    from: NodeIdx,
    to: NodeIdx,
    msg: CmMessage,
}

/// An event in the heap: due at `key >> 64` nanoseconds, scheduled
/// `key as u64`-th. The (time, sequence) order is one 128-bit comparison.
#[derive(Debug)]
struct Event {
    key: u128,
    kind: EventKind,
}

impl Event {
    fn new(at: Instant, seq: u64, kind: EventKind) -> Self {
        Event { key: Self::key(at, seq), kind }
    }

    fn key(at: Instant, seq: u64) -> u128 {
        (u128::from(at.as_nanos()) << 64) | u128::from(seq)
    }

    fn at(&self) -> Instant {
        Instant::from_nanos((self.key >> 64) as u64)
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

#[derive(Debug)]
struct Link {
    cfg: LinkConfig,
    rng: SimRng,
    /// Packets arriving in order, as a chain of in-flight slots from
    /// `head` to `tail` (each slot's successor and arrival are in
    /// `World::chain`; [`NO_SLOT`] when the chain is empty). Only the head
    /// is in the event heap, so the heap stays small however many packets
    /// are on the wire. Packets a fault holds back go through the heap
    /// instead.
    head: u32,
    tail: u32,
    /// Configured for this pair (else it follows the default link).
    custom: bool,
    /// A hold is on: what arrives waits here, in arrival order.
    held: Option<VecDeque<faults::Held>>,
    /// `cfg.faults.is_clean()` and `cfg.latency` in nanoseconds (saturated),
    /// kept by `Link::set_cfg` for the per-packet path.
    clean: bool,
    latency_ns: u64,
    /// When the chain's last packet arrives (the in-order test reads it
    /// for every packet).
    tail_at: Instant,
}

/// No slot: the end of a link's chain.
const NO_SLOT: u32 = u32::MAX;

/// Where an in-flight packet stands in its link's in-order chain.
#[derive(Clone, Copy, Debug)]
struct ChainLink {
    /// When it arrives.
    at: Instant,
    /// The packet after it on the same link, or [`NO_SLOT`].
    next: u32,
}

impl Link {
    fn new(cfg: LinkConfig, rng: SimRng, custom: bool) -> Self {
        let mut link = Link {
            cfg,
            rng,
            head: NO_SLOT,
            tail: NO_SLOT,
            custom,
            held: None,
            clean: true,
            latency_ns: 0,
            tail_at: Instant::ZERO,
        };
        link.set_cfg(cfg);
        link
    }

    fn set_cfg(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
        self.clean = cfg.faults.is_clean();
        self.latency_ns = u64::try_from(cfg.latency.as_nanos()).unwrap_or(u64::MAX);
    }
}

/// How [`World::wait_step`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitStep {
    /// The node has a completion or CM event.
    Ready,
    /// Nothing was due by the deadline.
    TimedOut,
    /// An instant ran and actors are registered: run them, then step again.
    RunActors,
}

/// The pending events.
#[derive(Debug, Default)]
struct Queue {
    seq: u64,
    events: BinaryHeap<Reverse<Event>>,
    /// Events scheduled for the current instant while the clock is on it,
    /// in the order scheduled. Every event of the heap at this instant was
    /// scheduled earlier (before the clock reached it), so the heap's come
    /// first and these after, which is the (time, sequence) order; they
    /// skip the heap's push and pop (an ACK's egress pass is one).
    now_queue: VecDeque<EventKind>,
}

impl Queue {
    /// Schedules `kind` at `at`, the clock being at `now`.
    #[inline(always)]
    fn schedule(&mut self, now: Instant, at: Instant, kind: EventKind) {
        self.seq += 1;
        if at <= now {
            self.now_queue.push_back(kind);
        } else {
            self.events.push(Reverse(Event::new(at, self.seq, kind)));
        }
    }
}

/// The whole simulated fabric.
#[derive(Debug)]
pub(crate) struct World {
    pub seed: u64,
    pub now: Instant,
    /// The pending events, apart from the nodes so that a node in hand can
    /// schedule.
    queue: Queue,
    pub nodes: Vec<Node>,
    pub by_ip: BTreeMap<Ipv4Addr, NodeIdx>,
    /// Every ordered pair's link, loopback included: `from`'s row, `to`'s
    /// column ([`World::link_index`]).
    links: Vec<Link>,
    default_link: LinkConfig,
    partitions: BTreeSet<(NodeIdx, NodeIdx)>,
    /// Per-packet rules a test installed (`faults.rs`).
    pub rules: Rules,
    /// A partition or a rule is on: `transmit` asks `hand_faults`. Kept by
    /// `World::update_by_hand` after every change to either.
    by_hand: bool,
    /// Nodes crashed and not booted since (their actors do not run).
    pub down_nodes: usize,
    pub stats: FabricStats,
    /// The sent packets by kind (`stats` has the rest of the counts).
    pub sent: SentCounts,
    /// Loss and duplication of CM messages, with their own random stream.
    pub cm_faults: CmFaults,
    cm_rng: SimRng,
    pub cm_stats: CmFaultStats,
    pub pcap: Option<rctb_engine::pcap::PcapSink<Vec<u8>>>,
    /// Peer models run after every instant (see `actor.rs`).
    pub actors: Vec<crate::actor::ActorSlot>,
    pub next_actor: u64,
    /// Packets on the wire, by slot; `free_slots` lists the free ones
    /// (whose packets are leftovers, kept for their payload buffers).
    in_flight: Vec<Packet>,
    /// Each slot's place in its link's chain (`Link::head`), beside
    /// `in_flight` (a chain is walked without touching the packets).
    chain: Vec<ChainLink>,
    free_slots: Vec<u32>,
}

/// Packets one egress pass may commit to the wire.
const TX_BURST: u32 = 16;

impl World {
    pub fn new(seed: u64) -> Self {
        World {
            seed,
            now: Instant::ZERO,
            queue: Queue::default(),
            nodes: Vec::new(),
            by_ip: BTreeMap::new(),
            links: Vec::new(),
            default_link: LinkConfig::default(),
            partitions: BTreeSet::new(),
            rules: Rules::new(seed),
            by_hand: false,
            down_nodes: 0,
            stats: FabricStats::default(),
            sent: SentCounts::default(),
            cm_faults: CmFaults::default(),
            cm_rng: SimRng::child(seed, "cm"),
            cm_stats: CmFaultStats::default(),
            pcap: None,
            actors: Vec::new(),
            next_actor: 0,
            in_flight: Vec::new(),
            chain: Vec::new(),
            free_slots: Vec::new(),
        }
    }

    pub fn schedule(&mut self, at: Instant, kind: EventKind) {
        self.queue.schedule(self.now, at, kind);
    }

    pub fn next_event_at(&self) -> Option<Instant> {
        let q = &self.queue;
        if q.now_queue.is_empty() { q.events.peek().map(|Reverse(e)| e.at()) } else { Some(self.now) }
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeIdx> {
        self.nodes.iter().position(|n| n.cfg.name == name)
    }

    /// Adds a node and the links between it and every other node.
    pub fn add_node(&mut self, node: crate::node::Node) -> NodeIdx {
        let idx = self.nodes.len();
        // Events name nodes in 32 bits; the links grow as the square of
        // the node count, so memory runs out long before this could.
        assert!(u32::try_from(idx).is_ok(), "at most 2^32 nodes");
        self.by_ip.insert(node.cfg.ip, idx);
        self.nodes.push(node);
        // The links are one row-major square (`link_index`): the old rows
        // move over in order, the new node's row and column are created.
        let n = idx + 1;
        let mut old = std::mem::take(&mut self.links).into_iter();
        let mut links = Vec::with_capacity(n * n);
        for from in 0..n {
            for to in 0..n {
                if from < idx && to < idx {
                    links.extend(old.next());
                    continue;
                }
                let label = format!("link/{}/{}", self.nodes[from].cfg.name, self.nodes[to].cfg.name);
                let rng = SimRng::child(self.seed, &label);
                // A node's path to itself (a QP connected to a QP of the
                // same node, as verbs and rxe allow) is loopback: no
                // faults, and the fabric's defaults never apply to it.
                let (cfg, custom) = if from == to { (LinkConfig::default(), true) } else { (self.default_link, false) };
                links.push(Link::new(cfg, rng, custom));
            }
        }
        self.links = links;
        idx
    }

    /// Where the link from `from` to `to` is in `links`.
    #[inline(always)]
    fn link_index(&self, from: NodeIdx, to: NodeIdx) -> usize {
        link_index(self.nodes.len(), from, to)
    }

    #[inline(always)]
    fn link(&mut self, from: NodeIdx, to: NodeIdx) -> &mut Link {
        let i = self.link_index(from, to);
        &mut self.links[i]
    }

    /// The link from `from` to `to`, if both are nodes.
    fn link_ref(&self, from: NodeIdx, to: NodeIdx) -> Option<&Link> {
        let n = self.nodes.len();
        if from < n && to < n { self.links.get(self.link_index(from, to)) } else { None }
    }

    /// One-way latency from `from` to `to`.
    pub fn latency(&self, from: NodeIdx, to: NodeIdx) -> Duration {
        self.link_ref(from, to).map_or(self.default_link.latency, |l| l.cfg.latency)
    }

    /// Sets the configuration of every link nobody configured on its own.
    pub fn set_default_link(&mut self, cfg: LinkConfig) {
        self.default_link = cfg;
        for link in &mut self.links {
            if !link.custom {
                link.set_cfg(cfg);
            }
        }
    }

    pub fn set_link(&mut self, from: NodeIdx, to: NodeIdx, cfg: LinkConfig) {
        let link = self.link(from, to);
        link.set_cfg(cfg);
        link.custom = true;
    }

    pub fn set_faults(&mut self, a: NodeIdx, b: NodeIdx, faults: LinkFaults) {
        for (from, to) in [(a, b), (b, a)] {
            let link = self.link(from, to);
            link.set_cfg(LinkConfig { faults, ..link.cfg });
            link.custom = true;
        }
    }

    fn pair(a: NodeIdx, b: NodeIdx) -> (NodeIdx, NodeIdx) {
        (a.min(b), a.max(b))
    }

    pub fn partitioned(&self, a: NodeIdx, b: NodeIdx) -> bool {
        self.partitions.contains(&Self::pair(a, b))
    }

    /// Runs every event scheduled at the earliest pending instant. Returns that
    /// instant, or `None` when nothing is pending.
    pub fn run_next_instant(&mut self) -> Option<Instant> {
        let at = self.next_event_at()?;
        self.run_instant(at);
        Some(at)
    }

    /// What `SimTransport::wait` does between two actor passes: runs
    /// instants until `node` has an event on `cqs` (`Ready`), nothing is
    /// due by `deadline` (`TimedOut`, the clock moved to it), or an instant
    /// ran while actors are registered (`RunActors`: they run next). One
    /// borrow of the world for a whole stretch of instants.
    #[inline]
    pub fn wait_step(&mut self, node: NodeIdx, cqs: &[rctb_core::transport::CqId], deadline: Instant) -> WaitStep {
        loop {
            if self.nodes[node].ep.has_events(cqs) {
                return WaitStep::Ready;
            }
            match self.next_event_at() {
                Some(t) if t <= deadline => {
                    self.run_instant(t);
                    if !self.actors.is_empty() {
                        return WaitStep::RunActors;
                    }
                }
                _ => {
                    // Nothing can happen before the deadline: jump to it.
                    if deadline != Instant::FAR_FUTURE {
                        self.now = self.now.max(deadline);
                    }
                    return WaitStep::TimedOut;
                }
            }
        }
    }

    /// Runs every event scheduled at `at`, the earliest pending instant.
    fn run_instant(&mut self, at: Instant) {
        self.now = self.now.max(at);
        loop {
            // The heap's events at this instant first (scheduled before the
            // clock got here), then those scheduled on it, in order.
            if self.queue.events.peek().is_some_and(|Reverse(e)| e.at() == at) {
                self.run_heap_top(at);
                continue;
            }
            let Some(kind) = self.queue.now_queue.pop_front() else { break };
            self.dispatch(at, kind);
        }
    }

    /// Runs the event at the top of the heap (due at `at`, the clock's time).
    fn run_heap_top(&mut self, at: Instant) {
        let Some(mut top) = self.queue.events.peek_mut() else { return };
        if let EventKind::LinkDeliver { from, to } = top.0.kind {
            let (from, to) = (from as NodeIdx, to as NodeIdx);
            // The link's next head takes this event's place in the heap (one
            // sift instead of a pop and a push), with the sequence number
            // `schedule` would have given it.
            // (`self.link` would borrow the world `top` holds a part of.)
            let head = self.links[link_index(self.nodes.len(), from, to)].head;
            match second_arrival(&self.chain, head) {
                Some(next) if next > at => {
                    self.queue.seq += 1;
                    top.0.key = Event::key(next, self.queue.seq);
                    drop(top);
                    self.link_deliver_head(from, to);
                }
                _ => {
                    PeekMut::pop(top);
                    self.link_deliver(from, to);
                }
            }
            return;
        }
        let Reverse(ev) = PeekMut::pop(top);
        self.dispatch(ev.at(), ev.kind);
    }

    /// Advances to `deadline`, running every event before or at it.
    pub fn run_until(&mut self, deadline: Instant) {
        while self.next_event_at().is_some_and(|t| t <= deadline) {
            self.run_next_instant();
        }
        if deadline != Instant::FAR_FUTURE {
            self.now = self.now.max(deadline);
        }
    }

    /// Runs one event scheduled at `at` (the clock's time: nothing is
    /// scheduled in the past).
    #[inline(always)]
    fn dispatch(&mut self, at: Instant, kind: EventKind) {
        match kind {
            EventKind::Deliver { from, to, pkt: slot } => self.arrive(from as NodeIdx, to as NodeIdx, slot, true),
            EventKind::LinkDeliver { from, to } => self.link_deliver(from as NodeIdx, to as NodeIdx),
            EventKind::Egress { node } => self.egress(node as NodeIdx),
            EventKind::Timer { node } => self.node_timer(node as NodeIdx, at),
            EventKind::Cm(cm) => self.cm_arrive(cm.from, cm.to, cm.msg),
            EventKind::Fault(action) => self.apply_fault(*action),
            EventKind::Wake => {}
        }
    }

    /// Runs a fault verb on named nodes (unknown names: nothing happens).
    #[inline(never)]
    pub fn apply_fault(&mut self, action: FaultAction) {
        let resolve = |w: &World, a: &str, b: &str| Some((w.node_by_name(a)?, w.node_by_name(b)?));
        match action {
            FaultAction::Partition { a, b } => {
                if let Some((a, b)) = resolve(self, &a, &b) {
                    self.partition(a, b);
                }
            }
            FaultAction::Heal { a, b } => {
                if let Some((a, b)) = resolve(self, &a, &b) {
                    self.repair(a, b);
                }
            }
            FaultAction::SetFaults { a, b, faults } => {
                if let Some((a, b)) = resolve(self, &a, &b) {
                    self.set_faults(a, b, faults);
                }
            }
            FaultAction::Hold { a, b } => {
                if let Some((a, b)) = resolve(self, &a, &b) {
                    self.hold(a, b);
                }
            }
            FaultAction::Release { a, b } => {
                if let Some((a, b)) = resolve(self, &a, &b) {
                    self.release(a, b);
                }
            }
            FaultAction::Crash { node } => {
                if let Some(n) = self.node_by_name(&node) {
                    self.crash(n);
                }
            }
            FaultAction::Bounce { node } => {
                if let Some(n) = self.node_by_name(&node) {
                    self.bounce(n);
                }
            }
        }
    }

    // ---- endpoint plumbing ----

    /// What the fabric counted, with the endpoints' retransmissions and
    /// timeouts.
    pub fn stats(&self) -> FabricStats {
        let mut s = self.stats.with_sent(&self.sent);
        for n in &self.nodes {
            let c = n.ep.counters();
            s.retransmitted += c.retransmitted;
            s.timeouts += c.timeouts;
            s.atomics_replayed += c.atomics_replayed;
            s.seq_naks_ignored += c.seq_naks_ignored;
        }
        s
    }

    /// After any input or command on `node`'s endpoint, its outputs: CM
    /// messages onto the fabric, the transmit pipeline started if it has
    /// packets, its timer armed.
    #[inline(always)]
    pub fn sync(&mut self, node: NodeIdx) {
        let now = self.now;
        let mut n = &mut self.nodes[node];
        if n.ep.wants_cm_transmit() {
            self.sync_cm(node);
            n = &mut self.nodes[node];
        }
        sync_packets(&mut self.queue, now, n, node);
    }

    /// The endpoint's CM messages onto the fabric (rare: kept out of `sync`).
    #[cold]
    #[inline(never)]
    fn sync_cm(&mut self, node: NodeIdx) {
        while let Some(cm) = self.nodes[node].ep.poll_cm_transmit() {
            self.sent.count_cm_message();
            self.send_cm(node, cm);
        }
    }

    /// CM messages travel with the link's latency, are cut by partitions,
    /// and meet the CM faults (not the links' packet faults).
    fn send_cm(&mut self, from: NodeIdx, cm: CmTransmit) {
        let Some(&to) = self.by_ip.get(&cm.dst) else { return };
        if self.partitioned(from, to) || !self.nodes[to].ep.link_up() || self.nodes[from].down {
            return;
        }
        let at = self.now + self.latency(from, to);
        let f = self.cm_faults;
        if f != CmFaults::default() {
            if self.cm_rng.chance(f.drop) {
                self.cm_stats.dropped += 1;
                return;
            }
            if self.cm_rng.chance(f.duplicate) {
                self.cm_stats.duplicated += 1;
                let copy = cm.msg.clone();
                self.schedule(
                    at + Duration::from_nanos(1),
                    EventKind::Cm(Box::new(CmDelivery { from, to, msg: copy })),
                );
            }
        }
        self.schedule(at, EventKind::Cm(Box::new(CmDelivery { from, to, msg: cm.msg })));
    }

    fn node_timer(&mut self, node: NodeIdx, at: Instant) {
        let now = self.now;
        let n = &mut self.nodes[node];
        if n.timer_pending == Some(at) {
            n.timer_pending = None;
        }
        n.ep.handle_timeout(now);
        self.sync(node);
    }
}

/// [`World::sync`] without its CM part: the transmit pipeline started if
/// the endpoint has packets, its timer armed. On the node's fields, so that
/// a caller holding the node need not look it up again.
#[inline(always)]
fn sync_packets(queue: &mut Queue, now: Instant, n: &mut Node, node: NodeIdx) {
    if n.ep.wants_transmit() && !n.egress_scheduled {
        n.egress_scheduled = true;
        let t = n.egress_free_at.max(now);
        queue.schedule(now, t, EventKind::Egress { node: ev(node) });
    }
    sync_timer(queue, now, n, node);
}

/// Schedules the endpoint's timer event when it needs one earlier than
/// the one pending (a deadline that moved later is picked up when the
/// pending event fires). On the node's fields, so that a caller holding the
/// node need not look it up again.
#[inline(always)]
fn sync_timer(queue: &mut Queue, now: Instant, n: &mut Node, node: NodeIdx) {
    let Some(t) = n.ep.poll_timeout() else { return };
    let at = t.max(now);
    if n.timer_pending.is_none_or(|p| at < p) {
        n.timer_pending = Some(at);
        queue.schedule(now, at, EventKind::Timer { node: ev(node) });
    }
}

/// Where the link from `from` to `to` is in `World::links`, a row-major
/// square of `nodes` rows.
#[inline(always)]
fn link_index(nodes: usize, from: NodeIdx, to: NodeIdx) -> usize {
    from * nodes + to
}

/// A node as events name it (`add_node` keeps every index within 32 bits).
#[inline(always)]
fn ev(node: NodeIdx) -> EvNode {
    node as EvNode
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_stay_small() {
        // Every packet costs a heap push and pop of an `Event`.
        assert!(std::mem::size_of::<Event>() <= 32, "{}", std::mem::size_of::<Event>());
        assert_eq!(std::mem::size_of::<EventKind>(), 16);
    }
}
