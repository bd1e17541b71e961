//! `SessionPair`, the one-session-at-a-time rig of the sessions-per-second
//! benchmark and `ci/session-cost`: every session completes intact and is
//! reaped, so the benchmark measures whole sessions.

use rctb_core::wire::hipobj::Op;
use rctb_models::rcsession::SessionPair;
use rctb_sim::{NodeConfig, Sim, SimTransport};

/// The pair on a fresh fabric: server 10.0.0.1 (node 0), client 10.0.0.2.
fn pair(seed: u64, capacity: u64) -> (Sim, SessionPair<SimTransport>) {
    let sim = Sim::new(seed);
    let s = sim.add_node(NodeConfig::new("server", "10.0.0.1".parse().unwrap())).unwrap();
    let c = sim.add_node(NodeConfig::new("client", "10.0.0.2".parse().unwrap())).unwrap();
    let pair = SessionPair::new(seed, capacity, sim.transport(s), sim.transport(c)).expect("a fresh fabric");
    (sim, pair)
}

#[test]
fn back_to_back_sessions_complete_intact_and_are_reaped() {
    let (sim, mut pair) = pair(9, 70_000);
    for (k, size) in [1usize, 4096, 4097, 69_999, 70_000, 300].into_iter().enumerate() {
        let object: Vec<u8> = (0..size).map(|i| (i * 13 + k) as u8).collect();
        for op in [Op::Get, Op::Put] {
            pair.transfer(op, &object).unwrap_or_else(|e| panic!("{op:?} of {size} bytes: {e} (seed 9)"));
        }
    }
    assert_eq!(pair.sessions(), 12);
    let u = pair.server.usage();
    assert_eq!((u.sessions, u.staging_bytes, u.qps, u.leaked_mrs, u.leaked_qps), (0, 0, 0, 0, 0));
    // the server node holds only what a server with no session holds: nothing
    assert_eq!(sim.node_objects(sim.node("server").unwrap()), 0);
}

#[test]
fn an_object_larger_than_the_client_region_is_refused_before_prepare() {
    let (_sim, mut pair) = pair(1, 1024);
    let e = pair.transfer(Op::Get, &[7u8; 1025]).unwrap_err();
    assert!(e.contains("begin") && e.contains("1025"), "{e}");
    assert_eq!(pair.server.usage().sessions, 0);
    pair.transfer(Op::Put, &[7u8; 1024]).expect("a fitting object still moves");
}
