//! One seed, one trace: the same seed twice gives identical pcap bytes and
//! counters; another seed under the same faults gives another trace.

mod common;

use common::*;
use rctb_core::time::Duration;
use rctb_core::transport::*;
use rctb_sim::{LinkConfig, LinkFaults};

fn trace(seed: u64) -> (Vec<u8>, rctb_sim::FabricStats, Vec<Completion>) {
    let mut faults = LinkFaults::default();
    faults.drop = 0.05;
    faults.duplicate = 0.05;
    faults.reorder = 0.1;
    faults.reorder_window = Duration::from_micros(10);
    faults.corrupt = 0.02;
    faults.jitter = Duration::from_nanos(500);
    let mut p = Pair::new(PairConfig {
        seed,
        link: {
            let mut link_config = LinkConfig::default();
            link_config.latency = Duration::from_micros(2);
            link_config.faults = faults;
            link_config
        },
        ..Default::default()
    });
    p.sim.enable_pcap();
    for i in 0..8 {
        post_recv(&mut p.b, i, i * 8192, 8192);
    }
    for i in 0..8u64 {
        fill(&mut p.a, i * 8192, 5000, i as u8);
        let op = match i % 4 {
            0 => SendOp::Send,
            1 => SendOp::Write { remote: p.b.mr.remote(65536 + i * 8192) },
            2 => SendOp::Read { remote: p.b.mr.remote(i * 8192) },
            _ => SendOp::SendWithImm { imm: i as u32 },
        };
        post(&mut p.a, i, op, i * 8192, 5000).unwrap();
    }
    let mut done = completions(&mut p.a, 8, secs(10));
    p.sim.run_until_idle();
    done.extend(drain(&mut p.b));
    (p.sim.take_pcap().unwrap(), p.sim.stats(), done)
}

#[test]
fn same_seed_same_trace_and_pcap_bytes() {
    for seed in [1u64, 7, 0xdead_beef] {
        let (pcap1, stats1, wc1) = trace(seed);
        let (pcap2, stats2, wc2) = trace(seed);
        assert_eq!(stats1, stats2, "seed {seed}: counters differ between runs");
        assert_eq!(wc1, wc2, "seed {seed}: completions differ between runs");
        assert!(pcap1 == pcap2, "seed {seed}: pcap bytes differ between runs");
        assert!(stats1.dropped_loss + stats1.duplicated + stats1.reordered > 0, "seed {seed}: faults were drawn");
        assert!(wc1.iter().all(|c| c.status == WcStatus::Success), "seed {seed}: {wc1:?}");
    }
}

#[test]
fn different_seeds_draw_different_faults() {
    let (a, _, _) = trace(1);
    let (b, _, _) = trace(2);
    assert!(a != b, "two seeds produced the same trace");
}
