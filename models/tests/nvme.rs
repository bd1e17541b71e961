//! The NVMe-oF initiator (rctb_core::nvmeof) against the simulator's target
//! model (rctb_models::nvme), end to end over the simulated RC fabric.

use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;

use rctb_core::Transport;
use rctb_core::nvmeof::protocol::*;
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig, NvmeError, discover};
use rctb_core::time::Duration;
use rctb_core::transport::WcStatus;
use rctb_models::nvme::{DurableStore, NvmeTarget, RandomFaults, TargetConfig};
use rctb_sim::{NodeConfig, Sim, SimTransport};

const NQN: &str = "nqn.2026-01.io.rctb:sim-target";

struct Setup {
    sim: Sim,
    host: SimTransport,
    target: Rc<RefCell<NvmeTarget>>,
    addr: SocketAddrV4,
}

fn setup(seed: u64, cfg: TargetConfig) -> Setup {
    let sim = Sim::new(seed);
    let h = sim.add_node(NodeConfig::new("host", "10.0.0.1".parse().unwrap())).unwrap();
    let tn = sim.add_node(NodeConfig::new("target", "10.0.0.2".parse().unwrap())).unwrap();
    let target = Rc::new(RefCell::new(NvmeTarget::new(cfg, "10.0.0.2".parse().unwrap()).unwrap()));
    let actor = target.clone();
    sim.add_actor(tn, Box::new(move |t: &mut SimTransport| actor.borrow_mut().run(t)));
    let addr = SocketAddrV4::new("10.0.0.2".parse().unwrap(), NVME_RDMA_PORT);
    Setup { host: sim.transport(h), sim, target, addr }
}

fn config(addr: SocketAddrV4) -> ControllerConfig {
    ControllerConfig::new(addr, Nqn::new(NQN).unwrap(), [0x11; 16])
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8).collect()
}

#[test]
fn connect_identify_write_read_flush() {
    let s = setup(1, TargetConfig::new(NQN));
    let mut c = Controller::connect(s.host.clone(), config(s.addr)).map_err(|e| e.into_error()).expect("connect");
    assert_eq!(c.info().subnqn, NQN);
    assert_eq!(c.max_transfer(), 128 * 1024);
    assert_eq!(c.active_namespaces().unwrap(), vec![1, 2]);
    for nsid in [1, 2] {
        let ns = c.namespace(nsid).unwrap();
        let len = 1 << 20; // 1 MiB: 8 commands of 128 KiB
        let mr = c.alloc(len).unwrap();
        let data = pattern(len as usize, nsid as u8);
        c.transport_mut().mr_write(mr.id, 0, &data).unwrap();
        c.write(&ns, 3, Buffer::host(mr)).unwrap();
        c.flush(&ns).unwrap();
        let back = c.alloc(len).unwrap();
        c.read(&ns, 3, Buffer::host(back)).unwrap();
        let mut got = vec![0u8; len as usize];
        c.transport().mr_read(back.id, 0, &mut got).unwrap();
        assert!(got == data, "nsid {nsid}: read-back differs");
        let lba = ns.lba_size() as usize;
        let stored = s.target.borrow().namespace_data(NQN, nsid).unwrap()[3 * lba..3 * lba + len as usize].to_vec();
        assert!(stored == data, "nsid {nsid}: the target holds other bytes");
        c.free(mr).unwrap();
        c.free(back).unwrap();
    }
    let stats = s.target.borrow().stats();
    assert!(stats.in_capsule_writes == 0, "1 MiB writes go by RDMA READ");
    let t = c.into_transport();
    drop(t);
    s.sim.run_until(s.sim.now() + Duration::from_millis(10));
    assert_eq!(s.sim.live_resources().qps, 0, "{:?}", s.sim.live_resources());
}

fn connect(s: &Setup, cfg: ControllerConfig) -> Controller<SimTransport> {
    Controller::connect(s.host.clone(), cfg).map_err(|e| e.into_error()).expect("connect")
}

#[test]
fn discovery_lists_every_subsystem() {
    let s = setup(2, TargetConfig::new(NQN));
    let mut t = s.host.clone();
    let log = discover(&mut t, s.addr, [0x22; 16], Duration::from_secs(5)).unwrap();
    let nqns: Vec<&str> = log.entries.iter().map(|e| e.subnqn.as_str()).collect();
    assert_eq!(nqns, vec![DISCOVERY_NQN, NQN]);
    assert_eq!(log.entries[1].traddr, "10.0.0.2");
    assert_eq!(log.entries[1].trsvcid, "4420");
    assert_eq!(log.entries[1].subtype, SUBTYPE_NVME);
    s.sim.run_until(s.sim.now() + Duration::from_millis(10));
    assert_eq!(s.sim.live_resources().qps, 0, "discovery leaves nothing behind");
}

#[test]
fn wrong_nqn_and_wrong_port_are_clear_errors() {
    let s = setup(3, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.subnqn = Nqn::new("nqn.2026-01.io.rctb:nobody").unwrap();
    let e = Controller::connect(s.host.clone(), cfg).unwrap_err().into_error();
    assert!(matches!(e, NvmeError::ConnectInvalid { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "connect refused: invalid subsystem NQN (NVMe status: connect: invalid parameters (SCT 0x1, SC 0x82, DNR))"
    );
    let mut cfg = config(SocketAddrV4::new(*s.addr.ip(), 4421));
    cfg.timeout = Duration::from_secs(1);
    let e = Controller::connect(s.host.clone(), cfg).unwrap_err().into_error();
    assert_eq!(e.to_string(), "cannot reach an NVMe/RDMA target at 10.0.0.2:4421: nothing listens on that port");
    s.sim.run_until(s.sim.now() + Duration::from_millis(10));
    assert_eq!(s.sim.live_resources().qps, 0, "failed connects leave nothing behind");
}

#[test]
fn nvme_statuses_carry_sc_sct_dnr() {
    let s = setup(4, TargetConfig::new(NQN));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(4096).unwrap();
    // Past the end: refused locally before anything is sent.
    assert!(matches!(c.read(&ns, ns.blocks() - 1, Buffer::host(mr)), Err(NvmeError::Invalid(_))));
    // A namespace the target lacks.
    let e = c.namespace(9).unwrap_err();
    let st = e.status().expect("an NVMe status").status;
    assert_eq!((st.sct, st.sc, st.dnr), (SCT_GENERIC, SC_INVALID_NAMESPACE, true));
    // The target checks the range too: lie about the namespace's size.
    let mut big = ns.clone();
    big.info.nsze = u64::MAX;
    let e = c.read(&big, ns.blocks(), Buffer::slice(mr, 0, 512)).unwrap_err();
    let st = e.status().expect("an NVMe status").status;
    assert_eq!((st.sct, st.sc, st.dnr), (SCT_GENERIC, SC_LBA_OUT_OF_RANGE, true));
    assert_eq!(e.to_string(), "Read failed: NVMe status: LBA out of range (SCT 0x0, SC 0x80, DNR)");
    // The controller still works after errors.
    c.read(&ns, 0, Buffer::host(mr)).unwrap();
    c.close();
}

#[test]
fn small_writes_travel_in_capsule() {
    let s = setup(5, TargetConfig::new(NQN));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(3 * 4096).unwrap();
    let data = pattern(3 * 4096, 9);
    c.transport_mut().mr_write(mr.id, 0, &data).unwrap();
    for i in 0..3u64 {
        c.write(&ns, 10 + i, Buffer::slice(mr, i * 4096, 4096)).unwrap();
    }
    assert_eq!(s.target.borrow().stats().in_capsule_writes, 3);
    let back = c.alloc(3 * 4096).unwrap();
    c.read(&ns, 10, Buffer::host(back)).unwrap();
    let mut got = vec![0u8; data.len()];
    c.transport().mr_read(back.id, 0, &mut got).unwrap();
    assert!(got == data);
}

#[test]
fn several_io_queues_share_the_work() {
    let s = setup(6, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.io_queues = 3;
    cfg.queue_depth = 4;
    let mut c = connect(&s, cfg);
    assert_eq!(c.io_queues().len(), 3);
    let ns = c.namespace(1).unwrap();
    let len = 4 << 20;
    let mr = c.alloc(len).unwrap();
    let data = pattern(len as usize, 3);
    c.transport_mut().mr_write(mr.id, 0, &data).unwrap();
    c.write(&ns, 0, Buffer::host(mr)).unwrap();
    let back = c.alloc(len).unwrap();
    c.read(&ns, 0, Buffer::host(back)).unwrap();
    let mut got = vec![0u8; len as usize];
    c.transport().mr_read(back.id, 0, &mut got).unwrap();
    assert!(got == data);
    // 32 writes and 32 reads of 128 KiB, spread over 3 queues of 3 slots.
    assert_eq!(s.target.borrow().stats().writes, 32);
}

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
fn a_target_crash_fails_io_and_loses_unflushed_writes() {
    let s = setup(9, TargetConfig::new(NQN));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(8192).unwrap();
    c.transport_mut().mr_write(mr.id, 0, &pattern(8192, 1)).unwrap();
    c.write(&ns, 0, Buffer::slice(mr, 0, 4096)).unwrap();
    c.flush(&ns).unwrap();
    c.write(&ns, 1, Buffer::slice(mr, 4096, 4096)).unwrap();
    {
        let mut t = s.sim.transport(s.sim.node("target").unwrap());
        s.target.borrow_mut().crash(&mut t);
    }
    let e = c.read(&ns, 0, Buffer::host(mr)).unwrap_err();
    assert!(matches!(e, NvmeError::Disconnected { .. } | NvmeError::Completion { .. }), "{e:?}");
    c.close();
    s.target.borrow_mut().restart(&mut s.sim.transport(s.sim.node("target").unwrap()));
    let data = s.target.borrow().namespace_data(NQN, 2).unwrap()[..8192].to_vec();
    assert!(data[..4096] == pattern(8192, 1)[..4096], "flushed block survives");
    assert!(data[4096..].iter().all(|&b| b == 0), "unflushed block is lost");
    // After the restart, a new controller works.
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(4096).unwrap();
    c.read(&ns, 0, Buffer::host(mr)).unwrap_or_else(|e| panic!("{e}"));
    let mut got = vec![0u8; 4096];
    c.transport().mr_read(mr.id, 0, &mut got).unwrap();
    assert!(got[..] == pattern(8192, 1)[..4096]);
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

/// The GPU memory model: the target's RDMA writes are invisible until a flush.
#[derive(Debug)]
struct SimGpuFlush {
    t: SimTransport,
    enabled: bool,
}

impl rctb_core::nvmeof::GpuFlush for SimGpuFlush {
    fn flush(&mut self, mr: rctb_core::transport::MrId) -> Result<(), NvmeError> {
        if self.enabled {
            self.t.gpu_flush(mr)?;
        }
        Ok(())
    }
}

#[test]
fn gpu_reads_are_flushed_before_the_data_is_handed_over() {
    use rctb_core::nvmeof::MemoryKind;
    use rctb_core::transport::Access;
    let s = setup(12, TargetConfig::new(NQN));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let host_mr = c.alloc(8192).unwrap();
    let data = pattern(8192, 77);
    c.transport_mut().mr_write(host_mr.id, 0, &data).unwrap();
    c.write(&ns, 5, Buffer::host(host_mr)).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let pd = c.pd();
    let gpu = c.transport_mut().reg_gpu_mr(pd, 8192, access).unwrap();
    let buf = Buffer { kind: MemoryKind::Gpu, ..Buffer::host(gpu) };
    // Without a flush hook, a GPU read is refused rather than handing over stale data.
    assert!(matches!(c.read(&ns, 5, buf), Err(NvmeError::Unsupported(_))));
    // A hook that does nothing shows why the flush matters: the data is not there.
    c.set_gpu_flush(Box::new(SimGpuFlush { t: s.host.clone(), enabled: false }));
    c.read(&ns, 5, buf).unwrap();
    let mut got = vec![0u8; 8192];
    c.transport().mr_read(gpu.id, 0, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0), "RDMA writes to GPU memory are invisible before a flush");
    // With the flush, the read hands over the data.
    c.set_gpu_flush(Box::new(SimGpuFlush { t: s.host.clone(), enabled: true }));
    c.read(&ns, 5, buf).unwrap();
    c.transport().mr_read(gpu.id, 0, &mut got).unwrap();
    assert!(got == data);
}

#[test]
fn a_response_for_an_unknown_cid_is_a_protocol_error() {
    let s = setup(13, TargetConfig::new(NQN));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(4096).unwrap();
    s.target.borrow_mut().faults_mut().wrong_cid_responses = 1;
    let e = c.read(&ns, 0, Buffer::host(mr)).unwrap_err();
    assert!(matches!(e, NvmeError::UnknownCid { qid: 1, cid } if cid & 0x8000 != 0), "{e:?}");
    assert!(e.to_string().starts_with("protocol error from the target: response for unknown command id"), "{e}");
}

#[test]
fn a_full_queue_is_its_own_error() {
    use rctb_core::nvmeof::{Queue, QueueConfig};
    let s = setup(14, TargetConfig::new(NQN));
    let mut t = s.host.clone();
    let pd = t.alloc_pd().unwrap();
    let cfg = QueueConfig::new(s.addr, 4, Duration::from_secs(1));
    let mut q = Queue::connect(&mut t, pd, &cfg).unwrap();
    // Nothing is sent until Connect; Property Gets before it still hold slots.
    let cmd = NvmeCommand::PropertyGet { size: PropSize::Eight, offset: REG_CAP };
    for _ in 0..3 {
        q.submit(&mut t, &cmd, None).unwrap();
    }
    let e = q.submit(&mut t, &cmd, None).unwrap_err();
    assert_eq!(e, NvmeError::QueueFull { qid: 0, depth: 4, outstanding: 3 });
    // Each finishes (with the target's "command sequence error": no Connect yet).
    while q.outstanding() > 0 {
        q.wait(&mut t, rctb_core::time::Instant::FAR_FUTURE).unwrap();
    }
    let done = q.take_all();
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|(_, r)| r.as_ref().unwrap().status().sc == 0x0C));
    q.close(&mut t);
}

#[test]
fn bring_up_errors_are_clear() {
    // CSTS.RDY later than CAP.TO allows: NotReady, after polling 10 ms apart.
    let mut cfg = TargetConfig::new(NQN);
    cfg.cap_to = 1; // 1 s
    cfg.ready_delay = Duration::from_secs(3);
    let s = setup(15, cfg);
    let start = s.sim.now();
    let e = Controller::connect(s.host.clone(), config(s.addr)).unwrap_err().into_error();
    assert!(matches!(e, NvmeError::NotReady { waited } if waited >= Duration::from_secs(1)), "{e:?}");
    assert!(s.sim.now() - start < Duration::from_secs(2), "bounded by CAP.TO, not the target's delay");
    // A target that requires in-band authentication.
    let mut cfg = TargetConfig::new(NQN);
    cfg.require_auth = true;
    let s = setup(16, cfg);
    let e = Controller::connect(s.host.clone(), config(s.addr)).unwrap_err().into_error();
    assert_eq!(e, NvmeError::AuthRequired);
    assert!(e.to_string().contains("requires authentication"));
    s.sim.run_until(s.sim.now() + Duration::from_millis(10));
    assert_eq!(s.sim.live_resources().qps, 0, "a refused bring-up leaves nothing behind");
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
fn tickets_keep_many_commands_in_flight() {
    let s = setup(22, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.io_queues = 2;
    let mut c = connect(&s, cfg);
    let ns = c.namespace(1).unwrap();
    let n = 64u64;
    let mr = c.alloc(n * 1024).unwrap();
    let data = pattern((n * 1024) as usize, 9);
    c.transport_mut().mr_write(mr.id, 0, &data).unwrap();
    let mut want = Vec::new();
    for i in 0..n {
        want.push(c.submit_write(&ns, 2 * i, Buffer::slice(mr, i * 1024, 1024)).unwrap());
    }
    assert_eq!(c.in_flight(), 64);
    let mut done = Vec::new();
    while c.in_flight() > 0 {
        let (cqs, next) = c.wait_set();
        c.transport_mut().wait(&cqs, next).unwrap();
        c.service().unwrap();
        done.extend(c.take_finished());
    }
    let mut got: Vec<_> = done.iter().map(|(t, _)| *t).collect();
    got.sort();
    assert_eq!(got, want);
    assert!(done.iter().all(|(_, r)| r.is_ok()), "{done:?}");
    let stored = s.target.borrow().namespace_data(NQN, 1).unwrap()[..(n * 1024) as usize].to_vec();
    assert!(stored == data);
    // Larger than one command: refused, naming the rule.
    let big = c.alloc(c.max_transfer() + 512).unwrap();
    let e = c.submit_read(&ns, 0, Buffer::host(big)).unwrap_err();
    assert!(matches!(e, NvmeError::Invalid(ref v) if v.to_string().contains("max_transfer")), "{e}");
    c.close();
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

/// One store write: (nsid, byte offset, bytes).
type Stored = (u32, u64, Vec<u8>);

/// A store that keeps what it is handed: (nsid, byte offset, bytes) per
/// write, and one `sync` line per namespace synced; or fails every write.
#[derive(Clone, Default)]
struct Recorder {
    log: Rc<RefCell<Vec<Stored>>>,
    syncs: Rc<RefCell<Vec<u32>>>,
    fail: bool,
}

impl DurableStore for Recorder {
    fn write(&mut self, nqn: &str, nsid: u32, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        assert_eq!(nqn, NQN);
        if self.fail {
            return Err(std::io::Error::other("disk on fire"));
        }
        self.log.borrow_mut().push((nsid, at, bytes.to_vec()));
        Ok(())
    }
    fn sync(&mut self, _: &str, nsid: u32) -> std::io::Result<()> {
        self.syncs.borrow_mut().push(nsid);
        Ok(())
    }
}

impl Recorder {
    /// (nsid, offset, length) of what was stored since the last call.
    fn take(&self) -> Vec<(u32, u64, usize)> {
        self.log.borrow_mut().drain(..).map(|(n, at, b)| (n, at, b.len())).collect()
    }
}

#[test]
fn a_flush_hands_the_store_what_it_made_durable_and_a_crash_hands_it_nothing() {
    let s = setup(21, TargetConfig::new(NQN));
    let store = Recorder::default();
    s.target.borrow_mut().set_store(Some(Box::new(store.clone())));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(2).unwrap();
    let mr = c.alloc(4 * 4096).unwrap();
    c.transport_mut().mr_write(mr.id, 0, &pattern(4 * 4096, 5)).unwrap();
    // Blocks 3..5 and 7: two runs once flushed, nothing before.
    c.write(&ns, 3, Buffer::slice(mr, 0, 2 * 4096)).unwrap();
    c.write(&ns, 7, Buffer::slice(mr, 2 * 4096, 4096)).unwrap();
    assert!(store.log.borrow().is_empty(), "nothing is stored before a Flush");
    c.flush(&ns).unwrap();
    let log = store.log.borrow().clone();
    assert_eq!(
        log.iter().map(|(n, at, b)| (*n, *at, b.len())).collect::<Vec<_>>(),
        [(2, 3 * 4096, 8192), (2, 7 * 4096, 4096)]
    );
    assert!(log[0].2 == pattern(4 * 4096, 5)[..8192], "the run carries the written bytes");
    assert_eq!(*store.syncs.borrow(), [2], "synced once, before the Flush was answered");
    store.take();
    c.flush(&ns).unwrap();
    assert_eq!(store.take(), [], "a second Flush has nothing new");
    // Written, not flushed, then a crash: lost, so never stored.
    c.write(&ns, 9, Buffer::slice(mr, 0, 4096)).unwrap();
    s.target.borrow_mut().crash(&mut s.sim.transport(s.sim.node("target").unwrap()));
    assert_eq!(store.take(), []);
    c.close();
    // After the restart an orderly shutdown writes the cache back.
    s.target.borrow_mut().restart(&mut s.sim.transport(s.sim.node("target").unwrap()));
    let mut c = connect(&s, config(s.addr));
    let ns1 = c.namespace(1).unwrap();
    let mr = c.alloc(1024).unwrap();
    c.write(&ns1, 10, Buffer::host(mr)).unwrap();
    c.close();
    s.target.borrow_mut().shutdown(&mut s.sim.transport(s.sim.node("target").unwrap()));
    assert_eq!(store.take(), [(1, 10 * 512, 1024)]);
}

#[test]
fn a_failing_store_fails_the_flush_and_keeps_the_blocks_unflushed() {
    let s = setup(22, TargetConfig::new(NQN));
    s.target.borrow_mut().set_store(Some(Box::new(Recorder { fail: true, ..Recorder::default() })));
    let mut c = connect(&s, config(s.addr));
    let ns = c.namespace(1).unwrap();
    let mr = c.alloc(512).unwrap();
    c.transport_mut().mr_write(mr.id, 0, &[0xAB; 512]).unwrap();
    c.write(&ns, 0, Buffer::host(mr)).unwrap();
    let e = c.flush(&ns).unwrap_err();
    assert!(matches!(e, NvmeError::Status { .. }), "{e:?}");
    assert!(e.to_string().contains("internal error (SCT 0x0, SC 0x06)"), "{e}");
    let kept = s.target.borrow().last_error.clone().map(|e| e.to_string()).unwrap_or_default();
    assert!(kept.contains("disk on fire") && kept.contains("namespace 1"), "{kept}");
    // Not durable, so a crash still loses it.
    s.target.borrow_mut().crash(&mut s.sim.transport(s.sim.node("target").unwrap()));
    assert!(s.target.borrow().namespace_data(NQN, 1).unwrap()[..512].iter().all(|&b| b == 0));
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

/// Random 4 KiB reads of a known 1 MiB over `queues` I/O queues at depth
/// 16, waiting in `mode`: every read gets its block's bytes.
fn random_reads_get_their_blocks(seed: u64, queues: u16, mode: rctb_core::transport::PollMode) {
    let s = setup(seed, TargetConfig::new(NQN));
    let mut cfg = config(s.addr);
    cfg.io_queues = queues;
    let mut c = connect(&s, cfg);
    c.set_poll_mode(mode);
    assert_eq!(c.poll_mode(), mode);
    assert_eq!(c.io_queues().len(), queues as usize);
    let ns = c.namespace(1).unwrap();
    let lba = ns.lba_size();
    let len = 1u64 << 20;
    let mr = c.alloc(len).unwrap();
    let data = pattern(len as usize, 9);
    c.transport_mut().mr_write(mr.id, 0, &data).unwrap();
    c.write(&ns, 0, Buffer::host(mr)).unwrap();
    let (n, bs) = (200u64, 4096u64);
    let back = c.alloc(n * bs).unwrap();
    let mut x = seed | 1;
    let reqs: Vec<(u64, Buffer)> = (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % (len / bs)) * (bs / lba), Buffer::slice(back, i * bs, bs))
        })
        .collect();
    let reads_before = s.target.borrow().stats().reads;
    c.read_many(&ns, &reqs, 16).unwrap();
    assert_eq!(s.target.borrow().stats().reads - reads_before, n, "one command per read");
    let mut got = vec![0u8; bs as usize];
    for (i, (slba, _)) in reqs.iter().enumerate() {
        c.transport().mr_read(back.id, i as u64 * bs, &mut got).unwrap();
        let at = (slba * lba) as usize;
        assert!(got[..] == data[at..at + bs as usize], "read {i} (block {slba}) got other bytes");
    }
}

#[test]
fn reads_over_several_queues_get_their_blocks_in_every_poll_mode() {
    use rctb_core::transport::PollMode;
    for (seed, queues, mode) in [
        (30, 1, PollMode::Event),
        (31, 4, PollMode::Event),
        (32, 1, PollMode::Adaptive { spin: 8 }),
        (33, 4, PollMode::Adaptive { spin: 8 }),
        (34, 3, PollMode::Adaptive { spin: 1 }),
    ] {
        random_reads_get_their_blocks(seed, queues, mode);
    }
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
