//! One test per RC error path: what the requester and responder each see.

mod common;

use common::*;
use rctb_core::time::Duration;
use rctb_core::transport::*;
use rctb_sim::{FaultAction, ScheduledFault};

fn write_to(p: &mut Pair, remote: RemoteAddr, len: u32) -> Vec<Completion> {
    post(&mut p.a, 1, SendOp::Write { remote }, 0, len).unwrap();
    completions(&mut p.a, 1, secs(5))
}

fn assert_remote_access_error(p: &mut Pair, sc: &[Completion]) {
    assert_eq!(sc.len(), 1, "{sc:?}");
    assert_eq!(sc[0].status, WcStatus::RemAccessErr);
    // Both QPs end in ERR: the requester on the NAK, the responder after sending it.
    assert_eq!(p.a.t.query_qp(p.a.qp.id).unwrap().state, QpState::Err);
    assert_eq!(p.b.t.query_qp(p.b.qp.id).unwrap().state, QpState::Err);
}

#[test]
fn write_with_bad_rkey_is_rem_access_err() {
    let mut p = Pair::default_pair();
    let bad = RemoteAddr { addr: p.b.mr.addr, rkey: p.b.mr.rkey ^ 0x5a5a };
    let sc = write_to(&mut p, bad, 64);
    assert_remote_access_error(&mut p, &sc);
    assert_eq!(p.sim.stats().other_naks, 1);
}

#[test]
fn write_out_of_bounds_is_rem_access_err_and_writes_nothing() {
    let mut p = Pair::default_pair();
    let before = read(&p.b, 0, p.cfg.mr_len as usize);
    fill(&mut p.a, 0, 4096, 9);
    let remote = p.b.mr.remote(p.cfg.mr_len - 100);
    let sc = write_to(&mut p, remote, 4096);
    assert_remote_access_error(&mut p, &sc);
    assert_eq!(read(&p.b, 0, p.cfg.mr_len as usize), before);
}

#[test]
fn write_without_remote_write_permission_is_rem_access_err() {
    let mut p = Pair::new(PairConfig { b_access: Access::LOCAL_WRITE | Access::REMOTE_READ, ..Default::default() });
    let remote = p.b.mr.remote(0);
    let sc = write_to(&mut p, remote, 64);
    assert_remote_access_error(&mut p, &sc);
}

#[test]
fn read_without_remote_read_permission_is_rem_access_err() {
    let mut p = Pair::new(PairConfig { b_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE, ..Default::default() });
    post(&mut p.a, 1, SendOp::Read { remote: p.b.mr.remote(0) }, 0, 64).unwrap();
    let sc = completions(&mut p.a, 1, secs(5));
    assert_remote_access_error(&mut p, &sc);
}

#[test]
fn qp_without_remote_write_access_refuses_writes() {
    // The MR allows it but the responder QP's INIT access flags do not.
    let mut p = Pair::new(PairConfig { qp_access: Access::LOCAL_WRITE, ..Default::default() });
    let remote = p.b.mr.remote(0);
    let sc = write_to(&mut p, remote, 64);
    assert_remote_access_error(&mut p, &sc);
}

#[test]
fn read_to_a_qp_that_takes_no_reads_is_rem_inv_req_err() {
    // max_dest_rd_atomic 0: rxe NAKs the READ as an invalid request.
    let mut p = Pair::new(PairConfig { max_dest_rd_atomic: 0, ..Default::default() });
    post(&mut p.a, 1, SendOp::Read { remote: p.b.mr.remote(0) }, 0, 64).unwrap();
    let sc = completions(&mut p.a, 1, secs(5));
    assert_eq!(sc[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.b.t.query_qp(p.b.qp.id).unwrap().state, QpState::Err);
}

#[test]
fn receive_too_small_fails_as_rxe_does() {
    // rxe (Linux 6.1, checked in the VM harness): a malformed receive WQE,
    // LOC_QP_OP_ERR there and a remote operational error NAK, REM_OP_ERR here.
    let mut p = Pair::default_pair();
    post_recv(&mut p.b, 10, 0, 16);
    post_recv(&mut p.b, 11, 64, 16);
    post(&mut p.a, 1, SendOp::Send, 0, 64).unwrap();
    let sc = completions(&mut p.a, 1, secs(5));
    assert_eq!(sc[0].status, WcStatus::RemOpErr);
    let rc = drain(&mut p.b);
    assert_eq!(rc.len(), 2, "{rc:?}");
    assert_eq!((rc[0].wr_id, rc[0].status), (10, WcStatus::LocQpOpErr));
    // The QP went to ERR: the other receive is flushed.
    assert_eq!((rc[1].wr_id, rc[1].status), (11, WcStatus::WrFlushErr));
    assert_eq!(p.sim.stats().other_naks, 1);
}

#[test]
fn rnr_retry_exhaustion_for_each_finite_rnr_retry() {
    for rnr_retry in 0..=6u8 {
        let timer = RnrTimer::from_code(3).unwrap(); // 30 us
        let mut cfg = PairConfig { min_rnr_timer: timer, ..Default::default() };
        cfg.rts.rnr_retry = rnr_retry;
        let mut p = Pair::new(cfg);
        post(&mut p.a, 1, SendOp::Send, 0, 64).unwrap();
        let sc = completions(&mut p.a, 1, secs(5));
        assert_eq!(sc.len(), 1, "rnr_retry {rnr_retry}");
        assert_eq!(sc[0].status, WcStatus::RnrRetryExcErr, "rnr_retry {rnr_retry}");
        // The first try plus rnr_retry retries, each answered by an RNR NAK,
        // separated by the responder's min RNR timer.
        let st = p.sim.stats();
        assert_eq!(st.rnr_naks, rnr_retry as u64 + 1, "rnr_retry {rnr_retry}");
        let elapsed = p.a.t.now().as_nanos();
        let waits = rnr_retry as u64 * timer.duration().as_nanos() as u64;
        assert!(elapsed >= waits && elapsed < waits + 100_000, "rnr_retry {rnr_retry}: {elapsed} ns");
        assert_eq!(p.a.t.query_qp(p.a.qp.id).unwrap().state, QpState::Err);
        assert!(drain(&mut p.b).is_empty(), "the responder saw nothing complete");
    }
}

#[test]
fn rnr_retry_seven_retries_forever_and_recovers_when_a_receive_is_posted_late() {
    let timer = RnrTimer::from_code(14).unwrap(); // 1.28 ms
    let mut cfg = PairConfig { min_rnr_timer: timer, ..Default::default() };
    cfg.rts.rnr_retry = 7;
    let mut p = Pair::new(cfg);
    let data = fill(&mut p.a, 0, 100, 1);
    post(&mut p.a, 1, SendOp::Send, 0, 100).unwrap();
    // Let the first try be refused, then post the receive half-way into the wait.
    p.sim.run_until(at(640_000));
    assert_eq!(p.sim.stats().rnr_naks, 1);
    post_recv(&mut p.b, 5, 0, 100);
    let rc = completions(&mut p.b, 1, secs(1));
    assert_eq!((rc[0].status, rc[0].byte_len), (WcStatus::Success, 100));
    assert_eq!(read(&p.b, 0, 100), data);
    // The retry waited for the whole timer, not for the receive.
    let t = p.b.t.now().as_nanos();
    let timer_ns = timer.duration().as_nanos() as u64;
    assert!(t >= timer_ns && t < timer_ns + 50_000, "retry at {t} ns, timer {timer_ns} ns");
    assert_eq!(completions(&mut p.a, 1, secs(1))[0].status, WcStatus::Success);
    assert_eq!(p.sim.stats().rnr_naks, 1);
}

#[test]
fn partition_exhausts_retry_cnt_with_retry_exc_err_then_flushes() {
    let mut cfg = PairConfig::default();
    cfg.rts.retry_cnt = 3;
    cfg.rts.timeout = 10; // 4.19 ms
    let mut p = Pair::new(cfg);
    p.sim.apply(FaultAction::Partition { a: "a".into(), b: "b".into() });
    for i in 0..3 {
        post(&mut p.a, i, SendOp::Write { remote: p.b.mr.remote(0) }, 0, 64).unwrap();
    }
    let sc = completions(&mut p.a, 3, secs(5));
    let statuses: Vec<_> = sc.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(statuses, vec![(0, WcStatus::RetryExcErr), (1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)],);
    let st = p.sim.stats();
    assert_eq!(st.timeouts, 4, "first try + retry_cnt retries, each timing out");
    let timeout_ns = 4096u64 << 10;
    let t = p.a.t.now().as_nanos();
    assert!(t >= 4 * timeout_ns && t < 4 * timeout_ns + 100_000, "{t}");
}

#[test]
fn partition_that_heals_within_the_retry_budget_recovers() {
    let mut p = Pair::default_pair();
    p.sim.apply(FaultAction::Partition { a: "a".into(), b: "b".into() });
    p.sim.schedule(ScheduledFault { at: at(100_000_000), action: FaultAction::Heal { a: "a".into(), b: "b".into() } });
    let data = fill(&mut p.a, 0, 5000, 4);
    post(&mut p.a, 1, SendOp::Write { remote: p.b.mr.remote(0) }, 0, 5000).unwrap();
    let sc = completions(&mut p.a, 1, secs(5));
    assert_eq!(sc[0].status, WcStatus::Success);
    assert_eq!(read(&p.b, 0, 5000), data);
    assert!(p.sim.stats().timeouts >= 1);
}

#[test]
fn moving_to_err_flushes_every_outstanding_request_and_receive() {
    let mut p = Pair::default_pair();
    for i in 0..5 {
        post_recv(&mut p.b, i, 0, 64);
    }
    p.b.t.modify_qp(p.b.qp.id, &QpTransition::Err).unwrap();
    let rc = drain(&mut p.b);
    assert_eq!(rc.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    assert!(rc.iter().all(|c| c.status == WcStatus::WrFlushErr));
    // Work posted to a QP in ERR completes at once with a flush.
    post_recv(&mut p.b, 9, 0, 64);
    post(&mut p.b, 8, SendOp::Send, 0, 64).unwrap();
    let rc = drain(&mut p.b);
    assert_eq!(
        rc.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(9, WcStatus::WrFlushErr), (8, WcStatus::WrFlushErr)]
    );
    // Requests already on the wire when the requester fails are flushed too.
    p.sim.apply(FaultAction::Partition { a: "a".into(), b: "b".into() });
    for i in 0..3 {
        post(&mut p.a, 20 + i, SendOp::Send, 0, 64).unwrap();
    }
    p.sim.run_until(at(1_000_000));
    p.a.t.modify_qp(p.a.qp.id, &QpTransition::Err).unwrap();
    let sc = drain(&mut p.a);
    assert_eq!(
        sc.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(20, WcStatus::WrFlushErr), (21, WcStatus::WrFlushErr), (22, WcStatus::WrFlushErr)]
    );
}

#[test]
fn rtr_with_a_wrong_psn_drops_silently() {
    for offset in [0x10u32, 0x40_0000, 0x80_0000 + 5, 0xFF_FFF0] {
        let mut cfg = PairConfig::default();
        cfg.b_rq_psn = cfg.a_psn.add(offset);
        cfg.rts.retry_cnt = 2;
        cfg.rts.timeout = 8;
        let mut p = Pair::new(cfg);
        for i in 0..4 {
            post_recv(&mut p.b, i, i * 64, 64);
        }
        fill(&mut p.a, 0, 64, 7);
        let before = read(&p.b, 0, 256);
        post(&mut p.a, 1, SendOp::Send, 0, 64).unwrap();
        post(&mut p.a, 2, SendOp::Write { remote: p.b.mr.remote(0) }, 0, 64).unwrap();
        let sc = completions(&mut p.a, 2, secs(5));
        // The receiver never sees a thing; the sender gives up after its retries.
        assert!(drain(&mut p.b).is_empty(), "offset {offset:#x}");
        assert_eq!(read(&p.b, 0, 256), before, "offset {offset:#x}");
        assert_eq!(sc[0].status, WcStatus::RetryExcErr, "offset {offset:#x}: {sc:?}");
        assert_eq!(sc[1].status, WcStatus::WrFlushErr);
        assert_eq!(p.b.t.query_qp(p.b.qp.id).unwrap().state, QpState::Rts, "the receiver QP stays healthy");
    }
}

fn cm_pair() -> (rctb_sim::Sim, rctb_sim::SimTransport, rctb_sim::SimTransport, QpInit, QpInit) {
    let sim = rctb_sim::Sim::new(3);
    let na = sim.add_node(rctb_sim::NodeConfig::new("client", "10.1.0.1".parse().unwrap())).unwrap();
    let nb = sim.add_node(rctb_sim::NodeConfig::new("server", "10.1.0.2".parse().unwrap())).unwrap();
    let (mut ta, mut tb) = (sim.transport(na), sim.transport(nb));
    let init = |t: &mut rctb_sim::SimTransport| {
        let pd = t.alloc_pd().unwrap();
        let cq = t.create_cq(16).unwrap();
        QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false, srq: None }
    };
    let (ia, ib) = (init(&mut ta), init(&mut tb));
    (sim, ta, tb, ia, ib)
}

#[test]
fn cm_reject_delivers_its_private_data() {
    let (_sim, mut ta, mut tb, ia, _) = cm_pair();
    tb.cm_listen(4420).unwrap();
    let (conn, qp) = ta.cm_connect(&ConnectParams::new("10.1.0.2:4420".parse().unwrap(), ia, vec![1, 2])).unwrap();
    tb.wait(&[], rctb_core::Instant::FAR_FUTURE).unwrap();
    let Some(CmEvent::ConnectRequest { conn: server_conn, .. }) = tb.cm_poll() else { panic!("no request") };
    // NVMe/RDMA's reject: recfmt 0, status 6 (no resources).
    tb.cm_reject(server_conn, &[0, 0, 6, 0]).unwrap();
    ta.wait(&[], rctb_core::Instant::FAR_FUTURE).unwrap();
    assert_eq!(ta.cm_poll(), Some(CmEvent::Rejected { conn, private_data: vec![0, 0, 6, 0] }));
    assert_eq!(ta.query_qp(qp).unwrap().state, QpState::Init, "a rejected QP never reaches RTR");
    let too_long = vec![0u8; MAX_REJ_PRIVATE_DATA + 1];
    assert!(matches!(
        tb.cm_reject(server_conn, &too_long),
        Err(TransportError::InvalidArgument { verb: Verb::CmReject, .. })
    ));
}

#[test]
fn cm_connect_without_listener_or_through_a_partition_is_unreachable() {
    let (sim, mut ta, _tb, ia, _) = cm_pair();
    let (conn, _) = ta.cm_connect(&ConnectParams::new("10.1.0.2:4420".parse().unwrap(), ia, vec![])).unwrap();
    ta.wait(&[], rctb_core::Instant::FAR_FUTURE).unwrap();
    assert_eq!(ta.cm_poll(), Some(CmEvent::Unreachable { conn, reason: UnreachableReason::NoListener }));

    sim.apply(FaultAction::Partition { a: "client".into(), b: "server".into() });
    let start = ta.now();
    let (conn, _) = ta.cm_connect(&ConnectParams::new("10.1.0.2:4420".parse().unwrap(), ia, vec![])).unwrap();
    ta.wait(&[], rctb_core::Instant::FAR_FUTURE).unwrap();
    assert_eq!(ta.cm_poll(), Some(CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout }));
    // The REQ went out CM_MAX_RETRIES + 1 times, one response timeout apart.
    assert_eq!(ta.now() - start, rctb_sim::cm::CM_TIMEOUT);
    assert!(ta.now() - start > Duration::from_millis(100));
}
