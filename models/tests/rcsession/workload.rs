//! Many concurrent clients against one session server, with cancels, slow
//! and crashing clients and link faults; after healing, every invariant of
//! the workload holds, across seeds.

use rctb_core::time::{Duration, Instant};
use rctb_models::rcsession::{Fabric, SessionWorkload, WorkloadConfig};
use rctb_sim::{LinkConfig, LinkFaults, NodeConfig, NodeId, Sim, SimTransport};

/// The simulator as the workload's fabric.
struct SimFabric<'s>(&'s Sim);

impl Fabric for SimFabric<'_> {
    fn now(&self) -> Instant {
        self.0.now()
    }
    fn next_event_at(&self) -> Option<Instant> {
        self.0.next_event_at()
    }
    fn run_until(&mut self, t: Instant) {
        self.0.run_until(t)
    }
}

struct Run {
    sim: Sim,
    server: NodeId,
    w: SessionWorkload<SimTransport>,
}

/// The server at 10.77.200.1 and one node per client at 10.77.x.y.
fn run(seed: u64, cfg: WorkloadConfig, faults: LinkFaults) -> Run {
    let sim = Sim::new(seed);
    sim.set_default_link({
        let mut link_config = LinkConfig::default();
        link_config.latency = Duration::from_micros(2);
        link_config.faults = faults;
        link_config
    });
    let server = sim.add_node(NodeConfig::new("rc-server", "10.77.200.1".parse().unwrap())).unwrap();
    let clients: Vec<NodeId> = (0..cfg.clients)
        .map(|i| {
            let ip = std::net::Ipv4Addr::new(10, 77, (i / 250) as u8, (i % 250) as u8 + 1);
            sim.add_node(NodeConfig::new(format!("rc-client{i}"), ip)).unwrap()
        })
        .collect();
    let mut w =
        SessionWorkload::new(seed, cfg, sim.transport(server), |i| sim.transport(clients[i % clients.len()])).unwrap();
    w.run(&mut SimFabric(&sim), Instant::from_nanos(2_000_000_000));
    // Heal, then let every deadline pass.
    sim.set_default_link({
        let mut link_config = LinkConfig::default();
        link_config.latency = Duration::from_micros(2);
        link_config.faults = LinkFaults::default();
        link_config
    });
    w.settle(&mut SimFabric(&sim));
    Run { sim, server, w }
}

fn assert_clean(seed: u64, r: &Run) {
    let bad = r.w.check();
    assert!(
        bad.is_empty(),
        "seed {seed}: {bad:#?}\nstats: {:?}\nreplay: cargo test -p rctb-models --test rcsession workload",
        r.w.stats
    );
    assert_eq!(r.sim.node_objects(r.server), 0, "seed {seed}: server verbs objects left");
}

#[test]
fn clean_fabric_every_transfer_completes() {
    let mut cfg = WorkloadConfig::default();
    cfg.cancel = 0.0;
    cfg.crash = 0.0;
    cfg.slow = 0.0;
    let r = run(1, cfg.clone(), LinkFaults::default());
    assert_clean(1, &r);
    assert_eq!(r.w.stats.transfers_ok, cfg.transfers, "{:?}", r.w.stats);
    assert!(r.w.stats.gets_ok > 0 && r.w.stats.puts_ok > 0);
}

#[test]
fn cancels_slow_and_crashing_clients_under_faults_converge() {
    let mut faults = LinkFaults::default();
    faults.drop = 0.01;
    faults.duplicate = 0.005;
    faults.reorder = 0.02;
    faults.reorder_window = Duration::from_micros(10);
    let mut cfg = WorkloadConfig::default();
    cfg.cancel = 0.1;
    cfg.slow = 0.3;
    cfg.crash = 0.1;
    let mut totals = (0, 0, 0, 0, 0);
    for seed in 0..6 {
        let r = run(seed, cfg.clone(), faults);
        assert_clean(seed, &r);
        let s = &r.w.stats;
        totals = (
            totals.0 + s.transfers_ok,
            totals.1 + s.cancelled,
            totals.2 + s.crashed,
            totals.3 + s.busy,
            totals.4 + s.wire,
        );
    }
    // The mix really happened (across the seeds).
    let (ok, cancelled, crashed, busy, wire) = totals;
    assert!(ok > 200 && cancelled > 0 && crashed > 0 && busy > 0 && wire > 0, "{totals:?}");
}

#[test]
fn tight_limits_refuse_and_are_never_exceeded() {
    let mut cfg = WorkloadConfig::default();
    cfg.clients = 12;
    cfg.cancel = 0.0;
    cfg.crash = 0.0;
    cfg.server.limits.max_sessions = 4;
    cfg.server.limits.max_staging_bytes = 128 * 1024;
    let r = run(3, cfg, LinkFaults::default());
    assert_clean(3, &r);
    assert!(r.w.stats.refused > 0, "{:?}", r.w.stats);
    assert!(r.w.stats.max_sessions_seen <= 4);
}
