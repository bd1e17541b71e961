//! Sessions per second of the RC session server (`rctb_core::rcsession`)
//! on the simulator, one core: each session is a whole hipobj-rc-v2
//! exchange, one at a time — PREPARE (PD, CQ, QP, staging region; a GET
//! copies its object in), the client's QP connected, READY, the data phase
//! (one WRITE_WITH_IMM and its ACK over the simulated fabric), the client's
//! completion, the final step or the PUT commit (the bytes compared), and
//! the reaper destroying it all. Both ends and the fabric are included.
//!
//! ```sh
//! cargo bench -p rctb-sim --bench rcsession
//! ci/session-cost        # instructions per session (callgrind; examples/session_cost.rs)
//! ```

use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};
use rctb_core::wire::hipobj::Op;
use rctb_models::rcsession::SessionPair;
use rctb_sim::{NodeConfig, Sim, SimTransport};

fn main() {
    divan::main();
}

const SESSIONS: u64 = 200;

/// The pair on a fresh fabric: server 10.0.0.1, client 10.0.0.2.
fn pair(seed: u64, capacity: u64) -> SessionPair<SimTransport> {
    let sim = Sim::new(seed);
    let s = sim.add_node(NodeConfig::new("server", "10.0.0.1".parse().unwrap())).unwrap();
    let c = sim.add_node(NodeConfig::new("client", "10.0.0.2".parse().unwrap())).unwrap();
    SessionPair::new(seed, capacity, sim.transport(s), sim.transport(c)).expect("a fresh fabric")
}

fn sessions(bencher: Bencher<'_, '_>, op: Op, size: usize, n: u64) {
    let mut pair = pair(1, size as u64);
    let object: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    bencher.counter(ItemsCount::new(n)).counter(BytesCount::new(n * size as u64)).bench_local(|| {
        for _ in 0..n {
            pair.transfer(op, black_box(&object)).expect("a session completes");
        }
    });
}

/// GET sessions of 4 KiB objects (one packet-ish: the cost is the session's).
#[divan::bench(sample_count = 20)]
fn get_4k(bencher: Bencher<'_, '_>) {
    sessions(bencher, Op::Get, 4096, SESSIONS);
}

/// PUT sessions of 4 KiB objects.
#[divan::bench(sample_count = 20)]
fn put_4k(bencher: Bencher<'_, '_>) {
    sessions(bencher, Op::Put, 4096, SESSIONS);
}

/// GET sessions of 1 MiB objects (the data phase dominates).
#[divan::bench(sample_count = 10)]
fn get_1m(bencher: Bencher<'_, '_>) {
    sessions(bencher, Op::Get, 1 << 20, 20);
}
