//! [`Endpoint`]: one node's RC engine — its verbs resources, its queue
//! pairs, its RDMA CM state — with the protocol's inputs and outputs.
//!
//! The verbs themselves (`reg_mr`, `create_qp`, `post_send`, ...) are in
//! `verbs/`, the CM state machine in `cm/`; this file holds the
//! configuration, the counters and the state, `cq.rs` the completion
//! queues and the delivery of completions to them, and `io.rs` the packet
//! and timer inputs, and the transmit and timer outputs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::net::Ipv4Addr;

use rctb_core::transport::{AsyncEvent, CmEvent, ConnId, CqId, ListenId, Mtu, PdId, Psn, QpId};

use crate::cm::{CmTransmit, Conn};
use crate::idmap::IdMap;
use crate::memory::Memory;
use crate::packet::Packet;
use crate::rc::{QpCounters, RcQp, RoutedCompletion, Srq};

mod cq;
mod io;

pub(crate) use cq::{Cq, route};
pub(crate) use io::{Outputs, TimerKey};

/// What an endpoint is: its name, address and port.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointConfig {
    /// The host's name (the device is named after it).
    pub name: String,
    /// The RoCEv2 address (GID index 1 is its IPv4-mapped GID).
    pub ip: Ipv4Addr,
    /// The port's active MTU (what `ibv_query_port` reports).
    pub mtu: Mtu,
    /// The port's MAC address (GID index 0 is the link-local GID made of it).
    pub mac: [u8; 6],
    /// The virtual address of the first region; the next ones follow it,
    /// page-aligned.
    pub va_base: u64,
}

impl EndpointConfig {
    /// MTU 4096, MAC 02:00:00:00:00:00, regions from 0x7f00_0000_0000.
    pub fn new(name: impl Into<String>, ip: Ipv4Addr) -> Self {
        EndpointConfig {
            name: name.into(),
            ip,
            mtu: Mtu::Mtu4096,
            mac: [0x02, 0, 0, 0, 0, 0],
            va_base: 0x7f00_0000_0000,
        }
    }
}

/// A packet to put on the wire, from [`Endpoint::poll_transmit`].
#[derive(Debug)]
pub struct Transmit {
    /// The packet.
    pub packet: Packet,
    /// The queue pair that sent it has more ready to send now (the owner's
    /// transmit pipeline should come back soon).
    pub more: bool,
}

/// Why [`Endpoint::handle_packet`] did not take a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketDrop {
    /// No queue pair has the packet's destination QPN.
    NoSuchQp,
    /// A packet for the GSI (QP1) whose MAD does not decode as CM.
    BadMad(rctb_core::wire::cm::CmError),
}

/// Engine events worth counting (summed over the endpoint's QPs, also
/// the destroyed ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointCounters {
    /// Request packets sent again (go-back-N after NAK, timeout or RNR).
    pub retransmitted: u64,
    /// Local ACK timeouts that fired with packets outstanding.
    pub timeouts: u64,
    /// Duplicate atomics answered from a saved result, not executed again.
    pub atomics_replayed: u64,
    /// PSN sequence NAKs ignored because a retry was already under way.
    pub seq_naks_ignored: u64,
    /// Completions lost because their CQ was full (each raised
    /// [`AsyncEvent::CqErr`]).
    pub completions_lost: u64,
    /// CM messages sent again: unanswered within their response timeout,
    /// or as the answer to a duplicate.
    pub cm_retransmitted: u64,
    /// CM messages that repeated one already taken (answered from the state).
    pub cm_duplicates: u64,
    /// CM messages for no connection, or one past the state they answer.
    pub cm_ignored: u64,
    /// REQs refused before a connection was made (no listener, bad REQ).
    pub cm_rejected: u64,
    /// CM exchanges given up after their last retry.
    pub cm_timeouts: u64,
    /// Passive connections established by the peer's first packet on the
    /// QP rather than by the RTU (which was lost).
    pub cm_established_by_data: u64,
    /// QP1 packets that were no CM MAD this engine reads.
    pub cm_dropped: u64,
    /// Packets a QP could not take and dropped unanswered (see
    /// [`QpCounters::dropped`](crate::rc::QpCounters::dropped)): a peer
    /// sending to a QP not yet connected, a stale or duplicate response,
    /// requests past a PSN gap.
    pub packets_dropped: u64,
}

/// Live verbs objects of one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
}

/// Adds a QP's protocol counts to an endpoint's.
fn add_qp_counters(c: &mut EndpointCounters, q: &QpCounters) {
    c.retransmitted += q.retransmitted;
    c.timeouts += q.timeouts;
    c.atomics_replayed += q.atomics_replayed;
    c.seq_naks_ignored += q.seq_naks_ignored;
    c.packets_dropped += q.dropped;
}

/// The random numbers an endpoint needs (memory keys, CM starting PSNs),
/// drawn from the RNG its owner supplies.
pub(crate) struct Rng(Box<dyn rand_core::RngCore + Send>);

impl fmt::Debug for Rng {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Rng(..)")
    }
}

/// One node's RC engine. Sans-IO: it reads no clock, owns no socket and no
/// randomness; everything comes in through its methods, with the time.
///
/// # Call order
///
/// - **Getters** (any time): [`config`](Self::config),
///   [`counters`](Self::counters), [`resources`](Self::resources),
///   [`has_events`](Self::has_events), `device`, `port`, `query_qp`,
///   `mr_info`, `mr_read`, `mr_view`.
/// - **Inputs**: [`handle_packet`](Self::handle_packet) for every RoCEv2
///   packet addressed to this endpoint (after the owner checked its ICRC),
///   [`handle_cm`](Self::handle_cm) for every CM message,
///   [`handle_timeout`](Self::handle_timeout) when the time
///   [`poll_timeout`](Self::poll_timeout) gave has come.
/// - **Commands** (the verbs, in `verbs/`): `alloc_pd`, `reg_mr`,
///   `create_cq`, `create_qp`, `modify_qp`, `post_send`, `post_recv`,
///   `cm_listen`, `cm_connect`, `cm_accept`, ... Those that start protocol
///   work take `now`. `cm_connect_qp` and `cm_accept_qp` connect a QP the
///   application created, `cm_qp_attr` gives the attributes the CM moves a
///   connection's QP with, and `cm_establish` completes a connect whose QP
///   the application drives ([`QpDriver`](crate::QpDriver)).
/// - **Outputs**, after any input or command, in this order:
///   [`poll_cm_transmit`](Self::poll_cm_transmit) until `None` (CM messages
///   to carry), [`poll_transmit`](Self::poll_transmit) while the wire can take
///   packets (until `None`; [`wants_transmit`](Self::wants_transmit) says
///   whether there is one), then [`poll_timeout`](Self::poll_timeout) to
///   (re)arm the owner's timer. Completions and CM events wait in the
///   endpoint for `poll_cq` and [`poll_cm_event`](Self::poll_cm_event).
///
/// Nothing blocks, and nothing is lost if the owner is late: a packet not
/// yet polled stays in its QP (no ACK timer runs for it), and a timer
/// handled late fires once, at the time it is handled.
#[derive(Debug)]
pub struct Endpoint {
    pub(crate) cfg: EndpointConfig,
    pub(crate) link_up: bool,
    pub(crate) mem: Memory,
    pub(crate) pds: BTreeSet<PdId>,
    pub(crate) cqs: IdMap<Cq>,
    pub(crate) qps: IdMap<RcQp>,
    pub(crate) srqs: IdMap<Srq>,
    pub(crate) qpn_to_qp: BTreeMap<u32, QpId>,
    /// The last entry of `qpn_to_qp` a packet looked up (a stream of
    /// packets is for one QP); `create_qp` and `destroy_qp` clear it.
    pub(crate) last_qpn: Option<(u32, QpId)>,
    next_id: u32,
    next_qpn: u32,
    pub(crate) next_addr: u64,
    rng: Rng,
    /// The transmit queue and the timers, apart from the QPs so that a QP
    /// in hand can update them.
    pub(crate) out: Outputs,
    pub(crate) comps: Vec<RoutedCompletion>,
    pub(crate) listeners: BTreeMap<u16, ListenId>,
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    /// Passive connections whose REP is out and whose RTU has not come,
    /// by QP: the first packet the peer sends on the QP establishes the
    /// connection too (IBA's "communication established"), since the
    /// peer is up once it sends. Entries for connections that went
    /// another way are dropped when met.
    pub(crate) awaiting_rtu: BTreeMap<QpId, ConnId>,
    pub(crate) cm_events: VecDeque<CmEvent>,
    pub(crate) async_events: VecDeque<AsyncEvent>,
    /// CQs with a request for notification outstanding or answered
    /// ([`req_notify_cq`](Self::req_notify_cq)); few, so searched.
    pub(crate) armed_cqs: Vec<CqId>,
    pub(crate) cm_out: VecDeque<CmTransmit>,
    /// The PSN of the next QP1 packet ([`poll_cm_packet`](Self::poll_cm_packet)).
    gsi_psn: Psn,
    pub(crate) counters: EndpointCounters,
}

impl Endpoint {
    /// An endpoint with no resources. `rng` gives its memory keys and the
    /// starting PSNs of its CM connections (a seeded one makes runs
    /// repeatable).
    pub fn new(cfg: EndpointConfig, rng: Box<dyn rand_core::RngCore + Send>) -> Self {
        Endpoint {
            next_addr: cfg.va_base,
            cfg,
            link_up: true,
            mem: Memory::default(),
            pds: BTreeSet::new(),
            cqs: IdMap::default(),
            qps: IdMap::default(),
            srqs: IdMap::default(),
            qpn_to_qp: BTreeMap::new(),
            last_qpn: None,
            next_id: 1,
            // rxe hands out QPNs from 17 up; QP0/QP1 are special.
            next_qpn: 0x11,
            rng: Rng(rng),
            out: Outputs::default(),
            comps: Vec::new(),
            listeners: BTreeMap::new(),
            conns: BTreeMap::new(),
            awaiting_rtu: BTreeMap::new(),
            cm_events: VecDeque::new(),
            async_events: VecDeque::new(),
            armed_cqs: Vec::new(),
            cm_out: VecDeque::new(),
            gsi_psn: Psn::wrapping(0),
            counters: EndpointCounters::default(),
        }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    /// Its IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.cfg.ip
    }

    /// What it counted so far. The QPs keep their own protocol counts
    /// (nothing is added up per packet); they are summed here, with those of
    /// the QPs destroyed (`retire_qp_counters`).
    pub fn counters(&self) -> EndpointCounters {
        let mut c = self.counters;
        for q in self.qps.values() {
            add_qp_counters(&mut c, &q.counters);
        }
        c
    }

    /// A QP about to be destroyed leaves its protocol counts to the
    /// endpoint's.
    pub(crate) fn retire_qp_counters(&mut self, q: &RcQp) {
        add_qp_counters(&mut self.counters, &q.counters);
    }

    /// Whether the port is up (what `port` reports as its state).
    #[inline]
    pub fn link_up(&self) -> bool {
        self.link_up
    }

    /// Sets the port state `port` reports.
    pub fn set_link_up(&mut self, up: bool) {
        self.link_up = up;
    }

    /// Its live verbs objects.
    pub fn resources(&self) -> Resources {
        Resources {
            pds: self.pds.len(),
            mrs: self.mem.len(),
            cqs: self.cqs.len(),
            qps: self.qps.len(),
            srqs: self.srqs.len(),
        }
    }

    /// Whether a CM event or a completion on one of `cqs` waits.
    #[inline]
    pub fn has_events(&self, cqs: &[CqId]) -> bool {
        if !self.cm_events.is_empty() {
            return true;
        }
        let has = |cq: &CqId| self.cqs.get(cq.0).is_some_and(|c| !c.entries.is_empty());
        match cqs {
            // One CQ, the usual wait: without the iterator.
            [cq] => has(cq),
            cqs => cqs.iter().any(has),
        }
    }

    pub(crate) fn alloc_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A fresh non-zero memory key not in use on this endpoint.
    pub(crate) fn alloc_key(&mut self) -> u32 {
        loop {
            let k = self.rng.0.next_u32();
            if k != 0 && !self.mem.key_in_use(k) {
                return k;
            }
        }
    }

    pub(crate) fn alloc_qpn(&mut self) -> u32 {
        loop {
            let qpn = self.next_qpn;
            self.next_qpn = if self.next_qpn >= rctb_core::transport::MAX_24BIT { 0x11 } else { self.next_qpn + 1 };
            if !self.qpn_to_qp.contains_key(&qpn) {
                return qpn;
            }
        }
    }

    pub(crate) fn random_psn(&mut self) -> Psn {
        Psn::wrapping(self.rng.0.next_u32())
    }
}
