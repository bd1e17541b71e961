//! Seeded sweeps: run one scenario over many seeds, in parallel worker
//! threads (each run owns its own simulator), and say which seeds failed and
//! how to replay them.
//!
//! For CI systems and clusters, each seed is also a [`SeedRecord`]: one
//! JSON object per line (`rctb sweep --json`), JUnit XML ([`junit`], one
//! test case per seed), and what [`merge`] joins back into one report
//! when a sweep ran as shards (`--shard I/N` on N machines).

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use crate::runner;
use crate::scenario::Scenario;

/// One shard of a sweep: `index` of `total`, 1-based (`--shard 2/4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, `1..=total`: it runs the `index`-th seed of the range
    /// and every `total`-th after it.
    pub index: u64,
    /// How many shards the sweep is split into, at least 1.
    pub total: u64,
}

impl Shard {
    /// The unsharded sweep, `1/1`: every seed of the range.
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
    /// The seed the scenario ran with.
    pub seed: u64,
    /// Whether every check held; false as well when the fabric could not
    /// be built.
    pub passed: bool,
    /// The failed checks (or the error that stopped the run).
    pub failures: Vec<String>,
    /// Virtual time when the run ended, in nanoseconds (0 when it never
    /// started).
    pub virtual_time_ns: u64,
}

/// What a seed came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every check held (`"pass"` in JSON).
    Pass,
    /// A check failed or the run could not be set up (`"fail"` in JSON).
    Fail,
}

/// One seed of a sweep as `rctb sweep --json` writes it (one object per
/// line) and `rctb sweep merge` reads it back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedRecord {
    /// The scenario's `name`.
    pub scenario: String,
    /// The seed; `rctb sweep merge` refuses two records with one seed.
    pub seed: u64,
    /// Whether the seed passed.
    pub verdict: Verdict,
    /// The failed checks, empty when it passed.
    pub failed: Vec<String>,
    /// The command that replays this seed.
    pub replay: String,
    /// Virtual time when the run ended, in nanoseconds.
    pub virtual_time_ns: u64,
}

impl SeedRecord {
    /// The record of `result`, a seed of scenario `name` loaded from `path`.
    pub fn new(name: &str, path: &str, result: &SeedResult) -> SeedRecord {
        SeedRecord {
            scenario: name.to_string(),
            seed: result.seed,
            verdict: if result.passed { Verdict::Pass } else { Verdict::Fail },
            failed: result.failures.clone(),
            replay: replay_command(path, result.seed),
            virtual_time_ns: result.virtual_time_ns,
        }
    }

    /// Whether the verdict is [`Verdict::Pass`].
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    /// One line of `--json` (no newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }
}

/// The text a sweep prints for its failing seeds: for each, `FAIL seed N`,
/// its failed checks and its replay line.
pub fn failure_text(records: &[SeedRecord]) -> String {
    let mut out = String::new();
    for r in records.iter().filter(|r| !r.passed()) {
        out += &format!("FAIL seed {}\n", r.seed);
        for f in &r.failed {
            out += &format!("  {f}\n");
        }
        out += &format!("  replay: {}\n", r.replay);
    }
    out
}

/// JUnit XML of `records`: one test suite (the scenario), one test case
/// per seed (`seed N`), a failing seed's checks and replay line in its
/// failure message; the virtual duration in the case's system-out.
pub fn junit(records: &[SeedRecord]) -> String {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let name = records.first().map_or("rctb sweep", |r| r.scenario.as_str());
    let mut suite = TestSuite::new(name);
    for r in records {
        let status = if r.passed() {
            TestCaseStatus::success()
        } else {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            let first = r.failed.first().map_or("failed", String::as_str);
            s.set_message(format!("{first} (replay: {})", r.replay));
            s.set_description(format!("{}\nreplay: {}", r.failed.join("\n"), r.replay));
            s
        };
        let mut case = TestCase::new(format!("seed {}", r.seed), status);
        case.set_classname(r.scenario.as_str());
        case.set_system_out(format!("virtual time {} ns\nreplay: {}", r.virtual_time_ns, r.replay));
        suite.add_test_case(case);
    }
    let mut report = Report::new("rctb sweep");
    report.add_test_suite(suite);
    report.to_string().expect("JUnit XML of plain strings serializes")
}

/// Why shard outputs could not be merged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    /// A non-blank line is not a [`SeedRecord`] as JSON (unknown keys are
    /// refused too).
    #[error("{file}:{line}: not a sweep record (rctb sweep --json writes one per line): {error}")]
    Parse {
        /// The file the line came from.
        file: String,
        /// The line's number, from 1.
        line: usize,
        /// What serde_json said.
        error: String,
    },
    /// A record names another scenario than the first record read.
    #[error("{file}: scenario {found:?}, but the first file's is {expected:?}: shards of one sweep only")]
    Scenario {
        /// The file holding the odd record.
        file: String,
        /// The scenario of the first record.
        expected: String,
        /// The scenario this record names.
        found: String,
    },
    /// One seed has two records (two shards overlap, or one file repeats a
    /// seed).
    #[error("seed {seed} is in {first} and in {second}: the shards overlap")]
    Duplicate {
        /// The repeated seed.
        seed: u64,
        /// The file of one record of it.
        first: String,
        /// The file of the other (the same file when it repeats the seed).
        second: String,
    },
    /// The shards held no record at all.
    #[error("no records to merge")]
    Empty,
}

/// Parses `text`, the `--json` output of one shard read from `file`
/// (blank lines skipped).
///
/// # Errors
///
/// [`MergeError::Parse`] for the first line that is not a record.
pub fn parse_records(file: &str, text: &str) -> Result<Vec<SeedRecord>, MergeError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| MergeError::Parse {
                file: file.to_string(),
                line: i + 1,
                error: e.to_string(),
            })
        })
        .collect()
}

/// Joins the records of shards (each named by its file) into one sweep's,
/// sorted by seed: they must be of one scenario and share no seed.
///
/// # Errors
///
/// [`MergeError::Scenario`] when a record names another scenario than the
/// first one, [`MergeError::Empty`] when there is no record at all, and
/// [`MergeError::Duplicate`] when a seed has two records.
pub fn merge(shards: Vec<(String, Vec<SeedRecord>)>) -> Result<Vec<SeedRecord>, MergeError> {
    let mut all: Vec<(String, SeedRecord)> = Vec::new();
    let mut expected: Option<String> = None;
    for (file, records) in shards {
        for r in records {
            match &expected {
                None => expected = Some(r.scenario.clone()),
                Some(e) if *e != r.scenario => {
                    return Err(MergeError::Scenario { file, expected: e.clone(), found: r.scenario });
                }
                Some(_) => {}
            }
            all.push((file.clone(), r));
        }
    }
    if all.is_empty() {
        return Err(MergeError::Empty);
    }
    all.sort_by_key(|(_, r)| r.seed);
    for pair in all.windows(2) {
        if pair[0].1.seed == pair[1].1.seed {
            return Err(MergeError::Duplicate {
                seed: pair[0].1.seed,
                first: pair[0].0.clone(),
                second: pair[1].0.clone(),
            });
        }
    }
    Ok(all.into_iter().map(|(_, r)| r).collect())
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
        Ok(out) => SeedResult {
            seed,
            passed: out.report.passed,
            failures: out.report.failures(),
            virtual_time_ns: out.report.virtual_time_ns,
        },
        Err(e) => {
            SeedResult { seed, passed: false, failures: vec![format!("fabric setup failed: {e}")], virtual_time_ns: 0 }
        }
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
            assert!(bad.parse::<Shard>().unwrap_err().contains("a shard is I/N"), "{bad}");
        }
    }
}
