//! Many concurrent clients against one session server, with cancels, slow
//! and crashing clients and link faults; after healing, every invariant of
//! the workload holds, across seeds.

use rctb_core::time::{Duration, Instant};
use rctb_sim::models::rcsession::{SessionWorkload, WorkloadConfig};
use rctb_sim::{LinkConfig, LinkFaults, Sim};

fn run(seed: u64, cfg: WorkloadConfig, faults: LinkFaults) -> SessionWorkload {
    let sim = Sim::new(seed);
    sim.set_default_link(LinkConfig { latency: Duration::from_micros(2), faults });
    let mut w = SessionWorkload::new(&sim, cfg, "10.77.200.1".parse().unwrap()).unwrap();
    w.run(Instant::from_nanos(2_000_000_000));
    // Heal, then let every deadline pass.
    sim.set_default_link(LinkConfig { latency: Duration::from_micros(2), faults: LinkFaults::default() });
    w.settle();
    w
}

fn assert_clean(seed: u64, w: &SessionWorkload) {
    let bad = w.check();
    assert!(
        bad.is_empty(),
        "seed {seed}: {bad:#?}\nstats: {:?}\nreplay: cargo test -p rctb-sim --test rcsession workload",
        w.stats
    );
    assert_eq!(w.server_objects(), 0, "seed {seed}: server verbs objects left");
}

#[test]
fn clean_fabric_every_transfer_completes() {
    let cfg = WorkloadConfig { cancel: 0.0, crash: 0.0, slow: 0.0, ..WorkloadConfig::default() };
    let w = run(1, cfg.clone(), LinkFaults::default());
    assert_clean(1, &w);
    assert_eq!(w.stats.transfers_ok, cfg.transfers, "{:?}", w.stats);
    assert!(w.stats.gets_ok > 0 && w.stats.puts_ok > 0);
}

#[test]
fn cancels_slow_and_crashing_clients_under_faults_converge() {
    let faults = LinkFaults {
        drop: 0.01,
        duplicate: 0.005,
        reorder: 0.02,
        reorder_window: Duration::from_micros(10),
        ..LinkFaults::default()
    };
    let cfg = WorkloadConfig { cancel: 0.1, slow: 0.3, crash: 0.1, ..WorkloadConfig::default() };
    let mut totals = (0, 0, 0, 0, 0);
    for seed in 0..6 {
        let w = run(seed, cfg.clone(), faults);
        assert_clean(seed, &w);
        let s = &w.stats;
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
    let mut cfg = WorkloadConfig { clients: 12, cancel: 0.0, crash: 0.0, ..WorkloadConfig::default() };
    cfg.server.limits.max_sessions = 4;
    cfg.server.limits.max_staging_bytes = 128 * 1024;
    let w = run(3, cfg, LinkFaults::default());
    assert_clean(3, &w);
    assert!(w.stats.refused > 0, "{:?}", w.stats);
    assert!(w.stats.max_sessions_seen <= 4);
}
