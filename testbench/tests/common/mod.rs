//! Helpers shared by the `rctb` binary's integration tests: the scenario
//! helpers of rctb-scenario's tests (one copy, included from there), and
//! an `rctb object serve` child process.

#![allow(dead_code)]

#[path = "../../../scenario/tests/common/mod.rs"]
mod scenario;
#[allow(unused_imports)]
pub use scenario::*;

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
