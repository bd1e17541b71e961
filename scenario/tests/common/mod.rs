//! Helpers shared by the integration tests: scenario paths and the replay
//! command every failing simulator test prints.

#![allow(dead_code)]

use std::path::PathBuf;

use rctb_scenario::report::Report;
use rctb_scenario::runner::{self, RunOutput};
use rctb_scenario::scenario::Scenario;

/// The workspace's `scenarios/` directory.
pub fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("scenarios")
}

pub fn load(name: &str) -> Scenario {
    let path = scenarios_dir().join(name);
    Scenario::load(path.to_str().expect("UTF-8 path")).unwrap_or_else(|e| panic!("{e}"))
}

/// How to replay a seed from the workspace root.
pub fn replay(name: &str, seed: u64) -> String {
    format!("cargo run -p rctb -- run scenarios/{name} --seed {seed}")
}

pub fn run(scenario: &Scenario, seed: u64, pcap: bool) -> RunOutput {
    runner::run(scenario, seed, pcap).unwrap_or_else(|e| panic!("seed {seed}: fabric setup failed: {e}"))
}

/// Panics with the seed, the failed checks and the replay command.
pub fn assert_passed(name: &str, report: &Report) {
    assert!(
        report.passed,
        "scenario {name} failed with seed {}:\n  {}\nreplay: {}\n\n{}",
        report.seed,
        report.failures().join("\n  "),
        replay(name, report.seed),
        report.to_text()
    );
}
