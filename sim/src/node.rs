//! One simulated host: its verbs resources (PDs, regions, CQs, QPs), its
//! egress queue and its CM state. The world drives it; `SimTransport` calls
//! into it on the application's behalf.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;

use rctb_core::time::Instant;
use rctb_core::transport::{CmEvent, Completion, ConnId, ListenId, Mtu, PdId, Psn, QpId};

use crate::config::NodeConfig;
use crate::idmap::IdMap;
use crate::memory::Memory;
use crate::rc::{RcQp, RoutedCompletion};
use crate::rng::SimRng;

#[derive(Debug)]
pub(crate) struct Cq {
    pub depth: u32,
    pub entries: VecDeque<Completion>,
    /// A completion was lost because the CQ was full.
    pub overrun: bool,
}

/// CM connection state on one side.
#[derive(Debug)]
pub(crate) struct Conn {
    pub qp: Option<QpId>,
    /// The peer's node and connection id, once known.
    pub peer: Option<(usize, ConnId)>,
    pub state: ConnState,
    /// What the REQ carried (passive side) or what we sent (active side).
    pub remote_qpn: u32,
    pub remote_psn: Psn,
    pub local_psn: Psn,
    pub remote_ip: Ipv4Addr,
    pub mtu: Mtu,
    pub responder_resources: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub deadline: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Active side: REQ sent.
    ReqSent,
    /// Passive side: REQ received, application deciding.
    ReqRcvd,
    /// Passive side: REP sent.
    RepSent,
    Established,
    Closed,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub cfg: NodeConfig,
    pub mac: [u8; 6],
    pub up: bool,
    pub mem: Memory,
    pub pds: BTreeSet<PdId>,
    pub cqs: IdMap<Cq>,
    pub qps: IdMap<RcQp>,
    pub qpn_to_qp: BTreeMap<u32, QpId>,
    pub next_id: u32,
    pub next_qpn: u32,
    pub next_addr: u64,
    pub rng: SimRng,
    /// QPs with something to transmit, served round-robin.
    pub tx_ready: VecDeque<QpId>,
    pub egress_free_at: Instant,
    pub egress_scheduled: bool,
    pub listeners: BTreeMap<u16, ListenId>,
    pub conns: BTreeMap<ConnId, Conn>,
    pub cm_events: VecDeque<CmEvent>,
}

impl Node {
    pub fn new(index: usize, cfg: NodeConfig, seed: u64) -> Self {
        let rng = SimRng::child(seed, &format!("node/{}", cfg.name));
        Node {
            mac: [0x02, 0x00, 0x00, 0x00, (index >> 8) as u8, index as u8],
            cfg,
            up: true,
            mem: Memory::default(),
            pds: BTreeSet::new(),
            cqs: IdMap::default(),
            qps: IdMap::default(),
            qpn_to_qp: BTreeMap::new(),
            next_id: 1,
            // rxe hands out QPNs from 17 up; QP0/QP1 are special.
            next_qpn: 0x11,
            // Simulated virtual addresses look like a user-space heap.
            next_addr: 0x7f00_0000_0000 + ((index as u64) << 36),
            rng,
            tx_ready: VecDeque::new(),
            egress_free_at: Instant::ZERO,
            egress_scheduled: false,
            listeners: BTreeMap::new(),
            conns: BTreeMap::new(),
            cm_events: VecDeque::new(),
        }
    }

    pub fn alloc_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A fresh non-zero memory key not in use on this node.
    pub fn alloc_key(&mut self) -> u32 {
        loop {
            let k = self.rng.next_u32();
            if k != 0 && !self.mem.key_in_use(k) {
                return k;
            }
        }
    }

    pub fn alloc_qpn(&mut self) -> u32 {
        loop {
            let qpn = self.next_qpn;
            self.next_qpn = if self.next_qpn >= rctb_core::transport::MAX_24BIT { 0x11 } else { self.next_qpn + 1 };
            if !self.qpn_to_qp.contains_key(&qpn) {
                return qpn;
            }
        }
    }

    pub fn random_psn(&mut self) -> Psn {
        Psn::wrapping(self.rng.next_u32())
    }

    pub fn mem_regions(&self) -> usize {
        self.mem.len()
    }

    /// Delivers completions to their CQs.
    pub fn route(&mut self, comps: &mut Vec<RoutedCompletion>) {
        for rc in comps.drain(..) {
            if let Some(cq) = self.cqs.get_mut(rc.cq.0) {
                if cq.entries.len() >= cq.depth as usize {
                    cq.overrun = true;
                } else {
                    cq.entries.push_back(rc.wc);
                }
            }
        }
    }
}
