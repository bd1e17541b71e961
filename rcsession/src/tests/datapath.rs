//! READY and the data phase on the fake transport: §3's checks in order,
//! the QP's RTR/RTS, the one work request, and how each completion ends
//! the phase (written for the mutants of datapath.rs, issue 39).

use super::fake::{Call, wc};
use super::rig::*;
use crate::hipobj::RdmaToken;
use crate::time::Instant;
use crate::transport::{
    Access, AddressVector, Gid, InitAttr, Mtu, Psn, QpTransition, RemoteAddr, RnrTimer, RtrAttr, RtsAttr, SendOp, Sge,
    WcOpcode, WcStatus,
};
use crate::*;

fn wire(r: Result<ReadyReply, RcError>) -> (ReadyOutcome, String) {
    match r {
        Err(RcError::Wire { outcome, detail }) => (outcome, detail),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ready_checks_slots_owner_state_commit_reaping_and_cookie_in_that_order() {
    let cfg = ServerConfig { max_ready_slots: 1, ..ServerConfig::default() };
    let mut m = server(cfg);
    let id = staged_get(&mut m, alice(), b"abcd");
    m.try_acquire_ready().unwrap();
    assert_eq!(m.ready(&ready_req(bob(), id, 0x42)), Err(RcError::Limit(LimitKind::ReadySlots)));
    m.release_ready();
    assert_eq!(m.ready(&ready_req(alice(), SessionId(1), 0x42)), Err(RcError::NoSession));
    assert_eq!(m.ready(&ready_req(bob(), id, 0x42)), Err(RcError::Session));
    let mut wrong = ready_req(alice(), id, 0x42);
    wrong.cookie ^= 1;
    assert_eq!(m.ready(&wrong), Err(RcError::Session));
    let unpublished = m.prepare(&prep(alice(), Op::Put, 4)).unwrap().session;
    assert_eq!(
        m.ready(&ready_req(alice(), unpublished, 0x42)),
        Err(RcError::State("READY: the PREPARE was not committed"))
    );
    // A staged GET borrowed again and cancelled: alive, but reaping.
    let lease = m.borrow_staging(&id).unwrap();
    m.cancel(&id, &alice()).unwrap();
    assert_eq!(
        m.ready(&ready_req(alice(), id, 0x42)),
        Err(RcError::Stale("READY: the session was cancelled or expired"))
    );
    m.finish_staging(lease, false, 0, "", "").unwrap();
    let id = staged_get(&mut m, alice(), b"abcd");
    assert!(matches!(m.ready(&ready_req(alice(), id, 0x42)), Ok(ReadyStart::Pending(_))));
    assert_eq!(m.usage().ready_slots_free, 0);
    assert_eq!(m.ready(&ready_req(alice(), id, 0x42)), Err(RcError::Limit(LimitKind::ReadySlots)));
    m.release_ready();
    assert!(matches!(m.ready(&ready_req(alice(), id, 0x42)), Err(RcError::State(_))), "already running");
}

#[test]
fn a_get_connects_towards_the_client_and_writes_the_staging_region_with_the_cookie() {
    let cfg = ServerConfig { port: 2, timeout: 9, retry_cnt: 3, rnr_retry: 5, ..ServerConfig::default() };
    let mut m = server(cfg);
    let id = staged_get(&mut m, alice(), b"abcd");
    let (qp, qpn, mr) = (qp_of(&m, id), m.sessions[&id].qp.qpn, m.sessions[&id].staging.id);
    let before = m.t.calls.len();
    start(&mut m, alice(), id);
    let own = m.t.port_gids[1].gid;
    let rtr = RtrAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: 0x42,
        rq_psn: Psn::new(0x123).unwrap(),
        max_dest_rd_atomic: 1,
        min_rnr_timer: RnrTimer::from_code(12).unwrap(),
        av: AddressVector { hop_limit: 64, port: 2, ..AddressVector::new(own, 1) },
    };
    let rts = RtsAttr { sq_psn: Psn::wrapping(qpn), timeout: 9, retry_cnt: 3, rnr_retry: 5, max_rd_atomic: 1 };
    let remote = RemoteAddr { addr: 0x7000, rkey: 0x77 };
    assert_eq!(
        m.t.calls[before..],
        [
            Call::Modify(qp, QpTransition::Rtr(rtr)),
            Call::Modify(qp, QpTransition::Rts(rts)),
            Call::PostSend(qp, 1, SendOp::WriteWithImm { remote, imm: COOKIE }, vec![Sge::new(mr, 0, 4)], true),
        ]
    );
}

#[test]
fn a_put_posts_its_receive_before_rtr_and_sends_nothing() {
    let mut m = server(ServerConfig::default());
    let id = published_put(&mut m, alice(), 8);
    let (qp, mr) = (qp_of(&m, id), m.sessions[&id].staging.id);
    let before = m.t.calls.len();
    start(&mut m, alice(), id);
    let c = &m.t.calls[before..];
    assert_eq!(c[0], Call::PostRecv(qp, 1, vec![Sge::new(mr, 0, 8)]));
    assert!(matches!(c[1], Call::Modify(_, QpTransition::Rtr(_))));
    assert!(matches!(c[2], Call::Modify(_, QpTransition::Rts(_))));
    assert_eq!(c.len(), 3);
}

#[test]
fn the_client_region_and_gid_come_from_the_token_unless_ready_names_a_region() {
    let peer = Gid::from_ipv4("10.0.0.2".parse().unwrap());
    let mut token = RdmaToken::rc(0x99, peer, 1);
    token.rkey = 0x55;
    token.remote_addr = 0x9000;
    for (addr, rkey, expect) in [(0, 0, (0x9000, 0x55)), (0x7000, 0, (0x7000, 0x55)), (0, 0x77, (0x9000, 0x77))] {
        let mut m = server(ServerConfig::default());
        let mut req = prep(alice(), Op::Get, 4);
        req.client_token = Some(token.to_hex());
        let id = inproc::prepare_get(&mut m, &req, b"abcd", "").unwrap().session;
        let mut r = ready_req(alice(), id, 0x42);
        (r.client_mr_addr, r.client_mr_rkey) = (addr, rkey);
        m.ready(&r).unwrap();
        let Some(Call::PostSend(_, _, SendOp::WriteWithImm { remote, .. }, _, _)) = m.t.calls.last() else {
            panic!("{:?}", m.t.calls)
        };
        assert_eq!((remote.addr, remote.rkey), expect);
        let rtr = m.t.calls.iter().find_map(|c| match c {
            Call::Modify(_, QpTransition::Rtr(a)) => Some(*a),
            _ => None,
        });
        assert_eq!(rtr.unwrap().av.dest_gid, peer);
    }
}

#[test]
fn a_ready_without_a_client_qp_completes_at_once_and_moves_nothing() {
    let mut m = server(ServerConfig::default());
    let id = staged_get(&mut m, alice(), b"abcd");
    let before = m.t.calls.len();
    assert_eq!(m.ready(&ready_req(alice(), id, 0)), Ok(ReadyStart::Done));
    assert_eq!(m.t.calls.len(), before);
    assert_eq!(m.sessions()[0].state, SessionState::Completing);
    assert_eq!(m.usage().ready_slots_free, 64);
    let r = m.done_reply(&id).unwrap();
    assert_eq!((r.outcome, r.bytes_transferred, r.cookie_echo), (ReadyOutcome::Ok, 4, COOKIE));
}

#[test]
fn a_successful_get_replies_ok_once_and_gives_its_slot_back() {
    let mut m = server(ServerConfig::default());
    let id = staged_get(&mut m, alice(), b"abcd");
    let t = start(&mut m, alice(), id);
    assert_eq!(m.usage().ready_slots_free, 63);
    m.progress();
    assert_eq!(m.take_ready(t), None, "nothing completed yet");
    assert_eq!(m.sessions()[0].state, SessionState::Transferring);
    send_done(&mut m, id, WcStatus::Success);
    let r = finish(&mut m, t).unwrap();
    assert_eq!(
        r,
        ReadyReply {
            bytes_transferred: 4,
            cookie_echo: COOKIE,
            outcome: ReadyOutcome::Ok,
            etag: "etag-1".into(),
            version_id: String::new()
        }
    );
    assert_eq!(m.take_ready(t), None, "handed out once");
    assert_eq!(m.usage().ready_slots_free, 64);
    assert_eq!(m.sessions()[0].state, SessionState::Completing);
}

#[test]
fn two_data_phases_have_their_own_tickets_and_results() {
    let mut m = server(ServerConfig::default());
    let a = staged_get(&mut m, alice(), b"abcd");
    let b = staged_get(&mut m, alice(), b"ef");
    let ta = start(&mut m, alice(), a);
    let tb = start(&mut m, alice(), b);
    assert_ne!(ta, tb);
    send_done(&mut m, b, WcStatus::Success);
    assert_eq!(finish(&mut m, tb).unwrap().bytes_transferred, 2);
    assert_eq!(m.take_ready(ta), None);
    send_done(&mut m, a, WcStatus::Success);
    assert_eq!(finish(&mut m, ta).unwrap().bytes_transferred, 4);
}

#[test]
fn a_completion_of_the_wrong_shape_is_verify_fail_and_the_session_goes() {
    let good = wc(1, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 8, Some(COOKIE));
    let cases = [
        (Op::Get, wc(1, WcStatus::Success, WcOpcode::Send, 0, None)),
        (Op::Put, wc(1, WcStatus::Success, WcOpcode::Recv, 8, Some(COOKIE))),
        (Op::Put, wc(1, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 8, Some(COOKIE ^ 1))),
        (Op::Put, wc(1, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 8, None)),
        (Op::Put, wc(1, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 7, Some(COOKIE))),
    ];
    for (op, bad) in cases {
        let mut m = server(ServerConfig::default());
        m.record_ended();
        let id = if op == Op::Get { staged_get(&mut m, alice(), &[1; 8]) } else { published_put(&mut m, alice(), 8) };
        let t = start(&mut m, alice(), id);
        let cq = cq_of(&m, id);
        m.t.complete(cq, bad);
        assert_eq!(wire(finish(&mut m, t)).0, ReadyOutcome::VerifyFail, "{bad:?}");
        assert!(m.sessions().is_empty(), "{bad:?}");
        assert_eq!(m.take_ended(), [Ended { session: id, outcome: Some(ReadyOutcome::VerifyFail), bytes: 0 }]);
        assert_eq!(m.usage().ready_slots_free, 64);
    }
    let mut m = server(ServerConfig::default());
    let id = published_put(&mut m, alice(), 8);
    let t = start(&mut m, alice(), id);
    // Another WR's completion is not the data phase's.
    let cq = cq_of(&m, id);
    m.t.complete(cq, wc(2, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 8, Some(COOKIE)));
    m.progress();
    assert_eq!(m.take_ready(t), None);
    m.t.complete(cq, good);
    assert_eq!(finish(&mut m, t).unwrap().outcome, ReadyOutcome::Ok);
}

#[test]
fn retries_exhausted_are_busy_the_qp_is_rearmed_and_ready_may_come_again() {
    for status in [WcStatus::RnrRetryExcErr, WcStatus::RetryExcErr] {
        let cfg = ServerConfig { port: 2, ..ServerConfig::default() };
        let mut m = server(cfg);
        let id = staged_get(&mut m, alice(), b"abcd");
        let t = start(&mut m, alice(), id);
        let qp = qp_of(&m, id);
        let before = m.t.calls.len();
        m.t.now = Instant::from_nanos(5_000_000_000);
        send_done(&mut m, id, status);
        let r = finish(&mut m, t).unwrap();
        assert_eq!((r.outcome, r.bytes_transferred), (ReadyOutcome::Busy, 0));
        let init = InitAttr { pkey_index: 0, port: 2, access: Access::LOCAL_WRITE | Access::REMOTE_WRITE };
        assert_eq!(
            m.t.calls[before..],
            [Call::Modify(qp, QpTransition::Reset), Call::Modify(qp, QpTransition::Init(init))]
        );
        let s = &m.sessions[&id];
        assert_eq!((s.state, s.active_ref, s.exec_deadline), (SessionState::Prepared, 0, None));
        assert_eq!(s.prep_deadline, Some(m.t.now + cfg.t_prep));
        assert_eq!(m.usage().ready_slots_free, 64);
        let t = start(&mut m, alice(), id);
        send_done(&mut m, id, WcStatus::Success);
        assert_eq!(finish(&mut m, t).unwrap().outcome, ReadyOutcome::Ok);
    }
}

#[test]
fn busy_after_a_cancel_is_an_error_and_the_session_goes() {
    let mut m = server(ServerConfig::default());
    let id = staged_get(&mut m, alice(), b"abcd");
    let t = start(&mut m, alice(), id);
    m.cancel(&id, &alice()).unwrap();
    send_done(&mut m, id, WcStatus::RnrRetryExcErr);
    let (outcome, detail) = wire(finish(&mut m, t));
    assert_eq!(outcome, ReadyOutcome::Busy);
    assert!(detail.contains("cancelled meanwhile"), "{detail}");
    assert!(m.sessions().is_empty());
}

#[test]
fn busy_whose_qp_cannot_be_rearmed_is_an_error_and_the_session_goes() {
    let mut m = server(ServerConfig::default());
    let id = staged_get(&mut m, alice(), b"abcd");
    let t = start(&mut m, alice(), id);
    m.t.fail.insert("modify_qp:Init");
    send_done(&mut m, id, WcStatus::RetryExcErr);
    let (outcome, detail) = wire(finish(&mut m, t));
    assert_eq!(outcome, ReadyOutcome::Busy);
    assert!(detail.contains("re-arm"), "{detail}");
    assert!(m.sessions().is_empty());
}

#[test]
fn another_error_completion_or_a_failed_poll_is_wire_fail() {
    let mut m = server(ServerConfig::default());
    let id = staged_get(&mut m, alice(), b"abcd");
    let t = start(&mut m, alice(), id);
    send_done(&mut m, id, WcStatus::RemAccessErr);
    assert_eq!(wire(finish(&mut m, t)).0, ReadyOutcome::WireFail);
    let id = staged_get(&mut m, alice(), b"abcd");
    let t = start(&mut m, alice(), id);
    m.t.fail.insert("poll_cq");
    let (outcome, detail) = wire(finish(&mut m, t));
    assert_eq!(outcome, ReadyOutcome::WireFail);
    assert!(detail.starts_with("poll_cq"), "{detail}");
    assert!(m.sessions().is_empty());
}

#[test]
fn a_ready_that_cannot_connect_fails_wire_gives_its_slot_back_and_reaps() {
    for verb in ["post_recv", "modify_qp:Rtr", "modify_qp:Rts", "post_send"] {
        let mut m = server(ServerConfig::default());
        m.record_ended();
        let id =
            if verb == "post_recv" { published_put(&mut m, alice(), 4) } else { staged_get(&mut m, alice(), b"abcd") };
        m.t.fail.insert(verb);
        let (outcome, _) = wire(m.ready(&ready_req(alice(), id, 0x42)).map(|_| unreachable!()));
        assert_eq!(outcome, ReadyOutcome::WireFail, "{verb}");
        assert!(m.sessions().is_empty(), "{verb}");
        assert_eq!(m.usage().ready_slots_free, 64, "{verb}");
        assert_eq!(m.take_ended(), [Ended { session: id, outcome: Some(ReadyOutcome::WireFail), bytes: 0 }]);
    }
}

#[test]
fn a_data_phase_times_out_at_its_deadline_not_before() {
    let cfg = ServerConfig { t_exec: ns(1000), ..ServerConfig::default() };
    let mut m = server(cfg);
    let id = staged_get(&mut m, alice(), b"abcd");
    let t0 = m.t.now;
    let t = start(&mut m, alice(), id);
    m.t.now = t0 + ns(999);
    m.progress();
    assert_eq!(m.take_ready(t), None);
    m.t.now = t0 + ns(1000);
    let (outcome, _) = wire(finish(&mut m, t));
    assert_eq!(outcome, ReadyOutcome::Timeout);
}

#[test]
fn a_cancel_during_the_data_phase_stops_the_qp_and_ends_it_as_wire_fail() {
    for fail in [false, true] {
        let cfg = ServerConfig { t_exec: ns(0), ..ServerConfig::default() };
        let mut m = server(cfg);
        let id = published_put(&mut m, alice(), 4);
        let t = start(&mut m, alice(), id);
        let qp = qp_of(&m, id);
        m.progress();
        assert_eq!(m.take_ready(t), None);
        if fail {
            m.t.fail.insert("modify_qp:Err");
        }
        m.cancel(&id, &alice()).unwrap();
        let (outcome, detail) = wire(finish(&mut m, t));
        assert_eq!(outcome, ReadyOutcome::WireFail);
        assert!(detail.starts_with("cancelled during the data phase"), "{detail}");
        assert_eq!(m.t.transitions(qp).last() == Some(&QpTransition::Err), !fail);
        assert!(m.sessions().is_empty());
    }
}

#[test]
fn the_wait_set_is_the_cqs_in_flight_and_the_earliest_deadline() {
    let cfg = ServerConfig { t_prep: ns(5000), t_exec: ns(300), ..ServerConfig::default() };
    let mut m = server(cfg);
    assert_eq!(m.wait_set(), (vec![], Instant::FAR_FUTURE));
    let t0 = m.t.now;
    let a = staged_get(&mut m, alice(), b"abcd");
    m.t.now = t0 + ns(10);
    let b = staged_get(&mut m, alice(), b"abcd");
    assert_eq!(m.wait_set(), (vec![], t0 + ns(5000)));
    m.t.now = t0 + ns(20);
    start(&mut m, alice(), b);
    assert_eq!(m.wait_set(), (vec![cq_of(&m, b)], t0 + ns(320)));
    let _ = a;
}

#[test]
fn ready_blocking_waits_for_the_data_phase_or_its_deadline() {
    let cfg = ServerConfig { t_exec: ns(1000), ..ServerConfig::default() };
    let mut m = server(cfg);
    let id = staged_get(&mut m, alice(), b"abcd");
    m.t.auto_send = Some(WcStatus::Success);
    let r = m.ready_blocking(&ready_req(alice(), id, 0x42)).unwrap();
    assert_eq!((r.outcome, r.bytes_transferred), (ReadyOutcome::Ok, 4));
    let id = staged_get(&mut m, alice(), b"abcd");
    m.t.auto_send = None;
    let t0 = m.t.now;
    assert_eq!(wire(m.ready_blocking(&ready_req(alice(), id, 0x42))).0, ReadyOutcome::Timeout);
    assert_eq!(m.t.now, t0 + ns(1000));
    let id = staged_get(&mut m, alice(), b"ab");
    assert_eq!(m.ready_blocking(&ready_req(alice(), id, 0)).unwrap().bytes_transferred, 2);
}
