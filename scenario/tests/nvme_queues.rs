//! `rctb nvme bench -i N` asks the initiator for N I/O queues and hands its
//! reads to `Controller::read_many`, which is meant to spread them over the
//! queues round-robin. Counted on the simulated wire, not taken on trust:
//! every command capsule the host sends (by the target QP it goes to) and
//! every response capsule the target model sends back (by the SQ id it puts
//! in the completion) during one `read_many`, as the CLI's bench sets it up
//! (the simulator's target, 4 KiB reads of nsid 1).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;

use rctb_core::nvmeof::protocol::{Completion, NVME_RDMA_PORT, Nqn};
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig};
use rctb_core::transport::PollMode;
use rctb_core::wire::roce::Opcode;
use rctb_models::nvme::{NvmeTarget, TargetConfig};
use rctb_sim::{NodeConfig, PacketAction, PacketMatch, PacketRule, Sim, SimTransport};

const NQN: &str = "nqn.2026-01.io.rctb:sim-target";

/// What one `read_many` put on each queue.
struct Spread {
    /// Response capsules by the SQ id of their completion (the target's
    /// word for the queue the command came on).
    by_sqid: BTreeMap<u16, u64>,
    /// Command capsules by the target QP they were sent to.
    by_target_qp: BTreeMap<u32, u64>,
    /// Reads the target model executed.
    target_reads: u64,
    /// The host's I/O queue ids.
    qids: Vec<u16>,
}

/// `ios` random 4 KiB reads at depth `qd` over `queues` I/O queues.
fn spread(seed: u64, queues: u16, qd: usize, ios: u64) -> Spread {
    let sim = Sim::new(seed);
    let host = sim.add_node(NodeConfig::new("host", Ipv4Addr::new(10, 0, 0, 1))).unwrap();
    let tip = Ipv4Addr::new(10, 0, 0, 2);
    let tn = sim.add_node(NodeConfig::new("target", tip)).unwrap();
    let target = Rc::new(RefCell::new(NvmeTarget::new(TargetConfig::new(NQN), tip).unwrap()));
    let actor = target.clone();
    sim.add_actor(tn, Box::new(move |t: &mut SimTransport| actor.borrow_mut().run(t)));
    let mut cfg = ControllerConfig::new(SocketAddrV4::new(tip, NVME_RDMA_PORT), Nqn::new(NQN).unwrap(), [7; 16]);
    cfg.io_queues = queues;
    cfg.queue_depth = 128; // the CLI's default -Q
    let mut c = Controller::connect(sim.transport(host), cfg).map_err(|e| e.into_error()).expect("connect");
    c.set_poll_mode(PollMode::Event);
    let qids: Vec<u16> = c.io_queues().iter().map(|q| q.qid()).collect();
    assert_eq!(qids.len(), queues as usize, "the controller made the queues asked for");
    let ns = c.namespace(1).unwrap();
    let (bs, lba) = (4096u64, ns.lba_size());
    let slots = ns.blocks() / (bs / lba);
    let mr = c.alloc(bs * ios).unwrap();
    let mut x = seed | 1;
    let reqs: Vec<(u64, Buffer)> = (0..ios)
        .map(|i| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) % slots * (bs / lba), Buffer::slice(mr, i * bs, bs))
        })
        .collect();

    // Count from here on: nothing else runs on the admin queue meanwhile
    // (no keep-alive), so every capsule is one of these reads'.
    let by_sqid = Rc::new(RefCell::new(BTreeMap::<u16, u64>::new()));
    let by_qp = Rc::new(RefCell::new(BTreeMap::<u32, u64>::new()));
    let seen = by_sqid.clone();
    let responses = PacketMatch::any().from(tn).to(host).when(move |p| {
        let send = p.bth.opcode == Opcode::SEND_ONLY || p.bth.opcode == Opcode::SEND_ONLY_INV;
        if send {
            let cqe = Completion::decode(&p.payload).expect("a response capsule holds a completion");
            *seen.borrow_mut().entry(cqe.sq_id).or_default() += 1;
        }
        send
    });
    let seen = by_qp.clone();
    let commands = PacketMatch::any().from(host).to(tn).opcode(Opcode::SEND_ONLY).when(move |p| {
        *seen.borrow_mut().entry(p.bth.dest_qp).or_default() += 1;
        true
    });
    // limit(0): the rules count what they match and never act on it.
    let r_rule = sim.add_rule(PacketRule::new(responses, PacketAction::Drop).limit(0)).unwrap();
    let c_rule = sim.add_rule(PacketRule::new(commands, PacketAction::Drop).limit(0)).unwrap();
    let reads_before = target.borrow().stats().reads;
    c.read_many(&ns, &reqs, qd).expect("the reads");
    let r_stats = sim.remove_rule(r_rule).unwrap();
    let c_stats = sim.remove_rule(c_rule).unwrap();
    assert_eq!((r_stats.applied, c_stats.applied), (0, 0), "the counting rules touched nothing");
    let by_sqid = by_sqid.borrow().clone();
    let by_target_qp = by_qp.borrow().clone();
    assert_eq!(r_stats.matched, by_sqid.values().sum::<u64>());
    assert_eq!(c_stats.matched, by_target_qp.values().sum::<u64>());
    let target_reads = target.borrow().stats().reads - reads_before;
    c.close();
    Spread { by_sqid, by_target_qp, target_reads, qids }
}

#[test]
fn reads_spread_over_every_io_queue_and_none_is_lost_or_doubled() {
    // (queues, depth, reads): more queues than depth too, where round-robin
    // still moves on to the next queue with each read.
    for (seed, queues, qd, ios) in [(1, 4, 8, 64), (2, 3, 32, 100), (3, 2, 1, 9), (4, 4, 2, 40), (5, 1, 8, 20)] {
        let s = spread(seed, queues, qd, ios);
        let what = format!("{queues} queues, depth {qd}, {ios} reads: {:?} / {:?}", s.by_sqid, s.by_target_qp);
        assert_eq!(s.target_reads, ios, "{what}");
        // One response per read, each on one of the host's I/O queues, and
        // every queue carried at least one.
        assert_eq!(s.by_sqid.keys().copied().collect::<Vec<_>>(), s.qids, "{what}");
        assert!(s.by_sqid.values().all(|&n| n >= 1), "{what}");
        assert_eq!(s.by_sqid.values().sum::<u64>(), ios, "{what}");
        // One command capsule per read, to as many target QPs as queues.
        assert_eq!(s.by_target_qp.len(), queues as usize, "{what}");
        assert_eq!(s.by_target_qp.values().sum::<u64>(), ios, "{what}");
        // Round-robin: no queue carries more than one read more than another.
        let (lo, hi) = (s.by_sqid.values().min().unwrap(), s.by_sqid.values().max().unwrap());
        assert!(hi - lo <= 1, "{what}");
        let mut per_qp: Vec<u64> = s.by_target_qp.values().copied().collect();
        let mut per_sq: Vec<u64> = s.by_sqid.values().copied().collect();
        per_qp.sort_unstable();
        per_sq.sort_unstable();
        assert_eq!(per_qp, per_sq, "the two counts see the same spread: {what}");
    }
}
