//! Every status code reached and asserted; the security rules: another
//! principal gets the not-found answer, stale and foreign rkeys fail with
//! REM_ACCESS_ERR, consumed and forged handles are refused, session ids do
//! not repeat.

use std::collections::BTreeSet;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use rctb_core::rcsession::inproc::{complete_put, prepare_get, prepare_put};
use rctb_core::rcsession::*;
use rctb_core::transport::*;
use rctb_sim::{NodeConfig, Sim};

use super::rig::*;

fn put_req(who: PrincipalId, size: u64) -> PrepareRequest {
    PrepareRequest {
        principal: who,
        op: Op::Put,
        target: "/b/k".into(),
        offset: 0,
        size,
        client_psn: 1,
        cookie: 0xC0,
        client_token: None,
    }
}

fn get_req(who: PrincipalId, size: u64) -> PrepareRequest {
    PrepareRequest { op: Op::Get, ..put_req(who, size) }
}

fn ready_req(who: PrincipalId, session: SessionId, cookie: u32) -> ReadyRequest {
    ReadyRequest { principal: who, session, cookie, client_qpn: 0, client_mr_addr: 0, client_mr_rkey: 0 }
}

/// An RNG that always draws the same bytes: the second session id collides.
struct StuckRng;

impl RngCore for StuckRng {
    fn next_u32(&mut self) -> u32 {
        7
    }
    fn next_u64(&mut self) -> u64 {
        7
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        dst.fill(7)
    }
}

#[test]
fn every_status_code_is_reached() {
    let mut seen = BTreeSet::new();
    let mut expect = |r: Result<(), RcError>, status: Status| {
        let got = r.err().map_or(Status::Ok, |e| e.status());
        assert_eq!(got, status);
        seen.insert(got);
    };
    let mut r = rig(
        11,
        {
            let mut server_config = ServerConfig::default();
            server_config.max_ready_slots = 1;
            server_config.max_stage_slots = 1;
            server_config
        },
        1,
    );
    let m = &mut r.m;
    // OK and ARG.
    expect(m.prepare(&put_req(alice(), 10)).map(|_| ()), Status::Ok);
    expect(m.prepare(&put_req(alice(), 0)).map(|_| ()), Status::Arg);
    expect(m.prepare(&put_req(alice(), 0x8000_0000)).map(|_| ()), Status::Arg);
    expect(m.prepare(&PrepareRequest { offset: 0x7FFF_FFF7, ..put_req(alice(), 9) }).map(|_| ()), Status::Arg);
    expect(m.prepare(&PrepareRequest { client_psn: 0x100_0000, ..put_req(alice(), 9) }).map(|_| ()), Status::Arg);
    expect(
        m.prepare(&PrepareRequest { client_token: Some("12".into()), ..put_req(alice(), 9) }).map(|_| ()),
        Status::Arg,
    );
    // TRUNC: the target, then an etag.
    let long = PrepareRequest { target: format!("/b/{}", "k".repeat(2045)), ..put_req(alice(), 9) };
    expect(m.prepare(&long).map(|_| ()), Status::Trunc);
    // STATE: commit an unstaged GET; DOUBLE: borrow twice; SHORT: stage short.
    let g = m.prepare(&get_req(alice(), 10)).unwrap().session;
    expect(m.finish_prepare(&g, true), Status::State);
    let lease = m.borrow_staging(&g).unwrap();
    expect(m.borrow_staging(&g).map(|_| ()), Status::Double);
    expect(m.finish_staging(lease, true, 9, "", ""), Status::Short);
    let g = m.prepare(&get_req(alice(), 10)).unwrap().session;
    let lease = m.borrow_staging(&g).unwrap();
    expect(m.finish_staging(lease, true, 10, &"e".repeat(128), ""), Status::Trunc);
    // NO_SESSION, SESSION (owner and cookie), STALE (READY after CANCEL with a lease out).
    expect(m.finish_prepare(&SessionId::parse("00000000000000000000000000000001").unwrap(), true), Status::NoSession);
    let p = prepare_put(m, &put_req(alice(), 10)).unwrap().session;
    expect(m.ready(&ready_req(mallory(), p, 0xC0)).map(|_| ()), Status::Session);
    expect(m.ready(&ready_req(alice(), p, 0xC1)).map(|_| ()), Status::Session);
    let held = m.borrow_staging(&p).unwrap();
    m.cancel(&p, &alice()).unwrap();
    expect(m.ready(&ready_req(alice(), p, 0xC0)).map(|_| ()), Status::Stale);
    m.finish_staging(held, false, 0, "", "").unwrap();
    // LIMIT: the stage slot and the ready slot.
    m.try_acquire_stage().unwrap();
    expect(m.try_acquire_stage(), Status::Limit);
    m.release_stage();
    // The ready slot taken outside READY is the one READY needs; a second
    // release does not make two.
    m.try_acquire_ready().unwrap();
    expect(m.ready(&ready_req(alice(), p, 0xC0)).map(|_| ()), Status::Limit);
    m.release_ready();
    m.release_ready();
    m.try_acquire_ready().unwrap();
    expect(m.try_acquire_ready(), Status::Limit);
    m.release_ready();
    // INTERNAL: a session id collision (an RNG that repeats itself).
    let sim = Sim::new(1);
    let n = sim.add_node(NodeConfig::new("s", "10.9.0.1".parse().unwrap())).unwrap();
    let mut stuck = SessionManager::new(sim.transport(n), StuckRng, ServerConfig::default()).unwrap();
    stuck.prepare(&put_req(alice(), 1)).unwrap();
    expect(stuck.prepare(&put_req(alice(), 1)).map(|_| ()), Status::Internal);
    assert_eq!(stuck.usage().sessions, 1, "the refused PREPARE released its limits");
    // WIRE (a bad rkey) while the only ready slot is taken: LIMIT for a second READY.
    let object = pattern(1, 64);
    let (mut x, req) = r.clients[0].begin(alice(), Op::Get, "/b/k", 64, 3, 0xAB).unwrap();
    let reply = prepare_get(&mut r.m, &req, &object, "").unwrap();
    let mut ready = r.clients[0].connect(&mut x, &reply, false).unwrap();
    ready.client_mr_rkey ^= 1;
    let ReadyStart::Pending(t) = r.m.ready(&ready).unwrap() else { panic!("a data phase") };
    let other = prepare_put(&mut r.m, &put_req(alice(), 1)).unwrap().session;
    expect(r.m.ready(&ready_req(alice(), other, 0xC0)).map(|_| ()), Status::Limit);
    expect(r.finish(t).map(|_| ()), Status::Wire);
    assert_eq!(seen, Status::ALL.into_iter().collect(), "every status code");
}

#[test]
fn limits_in_order_and_the_meaning_of_zero() {
    let prep = |limits: Limits, n: usize| {
        let mut r = rig(
            12,
            {
                let mut server_config = ServerConfig::default();
                server_config.limits = limits;
                server_config
            },
            0,
        );
        (0..n).map(|_| r.m.prepare(&put_req(alice(), 10)).map(|_| ())).collect::<Vec<_>>()
    };
    let g = Limits::generous();
    // `Limits` is non_exhaustive: start from `g` and change one field.
    let tweak = |mut l: Limits, f: fn(&mut Limits)| {
        f(&mut l);
        l
    };
    for (limits, kind) in [
        (tweak(g, |l| l.max_sessions = 0), LimitKind::Sessions),
        (tweak(g, |l| l.max_staging_bytes = 0), LimitKind::StagingBytes),
        (tweak(g, |l| l.max_qps = 0), LimitKind::Qps),
        (tweak(g, |l| l.max_user_sessions = 0), LimitKind::UserSessions),
        (tweak(g, |l| l.max_user_staging_bytes = 0), LimitKind::UserStagingBytes),
        // Everything zero: the first limit in order is the one reported.
        (
            tweak(g, |l| {
                l.max_sessions = 0;
                l.max_staging_bytes = 0;
                l.max_qps = 0;
                l.max_user_sessions = 0;
                l.max_user_staging_bytes = 0;
                l.max_user_qps = 0;
            }),
            LimitKind::Sessions,
        ),
    ] {
        assert_eq!(prep(limits, 1), vec![Err(RcError::Limit(kind))], "{limits:?}");
    }
    // max_user_qps 0 is unlimited; 2 allows two sessions per user.
    assert!(prep(tweak(g, |l| l.max_user_qps = 0), 5).iter().all(|r| r.is_ok()));
    let two = prep(tweak(g, |l| l.max_user_qps = 2), 3);
    assert_eq!(two[2], Err(RcError::Limit(LimitKind::UserQps)));
    // Another user is not affected by alice's budget.
    let mut r = rig(
        13,
        {
            let mut server_config = ServerConfig::default();
            server_config.limits = tweak(g, |l| l.max_user_sessions = 1);
            server_config
        },
        0,
    );
    r.m.prepare(&put_req(alice(), 10)).unwrap();
    assert_eq!(r.m.prepare(&put_req(alice(), 10)).unwrap_err(), RcError::Limit(LimitKind::UserSessions));
    r.m.prepare(&put_req(mallory(), 10)).unwrap();
}

#[test]
fn another_principal_gets_the_not_found_answer() {
    let mut r = rig(14, ServerConfig::default(), 0);
    let id = prepare_put(&mut r.m, &put_req(alice(), 10)).unwrap().session;
    let not_found = RcError::NoSession.http();
    assert_eq!(not_found, (404, "NoSuchRdmaSession"));
    let e = r.m.ready(&ready_req(mallory(), id, 0xC0)).unwrap_err();
    assert_eq!((e.clone(), e.http()), (RcError::Session, not_found));
    let e = r.m.cancel(&id, &mallory()).unwrap_err();
    assert_eq!((e.clone(), e.http()), (RcError::Session, not_found));
    let e = r.m.session_info(&id, &mallory()).unwrap_err();
    assert_eq!(e.http(), not_found);
    // Nothing happened to alice's session; her own calls work.
    assert_eq!(r.m.session_info(&id, &alice()).unwrap(), SessionInfo { op: Op::Put, target: "/b/k".into() });
    assert_eq!(r.m.cancel(&id, &alice()), Ok(Cancelled::Marked));
    assert_eq!(r.m.cancel(&id, &alice()), Ok(Cancelled::AlreadyGone), "CANCEL of a vanished session succeeds");
    assert_eq!(r.m.cancel(&id, &mallory()), Ok(Cancelled::AlreadyGone));
    r.assert_drained();
}

/// Starts a PUT on client 0 whose write goes to `(addr, rkey)` instead of
/// its own session's staging region; returns the client's error and the
/// server's READY result.
fn put_into(r: &mut Rig, addr: u64, rkey: u32) -> (ClientError, RcError) {
    r.clients[0].write_payload(&pattern(99, 128)).unwrap();
    let (mut x, req) = r.clients[0].begin(alice(), Op::Put, "/b/k", 128, 11, 0x77).unwrap();
    let mut reply = prepare_put(&mut r.m, &req).unwrap();
    let ready = r.clients[0].connect(&mut x, &reply, false).unwrap();
    let ReadyStart::Pending(t) = r.m.ready(&ready).unwrap() else { panic!("a data phase") };
    reply.staging_addr = addr;
    reply.staging_rkey = rkey;
    x.reply = Some(reply);
    r.clients[0].start_put(&mut x).unwrap();
    let client = loop {
        match r.clients[0].poll(&mut x) {
            Err(e) => break e,
            Ok(Some(())) => panic!("the write into a foreign region succeeded"),
            Ok(None) => assert!(r.sim.step().is_some(), "idle before the client's completion"),
        }
    };
    let server = r.finish(t).unwrap_err();
    (client, server)
}

#[test]
fn a_reaped_sessions_rkey_gets_rem_access_err() {
    let mut r = rig(15, ServerConfig::default(), 1);
    // A first PUT; the client keeps its staging address and rkey.
    r.clients[0].write_payload(&pattern(1, 128)).unwrap();
    let (mut x, req) = r.clients[0].begin(alice(), Op::Put, "/b/k", 128, 10, 0x66).unwrap();
    let old = prepare_put(&mut r.m, &req).unwrap();
    let ready = r.clients[0].connect(&mut x, &old, false).unwrap();
    let ReadyStart::Pending(t) = r.m.ready(&ready).unwrap() else { panic!() };
    r.clients[0].start_put(&mut x).unwrap();
    r.finish(t).unwrap();
    complete_put(&mut r.m, &old.session).unwrap();
    assert!(r.m.sessions().is_empty(), "reaped");
    // A new session; the client writes to the old region instead.
    let (client, server) = put_into(&mut r, old.staging_addr, old.staging_rkey);
    assert_eq!(client, ClientError::Completion(WcStatus::RemAccessErr));
    assert_eq!(server.status(), Status::Wire);
    r.assert_drained();
}

#[test]
fn another_sessions_live_region_is_out_of_reach() {
    let mut r = rig(16, ServerConfig::default(), 1);
    // Mallory's PUT session is published and waiting: its region is registered.
    let theirs = prepare_put(&mut r.m, &put_req(mallory(), 128)).unwrap();
    let (client, server) = put_into(&mut r, theirs.staging_addr, theirs.staging_rkey);
    assert_eq!(client, ClientError::Completion(WcStatus::RemAccessErr), "sessions have their own PD");
    assert_eq!(server.status(), Status::Wire);
    // Mallory's data is untouched.
    let done = r.m.ready_blocking(&ready_req(mallory(), theirs.session, 0xC0)).unwrap();
    assert_eq!(done.outcome, ReadyOutcome::Ok);
    assert_eq!(complete_put(&mut r.m, &theirs.session).unwrap(), vec![0u8; 128]);
    r.assert_drained();
}

#[test]
fn consumed_and_forged_handles_are_refused() {
    let mut r = rig(17, ServerConfig::default(), 0);
    let a = r.m.prepare(&get_req(alice(), 8)).unwrap().session;
    let b = r.m.prepare(&get_req(alice(), 8)).unwrap().session;
    let la = r.m.borrow_staging(&a).unwrap();
    let lb = r.m.borrow_staging(&b).unwrap();
    assert_ne!(la.handle.epoch, lb.handle.epoch);
    assert_eq!(la.handle.nonce, lb.handle.nonce, "nonces restart per session: the epoch tells them apart");
    let stale = |r: Result<(), RcError>| assert!(matches!(r, Err(RcError::Stale(_))), "{r:?}");
    // Forged: nonce 0, another session's epoch, an unissued nonce.
    for h in [
        Handle { nonce: 0, ..la.handle },
        Handle { epoch: 0, ..la.handle },
        Handle { nonce: la.handle.nonce + 1, ..la.handle },
        Handle { epoch: la.handle.epoch + 100, ..la.handle },
    ] {
        stale(r.m.finish_staging(StagingLease { handle: h, capacity: 8 }, true, 8, "", ""));
        stale(r.m.write_staging(&StagingLease { handle: h, capacity: 8 }, 0, b"x"));
        stale(r.m.finish_put(PutView { handle: h, len: 8 }, true, "", ""));
    }
    // Consumed: a lease is accepted once.
    r.m.finish_staging(la, true, 8, "", "").unwrap();
    stale(r.m.finish_staging(la, true, 8, "", ""));
    stale(r.m.write_staging(&la, 0, b"x"));
    r.m.finish_staging(lb, true, 8, "", "").unwrap();
    // PUT views likewise.
    let p = prepare_put(&mut r.m, &put_req(alice(), 8)).unwrap().session;
    r.m.ready_blocking(&ready_req(alice(), p, 0xC0)).unwrap();
    let v = r.m.get_put_data(&p).unwrap();
    assert!(matches!(r.m.get_put_data(&p), Err(RcError::Double(_))));
    stale(r.m.finish_put(PutView { handle: Handle { nonce: v.handle.nonce + 1, ..v.handle }, len: 8 }, true, "", ""));
    r.m.finish_put(v, true, "etag", "").unwrap();
    stale(r.m.finish_put(v, true, "etag", ""));
    let mut buf = [0u8; 8];
    assert!(matches!(r.m.read_put_data(&v, 0, &mut buf), Err(RcError::Stale(_))));
    for id in [a, b] {
        r.m.finish_prepare(&id, false).unwrap();
    }
    r.assert_drained();
}

#[test]
fn session_ids_do_not_repeat_across_a_million_sessions() {
    const SESSIONS: u32 = 1_000_000;
    let sim = Sim::new(18);
    let n = sim.add_node(NodeConfig::new("s", "10.9.0.1".parse().unwrap())).unwrap();
    let mut m = SessionManager::new(sim.transport(n), ChaCha8Rng::seed_from_u64(18), ServerConfig::default()).unwrap();
    let mut ids = BTreeSet::new();
    for _ in 0..SESSIONS {
        let id = m.prepare(&put_req(alice(), 1)).unwrap().session;
        assert!(ids.insert(id), "session id {id} repeated");
        m.cancel(&id, &alice()).unwrap();
    }
    assert_eq!(m.usage().sessions, 0);
}

#[test]
fn get_through_the_service_from_another_thread_and_close_drains() {
    // The simulator is single-threaded (Rc): the service is used from this
    // thread here; `rcsession::tests` drives it from several threads.
    let sim = Sim::new(19);
    let n = sim.add_node(NodeConfig::new("s", "10.9.0.1".parse().unwrap())).unwrap();
    let m = SessionManager::new(sim.transport(n), ChaCha8Rng::seed_from_u64(19), ServerConfig::default()).unwrap();
    let svc = RcService::new(m);
    let a = svc.try_enter().unwrap();
    let id = a.with(|m| prepare_put(m, &put_req(alice(), 4))).unwrap().session;
    assert_eq!(a.ready(&ready_req(alice(), id, 0xC0)).unwrap().bytes_transferred, 4);
    assert_eq!(svc.active(), 1);
    drop(a);
    assert_eq!(svc.active(), 0);
    let b = svc.try_enter().unwrap();
    let held = b.with(|m| m.get_put_data(&id)).unwrap();
    drop(b);
    svc.close();
    assert!(svc.try_enter().is_none(), "no admissions after close");
    svc.close();
    svc.with_manager(|m| {
        assert!(m.sessions().is_empty(), "close revoked the orphaned view and reaped");
        assert_eq!(m.finish_put(held, true, "", ""), Err(RcError::Stale("PUT view")));
    });
    assert_eq!(sim.live_resources().qps, 0);
}
