//! The conformance suite (crate `rctb-conformance`) on the simulator: two
//! nodes with rxe's MTU over a 1500-byte link (1024). The same cases run on
//! udp (`udp/tests/conformance.rs`), on verbs devices where they are named
//! (`hw/tests/conformance.rs`) and on rxe in the VM harness (`rctb
//! conformance --backend verbs`).

use rctb_conformance as conformance;
use rctb_core::transport::Mtu;
use rctb_sim::{NodeConfig, Sim};

#[test]
fn every_conformance_case_passes_on_the_simulator() {
    let sim = Sim::new(1);
    let mtu = Mtu::Mtu1024;
    let a = sim
        .add_node({
            let mut node_config = NodeConfig::new("rxe1", "10.10.0.2".parse().unwrap());
            node_config.mtu = mtu;
            node_config
        })
        .unwrap();
    let b = sim
        .add_node({
            let mut node_config = NodeConfig::new("rxe0", "10.10.0.1".parse().unwrap());
            node_config.mtu = mtu;
            node_config
        })
        .unwrap();
    let (mut ta, mut tb) = (sim.transport(a), sim.transport(b));
    let results = conformance::run(&mut ta, &mut tb, "", &mut |_| {});
    let failed: Vec<String> = results.iter().filter(|r| !r.passed()).map(|r| r.line()).collect();
    assert!(failed.is_empty(), "conformance failures on the simulator:\n{}", failed.join("\n"));
    assert_eq!(results.len(), conformance::cases::<rctb_sim::SimTransport>().len());
    assert!(results.len() >= 44, "{} cases", results.len());
    // Every case released what it made.
    assert_eq!(sim.live_resources(), rctb_sim::LiveResources::default());
}

#[test]
fn a_filter_selects_cases_by_name() {
    let sim = Sim::new(1);
    let a = sim.add_node(NodeConfig::new("a", "10.0.0.1".parse().unwrap())).unwrap();
    let b = sim.add_node(NodeConfig::new("b", "10.0.0.2".parse().unwrap())).unwrap();
    let (mut ta, mut tb) = (sim.transport(a), sim.transport(b));
    let mut lines = Vec::new();
    let results = conformance::run(&mut ta, &mut tb, "read/", &mut |r| lines.push(r.line()));
    assert_eq!(results.len(), 7, "{lines:?}");
    assert!(lines.iter().all(|l| l.starts_with("PASS read/")), "{lines:?}");
}
