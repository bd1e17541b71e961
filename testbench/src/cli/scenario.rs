//! `rctb run` and `rctb sweep`: a scenario once (its report on stdout) or
//! over many seeds (each failing seed with its replay command). Exit
//! status: 0 when every expectation held, 1 when one failed, 2 when the
//! scenario could not be used (unreadable, invalid) or output failed.

use std::io::Write;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::backend::Backend;
use crate::scenario::Scenario;
use crate::sweep::{self, Shard};
use crate::udp_run::NodePlace;
use crate::{runner, udp_run};

fn load(path: &str) -> Result<Scenario, ExitCode> {
    Scenario::load(path).map_err(|e| {
        eprintln!("rctb: {e}");
        ExitCode::from(2)
    })
}

/// `rctb run`: the scenario at `path` once, on `backend` (sim or udp).
pub fn run(
    path: &str,
    seed: Option<u64>,
    pcap: Option<&str>,
    json: bool,
    backend: Backend,
    nodes: &[NodePlace],
) -> ExitCode {
    let scenario = match load(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let seed = seed.unwrap_or(scenario.default_seed);
    if backend != Backend::Udp && !nodes.is_empty() {
        eprintln!("rctb: --node places UDP endpoints: it needs --backend udp");
        return ExitCode::from(2);
    }
    let out = match backend {
        Backend::Sim => {
            runner::run(&scenario, seed, pcap.is_some()).map_err(|e| format!("building the fabric failed: {e}"))
        }
        Backend::Udp => udp_run::run(&scenario, seed, pcap.is_some(), nodes).map_err(|e| e.to_string()),
        Backend::Verbs => Err("--backend verbs runs the conformance suite and the front ends, not scenarios".into()),
    };
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            eprintln!("rctb: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    if let (Some(file), Some(bytes)) = (pcap, &out.pcap)
        && let Err(e) = std::fs::write(file, bytes)
    {
        eprintln!("rctb: writing {file}: {e}");
        return ExitCode::from(2);
    }
    let text = if json { out.report.to_json() } else { out.report.to_text() };
    if std::io::stdout().write_all(text.as_bytes()).is_err() {
        return ExitCode::from(2);
    }
    if out.report.passed {
        ExitCode::SUCCESS
    } else {
        for failure in out.report.failures() {
            eprintln!("rctb: FAIL {}: {failure}", scenario.name);
        }
        eprintln!("rctb: replay: {}", sweep::replay_command(path, seed));
        ExitCode::from(1)
    }
}

/// `rctb sweep`: `count` seeds from `start` (shard `shard`) on `jobs` threads.
pub fn sweep(path: &str, count: u64, shard: Shard, start: u64, jobs: Option<usize>) -> ExitCode {
    let scenario = match load(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let seeds = sweep::shard_seeds(start, count, shard);
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = ProgressBar::new(seeds.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds, {msg} [{elapsed_precise}, eta {eta}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("0 failed");
    let failed = std::sync::atomic::AtomicU64::new(0);
    let results = sweep::run_seeds(&scenario, &seeds, jobs, &|r| {
        if !r.passed {
            let n = failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            bar.set_message(format!("{n} failed"));
            bar.println(format!("FAIL seed {}: {}", r.seed, r.failures.first().map_or("", String::as_str)));
        }
        bar.inc(1);
    });
    bar.finish_and_clear();
    let failures: Vec<_> = results.iter().filter(|r| !r.passed).collect();
    for r in &failures {
        println!("FAIL seed {}", r.seed);
        for f in &r.failures {
            println!("  {f}");
        }
        println!("  replay: {}", sweep::replay_command(path, r.seed));
    }
    println!(
        "{}: {} seeds (shard {shard}, from {start}): {} passed, {} failed",
        scenario.name,
        results.len(),
        results.len() - failures.len(),
        failures.len()
    );
    if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
