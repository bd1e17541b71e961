//! Reference model of the NVMe-oF initiator + target pair: random reads,
//! writes and flushes on two namespaces (512- and 4096-byte blocks) against
//! a byte vector per namespace, with random MDTS, queue depth, number of I/O
//! queues, target response delays and dropped responses. Every read returns
//! exactly the model's bytes, or the operation fails with a typed error;
//! nothing hangs (each operation must finish within a virtual-time bound).
//! After an error the controller is replaced by a new one, and the blocks a
//! failed write touched become unknown to the model (the target may or may
//! not have written them).

use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;

use proptest::prelude::*;
use rctb_core::Transport;
use rctb_core::nvmeof::protocol::*;
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig, NvmeError};
use rctb_core::time::Duration;
use rctb_models::nvme::{NamespaceConfig, NvmeTarget, SubsystemConfig, TargetConfig};
use rctb_sim::{NodeConfig, Sim, SimTransport};

const NQN: &str = "nqn.2026-01.io.rctb:model";
const TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Clone, Debug)]
enum Op {
    Write {
        ns: usize,
        slba: u64,
        blocks: u64,
        fill: u8,
    },
    Read {
        ns: usize,
        slba: u64,
        blocks: u64,
    },
    Flush {
        ns: usize,
    },
    /// The target delays every response by this many ms from now on.
    Delay(u64),
    /// The target drops its next response.
    Drop,
}

const NS: [(u32, u64, u64); 2] = [(1, 512, 1024), (2, 4096, 128)];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..1024u64, 1..=96u64, any::<u8>()).prop_map(|(ns, s, b, fill)| Op::Write { ns, slba: s, blocks: b, fill }),
        4 => (0..2usize, 0..1024u64, 1..=96u64).prop_map(|(ns, s, b)| Op::Read { ns, slba: s, blocks: b }),
        1 => (0..2usize).prop_map(|ns| Op::Flush { ns }),
        1 => (0..3u64).prop_map(|d| Op::Delay(d * 100)),
        1 => Just(Op::Drop),
    ]
}

struct Model {
    /// Per namespace: bytes, and whether each block is known.
    data: Vec<Vec<u8>>,
    known: Vec<Vec<bool>>,
}

fn connect(host: &SimTransport, addr: SocketAddrV4, depth: u16, queues: u16) -> Controller<SimTransport> {
    let mut cfg = ControllerConfig::new(addr, Nqn::new(NQN).unwrap(), [5; 16]);
    cfg.queue_depth = depth;
    cfg.io_queues = queues;
    cfg.timeout = TIMEOUT;
    Controller::connect(host.clone(), cfg)
        .map_err(|e| e.into_error())
        .expect("connect (faults are off while connecting)")
}

fn fill_bytes(fill: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| fill.wrapping_add((i * 7 + i / 512) as u8)).collect()
}

fn run_case(seed: u64, mdts: u8, depth: u16, queues: u16, ops: &[Op]) -> Result<(), TestCaseError> {
    let replay = format!("seed {seed}, mdts {mdts}, depth {depth}, queues {queues}; ops {ops:?}");
    let sim = Sim::new(seed);
    let h = sim.add_node(NodeConfig::new("host", "10.0.0.1".parse().unwrap())).unwrap();
    let tn = sim.add_node(NodeConfig::new("target", "10.0.0.2".parse().unwrap())).unwrap();
    let mut tcfg = TargetConfig::new(NQN);
    tcfg.mdts = mdts;
    tcfg.subsystems = vec![SubsystemConfig {
        nqn: NQN.into(),
        namespaces: NS
            .iter()
            .map(|&(nsid, lba, blocks)| NamespaceConfig { nsid, lba_size: lba as u32, blocks })
            .collect(),
    }];
    let target = Rc::new(RefCell::new(NvmeTarget::new(tcfg, "10.0.0.2".parse().unwrap()).unwrap()));
    let actor = target.clone();
    sim.add_actor(tn, Box::new(move |t: &mut SimTransport| actor.borrow_mut().run(t)));
    let host = sim.transport(h);
    let addr = SocketAddrV4::new("10.0.0.2".parse().unwrap(), NVME_RDMA_PORT);
    let mut c = connect(&host, addr, depth, queues);
    let mut m = Model {
        data: NS.iter().map(|&(_, lba, blocks)| vec![0u8; (lba * blocks) as usize]).collect(),
        known: NS.iter().map(|&(_, _, blocks)| vec![true; blocks as usize]).collect(),
    };
    let nss: Vec<_> = NS.iter().map(|&(nsid, _, _)| c.namespace(nsid).unwrap()).collect();
    let mr = c.alloc(96 * 4096).unwrap();
    let mut mr = mr;
    for (i, op) in ops.iter().enumerate() {
        let start = sim.now();
        let result: Result<(), NvmeError> = match *op {
            Op::Delay(ms) => {
                target.borrow_mut().faults_mut().response_delay = Duration::from_millis(ms);
                continue;
            }
            Op::Drop => {
                target.borrow_mut().faults_mut().drop_responses += 1;
                continue;
            }
            Op::Write { ns, slba, blocks, fill } => {
                let (_, lba, nblocks) = NS[ns];
                let slba = slba % nblocks;
                let blocks = blocks.min(nblocks - slba);
                let len = (blocks * lba) as usize;
                let bytes = fill_bytes(fill, len);
                c.transport_mut().mr_write(mr.id, 0, &bytes).unwrap();
                let r = c.write(&nss[ns], slba, Buffer::slice(mr, 0, len as u64));
                let at = (slba * lba) as usize;
                match &r {
                    Ok(()) => {
                        m.data[ns][at..at + len].copy_from_slice(&bytes);
                        m.known[ns][slba as usize..(slba + blocks) as usize].fill(true);
                    }
                    Err(_) => m.known[ns][slba as usize..(slba + blocks) as usize].fill(false),
                }
                r
            }
            Op::Read { ns, slba, blocks } => {
                let (_, lba, nblocks) = NS[ns];
                let slba = slba % nblocks;
                let blocks = blocks.min(nblocks - slba);
                let len = (blocks * lba) as usize;
                let r = c.read(&nss[ns], slba, Buffer::slice(mr, 0, len as u64));
                if r.is_ok() {
                    let mut got = vec![0u8; len];
                    c.transport().mr_read(mr.id, 0, &mut got).unwrap();
                    for b in 0..blocks as usize {
                        if m.known[ns][slba as usize + b] {
                            let at = (slba as usize + b) * lba as usize;
                            let want = &m.data[ns][at..at + lba as usize];
                            prop_assert!(
                                &got[b * lba as usize..(b + 1) * lba as usize] == want,
                                "op {i}: nsid {} block {} differs from the model; {replay}",
                                ns + 1,
                                slba as usize + b
                            );
                        }
                    }
                }
                r
            }
            Op::Flush { ns } => c.flush(&nss[ns]),
        };
        // Never a hang: every command ends by its timeout, and a transfer
        // has at most 96 commands (one block each at the smallest MDTS).
        let took = sim.now() - start;
        prop_assert!(took <= TIMEOUT * 100 + Duration::from_secs(1), "op {i} took {took:?} of virtual time; {replay}");
        if let Err(e) = result {
            prop_assert!(
                matches!(e, NvmeError::Timeout { .. } | NvmeError::Disconnected { .. } | NvmeError::Completion { .. }),
                "op {i}: unexpected error {e}; {replay}"
            );
            // Start over with a new controller (faults off while connecting).
            let faults = target.borrow().faults();
            *target.borrow_mut().faults_mut() = Default::default();
            c.close();
            c = connect(&host, addr, depth, queues);
            mr = c.alloc(96 * 4096).unwrap();
            *target.borrow_mut().faults_mut() = rctb_models::nvme::TargetFaults { drop_responses: 0, ..faults };
        }
    }
    // At the end, with no faults, the whole of each namespace matches.
    *target.borrow_mut().faults_mut() = Default::default();
    for (ns, &(_, lba, blocks)) in NS.iter().enumerate() {
        let t = target.borrow();
        let stored = t.namespace_data(NQN, (ns + 1) as u32).unwrap();
        for b in 0..blocks as usize {
            if m.known[ns][b] {
                let r = b * lba as usize..(b + 1) * lba as usize;
                prop_assert!(stored[r.clone()] == m.data[ns][r], "nsid {} block {b}: target differs; {replay}", ns + 1);
            }
        }
    }
    c.close();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn reads_match_the_model_or_fail_typed(
        seed in any::<u64>(),
        mdts in 1u8..=6,
        depth in 2u16..=16,
        queues in 1u16..=3,
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run_case(seed, mdts, depth, queues, &ops)?;
    }
}

/// Found by this model in CI: a queue failed by a timeout kept its QP's
/// flush completions in its CQ, the controller kept waiting on that CQ,
/// the wait reported it ready at once, and a transfer spun forever without
/// virtual time moving. Failed queues now drain their CQ and leave the wait
/// set.
#[test]
fn a_queue_failed_by_a_timeout_does_not_spin_the_transfer() {
    use Op::*;
    let ops = [
        Delay(0),
        Delay(0),
        Write { ns: 1, slba: 204, blocks: 85, fill: 227 },
        Delay(200),
        Drop,
        Read { ns: 0, slba: 703, blocks: 64 },
        Delay(200),
        Write { ns: 0, slba: 124, blocks: 51, fill: 145 },
        Write { ns: 1, slba: 1021, blocks: 63, fill: 117 },
        Write { ns: 0, slba: 934, blocks: 80, fill: 27 },
        Read { ns: 1, slba: 758, blocks: 89 },
        Flush { ns: 0 },
        Delay(200),
        Flush { ns: 1 },
        Read { ns: 0, slba: 781, blocks: 73 },
        Delay(200),
        Flush { ns: 1 },
        Read { ns: 0, slba: 884, blocks: 18 },
        Write { ns: 1, slba: 598, blocks: 3, fill: 122 },
        Write { ns: 1, slba: 42, blocks: 1, fill: 182 },
        Drop,
        Write { ns: 1, slba: 385, blocks: 33, fill: 44 },
        Flush { ns: 0 },
        Write { ns: 0, slba: 839, blocks: 85, fill: 133 },
        Read { ns: 1, slba: 884, blocks: 17 },
    ];
    run_case(7422709015275864554, 2, 2, 3, &ops).unwrap();
}
