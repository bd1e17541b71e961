//! The packet path: a node's egress (serialization at its bandwidth), the
//! links (latency, faults, reordering, the per-link arrival chains and the
//! slab of packets in flight), and delivery into the receiving endpoint.

use super::*;

impl World {
    /// [`egress`](Self::egress), out of line, for `deliver`.
    #[inline(never)]
    pub(super) fn egress_now(&mut self, node: NodeIdx) {
        self.egress(node);
    }

    #[inline(always)]
    pub(super) fn egress(&mut self, node: NodeIdx) {
        let now = self.now;
        let n = &mut self.nodes[node];
        n.egress_scheduled = false;
        if n.down {
            // Powered off: nothing leaves; `bounce` discards what waits.
            return;
        }
        if n.egress_free_at > now {
            n.egress_scheduled = true;
            let t = n.egress_free_at;
            self.queue.schedule(now, t, EventKind::Egress { node: ev(node) });
            return;
        }
        // Whether the endpoint has a packet, asked with the node in hand.
        let mut ready = n.ep.wants_transmit();
        // Like a NIC's transmit pipeline, one pass commits a short burst:
        // each packet still leaves at its own serialization slot, but the
        // fabric handles one event per burst instead of one per packet.
        let mut budget = TX_BURST;
        while budget > 0 && ready {
            // The packet is built in the slot it stays in until delivered.
            let slot = self.free_slot();
            // The node and the slot looked up once for the packet.
            let n = &mut self.nodes[node];
            let pkt = &mut self.in_flight[slot as usize];
            // (Whether this QP has more is not asked: after the packet the
            // loop asks the node, and a node still ready after the burst
            // gets one pass at its end.)
            if n.ep.poll_transmit_into(now, pkt).is_none() {
                ready = n.ep.wants_transmit();
                self.free_slots.push(slot);
                break;
            }
            budget -= 1;
            let wire_len = pkt.wire_len();
            let ser = n.serialization_ns(wire_len);
            // `+ Duration::from_nanos(ser)`, saturating as it does.
            let done = Instant::from_nanos(n.egress_free_at.max(now).as_nanos().saturating_add(ser));
            n.egress_free_at = done;
            self.transmit(node, slot, wire_len, done);
            // Once more after the transmit, for the node's outputs.
            let n = &mut self.nodes[node];
            sync_timer(&mut self.queue, now, n, node);
            ready = n.ep.wants_transmit();
        }
        let n = &mut self.nodes[node];
        if ready && !n.egress_scheduled {
            n.egress_scheduled = true;
            let t = n.egress_free_at.max(now);
            self.queue.schedule(now, t, EventKind::Egress { node: ev(node) });
        }
    }

    /// The node at `ip`, as seen from `from` (each node remembers the last
    /// one it looked up: nodes are never removed nor readdressed).
    #[inline]
    pub(super) fn route(&mut self, from: NodeIdx, ip: Ipv4Addr) -> Option<NodeIdx> {
        if let Some((last, to)) = self.nodes[from].last_route
            && last == ip
        {
            return Some(to);
        }
        let to = *self.by_ip.get(&ip)?;
        self.nodes[from].last_route = Some((ip, to));
        Some(to)
    }

    /// Puts the packet in `slot`, of `wire_len` bytes, on the wire at `now`;
    /// it leaves the port at `done`.
    #[inline(always)]
    pub(super) fn transmit(&mut self, from: NodeIdx, slot: u32, wire_len: usize, done: Instant) {
        let pkt = &self.in_flight[slot as usize];
        self.sent.count(pkt, wire_len);
        let dst_ip = pkt.dst_ip;
        let route = self.route(from, dst_ip);
        if let Some(pcap) = self.pcap.as_mut() {
            let (src, dst) = (self.nodes[from].mac, route.map(|i| self.nodes[i].mac));
            pcap.record(self.now, src, dst.unwrap_or([0xff; 6]), &self.in_flight[slot as usize]);
        }
        let Some(to) = route else {
            self.stats.dropped_no_route += 1;
            self.release_slot(slot);
            return;
        };
        if !self.nodes[to].ep.link_up() {
            self.stats.dropped_partition += 1;
            self.release_slot(slot);
            return;
        }
        let i = self.link_index(from, to);
        let link = &mut self.links[i];
        if !self.by_hand && link.clean {
            // Nothing can touch the packet: it arrives after the latency.
            let arrive = Instant::from_nanos(done.as_nanos().saturating_add(link.latency_ns));
            self.enqueue(from, to, slot, arrive, true);
            return;
        }
        self.transmit_faulty(from, to, slot, done);
    }

    /// The rest of [`World::transmit`] when a partition, a packet rule or
    /// a link's faults are on.
    #[inline(never)]
    pub(super) fn transmit_faulty(&mut self, from: NodeIdx, to: NodeIdx, slot: u32, done: Instant) {
        let (mut extra, mut dup) = (Duration::ZERO, false);
        if self.by_hand {
            // A partition or a packet rule is on (`world/faults.rs`).
            let mut pkt = std::mem::replace(&mut self.in_flight[slot as usize], Packet::empty(Vec::new()));
            let fate = self.hand_faults(from, to, &mut pkt);
            self.in_flight[slot as usize] = pkt;
            let Some(fate) = fate else {
                self.release_slot(slot);
                return;
            };
            (extra, dup) = fate;
        }
        let (mut dropped, mut reordered) = (false, false);
        let i = self.link_index(from, to);
        let link = &mut self.links[i];
        let latency_ns = link.latency_ns;
        if !link.clean {
            let f = link.cfg.faults;
            let rng = &mut link.rng;
            dropped = rng.chance(f.drop);
            if rng.chance(f.corrupt) {
                self.in_flight[slot as usize].corrupt = true;
            }
            dup |= rng.chance(f.duplicate);
            if !f.jitter.is_zero() {
                extra += Duration::from_nanos(rng.below(f.jitter.as_nanos() as u64 + 1));
            }
            if rng.chance(f.reorder) {
                reordered = true;
                extra += Duration::from_nanos(rng.below(f.reorder_window.as_nanos() as u64 + 1));
            }
        }
        if dropped {
            self.stats.dropped_loss += 1;
            self.release_slot(slot);
            return;
        }
        self.stats.reordered += reordered as u64;
        // `done + latency + extra`, saturating as `+` does.
        let arrive = Instant::from_nanos(
            done.as_nanos()
                .saturating_add(latency_ns)
                .saturating_add(u64::try_from(extra.as_nanos()).unwrap_or(u64::MAX)),
        );
        if dup {
            self.stats.duplicated += 1;
            let copy = self.in_flight[slot as usize].clone();
            let copy = self.park(copy);
            self.schedule(
                arrive + Duration::from_nanos(1),
                EventKind::Deliver { from: ev(from), to: ev(to), pkt: copy },
            );
        }
        self.enqueue(from, to, slot, arrive, extra.is_zero());
    }

    /// The packet in `slot` arrives at `arrive`: through the link's
    /// in-order queue when it may (`in_order`: no fault delayed it, and it
    /// arrives no earlier than the queue's last), else on its own event.
    #[inline(always)]
    pub(super) fn enqueue(&mut self, from: NodeIdx, to: NodeIdx, slot: u32, arrive: Instant, in_order: bool) {
        let i = self.link_index(from, to);
        let link = &mut self.links[i];
        if in_order && (link.head == NO_SLOT || link.tail_at <= arrive) {
            self.chain[slot as usize] = ChainLink { at: arrive, next: NO_SLOT };
            link.tail_at = arrive;
            if link.head == NO_SLOT {
                link.head = slot;
                link.tail = slot;
                self.schedule(arrive, EventKind::LinkDeliver { from: ev(from), to: ev(to) });
            } else {
                self.chain[link.tail as usize].next = slot;
                link.tail = slot;
            }
        } else {
            self.schedule(arrive, EventKind::Deliver { from: ev(from), to: ev(to), pkt: slot });
        }
    }

    pub(super) fn link_deliver(&mut self, from: NodeIdx, to: NodeIdx) {
        let head = self.link(from, to).head;
        if let Some(at) = second_arrival(&self.chain, head) {
            self.schedule(at, EventKind::LinkDeliver { from: ev(from), to: ev(to) });
        }
        self.link_deliver_head(from, to);
    }

    /// The head of the link's queue arrives (its successor's event is
    /// already scheduled).
    #[inline(always)]
    pub(super) fn link_deliver_head(&mut self, from: NodeIdx, to: NodeIdx) {
        let i = self.link_index(from, to);
        let link = &mut self.links[i];
        let slot = link.head;
        let Some(c) = self.chain.get(slot as usize) else { return };
        link.head = c.next;
        let held = link.held.is_some();
        if held {
            self.keep(from, to, faults::Held::Packet(slot));
        } else {
            self.deliver(to, slot, true);
        }
    }

    /// A free packet slot (its packet is a leftover whose payload buffer
    /// is empty, ready to be reused).
    #[inline]
    pub(super) fn free_slot(&mut self) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.in_flight.push(Packet::empty(Vec::new()));
                self.chain.push(ChainLink { at: Instant::ZERO, next: NO_SLOT });
                (self.in_flight.len() - 1) as u32
            }
        }
    }

    /// Frees a slot; its payload buffer stays there for the next packet.
    #[inline]
    pub(super) fn release_slot(&mut self, slot: u32) {
        self.in_flight[slot as usize].payload.clear();
        self.free_slots.push(slot);
    }

    /// Stores a packet on the wire; returns its slot.
    pub(super) fn park(&mut self, pkt: Packet) -> u32 {
        let slot = self.free_slot();
        self.in_flight[slot as usize] = pkt;
        slot
    }

    /// The packet parked in `slot` reaches `to`; its slot is freed. It is
    /// read where it is parked (a packet is not small enough to move for
    /// free). `in_instant`: the caller is an event of the instant's loop
    /// (not `release`, which delivers several packets in a row), so the
    /// node's transmit pass may run here when it is the next event.
    #[inline(always)]
    pub(super) fn deliver(&mut self, to: NodeIdx, slot: u32, in_instant: bool) {
        let Some(pkt) = self.in_flight.get_mut(slot as usize) else { return };
        let now = self.now;
        let n = &mut self.nodes[to];
        let taken = if pkt.corrupt {
            // Bad ICRC: dropped silently, as rxe does.
            self.stats.dropped_corrupt += 1;
            false
        } else if !n.ep.link_up() {
            self.stats.dropped_partition += 1;
            false
        } else if let Err(PacketDrop::NoSuchQp) = n.ep.handle_packet(now, pkt) {
            self.stats.dropped_no_qp += 1;
            false
        } else {
            self.stats.delivered += 1;
            true
        };
        // The slot is freed with the packet in hand (`release_slot`).
        pkt.payload.clear();
        self.free_slots.push(slot);
        if !taken {
            return;
        }
        if n.ep.wants_cm_transmit() {
            self.sync(to);
            return;
        }
        // The node's transmit pass (an ACK's, usually) runs here when it
        // would be the very next event: its port is free, and nothing else
        // is due in this instant before it (nothing waits in `now_queue`,
        // and the heap's next event is later). That is the order the event
        // would have run in, without its push and pop.
        let egress_next = in_instant
            && n.ep.wants_transmit()
            && !n.egress_scheduled
            && n.egress_free_at <= now
            && self.queue.now_queue.is_empty()
            && self.queue.events.peek().is_none_or(|Reverse(e)| e.at() > now);
        if egress_next {
            // The sequence number its event would have taken.
            self.queue.seq += 1;
            sync_timer(&mut self.queue, now, n, to);
            self.egress_now(to);
        } else {
            sync_packets(&mut self.queue, now, n, to);
        }
    }
}

/// When the packet after `head` in its link's chain arrives (`None`: the
/// chain holds at most one packet).
#[inline(always)]
pub(super) fn second_arrival(chain: &[ChainLink], head: u32) -> Option<Instant> {
    let next = chain.get(head as usize)?.next;
    chain.get(next as usize).map(|c| c.at)
}
