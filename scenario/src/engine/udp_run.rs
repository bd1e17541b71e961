//! `rctb run SCENARIO --backend udp`: a scenario's streams between real UDP
//! endpoints (rctb-udp), one per node, instead of over the simulated fabric.
//!
//! The streams, their checks and the report are the simulator runner's
//! ([`runner::run_on`]); the fabric is one [`UdpReactor`] ([`UdpFabric`])
//! and the nodes are its endpoints, so every frame crosses a real socket,
//! and time is real. Each node binds the scenario's address,
//! or the one `--node NAME=ADDR[:PORT][@NETNS]` gives, inside network
//! namespace NETNS when given: one process reaches endpoints in two
//! namespaces joined by a veth pair, where `tc netem` can lose, delay or
//! reorder frames on the way (`ci/udp-netns`).
//!
//! What the simulated fabric did is not done here: the scenario's latency,
//! bandwidth, link faults, fault schedule and swarm are not applied (the
//! report says so). Streams connect with RDMA CM (its MADs on QP1) or by
//! hand; session workloads and NVMe streams are refused (their peer
//! models run on the simulator only).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use rctb_core::time::Instant;
use rctb_core::wire::roce::ROCEV2_UDP_PORT;
use rctb_sim::{FabricStats, LinkConfig, LiveResources, NodeId, Sim};
use rctb_udp::{UdpConfig, UdpError, UdpReactor, UdpTransport};
use thiserror::Error;

use crate::runner::{self, Fabric, Idle, RunOutput};
use crate::scenario::Scenario;

/// Where one node's endpoint lives (`--node NAME=ADDR[:PORT][@NETNS]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlace {
    /// `NAME`: the scenario node this places; [`run`] refuses a name the
    /// scenario does not have ([`UdpRunError::UnknownNode`]).
    pub name: String,
    /// `ADDR[:PORT]`: the IPv4 address and UDP port the node's endpoint
    /// binds; the port is 4791 (RoCEv2's) when `--node` gives none.
    pub at: SocketAddrV4,
    /// `@NETNS`: the network namespace to open the endpoint's sockets in, a
    /// name under `/run/netns` or a path such as `/proc/PID/ns/net` (needs
    /// CAP_SYS_ADMIN); `None` keeps the caller's namespace.
    pub netns: Option<PathBuf>,
}

impl std::str::FromStr for NodePlace {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let form = "expected NAME=ADDR[:PORT][@NETNS], e.g. a=10.91.0.1@rctb-a";
        let (name, rest) = s.split_once('=').ok_or_else(|| format!("{s:?}: {form}"))?;
        let (addr, netns) = match rest.split_once('@') {
            Some((a, ns)) if !ns.is_empty() => (a, Some(PathBuf::from(ns))),
            Some(_) => return Err(format!("{s:?}: empty namespace after @; {form}")),
            None => (rest, None),
        };
        let at = addr
            .parse::<SocketAddrV4>()
            .or_else(|_| addr.parse::<Ipv4Addr>().map(|ip| SocketAddrV4::new(ip, ROCEV2_UDP_PORT)))
            .map_err(|_| format!("{s:?}: {addr:?} is not an IPv4 address[:port]; {form}"))?;
        if name.is_empty() {
            return Err(format!("{s:?}: empty node name; {form}"));
        }
        Ok(NodePlace { name: name.to_string(), at, netns })
    }
}

/// Why a scenario cannot run on the udp backend (exit status 2).
#[derive(Debug, Error)]
pub enum UdpRunError {
    /// A stream uses something only the simulator provides (today an
    /// `op = "rcsession"` stream, whose session server is a peer model).
    #[error("streams.{stream:?}.{field}: {rule} (--backend udp)")]
    Unsupported {
        /// The stream's `name`.
        stream: String,
        /// The scenario key that asks for it (`op`).
        field: &'static str,
        /// Why the udp backend cannot run it.
        rule: &'static str,
    },
    /// A `--node` names no node of the scenario.
    #[error("--node {name}: unknown node (nodes: {known})")]
    UnknownNode {
        /// The name `--node` gave.
        name: String,
        /// The scenario's node names, comma-separated.
        known: String,
    },
    /// The endpoints would not all use one UDP port; carries every node as
    /// `NAME=ADDR:PORT`, comma-separated.
    #[error("--node: every endpoint needs the same UDP port (RoCEv2 peers send to the port they listen on): {0}")]
    Ports(String),
    /// A node's endpoint could not be opened (the address is not local, the
    /// port is taken, the namespace cannot be entered, ...).
    #[error("node {node} ({at}): {source}")]
    Bind {
        /// The scenario node.
        node: String,
        /// The address and port it tried to bind.
        at: SocketAddrV4,
        /// What rctb-udp reported.
        #[source]
        source: UdpError,
    },
    /// The runner could not set the streams up (from [`runner::run_on`]),
    /// e.g. a stream whose peer model needs the simulator.
    #[error("building the run: {0}")]
    Sim(#[from] rctb_sim::SimError),
}

/// The endpoints of one reactor as the runner's fabric. Real time: it
/// blocks on the sockets until a frame, a timer or a stream's wake time.
/// The streams get [`UdpTransport::undriven`] handles; the runner's loop
/// runs the reactor ([`Fabric::poll`], [`Fabric::idle`]).
#[derive(Debug)]
pub struct UdpFabric {
    /// The reactor that owns every endpoint; its clock (real time since it
    /// was created) is the run's clock.
    pub reactor: UdpReactor,
    /// One endpoint per scenario node, in order.
    pub endpoints: Vec<UdpTransport>,
}

impl Fabric for UdpFabric {
    type Transport = UdpTransport;

    fn transport(&self, index: usize) -> UdpTransport {
        self.endpoints[index].undriven()
    }

    fn models(&self) -> Option<(&Sim, &[NodeId])> {
        None
    }

    fn now(&self) -> Instant {
        self.reactor.now()
    }

    fn stats(&self) -> FabricStats {
        let e = self.reactor.engine_stats();
        FabricStats {
            frames_sent: e.frames_sent,
            bytes_sent: e.bytes_sent,
            delivered: e.delivered,
            acks: e.acks,
            rnr_naks: e.rnr_naks,
            seq_naks: e.seq_naks,
            other_naks: e.other_naks,
            read_responses: e.read_responses,
            retransmitted: e.retransmitted,
            timeouts: e.timeouts,
            dropped_no_qp: e.dropped_no_qp,
            atomic_acks: e.atomic_acks,
            atomics_replayed: e.atomics_replayed,
            seq_naks_ignored: e.seq_naks_ignored,
            cm_sent: e.cm_sent,
            ..FabricStats::default()
        }
    }

    fn live_resources(&self) -> LiveResources {
        let r = self.reactor.resources();
        LiveResources { pds: r.pds, mrs: r.mrs, cqs: r.cqs, qps: r.qps, srqs: r.srqs }
    }

    fn enable_pcap(&self) {
        self.reactor.enable_pcap();
    }

    fn take_pcap(&self) -> Option<Vec<u8>> {
        self.reactor.take_pcap()
    }

    fn poll(&mut self) -> Result<(), String> {
        self.reactor.turn().map_err(|e| format!("udp: {e}"))
    }

    fn idle(&mut self, wake: Option<Instant>, limit: Instant) -> Idle {
        if self.reactor.now() >= limit {
            return Idle::TimeLimit;
        }
        // With nothing to wait for, a frame may still come from the network.
        let until = wake.map_or(limit, |w| w.min(limit));
        match self.reactor.block(until).and_then(|()| self.reactor.turn()) {
            Ok(()) => Idle::Moved,
            Err(e) => Idle::Failed(format!("udp: {e}")),
        }
    }

    fn virtual_time(&self) -> bool {
        false
    }
}

/// The streams the udp backend cannot run, as the first one's error.
pub fn check(scenario: &Scenario) -> Result<(), UdpRunError> {
    for s in &scenario.streams {
        let stream = s.config.name.clone();
        if s.session.is_some() {
            let rule = "rcsession workloads run on the simulator only (the session server is a peer model there)";
            return Err(UdpRunError::Unsupported { stream, field: "op", rule });
        }
    }
    Ok(())
}

/// Runs `scenario` with `seed` between UDP endpoints placed by `places`
/// (other nodes bind their scenario address on port 4791).
pub fn run(scenario: &Scenario, seed: u64, capture: bool, places: &[NodePlace]) -> Result<RunOutput, UdpRunError> {
    check(scenario)?;
    let known = || scenario.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ");
    for p in places {
        if !scenario.nodes.iter().any(|n| n.name == p.name) {
            return Err(UdpRunError::UnknownNode { name: p.name.clone(), known: known() });
        }
    }
    let place = |name: &str, ip: Ipv4Addr| {
        places.iter().rev().find(|p| p.name == name).cloned().unwrap_or(NodePlace {
            name: name.to_string(),
            at: SocketAddrV4::new(ip, ROCEV2_UDP_PORT),
            netns: None,
        })
    };
    let placed: Vec<NodePlace> = scenario.nodes.iter().map(|n| place(&n.name, n.ip)).collect();
    if placed.windows(2).any(|w| w[0].at.port() != w[1].at.port()) {
        let list: Vec<String> = placed.iter().map(|p| format!("{}={}", p.name, p.at)).collect();
        return Err(UdpRunError::Ports(list.join(", ")));
    }
    // The scenario as run: its nodes at the addresses they are bound to.
    let mut scenario = scenario.clone();
    for (n, p) in scenario.nodes.iter_mut().zip(&placed) {
        n.ip = *p.at.ip();
    }
    let reactor = UdpReactor::new(Some(seed));
    let mut endpoints = Vec::new();
    let mut notes = Vec::new();
    for (n, p) in scenario.nodes.iter().zip(&placed) {
        let mut cfg = UdpConfig::new(n.name.clone(), *p.at.ip());
        cfg.mtu = n.mtu;
        cfg.port = p.at.port();
        cfg.peer_port = p.at.port();
        cfg.seed = Some(seed);
        cfg.netns = p.netns.clone();
        let t = reactor.endpoint(cfg).map_err(|source| UdpRunError::Bind { node: n.name.clone(), at: p.at, source })?;
        let ns = p.netns.as_ref().map(|ns| format!(" in netns {}", ns.display())).unwrap_or_default();
        let raw = if t.stats().raw_rx { "raw socket, ICRC over the real IPv4 header" } else { "UDP socket only" };
        notes.push(format!("udp: node {} on {}{ns} ({raw})", n.name, p.at));
        endpoints.push(t);
    }
    let simulated_fabric = scenario.default_link != LinkConfig::default()
        || !scenario.links.is_empty()
        || !scenario.faults.is_empty()
        || scenario.swarm.is_some()
        || scenario.cm_faults != rctb_sim::CmFaults::default();
    if simulated_fabric {
        notes.push(
            "udp: the scenario's fabric (latency, faults, links, fault schedule, swarm) is not applied: frames cross \
             the real network between the endpoints"
                .to_string(),
        );
    }
    let mut fabric = UdpFabric { reactor, endpoints };
    let mut out = runner::run_on(&scenario, seed, capture, &mut fabric, notes)?;
    for (t, n) in fabric.endpoints.iter().zip(&scenario.nodes) {
        let s = t.stats();
        out.report.notes.push(format!(
            "udp: node {}: sent {} frames ({} refused by the socket), received {} ({} ACKs, {} RNR NAKs, {} PSN \
             sequence NAKs), dropped {} bad ICRC, {} malformed, {} unsupported, {} for other ports",
            n.name,
            s.tx_frames,
            s.tx_errors,
            s.rx_frames,
            s.rx_acks,
            s.rx_naks_rnr,
            s.rx_naks_seq,
            s.rx_bad_icrc,
            s.rx_malformed,
            s.rx_unsupported,
            s.rx_foreign
        ));
    }
    Ok(out)
}
