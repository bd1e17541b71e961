//! RDMA CM on QPs the application created first (`rdma_create_qp` before
//! `rdma_connect` / `rdma_accept`): `cm_connect_qp`, `cm_accept_qp` and
//! `cm_qp_attr`. Two endpoints in memory, the CM carried as values the test
//! may lose, RC packets carried as they come. Either side's QP may be its
//! own or the CM's; the CM drives both alike, data flows after, a reject
//! or a lost message is handled as for a created QP, the QP outlives its
//! connection, and every misuse is a typed error that changes nothing.
//! An application may also drive its QP itself (`rping -q`): it applies
//! `cm_qp_attr`'s values, and the active side sends the RTU with
//! `cm_establish`; the CM then never moves that QP.

use std::net::{Ipv4Addr, SocketAddrV4};

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_engine::{CM_QP_TIMEOUT, CmMessage, CmTransmit, Endpoint, EndpointConfig, Packet, QpDriver};

const LATENCY: Duration = Duration::from_micros(5);
const IA: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IB: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 4420;
const ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);

/// What the passive side does with a connect request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    /// `cm_accept`: the CM creates the QP.
    Created,
    /// `cm_accept_qp` on this QP.
    Existing(QpId),
    /// `cm_accept_qp` on this QP, which b drives itself: to RTS with
    /// `cm_qp_attr`'s values first, as `rping -q` does.
    SelfDriven(QpId),
    /// `cm_reject`.
    Reject,
    /// Nothing: the test answers.
    Hold,
}

struct Side {
    ep: Endpoint,
    pd: PdId,
    cq: CqId,
    mr: MrInfo,
    events: Vec<CmEvent>,
}

impl Side {
    fn new(name: &str, ip: Ipv4Addr, seed: u64) -> Side {
        let mut ep = Endpoint::new(EndpointConfig::new(name, ip), Box::new(ChaCha8Rng::seed_from_u64(seed)));
        let pd = ep.alloc_pd().unwrap();
        let cq = ep.create_cq(64).unwrap();
        let mr = ep.reg_mr(pd, 16384, ACCESS).unwrap();
        Side { ep, pd, cq, mr, events: Vec::new() }
    }

    fn init(&self) -> QpInit {
        let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, ..QpCaps::default() };
        QpInit { pd: self.pd, send_cq: self.cq, recv_cq: self.cq, caps, sq_sig_all: true, srq: None }
    }

    /// A QP of the application's own, in RESET.
    fn new_qp(&mut self) -> QpId {
        let init = self.init();
        self.ep.create_qp(&init).unwrap().id
    }

    fn state(&self, qp: QpId) -> QpState {
        self.ep.query_qp(qp).unwrap().state
    }

    fn established(&self) -> Vec<(ConnId, QpId)> {
        let up = |e: &CmEvent| match e {
            CmEvent::Established { conn, qp, .. } => Some((*conn, *qp)),
            _ => None,
        };
        self.events.iter().filter_map(up).collect()
    }
}

fn kind(msg: &CmMessage) -> &'static str {
    match msg {
        CmMessage::Req { .. } => "REQ",
        CmMessage::Mra { .. } => "MRA",
        CmMessage::Rep { .. } => "REP",
        CmMessage::Rtu { .. } => "RTU",
        CmMessage::Rej { .. } => "REJ",
        CmMessage::Dreq { .. } => "DREQ",
        CmMessage::Drep { .. } => "DREP",
    }
}

struct Net {
    a: Side,
    b: Side,
    now: Instant,
    cm: Vec<(Instant, bool, CmTransmit)>,
    rc: Vec<(Instant, bool, Packet)>,
    /// Every CM message sent: (from a, its kind).
    log: Vec<(bool, &'static str)>,
    answer: Answer,
    /// The connect requests b saw.
    requests: Vec<ConnId>,
    /// a drives this QP itself: on the REP it applies `cm_qp_attr`'s values
    /// and sends the RTU.
    a_drives: Option<QpId>,
}

/// What an application that drives its own QP does (`rping -q`'s
/// `rping_self_modify_qp`): INIT, RTR and RTS with the CM's attributes.
fn drive_to_rts(ep: &mut Endpoint, now: Instant, conn: ConnId, qp: QpId) {
    for target in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let t = ep.cm_qp_attr(conn, target).unwrap();
        ep.modify_qp(now, qp, &t).unwrap();
    }
}

impl Net {
    fn new(answer: Answer) -> Net {
        let mut b = Side::new("b", IB, 2);
        b.ep.cm_listen(PORT).unwrap();
        let a = Side::new("a", IA, 1);
        Net {
            a,
            b,
            now: Instant::ZERO,
            cm: Vec::new(),
            rc: Vec::new(),
            log: Vec::new(),
            answer,
            requests: Vec::new(),
            a_drives: None,
        }
    }

    fn params(&self) -> ConnectParams {
        ConnectParams::new(SocketAddrV4::new(IB, PORT), self.a.init(), b"hi".to_vec())
    }

    fn accept_params(&self) -> AcceptParams {
        AcceptParams::new(self.b.init(), b"welcome".to_vec())
    }

    /// Carries CM messages (each through `lose`: true drops it) and RC
    /// packets and fires timers until nothing is left to do or `until`.
    fn run(&mut self, until: Instant, lose: &mut dyn FnMut(bool, &'static str) -> bool) {
        loop {
            for from_a in [true, false] {
                let side = if from_a { &mut self.a } else { &mut self.b };
                while let Some(t) = side.ep.poll_cm_transmit() {
                    let k = kind(&t.msg);
                    self.log.push((from_a, k));
                    if !lose(from_a, k) {
                        self.cm.push((self.now + LATENCY, from_a, t));
                    }
                }
                let mut buf = Vec::new();
                while let Some(tx) = side.ep.poll_transmit(self.now, &mut buf) {
                    self.rc.push((self.now + LATENCY, from_a, tx.packet));
                }
            }
            while let Some(ev) = self.a.ep.poll_cm_event() {
                if let (CmEvent::ConnectResponse { conn, .. }, Some(qp)) = (&ev, self.a_drives) {
                    drive_to_rts(&mut self.a.ep, self.now, *conn, qp);
                    self.a.ep.cm_establish(self.now, *conn).unwrap();
                }
                self.a.events.push(ev);
            }
            while let Some(ev) = self.b.ep.poll_cm_event() {
                if let CmEvent::ConnectRequest { conn, .. } = ev {
                    self.requests.push(conn);
                    let now = self.now;
                    match self.answer {
                        Answer::Created => {
                            let p = self.accept_params();
                            self.b.ep.cm_accept(now, conn, &p).unwrap();
                        }
                        Answer::Existing(qp) => {
                            let p = self.accept_params();
                            self.b.ep.cm_accept_qp(now, conn, qp, QpDriver::Cm, &p).unwrap();
                        }
                        Answer::SelfDriven(qp) => {
                            drive_to_rts(&mut self.b.ep, now, conn, qp);
                            let p = self.accept_params();
                            self.b.ep.cm_accept_qp(now, conn, qp, QpDriver::Application, &p).unwrap();
                        }
                        Answer::Reject => self.b.ep.cm_reject(conn, b"no").unwrap(),
                        Answer::Hold => {}
                    }
                }
                self.b.events.push(ev);
            }
            if self.a.ep.wants_cm_transmit() || self.b.ep.wants_cm_transmit() {
                continue;
            }
            if self.a.ep.wants_transmit() || self.b.ep.wants_transmit() {
                continue;
            }
            let timers = [self.a.ep.poll_timeout(), self.b.ep.poll_timeout()];
            let frames = self.cm.iter().map(|(t, _, _)| *t).chain(self.rc.iter().map(|(t, _, _)| *t));
            let Some(next) = timers.into_iter().flatten().chain(frames).min() else { return };
            if next > until {
                return;
            }
            self.now = self.now.max(next);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) = self.cm.drain(..).partition(|(t, _, _)| *t <= now);
            self.cm = later;
            for (_, from_a, t) in due {
                let (to, from) = if from_a { (&mut self.b, IA) } else { (&mut self.a, IB) };
                to.ep.handle_cm(now, from, t.msg);
            }
            let (due, later): (Vec<_>, Vec<_>) = self.rc.drain(..).partition(|(t, _, _)| *t <= now);
            self.rc = later;
            for (_, from_a, pkt) in due {
                let to = if from_a { &mut self.b } else { &mut self.a };
                let _ = to.ep.handle_packet(now, &pkt);
            }
            self.a.ep.handle_timeout(now);
            self.b.ep.handle_timeout(now);
        }
    }

    fn settle(&mut self) {
        self.settle_losing(&mut |_, _| false);
    }

    fn settle_losing(&mut self, lose: &mut dyn FnMut(bool, &'static str) -> bool) {
        let until = self.now + Duration::from_secs(60);
        self.run(until, lose);
        assert!(self.now < until, "still busy a minute on: {:?}", self.log);
    }

    fn sent(&self, from_a: bool, what: &str) -> usize {
        self.log.iter().filter(|(a, n)| *a == from_a && *n == what).count()
    }

    /// Carries what is on its way for a millisecond: a request reaches a
    /// holding b, well before anything is sent again.
    fn deliver(&mut self) {
        let until = self.now + Duration::from_millis(1);
        self.run(until, &mut |_, _| false);
    }

    /// A SEND from a's `qa` to b's `qb`, then an RDMA WRITE from b into
    /// a's region: both complete and the bytes land.
    fn traffic(&mut self, qa: QpId, qb: QpId, tag: u8) {
        let msg = [tag; 100];
        let now = self.now;
        self.b.ep.post_recv(now, qb, &RecvWr::new(7, &[Sge::new(self.b.mr.id, 0, 200)])).unwrap();
        self.a.ep.mr_write(self.a.mr.id, 0, &msg).unwrap();
        let sge = [Sge::new(self.a.mr.id, 0, 100)];
        self.a.ep.post_send(now, qa, &SendWr::new(1, SendOp::Send, &sge)).unwrap();
        self.b.ep.mr_write(self.b.mr.id, 1024, &[tag ^ 0xff; 64]).unwrap();
        let remote = RemoteAddr { addr: self.a.mr.addr + 2048, rkey: self.a.mr.rkey };
        let sge = [Sge::new(self.b.mr.id, 1024, 64)];
        self.b.ep.post_send(now, qb, &SendWr::new(2, SendOp::Write { remote }, &sge)).unwrap();
        self.settle();
        // a: its SEND (the WRITE into it is silent); b: the receive and its WRITE.
        for (side, want) in [(&mut self.a, &[1][..]), (&mut self.b, &[2, 7])] {
            let mut wcs = Vec::new();
            side.ep.poll_cq(side.cq, 8, &mut wcs).unwrap();
            assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
            let mut got: Vec<_> = wcs.iter().map(|w| w.wr_id).collect();
            got.sort();
            assert_eq!(got, want);
        }
        let mut got = [0u8; 100];
        self.b.ep.mr_read(self.b.mr.id, 0, &mut got).unwrap();
        assert_eq!(got, msg, "the SEND's bytes");
        let mut got = [0u8; 64];
        self.a.ep.mr_read(self.a.mr.id, 2048, &mut got).unwrap();
        assert_eq!(got, [tag ^ 0xff; 64], "the WRITE's bytes");
    }
}

#[test]
fn both_sides_on_their_own_qps_connect_carry_data_and_keep_their_qps() {
    let mut net = Net::new(Answer::Hold);
    let qa = net.a.new_qp();
    let qb = net.b.new_qp();
    // b brings its QP to INIT itself (as rdma_create_qp does): the CM
    // takes it from there.
    let init = InitAttr { pkey_index: 0, port: 1, access: ACCESS };
    net.b.ep.modify_qp(net.now, qb, &QpTransition::Init(init)).unwrap();
    net.answer = Answer::Existing(qb);
    let params = net.params();
    let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
    assert_eq!(net.a.state(qa), QpState::Init, "the CM moves a RESET QP to INIT at once");
    net.settle();
    assert_eq!(net.a.established(), [(conn, qa)]);
    assert_eq!(net.b.established(), [(net.requests[0], qb)]);
    assert_eq!((net.a.state(qa), net.b.state(qb)), (QpState::Rts, QpState::Rts));
    assert_eq!(net.a.ep.resources().qps, 1, "no QP was created for the connection");
    assert_eq!(net.b.ep.resources().qps, 1);
    net.traffic(qa, qb, 1);

    // Disconnect: both QPs to ERR, and still the application's after the
    // connections are destroyed.
    net.a.ep.cm_disconnect(net.now, conn).unwrap();
    net.settle();
    assert_eq!((net.a.state(qa), net.b.state(qb)), (QpState::Err, QpState::Err));
    net.a.ep.cm_destroy(conn).unwrap();
    net.b.ep.cm_destroy(net.requests[0]).unwrap();
    assert_eq!((net.a.state(qa), net.b.state(qb)), (QpState::Err, QpState::Err));

    // Reset, they connect again, on the same QPs.
    for (side, qp) in [(&mut net.a, qa), (&mut net.b, qb)] {
        side.ep.modify_qp(Instant::ZERO, qp, &QpTransition::Reset).unwrap();
        side.events.clear();
        let mut wcs = Vec::new();
        side.ep.poll_cq(side.cq, 64, &mut wcs).unwrap();
    }
    let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
    net.settle();
    assert_eq!(net.a.established(), [(conn, qa)]);
    assert_eq!(net.b.established(), [(net.requests[1], qb)]);
    net.traffic(qa, qb, 2);
}

#[test]
fn one_side_created_the_other_its_own_either_way_round() {
    // a its own, b the CM's.
    let mut net = Net::new(Answer::Created);
    let qa = net.a.new_qp();
    let params = net.params();
    let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
    net.settle();
    assert_eq!(net.a.established(), [(conn, qa)]);
    let [(_, qb)] = net.b.established()[..] else { panic!("{:?}", net.b.events) };
    net.traffic(qa, qb, 3);

    // a the CM's, b its own.
    let mut net = Net::new(Answer::Hold);
    let qb = net.b.new_qp();
    net.answer = Answer::Existing(qb);
    let params = net.params();
    let (conn, qa) = net.a.ep.cm_connect(net.now, &params).unwrap();
    net.settle();
    assert_eq!(net.a.established(), [(conn, qa)]);
    assert_eq!(net.b.established(), [(net.requests[0], qb)]);
    net.traffic(qa, qb, 4);
}

#[test]
fn a_reject_leaves_the_active_qp_in_init_bound_until_destroyed() {
    let mut net = Net::new(Answer::Reject);
    let qa = net.a.new_qp();
    let params = net.params();
    let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
    net.settle();
    assert!(matches!(net.a.events[..], [CmEvent::Rejected { conn: c, .. }] if c == conn), "{:?}", net.a.events);
    assert_eq!(net.a.state(qa), QpState::Init, "a REJ does not touch the active side's QP");
    // Still the rejected connection's until it is destroyed.
    let e = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap_err();
    assert!(matches!(&e, TransportError::InvalidArgument { verb: Verb::CmConnect, source } if source.field == "qp"));
    net.a.ep.cm_destroy(conn).unwrap();
    assert_eq!(net.a.state(qa), QpState::Init);

    // Then it connects (from INIT) to a b that accepts.
    net.answer = Answer::Created;
    net.a.events.clear();
    let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
    net.settle();
    assert_eq!(net.a.established(), [(conn, qa)]);
    let [(_, qb)] = net.b.established()[..] else { panic!("{:?}", net.b.events) };
    net.traffic(qa, qb, 5);
}

#[test]
fn lost_req_rep_or_rtu_are_sent_again_with_existing_qps() {
    for lost in [&["REQ"][..], &["REP"], &["RTU"], &["REQ", "REP", "RTU"]] {
        let mut net = Net::new(Answer::Hold);
        let qa = net.a.new_qp();
        let qb = net.b.new_qp();
        net.answer = Answer::Existing(qb);
        let params = net.params();
        let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
        let mut dropped: Vec<&str> = Vec::new();
        net.settle_losing(&mut |_, k| {
            let drop = lost.contains(&k) && !dropped.contains(&k);
            if drop {
                dropped.push(k);
            }
            drop
        });
        assert_eq!(net.a.established(), [(conn, qa)], "lost {lost:?}: {:?}", net.log);
        assert_eq!(net.b.established(), [(net.requests[0], qb)], "lost {lost:?}: {:?}", net.log);
        assert_eq!(net.requests.len(), 1, "one request reached b's application");
        let resent = net.a.ep.counters().cm_retransmitted + net.b.ep.counters().cm_retransmitted;
        assert!(resent >= 1, "lost {lost:?}: nothing sent again: {:?}", net.log);
        net.traffic(qa, qb, 6);
    }
}

#[test]
fn a_rep_never_answered_moves_the_passive_qp_to_err_and_leaves_it_the_callers() {
    // Every RTU is lost (and so every REP after the first goes unanswered):
    // b gives up its REP, its QP goes to ERR, as a created one does.
    let mut net = Net::new(Answer::Hold);
    let qb = net.b.new_qp();
    net.answer = Answer::Existing(qb);
    let params = net.params();
    let qa = net.a.new_qp();
    net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
    net.settle_losing(&mut |from_a, k| from_a && k == "RTU");
    assert!(net.b.established().is_empty(), "{:?}", net.b.events);
    assert!(
        matches!(net.b.events[..], [_, CmEvent::Unreachable { reason: UnreachableReason::Timeout, .. }]),
        "{:?}",
        net.b.events
    );
    assert_eq!(net.b.state(qb), QpState::Err);
    net.b.ep.cm_destroy(net.requests[0]).unwrap();
    assert_eq!(net.b.state(qb), QpState::Err, "the QP outlives its connection");
    net.b.ep.destroy_qp(qb).unwrap();
}

#[test]
fn every_misuse_is_a_typed_error_and_changes_nothing() {
    let mut net = Net::new(Answer::Hold);
    let params = net.params();
    let now = net.now;
    let field = |e: &TransportError| match e {
        TransportError::InvalidArgument { source, .. } => source.field,
        other => panic!("not InvalidArgument: {other:?}"),
    };

    // Connect: unknown QP, too much private data, a QP past INIT.
    let e = net.a.ep.cm_connect_qp(now, QpId(999), QpDriver::Cm, &params).unwrap_err();
    assert!(matches!(e, TransportError::InvalidHandle { verb: Verb::CmConnect, .. }), "{e:?}");
    let qa = net.a.new_qp();
    let mut long = params.clone();
    long.private_data = vec![0; MAX_REQ_PRIVATE_DATA + 1];
    let e = net.a.ep.cm_connect_qp(now, qa, QpDriver::Cm, &long).unwrap_err();
    assert_eq!(field(&e), "private_data");
    assert_eq!(net.a.state(qa), QpState::Reset, "a failed connect leaves the QP as it was");
    net.a.ep.modify_qp(now, qa, &QpTransition::Err).unwrap();
    let e = net.a.ep.cm_connect_qp(now, qa, QpDriver::Cm, &params).unwrap_err();
    assert!(matches!(e, TransportError::InvalidState { verb: Verb::CmConnect, state: QpState::Err, .. }), "{e:?}");
    assert!(!net.a.ep.wants_cm_transmit(), "a refused connect sends nothing");
    net.a.ep.modify_qp(now, qa, &QpTransition::Reset).unwrap();

    // A QP the CM created for another connection, and one already given.
    let (created_conn, created) = net.a.ep.cm_connect(now, &params).unwrap();
    let e = net.a.ep.cm_connect_qp(now, created, QpDriver::Cm, &params).unwrap_err();
    assert_eq!(field(&e), "qp");
    let conn = net.a.ep.cm_connect_qp(now, qa, QpDriver::Cm, &params).unwrap();
    let e = net.a.ep.cm_connect_qp(now, qa, QpDriver::Cm, &params).unwrap_err();
    assert_eq!(field(&e), "qp");
    assert!(e.to_string().contains("bound to a connection"), "{e}");

    // cm_qp_attr on the active side before the REP: INIT only.
    assert!(matches!(net.a.ep.cm_qp_attr(conn, QpState::Init), Ok(QpTransition::Init(_))));
    for target in [QpState::Rtr, QpState::Rts] {
        let e = net.a.ep.cm_qp_attr(conn, target).unwrap_err();
        assert!(matches!(&e, TransportError::InvalidArgument { verb: Verb::CmQpAttr, .. }), "{e:?}");
        assert_eq!(field(&e), "conn");
    }
    for target in [QpState::Reset, QpState::Err, QpState::Sqd, QpState::Sqe] {
        assert_eq!(field(&net.a.ep.cm_qp_attr(conn, target).unwrap_err()), "target");
    }
    let e = net.a.ep.cm_qp_attr(ConnId(999), QpState::Init).unwrap_err();
    assert!(matches!(e, TransportError::InvalidHandle { verb: Verb::CmQpAttr, .. }), "{e:?}");
    let _ = created_conn;

    // Accept: the requests reach b, which answers nothing yet.
    net.deliver();
    let [r1, r2] = net.requests[..] else { panic!("{:?}", net.requests) };
    let accept = net.accept_params();
    let e = net.b.ep.cm_accept_qp(net.now, r1, QpId(999), QpDriver::Cm, &accept).unwrap_err();
    assert!(matches!(e, TransportError::InvalidHandle { verb: Verb::CmAccept, .. }), "{e:?}");
    let qb = net.b.new_qp();
    let e = net.b.ep.cm_accept_qp(net.now, ConnId(999), qb, QpDriver::Cm, &accept).unwrap_err();
    assert!(matches!(e, TransportError::InvalidHandle { verb: Verb::CmAccept, .. }), "{e:?}");
    let mut long = accept.clone();
    long.private_data = vec![0; MAX_REP_PRIVATE_DATA + 1];
    assert_eq!(field(&net.b.ep.cm_accept_qp(net.now, r1, qb, QpDriver::Cm, &long).unwrap_err()), "private_data");
    net.b.ep.modify_qp(net.now, qb, &QpTransition::Err).unwrap();
    let e = net.b.ep.cm_accept_qp(net.now, r1, qb, QpDriver::Cm, &accept).unwrap_err();
    assert!(matches!(e, TransportError::InvalidState { verb: Verb::CmAccept, state: QpState::Err, .. }), "{e:?}");
    net.b.ep.modify_qp(net.now, qb, &QpTransition::Reset).unwrap();
    assert!(!net.b.ep.wants_cm_transmit(), "a refused accept sends nothing");
    assert_eq!(net.b.state(qb), QpState::Reset);

    // One accept on qb; the second request cannot have it too, and the
    // first cannot be accepted twice.
    net.b.ep.cm_accept_qp(net.now, r1, qb, QpDriver::Cm, &accept).unwrap();
    assert_eq!(field(&net.b.ep.cm_accept_qp(net.now, r2, qb, QpDriver::Cm, &accept).unwrap_err()), "qp");
    let qb2 = net.b.new_qp();
    let e = net.b.ep.cm_accept_qp(net.now, r1, qb2, QpDriver::Cm, &accept).unwrap_err();
    assert!(matches!(e, TransportError::Busy { verb: Verb::CmAccept, .. }), "{e:?}");
    assert_eq!(net.b.state(qb2), QpState::Reset);
    net.settle();
    assert_eq!(net.b.established().len(), 1);
}

#[test]
fn cm_qp_attr_gives_what_the_cm_applied() {
    let mut net = Net::new(Answer::Hold);
    let params = net.params();
    let (conn_a, qa) = net.a.ep.cm_connect(net.now, &params).unwrap();
    net.deliver();
    let conn_b = net.requests[0];
    // Passive side, before the accept: known from the REQ, with the
    // REQ's read depths and RNR retry count.
    let Ok(QpTransition::Rtr(early_rtr)) = net.b.ep.cm_qp_attr(conn_b, QpState::Rtr) else { panic!() };
    let Ok(QpTransition::Rts(early_rts)) = net.b.ep.cm_qp_attr(conn_b, QpState::Rts) else { panic!() };
    assert_eq!((early_rtr.max_dest_rd_atomic, early_rts.max_rd_atomic), (16, 16));
    assert_eq!(early_rtr.dest_qpn, net.a.ep.query_qp(qa).unwrap().qpn);
    let mut accept = net.accept_params();
    accept.responder_resources = 4;
    accept.initiator_depth = 2;
    accept.rnr_retry_count = 3;
    let qb = net.b.ep.cm_accept(net.now, conn_b, &accept).unwrap();
    net.settle();
    assert_eq!(net.a.established(), [(conn_a, qa)]);

    let attr = |ep: &Endpoint, conn| {
        let Ok(QpTransition::Init(init)) = ep.cm_qp_attr(conn, QpState::Init) else { panic!() };
        let Ok(QpTransition::Rtr(rtr)) = ep.cm_qp_attr(conn, QpState::Rtr) else { panic!() };
        let Ok(QpTransition::Rts(rts)) = ep.cm_qp_attr(conn, QpState::Rts) else { panic!() };
        (init, rtr, rts)
    };
    let (init_a, rtr_a, rts_a) = attr(&net.a.ep, conn_a);
    let (init_b, rtr_b, rts_b) = attr(&net.b.ep, conn_b);
    assert_eq!(init_a, InitAttr { pkey_index: 0, port: 1, access: ACCESS });
    assert_eq!(init_a, init_b);
    // The accept replaced the REQ's depths; the rest is as before it.
    assert_eq!((rtr_b.max_dest_rd_atomic, rts_b.max_rd_atomic, rts_b.rnr_retry), (4, 2, 3));
    assert_eq!(RtrAttr { max_dest_rd_atomic: early_rtr.max_dest_rd_atomic, ..rtr_b }, early_rtr);
    // Each side sends to the other's QPN, from the PSN the other receives
    // from, at one path MTU, to the other's IPv4-mapped GID.
    assert_eq!(rtr_a.dest_qpn, net.b.ep.query_qp(qb).unwrap().qpn);
    assert_eq!(rtr_b.dest_qpn, net.a.ep.query_qp(qa).unwrap().qpn);
    assert_eq!((rts_a.sq_psn, rts_b.sq_psn), (rtr_b.rq_psn, rtr_a.rq_psn));
    assert_eq!(rtr_a.path_mtu, rtr_b.path_mtu);
    assert_eq!((rtr_a.av.dest_gid, rtr_b.av.dest_gid), (Gid::from_ipv4(IB), Gid::from_ipv4(IA)));
    assert_eq!((rtr_a.av.sgid_index, rtr_b.av.sgid_index), (1, 1));
    assert_eq!((rts_a.timeout, rts_a.retry_cnt, rts_a.rnr_retry), (CM_QP_TIMEOUT, 7, 7));
    // a reads no more at once than b serves.
    assert_eq!((rtr_a.max_dest_rd_atomic, rts_a.max_rd_atomic), (16, 4));

    // The QPs run with them: a's first request carries the RTS PSN and
    // the RTR QPN, and a SEND of 3 path MTUs is 3 packets.
    let len = 3 * rtr_a.path_mtu.bytes();
    let now = net.now;
    net.b.ep.post_recv(now, qb, &RecvWr::new(9, &[Sge::new(net.b.mr.id, 0, len)])).unwrap();
    let sge = [Sge::new(net.a.mr.id, 0, len)];
    net.a.ep.post_send(now, qa, &SendWr::new(8, SendOp::Send, &sge)).unwrap();
    let mut sent = Vec::new();
    let mut buf = Vec::new();
    while let Some(tx) = net.a.ep.poll_transmit(now, &mut buf) {
        sent.push(tx.packet);
    }
    assert_eq!(sent.len(), 3);
    assert_eq!((sent[0].bth.psn, sent[0].bth.dest_qp), (rts_a.sq_psn, rtr_a.dest_qpn));
    for pkt in &sent {
        net.b.ep.handle_packet(now, pkt).unwrap();
    }
    net.settle();
    let mut wcs = Vec::new();
    net.b.ep.poll_cq(net.b.cq, 4, &mut wcs).unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].status, wcs[0].byte_len), (9, WcStatus::Success, len));
}

#[test]
fn applications_that_drive_their_own_qps_connect_with_the_cm_attributes() {
    let mut net = Net::new(Answer::Hold);
    let qa = net.a.new_qp();
    let qb = net.b.new_qp();
    net.answer = Answer::SelfDriven(qb);
    net.a_drives = Some(qa);
    let params = net.params();
    let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Application, &params).unwrap();
    assert_eq!(net.a.state(qa), QpState::Reset, "the CM leaves an application-driven QP alone");
    net.settle();
    // a saw the REP as ConnectResponse (and answered it); b is up on its RTU.
    assert!(
        matches!(&net.a.events[..], [CmEvent::ConnectResponse { conn: c, private_data }]
        if *c == conn && private_data.starts_with(b"welcome")),
        "{:?}",
        net.a.events
    );
    assert_eq!(net.b.established(), [(net.requests[0], qb)]);
    assert_eq!(net.sent(true, "RTU"), 1);
    assert_eq!((net.a.state(qa), net.b.state(qb)), (QpState::Rts, QpState::Rts));
    assert_eq!((net.a.ep.resources().qps, net.b.ep.resources().qps), (1, 1));
    net.traffic(qa, qb, 7);

    // A disconnect reaches both, and leaves both QPs to the applications.
    net.a.ep.cm_disconnect(net.now, conn).unwrap();
    net.settle();
    assert!(matches!(net.a.events.last(), Some(CmEvent::Disconnected { .. })));
    assert!(matches!(net.b.events.last(), Some(CmEvent::Disconnected { .. })));
    assert_eq!((net.a.state(qa), net.b.state(qb)), (QpState::Rts, QpState::Rts));
}

#[test]
fn an_application_driven_side_meets_a_cm_driven_one() {
    // a drives its own QP; b's the CM creates.
    let mut net = Net::new(Answer::Created);
    let qa = net.a.new_qp();
    net.a_drives = Some(qa);
    let params = net.params();
    net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Application, &params).unwrap();
    net.settle();
    let [(_, qb)] = net.b.established()[..] else { panic!("{:?}", net.b.events) };
    net.traffic(qa, qb, 8);

    // b drives its own QP; a's the CM drives.
    let mut net = Net::new(Answer::Hold);
    let qb = net.b.new_qp();
    net.answer = Answer::SelfDriven(qb);
    let params = net.params();
    let qa = net.a.new_qp();
    let conn = net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Cm, &params).unwrap();
    net.settle();
    assert_eq!(net.a.established(), [(conn, qa)]);
    assert_eq!(net.b.established(), [(net.requests[0], qb)]);
    net.traffic(qa, qb, 9);
}

#[test]
fn a_lost_rtu_after_cm_establish_is_sent_again() {
    let mut net = Net::new(Answer::Created);
    let qa = net.a.new_qp();
    net.a_drives = Some(qa);
    let params = net.params();
    net.a.ep.cm_connect_qp(net.now, qa, QpDriver::Application, &params).unwrap();
    let mut lost = false;
    net.settle_losing(&mut |from_a, k| {
        let drop = from_a && k == "RTU" && !lost;
        lost |= drop;
        drop
    });
    assert_eq!((net.sent(false, "REP"), net.sent(true, "RTU")), (2, 2));
    let [(_, qb)] = net.b.established()[..] else { panic!("{:?}", net.b.events) };
    net.traffic(qa, qb, 10);
}

#[test]
fn cm_establish_and_application_driven_misuse_are_typed_errors() {
    let mut net = Net::new(Answer::Hold);
    let params = net.params();
    let now = net.now;
    let e = net.a.ep.cm_establish(now, ConnId(999)).unwrap_err();
    assert!(matches!(e, TransportError::InvalidHandle { verb: Verb::CmEstablish, .. }), "{e:?}");
    // Before the REP, and on a CM-driven connection: not waiting for it.
    let qa = net.a.new_qp();
    let app = net.a.ep.cm_connect_qp(now, qa, QpDriver::Application, &params).unwrap();
    let (cm, _) = net.a.ep.cm_connect(now, &params).unwrap();
    for conn in [app, cm] {
        let e = net.a.ep.cm_establish(now, conn).unwrap_err();
        assert!(
            matches!(&e, TransportError::InvalidArgument { verb: Verb::CmEstablish, source } if source.field == "conn"),
            "{e:?}"
        );
    }
    // An application-driven QP may be past INIT, not in ERR.
    let qb = net.b.new_qp();
    net.b.ep.modify_qp(now, qb, &QpTransition::Err).unwrap();
    net.deliver();
    let accept = net.accept_params();
    let e = net.b.ep.cm_accept_qp(net.now, net.requests[0], qb, QpDriver::Application, &accept).unwrap_err();
    assert!(matches!(e, TransportError::InvalidState { verb: Verb::CmAccept, state: QpState::Err, .. }), "{e:?}");
    // An RTS QP: refused for the CM to drive, taken for the application.
    net.b.ep.modify_qp(net.now, qb, &QpTransition::Reset).unwrap();
    drive_to_rts(&mut net.b.ep, net.now, net.requests[0], qb);
    let e = net.b.ep.cm_accept_qp(net.now, net.requests[0], qb, QpDriver::Cm, &accept).unwrap_err();
    assert!(matches!(e, TransportError::InvalidState { verb: Verb::CmAccept, state: QpState::Rts, .. }), "{e:?}");
    net.b.ep.cm_accept_qp(net.now, net.requests[0], qb, QpDriver::Application, &accept).unwrap();
    net.deliver();
    // Established once: a second establish is refused.
    let [CmEvent::ConnectResponse { conn, .. }] = net.a.events[..] else { panic!("{:?}", net.a.events) };
    assert_eq!(conn, app);
    drive_to_rts(&mut net.a.ep, net.now, app, qa);
    net.a.ep.cm_establish(net.now, app).unwrap();
    assert!(net.a.ep.cm_establish(net.now, app).is_err());
}

#[test]
fn an_accept_that_cannot_connect_the_qp_leaves_it_in_reset() {
    // A request naming QPN 0 (a hostile or broken peer): RTR refuses it.
    let mut b = Side::new("b", IB, 2);
    b.ep.cm_listen(PORT).unwrap();
    let req = CmMessage::Req {
        src_conn: ConnId(5),
        src_port: 0xC005,
        port: PORT,
        qpn: 0,
        psn: Psn::wrapping(1),
        mtu: Mtu::Mtu1024,
        private_data: Vec::new(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        response_timeout: 12,
        max_retries: 5,
    };
    b.ep.handle_cm(Instant::ZERO, IA, req);
    let Some(CmEvent::ConnectRequest { conn, .. }) = b.ep.poll_cm_event() else { panic!() };
    let qb = b.new_qp();
    let accept = AcceptParams::new(b.init(), Vec::new());
    let e = b.ep.cm_accept_qp(Instant::ZERO, conn, qb, QpDriver::Cm, &accept).unwrap_err();
    assert!(
        matches!(&e, TransportError::InvalidArgument { verb: Verb::CmAccept, source } if source.field == "qp"),
        "{e:?}"
    );
    assert_eq!(b.state(qb), QpState::Reset, "the QP is back where it was");
    assert!(!b.ep.wants_cm_transmit(), "no REP went out");
    // The request still waits for an answer, and the QP is free.
    b.ep.cm_reject(conn, &[]).unwrap();
    b.ep.cm_destroy(conn).unwrap();
    assert_eq!(b.ep.resources().qps, 1);
}
