//! Helpers shared by the integration tests: scenario paths and the replay
//! command every failing simulator test prints.

#![allow(dead_code)]

use std::path::PathBuf;

use rctb::report::Report;
use rctb::runner::{self, RunOutput};
use rctb::scenario::Scenario;

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

/// `rctb object serve ARGS` in its own process, killed when dropped.
pub struct ObjectServer {
    child: std::process::Child,
    /// The address it printed (`listening on ADDR`).
    pub addr: String,
}

impl ObjectServer {
    /// Starts the server with `args` after `object serve` and `env` set, and
    /// waits for its `listening on ADDR` line.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> ObjectServer {
        use std::io::{BufRead, BufReader};
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rctb"))
            .args(["object", "serve"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("listening on ").map(str::to_string);
        let server = ObjectServer { child, addr: addr.clone().unwrap_or_default() };
        assert!(addr.is_some(), "object serve printed {line:?}");
        server
    }

    /// `http://ADDR`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for ObjectServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
