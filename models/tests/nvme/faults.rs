//! Faults and recovery: dropped and delayed responses, keep-alive, a
//! target that stops answering, reconnection after a crash or a lost
//! response, and seeded random faults.

use rctb_core::Transport;
use rctb_core::nvmeof::{Buffer, Controller, NvmeError};
use rctb_core::time::Duration;
use rctb_core::transport::WcStatus;
use rctb_models::nvme::{RandomFaults, TargetConfig};
use rctb_sim::SimTransport;

use crate::{NQN, config, connect, pattern, setup};

#[test]
fn a_dropped_response_is_a_timeout_not_a_hang() {
    let s = setup(7, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.timeout = Duration::from_secs(2);
    let mut c = connect(&s, cfg);
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(4096).unwrap();
    s.target.borrow_mut().faults_mut().drop_responses = 1;
    let before = s.sim.now();
    let e = c.read(&ns, 0, Buffer::host(mr)).unwrap_err();
    assert!(matches!(e, NvmeError::Timeout { command: "Read", qid: 1, .. }), "{e:?}");
    assert!(s.sim.now() - before >= Duration::from_secs(2));
    // The queue is failed: later I/O fails at once with the same error.
    assert!(matches!(c.read(&ns, 0, Buffer::host(mr)), Err(NvmeError::Timeout { .. })));
}

#[test]
fn a_delayed_response_still_completes() {
    let s = setup(8, TargetConfig::new(NQN));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(4096).unwrap();
    s.target.borrow_mut().faults_mut().response_delay = Duration::from_millis(300);
    let before = s.sim.now();
    c.read(&ns, 0, Buffer::host(mr)).unwrap();
    assert!(s.sim.now() - before >= Duration::from_millis(300));
}

#[test]
fn keep_alive_keeps_the_controller() {
    let s = setup(10, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.keep_alive = Duration::from_secs(1);
    let mut c = connect(&s, cfg);
    let until = s.sim.now() + Duration::from_secs(5);
    c.idle_until(until).unwrap();
    assert!(s.target.borrow().stats().keep_alives >= 8, "{:?}", s.target.borrow().stats());
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(512).unwrap();
    c.read(&ns, 0, Buffer::host(mr)).unwrap();
}

#[test]
fn without_keep_alive_the_target_drops_the_controller() {
    let s = setup(11, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.keep_alive = Duration::from_secs(1);
    let mut c = connect(&s, cfg);
    // The host goes silent (nothing drives the controller) for 3 s.
    s.sim.run_until(s.sim.now() + Duration::from_secs(3));
    assert_eq!(s.target.borrow().queue_count(), 0);
    let ns = c.namespace(1);
    // The target dropped the queues: the admin queue's pending receive is
    // flushed, and the command fails with that completion.
    assert!(matches!(ns, Err(NvmeError::Completion { qid: 0, status: WcStatus::WrFlushErr, .. })), "{ns:?}");
}

/// A driver loop as an application writes it: wait on the controller's
/// wait set, then `service`, until `until` or an error.
fn drive(c: &mut Controller<SimTransport>, until: rctb_core::time::Instant) -> Result<(), NvmeError> {
    loop {
        c.service()?;
        let now = c.transport().now();
        if now >= until {
            return Ok(());
        }
        let (cqs, next) = c.wait_set();
        c.transport_mut().wait(&cqs, next.min(until))?;
    }
}

#[test]
fn an_idle_controller_keeps_alive_through_service() {
    let s = setup(20, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.keep_alive = Duration::from_secs(1);
    let mut c = connect(&s, cfg);
    let queues = s.target.borrow().queue_count();
    assert_eq!(queues, 2, "admin and one I/O queue");
    let before = s.target.borrow().stats().keep_alives;
    let until = s.sim.now() + Duration::from_secs(10);
    drive(&mut c, until).unwrap();
    // One Keep Alive every KATO/2, and nothing else was sent.
    let sent = s.target.borrow().stats().keep_alives - before;
    assert!((19..=21).contains(&sent), "{sent} Keep Alives in 10 s with KATO 1 s");
    assert_eq!(s.target.borrow().queue_count(), queues, "the target kept the controller");
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(512).unwrap();
    let t = c.submit_read(&ns, 0, Buffer::host(mr)).unwrap();
    while c.in_flight() > 0 {
        let (cqs, next) = c.wait_set();
        c.transport_mut().wait(&cqs, next).unwrap();
        c.service().unwrap();
    }
    assert_eq!(c.take_finished(), vec![(t, Ok(()))]);
}

#[test]
fn a_target_that_stops_answering_fails_service_with_a_timeout() {
    let s = setup(21, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.keep_alive = Duration::from_secs(2);
    cfg.timeout = Duration::from_millis(500);
    let mut c = connect(&s, cfg);
    drive(&mut c, s.sim.now() + Duration::from_secs(3)).unwrap();
    s.target.borrow_mut().faults_mut().drop_responses = u32::MAX;
    let start = s.sim.now();
    let e = drive(&mut c, start + Duration::from_secs(60)).unwrap_err();
    assert_eq!(e, NvmeError::Timeout { command: "Keep Alive", qid: 0, after: Duration::from_millis(500) });
    // The next Keep Alive was due within KATO/2, its answer within the timeout.
    assert!(s.sim.now() - start <= Duration::from_millis(1500), "{:?}", s.sim.now() - start);
    // The failure sticks: service keeps saying so, and the controller knows why.
    assert_eq!(c.service().unwrap_err(), e);
    assert_eq!(c.failure(), Some(&e));
}

#[test]
fn reconnect_after_a_crash_and_restart_continues_io() {
    let s = setup(23, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.timeout = Duration::from_millis(100);
    let mut c = connect(&s, cfg);
    let first_id = c.cntlid();
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(8192).unwrap();
    c.transport_mut().mr_write(mr.id, 0, &pattern(8192, 3)).unwrap();
    c.write(&ns, 0, Buffer::slice(mr, 0, 4096)).unwrap();
    c.flush(&ns).unwrap();
    c.write(&ns, 1, Buffer::slice(mr, 4096, 4096)).unwrap();
    let t = c.submit_read(&ns, 0, Buffer::slice(mr, 0, 4096)).unwrap();
    let tnode = s.sim.node("target").unwrap();
    s.target.borrow_mut().crash(&mut s.sim.transport(tnode));
    // The crash fails what was in flight and the controller (typed errors).
    let e = drive(&mut c, s.sim.now() + Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, NvmeError::Disconnected { .. }), "{e:?}");
    let done = c.take_finished();
    assert!(matches!(done[..], [(tt, Err(NvmeError::Disconnected { .. }))] if tt == t), "{done:?}");
    // While the target is down a reconnect fails, cleanly, and may be retried.
    let e = c.reconnect().unwrap_err();
    assert!(matches!(e, NvmeError::Rejected { .. } | NvmeError::Unreachable { .. }), "{e:?}");
    let e = c.submit_read(&ns, 0, Buffer::slice(mr, 0, 4096)).unwrap_err();
    // The failed reconnect left no I/O queue to submit on.
    assert!(matches!(e, NvmeError::Unsupported(_)), "{e:?}");
    s.target.borrow_mut().restart(&mut s.sim.transport(s.sim.node("target").unwrap()));
    c.reconnect().unwrap();
    assert_ne!(c.cntlid(), first_id, "a new controller");
    // The flushed block survived, the unflushed one is lost, and I/O goes on.
    let back = c.alloc(8192).unwrap();
    c.read(&ns, 0, Buffer::host(back)).unwrap();
    let mut got = vec![0u8; 8192];
    c.transport().mr_read(back.id, 0, &mut got).unwrap();
    assert!(got[..4096] == pattern(8192, 3)[..4096]);
    assert!(got[4096..].iter().all(|&b| b == 0));
    c.write(&ns, 1, Buffer::slice(mr, 4096, 4096)).unwrap();
    c.close();
    s.sim.run_until(s.sim.now() + Duration::from_millis(10));
    let live = s.sim.live_resources();
    assert!(live.qps == 0, "{live:?}");
}

#[test]
fn reconnect_after_a_dropped_response_recovers_the_queue() {
    let s = setup(24, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.timeout = Duration::from_millis(50);
    let mut c = connect(&s, cfg);
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(4096).unwrap();
    s.target.borrow_mut().faults_mut().drop_responses = 1;
    assert!(matches!(c.read(&ns, 0, Buffer::host(mr)), Err(NvmeError::Timeout { .. })));
    assert!(c.failure().is_some());
    c.reconnect().unwrap();
    assert!(c.failure().is_none());
    c.read(&ns, 0, Buffer::host(mr)).unwrap();
    c.close();
}

/// Runs `n` 4 KiB reads one at a time against random faults of `seed`
/// (each a fresh controller when the last one failed), and gives each
/// read's outcome and the target's counters.
fn random_fault_run(seed: u64, n: usize) -> (Vec<&'static str>, rctb_models::nvme::TargetStats) {
    let s = setup(30, TargetConfig::new(NQN));
    let random = RandomFaults {
        seed,
        error_ppm: 100_000,
        drop_ppm: 100_000,
        delay_ppm: 200_000,
        delay: Duration::from_millis(50),
    };
    s.target.borrow_mut().set_random_faults(random).unwrap();
    let mut cfg = config(s.addr);
    cfg.timeout = Duration::from_millis(500);
    let mut outcomes = Vec::new();
    let mut c = connect(&s, cfg.clone());
    let mut ns = c.namespace(2).unwrap();
    let mut mr = c.alloc(4096).unwrap();
    for _ in 0..n {
        let before = s.sim.now();
        outcomes.push(match c.read(&ns, 0, Buffer::host(mr)) {
            Ok(()) if s.sim.now() - before >= Duration::from_millis(50) => "slow",
            Ok(()) => "ok",
            Err(NvmeError::Status { .. }) => "error",
            Err(NvmeError::Timeout { .. }) => {
                c.close();
                c = connect(&s, cfg.clone());
                ns = c.namespace(2).unwrap();
                mr = c.alloc(4096).unwrap();
                "lost"
            }
            Err(e) => panic!("seed {seed}: {e}"),
        });
    }
    let stats = s.target.borrow().stats();
    (outcomes, stats)
}

#[test]
fn random_faults_replay_from_their_seed_and_meet_only_io() {
    let (a, sa) = random_fault_run(5, 60);
    let (b, sb) = random_fault_run(5, 60);
    assert_eq!(a, b, "the same seed gives the same faults on the same commands");
    assert_eq!(sa, sb);
    for kind in ["ok", "slow", "error", "lost"] {
        assert!(a.contains(&kind), "60 reads at these rates meet every kind, got {a:?}");
    }
    assert_eq!(a.iter().filter(|&&k| k == "error").count() as u64, sa.random_errors);
    assert_eq!(a.iter().filter(|&&k| k == "lost").count() as u64, sa.random_drops);
    assert_eq!(sa.dropped_responses, sa.random_drops, "nothing but I/O lost a response");
    let (c, _) = random_fault_run(6, 60);
    assert_ne!(a, c, "another seed, other faults");
}

#[test]
fn a_random_fault_rate_above_a_million_is_refused_by_name() {
    let s = setup(31, TargetConfig::new(NQN));
    let e = s
        .target
        .borrow_mut()
        .set_random_faults(RandomFaults { drop_ppm: 1_000_001, ..Default::default() })
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("drop_ppm") && text.contains("1000000"), "{text}");
    assert_eq!(s.target.borrow().random_faults(), RandomFaults::default(), "a refused setting changes nothing");
}

#[test]
fn an_adaptive_initiator_still_times_out_a_dropped_response() {
    // Lazy deadlines (no clock read per command) still end a lost command.
    let s = setup(35, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.timeout = Duration::from_secs(2);
    let mut c = connect(&s, cfg);
    c.set_poll_mode(rctb_core::transport::PollMode::Adaptive { spin: 16 });
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(4096).unwrap();
    c.read(&ns, 0, Buffer::host(mr)).unwrap();
    s.target.borrow_mut().faults_mut().drop_responses = 1;
    let before = s.sim.now();
    let e = c.read(&ns, 0, Buffer::host(mr)).unwrap_err();
    assert!(matches!(e, NvmeError::Timeout { command: "Read", qid: 1, .. }), "{e:?}");
    let took = s.sim.now() - before;
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took <= Duration::from_secs(3), "{took:?}");
}
