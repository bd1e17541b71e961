//! The data phase end to end: GET and PUT of many sizes, control-plane
//! only mode, BUSY and its retry, WIRE on a dead client, expiry.

use rctb_core::rcsession::*;

use rctb_core::rcsession::inproc::{complete_get, complete_put, prepare_put};
use rctb_core::time::Duration;

use super::rig::*;

#[test]
fn get_and_put_move_the_bytes() {
    let mut r = rig_with(1, ServerConfig::default(), 1, {
        let mut client_config = ClientConfig::default();
        client_config.capacity = 1 << 20;
        client_config
    });
    for (i, size) in [1usize, 7, 4096, 4097, 65536, 1 << 20].into_iter().enumerate() {
        let object = pattern(i as u64, size);
        assert_eq!(r.get(0, alice(), &object, 0xC00C_0000 + i as u32).unwrap(), object, "GET of {size}");
        let object = pattern(100 + i as u64, size);
        assert_eq!(r.put(0, alice(), &object, 0xB00C_0000 + i as u32).unwrap(), object, "PUT of {size}");
    }
    r.assert_drained();
}

fn fast_fail() -> ServerConfig {
    // Local ACK timeout code 8 (~1 ms), one retry: a client that does not
    // answer exhausts the server's retries quickly.
    {
        let mut server_config = ServerConfig::default();
        server_config.timeout = 8;
        server_config.retry_cnt = 1;
        server_config
    }
}

/// PREPAREs and connects a GET on client 0 without its receive posted.
fn get_without_recv(r: &mut Rig, object: &[u8]) -> (ClientTransfer, ReadyRequest) {
    let (mut x, req) = r.clients[0].begin(alice(), Op::Get, "/b/k", object.len() as u64, 77, 0xFEED).unwrap();
    let reply = rctb_core::rcsession::inproc::prepare_get(&mut r.m, &req, object, "e").unwrap();
    let ready = r.clients[0].connect(&mut x, &reply, false).unwrap();
    (x, ready)
}

fn state_of(r: &Rig, id: &SessionId) -> Option<(SessionState, bool)> {
    r.m.sessions().into_iter().find(|s| s.session == *id).map(|s| (s.state, s.reap_pending))
}

#[test]
fn rnr_exhaustion_is_busy_and_the_retry_succeeds() {
    let mut cfg = ServerConfig::default();
    cfg.rnr_retry = 0;
    let mut r = rig(2, cfg, 1);
    let object = pattern(9, 10_000);
    let (mut x, ready) = get_without_recv(&mut r, &object);
    let busy = r.m.ready_blocking(&ready).unwrap();
    assert_eq!((busy.outcome, busy.bytes_transferred), (ReadyOutcome::Busy, 0));
    assert_eq!(state_of(&r, &ready.session), Some((SessionState::Prepared, false)));
    // The QP went back to INIT; the client resets too and retries after its backoff.
    let again = r.clients[0].on_busy(&mut x).unwrap();
    assert!(x.retry_at > r.sim.now());
    r.sim.run_until(x.retry_at);
    let ok = r.m.ready_blocking(&again).unwrap();
    assert_eq!((ok.outcome, ok.bytes_transferred), (ReadyOutcome::Ok, object.len() as u64));
    r.drive_client(0, &mut x).unwrap();
    let mut got = vec![0; object.len()];
    r.clients[0].read_payload(&mut got).unwrap();
    assert_eq!(got, object);
    complete_get(&mut r.m, &ready.session).unwrap();
    r.assert_drained();
}

#[test]
fn retry_exhaustion_is_busy_too() {
    let mut r = rig(3, fast_fail(), 1);
    let object = pattern(3, 100);
    let (mut x, ready) = get_without_recv(&mut r, &object);
    // A client whose QP is not connected drops everything: no ACK ever comes.
    r.clients[0].abandon(&mut x).unwrap();
    let busy = r.m.ready_blocking(&ready).unwrap();
    assert_eq!(busy.outcome, ReadyOutcome::Busy);
    let again = r.clients[0].on_busy(&mut x).unwrap();
    assert_eq!(r.m.ready_blocking(&again).unwrap().outcome, ReadyOutcome::Ok);
    complete_get(&mut r.m, &ready.session).unwrap();
    r.assert_drained();
}

#[test]
fn a_vanished_client_times_out_with_wire_and_is_reaped() {
    let mut cfg = ServerConfig::default();
    cfg.t_exec = Duration::from_millis(5);
    let mut r = rig(4, cfg, 1);
    let (mut x, ready) = get_without_recv(&mut r, &pattern(4, 4096));
    r.clients[0].abandon(&mut x).unwrap();
    let err = r.m.ready_blocking(&ready).unwrap_err();
    assert!(matches!(err, RcError::Wire { outcome: ReadyOutcome::Timeout, .. }), "{err}");
    assert_eq!(err.status(), Status::Wire);
    assert_eq!(state_of(&r, &ready.session), None, "reaped at once: no reference is left");
    r.assert_drained();
}

#[test]
fn a_wrong_immediate_is_verify_fail() {
    let mut r = rig(5, ServerConfig::default(), 1);
    let object = pattern(5, 300);
    r.clients[0].write_payload(&object).unwrap();
    let (mut x, req) = r.clients[0].begin(alice(), Op::Put, "/b/k", 300, 5, 0xAAAA).unwrap();
    let reply = prepare_put(&mut r.m, &req).unwrap();
    let ready = r.clients[0].connect(&mut x, &reply, false).unwrap();
    let ReadyStart::Pending(t) = r.m.ready(&ready).unwrap() else { panic!("a data phase") };
    x.cookie = 0xBBBB; // the client writes with another immediate
    r.clients[0].start_put(&mut x).unwrap();
    let err = r.finish(t).unwrap_err();
    assert!(matches!(err, RcError::Wire { outcome: ReadyOutcome::VerifyFail, .. }), "{err}");
    r.assert_drained();
}

#[test]
fn a_bad_client_rkey_is_wire_fail() {
    let mut r = rig(6, ServerConfig::default(), 1);
    let (_x, mut ready) = get_without_recv(&mut r, &pattern(6, 64));
    ready.client_mr_rkey ^= 0x5555;
    let err = r.m.ready_blocking(&ready).unwrap_err();
    assert!(matches!(err, RcError::Wire { outcome: ReadyOutcome::WireFail, .. }), "{err}");
    r.assert_drained();
}

#[test]
fn control_plane_only_reports_ok_with_the_size() {
    let mut r = rig(7, ServerConfig::default(), 0);
    let req = PrepareRequest {
        principal: alice(),
        op: Op::Put,
        target: "/b/k".into(),
        offset: 0,
        size: 5000,
        client_psn: 9,
        cookie: 0x99,
        client_token: None,
    };
    let reply = prepare_put(&mut r.m, &req).unwrap();
    assert_eq!(reply.server_psn, reply.server_qpn & 0xFF_FFFF);
    assert_eq!(reply.reply_header(), format!("200:{}", "0".repeat(88)));
    let ready = ReadyRequest {
        principal: alice(),
        session: reply.session,
        cookie: 0x99,
        client_qpn: 0,
        client_mr_addr: 0,
        client_mr_rkey: 0,
    };
    let done = r.m.ready_blocking(&ready).unwrap();
    assert_eq!((done.outcome, done.bytes_transferred, done.cookie_echo), (ReadyOutcome::Ok, 5000, 0x99));
    assert_eq!(complete_put(&mut r.m, &reply.session).unwrap(), vec![0u8; 5000], "staging starts zeroed");
    r.assert_drained();
}

#[test]
fn deadlines_come_from_the_transport_clock() {
    let mut cfg = ServerConfig::default();
    cfg.t_prep = Duration::from_millis(1);
    let mut r = rig(8, cfg, 0);
    let req = PrepareRequest {
        principal: alice(),
        op: Op::Put,
        target: "/b/k".into(),
        offset: 0,
        size: 10,
        client_psn: 1,
        cookie: 1,
        client_token: None,
    };
    let id = prepare_put(&mut r.m, &req).unwrap().session;
    r.sim.run_until(r.sim.now() + Duration::from_millis(1));
    assert_eq!(r.m.reap(), 0, "at the deadline: not yet past it");
    r.sim.run_until(r.sim.now() + Duration::from_nanos(1));
    assert_eq!(r.m.reap(), 1);
    assert_eq!(r.m.finish_prepare(&id, true), Err(RcError::NoSession));
    r.assert_drained();
}

#[test]
fn every_destroyed_session_is_recorded_once_with_its_outcome() {
    let mut cfg = ServerConfig::default();
    cfg.t_exec = Duration::from_millis(5);
    let mut r = rig(8, cfg, 1);
    assert!(r.m.take_ended().is_empty(), "off by default");
    r.m.record_ended();
    // A GET that moves its bytes, a PUT that does, a session cancelled
    // before READY, and a READY whose client vanished.
    let object = pattern(8, 5000);
    assert_eq!(r.get(0, alice(), &object, 0xC0C0).unwrap(), object);
    assert_eq!(r.put(0, alice(), &object, 0xB0B0).unwrap(), object);
    let (_x, req) = r.clients[0].begin(alice(), Op::Put, "/b/c", 10, 1, 0xCAFE).unwrap();
    let cancelled = prepare_put(&mut r.m, &req).unwrap().session;
    assert_eq!(r.m.cancel(&cancelled, &alice()).unwrap(), Cancelled::Marked);
    let (mut x, ready) = get_without_recv(&mut r, &pattern(9, 64));
    r.clients[0].abandon(&mut x).unwrap();
    r.m.ready_blocking(&ready).unwrap_err();
    r.assert_drained();
    let ended = r.m.take_ended();
    let summary: Vec<(Option<ReadyOutcome>, u64)> = ended.iter().map(|e| (e.outcome, e.bytes)).collect();
    assert_eq!(
        summary,
        [(Some(ReadyOutcome::Ok), 5000), (Some(ReadyOutcome::Ok), 5000), (None, 0), (Some(ReadyOutcome::Timeout), 0)]
    );
    assert_eq!(ended[2].session, cancelled);
    assert_eq!(ended[3].session, ready.session);
    assert!(r.m.take_ended().is_empty(), "each record is handed out once");
}
