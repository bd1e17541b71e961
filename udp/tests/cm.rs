//! RDMA CM between two UDP endpoints on loopback: the MADs go through real
//! sockets, and the path hook loses, duplicates or reorders them. Connect,
//! reject and disconnect still converge; a peer with no listener, or none
//! at all, ends in the typed outcome.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_udp::{Dir, Fate, Packet, UdpConfig, UdpReactor, UdpTransport};

const PORT: u16 = 4420;

fn pair(base: u8) -> (UdpTransport, UdpTransport, Ipv4Addr) {
    let reactor = UdpReactor::new(Some(u64::from(base)));
    let (ia, ib) = (Ipv4Addr::new(127, 92, base, 1), Ipv4Addr::new(127, 92, base, 2));
    let cfg = |name: &str, ip| {
        let mut udp_config = UdpConfig::new(name, ip);
        udp_config.mtu = Mtu::Mtu1024;
        udp_config
    };
    let a = reactor.endpoint(cfg("a", ia)).unwrap_or_else(|e| panic!("bind {ia}: {e}"));
    let b = reactor.endpoint(cfg("b", ib)).unwrap_or_else(|e| panic!("bind {ib}: {e}"));
    (a, b, ib)
}

fn qp_init(t: &mut UdpTransport) -> QpInit {
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(16).unwrap();
    QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: true, srq: None }
}

/// The next CM event on `t` (each wait also moves the other endpoint).
fn event(t: &mut UdpTransport) -> Option<CmEvent> {
    let deadline: Instant = t.now() + Duration::from_secs(5);
    loop {
        if let Some(ev) = t.cm_poll() {
            return Some(ev);
        }
        if t.wait(&[], deadline).unwrap() == Readiness::TimedOut {
            return t.cm_poll();
        }
    }
}

fn is_mad(p: &Packet) -> bool {
    p.bth.dest_qp == 1
}

/// A hook that loses the first `n` MADs it sees, then passes everything.
fn lose_first_mads(n: u32, seen: Arc<AtomicU32>) -> rctb_udp::PathHook {
    Box::new(move |dir, p| {
        if dir == Dir::Tx && is_mad(p) {
            let k = seen.fetch_add(1, Ordering::Relaxed) + 1;
            if k <= n {
                return Fate::Drop;
            }
        }
        Fate::Pass
    })
}

/// Connects a to b through RDMA CM, then disconnects, checking each event.
fn connect_and_disconnect(a: &mut UdpTransport, b: &mut UdpTransport, ib: Ipv4Addr) {
    b.cm_listen(PORT).unwrap();
    let init = qp_init(a);
    let (conn_a, qp_a) = a.cm_connect(&ConnectParams::new(SocketAddrV4::new(ib, PORT), init, b"hi".to_vec())).unwrap();
    let Some(CmEvent::ConnectRequest { conn: conn_b, private_data, .. }) = event(b) else { panic!("no request") };
    assert_eq!(&private_data[..2], b"hi");
    let init = qp_init(b);
    let qp_b = b.cm_accept(conn_b, &AcceptParams::new(init, b"ok".to_vec())).unwrap();
    assert!(matches!(event(a), Some(CmEvent::Established { conn, .. }) if conn == conn_a));
    assert!(matches!(event(b), Some(CmEvent::Established { conn, .. }) if conn == conn_b));
    assert_eq!(a.query_qp(qp_a).unwrap().state, QpState::Rts);
    assert_eq!(b.query_qp(qp_b).unwrap().state, QpState::Rts);
    a.cm_disconnect(conn_a).unwrap();
    assert_eq!(event(a), Some(CmEvent::Disconnected { conn: conn_a }));
    assert_eq!(event(b), Some(CmEvent::Disconnected { conn: conn_b }));
}

#[test]
fn connect_and_disconnect_over_loopback() {
    let (mut a, mut b, ib) = pair(1);
    connect_and_disconnect(&mut a, &mut b, ib);
    // Five MADs (REQ, REP, RTU, DREQ, DREP), every one ICRC-checked.
    let sent = a.stats().tx_frames + b.stats().tx_frames;
    assert!(sent >= 5, "{sent}");
    assert_eq!(a.stats().rx_bad_icrc + b.stats().rx_bad_icrc, 0);
    assert_eq!(a.engine_counters().cm_retransmitted + b.engine_counters().cm_retransmitted, 0);
}

#[test]
fn lost_mads_are_sent_again() {
    // The first three MADs a sends are lost (its REQ and the first two
    // retries), and b's first two (its REP and the REP sent again).
    let (mut a, mut b, ib) = pair(2);
    a.set_hook(Some(lose_first_mads(3, Arc::default())));
    b.set_hook(Some(lose_first_mads(2, Arc::default())));
    connect_and_disconnect(&mut a, &mut b, ib);
    let (ca, cb) = (a.engine_counters(), b.engine_counters());
    assert!(ca.cm_retransmitted + cb.cm_retransmitted >= 3, "{ca:?} {cb:?}");
    assert_eq!(a.stats().tx_dropped + b.stats().tx_dropped, 5);
}

#[test]
fn duplicated_mads_are_answered_not_acted_on_twice() {
    let (mut a, mut b, ib) = pair(3);
    a.set_hook(Some(Box::new(|_, p| if is_mad(p) { Fate::Duplicate } else { Fate::Pass })));
    b.set_hook(Some(Box::new(|_, p| if is_mad(p) { Fate::Duplicate } else { Fate::Pass })));
    connect_and_disconnect(&mut a, &mut b, ib);
    assert!(b.engine_counters().cm_duplicates >= 2, "{:?}", b.engine_counters());
    // Nothing more is pending: no second request or second Established.
    assert_eq!(a.cm_poll(), None);
    assert_eq!(b.cm_poll(), None);
}

#[test]
fn a_reject_no_listener_and_no_peer_are_told_apart() {
    let (mut a, mut b, ib) = pair(4);
    b.cm_listen(PORT).unwrap();
    let init = qp_init(&mut a);
    let (conn, _) = a.cm_connect(&ConnectParams::new(SocketAddrV4::new(ib, PORT), init, vec![])).unwrap();
    let Some(CmEvent::ConnectRequest { conn: conn_b, .. }) = event(&mut b) else { panic!() };
    b.cm_reject(conn_b, &[0, 0, 6, 0]).unwrap();
    match event(&mut a) {
        Some(CmEvent::Rejected { conn: c, private_data }) => {
            assert_eq!(c, conn);
            assert_eq!(private_data[..4], [0, 0, 6, 0]);
        }
        other => panic!("{other:?}"),
    }
    let init = qp_init(&mut a);
    let (conn, _) = a.cm_connect(&ConnectParams::new(SocketAddrV4::new(ib, PORT + 1), init, vec![])).unwrap();
    assert_eq!(event(&mut a), Some(CmEvent::Unreachable { conn, reason: UnreachableReason::NoListener }));
    // Nobody at all on 127.92.4.9: the REQ goes out 1 + CM_MAX_RETRIES times.
    let init = qp_init(&mut a);
    let start = a.now();
    let nowhere = SocketAddrV4::new(Ipv4Addr::new(127, 92, 4, 9), PORT);
    let (conn, _) = a.cm_connect(&ConnectParams::new(nowhere, init, vec![])).unwrap();
    assert_eq!(event(&mut a), Some(CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout }));
    assert!(a.now() - start >= rctb_engine::CM_TIMEOUT);
    assert_eq!(a.engine_counters().cm_timeouts, 1);
}
