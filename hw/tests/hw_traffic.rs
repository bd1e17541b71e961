//! Real verbs traffic between two RDMA devices of this machine (rxe0/rxe1 in
//! the VM harness, or two ports of a NIC):
//!
//! ```sh
//! RCTB_RDMA_DEVICE=rxe1 RCTB_RDMA_PEER_DEVICE=rxe0 cargo test -p rctb-hw --test hw_traffic
//! ```
//!
//! Without both variables at build time the tests are `#[ignore]`d; run
//! with `--include-ignored` but without the variables, they skip. Optional:
//! `RCTB_RDMA_GID_INDEX` (default: detected from sysfs for the peer's /24).
//!
//! One thread drives both transports: everything is non-blocking, and
//! `wait` with short deadlines lets each side's events through.

use std::net::SocketAddrV4;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_hw::VerbsTransport;

const TIMEOUT: Duration = Duration::from_secs(10);

/// One side of a test: transport plus the usual resources.
struct Player {
    t: VerbsTransport,
    pd: PdId,
    cq: CqId,
    mr: MrInfo,
}

impl Player {
    fn new(name: &str) -> Player {
        let mut t = VerbsTransport::open(name).unwrap_or_else(|e| panic!("open {name}: {e}"));
        let pd = t.alloc_pd().unwrap();
        let cq = t.create_cq(256).unwrap();
        let mr = t.reg_mr(pd, 1 << 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        Player { t, pd, cq, mr }
    }

    fn qp_init(&self) -> QpInit {
        QpInit {
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            caps: QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 },
            sq_sig_all: false,
            srq: None,
        }
    }

    /// Waits for `n` completions (or fails after TIMEOUT).
    fn completions(&mut self, n: usize) -> Vec<Completion> {
        let deadline = self.t.now() + TIMEOUT;
        let mut out = Vec::new();
        while out.len() < n {
            match self.t.wait(&[self.cq], deadline).unwrap() {
                Readiness::Ready => {
                    self.t.poll_cq(self.cq, n - out.len(), &mut out).unwrap();
                }
                Readiness::TimedOut => panic!("{} of {n} completions after {TIMEOUT:?}: {out:?}", out.len()),
            }
        }
        out
    }

    fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.t.mr_read(self.mr.id, offset, &mut buf).unwrap();
        buf
    }

    fn ip(&self) -> std::net::Ipv4Addr {
        self.t.device_ipv4().expect("device has an IPv4-mapped RoCE v2 GID")
    }
}

fn devices() -> Option<(String, String)> {
    match (std::env::var("RCTB_RDMA_DEVICE"), std::env::var("RCTB_RDMA_PEER_DEVICE")) {
        (Ok(a), Ok(b)) if !a.is_empty() && !b.is_empty() => Some((a, b)),
        _ => {
            eprintln!("skipped: set RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE");
            None
        }
    }
}

fn gid_index(me: &Player, peer: &Player) -> u32 {
    match std::env::var("RCTB_RDMA_GID_INDEX") {
        Ok(v) => v.parse().expect("RCTB_RDMA_GID_INDEX is a number"),
        Err(_) => me.t.detect_gid_index(1, peer.ip()).unwrap_or_else(|e| panic!("{e}")),
    }
}

fn to_init(me: &mut Player, qp: QpId) {
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    me.t.modify_qp(qp, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).unwrap();
}

/// Brings `qp` of `me` from INIT to RTS towards `peer_qpn` of `peer`, by
/// hand as the FPGA handshake does (QPNs and PSNs exchanged out of band).
fn to_rts(me: &mut Player, qp: QpId, peer: &Player, peer_qpn: Qpn, my_psn: u32, peer_psn: u32) {
    let mtu = me.t.port(1).unwrap().active_mtu.min(peer.t.port(1).unwrap().active_mtu);
    let av = AddressVector::new(Gid::from_ipv4(peer.ip()), gid_index(me, peer));
    let rtr = RtrAttr {
        path_mtu: mtu,
        dest_qpn: peer_qpn,
        rq_psn: Psn::new(peer_psn).unwrap(),
        max_dest_rd_atomic: 16,
        min_rnr_timer: RnrTimer::default(),
        av,
    };
    me.t.modify_qp(qp, &QpTransition::Rtr(rtr)).unwrap();
    let rts = RtsAttr { sq_psn: Psn::new(my_psn).unwrap(), timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 16 };
    me.t.modify_qp(qp, &QpTransition::Rts(rts)).unwrap();
    assert_eq!(me.t.query_qp(qp).unwrap().state, QpState::Rts);
}

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn manual_rc_send_write_read_and_errors() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let mut b = Player::new(&dev_b);
    let qa = a.t.create_qp(&a.qp_init()).unwrap();
    let qb = b.t.create_qp(&b.qp_init()).unwrap();
    assert_eq!(qa.state, QpState::Reset);

    // rxe refuses receives in RESET: the trait says InvalidState.
    let e = b.t.post_recv(qb.id, &RecvWr::new(1, &[Sge::new(b.mr.id, 0, 64)])).unwrap_err();
    assert!(matches!(e, TransportError::InvalidState { state: QpState::Reset, .. }), "{e:?}");

    to_init(&mut a, qa.id);
    to_init(&mut b, qb.id);
    for i in 0..4 {
        b.t.post_recv(qb.id, &RecvWr::new(100 + i, &[Sge::new(b.mr.id, 1024 * i, 1024)])).unwrap();
    }
    to_rts(&mut a, qa.id, &b, qb.qpn, 0x10, 0x20);
    to_rts(&mut b, qb.id, &a, qa.qpn, 0x20, 0x10);

    // SEND with immediate, two SGEs.
    a.t.mr_write(a.mr.id, 0, b"hello, ").unwrap();
    a.t.mr_write(a.mr.id, 100, b"rxe").unwrap();
    let sges = [Sge::new(a.mr.id, 0, 7), Sge::new(a.mr.id, 100, 3)];
    a.t.post_send(qa.id, &SendWr::new(1, SendOp::SendWithImm { imm: 0x1234_5678 }, &sges)).unwrap();
    let c = a.completions(1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode, c[0].qp), (1, WcStatus::Success, WcOpcode::Send, qa.id));
    let c = b.completions(1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (100, WcStatus::Success, WcOpcode::Recv));
    assert_eq!((c[0].byte_len, c[0].imm, c[0].qp), (10, Some(0x1234_5678), qb.id));
    assert_eq!(b.read(0, 10), b"hello, rxe");

    // Plain SEND: no immediate.
    a.t.post_send(qa.id, &SendWr::new(2, SendOp::Send, &sges[..1])).unwrap();
    a.completions(1);
    let c = b.completions(1);
    assert_eq!((c[0].wr_id, c[0].byte_len, c[0].imm), (101, 7, None));

    // RDMA WRITE (multi-packet at the 1024 MTU), unsignaled, then a
    // signaled one whose completion implies the first (RC is in order).
    let pattern: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.t.mr_write(a.mr.id, 8192, &pattern).unwrap();
    let remote = b.mr.remote(16384);
    let bulk = [Sge::new(a.mr.id, 8192, 5000)];
    let w = SendWr::new(3, SendOp::Write { remote }, &bulk).unsignaled();
    a.t.post_send(qa.id, &w).unwrap();
    a.t.post_send(qa.id, &SendWr::new(4, SendOp::Write { remote: b.mr.remote(30000) }, &[Sge::new(a.mr.id, 0, 10)]))
        .unwrap();
    let c = a.completions(1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (4, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(b.read(16384, 5000), pattern);
    assert_eq!(b.read(30000, 10), a.read(0, 10));

    // RDMA WRITE with immediate consumes a receive.
    a.t.post_send(qa.id, &SendWr::new(5, SendOp::WriteWithImm { remote: b.mr.remote(40000), imm: 7 }, &sges[..1]))
        .unwrap();
    a.completions(1);
    let c = b.completions(1);
    assert_eq!((c[0].wr_id, c[0].opcode, c[0].imm, c[0].byte_len), (102, WcOpcode::RecvRdmaWithImm, Some(7), 7));
    assert_eq!(b.read(40000, 7), b"hello, ");

    // RDMA READ back into a.
    a.t.post_send(
        qa.id,
        &SendWr::new(6, SendOp::Read { remote: b.mr.remote(16384) }, &[Sge::new(a.mr.id, 20000, 5000)]),
    )
    .unwrap();
    let c = a.completions(1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode, c[0].byte_len), (6, WcStatus::Success, WcOpcode::RdmaRead, 5000));
    assert_eq!(a.read(20000, 5000), pattern);

    // A bad rkey: REM_ACCESS_ERR, reported with the WR's opcode; the QP
    // goes to ERR and later work flushes.
    let bad = RemoteAddr { addr: b.mr.addr, rkey: b.mr.rkey ^ 0xFF00 };
    a.t.post_send(qa.id, &SendWr::new(7, SendOp::Write { remote: bad }, &sges[..1])).unwrap();
    let c = a.completions(1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (7, WcStatus::RemAccessErr, WcOpcode::RdmaWrite));
    assert_eq!(a.t.query_qp(qa.id).unwrap().state, QpState::Err);
    a.t.post_send(qa.id, &SendWr::new(8, SendOp::Read { remote: b.mr.remote(0) }, &sges[..1])).unwrap();
    let c = a.completions(1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (8, WcStatus::WrFlushErr, WcOpcode::RdmaRead));

    // Busy parents, then an orderly teardown.
    assert!(matches!(a.t.dealloc_pd(a.pd), Err(TransportError::Busy { .. })));
    assert!(matches!(a.t.destroy_cq(a.cq), Err(TransportError::Busy { .. })));
    b.t.modify_qp(qb.id, &QpTransition::Err).unwrap();
    let flushed = b.completions(1);
    assert_eq!((flushed[0].wr_id, flushed[0].status, flushed[0].opcode), (103, WcStatus::WrFlushErr, WcOpcode::Recv));
    a.t.destroy_qp(qa.id).unwrap();
    b.t.destroy_qp(qb.id).unwrap();
    a.t.dereg_mr(a.mr.id).unwrap();
    assert!(matches!(a.t.mr_info(a.mr.id), Err(TransportError::InvalidHandle { .. })));
    a.t.destroy_cq(a.cq).unwrap();
    a.t.dealloc_pd(a.pd).unwrap();
    // b is dropped with everything still allocated: Drop releases it.
}

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn wait_times_out_on_a_shared_clock() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let b = Player::new(&dev_b);
    let start = a.t.now();
    // Both transports read one clock: the other's "now" is between ours.
    let other = b.t.now();
    let deadline = start + Duration::from_millis(50);
    assert_eq!(a.t.wait(&[a.cq], deadline).unwrap(), Readiness::TimedOut);
    let end = a.t.now();
    assert!(start <= other && other <= end);
    assert!(end >= deadline, "woke before the deadline: {end} < {deadline}");
    assert!(end - deadline < Duration::from_millis(200), "overslept: {:?}", end - deadline);
    // A deadline in the past returns at once.
    assert_eq!(a.t.wait(&[a.cq], Instant::ZERO).unwrap(), Readiness::TimedOut);
    assert!(matches!(a.t.wait(&[CqId(9999)], deadline), Err(TransportError::InvalidHandle { .. })));
}

/// Which side an event came from.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    A,
    B,
}

/// The next CM event of either side.
fn next_event(a: &mut Player, b: &mut Player) -> (Side, CmEvent) {
    let deadline = a.t.now() + TIMEOUT;
    loop {
        if let Some(e) = a.t.cm_poll() {
            return (Side::A, e);
        }
        if let Some(e) = b.t.cm_poll() {
            return (Side::B, e);
        }
        assert!(
            a.t.now() < deadline,
            "no CM event within {TIMEOUT:?}; errors: {:?} {:?}",
            a.t.take_cm_error(),
            b.t.take_cm_error()
        );
        let soon = a.t.now() + Duration::from_millis(5);
        a.t.wait(&[], soon).unwrap();
        let soon = b.t.now() + Duration::from_millis(5);
        b.t.wait(&[], soon).unwrap();
    }
}

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn cm_connect_accept_send_disconnect() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let mut b = Player::new(&dev_b);
    let listener = b.t.cm_listen(0).unwrap();
    let port = b.t.listen_port(listener).unwrap();
    assert_ne!(port, 0);
    let remote = SocketAddrV4::new(b.ip(), port);
    let (conn_a, qp_a) = a.t.cm_connect(&ConnectParams::new(remote, a.qp_init(), b"hello from a".to_vec())).unwrap();
    // The QP does not exist until the route is resolved (it may have been
    // by now on a fast machine).
    assert!(matches!(a.t.query_qp(qp_a), Err(TransportError::InvalidState { .. }) | Ok(_)));

    let (side, ev) = next_event(&mut a, &mut b);
    let CmEvent::ConnectRequest { listener: l, conn: conn_b, remote: peer, private_data, .. } = ev else {
        panic!("{side:?}: {ev:?}")
    };
    assert_eq!((side, l), (Side::B, listener));
    assert_eq!(*peer.ip(), a.ip());
    // The IB CM pads REQ private data to 56 bytes.
    assert!(private_data.starts_with(b"hello from a"), "{private_data:?}");
    assert!(private_data[12..].iter().all(|&x| x == 0));

    let qp_b = b.t.cm_accept(conn_b, &AcceptParams::new(b.qp_init(), b"welcome".to_vec())).unwrap();
    assert_eq!(b.t.query_qp(qp_b).unwrap().state, QpState::Rts);
    b.t.post_recv(qp_b, &RecvWr::new(77, &[Sge::new(b.mr.id, 0, 256)])).unwrap();

    let mut established = Vec::new();
    while established.len() < 2 {
        match next_event(&mut a, &mut b) {
            (Side::A, CmEvent::Established { conn, qp, private_data }) => {
                assert_eq!((conn, qp), (conn_a, qp_a));
                assert!(private_data.starts_with(b"welcome"), "{private_data:?}");
                established.push(Side::A);
            }
            (Side::B, CmEvent::Established { conn, qp, .. }) => {
                assert_eq!((conn, qp), (conn_b, qp_b));
                established.push(Side::B);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(a.t.query_qp(qp_a).unwrap().state, QpState::Rts);

    a.t.mr_write(a.mr.id, 0, b"over rdma_cm").unwrap();
    a.t.post_send(qp_a, &SendWr::new(1, SendOp::SendWithImm { imm: 42 }, &[Sge::new(a.mr.id, 0, 12)])).unwrap();
    assert_eq!(a.completions(1)[0].status, WcStatus::Success);
    let c = b.completions(1);
    assert_eq!((c[0].wr_id, c[0].byte_len, c[0].imm, c[0].qp), (77, 12, Some(42), qp_b));
    assert_eq!(b.read(0, 12), b"over rdma_cm");

    a.t.cm_disconnect(conn_a).unwrap();
    let mut disconnected = Vec::new();
    while disconnected.len() < 2 {
        match next_event(&mut a, &mut b) {
            (side, CmEvent::Disconnected { conn }) => {
                assert_eq!(conn, if side == Side::A { conn_a } else { conn_b });
                disconnected.push(side);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(a.t.query_qp(qp_a).unwrap().state, QpState::Err);
    assert_eq!(b.t.query_qp(qp_b).unwrap().state, QpState::Err);

    // The QP outlives its CM id.
    a.t.cm_destroy(conn_a).unwrap();
    assert_eq!(a.t.query_qp(qp_a).unwrap().state, QpState::Err);
    a.t.destroy_qp(qp_a).unwrap();
    b.t.destroy_qp(qp_b).unwrap();
    b.t.cm_destroy(conn_b).unwrap();
    b.t.cm_close_listener(listener).unwrap();
    assert!(a.t.take_cm_error().is_none() && b.t.take_cm_error().is_none());
}

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn cm_reject_and_no_listener() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let mut b = Player::new(&dev_b);
    let listener = b.t.cm_listen(0).unwrap();
    let port = b.t.listen_port(listener).unwrap();
    // A second listener on the same port is Busy.
    assert!(matches!(b.t.cm_listen(port), Err(TransportError::Busy { .. })));

    let (conn_a, qp_a) =
        a.t.cm_connect(&ConnectParams::new(SocketAddrV4::new(b.ip(), port), a.qp_init(), b"knock".to_vec())).unwrap();
    let (_, ev) = next_event(&mut a, &mut b);
    let CmEvent::ConnectRequest { conn: conn_b, .. } = ev else { panic!("{ev:?}") };
    b.t.cm_reject(conn_b, b"go away").unwrap();
    match next_event(&mut a, &mut b) {
        (Side::A, CmEvent::Rejected { conn, private_data }) => {
            assert_eq!(conn, conn_a);
            assert!(private_data.starts_with(b"go away"), "{private_data:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
    a.t.cm_destroy(conn_a).unwrap();
    a.t.destroy_qp(qp_a).unwrap();
    b.t.cm_destroy(conn_b).unwrap();

    // Nobody listens on that port any more.
    b.t.cm_close_listener(listener).unwrap();
    let (conn_a, qp_a) =
        a.t.cm_connect(&ConnectParams::new(SocketAddrV4::new(b.ip(), port), a.qp_init(), Vec::new())).unwrap();
    match next_event(&mut a, &mut b) {
        (Side::A, CmEvent::Unreachable { conn, reason }) => {
            assert_eq!((conn, reason), (conn_a, UnreachableReason::NoListener));
        }
        other => panic!("expected Unreachable NoListener, got {other:?}"),
    }
    a.t.cm_destroy(conn_a).unwrap();
    a.t.destroy_qp(qp_a).unwrap();
}

/// A connected pair of RC QPs, brought up by hand; `rnr_retry` for a's side.
fn manual_pair(a: &mut Player, b: &mut Player, rnr_retry: u8) -> (QpId, QpId) {
    let qa = a.t.create_qp(&a.qp_init()).unwrap();
    let qb = b.t.create_qp(&b.qp_init()).unwrap();
    to_init(a, qa.id);
    to_init(b, qb.id);
    to_rts(a, qa.id, b, qb.qpn, 100, 200);
    to_rts(b, qb.id, a, qa.qpn, 200, 100);
    if rnr_retry != 7 {
        // Bring a's side up again from RESET with the requested rnr_retry
        // and the shortest RNR timer.
        a.t.modify_qp(qa.id, &QpTransition::Reset).unwrap();
        to_init(a, qa.id);
        let mtu = a.t.port(1).unwrap().active_mtu.min(b.t.port(1).unwrap().active_mtu);
        let av = AddressVector::new(Gid::from_ipv4(b.ip()), gid_index(a, b));
        let rtr = RtrAttr {
            path_mtu: mtu,
            dest_qpn: qb.qpn,
            rq_psn: Psn::new(200).unwrap(),
            max_dest_rd_atomic: 16,
            min_rnr_timer: RnrTimer::from_code(1).unwrap(),
            av,
        };
        a.t.modify_qp(qa.id, &QpTransition::Rtr(rtr)).unwrap();
        let rts = RtsAttr { sq_psn: Psn::new(100).unwrap(), timeout: 14, retry_cnt: 7, rnr_retry, max_rd_atomic: 16 };
        a.t.modify_qp(qa.id, &QpTransition::Rts(rts)).unwrap();
    }
    (qa.id, qb.id)
}

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn rnr_retry_exhaustion_and_mr_view() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let mut b = Player::new(&dev_b);
    let (qa, _qb) = manual_pair(&mut a, &mut b, 0);
    a.t.mr_write(a.mr.id, 0, b"no receive posted").unwrap();
    let mut seen = Vec::new();
    a.t.mr_view(a.mr.id, 0, 17, &mut |bytes: &[u8]| seen.extend_from_slice(bytes)).unwrap();
    assert_eq!(seen, b"no receive posted");
    assert!(matches!(
        a.t.mr_view(a.mr.id, 1 << 16, 1, &mut |_: &[u8]| {}),
        Err(TransportError::InvalidArgument { .. })
    ));
    a.t.post_send(qa, &SendWr::new(9, SendOp::Send, &[Sge::new(a.mr.id, 0, 17)])).unwrap();
    let c = a.completions(1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (9, WcStatus::RnrRetryExcErr, WcOpcode::Send));
}

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn transports_move_to_threads_and_wait_blocks_until_traffic() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let mut b = Player::new(&dev_b);
    let (qa, qb) = manual_pair(&mut a, &mut b, 7);
    const N: u64 = 200;
    for i in 0..32 {
        b.t.post_recv(qb, &RecvWr::new(i, &[Sge::new(b.mr.id, 64 * i, 64)])).unwrap();
    }
    // b moves to its own thread and blocks in `wait` (no spinning) until
    // each message lands, re-posting receives as they complete.
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut posted = 32;
        while (got.len() as u64) < N {
            let deadline = b.t.now() + TIMEOUT;
            assert_eq!(b.t.wait(&[b.cq], deadline).unwrap(), Readiness::Ready);
            let mut out = Vec::new();
            b.t.poll_cq(b.cq, 16, &mut out).unwrap();
            for c in out {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                got.push(c.imm.unwrap());
                if posted < N {
                    let slot = c.wr_id;
                    b.t.post_recv(qb, &RecvWr::new(slot, &[Sge::new(b.mr.id, 64 * slot, 64)])).unwrap();
                    posted += 1;
                }
            }
        }
        got
    });
    for i in 0..N {
        let signaled = i % 16 == 15 || i == N - 1;
        let mut wr = SendWr::new(i, SendOp::SendWithImm { imm: i as u32 }, &[]);
        wr.signaled = signaled;
        a.t.post_send(qa, &wr).unwrap();
        if signaled {
            // rnr_retry 7 (forever): the sender just waits for the receiver.
            assert_eq!(a.completions(1)[0].status, WcStatus::Success);
        }
    }
    let got = receiver.join().unwrap();
    assert_eq!(got, (0..N as u32).collect::<Vec<_>>());
}

/// The next CM event of `t` alone (nothing else is driven meanwhile).
fn own_event(p: &mut Player) -> CmEvent {
    let deadline = p.t.now() + TIMEOUT;
    loop {
        if let Some(e) = p.t.cm_poll() {
            return e;
        }
        if p.t.wait(&[], deadline).unwrap() == Readiness::TimedOut {
            panic!("no CM event within {TIMEOUT:?}; error: {:?}", p.t.take_cm_error());
        }
    }
}

/// What a single-threaded harness does: wait on one side at a time. The
/// REQ must leave during `cm_connect`, and the initiator of a disconnect
/// must not depend on the peer being driven.
#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn cm_one_side_at_a_time() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let mut b = Player::new(&dev_b);
    let listener = b.t.cm_listen(0).unwrap();
    let remote = SocketAddrV4::new(b.ip(), b.t.listen_port(listener).unwrap());
    let (conn_a, qp_a) = a.t.cm_connect(&ConnectParams::new(remote, a.qp_init(), b"one".to_vec())).unwrap();
    assert_eq!(a.t.query_qp(qp_a).unwrap().state, QpState::Init, "the REQ should be out, its QP made");
    let CmEvent::ConnectRequest { conn: conn_b, .. } = own_event(&mut b) else { panic!("expected a request") };
    let qp_b = b.t.cm_accept(conn_b, &AcceptParams::new(b.qp_init(), Vec::new())).unwrap();
    assert!(matches!(own_event(&mut a), CmEvent::Established { conn, qp, .. } if conn == conn_a && qp == qp_a));
    assert!(matches!(own_event(&mut b), CmEvent::Established { conn, qp, .. } if conn == conn_b && qp == qp_b));
    a.t.cm_disconnect(conn_a).unwrap();
    assert_eq!(own_event(&mut a), CmEvent::Disconnected { conn: conn_a });
    assert_eq!(a.t.query_qp(qp_a).unwrap().state, QpState::Err);
    assert_eq!(own_event(&mut b), CmEvent::Disconnected { conn: conn_b });
    assert_eq!(b.t.query_qp(qp_b).unwrap().state, QpState::Err);
    // The late DISCONNECTED of a's own id (after b's DREP) is not reported twice.
    let soon = a.t.now() + Duration::from_millis(200);
    a.t.wait(&[], soon).unwrap();
    assert_eq!(a.t.cm_poll(), None);
    assert!(a.t.take_cm_error().is_none() && b.t.take_cm_error().is_none());
}

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn chained_receives_are_checked_whole_then_posted_in_order() {
    let Some((dev_a, dev_b)) = devices() else { return };
    let mut a = Player::new(&dev_a);
    let mut b = Player::new(&dev_b);
    let qb_reset = b.t.create_qp(&b.qp_init()).unwrap();
    let sge = [Sge::new(b.mr.id, 0, 64)];
    // In RESET the chain is refused as a single receive is.
    let e = b.t.post_recv_many(qb_reset.id, &[RecvWr::new(1, &sge)]).unwrap_err();
    assert!(matches!(e, TransportError::InvalidState { state: QpState::Reset, .. }), "{e:?}");
    b.t.destroy_qp(qb_reset.id).unwrap();

    let (qa, qb) = manual_pair(&mut a, &mut b, 7);
    let sges: Vec<[Sge; 1]> = (0..4).map(|i| [Sge::new(b.mr.id, i * 1024, 1024)]).collect();
    let three = [Sge::new(b.mr.id, 0, 8), Sge::new(b.mr.id, 8, 8), Sge::new(b.mr.id, 16, 8)];
    let outside = [Sge::new(b.mr.id, 1 << 16, 8)];
    let unknown = [Sge::new(MrId(999_999), 0, 8)];
    // A bad WR anywhere in the chain refuses the whole chain: nothing posted.
    for (bad, what) in [(&three[..], "three SGEs over max_recv_sge 2"), (&outside[..], "outside the region")] {
        let wrs = [RecvWr::new(100, &sges[0]), RecvWr::new(101, bad)];
        let e = b.t.post_recv_many(qb, &wrs).unwrap_err();
        assert!(matches!(e, TransportError::InvalidArgument { verb: Verb::PostRecv, .. }), "{what}: {e:?}");
    }
    let e = b.t.post_recv_many(qb, &[RecvWr::new(100, &sges[0]), RecvWr::new(102, &unknown)]).unwrap_err();
    assert!(matches!(e, TransportError::InvalidHandle { verb: Verb::PostRecv, .. }), "{e:?}");
    b.t.post_recv_many(qb, &[]).unwrap();

    // Four receives in one chain take four SENDs, in order.
    let wrs: Vec<RecvWr<'_>> = (0..4).map(|i| RecvWr::new(10 + i as u64, &sges[i])).collect();
    b.t.post_recv_many(qb, &wrs).unwrap();
    for i in 0..4u64 {
        a.t.mr_write(a.mr.id, i * 64, &[i as u8 + 1; 64]).unwrap();
        a.t.post_send(qa, &SendWr::new(i, SendOp::Send, &[Sge::new(a.mr.id, i * 64, 64)])).unwrap();
    }
    let sent = a.completions(4);
    assert!(sent.iter().all(|c| c.status == WcStatus::Success), "{sent:?}");
    let got = b.completions(4);
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![10, 11, 12, 13], "only the good chain was posted, in order: {got:?}");
    for i in 0..4u64 {
        assert_eq!(b.read(i * 1024, 64), vec![i as u8 + 1; 64]);
    }
    // Nothing else was posted: a fifth SEND finds no receive (RNR, retried
    // until one comes), so post one and see it land there.
    b.t.post_recv_many(qb, &[RecvWr::new(20, &sges[0])]).unwrap();
    a.t.post_send(qa, &SendWr::new(9, SendOp::Send, &[Sge::new(a.mr.id, 0, 64)])).unwrap();
    assert_eq!(b.completions(1)[0].wr_id, 20);
}
