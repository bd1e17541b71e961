//! The service's admissions, Close and blocking READY on the fake
//! transport, single-threaded (written for the mutants of service.rs,
//! issue 39; the threaded Close test is in tests.rs).

use super::rig::*;
use crate::transport::WcStatus;
use crate::*;

fn service() -> RcService<super::fake::Fake, super::CountingRng> {
    RcService::new(server(ServerConfig::default()))
}

#[test]
fn admissions_are_counted_until_each_is_dropped() {
    let svc = service();
    assert_eq!(svc.active(), 0);
    let a = svc.try_enter().unwrap();
    let b = svc.try_enter().unwrap();
    assert_eq!(svc.active(), 2);
    drop(a);
    assert_eq!(svc.active(), 1);
    assert!(!svc.is_closing());
    drop(b);
    assert_eq!(svc.active(), 0);
}

#[test]
fn close_destroys_every_session_refuses_new_calls_and_may_be_repeated() {
    let svc = service();
    let lease = svc.with_manager(|m| {
        published_put(m, alice(), 4);
        let id = m.prepare(&prep(bob(), Op::Get, 4)).unwrap().session;
        m.borrow_staging(&id).unwrap()
    });
    assert_eq!(svc.with_manager(|m| m.sessions().len()), 2);
    svc.close();
    assert!(svc.is_closing());
    assert!(svc.try_enter().is_none());
    assert_eq!(svc.with_manager(|m| (m.sessions().len(), m.usage().sessions)), (0, 0));
    assert_eq!(svc.with_manager(|m| m.write_staging(&lease, 0, b"x")), Err(RcError::Stale("staging lease")));
    svc.close();
    assert_eq!(svc.active(), 0);
}

#[test]
fn an_admitted_ready_returns_when_its_data_phase_ends() {
    let svc = service();
    let a = svc.try_enter().unwrap();
    let id = a.with(|m| staged_get(m, alice(), b"abcd"));
    a.with(|m| m.transport_mut().auto_send = Some(WcStatus::Success));
    let r = a.ready(&ready_req(alice(), id, 0x42)).unwrap();
    assert_eq!((r.outcome, r.bytes_transferred), (ReadyOutcome::Ok, 4));
    let id = a.with(|m| staged_get(m, alice(), b"ab"));
    assert_eq!(a.ready(&ready_req(alice(), id, 0)).unwrap().bytes_transferred, 2);
    assert_eq!(a.ready(&ready_req(bob(), id, 0)), Err(RcError::Session));
}

#[test]
fn a_blocking_ready_waits_in_slices_of_a_millisecond_until_its_deadline() {
    let cfg = ServerConfig { t_exec: crate::time::Duration::from_micros(3500), ..ServerConfig::default() };
    let svc = RcService::new(server(cfg));
    let a = svc.try_enter().unwrap();
    let id = a.with(|m| staged_get(m, alice(), b"abcd"));
    let t0 = a.with(|m| m.now());
    let r = a.ready(&ready_req(alice(), id, 0x42));
    assert!(matches!(r, Err(RcError::Wire { outcome: ReadyOutcome::Timeout, .. })), "{r:?}");
    // Slices of 1 ms, the last one cut at the deadline.
    let us = |n| t0 + crate::time::Duration::from_micros(n);
    assert_eq!(a.with(|m| m.transport().waits.clone()), [us(1000), us(2000), us(3000), us(3500)]);
    assert_eq!(a.with(|m| m.now()), us(3500));
}
