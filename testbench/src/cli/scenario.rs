//! `rctb run` and `rctb sweep`: a scenario once (its report on stdout) or
//! over many seeds (each failing seed with its replay command). Exit
//! status: 0 when every expectation held, 1 when one failed, 2 when the
//! scenario could not be used (unreadable, invalid) or output failed.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::backend::Backend;
use rctb_scenario::scenario::Scenario;
use rctb_scenario::sweep::{self, SeedRecord, Shard};
use rctb_scenario::udp_run::NodePlace;
use rctb_scenario::{runner, udp_run};

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

/// `rctb sweep`'s arguments: a scenario over seeds, or `merge`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SweepArgs {
    #[command(subcommand)]
    pub command: Option<SweepCommand>,
    /// The scenario file (TOML).
    #[arg(required = true)]
    pub scenario: Option<String>,
    /// How many seeds (across all shards).
    #[arg(long, required = true)]
    pub seeds: Option<u64>,
    /// Run only shard I of N (1-based), e.g. 2/4: seeds start+I-1, start+I-1+N, ...
    #[arg(long, default_value = "1/1")]
    pub shard: Shard,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Worker threads (default: the machine's parallelism).
    #[arg(long)]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub out: SweepOutput,
}

/// Where a sweep's verdicts go besides the text report.
#[derive(Debug, clap::Args)]
pub struct SweepOutput {
    /// Print one JSON object per seed on stdout, sorted by seed (seed,
    /// verdict, failed checks, replay command, virtual time); the text
    /// report goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// Also write JUnit XML to FILE: one test case per seed, the replay
    /// line in a failure's message.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// `rctb sweep merge`.
#[derive(Debug, clap::Subcommand)]
pub enum SweepCommand {
    /// Join the `--json` outputs of a sweep's shards into one report (as one
    /// unsharded run gives); exit 1 when any seed failed, 2 when the files
    /// do not fit together.
    Merge {
        /// The shards' `rctb sweep --json` outputs.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        out: SweepOutput,
    },
}

/// `rctb sweep`: runs the scenario's seeds, or merges shards.
pub fn sweep_main(a: &SweepArgs) -> ExitCode {
    match (&a.command, &a.scenario, a.seeds) {
        (Some(SweepCommand::Merge { files, out }), ..) => merge(files, out),
        (None, Some(path), Some(seeds)) => sweep(path, seeds, a.shard, a.start, a.jobs, &a.out),
        _ => unreachable!("clap requires the scenario and --seeds without a subcommand"),
    }
}

/// Prints `records` as `out` asks, then `summary`; exit 1 when one failed.
fn report(records: &[SeedRecord], summary: &str, out: &SweepOutput) -> ExitCode {
    if let Some(file) = &out.junit
        && let Err(e) = std::fs::write(file, sweep::junit(records))
    {
        eprintln!("rctb: writing {}: {e}", file.display());
        return ExitCode::from(2);
    }
    let text = sweep::failure_text(records);
    if out.json {
        let mut lines = String::new();
        for r in records {
            lines += &r.to_json_line();
            lines.push('\n');
        }
        if std::io::stdout().write_all(lines.as_bytes()).is_err() {
            return ExitCode::from(2);
        }
        eprint!("{text}");
        eprintln!("{summary}");
    } else {
        print!("{text}");
        println!("{summary}");
    }
    if records.iter().all(SeedRecord::passed) { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

fn counts(records: &[SeedRecord]) -> String {
    let failed = records.iter().filter(|r| !r.passed()).count();
    format!("{} passed, {failed} failed", records.len() - failed)
}

/// `rctb sweep merge FILES...`.
fn merge(files: &[PathBuf], out: &SweepOutput) -> ExitCode {
    let mut shards = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let parsed = std::fs::read_to_string(f)
            .map_err(|e| format!("{name}: {e}"))
            .and_then(|text| sweep::parse_records(&name, &text).map_err(|e| e.to_string()));
        match parsed {
            Ok(records) => shards.push((name, records)),
            Err(e) => {
                eprintln!("rctb: sweep merge: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let records = match sweep::merge(shards) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rctb: sweep merge: {e}");
            return ExitCode::from(2);
        }
    };
    let summary = format!(
        "{}: {} seeds (merged from {} files): {}",
        records[0].scenario,
        records.len(),
        files.len(),
        counts(&records)
    );
    report(&records, &summary, out)
}

/// `rctb sweep`: `count` seeds from `start` (shard `shard`) on `jobs` threads.
fn sweep(path: &str, count: u64, shard: Shard, start: u64, jobs: Option<usize>, out: &SweepOutput) -> ExitCode {
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
    let records: Vec<SeedRecord> = results.iter().map(|r| SeedRecord::new(&scenario.name, path, r)).collect();
    let summary =
        format!("{}: {} seeds (shard {shard}, from {start}): {}", scenario.name, records.len(), counts(&records));
    report(&records, &summary, out)
}
