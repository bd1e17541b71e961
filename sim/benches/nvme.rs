//! The NVMe-oF initiator and target model through the whole simulated
//! stack: 4 KiB reads at queue depth 1 and 32 (commands per second, and
//! with callgrind, instructions per command), against a memcpy of the same
//! bytes measured in the same process.
//!
//! `cargo bench -p rctb-sim --bench nvme`
//! Instructions per command: `valgrind --tool=callgrind
//! --toggle-collect='*read_4k_qd32*' target/release/deps/nvme-<hash> --bench read_4k_qd32`
//! then divide Ir by the commands run (printed as the item count).

use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use rctb_core::nvmeof::protocol::{NVME_RDMA_PORT, Nqn};
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig, Namespace};
use rctb_models::nvme::{NvmeTarget, TargetConfig};
use rctb_sim::{NodeConfig, Sim, SimTransport};

fn main() {
    divan::main();
}

const NQN: &str = "nqn.2026-01.io.rctb:bench";
const BATCH: u64 = 256;

fn controller() -> (Sim, Controller<SimTransport>, Namespace) {
    let sim = Sim::new(1);
    let h = sim.add_node(NodeConfig::new("host", "10.0.0.1".parse().unwrap())).unwrap();
    let tn = sim.add_node(NodeConfig::new("target", "10.0.0.2".parse().unwrap())).unwrap();
    let target = NvmeTarget::new(TargetConfig::new(NQN), "10.0.0.2".parse().unwrap()).unwrap();
    let target = Rc::new(RefCell::new(target));
    sim.add_actor(tn, Box::new(move |t: &mut SimTransport| target.borrow_mut().run(t)));
    let addr = SocketAddrV4::new("10.0.0.2".parse().unwrap(), NVME_RDMA_PORT);
    let mut cfg = ControllerConfig::new(addr, Nqn::new(NQN).unwrap(), [9; 16]);
    cfg.queue_depth = 64;
    let mut c = Controller::connect(sim.transport(h), cfg).map_err(|e| e.into_error()).unwrap();
    let ns = c.namespace(2).unwrap();
    (sim, c, ns)
}

fn reads(c: &mut Controller<SimTransport>, ns: &Namespace, depth: usize, bench: Bencher<'_, '_>) {
    let mr = c.alloc(4096 * BATCH).unwrap();
    let reqs: Vec<(u64, Buffer)> =
        (0..BATCH).map(|i| ((i * 37) % ns.blocks(), Buffer::slice(mr, i * 4096, 4096))).collect();
    bench.counter(ItemsCount::new(BATCH)).bench_local(|| c.read_many(ns, black_box(&reqs), depth).unwrap());
}

/// 256 reads of 4 KiB, one at a time.
#[divan::bench]
fn read_4k_qd1(bench: Bencher<'_, '_>) {
    let (_sim, mut c, ns) = controller();
    reads(&mut c, &ns, 1, bench);
}

/// 256 reads of 4 KiB, 32 in flight.
#[divan::bench]
fn read_4k_qd32(bench: Bencher<'_, '_>) {
    let (_sim, mut c, ns) = controller();
    reads(&mut c, &ns, 32, bench);
}

/// Baseline: copying the same 1 MiB (256 x 4 KiB) in memory.
#[divan::bench]
fn memcpy_256x4k(bench: Bencher<'_, '_>) {
    let src = vec![7u8; 4096 * BATCH as usize];
    let mut dst = vec![0u8; src.len()];
    bench.counter(ItemsCount::new(BATCH)).bench_local(|| dst.copy_from_slice(black_box(&src)));
}
