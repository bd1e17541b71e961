//! The polled NVMe-oF bring-up (`Controller::start` / `service` /
//! `state`) stepped on the simulator, with the target model driven from
//! the same loop as the initiator (not as an actor): each state in order,
//! the failures of each step, and two controllers brought up at once.

use std::net::SocketAddrV4;

use rctb_core::Transport;
use rctb_core::nvmeof::protocol::*;
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig, ControllerState, Discovery, NvmeError};
use rctb_core::time::{Duration, Instant};
use rctb_models::nvme::{NvmeTarget, TargetConfig};
use rctb_sim::{NodeConfig, Sim, SimTransport};

const NQN: &str = "nqn.2026-01.io.rctb:bring-up";

/// One simulator, `hosts` initiator nodes (10.0.0.1..) and the target at
/// 10.0.0.9, which the test loop runs itself.
struct Rig {
    seed: u64,
    test: &'static str,
    sim: Sim,
    hosts: Vec<SimTransport>,
    target: NvmeTarget,
    tt: SimTransport,
    target_wake: Option<Instant>,
    addr: SocketAddrV4,
}

fn rig(test: &'static str, seed: u64, hosts: usize, cfg: TargetConfig) -> Rig {
    let sim = Sim::new(seed);
    let hosts = (0..hosts)
        .map(|i| {
            let n = sim.add_node(NodeConfig::new(format!("host{i}"), format!("10.0.0.{}", i + 1).parse().unwrap()));
            sim.transport(n.unwrap())
        })
        .collect();
    let tn = sim.add_node(NodeConfig::new("target", "10.0.0.9".parse().unwrap())).unwrap();
    let mut tt = sim.transport(tn);
    let mut target = NvmeTarget::new(cfg, "10.0.0.9".parse().unwrap()).unwrap();
    let target_wake = target.run(&mut tt); // listens
    let addr = SocketAddrV4::new("10.0.0.9".parse().unwrap(), NVME_RDMA_PORT);
    Rig { seed, test, sim, hosts, target, tt, target_wake, addr }
}

impl Rig {
    fn config(&self) -> ControllerConfig {
        let mut c = ControllerConfig::new(self.addr, Nqn::new(NQN).unwrap(), [0x42; 16]);
        c.timeout = Duration::from_secs(1);
        c
    }

    fn start(&self, host: usize, cfg: ControllerConfig) -> Controller<SimTransport> {
        Controller::start(self.hosts[host].clone(), cfg).map_err(|e| e.into_error()).expect("start (local verbs only)")
    }

    /// Where a failure can be replayed from.
    fn replay(&self) -> String {
        format!("seed {}; replay: cargo test -p rctb-sim --test nvme_bringup {}", self.seed, self.test)
    }

    /// After every controller's `service`: runs the target, then moves the
    /// simulator to its next instant, or to the earliest time a controller
    /// or the target asked for when nothing happens before it.
    fn advance(&mut self, untils: impl IntoIterator<Item = Instant>) {
        self.target_wake = self.target.run(&mut self.tt);
        let next = untils.into_iter().chain(self.target_wake).min().unwrap_or(Instant::FAR_FUTURE);
        match self.sim.next_event_at() {
            Some(at) if at <= next => {
                self.sim.step();
            }
            _ => {
                assert!(next != Instant::FAR_FUTURE, "nothing left to happen: {}", self.replay());
                self.sim.run_until(next);
            }
        }
    }

    /// Runs the target and the simulator for `d` (disconnects settle).
    fn settle(&mut self, d: Duration) {
        let end = self.sim.now() + d;
        while self.sim.now() < end {
            self.advance([end]);
        }
    }

    /// Drives one controller until `done` says so or `service` fails;
    /// returns the states seen (each once, in order) and the end.
    fn drive(
        &mut self,
        c: &mut Controller<SimTransport>,
        mut done: impl FnMut(&mut Controller<SimTransport>, &mut NvmeTarget) -> bool,
    ) -> (Vec<ControllerState>, Result<(), NvmeError>) {
        let mut seen = vec![c.state()];
        for _ in 0..200_000 {
            let r = c.service();
            if seen.last() != Some(&c.state()) {
                seen.push(c.state());
            }
            if r.is_err() || done(c, &mut self.target) {
                return (seen, r);
            }
            let (_, until) = c.wait_set();
            self.advance([until]);
        }
        panic!("no end after 200000 turns (states {seen:?}): {}", self.replay());
    }
}

fn ready(c: &mut Controller<SimTransport>, _: &mut NvmeTarget) -> bool {
    c.state() == ControllerState::Ready
}

#[test]
fn bring_up_reaches_every_state_in_order() {
    let mut r = rig("bring_up_reaches_every_state_in_order", 31, 1, TargetConfig::new(NQN));
    let mut cfg = r.config();
    cfg.io_queues = 2;
    let mut c = r.start(0, cfg);
    let (seen, end) = r.drive(&mut c, ready);
    end.unwrap_or_else(|e| panic!("{e}: {}", r.replay()));
    use ControllerState::*;
    let want = [
        AdminConnecting,
        AdminFabricsConnect,
        ReadCap,
        Enable,
        WaitReady,
        Identify,
        SetQueues,
        IoConnecting { qid: 1 },
        IoFabricsConnect { qid: 1 },
        IoConnecting { qid: 2 },
        IoFabricsConnect { qid: 2 },
        Ready,
    ];
    assert_eq!(seen, want, "{}", r.replay());
    assert_eq!(c.io_queues().len(), 2);
    assert_eq!(r.target.queue_count(), 3, "admin and two I/O queues");
    assert_eq!(c.info().subnqn, NQN);
    // Ready: a ticket goes through from the same loop.
    let ns = rctb_core::nvmeof::Namespace {
        info: NamespaceInfo {
            nsid: 1,
            nsze: 8192,
            ncap: 8192,
            nuse: 8192,
            nsfeat: 0,
            flbas: 0,
            formats: vec![LbaFormat { ms: 0, lbads: 9, rp: 0 }],
        },
    };
    let mr = c.alloc(512).unwrap();
    let t = c.submit_read(&ns, 0, Buffer::host(mr)).unwrap();
    let (_, end) = r.drive(&mut c, |c, _| c.in_flight() == 0);
    end.unwrap();
    assert_eq!(c.take_finished(), vec![(t, Ok(()))]);
    c.close();
    assert_eq!(c.state(), Closed);
}

#[test]
fn a_polled_close_sends_cc_shn_and_releases_everything() {
    let mut r = rig("a_polled_close_sends_cc_shn_and_releases_everything", 37, 1, TargetConfig::new(NQN));
    let mut c = r.start(0, r.config());
    let (_, end) = r.drive(&mut c, ready);
    end.unwrap_or_else(|e| panic!("{e}: {}", r.replay()));
    assert_eq!(r.target.queue_count(), 2, "admin and one I/O queue: {}", r.replay());
    let commands = r.target.stats().commands;
    let t0 = r.sim.now();
    c.start_close();
    assert_eq!(c.state(), ControllerState::ShuttingDown, "CC.SHN outstanding: {}", r.replay());
    c.start_close(); // idempotent: no second CC.SHN
    let (seen, end) = r.drive(&mut c, |c, _| c.state() == ControllerState::Closed);
    assert_eq!(end, Ok(()), "{}", r.replay());
    assert_eq!(seen, [ControllerState::ShuttingDown, ControllerState::Closed], "{}", r.replay());
    // The target answered the Property Set (one command: the shutdown),
    // well before the 1 s command timeout would have ended the wait.
    assert_eq!(r.target.stats().commands, commands + 1, "{}", r.replay());
    assert!(r.sim.now() - t0 < Duration::from_millis(100), "closed after {:?}: {}", r.sim.now() - t0, r.replay());
    // Closed is final: service says Disconnected, close does nothing more.
    assert!(matches!(c.service(), Err(NvmeError::Disconnected { .. })), "{}", r.replay());
    c.close();
    r.settle(Duration::from_millis(50));
    assert_eq!(r.target.queue_count(), 0, "the target saw every queue go: {}", r.replay());
}

#[test]
fn commands_before_ready_are_refused_and_nothing_blocks() {
    let mut r = rig("commands_before_ready_are_refused_and_nothing_blocks", 32, 1, TargetConfig::new(NQN));
    let mut c = r.start(0, r.config());
    let before = r.sim.now();
    // Without the target running nothing can answer: service returns at once.
    for _ in 0..3 {
        c.service().unwrap();
    }
    assert_eq!(c.state(), ControllerState::AdminConnecting);
    assert_eq!(r.sim.now(), before, "service never waits");
    let e = c.active_namespaces().unwrap_err();
    assert!(matches!(e, NvmeError::Invalid(_)), "{e:?}");
    assert!(e.to_string().contains("service() until state() is Ready"), "{e}");
    let (_, end) = r.drive(&mut c, ready);
    end.unwrap();
}

#[test]
fn a_cm_failure_fails_the_bring_up_and_releases_the_queue() {
    let mut r = rig("a_cm_failure_fails_the_bring_up_and_releases_the_queue", 33, 1, TargetConfig::new(NQN));
    let mut cfg = r.config();
    cfg.addr = SocketAddrV4::new(*r.addr.ip(), 4421); // nothing listens there
    let mut c = r.start(0, cfg);
    let (seen, end) = r.drive(&mut c, ready);
    assert_eq!(seen, [ControllerState::AdminConnecting, ControllerState::Failed], "{}", r.replay());
    let e = end.unwrap_err();
    assert_eq!(e.to_string(), "cannot reach an NVMe/RDMA target at 10.0.0.9:4421: nothing listens on that port");
    // The failure sticks until reconnect or close.
    assert_eq!(c.service().unwrap_err(), e);
    assert_eq!(c.failure(), Some(&e));
    c.close();
    r.settle(Duration::from_millis(10));
    assert_eq!(r.sim.live_resources().qps, 0, "{}", r.replay());
}

#[test]
fn a_connect_refused_with_a_status_is_typed() {
    let mut r = rig("a_connect_refused_with_a_status_is_typed", 34, 1, TargetConfig::new(NQN));
    let mut cfg = r.config();
    cfg.subnqn = Nqn::new("nqn.2026-01.io.rctb:nobody").unwrap();
    let mut c = r.start(0, cfg);
    let (seen, end) = r.drive(&mut c, ready);
    use ControllerState::*;
    assert_eq!(seen, [AdminConnecting, AdminFabricsConnect, Failed], "{}", r.replay());
    let e = end.unwrap_err();
    assert!(
        matches!(e, NvmeError::ConnectInvalid { parameter, .. } if parameter.name() == "subsystem NQN"),
        "{e:?}: {}",
        r.replay()
    );
    assert_eq!(e.status().map(|s| (s.sct(), s.sc())), Some((SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS)));
    // The refused admin queue is gone already (no shutdown was sent on
    // it); close releases the rest.
    r.settle(Duration::from_millis(10));
    assert_eq!(r.target.queue_count(), 0, "{}", r.replay());
    c.close();
    r.settle(Duration::from_millis(10));
    assert_eq!(r.sim.live_resources().qps, 0, "{}", r.replay());
}

#[test]
fn csts_never_ready_is_a_typed_timeout_within_cap_to() {
    let mut tc = TargetConfig::new(NQN);
    tc.cap_to = 2; // (2 + 1) x 500 ms
    tc.ready_delay = Duration::from_secs(3600);
    let mut r = rig("csts_never_ready_is_a_typed_timeout_within_cap_to", 35, 1, tc);
    let mut c = r.start(0, r.config());
    let mut enabled_at = None;
    let (seen, end) = r.drive(&mut c, |c, _| {
        if c.state() == ControllerState::WaitReady && enabled_at.is_none() {
            enabled_at = Some(c.transport().now());
        }
        false
    });
    use ControllerState::*;
    assert_eq!(seen, [AdminConnecting, AdminFabricsConnect, ReadCap, Enable, WaitReady, Failed], "{}", r.replay());
    let limit = Duration::from_millis(1500);
    let e = end.unwrap_err();
    let NvmeError::NotReady { waited } = e else { panic!("{e:?}: {}", r.replay()) };
    // The limit is CAP.TO's; CSTS is read every 10 ms, so the last read
    // lands at most one interval (and a round trip) past it.
    assert!(waited >= limit && waited < limit + Duration::from_millis(11), "{waited:?}: {}", r.replay());
    let elapsed = c.transport().now() - enabled_at.unwrap();
    assert!(elapsed >= limit && elapsed < limit + Duration::from_millis(11), "{elapsed:?}: {}", r.replay());
    c.close();
}

#[test]
fn a_target_crash_mid_bring_up_fails_it_and_reconnect_recovers() {
    let mut r = rig("a_target_crash_mid_bring_up_fails_it_and_reconnect_recovers", 36, 1, TargetConfig::new(NQN));
    let mut c = r.start(0, r.config());
    let mut tt = r.tt.clone();
    // Crash while Identify is outstanding.
    let (seen, end) = r.drive(&mut c, |c, target| {
        if c.state() == ControllerState::Identify && target.is_up() {
            target.crash(&mut tt);
        }
        false
    });
    use ControllerState::*;
    assert_eq!(seen, [AdminConnecting, AdminFabricsConnect, ReadCap, Enable, WaitReady, Identify, Failed]);
    let e = end.unwrap_err();
    assert_eq!(e, NvmeError::Disconnected { qid: 0 }, "{}", r.replay());
    // While the target is down a new bring-up fails at the CM step.
    c.start_reconnect().unwrap();
    let (seen, end) = r.drive(&mut c, ready);
    assert_eq!(seen, [AdminConnecting, Failed], "{}", r.replay());
    assert!(matches!(end, Err(NvmeError::Rejected { .. } | NvmeError::Unreachable { .. })), "{end:?}");
    // Back up: the same controller object comes up again, a new controller id.
    r.target.restart(&mut tt);
    c.start_reconnect().unwrap();
    let (seen, end) = r.drive(&mut c, ready);
    end.unwrap_or_else(|e| panic!("{e}: {}", r.replay()));
    assert_eq!(seen.first(), Some(&AdminConnecting));
    assert_eq!(seen.last(), Some(&Ready));
    assert_eq!(c.failure(), None);
    c.close();
    r.settle(Duration::from_millis(10));
    r.target.shutdown(&mut tt);
    r.settle(Duration::from_millis(10));
    assert_eq!(r.sim.live_resources().qps, 0, "{}", r.replay());
}

#[test]
fn two_controllers_come_up_together_from_one_loop() {
    let mut r = rig("two_controllers_come_up_together_from_one_loop", 37, 2, TargetConfig::new(NQN));
    let mut a = r.start(0, r.config());
    let mut cfg = r.config();
    cfg.host_id = [0x43; 16];
    cfg.hostnqn = Nqn::from_host_id(&cfg.host_id);
    let mut b = r.start(1, cfg);
    let (mut seen_a, mut seen_b) = (vec![a.state()], vec![b.state()]);
    let mut both_busy = false;
    for _ in 0..200_000 {
        for (c, s) in [(&mut a, &mut seen_a), (&mut b, &mut seen_b)] {
            c.service().unwrap_or_else(|e| panic!("{e}: {}", r.replay()));
            if s.last() != Some(&c.state()) {
                s.push(c.state());
            }
        }
        let up = |c: &Controller<SimTransport>| c.state() == ControllerState::Ready;
        if up(&a) && up(&b) {
            break;
        }
        // Interleaved, not one after the other.
        both_busy |= a.state() != ControllerState::AdminConnecting
            && b.state() != ControllerState::AdminConnecting
            && !up(&a)
            && !up(&b);
        let untils = [a.wait_set().1, b.wait_set().1];
        r.advance(untils);
    }
    assert!(both_busy, "the two bring-ups overlapped: {}", r.replay());
    assert_eq!(seen_a, seen_b, "the same states, each in order: {}", r.replay());
    assert_eq!(seen_a.last(), Some(&ControllerState::Ready));
    assert_ne!(a.cntlid(), b.cntlid(), "two controllers");
    assert_eq!(r.target.queue_count(), 4);
    a.close();
    b.close();
    assert_eq!(r.target.stats().connections, 4, "nothing connected twice");
}

#[test]
fn polled_discovery_reads_the_log() {
    let mut r = rig("polled_discovery_reads_the_log", 38, 1, TargetConfig::new(NQN));
    let mut t = r.hosts[0].clone();
    let mut d = Discovery::start(&mut t, r.addr, [0x44; 16], Duration::from_secs(1)).unwrap();
    let mut seen = vec![d.state()];
    let log = loop {
        let got = d.service(&mut t).unwrap_or_else(|e| panic!("{e}: {}", r.replay()));
        if seen.last() != Some(&d.state()) {
            seen.push(d.state());
        }
        if let Some(log) = got {
            break log;
        }
        r.advance([d.wait_set().1]);
    };
    use ControllerState::*;
    assert_eq!(seen, [AdminConnecting, AdminFabricsConnect, ReadCap, Enable, WaitReady, ReadLog]);
    assert!(log.entries.iter().any(|e| e.subnqn == NQN), "{log:?}");
    d.close(&mut t);
    r.settle(Duration::from_millis(10));
    assert_eq!(r.target.queue_count(), 0, "{}", r.replay());
    assert_eq!(r.sim.live_resources().qps, 0, "{}", r.replay());
}
