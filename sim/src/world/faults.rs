//! The world's side of the fault verbs (contract: the crate's `faults`
//! module): partitions, holds and what arrives on a held link, crashes and
//! boots. The packet rules act in `World::transmit`.

use std::collections::VecDeque;

use rctb_core::time::Duration;
use rctb_engine::{CmMessage, Packet};

use crate::faults::PacketAction;

use super::{NodeIdx, World};

/// Something a hold keeps, in arrival order.
#[derive(Debug)]
pub(crate) enum Held {
    /// A packet, by its `in_flight` slot.
    Packet(u32),
    Cm(Box<CmMessage>),
}

impl World {
    pub fn partition(&mut self, a: NodeIdx, b: NodeIdx) {
        self.partitions.insert(Self::pair(a, b));
        self.update_by_hand();
    }

    pub fn repair(&mut self, a: NodeIdx, b: NodeIdx) {
        self.partitions.remove(&Self::pair(a, b));
        self.update_by_hand();
    }

    /// After a change to the partitions or the rules: whether `transmit`
    /// must ask [`hand_faults`](Self::hand_faults).
    pub fn update_by_hand(&mut self) {
        self.by_hand = !self.partitions.is_empty() || !self.rules.is_empty();
    }

    pub fn held(&self, a: NodeIdx, b: NodeIdx) -> bool {
        self.link_ref(a, b).is_some_and(|l| l.held.is_some())
    }

    pub fn hold(&mut self, a: NodeIdx, b: NodeIdx) {
        for (from, to) in [(a, b), (b, a)] {
            let link = self.link(from, to);
            if link.held.is_none() {
                link.held = Some(VecDeque::new());
            }
        }
    }

    /// Ends a hold and delivers what it kept now, each direction in arrival
    /// order (`a` to `b` first). Delivered here rather than as events, so
    /// nothing that arrives at this same instant can overtake them.
    pub fn release(&mut self, a: NodeIdx, b: NodeIdx) {
        // (With `a == b` the second pass finds nothing left.)
        for (from, to) in [(a, b), (b, a)] {
            let Some(kept) = self.link(from, to).held.take() else { continue };
            for item in kept {
                match item {
                    Held::Packet(slot) => self.arrive(from, to, slot, false),
                    Held::Cm(msg) => self.cm_arrive(from, to, *msg),
                }
            }
        }
    }

    /// What a partition and the packet rules do to a packet from `from`
    /// to `to` (steps 2 and 3 of the `faults` contract): `None` if it is
    /// lost (counted), else the extra delay and whether it is duplicated; a
    /// corrupted one is marked. Out of line: with neither on, the transmit
    /// path only tests one flag.
    #[inline(never)]
    pub(super) fn hand_faults(&mut self, from: NodeIdx, to: NodeIdx, pkt: &mut Packet) -> Option<(Duration, bool)> {
        if self.partitioned(from, to) {
            self.stats.dropped_partition += 1;
            return None;
        }
        if self.rules.is_empty() {
            return Some((Duration::ZERO, false));
        }
        match self.rules.decide(from, to, pkt) {
            None => Some((Duration::ZERO, false)),
            Some(PacketAction::Drop) => {
                self.stats.dropped_rule += 1;
                None
            }
            Some(PacketAction::Delay(d)) => {
                self.stats.delayed += 1;
                Some((d, false))
            }
            Some(PacketAction::Duplicate) => Some((Duration::ZERO, true)),
            Some(PacketAction::Corrupt) => {
                pkt.corrupt = true;
                Some((Duration::ZERO, false))
            }
        }
    }

    /// A held link keeps `item`.
    #[cold]
    pub(super) fn keep(&mut self, from: NodeIdx, to: NodeIdx, item: Held) {
        if matches!(item, Held::Packet(_)) {
            self.stats.held += 1;
        }
        if let Some(q) = self.link(from, to).held.as_mut() {
            q.push_back(item);
        }
    }

    /// A packet reaches the far end of the link from `from` to `to`
    /// (`in_instant` as in `deliver`).
    pub(super) fn arrive(&mut self, from: NodeIdx, to: NodeIdx, slot: u32, in_instant: bool) {
        if self.link(from, to).held.is_some() {
            self.keep(from, to, Held::Packet(slot));
        } else {
            self.deliver(to, slot, in_instant);
        }
    }

    /// A CM message reaches `to` (lost if `to` is down).
    #[inline(never)]
    pub(super) fn cm_arrive(&mut self, from: NodeIdx, to: NodeIdx, msg: CmMessage) {
        if self.link(from, to).held.is_some() {
            self.keep(from, to, Held::Cm(Box::new(msg)));
            return;
        }
        if self.nodes[to].down {
            return;
        }
        let (now, src) = (self.now, self.nodes[from].cfg.ip);
        self.nodes[to].ep.handle_cm(now, src, msg);
        self.sync(to);
    }

    /// Powers `node` off: a fresh endpoint with its port down stands in for
    /// the lost one until [`bounce`](Self::bounce).
    pub fn crash(&mut self, node: NodeIdx) {
        let seed = self.seed;
        let n = &mut self.nodes[node];
        if n.down {
            return;
        }
        n.down = true;
        n.reboot(seed, false);
        self.down_nodes += 1;
    }

    /// Boots `node` again (crashing it first if it is up).
    pub fn bounce(&mut self, node: NodeIdx) {
        self.crash(node);
        let seed = self.seed;
        let n = &mut self.nodes[node];
        n.reboot(seed, true);
        n.down = false;
        self.down_nodes -= 1;
    }
}
