//! Swarm faults: fault parameters drawn from the seed (the VOPR / swarm
//! testing idea). Each seed picks, for every pair of nodes, its own loss,
//! duplication, reordering and corruption rates up to the scenario's
//! maxima, plus a few partitions at random times; at `heal_at` every fault
//! is lifted, and the scenario's expectations then check that the workload
//! converged. A sweep over seeds thus explores many fault mixes, and every
//! failing seed replays exactly.

use rctb_core::time::{Duration, Instant};
use rctb_sim::{FaultAction, LinkFaults, ScheduledFault, SimRng};

/// The `[swarm]` table, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Swarm {
    /// Maximum of each per-pair probability; each seed draws in `[0, max]`.
    pub max: LinkFaults,
    /// Partitions per run, each between a random pair.
    pub partitions: u32,
    /// Longest a partition lasts.
    pub max_partition: Duration,
    /// When every fault is lifted.
    pub heal_at: Duration,
}

impl Swarm {
    /// The faults `seed` draws for `nodes` (names, in scenario order).
    pub fn draw(&self, seed: u64, nodes: &[String]) -> Vec<ScheduledFault> {
        let mut out = Vec::new();
        let heal = Instant::ZERO + self.heal_at;
        let pairs: Vec<(&String, &String)> =
            nodes.iter().enumerate().flat_map(|(i, a)| nodes[i + 1..].iter().map(move |b| (a, b))).collect();
        for &(a, b) in &pairs {
            let mut rng = SimRng::child(seed, &format!("swarm/{a}/{b}"));
            let m = &self.max;
            let mut faults = LinkFaults::default();
            faults.drop = rng.unit() * m.drop;
            faults.duplicate = rng.unit() * m.duplicate;
            faults.reorder = rng.unit() * m.reorder;
            faults.reorder_window = m.reorder_window;
            faults.corrupt = rng.unit() * m.corrupt;
            faults.jitter = Duration::from_nanos(rng.below(m.jitter.as_nanos() as u64 + 1));
            out.push(set(Instant::ZERO, a, b, faults));
            out.push(set(heal, a, b, LinkFaults::default()));
        }
        if !pairs.is_empty() {
            let mut rng = SimRng::child(seed, "swarm/partitions");
            for _ in 0..self.partitions {
                let (a, b) = pairs[rng.below(pairs.len() as u64) as usize];
                let start = Instant::from_nanos(rng.below(self.heal_at.as_nanos() as u64));
                let length = Duration::from_nanos(rng.below(self.max_partition.as_nanos() as u64 + 1));
                let end = (start + length).min(heal);
                let (a, b) = (a.clone(), b.clone());
                out.push(ScheduledFault { at: start, action: FaultAction::Partition { a: a.clone(), b: b.clone() } });
                out.push(ScheduledFault { at: end, action: FaultAction::Heal { a, b } });
            }
        }
        // A heal of every pair at `heal_at` also ends any overlapping partitions.
        for &(a, b) in &pairs {
            out.push(ScheduledFault { at: heal, action: FaultAction::Heal { a: a.clone(), b: b.clone() } });
        }
        // In time order (stable, so same-time faults keep a fixed order).
        out.sort_by_key(|f| f.at);
        out
    }
}

fn set(at: Instant, a: &str, b: &str, faults: LinkFaults) -> ScheduledFault {
    ScheduledFault { at, action: FaultAction::SetFaults { a: a.into(), b: b.into(), faults } }
}

/// One line per drawn fault, for the report.
pub fn describe(faults: &[ScheduledFault]) -> Vec<String> {
    faults
        .iter()
        .map(|f| {
            let what = match &f.action {
                FaultAction::SetFaults { a, b, faults: l } => format!(
                    "{a}-{b} faults drop {:.4} dup {:.4} reorder {:.4} corrupt {:.4} jitter {}ns",
                    l.drop,
                    l.duplicate,
                    l.reorder,
                    l.corrupt,
                    l.jitter.as_nanos()
                ),
                FaultAction::Partition { a, b } => format!("{a}-{b} partition"),
                FaultAction::Heal { a, b } => format!("{a}-{b} heal"),
                FaultAction::Hold { a, b } => format!("{a}-{b} hold"),
                FaultAction::Release { a, b } => format!("{a}-{b} release"),
                FaultAction::Crash { node } => format!("{node} crash"),
                FaultAction::Bounce { node } => format!("{node} bounce"),
                other => format!("{other:?}"),
            };
            format!("swarm {}: {what}", f.at)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swarm() -> Swarm {
        Swarm {
            max: {
                let mut link_faults = LinkFaults::default();
                link_faults.drop = 0.1;
                link_faults.duplicate = 0.1;
                link_faults.reorder = 0.1;
                link_faults.reorder_window = Duration::from_micros(10);
                link_faults.corrupt = 0.05;
                link_faults.jitter = Duration::from_micros(1);
                link_faults
            },
            partitions: 3,
            max_partition: Duration::from_millis(5),
            heal_at: Duration::from_millis(20),
        }
    }

    fn names() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn a_seed_draws_the_same_faults_and_another_seed_others() {
        let s = swarm();
        assert_eq!(s.draw(5, &names()), s.draw(5, &names()));
        assert_ne!(s.draw(5, &names()), s.draw(6, &names()));
    }

    #[test]
    fn draws_stay_within_the_maxima_and_everything_heals_at_heal_at() {
        let s = swarm();
        for seed in 0..200 {
            let faults = s.draw(seed, &names());
            let heal = Instant::ZERO + s.heal_at;
            for f in &faults {
                assert!(f.at <= heal, "seed {seed}: {f:?} after heal_at");
                if let FaultAction::SetFaults { faults: l, .. } = &f.action {
                    assert!(l.drop <= 0.1 && l.duplicate <= 0.1 && l.reorder <= 0.1 && l.corrupt <= 0.05);
                    assert!(l.jitter <= Duration::from_micros(1));
                }
            }
            // Three pairs, each: faults at 0, clean at heal, heal at heal; plus 3 partitions (2 events each).
            assert_eq!(faults.len(), 3 * 3 + 3 * 2, "seed {seed}");
            let last: Vec<_> = faults.iter().filter(|f| f.at == heal).collect();
            for (a, b) in [("a", "b"), ("a", "c"), ("b", "c")] {
                assert!(last.iter().any(|f| f.action == FaultAction::Heal { a: a.into(), b: b.into() }));
                assert!(last.iter().any(|f| matches!(&f.action,
                    FaultAction::SetFaults { a: x, b: y, faults } if x == a && y == b && faults.is_clean())));
            }
        }
    }
}
