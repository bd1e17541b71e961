//! The manager's PREPARE, limits, staging, PUT view, CANCEL and listing on
//! the fake transport (written for the mutants of manager.rs, issue 39).

use super::fake::{Call, Fake};
use super::rig::*;
use crate::hipobj::{MAX_OFFSET_PLUS_SIZE, MAX_TARGET_LEN, RdmaToken};
use crate::transport::{Access, InitAttr, Psn, QpCaps, QpTransition};
use crate::*;

const LW_RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn limits(f: impl FnOnce(&mut Limits)) -> ServerConfig {
    let mut cfg = ServerConfig::default();
    cfg.limits.max_staging_bytes = 1 << 40;
    cfg.limits.max_user_staging_bytes = 1 << 40;
    f(&mut cfg.limits);
    cfg
}

#[test]
fn prepare_makes_a_pd_cq_init_qp_and_writable_staging_region_of_the_size() {
    let mut m = server(ServerConfig::default());
    let r = m.prepare(&prep(alice(), Op::Put, 4096)).unwrap();
    let s = &m.sessions[&r.session];
    let (pd, qp, cq) = (s.pd, s.qp, s.cq);
    assert_eq!(r.server_qpn, qp.qpn);
    assert_eq!(r.server_psn, Psn::wrapping(qp.qpn).get());
    assert_ne!(r.server_psn, 0);
    let mr = m.staging_region(&r.session).unwrap();
    assert_eq!((r.staging_addr, r.staging_rkey, mr.len), (mr.addr, mr.rkey, 4096));
    assert_eq!(m.staging_region(&SessionId(7)), None);
    assert_eq!(r.reply_token, None);
    let c = &m.t.calls;
    assert_eq!(c[0], Call::AllocPd(pd));
    assert_eq!(c[1], Call::CreateCq(16));
    let Call::CreateQp(init) = c[2] else { panic!("{c:?}") };
    assert_eq!((init.pd, init.send_cq, init.recv_cq, init.sq_sig_all, init.srq), (pd, cq, cq, true, None));
    assert_eq!(
        init.caps,
        QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
    );
    assert_eq!(c[3], Call::Modify(qp.id, QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: LW_RW })));
    assert_eq!(c[4], Call::RegMr(pd, 4096, LW_RW));
    assert_eq!(c.len(), 5);
}

#[test]
fn a_token_gets_a_reply_token_naming_the_server_qp_and_own_gid() {
    let mut m = server(ServerConfig::default());
    let peer = RdmaToken::rc(0x99, crate::transport::Gid::from_ipv4("10.0.0.2".parse().unwrap()), 1);
    let mut req = prep(alice(), Op::Put, 64);
    req.client_token = Some(peer.to_hex());
    let r = m.prepare(&req).unwrap();
    let own = m.t.port_gids[1].gid;
    assert_eq!(r.reply_token, Some(RdmaToken::rc(r.server_qpn, own, 1)));
}

#[test]
fn the_server_reports_its_config_clock_and_transport() {
    let cfg = ServerConfig { timeout: 9, max_ready_slots: 3, ..ServerConfig::default() };
    let mut m = server(cfg);
    assert_eq!(m.config(), &cfg);
    m.t.now = crate::time::Instant::from_nanos(12_345);
    assert_eq!(m.now(), crate::time::Instant::from_nanos(12_345));
    assert_eq!(m.transport().now, m.now());
    m.transport_mut().now = crate::time::Instant::from_nanos(7);
    assert_eq!(m.now(), crate::time::Instant::from_nanos(7));
}

#[test]
fn size_and_offset_are_bounded_by_0x7fffffff_inclusive() {
    let mut m = server(limits(|_| {}));
    let arg = |r: Result<PrepareReply, RcError>| match r {
        Err(RcError::Arg { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    assert_eq!(arg(m.prepare(&prep(alice(), Op::Put, 0))), "size");
    assert_eq!(arg(m.prepare(&prep(alice(), Op::Put, MAX_OFFSET_PLUS_SIZE + 1))), "size");
    m.prepare(&prep(alice(), Op::Put, MAX_OFFSET_PLUS_SIZE)).unwrap();
    let mut req = prep(alice(), Op::Put, 16);
    req.offset = MAX_OFFSET_PLUS_SIZE - 16;
    m.prepare(&req).unwrap();
    req.offset += 1;
    assert_eq!(arg(m.prepare(&req)), "offset");
    req.client_psn = 1 << 24;
    req.offset = 0;
    assert_eq!(arg(m.prepare(&req)), "psn");
    assert_eq!(m.usage().sessions, 2);
}

#[test]
fn a_target_of_2047_bytes_is_taken_and_2048_is_trunc() {
    let mut m = server(ServerConfig::default());
    let mut req = prep(alice(), Op::Put, 8);
    req.target = "t".repeat(MAX_TARGET_LEN);
    m.prepare(&req).unwrap();
    req.target.push('t');
    assert!(matches!(m.prepare(&req), Err(RcError::Trunc { field: "target", len: 2048, max: 2047 })));
    assert_eq!(m.usage().sessions, 1, "the refused PREPARE gave its limits back");
}

/// Each limit refuses the PREPARE that would pass it, with its own kind,
/// and takes the one that reaches it exactly.
#[test]
fn each_limit_is_reached_exactly_and_refuses_one_more() {
    type Case = (fn(&mut Limits), LimitKind);
    let cases: [Case; 5] = [
        (|l| l.max_sessions = 2, LimitKind::Sessions),
        (|l| l.max_staging_bytes = 300, LimitKind::StagingBytes),
        (|l| l.max_qps = 2, LimitKind::Qps),
        (|l| l.max_user_sessions = 2, LimitKind::UserSessions),
        (|l| l.max_user_qps = 2, LimitKind::UserQps),
    ];
    for (set, kind) in cases {
        let mut m = server(limits(set));
        m.prepare(&prep(alice(), Op::Put, 100)).unwrap();
        m.prepare(&prep(alice(), Op::Put, 200)).unwrap();
        assert_eq!(m.prepare(&prep(alice(), Op::Put, 1)).unwrap_err(), RcError::Limit(kind), "{kind:?}");
        let u = m.usage();
        assert_eq!((u.sessions, u.staging_bytes, u.qps), (2, 300, 2), "{kind:?}");
        assert_eq!(u.per_user[&alice()], (2, 300), "{kind:?}");
    }
    let mut m = server(limits(|l| l.max_user_staging_bytes = 300));
    m.prepare(&prep(alice(), Op::Put, 100)).unwrap();
    m.prepare(&prep(alice(), Op::Put, 200)).unwrap();
    assert_eq!(m.prepare(&prep(alice(), Op::Put, 1)).unwrap_err(), RcError::Limit(LimitKind::UserStagingBytes));
}

#[test]
fn the_per_user_limits_count_each_principal_apart() {
    for set in [|l: &mut Limits| l.max_user_sessions = 1, |l: &mut Limits| l.max_user_qps = 1] {
        let mut m = server(limits(set));
        m.prepare(&prep(alice(), Op::Put, 10)).unwrap();
        assert!(matches!(m.prepare(&prep(alice(), Op::Put, 10)), Err(RcError::Limit(_))));
        m.prepare(&prep(bob(), Op::Put, 20)).unwrap();
        assert_eq!(m.usage().per_user[&bob()], (1, 20));
    }
    let mut m = server(limits(|l| l.max_user_staging_bytes = 10));
    m.prepare(&prep(alice(), Op::Put, 10)).unwrap();
    m.prepare(&prep(bob(), Op::Put, 10)).unwrap();
}

#[test]
fn max_user_qps_zero_is_unlimited() {
    let mut m = server(ServerConfig::default());
    assert_eq!(m.config().limits.max_user_qps, 0);
    for _ in 0..3 {
        m.prepare(&prep(alice(), Op::Put, 1)).unwrap();
    }
}

#[test]
fn destroying_a_session_gives_back_what_it_held_per_user() {
    let mut m = server(ServerConfig::default());
    let a1 = published_put(&mut m, alice(), 100);
    let a2 = published_put(&mut m, alice(), 30);
    let b = published_put(&mut m, bob(), 7);
    m.cancel(&a1, &alice()).unwrap();
    let u = m.usage();
    assert_eq!((u.sessions, u.staging_bytes, u.qps), (2, 37, 2));
    assert_eq!(u.per_user.len(), 2);
    assert_eq!(u.per_user[&alice()], (1, 30));
    m.cancel(&a2, &alice()).unwrap();
    m.cancel(&b, &bob()).unwrap();
    assert_eq!(m.usage(), Usage { ready_slots_free: 64, stage_slots_free: 32, ..Usage::default() });
}

#[test]
fn teardown_destroys_qp_cq_staging_and_pd_in_that_order() {
    let mut m = server(ServerConfig::default());
    let id = published_put(&mut m, alice(), 8);
    let s = &m.sessions[&id];
    let (pd, qp, cq, mr) = (s.pd, s.qp.id, s.cq, s.staging.id);
    let before = m.t.calls.len();
    assert_eq!(m.cancel(&id, &alice()), Ok(Cancelled::Marked));
    assert_eq!(m.t.calls[before..], [Call::DestroyQp(qp), Call::DestroyCq(cq), Call::DeregMr(mr), Call::DeallocPd(pd)]);
    assert_eq!((m.usage().leaked_qps, m.usage().leaked_mrs), (0, 0));
    assert_eq!(m.cancel(&id, &alice()), Ok(Cancelled::AlreadyGone));
}

/// Fails one verb of PREPARE at a time: what was made is destroyed, in
/// order, and the limits are given back.
#[test]
fn a_prepare_that_fails_midway_destroys_what_it_made() {
    for (verb, expect) in [
        ("alloc_pd", vec![]),
        ("create_cq", vec!["pd"]),
        ("create_qp", vec!["cq", "pd"]),
        ("modify_qp:Init", vec!["qp", "cq", "pd"]),
        ("reg_mr", vec!["qp", "cq", "pd"]),
    ] {
        let mut m = server(ServerConfig::default());
        m.t.fail.insert(verb);
        assert!(matches!(m.prepare(&prep(alice(), Op::Put, 8)), Err(RcError::Transport(_))), "{verb}");
        let gone: Vec<&str> =
            m.t.calls
                .iter()
                .filter_map(|c| match c {
                    Call::DestroyQp(_) => Some("qp"),
                    Call::DestroyCq(_) => Some("cq"),
                    Call::DeregMr(_) => Some("mr"),
                    Call::DeallocPd(_) => Some("pd"),
                    _ => None,
                })
                .collect();
        assert_eq!(gone, expect, "{verb}");
        assert_eq!(m.usage(), Usage { ready_slots_free: 64, stage_slots_free: 32, ..Usage::default() }, "{verb}");
    }
}

struct SameIdRng;

impl rand_core::RngCore for SameIdRng {
    fn next_u32(&mut self) -> u32 {
        7
    }
    fn next_u64(&mut self) -> u64 {
        7
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        dst.fill(7);
    }
}

#[test]
fn a_session_id_drawn_twice_fails_the_second_prepare_and_frees_its_resources() {
    let mut m = SessionManager::new(Fake::default(), SameIdRng, ServerConfig::default()).unwrap();
    m.prepare(&prep(alice(), Op::Put, 8)).unwrap();
    let before = m.t.calls.len();
    assert_eq!(m.prepare(&prep(alice(), Op::Put, 8)).unwrap_err(), RcError::Internal("session id collision"));
    assert!(matches!(
        m.t.calls[before..],
        [.., Call::DestroyQp(_), Call::DestroyCq(_), Call::DeregMr(_), Call::DeallocPd(_)]
    ));
    assert_eq!(m.usage().sessions, 1);
    assert_eq!(m.sessions().len(), 1);
}

#[test]
fn a_qp_or_cq_that_will_not_go_leaks_its_staging_region_and_a_failed_dereg_leaks_it_alone() {
    for (verb, qps, mrs, dereg, dealloc) in [
        ("destroy_qp", 1, 1, false, false),
        ("destroy_cq", 1, 1, false, false),
        ("dereg_mr", 0, 1, false, false),
        ("dealloc_pd", 0, 0, true, false),
    ] {
        let mut m = server(ServerConfig::default());
        let id = published_put(&mut m, alice(), 8);
        m.t.fail.insert(verb);
        m.cancel(&id, &alice()).unwrap();
        let u = m.usage();
        assert_eq!((u.leaked_qps, u.leaked_mrs), (qps, mrs), "{verb}");
        assert_eq!(m.t.count(|c| matches!(c, Call::DeregMr(_))) == 1, dereg, "{verb}");
        assert_eq!(m.t.count(|c| matches!(c, Call::DeallocPd(_))) == 1, dealloc, "{verb}");
        assert_eq!(
            m.t.count(|c| matches!(c, Call::DestroyCq(_))),
            usize::from(verb != "destroy_qp" && verb != "destroy_cq"),
            "{verb}"
        );
        assert_eq!(u.sessions, 0, "{verb}: the limits come back even when memory leaks");
    }
}

#[test]
fn finish_prepare_publishes_a_staged_get_or_any_put_and_aborting_destroys() {
    let mut m = server(ServerConfig::default());
    let get = m.prepare(&prep(alice(), Op::Get, 4)).unwrap().session;
    assert_eq!(
        m.finish_prepare(&get, true),
        Err(RcError::State("finish_prepare: a GET must be staged before it is committed"))
    );
    assert!(!m.sessions()[0].published);
    let lease = m.borrow_staging(&get).unwrap();
    m.finish_staging(lease, true, 4, "e", "").unwrap();
    m.finish_prepare(&get, true).unwrap();
    let put = m.prepare(&prep(alice(), Op::Put, 4)).unwrap().session;
    m.finish_prepare(&put, true).unwrap();
    assert!(m.sessions().iter().all(|s| s.published && !s.reap_pending));
    assert_eq!(m.finish_prepare(&SessionId(1), true), Err(RcError::NoSession));
    m.ready(&ready_req(alice(), put, 0)).unwrap();
    assert!(matches!(m.finish_prepare(&put, true), Err(RcError::Stale(_))));
    assert!(matches!(m.finish_prepare(&put, false), Err(RcError::Stale(_))));
    m.finish_prepare(&get, false).unwrap();
    assert!(!m.sessions.contains_key(&get), "aborted and reaped");
    assert!(m.sessions.contains_key(&put));
}

#[test]
fn a_staging_lease_is_one_at_a_time_and_each_handle_is_accepted_once() {
    let mut m = server(ServerConfig::default());
    let id = m.prepare(&prep(alice(), Op::Get, 4)).unwrap().session;
    let l1 = m.borrow_staging(&id).unwrap();
    assert_eq!((l1.handle, l1.capacity), (Handle { epoch: 1, nonce: 1 }, 4));
    assert_eq!(m.borrow_staging(&id), Err(RcError::Double("the staging buffer")));
    assert_eq!(m.sessions()[0].handles, 1);
    assert!(m.sessions()[0].lent);
    m.write_staging(&l1, 1, b"abc").unwrap();
    assert_eq!(m.t.mrs[&m.sessions[&id].staging.id].1, b"\0abc");
    m.finish_staging(l1, true, 4, "e1", "v1").unwrap();
    assert!(m.sessions()[0].staged && !m.sessions()[0].lent);
    let l2 = m.borrow_staging(&id).unwrap();
    assert_eq!(l2.handle, Handle { epoch: 1, nonce: 2 });
    assert_eq!(m.write_staging(&l1, 0, b"x"), Err(RcError::Stale("staging lease")));
    assert_eq!(m.finish_staging(l1, true, 4, "", ""), Err(RcError::Stale("staging lease")));
    let forged = StagingLease { handle: Handle { epoch: 1, nonce: 0 }, capacity: 4 };
    assert_eq!(m.write_staging(&forged, 0, b"x"), Err(RcError::Stale("staging lease")));
    m.finish_staging(l2, true, 4, "e2", "").unwrap();
    // The next session's handles carry the next epoch.
    let id2 = m.prepare(&prep(alice(), Op::Get, 4)).unwrap().session;
    assert_eq!(m.borrow_staging(&id2).unwrap().handle, Handle { epoch: 2, nonce: 1 });
}

#[test]
fn returning_a_lease_not_ok_short_or_with_a_long_etag_reaps_the_session() {
    type Finish = fn(&mut Server, StagingLease) -> Result<(), RcError>;
    let cases: [(Finish, Result<(), RcError>); 4] = [
        (|m, l| m.finish_staging(l, false, 0, "", ""), Ok(())),
        (|m, l| m.finish_staging(l, true, 3, "", ""), Err(RcError::Short { written: 3, expected: 4 })),
        (
            |m, l| m.finish_staging(l, true, 4, &"e".repeat(128), ""),
            Err(RcError::Trunc { field: "etag", len: 128, max: 127 }),
        ),
        (
            |m, l| m.finish_staging(l, true, 4, "", &"v".repeat(128)),
            Err(RcError::Trunc { field: "version-id", len: 128, max: 127 }),
        ),
    ];
    for (finish, expect) in cases {
        let mut m = server(ServerConfig::default());
        let id = m.prepare(&prep(alice(), Op::Get, 4)).unwrap().session;
        let lease = m.borrow_staging(&id).unwrap();
        assert_eq!(finish(&mut m, lease), expect);
        assert!(m.sessions().is_empty(), "{expect:?}");
    }
}

#[test]
fn an_etag_and_version_id_of_127_bytes_reach_the_ready_reply() {
    let mut m = server(ServerConfig::default());
    let id = m.prepare(&prep(alice(), Op::Get, 4)).unwrap().session;
    let lease = m.borrow_staging(&id).unwrap();
    let (etag, version) = ("e".repeat(MAX_ETAG_LEN), "v".repeat(MAX_ETAG_LEN));
    m.finish_staging(lease, true, 4, &etag, &version).unwrap();
    m.finish_prepare(&id, true).unwrap();
    assert_eq!(m.ready(&ready_req(alice(), id, 0)), Ok(ReadyStart::Done));
    let r = m.done_reply(&id).unwrap();
    assert_eq!((r.etag, r.version_id, r.bytes_transferred), (etag, version, 4));
    assert_eq!(m.done_reply(&SessionId(3)), Err(RcError::NoSession));
}

#[test]
fn slots_run_out_refuse_and_come_back_but_never_past_the_pool() {
    let cfg = ServerConfig { max_stage_slots: 2, max_ready_slots: 2, ..ServerConfig::default() };
    let mut m = server(cfg);
    m.try_acquire_stage().unwrap();
    assert_eq!(m.usage().stage_slots_free, 1);
    m.try_acquire_stage().unwrap();
    assert_eq!(m.try_acquire_stage(), Err(RcError::Limit(LimitKind::StageSlots)));
    m.release_stage();
    assert_eq!(m.usage().stage_slots_free, 1);
    m.release_stage();
    m.release_stage();
    assert_eq!(m.usage().stage_slots_free, 2);
    m.try_acquire_ready().unwrap();
    assert_eq!(m.usage().ready_slots_free, 1);
    m.try_acquire_ready().unwrap();
    assert_eq!(m.try_acquire_ready(), Err(RcError::Limit(LimitKind::ReadySlots)));
    m.release_ready();
    assert_eq!(m.usage().ready_slots_free, 1);
    m.release_ready();
    m.release_ready();
    assert_eq!(m.usage().ready_slots_free, 2);
}

#[test]
fn only_the_owner_reads_session_info_or_cancels() {
    let mut m = server(ServerConfig::default());
    let id = published_put(&mut m, alice(), 8);
    assert_eq!(m.session_info(&id, &alice()), Ok(SessionInfo { op: Op::Put, target: "/bucket/key".into() }));
    assert_eq!(m.session_info(&id, &bob()), Err(RcError::Session));
    assert_eq!(m.session_info(&SessionId(5), &alice()), Err(RcError::NoSession));
    assert_eq!(m.cancel(&id, &bob()), Err(RcError::Session));
    assert_eq!(m.sessions().len(), 1);
    assert!(!m.sessions()[0].reap_pending);
}

#[test]
fn a_put_view_needs_a_completed_put_and_holds_the_session_until_returned() {
    let mut m = server(ServerConfig::default());
    let id = published_put(&mut m, alice(), 4);
    assert!(matches!(m.get_put_data(&id), Err(RcError::State(_))), "still Prepared");
    let t = start(&mut m, alice(), id);
    put_lands(&mut m, id, b"wxyz");
    assert_eq!(finish(&mut m, t).unwrap().bytes_transferred, 4);
    assert_eq!(m.sessions()[0].handles, 1);
    let v = m.get_put_data(&id).unwrap();
    assert_eq!(v.len, 4);
    assert_eq!(m.sessions()[0].handles, 2, "the view and its reference");
    assert!(m.sessions()[0].lent);
    assert_eq!(m.get_put_data(&id), Err(RcError::Double("the PUT view")));
    let mut buf = [0u8; 3];
    m.read_put_data(&v, 1, &mut buf).unwrap();
    assert_eq!(&buf, b"xyz");
    let mut seen = Vec::new();
    m.with_put_data(&v, &mut |b: &[u8]| seen.extend_from_slice(b)).unwrap();
    assert_eq!(seen, b"wxyz");
    m.cancel(&id, &alice()).unwrap();
    assert_eq!(m.sessions().len(), 1, "the view holds it");
    assert_eq!(m.finish_put(v, true, &"e".repeat(128), ""), Err(RcError::Trunc { field: "etag", len: 128, max: 127 }));
    assert!(m.sessions().is_empty());
    assert_eq!(m.read_put_data(&v, 0, &mut buf), Err(RcError::Stale("PUT view")));
    assert_eq!(m.with_put_data(&v, &mut |_: &[u8]| ()), Err(RcError::Stale("PUT view")));
    assert_eq!(m.finish_put(v, true, "", ""), Err(RcError::Stale("PUT view")));
}

#[test]
fn a_get_has_no_put_view_and_finishes_after_its_final_response() {
    let mut m = server(ServerConfig::default());
    let id = staged_get(&mut m, alice(), b"data");
    let t = start(&mut m, alice(), id);
    assert_eq!(m.finish_final(&id), Err(RcError::State("finish_final: the data phase is still running")));
    send_done(&mut m, id, crate::transport::WcStatus::Success);
    finish(&mut m, t).unwrap();
    assert_eq!(m.get_put_data(&id), Err(RcError::State("get_put_data: not a PUT session")));
    assert_eq!(m.sessions()[0].handles, 1);
    m.cancel(&id, &alice()).unwrap();
    assert_eq!(m.sessions().len(), 1, "the completion reference holds it");
    m.finish_final(&id).unwrap();
    assert!(m.sessions().is_empty());
    assert_eq!(m.finish_final(&id), Err(RcError::NoSession));
}

#[test]
fn a_cancelled_session_with_a_lease_out_lives_until_the_lease_comes_back() {
    let mut m = server(ServerConfig::default());
    let id = m.prepare(&prep(alice(), Op::Get, 4)).unwrap().session;
    let lease = m.borrow_staging(&id).unwrap();
    m.cancel(&id, &alice()).unwrap();
    assert_eq!(m.reap(), 0);
    assert!(m.sessions()[0].reap_pending);
    m.finish_staging(lease, true, 4, "", "").unwrap();
    assert!(m.sessions().is_empty());
}

#[test]
fn cancel_all_marks_and_reaps_every_session() {
    let mut m = server(ServerConfig::default());
    published_put(&mut m, alice(), 1);
    published_put(&mut m, bob(), 2);
    m.cancel_all();
    assert!(m.sessions().is_empty());
    assert_eq!(m.usage().sessions, 0);
}

#[test]
fn the_listing_describes_each_live_session() {
    let mut m = server(ServerConfig::default());
    m.t.now = crate::time::Instant::from_nanos(5);
    let id = published_put(&mut m, bob(), 9);
    let qpn = m.sessions[&id].qp.qpn;
    assert_eq!(
        m.sessions(),
        vec![SessionSummary {
            session: id,
            principal: bob(),
            op: Op::Put,
            target: "/bucket/key".into(),
            size: 9,
            state: SessionState::Prepared,
            published: true,
            staged: false,
            reap_pending: false,
            handles: 0,
            lent: false,
            server_qpn: qpn,
            created: crate::time::Instant::from_nanos(5),
        }]
    );
}
