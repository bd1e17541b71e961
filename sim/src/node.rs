//! One simulated host: its RC engine endpoint (verbs resources, QPs, CM
//! state) and what the fabric adds around it (its MAC, its egress port's
//! pacing, its timer event). The world drives it; `SimTransport` calls into
//! its endpoint on the application's behalf.

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
}

impl Node {
    pub fn new(index: usize, cfg: NodeConfig, seed: u64) -> Self {
        let rng = SimRng::child(seed, &format!("node/{}", cfg.name));
        let mac = [0x02, 0x00, 0x00, 0x00, (index >> 8) as u8, index as u8];
        let ep_cfg = EndpointConfig {
            name: cfg.name.clone(),
            ip: cfg.ip,
            mtu: cfg.mtu,
            mac,
            // Simulated virtual addresses look like a user-space heap.
            va_base: 0x7f00_0000_0000 + ((index as u64) << 36),
        };
        Node {
            mac,
            cfg,
            ep: Endpoint::new(ep_cfg, Box::new(rng)),
            egress_free_at: Instant::ZERO,
            egress_scheduled: false,
            timer_pending: None,
        }
    }
}
