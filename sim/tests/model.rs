//! Reference-model test: random sequences of the seven send opcodes over a
//! faulty link, compared with an ideal RC channel by
//! `rctb_sim::fuzzing::run` (which the structured fuzz target uses too; its
//! docs say what the model promises, including the exact completions when
//! the retry budget runs out).

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rctb_core::time::Duration;
use rctb_core::transport::Mtu;
use rctb_sim::LinkFaults;
use rctb_sim::fuzzing::{Case, Kind, MAX_MESSAGE, run};

fn kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

fn size() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..64, 3 => 0u32..4097, 1 => 0u32..=MAX_MESSAGE]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        prop::sample::select(Mtu::ALL.to_vec()),
        (0.0..0.2f64, 0.0..0.2f64, 0.0..0.2f64, 0.0..0.05f64),
        prop::option::weighted(0.25, 0u64..400),
        prop::collection::vec((kind(), size()), 1..12),
    )
        .prop_map(|(seed, mtu, (drop, duplicate, reorder, corrupt), partition_at_us, ops)| Case {
            seed,
            mtu,
            faults: {
                let mut link_faults = LinkFaults::default();
                link_faults.drop = drop;
                link_faults.duplicate = duplicate;
                link_faults.reorder = reorder;
                link_faults.reorder_window = Duration::from_micros(20);
                link_faults.corrupt = corrupt;
                link_faults
            },
            partition_at_us,
            ops,
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/model.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn rc_matches_the_ideal_channel(c in case()) {
        // proptest prints the minimal failing `Case` (its seed included) and
        // keeps it in sim/proptest-regressions/model.txt, so a plain
        // `cargo test -p rctb-sim --test model` replays it first.
        run(&c).map_err(TestCaseError::fail)?;
    }
}

/// With moderate faults and no partition, the retry budget is never exhausted
/// for these fixed seeds: every WR succeeds.
#[test]
fn moderate_faults_always_converge() {
    for seed in 0..40u64 {
        let mut faults = LinkFaults::default();
        faults.drop = 0.05;
        faults.duplicate = 0.05;
        faults.reorder = 0.05;
        faults.reorder_window = Duration::from_micros(20);
        let ops = (0..8).map(|i| (Kind::ALL[i % Kind::ALL.len()], (i as u32 + 1) * 3001)).collect();
        let c = Case { seed, mtu: Mtu::ALL[(seed % 5) as usize], faults, partition_at_us: None, ops };
        if let Err(e) = run(&c) {
            panic!("seed {seed}: {e}\nreplay: cargo test -p rctb-sim --test model moderate (deterministic)");
        }
    }
}
