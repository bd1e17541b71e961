//! Expiry, teardown records and shutdown on the fake transport (written
//! for the mutants of reaper.rs, issue 39).

use super::fake::Call;
use super::rig::*;
use crate::transport::WcStatus;
use crate::*;

#[test]
fn a_prepared_session_expires_strictly_after_t_prep() {
    let cfg = ServerConfig { t_prep: ns(100), ..ServerConfig::default() };
    let mut m = server(cfg);
    let t0 = m.t.now;
    published_put(&mut m, alice(), 4);
    published_put(&mut m, bob(), 4);
    m.t.now = t0 + ns(100);
    assert_eq!(m.reap(), 0);
    assert!(m.sessions().iter().all(|s| !s.reap_pending));
    m.t.now = t0 + ns(101);
    assert_eq!(m.reap(), 2);
    assert!(m.sessions().is_empty());
    assert_eq!(m.reap(), 0);
}

#[test]
fn a_completing_session_expires_strictly_after_t_exec() {
    let cfg = ServerConfig { t_prep: ns(10), t_exec: ns(100), ..ServerConfig::default() };
    let mut m = server(cfg);
    let t0 = m.t.now;
    let id = staged_get(&mut m, alice(), b"abcd");
    m.ready(&ready_req(alice(), id, 0)).unwrap();
    m.t.now = t0 + ns(100);
    assert_eq!(m.reap(), 0);
    assert!(!m.sessions()[0].reap_pending, "READY ended the prepare deadline");
    m.t.now = t0 + ns(101);
    assert_eq!(m.reap(), 0, "the completion reference holds it");
    assert!(m.sessions()[0].reap_pending);
    m.finish_final(&id).unwrap();
    assert!(m.sessions().is_empty());
}

#[test]
fn a_zero_window_never_expires() {
    let cfg = ServerConfig { t_prep: ns(0), ..ServerConfig::default() };
    let mut m = server(cfg);
    published_put(&mut m, alice(), 4);
    m.t.now = crate::time::Instant::from_nanos(u64::MAX / 2);
    assert_eq!(m.reap(), 0);
    assert_eq!(m.sessions().len(), 1);
}

#[test]
fn each_destroyed_session_leaves_one_ended_record_once_recording_is_on() {
    let mut m = server(ServerConfig::default());
    let quiet = published_put(&mut m, alice(), 4);
    m.cancel(&quiet, &alice()).unwrap();
    assert_eq!(m.take_ended(), []);
    m.record_ended();
    let get = staged_get(&mut m, alice(), b"abcd");
    let t = start(&mut m, alice(), get);
    send_done(&mut m, get, WcStatus::Success);
    finish(&mut m, t).unwrap();
    let gone = published_put(&mut m, bob(), 9);
    m.cancel(&gone, &bob()).unwrap();
    m.finish_final(&get).unwrap();
    assert_eq!(
        m.take_ended(),
        [
            Ended { session: gone, outcome: None, bytes: 0 },
            Ended { session: get, outcome: Some(ReadyOutcome::Ok), bytes: 4 },
        ]
    );
    assert_eq!(m.take_ended(), []);
}

#[test]
fn shutdown_revokes_every_handle_and_destroys_every_session() {
    let mut m = server(ServerConfig::default());
    let leased = m.prepare(&prep(alice(), Op::Get, 4)).unwrap().session;
    let lease = m.borrow_staging(&leased).unwrap();
    let running = published_put(&mut m, bob(), 4);
    let t = start(&mut m, bob(), running);
    m.shutdown();
    assert!(m.sessions().is_empty());
    assert_eq!(m.t.count(|c| matches!(c, Call::DeregMr(_))), 2);
    assert_eq!(m.usage().sessions, 0);
    assert_eq!(m.wait_set().0, []);
    assert_eq!(m.write_staging(&lease, 0, b"x"), Err(RcError::Stale("staging lease")));
    m.progress();
    assert_eq!(m.take_ready(t), None);
}
