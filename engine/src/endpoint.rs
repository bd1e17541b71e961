//! [`Endpoint`]: one node's RC engine — its verbs resources, its queue
//! pairs, its RDMA CM state — with the protocol's inputs and outputs.
//!
//! The verbs themselves (`reg_mr`, `create_qp`, `post_send`, ...) are in
//! `verbs/`, the CM state machine in `cm/`; this file holds the state,
//! the packet and timer inputs, and the transmit and timer outputs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt;
use std::net::Ipv4Addr;

use rctb_core::time::Instant;
use rctb_core::transport::{
    AsyncEvent, CmEvent, Completion, ConnId, CqId, ListenId, Mtu, PdId, Psn, QpId, WcOpcode, WcStatus,
};

use crate::cm::mad::{self, MadDrop};
use crate::cm::{CmTransmit, Conn};
use crate::idmap::IdMap;
use crate::memory::Memory;
use crate::packet::Packet;
use crate::rc::ring::Ring;
use crate::rc::{Built, QpCounters, RcQp, RecvCtx, RoutedCompletion, Srq};

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

#[derive(Debug)]
pub(crate) struct Cq {
    pub depth: u32,
    pub entries: Ring<Wc>,
    /// What the owner asked to be told of next ([`Endpoint::req_notify_cq`]).
    pub notify: Notify,
}

/// A CQ's request for notification (`ibv_req_notify_cq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Notify {
    /// Nothing asked, or the last request already answered.
    #[default]
    Off,
    /// The next completion.
    Next,
    /// The next solicited completion (or failed receive).
    Solicited,
    /// Answered: the owner has not taken the notice yet
    /// ([`Endpoint::poll_cq_notification`]).
    Fired,
}

impl Cq {
    pub(crate) fn new(depth: u32) -> Self {
        Cq { depth, entries: Ring::default(), notify: Notify::Off }
    }

    /// Adds a completion (the caller checked the room), and answers an armed
    /// request for notification that it satisfies.
    #[inline]
    pub(crate) fn push(&mut self, wc: Completion, solicited: bool) {
        self.entries.push_back(Wc(wc));
        if self.notify != Notify::Off {
            self.fire(solicited);
        }
    }

    #[cold]
    fn fire(&mut self, solicited: bool) {
        if self.notify == Notify::Next || (self.notify == Notify::Solicited && solicited) {
            self.notify = Notify::Fired;
        }
    }
}

/// A CQ's slot: a completion (or, in a slot never used, a placeholder;
/// `Ring` keeps every slot holding a value).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wc(pub Completion);

impl Default for Wc {
    fn default() -> Self {
        Wc(Completion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm: None,
            qp: QpId(0),
            vendor_err: 0,
        })
    }
}

/// Adds a QP's protocol counts to an endpoint's.
fn add_qp_counters(c: &mut EndpointCounters, q: &QpCounters) {
    c.retransmitted += q.retransmitted;
    c.timeouts += q.timeouts;
    c.atomics_replayed += q.atomics_replayed;
    c.seq_naks_ignored += q.seq_naks_ignored;
}

/// A completion found its CQ full (kept out of `route`, which stays small
/// enough to inline on the packet path).
#[cold]
fn lose_completion(counters: &mut EndpointCounters, events: &mut VecDeque<AsyncEvent>, cq: CqId) {
    counters.completions_lost += 1;
    events.push_back(AsyncEvent::CqErr { cq });
}

/// Delivers `comps` to their CQs ([`Endpoint::route`]), on the fields
/// alone so that a caller may hold a QP meanwhile.
#[inline(always)]
pub(crate) fn route(
    comps: &mut Vec<RoutedCompletion>,
    cqs: &mut IdMap<Cq>,
    counters: &mut EndpointCounters,
    events: &mut VecDeque<AsyncEvent>,
) {
    // Most calls find nothing to route: that answer inlines everywhere,
    // the loop does not.
    if !comps.is_empty() {
        route_all(comps, cqs, counters, events);
    }
}

#[inline]
fn route_all(
    comps: &mut Vec<RoutedCompletion>,
    cqs: &mut IdMap<Cq>,
    counters: &mut EndpointCounters,
    events: &mut VecDeque<AsyncEvent>,
) {
    for rc in comps.drain(..) {
        if let Some(cq) = cqs.get_mut(rc.cq.0) {
            if cq.entries.len() >= cq.depth as usize {
                lose_completion(counters, events, rc.cq);
            } else {
                cq.push(rc.wc, rc.solicited);
            }
        }
    }
}

/// An endpoint's transmit queue and timers.
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    /// QPs with something to transmit (their numbers), served round-robin.
    tx_ready: Ring<u32>,
    /// Pending timers: (due, order of arming, what). Entries a later
    /// change superseded stay until they come up and are skipped.
    timers: BinaryHeap<Reverse<(Instant, u64, TimerKey)>>,
    timer_seq: u64,
}

impl Outputs {
    fn arm(&mut self, at: Instant, key: TimerKey) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, key)));
    }

    /// After any change to `q` (QP `qp`): queue it for transmission if it
    /// has output, and arm its timer. Returns whether it has output (a QP
    /// already queued is not asked again: `poll_transmit_into` asks when it
    /// comes up).
    #[inline(always)]
    pub(crate) fn after_change(&mut self, q: &mut RcQp, now: Instant, qp: QpId) -> bool {
        let want_tx = self.queue_if_ready(q, now, qp);
        self.arm_timer(q, qp);
        want_tx
    }

    /// The transmit half of [`after_change`](Self::after_change), for a
    /// change that cannot start or advance the QP's timers (a post).
    #[inline(always)]
    pub(crate) fn queue_if_ready(&mut self, q: &mut RcQp, now: Instant, qp: QpId) -> bool {
        let want_tx = q.tx_queued || q.wants_transmit(now);
        if want_tx && !q.tx_queued {
            q.tx_queued = true;
            self.tx_ready.push_back(qp.0);
        }
        want_tx
    }

    /// The timer half of [`after_change`](Self::after_change).
    #[inline(always)]
    fn arm_timer(&mut self, q: &mut RcQp, qp: QpId) {
        // Timers are lazy: an entry is armed only when the QP needs one
        // earlier than the one already pending. A deadline that merely moved
        // later (every ACK moves it) is picked up when the pending one fires.
        let timer = q.poll_timeout();
        let arm = match (timer, q.timer_event) {
            (Some(t), Some(pending)) => t < pending,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if arm {
            q.timer_event = timer;
            if let Some(t) = timer {
                self.arm(t, TimerKey::Qp(qp));
            }
        }
    }
}

/// What a timer entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// A QP's ACK / RNR timer (its `timer_event` says which entry is live).
    Qp(QpId),
    /// An active CM connection waiting for REP or REJ.
    Cm(ConnId),
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

    /// Delivers the completions the last action produced to their CQs. A
    /// completion that finds its CQ full is lost and raises
    /// [`AsyncEvent::CqErr`], as rxe's `rxe_cq_post` does.
    #[inline]
    pub(crate) fn route(&mut self) {
        route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
    }

    /// Asks to be told ([`poll_cq_notification`](Self::poll_cq_notification))
    /// when the next completion reaches `cq`, or with `solicited_only` the
    /// next solicited one (a receive of a message with the solicited-event
    /// bit, or a failed receive), as `ibv_req_notify_cq` does. Completions
    /// already in the CQ do not answer it. Asking again before the notice
    /// was taken changes nothing.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> rctb_core::transport::Result<()> {
        use rctb_core::transport::{TransportError, Verb};
        let c = self.cqs.get_mut(cq.0).ok_or_else(|| TransportError::handle(Verb::PollCq, cq))?;
        match c.notify {
            Notify::Fired => {}
            // `solicited_only` may widen a request to every completion, never narrow one.
            Notify::Next => {}
            Notify::Solicited | Notify::Off => {
                c.notify = if solicited_only { Notify::Solicited } else { Notify::Next };
            }
        }
        if !self.armed_cqs.contains(&cq) {
            self.armed_cqs.push(cq);
        }
        Ok(())
    }

    /// The next CQ whose request for notification was answered, if any;
    /// each answer is given once, and the CQ must be asked again
    /// ([`req_notify_cq`](Self::req_notify_cq)) to be told again.
    pub fn poll_cq_notification(&mut self) -> Option<CqId> {
        let cqs = &mut self.cqs;
        let i = self.armed_cqs.iter().position(|cq| cqs.get(cq.0).is_none_or(|c| c.notify == Notify::Fired))?;
        let cq = self.armed_cqs.swap_remove(i);
        let c = self.cqs.get_mut(cq.0)?;
        c.notify = Notify::Off;
        Some(cq)
    }

    /// The next asynchronous event (a CQ overflow, an SRQ limit), if any.
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.async_events.pop_front()
    }

    pub(crate) fn arm(&mut self, at: Instant, key: TimerKey) {
        self.out.arm(at, key);
    }

    /// After any change to a QP: queue it for transmission if it has output,
    /// and arm its timer ([`Outputs::after_change`]).
    pub(crate) fn after_qp_change(&mut self, now: Instant, qp: QpId) -> bool {
        let Some(q) = self.qps.get_mut(qp.0) else { return false };
        self.out.after_change(q, now, qp)
    }

    // ---- inputs ----

    /// Takes one RoCEv2 packet addressed to this endpoint, arrived at `now`.
    /// The owner has checked the ICRC (a damaged frame never gets here).
    /// The packet's payload buffer stays the caller's.
    #[inline]
    pub fn handle_packet(&mut self, now: Instant, pkt: &Packet) -> Result<(), PacketDrop> {
        let dest = pkt.bth.dest_qp;
        let qp = match self.last_qpn {
            Some((qpn, qp)) if qpn == dest => qp,
            _ => {
                let Some(&qp) = self.qpn_to_qp.get(&dest) else { return self.handle_gsi(now, pkt) };
                self.last_qpn = Some((dest, qp));
                qp
            }
        };
        let Some(q) = self.qps.get_mut(qp.0) else {
            self.route();
            return Ok(());
        };
        {
            let srq = match q.init.srq {
                Some(s) => self.srqs.get_mut(s.0),
                None => None,
            };
            let mut ctx = RecvCtx { srq, cqs: &mut self.cqs };
            q.handle_packet(now, pkt, &mut self.mem, &mut ctx, &mut self.comps);
            if let Some(srq) = ctx.srq
                && std::mem::take(&mut srq.limit_reached)
            {
                self.async_events.push_back(AsyncEvent::SrqLimitReached { srq: srq.id });
            }
        }
        // The QP stays in hand for its outputs (no second lookup).
        route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
        self.out.after_change(q, now, qp);
        if !self.awaiting_rtu.is_empty() {
            self.communication_established(qp);
        }
        Ok(())
    }

    /// A packet for no QP: a CM MAD when it is for QP1.
    #[cold]
    fn handle_gsi(&mut self, now: Instant, pkt: &Packet) -> Result<(), PacketDrop> {
        if !mad::is_gsi(pkt) {
            return Err(PacketDrop::NoSuchQp);
        }
        match mad::from_mad(&pkt.payload) {
            Ok(msg) => self.take_cm(now, pkt.src_ip, msg, true),
            Err(MadDrop::Reject { to, reason }) => self.reject_req(pkt.src_ip, to, reason),
            Err(MadDrop::Malformed(e)) => {
                self.counters.cm_dropped += 1;
                return Err(PacketDrop::BadMad(e));
            }
        }
        Ok(())
    }

    /// Runs every timer due at `now` (late ones fire once, now).
    #[inline]
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, _, key))) = self.out.timers.peek() {
            if at > now {
                break;
            }
            self.out.timers.pop();
            match key {
                TimerKey::Qp(qp) => self.qp_timer(now, qp, at),
                TimerKey::Cm(conn) => crate::cm::timeout(self, now, conn),
            }
        }
    }

    fn qp_timer(&mut self, now: Instant, qp: QpId, at: Instant) {
        let Some(q) = self.qps.get_mut(qp.0) else { return };
        if q.timer_event != Some(at) {
            return; // superseded by an earlier entry
        }
        q.timer_event = None;
        if q.poll_timeout().is_some_and(|t| t <= now) {
            q.handle_timeout(now, &mut self.comps);
            self.route();
        }
        // Re-arms at the QP's current deadline, if it has one.
        self.after_qp_change(now, qp);
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run next (`None`:
    /// no timer is pending). It may be in the past: call it at once then.
    /// It may also be a timer a later change made moot (the QP was
    /// destroyed, the deadline moved): handling it then does nothing.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.out.timers.peek().map(|&Reverse((at, _, _))| at)
    }

    /// Whether a CM message waits ([`poll_cm_transmit`](Self::poll_cm_transmit),
    /// [`poll_cm_packet`](Self::poll_cm_packet)).
    #[inline]
    pub fn wants_cm_transmit(&self) -> bool {
        !self.cm_out.is_empty()
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) may have a packet.
    #[inline]
    pub fn wants_transmit(&self) -> bool {
        !self.out.tx_ready.is_empty()
    }

    /// The next packet to put on the wire at `now`, from the QPs with
    /// output in round-robin order. Its payload is built in `buf` (the
    /// buffer moves into the packet; on `None` it stays the caller's).
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let mut packet = Packet::empty(std::mem::take(buf));
        match self.poll_transmit_into(now, &mut packet) {
            Some(more) => Some(Transmit { packet, more }),
            None => {
                *buf = packet.payload;
                None
            }
        }
    }

    /// [`poll_transmit`](Self::poll_transmit) for an owner that keeps its
    /// packets in place: the next packet is written into `pkt` (every field;
    /// its payload buffer is reused). Returns `Some(more)` when there was a
    /// packet (`more` as in [`Transmit::more`]), `None` when there was none
    /// (then `pkt` holds no new packet).
    #[inline]
    pub fn poll_transmit_into(&mut self, now: Instant, pkt: &mut Packet) -> Option<bool> {
        loop {
            let qp = QpId(*self.out.tx_ready.front()?);
            let Some(q) = self.qps.get_mut(qp.0) else {
                self.out.tx_ready.pop_front();
                continue;
            };
            let built = q.poll_transmit(now, &self.mem, pkt, &mut self.comps);
            if built == Built::Nothing {
                // Only a QP that built nothing completes anything here (a
                // send WR's local error at the head of its queue).
                route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
            }
            // Round-robin: a QP with more goes to the back of the queue. A
            // lone one stays where it is, which is the same place.
            let more = q.wants_transmit_after_packet(now, built);
            if !more || self.out.tx_ready.len() > 1 {
                self.out.tx_ready.pop_front();
                if more {
                    self.out.tx_ready.push_back(qp.0);
                } else {
                    q.tx_queued = false;
                }
            }
            if matches!(built, Built::Nothing | Built::TimedRequest) {
                // A response, or a request packet sent while the ACK timer
                // runs, leaves the QP's timers as the last change armed them
                // (every change ends by arming them).
                self.out.arm_timer(q, qp);
            }
            if built != Built::Nothing {
                return Some(more);
            }
        }
    }

    /// The next CM message to carry to its destination, as a value (for an
    /// owner that delivers it to the other endpoint's
    /// [`handle_cm`](Self::handle_cm)).
    #[inline]
    pub fn poll_cm_transmit(&mut self) -> Option<CmTransmit> {
        self.cm_out.pop_front()
    }

    /// The next CM message to carry, as RDMA CM puts it on RoCEv2: a UD
    /// packet to QP1 holding the MAD, built in `buf` (the buffer moves into
    /// the packet; on `None` it stays the caller's, as with
    /// [`poll_transmit`](Self::poll_transmit)). The other side's
    /// [`handle_packet`](Self::handle_packet) takes it, as does the
    /// kernel's GSI.
    pub fn poll_cm_packet(&mut self, buf: &mut Vec<u8>) -> Option<Packet> {
        loop {
            let t = self.cm_out.pop_front()?;
            match mad::to_mad(&t.msg, self.cfg.ip, t.dst, mad::ca_guid(self.cfg.mac)) {
                Ok(bytes) => {
                    let psn = self.gsi_psn;
                    self.gsi_psn = psn.add(1);
                    return Some(mad::gsi_packet(self.cfg.ip, t.dst, psn, &bytes, std::mem::take(buf)));
                }
                // The verbs bound every field, so this is not expected;
                // counted rather than sent malformed.
                Err(_) => self.counters.cm_dropped += 1,
            }
        }
    }

    /// The next CM event for the application (`cm_poll` of the transport).
    #[inline]
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.cm_events.pop_front()
    }
}
