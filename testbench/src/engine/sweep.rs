//! Seeded sweeps: run one scenario over many seeds, in parallel worker
//! threads (each run owns its own simulator), and say which seeds failed and
//! how to replay them.

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::runner;
use crate::scenario::Scenario;

/// One shard of a sweep: `index` of `total`, 1-based (`--shard 2/4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub total: u64,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 1, total: 1 };
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: a shard is I/N with 1 <= I <= N, e.g. 2/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, total) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if total == 0 || index == 0 || index > total {
            return Err(bad());
        }
        Ok(Shard { index, total })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.total)
    }
}

/// The seeds of `shard` among `start..start + count`.
pub fn shard_seeds(start: u64, count: u64, shard: Shard) -> Vec<u64> {
    (0..count).filter(|k| k % shard.total == shard.index - 1).map(|k| start.wrapping_add(k)).collect()
}

/// The result of one seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedResult {
    pub seed: u64,
    pub passed: bool,
    /// The failed checks (or the error that stopped the run).
    pub failures: Vec<String>,
}

/// The command that replays `seed` of the scenario at `path`.
pub fn replay_command(path: &str, seed: u64) -> String {
    format!("rctb run {path} --seed {seed}")
}

/// Runs every seed on up to `jobs` threads; `on_result` sees each result as
/// it arrives (from any worker). Results come back sorted by seed.
pub fn run_seeds(
    scenario: &Scenario,
    seeds: &[u64],
    jobs: usize,
    on_result: &(dyn Fn(&SeedResult) + Sync),
) -> Vec<SeedResult> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(seeds.len()));
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, seeds.len().max(1)) {
            scope.spawn(|| {
                while let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = run_one(scenario, seed);
                    on_result(&result);
                    results.lock().unwrap_or_else(|p| p.into_inner()).push(result);
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|r| r.seed);
    results
}

fn run_one(scenario: &Scenario, seed: u64) -> SeedResult {
    match runner::run(scenario, seed, false) {
        Ok(out) => SeedResult { seed, passed: out.report.passed, failures: out.report.failures() },
        Err(e) => SeedResult { seed, passed: false, failures: vec![format!("fabric setup failed: {e}")] },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_seeds() {
        let all: Vec<u64> = (1..=4).flat_map(|i| shard_seeds(100, 10, Shard { index: i, total: 4 })).collect();
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(sorted, (100..110).collect::<Vec<_>>());
        assert_eq!(shard_seeds(0, 5, Shard::WHOLE), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn parses_shards() {
        assert_eq!("2/4".parse(), Ok(Shard { index: 2, total: 4 }));
        for bad in ["0/4", "5/4", "1/0", "x/2", "3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
