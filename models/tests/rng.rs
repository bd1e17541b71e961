//! The workloads' RNG draws exactly what the simulator's `SimRng` draws for
//! the same seed and label (the session workload's draws moved crates with
//! it; its scenarios' reports must not change).

use rctb_models::SeededRng;
use rctb_sim::SimRng;

#[test]
fn seeded_rng_matches_the_simulators_rng() {
    for (seed, label) in [(0, "rcsession/workload"), (7, "rcsession/object/3/9"), (u64::MAX, "")] {
        let (mut a, mut b) = (SeededRng::child(seed, label), SimRng::child(seed, label));
        for _ in 0..64 {
            assert_eq!(a.next_u64(), b.next_u64(), "seed {seed} label {label:?}");
            assert_eq!(a.next_u32(), b.next_u32(), "seed {seed} label {label:?}");
            assert_eq!(a.below(1000), b.below(1000), "seed {seed} label {label:?}");
            assert_eq!(a.chance(0.3), b.chance(0.3), "seed {seed} label {label:?}");
        }
    }
}
