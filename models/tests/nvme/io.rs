//! Commands end to end: connect, discovery, data in and out of capsules,
//! NVMe statuses, several I/O queues, tickets, poll modes and GPU memory,
//! and the errors of bring-up and of a full queue.

use std::net::SocketAddrV4;

use rctb_core::Transport;
use rctb_core::nvmeof::protocol::*;
use rctb_core::nvmeof::{Buffer, Controller, NvmeError, discover};
use rctb_core::time::Duration;
use rctb_models::nvme::TargetConfig;
use rctb_sim::SimTransport;

use crate::{NQN, config, connect, pattern, setup};

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
