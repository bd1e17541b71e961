//! CM messages lost and duplicated on the simulated fabric
//! (`Sim::set_cm_faults`): the engine's CM retransmits and answers
//! duplicates, so over many seeds every connect and disconnect converges,
//! or ends in the typed timeout, never in two outcomes; and a seed replays
//! to the same nanosecond. The same holds when the applications created
//! their QPs first (`cm_connect_qp`, `cm_accept_qp`), one CM-driven, the
//! other driven by its application with `cm_qp_attr`.

use std::cell::RefCell;
use std::rc::Rc;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_sim::cm::QpDriver;
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
    /// With `Qps::Own`: the client's QP's state after its outcome (and
    /// disconnect), the server's QP's state at the end.
    qp_states: Option<(QpState, QpState)>,
}

/// Where the connection's QPs come from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Qps {
    /// `cm_connect` and `cm_accept` create them.
    Created,
    /// The applications create them first: the client's the CM drives
    /// (`cm_connect_qp`), the server's its application (`cm_qp_attr`, then
    /// `cm_accept_qp`), as `rping -q` does.
    Own,
}

fn init(t: &mut SimTransport) -> QpInit {
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(16).unwrap();
    QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false, srq: None }
}

fn run(seed: u64, faults: CmFaults) -> Run {
    run_with(seed, faults, Qps::Created)
}

fn run_with(seed: u64, faults: CmFaults, qps: Qps) -> Run {
    let sim = Sim::new(seed);
    let na = sim.add_node(NodeConfig::new("client", "10.1.0.1".parse().unwrap())).unwrap();
    let nb = sim.add_node(NodeConfig::new("server", "10.1.0.2".parse().unwrap())).unwrap();
    sim.set_cm_faults(faults);
    let mut ta = sim.transport(na);
    let mut tb = sim.transport(nb);
    tb.cm_listen(4420).unwrap();
    let server = Rc::new(RefCell::new(Vec::new()));
    let seen = server.clone();
    let server_qp = Rc::new(RefCell::new(None));
    let own_qp = server_qp.clone();
    // The server accepts every request, as an actor (it answers while the
    // client waits).
    sim.add_actor(
        nb,
        Box::new(move |t: &mut SimTransport| {
            while let Some(ev) = t.cm_poll() {
                if let CmEvent::ConnectRequest { conn, .. } = ev {
                    let qp = init(t);
                    let params = AcceptParams::new(qp, b"ok".to_vec());
                    match qps {
                        Qps::Created => {
                            t.cm_accept(conn, &params).unwrap();
                        }
                        Qps::Own => {
                            let qp = t.create_qp(&qp).unwrap().id;
                            for target in [QpState::Init, QpState::Rtr, QpState::Rts] {
                                let to = t.cm_qp_attr(conn, target).unwrap();
                                t.modify_qp(qp, &to).unwrap();
                            }
                            t.cm_accept_qp(conn, qp, QpDriver::Application, &params).unwrap();
                            *own_qp.borrow_mut() = Some(qp);
                        }
                    }
                }
                seen.borrow_mut().push(ev);
            }
            None
        }),
    );
    let ia = init(&mut ta);
    let params = ConnectParams::new("10.1.0.2:4420".parse().unwrap(), ia, vec![]);
    let (conn, client_qp) = match qps {
        Qps::Created => ta.cm_connect(&params).unwrap(),
        Qps::Own => {
            let qp = ta.create_qp(&ia).unwrap().id;
            (ta.cm_connect_qp(qp, QpDriver::Cm, &params).unwrap(), qp)
        }
    };
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
    let qp_states = match qps {
        Qps::Created => None,
        Qps::Own => {
            let own = *server_qp.borrow();
            let server_state = own.map_or(QpState::Reset, |qp| tb.query_qp(qp).unwrap().state);
            Some((ta.query_qp(client_qp).unwrap().state, server_state))
        }
    };
    Run { client, server, end, dropped: stats.dropped, duplicated: stats.duplicated, qp_states }
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
                // the server timed out its REP; or the client's DREQ came
                // before any RTU: the server goes down without having been
                // up (rdma_cm's CONNECT -> DISCONNECT); otherwise it is up,
                // then down. Never up or down twice, never up after down.
                assert!(up <= 1 && down <= 1, "{replay}");
                let up_at = r.server.iter().position(|e| matches!(e, CmEvent::Established { .. }));
                let down_at = r.server.iter().position(|e| matches!(e, CmEvent::Disconnected { .. }));
                if let (Some(u), Some(d)) = (up_at, down_at) {
                    assert!(u < d, "{replay}");
                }
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

#[test]
fn the_applications_own_qps_converge_as_created_ones_do() {
    let mut faults = CmFaults::default();
    faults.drop = 0.3;
    faults.duplicate = 0.2;
    let mut up = 0;
    for seed in 0..32 {
        let r = run_with(seed, faults, Qps::Own);
        let replay =
            format!("seed {seed} (replay: cargo test -p rctb-sim --test cm_faults the_applications_own_qps): {r:?}");
        let requests = r.server.iter().filter(|e| matches!(e, CmEvent::ConnectRequest { .. })).count();
        assert!(requests <= 1, "{replay}");
        let Some((client_qp, server_qp)) = r.qp_states else { panic!("{replay}") };
        // The server's QP is its application's: the CM never moved it, so
        // it is in RTS once accepted, whatever the CM did after.
        assert_eq!(server_qp, if requests == 1 { QpState::Rts } else { QpState::Reset }, "{replay}");
        match r.client[..] {
            // The CM drove the client's QP to RTS, then ERR on the disconnect.
            [CmEvent::Established { .. }, CmEvent::Disconnected { .. }] => {
                up += 1;
                assert_eq!(client_qp, QpState::Err, "{replay}");
            }
            // No REP came: the client's QP is where the connect put it.
            [CmEvent::Unreachable { reason: UnreachableReason::Timeout, .. }] => {
                assert_eq!(client_qp, QpState::Init, "{replay}");
                assert!(!r.server.iter().any(|e| matches!(e, CmEvent::Established { .. })), "{replay}");
            }
            _ => panic!("unexpected client events: {replay}"),
        }
        assert_eq!(r, run_with(seed, faults, Qps::Own), "{replay}: a second run differs");
    }
    assert!(up >= 24, "only {up} of 32 seeds connected at 30% loss");
}
