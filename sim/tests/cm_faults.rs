//! CM messages lost and duplicated on the simulated fabric
//! (`Sim::set_cm_faults`): the engine's CM retransmits and answers
//! duplicates, so over many seeds every connect and disconnect converges,
//! or ends in the typed timeout, never in two outcomes; and a seed replays
//! to the same nanosecond.

use std::cell::RefCell;
use std::rc::Rc;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_sim::{CmFaults, NodeConfig, Sim, SimTransport};

/// What one seed did: the client's outcome, the server's events, when
/// it all ended, what the faults did.
#[derive(Debug, PartialEq)]
struct Run {
    client: Vec<CmEvent>,
    server: Vec<CmEvent>,
    end: Instant,
    dropped: u64,
    duplicated: u64,
}

fn init(t: &mut SimTransport) -> QpInit {
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(16).unwrap();
    QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false, srq: None }
}

fn run(seed: u64, faults: CmFaults) -> Run {
    let sim = Sim::new(seed);
    let na = sim.add_node(NodeConfig::new("client", "10.1.0.1".parse().unwrap())).unwrap();
    let nb = sim.add_node(NodeConfig::new("server", "10.1.0.2".parse().unwrap())).unwrap();
    sim.set_cm_faults(faults);
    let mut ta = sim.transport(na);
    let mut tb = sim.transport(nb);
    tb.cm_listen(4420).unwrap();
    let server = Rc::new(RefCell::new(Vec::new()));
    let seen = server.clone();
    // The server accepts every request, as an actor (it answers while the
    // client waits).
    sim.add_actor(
        nb,
        Box::new(move |t: &mut SimTransport| {
            while let Some(ev) = t.cm_poll() {
                if let CmEvent::ConnectRequest { conn, .. } = ev {
                    let qp = init(t);
                    t.cm_accept(conn, &AcceptParams::new(qp, b"ok".to_vec())).unwrap();
                }
                seen.borrow_mut().push(ev);
            }
            None
        }),
    );
    let ia = init(&mut ta);
    let (conn, _) = ta.cm_connect(&ConnectParams::new("10.1.0.2:4420".parse().unwrap(), ia, vec![])).unwrap();
    let mut client = Vec::new();
    let deadline = ta.now() + Duration::from_secs(30);
    let next = |t: &mut SimTransport, until| loop {
        if let Some(ev) = t.cm_poll() {
            return Some(ev);
        }
        if t.wait(&[], until).unwrap() == Readiness::TimedOut {
            return t.cm_poll();
        }
    };
    let first = next(&mut ta, deadline).expect("the client got no outcome within 30 s");
    let established = matches!(first, CmEvent::Established { .. });
    client.push(first);
    if established {
        ta.cm_disconnect(conn).unwrap();
        client.push(next(&mut ta, deadline).expect("no Disconnected"));
    }
    // Let every retransmission run out, then nothing more may happen.
    let quiet = ta.now() + Duration::from_secs(5);
    while let Some(ev) = next(&mut ta, quiet) {
        client.push(ev);
    }
    let stats = sim.cm_fault_stats();
    let end = ta.now();
    let server = server.borrow().clone();
    let _ = tb;
    Run { client, server, end, dropped: stats.dropped, duplicated: stats.duplicated }
}

#[test]
fn connect_and_disconnect_converge_when_cm_messages_are_lost_or_repeated() {
    let mut faults = CmFaults::default();
    faults.drop = 0.3;
    faults.duplicate = 0.2;
    let (mut lost, mut repeated, mut timeouts) = (0, 0, 0);
    for seed in 0..64 {
        let r = run(seed, faults);
        let replay = format!("seed {seed} (replay: cargo test -p rctb-sim --test cm_faults): {r:?}");
        let requests = r.server.iter().filter(|e| matches!(e, CmEvent::ConnectRequest { .. })).count();
        assert!(requests <= 1, "{replay}");
        match r.client[..] {
            [CmEvent::Established { .. }, CmEvent::Disconnected { .. }] => {
                let up = r.server.iter().filter(|e| matches!(e, CmEvent::Established { .. })).count();
                let down = r.server.iter().filter(|e| matches!(e, CmEvent::Disconnected { .. })).count();
                // The RTU (or every REP) may be lost past its retries: then
                // the server timed out its REP; otherwise it is up, then down.
                assert!(up <= 1 && down <= up, "{replay}");
            }
            [CmEvent::Unreachable { reason: UnreachableReason::Timeout, .. }] => {
                timeouts += 1;
                assert!(!r.server.iter().any(|e| matches!(e, CmEvent::Established { .. })), "{replay}");
            }
            _ => panic!("unexpected client events: {replay}"),
        }
        lost += r.dropped;
        repeated += r.duplicated;
    }
    assert!(lost > 20 && repeated > 10, "the faults hardly acted: {lost} lost, {repeated} repeated");
    assert!(timeouts < 8, "{timeouts} of 64 seeds timed out at 30% loss");
}

#[test]
fn a_seed_replays_exactly_and_no_faults_means_no_draws() {
    let mut faults = CmFaults::default();
    faults.drop = 0.3;
    faults.duplicate = 0.2;
    for seed in [1, 7, 42] {
        assert_eq!(run(seed, faults), run(seed, faults), "seed {seed}");
    }
    let clean = run(5, CmFaults::default());
    assert_eq!((clean.dropped, clean.duplicated), (0, 0));
    assert!(matches!(clean.client[..], [CmEvent::Established { .. }, CmEvent::Disconnected { .. }]));
}

/// CM messages are counted in `cm_sent` as the udp backend counts its CM
/// MADs, and not as frames (the simulator carries them as values).
#[test]
fn cm_messages_are_counted_apart_from_frames() {
    let sim = Sim::new(3);
    let na = sim.add_node(NodeConfig::new("client", "10.1.0.1".parse().unwrap())).unwrap();
    let nb = sim.add_node(NodeConfig::new("server", "10.1.0.2".parse().unwrap())).unwrap();
    let mut ta = sim.transport(na);
    let mut tb = sim.transport(nb);
    tb.cm_listen(4420).unwrap();
    sim.add_actor(
        nb,
        Box::new(move |t: &mut SimTransport| {
            while let Some(ev) = t.cm_poll() {
                if let CmEvent::ConnectRequest { conn, .. } = ev {
                    let qp = init(t);
                    t.cm_accept(conn, &AcceptParams::new(qp, b"ok".to_vec())).unwrap();
                }
            }
            None
        }),
    );
    let ia = init(&mut ta);
    ta.cm_connect(&ConnectParams::new("10.1.0.2:4420".parse().unwrap(), ia, vec![])).unwrap();
    let deadline = ta.now() + Duration::from_secs(5);
    while ta.cm_poll().is_none() && ta.wait(&[], deadline).unwrap() != Readiness::TimedOut {}
    let s = sim.stats();
    // REQ, REP and RTU at least; no RC frame was sent.
    assert!(s.cm_sent >= 3, "{s:?}");
    assert_eq!((s.frames_sent, s.bytes_sent), (0, 0), "{s:?}");
}
