//! RDMA CM carried as MADs on QP1 between two endpoints, the way the udp
//! backend carries it: every message is a UD packet the test may lose,
//! duplicate or delay. Connect, reject and disconnect converge, or end in
//! the typed timeout; duplicates are answered from the state, never acted
//! on twice; and nothing keeps running once both sides have settled.

use std::net::{Ipv4Addr, SocketAddrV4};

use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_core::wire::cm::CmMad;
use rctb_engine::cm::{Rejected, mad};
use rctb_engine::{CM_RESPONSE_TIMEOUT, CM_TIMEOUT, CmMessage, Endpoint, EndpointConfig, Packet, PacketDrop, cm_time};

const LATENCY: Duration = Duration::from_micros(5);
const IA: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IB: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 4420;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fate {
    Pass,
    Drop,
    Duplicate,
    Delay(Duration),
}

/// What the passive application does with a connect request.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    Accept,
    Reject,
}

struct Net {
    a: Endpoint,
    b: Endpoint,
    now: Instant,
    wire: Vec<(Instant, bool, Packet)>,
    /// Every MAD sent: (from a, its name).
    log: Vec<(bool, &'static str)>,
    events_a: Vec<CmEvent>,
    events_b: Vec<CmEvent>,
    answer: Answer,
}

fn endpoint(name: &str, ip: Ipv4Addr, seed: u64, mac: u8) -> Endpoint {
    let mut cfg = EndpointConfig::new(name, ip);
    cfg.mac = [0x02, 0, 0, 0, 0, mac];
    Endpoint::new(cfg, Box::new(ChaCha8Rng::seed_from_u64(seed)))
}

fn qp_init(ep: &mut Endpoint) -> QpInit {
    let pd = ep.alloc_pd().unwrap();
    let cq = ep.create_cq(64).unwrap();
    let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, ..QpCaps::default() };
    QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: None }
}

fn name(pkt: &Packet) -> &'static str {
    CmMad::decode(&pkt.payload).map(|m| m.message.name()).unwrap_or("?")
}

/// Hands `to` (at `to_ip`) the MAD of `msg` as the endpoint at `from` sends it.
fn inject(to: &mut Endpoint, to_ip: Ipv4Addr, from: Ipv4Addr, msg: &CmMessage) {
    let bytes = mad::to_mad(msg, from, to_ip, 0).unwrap();
    to.handle_packet(Instant::ZERO, &mad::gsi_packet(from, to_ip, Psn::wrapping(0), &bytes, Vec::new())).unwrap();
}

/// The QPN of the QP that `events` say came up.
fn established_qpn(ep: &Endpoint, events: &[CmEvent]) -> u32 {
    let qp = events.iter().find_map(|e| if let CmEvent::Established { qp, .. } = e { Some(*qp) } else { None });
    ep.query_qp(qp.expect("established")).unwrap().qpn
}

impl Net {
    fn new(answer: Answer) -> Net {
        let mut b = endpoint("b", IB, 2, 2);
        b.cm_listen(PORT).unwrap();
        Net {
            a: endpoint("a", IA, 1, 1),
            b,
            now: Instant::ZERO,
            wire: Vec::new(),
            log: Vec::new(),
            events_a: Vec::new(),
            events_b: Vec::new(),
            answer,
        }
    }

    fn connect(&mut self, private: &[u8]) -> ConnId {
        let init = qp_init(&mut self.a);
        let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, private.to_vec());
        self.a.cm_connect(self.now, &params).unwrap().0
    }

    /// Carries MADs (each through `fate`) and fires timers until nothing
    /// is left to do or `until` passes; the passive side answers requests.
    fn run(&mut self, until: Instant, fate: &mut dyn FnMut(bool, &'static str) -> Fate) {
        loop {
            for from_a in [true, false] {
                let ep = if from_a { &mut self.a } else { &mut self.b };
                while let Some(pkt) = ep.poll_cm_packet(&mut Vec::new()) {
                    assert_eq!(pkt.bth.dest_qp, 1);
                    let n = name(&pkt);
                    self.log.push((from_a, n));
                    let at = self.now + LATENCY;
                    match fate(from_a, n) {
                        Fate::Pass => self.wire.push((at, from_a, pkt)),
                        Fate::Drop => {}
                        Fate::Duplicate => {
                            self.wire.push((at, from_a, pkt.clone()));
                            self.wire.push((at + LATENCY, from_a, pkt));
                        }
                        Fate::Delay(d) => self.wire.push((at + d, from_a, pkt)),
                    }
                }
                // No RC traffic here: QPs only change state.
                let mut buf = Vec::new();
                while ep.poll_transmit(self.now, &mut buf).is_some() {}
            }
            while let Some(ev) = self.a.poll_cm_event() {
                self.events_a.push(ev);
            }
            while let Some(ev) = self.b.poll_cm_event() {
                if let CmEvent::ConnectRequest { conn, .. } = ev {
                    match self.answer {
                        Answer::Accept => {
                            let init = qp_init(&mut self.b);
                            self.b.cm_accept(self.now, conn, &AcceptParams::new(init, b"welcome".to_vec())).unwrap();
                        }
                        Answer::Reject => self.b.cm_reject(conn, &[0, 0, 6, 0]).unwrap(),
                    }
                }
                self.events_b.push(ev);
            }
            if self.a.wants_cm_transmit() || self.b.wants_cm_transmit() {
                continue;
            }
            let next_timer = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
            let next_frame = self.wire.iter().map(|(t, _, _)| *t).min();
            let Some(next) = [next_timer, next_frame].into_iter().flatten().min() else { return };
            if next > until {
                return;
            }
            self.now = self.now.max(next);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|(t, _, _)| *t <= now);
            self.wire = later;
            for (_, from_a, pkt) in due {
                let to = if from_a { &mut self.b } else { &mut self.a };
                to.handle_packet(now, &pkt).unwrap();
            }
            self.a.handle_timeout(now);
            self.b.handle_timeout(now);
        }
    }

    fn settle(&mut self, fate: &mut dyn FnMut(bool, &'static str) -> Fate) {
        let until = self.now + Duration::from_secs(60);
        self.run(until, fate);
        assert!(self.now < until, "CM still busy a minute on: {:?}", self.log);
    }

    fn count(events: &[CmEvent], f: impl Fn(&CmEvent) -> bool) -> usize {
        events.iter().filter(|e| f(e)).count()
    }

    fn established(&self) -> (usize, usize) {
        let f = |e: &CmEvent| matches!(e, CmEvent::Established { .. });
        (Self::count(&self.events_a, f), Self::count(&self.events_b, f))
    }

    fn disconnected(&self) -> (usize, usize) {
        let f = |e: &CmEvent| matches!(e, CmEvent::Disconnected { .. });
        (Self::count(&self.events_a, f), Self::count(&self.events_b, f))
    }

    fn sent(&self, from_a: bool, what: &str) -> usize {
        self.log.iter().filter(|(a, n)| *a == from_a && *n == what).count()
    }
}

/// Loses the first copy of each named message, passes the rest.
fn lose_first(names: &'static [&'static str]) -> impl FnMut(bool, &'static str) -> Fate {
    let mut lost: Vec<&str> = Vec::new();
    move |_, n| {
        if names.contains(&n) && !lost.contains(&n) {
            lost.push(n);
            Fate::Drop
        } else {
            Fate::Pass
        }
    }
}

#[test]
fn a_clean_exchange_is_req_rep_rtu_then_dreq_drep() {
    let mut net = Net::new(Answer::Accept);
    let conn = net.connect(b"hello");
    net.settle(&mut |_, _| Fate::Pass);
    assert_eq!(net.established(), (1, 1));
    let Some(CmEvent::ConnectRequest { private_data, remote, .. }) = net.events_b.first() else {
        panic!("{:?}", net.events_b)
    };
    // The consumer's bytes after the CMA header, zero padded to 56.
    assert_eq!((&private_data[..5], private_data.len()), (&b"hello"[..], 56));
    assert_eq!(remote.ip(), &IA);
    let Some(CmEvent::Established { private_data, .. }) = net.events_a.first() else { panic!() };
    assert_eq!(&private_data[..7], b"welcome");
    net.a.cm_disconnect(net.now, conn).unwrap();
    net.settle(&mut |_, _| Fate::Pass);
    assert_eq!(net.disconnected(), (1, 1));
    let order: Vec<_> = net.log.iter().map(|(_, n)| *n).collect();
    assert_eq!(order, ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    assert_eq!(net.a.counters().cm_retransmitted + net.b.counters().cm_retransmitted, 0);
}

#[test]
fn each_lost_message_is_sent_again_and_the_exchange_completes() {
    for lost in [&["REQ"][..], &["REP"], &["RTU"], &["REQ", "REP", "RTU"]] {
        let mut net = Net::new(Answer::Accept);
        let conn = net.connect(&[]);
        let lost: &'static [&'static str] = Box::leak(lost.to_vec().into_boxed_slice());
        let mut fate = lose_first(lost);
        net.settle(&mut fate);
        assert_eq!(net.established(), (1, 1), "lost {lost:?}: {:?}", net.log);
        assert_eq!(Net::count(&net.events_b, |e| matches!(e, CmEvent::ConnectRequest { .. })), 1);
        net.a.cm_disconnect(net.now, conn).unwrap();
        net.settle(&mut |_, _| Fate::Pass);
        assert_eq!(net.disconnected(), (1, 1), "lost {lost:?}");
    }
    // RTU lost: b sends its REP again, a answers it with the RTU again.
    let mut net = Net::new(Answer::Accept);
    net.connect(&[]);
    net.settle(&mut lose_first(&["RTU"]));
    assert_eq!((net.sent(false, "REP"), net.sent(true, "RTU")), (2, 2));
    assert_eq!(net.a.counters().cm_duplicates, 1);
}

#[test]
fn a_lost_dreq_or_drep_still_ends_in_both_sides_disconnected() {
    for lost in [&["DREQ"][..], &["DREP"], &["DREQ", "DREP"]] {
        let mut net = Net::new(Answer::Accept);
        let conn = net.connect(&[]);
        net.settle(&mut |_, _| Fate::Pass);
        net.a.cm_disconnect(net.now, conn).unwrap();
        let lost: &'static [&'static str] = Box::leak(lost.to_vec().into_boxed_slice());
        net.settle(&mut lose_first(lost));
        assert_eq!(net.disconnected(), (1, 1), "lost {lost:?}: {:?}", net.log);
        // Each loss costs a's DREQ one more trip (a lost DREP is answered
        // when the DREQ comes again).
        assert_eq!(net.sent(true, "DREQ"), 1 + lost.len(), "lost {lost:?}");
    }
}

#[test]
fn duplicates_are_answered_never_acted_on_twice() {
    let mut net = Net::new(Answer::Accept);
    let conn = net.connect(&[]);
    net.settle(&mut |_, _| Fate::Duplicate);
    assert_eq!(net.established(), (1, 1), "{:?}", net.log);
    assert_eq!(Net::count(&net.events_b, |e| matches!(e, CmEvent::ConnectRequest { .. })), 1);
    net.a.cm_disconnect(net.now, conn).unwrap();
    net.settle(&mut |_, _| Fate::Duplicate);
    assert_eq!(net.disconnected(), (1, 1));
    assert!(net.b.counters().cm_duplicates >= 2, "{:?}", net.b.counters());
}

#[test]
fn a_slow_application_gets_an_mra_sent_for_it() {
    // Every REP is held up: a sends its REQ again, and b, still waiting
    // on nothing (the REP is out), answers with the REP again.
    let mut net = Net::new(Answer::Accept);
    net.connect(&[]);
    let mut fate = |_, n| if n == "REP" { Fate::Delay(CM_TIMEOUT / 4) } else { Fate::Pass };
    net.settle(&mut fate);
    assert_eq!(net.established(), (1, 1), "{:?}", net.log);
    assert!(net.sent(true, "REQ") >= 2);

    // A REQ repeated while the application has not answered: MRA.
    let mut b = endpoint("b", IB, 2, 2);
    b.cm_listen(PORT).unwrap();
    let mut a = endpoint("a", IA, 1, 1);
    let init = qp_init(&mut a);
    let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, Vec::new());
    let (conn, _) = a.cm_connect(Instant::ZERO, &params).unwrap();
    let req = a.poll_cm_packet(&mut Vec::new()).unwrap();
    b.handle_packet(Instant::ZERO, &req).unwrap();
    b.handle_packet(Instant::ZERO, &req).unwrap();
    let mra = b.poll_cm_packet(&mut Vec::new()).expect("an MRA");
    assert_eq!(name(&mra), "MRA");
    // MRA byte 9, bits 7..3: the service timeout. b asks for four more
    // response timeouts: two codes above its own (each code doubles).
    assert_eq!(mra.payload[24 + 9] >> 3, CM_RESPONSE_TIMEOUT + 2);
    a.handle_packet(Instant::ZERO, &mra).unwrap();
    // a now waits past its usual retry for the answer.
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    assert!(a.poll_cm_packet(&mut Vec::new()).is_none(), "resent at the old deadline despite the MRA");
    assert!(a.poll_cm_event().is_none());
    // The REQ goes again once the MRA's wait and a response timeout are over.
    let again = a.poll_timeout().unwrap();
    assert_eq!(again, Instant::ZERO + cm_time(CM_RESPONSE_TIMEOUT) * 4 + cm_time(CM_RESPONSE_TIMEOUT));
    a.handle_timeout(again);
    assert_eq!(a.poll_cm_packet(&mut Vec::new()).map(|p| name(&p)), Some("REQ"));
    let _ = conn;
}

#[test]
fn a_reject_and_a_missing_listener_reach_the_active_side_typed() {
    // The REJ is lost: a sends its REQ again, and b answers it with the
    // same REJ (it keeps it), not with a second request to the application.
    let mut net = Net::new(Answer::Reject);
    let conn = net.connect(&[]);
    net.settle(&mut lose_first(&["REJ"]));
    assert!(matches!(net.events_a[..], [CmEvent::Rejected { conn: c, .. }] if c == conn), "{:?}", net.events_a);
    assert_eq!(Net::count(&net.events_b, |e| matches!(e, CmEvent::ConnectRequest { .. })), 1);
    assert_eq!(net.sent(false, "REJ"), 2);

    let mut net = Net::new(Answer::Reject);
    let conn = net.connect(&[]);
    net.settle(&mut |_, _| Fate::Pass);
    let Some(CmEvent::Rejected { conn: c, private_data }) = net.events_a.first() else { panic!("{:?}", net.events_a) };
    assert_eq!((*c, &private_data[..4]), (conn, &[0, 0, 6, 0][..]));

    let mut net = Net::new(Answer::Accept);
    net.b.cm_close_listener(ListenId(1)).unwrap();
    let conn = net.connect(&[]);
    net.settle(&mut |_, _| Fate::Pass);
    assert_eq!(net.events_a, [CmEvent::Unreachable { conn, reason: UnreachableReason::NoListener }]);
    assert_eq!(net.b.counters().cm_rejected, 1);
}

#[test]
fn hostile_mads_are_counted_or_rejected_never_a_panic() {
    let mut b = endpoint("b", IB, 2, 2);
    b.cm_listen(PORT).unwrap();
    let mut a = endpoint("a", IA, 1, 1);
    let init = qp_init(&mut a);
    let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, Vec::new());
    a.cm_connect(Instant::ZERO, &params).unwrap();
    let req = a.poll_cm_packet(&mut Vec::new()).unwrap();
    let now = Instant::ZERO;
    // Not a MAD at all.
    let mut junk = req.clone();
    junk.payload.truncate(100);
    assert!(matches!(b.handle_packet(now, &junk), Err(PacketDrop::BadMad(_))));
    // Another management class.
    let mut other = req.clone();
    other.payload[1] = 0x81;
    assert!(matches!(b.handle_packet(now, &other), Err(PacketDrop::BadMad(_))));
    assert_eq!(b.counters().cm_dropped, 2);
    // A REQ for a service that is not an RDMA IP one, one for UD, one with
    // no CMA header and one with MTU code 7: each gets a REJ with its reason.
    let d = 24; // the CM message after the MAD header
    let cases: [(usize, u8, u8, u16); 4] = [
        (d + 12, 0xff, 0xff, 8),   // service id: not the RDMA IP prefix
        (d + 43, 0x06, 0x06, 9),   // transport service type 3, not RC
        (d + 141, 0xf0, 0x60, 28), // the CMA header says IPv6: rdma_cm refuses it
        (d + 50, 0xf0, 0x70, 26),  // path MTU code 7
    ];
    for (at, mask, set, reason) in cases {
        let mut bad = req.clone();
        bad.payload[at] = (bad.payload[at] & !mask) | set;
        b.handle_packet(now, &bad).unwrap();
        let rej = b.poll_cm_packet(&mut Vec::new()).expect("a REJ");
        let mad = CmMad::decode(&rej.payload).unwrap();
        let rctb_core::wire::cm::CmMessage::Rej(r) = mad.message else { panic!("{mad:?}") };
        assert_eq!(r.reason, reason, "byte {at}");
        assert_eq!(r.local_comm_id, 0, "no connection was made");
    }
    assert!(b.poll_cm_event().is_none(), "no bad REQ reaches the application");
    assert_eq!(b.resources().qps, 0);
}

#[test]
fn a_cm_time_code_doubles_4096_ns_and_stops_at_31() {
    assert_eq!(cm_time(0), Duration::from_nanos(4096));
    assert_eq!(cm_time(12), Duration::from_nanos(4096 << 12));
    assert_eq!(cm_time(31), Duration::from_nanos(4096 << 31));
    // The wire fields are 5 bits; a larger code (a value handed to
    // handle_cm, no MAD) reads as the largest there is.
    assert_eq!(cm_time(32), cm_time(31));
    assert_eq!(cm_time(255), cm_time(31));
}

#[test]
fn stale_or_foreign_messages_are_counted_as_ignored_and_change_nothing() {
    let mut net = Net::new(Answer::Accept);
    let a_conn = net.connect(&[]);
    net.settle(&mut |_, _| Fate::Pass);
    assert_eq!(net.established(), (1, 1));
    // A clean exchange ignores nothing.
    assert_eq!((net.a.counters().cm_ignored, net.b.counters().cm_ignored), (0, 0));
    let Some(&CmEvent::ConnectRequest { conn: b_conn, .. }) = net.events_b.first() else { panic!() };
    let (a_qpn, b_qpn) = (established_qpn(&net.a, &net.events_a), established_qpn(&net.b, &net.events_b));
    // An id neither side gave out: another connection of the same peer.
    let other = ConnId(a_conn.0.max(b_conn.0) + 100);
    let rep = CmMessage::Rep {
        dst_conn: a_conn,
        src_conn: other,
        qpn: b_qpn,
        psn: Psn::wrapping(0),
        mtu: Mtu::Mtu1024,
        private_data: Vec::new(),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
    };
    let cases = [
        ("an RTU for no connection", false, CmMessage::Rtu { dst_conn: other, src_conn: a_conn }),
        ("an MRA once established", true, CmMessage::Mra { dst_conn: a_conn, src_conn: b_conn, service_timeout: 14 }),
        ("a REP from another connection", true, rep),
        (
            "a REJ once established",
            true,
            CmMessage::Rej {
                dst_conn: a_conn,
                src_conn: b_conn,
                rejected: Rejected::Req,
                reason: 28,
                private_data: Vec::new(),
            },
        ),
        ("a DREQ for another QP", true, CmMessage::Dreq { dst_conn: a_conn, src_conn: b_conn, remote_qpn: a_qpn + 1 }),
        (
            "a DREQ from another connection",
            true,
            CmMessage::Dreq { dst_conn: a_conn, src_conn: other, remote_qpn: a_qpn },
        ),
    ];
    for (what, to_a, msg) in cases {
        let (to, to_ip, from) = if to_a { (&mut net.a, IA, IB) } else { (&mut net.b, IB, IA) };
        let before = to.counters();
        inject(to, to_ip, from, &msg);
        let after = to.counters();
        assert_eq!(after.cm_ignored, before.cm_ignored + 1, "{what}");
        assert_eq!(after.cm_duplicates, before.cm_duplicates, "{what}: taken as a duplicate");
        assert!(to.poll_cm_packet(&mut Vec::new()).is_none(), "{what}: answered");
        assert!(to.poll_cm_event().is_none(), "{what}: reached the application");
    }
    // The connection is untouched: it still disconnects as usual.
    net.a.cm_disconnect(net.now, a_conn).unwrap();
    net.settle(&mut |_, _| Fate::Pass);
    assert_eq!(net.disconnected(), (1, 1));
}

#[test]
fn a_dreq_for_a_connection_still_connecting_is_ignored() {
    let mut a = endpoint("a", IA, 1, 1);
    let init = qp_init(&mut a);
    let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, Vec::new());
    let (conn, qp) = a.cm_connect(Instant::ZERO, &params).unwrap();
    assert_eq!(a.poll_cm_packet(&mut Vec::new()).map(|p| name(&p)), Some("REQ"));
    // Its QP and id, but no REP came yet: nothing to disconnect.
    let qpn = a.query_qp(qp).unwrap().qpn;
    inject(&mut a, IA, IB, &CmMessage::Dreq { dst_conn: conn, src_conn: ConnId(5), remote_qpn: qpn });
    assert_eq!(a.counters().cm_ignored, 1);
    assert!(a.poll_cm_packet(&mut Vec::new()).is_none(), "answered with a DREP");
    assert!(a.poll_cm_event().is_none());
}

#[test]
fn an_active_side_that_gives_up_tells_the_passive_side_it_timed_out() {
    let mut b = endpoint("b", IB, 2, 2);
    b.cm_listen(PORT).unwrap();
    let mut a = endpoint("a", IA, 1, 1);
    let init = qp_init(&mut a);
    let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, Vec::new());
    let (a_conn, _) = a.cm_connect(Instant::ZERO, &params).unwrap();
    let req = a.poll_cm_packet(&mut Vec::new()).unwrap();
    b.handle_packet(Instant::ZERO, &req).unwrap();
    let Some(CmEvent::ConnectRequest { conn: b_conn, .. }) = b.poll_cm_event() else { panic!() };
    let init = qp_init(&mut b);
    let b_qp = b.cm_accept(Instant::ZERO, b_conn, &AcceptParams::new(init, Vec::new())).unwrap();
    // Every REP is lost, and so are a's REQs sent again: a runs out of
    // retries and sends its last word, a REJ "timeout".
    assert_eq!(b.poll_cm_packet(&mut Vec::new()).map(|p| name(&p)), Some("REP"));
    let mut last = None;
    while let Some(t) = a.poll_timeout() {
        a.handle_timeout(t);
        while let Some(p) = a.poll_cm_packet(&mut Vec::new()) {
            last = Some((t, p));
        }
    }
    assert_eq!(a.poll_cm_event(), Some(CmEvent::Unreachable { conn: a_conn, reason: UnreachableReason::Timeout }));
    let (t, rej) = last.expect("a REJ");
    assert_eq!(name(&rej), "REJ");
    // b, still waiting for the RTU, learns the connect timed out (not that
    // it was rejected), and its QP goes to ERR.
    b.handle_packet(t, &rej).unwrap();
    assert_eq!(b.poll_cm_event(), Some(CmEvent::Unreachable { conn: b_conn, reason: UnreachableReason::Timeout }));
    assert_eq!(b.query_qp(b_qp).unwrap().state, QpState::Err);
}

/// One drawn fate per MAD, from a script the property test makes.
fn scripted(script: Vec<(u8, u8)>, drop_pct: u8) -> impl FnMut(bool, &'static str) -> Fate {
    let mut i = 0;
    move |_, _| {
        let (roll, delay) = script.get(i).copied().unwrap_or((255, 0));
        i += 1;
        match roll {
            r if r < drop_pct => Fate::Drop,
            r if r < drop_pct + 20 => Fate::Duplicate,
            r if r < drop_pct + 40 => Fate::Delay(Duration::from_millis(u64::from(delay % 40))),
            _ => Fate::Pass,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Under any pattern of loss (up to 40%), duplication and delay, a
    /// connect ends in exactly one outcome per side, the two agree, and a
    /// disconnect of an established pair reaches both sides; afterwards
    /// nothing more is sent. (Past its retries a side may still give up:
    /// the typed timeout, never a second outcome.)
    #[test]
    fn connect_and_disconnect_converge_under_loss(
        script in proptest::collection::vec((0u8..=255, 0u8..=255), 0..64),
        drop_pct in 0u8..40,
        reject in proptest::bool::ANY,
    ) {
        let answer = if reject { Answer::Reject } else { Answer::Accept };
        let mut net = Net::new(answer);
        let conn = net.connect(&[]);
        let mut fate = scripted(script, drop_pct);
        net.settle(&mut fate);
        let outcome = |e: &CmEvent| !matches!(e, CmEvent::ConnectRequest { .. });
        prop_assert_eq!(Net::count(&net.events_a, outcome), 1, "a: {:?} log {:?}", &net.events_a, &net.log);
        let requests = Net::count(&net.events_b, |e| matches!(e, CmEvent::ConnectRequest { .. }));
        prop_assert!(requests <= 1, "b saw {} requests", requests);
        prop_assert!(Net::count(&net.events_b, outcome) <= 1, "b: {:?}", &net.events_b);
        let (ea, eb) = net.established();
        match &net.events_a[..] {
            [CmEvent::Established { .. }] => prop_assert!(!reject),
            [CmEvent::Rejected { .. }] => prop_assert!(reject && eb == 0),
            [CmEvent::Unreachable { reason: UnreachableReason::Timeout, .. }] => prop_assert_eq!(eb, 0),
            other => prop_assert!(false, "a ended with {:?}", other),
        }
        if ea == 1 && eb == 1 {
            net.a.cm_disconnect(net.now, conn).unwrap();
            net.settle(&mut fate);
            let (da, db) = net.disconnected();
            prop_assert_eq!(da, 1);
            prop_assert!(db <= 1);
        }
        let quiet = net.log.len();
        net.settle(&mut fate);
        prop_assert_eq!(net.log.len(), quiet, "CM kept sending after both settled");
    }
}

#[test]
fn a_dreq_that_overtakes_a_lost_rtu_disconnects_the_passive_side() {
    // a gets the REP, goes to RTS, sends the RTU (lost) and at once
    // disconnects. b, still waiting for the RTU, takes the DREQ as the
    // kernel's CM does in REP_SENT: its QP goes to ERR, it reports the
    // disconnect and answers with a DREP, so a's DREQ is not sent again
    // until it gives up, and b does not time out its REP.
    let mut b = endpoint("b", IB, 2, 2);
    b.cm_listen(PORT).unwrap();
    let mut a = endpoint("a", IA, 1, 1);
    let init = qp_init(&mut a);
    let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, Vec::new());
    let (a_conn, _) = a.cm_connect(Instant::ZERO, &params).unwrap();
    let req = a.poll_cm_packet(&mut Vec::new()).unwrap();
    b.handle_packet(Instant::ZERO, &req).unwrap();
    let Some(CmEvent::ConnectRequest { conn: b_conn, .. }) = b.poll_cm_event() else { panic!() };
    let init = qp_init(&mut b);
    let b_qp = b.cm_accept(Instant::ZERO, b_conn, &AcceptParams::new(init, Vec::new())).unwrap();
    let rep = b.poll_cm_packet(&mut Vec::new()).unwrap();
    a.handle_packet(Instant::ZERO, &rep).unwrap();
    assert!(matches!(a.poll_cm_event(), Some(CmEvent::Established { .. })));
    assert_eq!(a.poll_cm_packet(&mut Vec::new()).map(|p| name(&p)), Some("RTU"), "the RTU, then lost");
    a.cm_disconnect(Instant::ZERO, a_conn).unwrap();
    assert_eq!(a.poll_cm_event(), Some(CmEvent::Disconnected { conn: a_conn }));
    let dreq = a.poll_cm_packet(&mut Vec::new()).unwrap();
    assert_eq!(name(&dreq), "DREQ");
    b.handle_packet(Instant::ZERO, &dreq).unwrap();
    assert_eq!(b.poll_cm_event(), Some(CmEvent::Disconnected { conn: b_conn }));
    assert_eq!(b.query_qp(b_qp).unwrap().state, QpState::Err);
    let drep = b.poll_cm_packet(&mut Vec::new()).unwrap();
    assert_eq!(name(&drep), "DREP");
    assert_eq!(b.counters().cm_ignored, 0);
    a.handle_packet(Instant::ZERO, &drep).unwrap();
    // Nothing more from either side: a's DREQ is answered, b's REP timer
    // is gone (no REJ "timeout", no Unreachable).
    for ep in [&mut a, &mut b] {
        while let Some(t) = ep.poll_timeout() {
            ep.handle_timeout(t);
        }
        assert!(ep.poll_cm_packet(&mut Vec::new()).is_none());
        assert!(ep.poll_cm_event().is_none());
    }
    assert_eq!(a.counters().cm_retransmitted, 0);
}

#[test]
fn an_active_side_that_cannot_take_the_rep_refuses_the_rep() {
    // a's QP is moved to ERR before the REP comes: a cannot bring it to
    // RTR, so it answers the REP with a REJ that says the REP is what it
    // refuses (the kernel's CM finds its connection by that), and reports
    // no route.
    let mut b = endpoint("b", IB, 2, 2);
    b.cm_listen(PORT).unwrap();
    let mut a = endpoint("a", IA, 1, 1);
    let init = qp_init(&mut a);
    let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, Vec::new());
    let (a_conn, a_qp) = a.cm_connect(Instant::ZERO, &params).unwrap();
    let req = a.poll_cm_packet(&mut Vec::new()).unwrap();
    b.handle_packet(Instant::ZERO, &req).unwrap();
    let Some(CmEvent::ConnectRequest { conn: b_conn, .. }) = b.poll_cm_event() else { panic!() };
    let init = qp_init(&mut b);
    b.cm_accept(Instant::ZERO, b_conn, &AcceptParams::new(init, Vec::new())).unwrap();
    a.modify_qp(Instant::ZERO, a_qp, &QpTransition::Err).unwrap();
    let rep = b.poll_cm_packet(&mut Vec::new()).unwrap();
    a.handle_packet(Instant::ZERO, &rep).unwrap();
    assert_eq!(a.poll_cm_event(), Some(CmEvent::Unreachable { conn: a_conn, reason: UnreachableReason::NoRoute }));
    let rej = a.poll_cm_packet(&mut Vec::new()).unwrap();
    match mad::from_mad(&rej.payload).unwrap() {
        CmMessage::Rej { rejected, dst_conn, reason, .. } => {
            assert_eq!((rejected, dst_conn, reason), (Rejected::Rep, b_conn, mad::reason::CONSUMER_DEFINED));
        }
        other => panic!("not a REJ: {other:?}"),
    }
}

#[test]
fn the_peers_first_packet_establishes_a_passive_side_whose_rtus_were_lost() {
    // Every RTU is lost, but a is up and sends on its QP: b takes the
    // packet as the RTU (IBA's "communication established"), reports the
    // connection up, and stops sending its REP again, so it does not time
    // the connection out under the peer's traffic.
    let mut b = endpoint("b", IB, 2, 2);
    b.cm_listen(PORT).unwrap();
    let mut a = endpoint("a", IA, 1, 1);
    let init = qp_init(&mut a);
    let params = ConnectParams::new(SocketAddrV4::new(IB, PORT), init, Vec::new());
    let (_, a_qp) = a.cm_connect(Instant::ZERO, &params).unwrap();
    let req = a.poll_cm_packet(&mut Vec::new()).unwrap();
    b.handle_packet(Instant::ZERO, &req).unwrap();
    let Some(CmEvent::ConnectRequest { conn: b_conn, .. }) = b.poll_cm_event() else { panic!() };
    let init = qp_init(&mut b);
    let b_qp = b.cm_accept(Instant::ZERO, b_conn, &AcceptParams::new(init, Vec::new())).unwrap();
    let rep = b.poll_cm_packet(&mut Vec::new()).unwrap();
    a.handle_packet(Instant::ZERO, &rep).unwrap();
    assert!(matches!(a.poll_cm_event(), Some(CmEvent::Established { .. })));
    assert_eq!(a.poll_cm_packet(&mut Vec::new()).map(|p| name(&p)), Some("RTU"), "the RTU, then lost");
    assert!(b.poll_cm_event().is_none(), "b is not up before a packet or the RTU");
    a.post_send(Instant::ZERO, a_qp, &SendWr::new(1, SendOp::Send, &[])).unwrap();
    let data = a.poll_transmit(Instant::ZERO, &mut Vec::new()).expect("a SEND").packet;
    b.handle_packet(Instant::ZERO, &data).unwrap();
    assert_eq!(b.poll_cm_event(), Some(CmEvent::Established { conn: b_conn, qp: b_qp, private_data: Vec::new() }));
    assert_eq!(b.counters().cm_established_by_data, 1);
    // b's REP timer finds the connection up: no REP again, no timeout.
    while let Some(t) = b.poll_timeout() {
        b.handle_timeout(t);
        assert!(b.poll_cm_packet(&mut Vec::new()).is_none(), "a REP or REJ at {t:?}");
    }
    assert!(b.poll_cm_event().is_none());
    assert_eq!(b.counters().cm_timeouts, 0);
}
