//! `SessionPair`, the one-session-at-a-time rig of the sessions-per-second
//! benchmark and `ci/session-cost`: every session completes intact and is
//! reaped, so the benchmark measures whole sessions.

use rctb_core::wire::hipobj::Op;
use rctb_sim::models::rcsession::SessionPair;

#[test]
fn back_to_back_sessions_complete_intact_and_are_reaped() {
    let mut pair = SessionPair::new(9, 70_000).expect("a fresh fabric");
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
    assert_eq!(pair.sim.node_objects(rctb_sim::NodeId(0)), 0);
}

#[test]
fn an_object_larger_than_the_client_region_is_refused_before_prepare() {
    let mut pair = SessionPair::new(1, 1024).expect("a fresh fabric");
    let e = pair.transfer(Op::Get, &[7u8; 1025]).unwrap_err();
    assert!(e.contains("begin") && e.contains("1025"), "{e}");
    assert_eq!(pair.server.usage().sessions, 0);
    pair.transfer(Op::Put, &[7u8; 1024]).expect("a fitting object still moves");
}
