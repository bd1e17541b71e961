//! `rctb decode`: the RoCEv2 frames of a pcap ([`rctb_scenario::decode`]), one
//! line (or JSON object) per frame. Exit status: 0 done, 2 when the file
//! could not be read or decoded, or output failed.

use std::io::Write;
use std::process::ExitCode;

/// Prints every frame of the capture at `path`.
pub fn decode(path: &str, json: bool) -> ExitCode {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rctb: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let frames = match rctb_scenario::decode::pcap(&bytes) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rctb: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    for f in &frames {
        let line = if json { serde_json::to_string(f).unwrap_or_default() } else { f.line() };
        if writeln!(out, "{line}").is_err() {
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
