//! One simulated host: its RC engine endpoint (verbs resources, QPs, CM
//! state) and what the fabric adds around it (its MAC, its egress port's
//! pacing, its timer event, whether it is powered). The world drives it;
//! `SimTransport` calls into its endpoint on the application's behalf.

use rctb_core::time::Instant;
use rctb_engine::{Endpoint, EndpointConfig};

use crate::config::NodeConfig;
use crate::rng::SimRng;

#[derive(Debug)]
pub(crate) struct Node {
    pub cfg: NodeConfig,
    pub mac: [u8; 6],
    pub ep: Endpoint,
    pub egress_free_at: Instant,
    pub egress_scheduled: bool,
    /// The earliest timer event scheduled for the endpoint.
    pub timer_pending: Option<Instant>,
    /// Crashed and not booted again: it sends nothing and runs nothing.
    pub down: bool,
    /// The last destination address it sent to and its node (`World::route`).
    pub last_route: Option<(std::net::Ipv4Addr, usize)>,
    /// Endpoints it had after the first ([`Node::reboot`]): labels their RNGs.
    pub boots: u32,
    /// The last frame length `serialization_ns` was asked for, and its
    /// answer: a stream's frames are mostly of one size.
    ser_memo: (usize, u64),
    index: usize,
}

impl Node {
    pub fn new(index: usize, cfg: NodeConfig, seed: u64) -> Self {
        let mac = [0x02, 0x00, 0x00, 0x00, (index >> 8) as u8, index as u8];
        let rng = SimRng::child(seed, &format!("node/{}", cfg.name));
        Node {
            ep: endpoint(index, &cfg, mac, rng),
            mac,
            cfg,
            egress_free_at: Instant::ZERO,
            egress_scheduled: false,
            timer_pending: None,
            down: false,
            last_route: None,
            boots: 0,
            ser_memo: (usize::MAX, 0),
            index,
        }
    }

    /// Nanoseconds a frame of `bytes` occupies the node's egress port.
    #[inline(always)]
    pub fn serialization_ns(&mut self, bytes: usize) -> u64 {
        if self.ser_memo.0 != bytes {
            self.ser_memo = (bytes, serialization_ns(bytes, self.cfg.bandwidth_bps));
        }
        self.ser_memo.1
    }

    /// Replaces the endpoint with a fresh one (no resources, no timers, QPNs
    /// from the start, keys from an RNG of its own for this boot), its port
    /// up or down. What the old one held is gone, as after a power cycle.
    pub fn reboot(&mut self, seed: u64, link_up: bool) {
        self.boots += 1;
        let rng = SimRng::child(seed, &format!("node/{}/boot/{}", self.cfg.name, self.boots));
        self.ep = endpoint(self.index, &self.cfg, self.mac, rng);
        self.ep.set_link_up(link_up);
        self.timer_pending = None;
    }
}

fn endpoint(index: usize, cfg: &NodeConfig, mac: [u8; 6], rng: SimRng) -> Endpoint {
    let mut ep_cfg = EndpointConfig::new(cfg.name.clone(), cfg.ip);
    ep_cfg.mtu = cfg.mtu;
    ep_cfg.mac = mac;
    // Simulated virtual addresses look like a user-space heap.
    ep_cfg.va_base = 0x7f00_0000_0000 + ((index as u64) << 36);
    Endpoint::new(ep_cfg, Box::new(rng))
}

/// Nanoseconds a frame of `bytes` occupies an egress port of
/// `bandwidth_bps` (0: unlimited).
fn serialization_ns(bytes: usize, bandwidth_bps: u64) -> u64 {
    if bandwidth_bps == 0 {
        return 0;
    }
    // Preamble, SFD and inter-frame gap (20) plus FCS (4) occupy the wire too.
    let bits = (bytes as u64 + 24) * 8;
    // In 64 bits while it cannot overflow (any frame): the same quotient.
    match bits.checked_mul(1_000_000_000) {
        Some(n) => n / bandwidth_bps,
        None => (bits as u128 * 1_000_000_000 / bandwidth_bps as u128) as u64,
    }
}
