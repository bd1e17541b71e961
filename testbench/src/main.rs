//! `rctb`: run a scenario, or sweep it over many seeds.
//!
//! Exit status: 0 when every expectation held, 1 when one failed, 2 when the
//! scenario could not be used (unreadable, invalid) or output failed.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use rctb::runner;
use rctb::scenario::Scenario;
use rctb::sweep::{self, Shard};

use rctb::cli::{object as object_cli, udp as udp_cli};

/// `rctb --version`: the version, then the backends compiled in.
const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\n", rctb::backends_line!());

#[derive(Debug, Parser)]
#[command(
    name = "rctb",
    version,
    long_version = LONG_VERSION,
    about = "RDMA RC testbench: scenarios on a deterministic RoCEv2 fabric",
    after_help = rctb::cli::backend::SUMMARY
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario once and print its report.
    Run {
        /// The scenario file (TOML).
        scenario: String,
        /// The run's seed (default: the scenario's `seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Write every simulated frame to this pcap file.
        #[arg(long, value_name = "FILE")]
        pcap: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// `sim`: the simulated fabric; `udp`: every node a real UDP endpoint (rctb-udp) at its
        /// scenario address, or where --node puts it (manual connects only).
        #[arg(long, value_enum, default_value_t = Backend::Sim)]
        backend: Backend,
        /// udp: place a node, NAME=ADDR[:PORT][@NETNS] (NETNS: an `ip netns` name); repeatable.
        #[arg(long = "node", value_name = "NAME=ADDR[@NETNS]")]
        nodes: Vec<rctb::udp_run::NodePlace>,
    },
    /// Run a scenario over many seeds; print each failing seed with its replay command.
    Sweep {
        scenario: String,
        /// How many seeds (across all shards).
        #[arg(long)]
        seeds: u64,
        /// Run only shard I of N (1-based), e.g. 2/4.
        #[arg(long, default_value = "1/1")]
        shard: Shard,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Worker threads (default: the machine's parallelism).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Run the RC conformance suite between two endpoints; one PASS/FAIL line per case.
    Conformance {
        /// `sim`: two simulated nodes; `verbs`: two RDMA devices (needs the `verbs` feature);
        /// `udp`: UDP endpoints (IPv4 addresses; default 127.0.0.2 and 127.0.0.1), or one
        /// UDP endpoint and one RDMA device.
        #[arg(long, value_enum, default_value_t = Backend::Sim)]
        backend: Backend,
        /// The requester's device (verbs), e.g. rxe1.
        #[arg(long)]
        device: Option<String>,
        /// The responder's device (verbs), e.g. rxe0.
        #[arg(long)]
        peer: Option<String>,
        /// Run only the cases whose name contains this.
        #[arg(long, default_value = "")]
        filter: String,
        /// The active MTU of udp endpoints (rxe on a 1500-byte link: 1024).
        #[arg(long, default_value_t = 1024)]
        mtu: u32,
    },
    /// List RDMA devices, their ports and GID tables.
    Devices,
    /// The RoCEv2 receive server on a device: counters, rates, per-channel files.
    RoceRx(rctb::cli::roce::args::RoceRxArgs),
    /// A software FPGA engine streaming SEND_WITH_IMM frames (PRBS payload) to roce-rx.
    FpgaEmu(rctb::cli::roce::args::FpgaEmuArgs),
    /// udp backend figures: 1 MiB RDMA WRITE bandwidth (BENCH lines), 64-byte SEND round
    /// trips, CPU time while idle; between UDP endpoints or against an RDMA device.
    UdpBench(udp_cli::BenchArgs),
    /// NVMe-oF/RDMA initiator (nvme-cli-like): discover, connect, identify, read, write, flush.
    Nvme(rctb::cli::nvme::NvmeArgs),
    /// The hipobj gateway: `object serve` (HTTP control plane with SigV4, filesystem objects),
    /// `object put|get` (its client over verbs), `object load` (control-plane load test).
    Object(object_cli::ObjectArgs),
    /// The RC session server (hipobj-rc-v2): `rc-session selftest` runs server and client
    /// in one process over sim or two RDMA devices.
    RcSession(rctb::session_selftest::RcSessionArgs),
    /// Decode the RoCEv2 frames of a pcap (BTH, RETH, AETH, ImmDt, ICRC).
    Decode {
        /// The capture (classic pcap: tcpdump, tshark -F pcap, or `rctb run --pcap`).
        pcap: String,
        /// One JSON object per frame per line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    Sim,
    Verbs,
    Udp,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run { scenario, seed, pcap, json, backend, nodes } => {
            run(&scenario, seed, pcap.as_deref(), json, backend, &nodes)
        }
        Command::Sweep { scenario, seeds, shard, start, jobs } => sweep(&scenario, seeds, shard, start, jobs),
        Command::Conformance { backend, device, peer, filter, mtu } => match backend {
            Backend::Sim => conformance_sim(&filter),
            Backend::Verbs => verbs::conformance(device.as_deref(), peer.as_deref(), &filter),
            Backend::Udp => udp_cli::conformance(device.as_deref(), peer.as_deref(), mtu, &filter),
        },
        Command::Devices => verbs::devices(),
        Command::Decode { pcap, json } => decode(&pcap, json),
        Command::RoceRx(args) => rctb::cli::roce::roce_rx(&args),
        Command::FpgaEmu(args) => rctb::cli::roce::fpga_emu(&args),
        Command::UdpBench(args) => udp_cli::bench(&args),
        Command::Nvme(args) => rctb::cli::nvme::main(&args),
        Command::Object(args) => object_cli::main(&args),
        Command::RcSession(args) => rctb::session_selftest::main(&args),
    }
}

fn load(path: &str) -> Result<Scenario, ExitCode> {
    Scenario::load(path).map_err(|e| {
        eprintln!("rctb: {e}");
        ExitCode::from(2)
    })
}

fn run(
    path: &str,
    seed: Option<u64>,
    pcap: Option<&str>,
    json: bool,
    backend: Backend,
    nodes: &[rctb::udp_run::NodePlace],
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
        Backend::Udp => rctb::udp_run::run(&scenario, seed, pcap.is_some(), nodes).map_err(|e| e.to_string()),
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

fn sweep(path: &str, count: u64, shard: Shard, start: u64, jobs: Option<usize>) -> ExitCode {
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

fn decode(path: &str, json: bool) -> ExitCode {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rctb: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let frames = match rctb::decode::pcap(&bytes) {
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

/// Runs the suite and prints a line per case and the closing count.
fn conformance_report<T: rctb_core::Transport>(a: &mut T, b: &mut T, filter: &str) -> ExitCode {
    let results = rctb::conformance::run(a, b, filter, &mut |r| println!("{}", r.line()));
    let failed = results.iter().filter(|r| !r.passed()).count();
    println!("conformance: {} passed, {} failed", results.len() - failed, failed);
    if results.is_empty() {
        eprintln!("rctb: no conformance case matches {filter:?}");
        return ExitCode::from(2);
    }
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

fn conformance_sim(filter: &str) -> ExitCode {
    use rctb_sim::{NodeConfig, Sim};
    let sim = Sim::new(1);
    let mtu = rctb_core::transport::Mtu::Mtu1024;
    let nodes = ["10.10.0.2", "10.10.0.1"].map(|ip| {
        let name = if ip.ends_with('2') { "sim1" } else { "sim0" };
        sim.add_node(NodeConfig { mtu, ..NodeConfig::new(name, ip.parse().expect("a literal address")) })
    });
    let [Ok(a), Ok(b)] = nodes else {
        eprintln!("rctb: building the simulated pair failed");
        return ExitCode::from(2);
    };
    conformance_report(&mut sim.transport(a), &mut sim.transport(b), filter)
}

/// The verbs backend's front ends.
#[cfg(feature = "verbs")]
mod verbs {
    use std::process::ExitCode;

    use rctb_core::transport::TransportError;
    use rctb_hw::VerbsTransport;

    pub fn conformance(device: Option<&str>, peer: Option<&str>, filter: &str) -> ExitCode {
        let (Some(device), Some(peer)) = (device, peer) else {
            eprintln!("rctb: --backend verbs needs --device (requester) and --peer (responder), e.g. rxe1 rxe0");
            return ExitCode::from(2);
        };
        let open = |name: &str| {
            VerbsTransport::open(name).map_err(|e| {
                eprintln!("rctb: opening {name}: {e}");
                ExitCode::from(2)
            })
        };
        let (mut a, mut b) = match (open(device), open(peer)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        super::conformance_report(&mut a, &mut b, filter)
    }

    pub fn devices() -> ExitCode {
        let devices = match rctb_hw::list_devices() {
            Ok(d) => d,
            Err(TransportError::NoDevice { .. }) => Vec::new(),
            Err(e) => {
                eprintln!("rctb: {e}");
                return ExitCode::from(2);
            }
        };
        if devices.is_empty() {
            println!("no RDMA devices: {}", rctb_hw::NO_DEVICE_HINT);
            return ExitCode::from(2);
        }
        for d in &devices {
            println!(
                "{}  max_qp_wr {}  max_sge {}  max_mr_size {}",
                d.name, d.device.max_qp_wr, d.device.max_sge, d.device.max_mr_size
            );
            for p in &d.ports {
                println!(
                    "  port {}  {:?}  active_mtu {}  max_mtu {}",
                    p.port,
                    p.state,
                    p.active_mtu.bytes(),
                    p.max_mtu.bytes()
                );
                for g in &p.gids {
                    let kind = match g.gid_type {
                        rctb_core::transport::GidType::RoceV1 => "RoCE v1",
                        rctb_core::transport::GidType::RoceV2 => "RoCE v2",
                    };
                    let ip = g.gid.to_ipv4().map(|ip| format!("  ({ip})")).unwrap_or_default();
                    println!("    gid[{}] {}  {kind}{ip}", g.index, g.gid);
                }
            }
        }
        ExitCode::SUCCESS
    }
}

/// Without the `verbs` feature, the verbs front ends explain how to get it.
#[cfg(not(feature = "verbs"))]
mod verbs {
    use std::process::ExitCode;

    use rctb::cli::backend::NO_VERBS as HOW;

    pub fn conformance(_device: Option<&str>, _peer: Option<&str>, _filter: &str) -> ExitCode {
        eprintln!("rctb: {HOW}");
        ExitCode::from(2)
    }

    pub fn devices() -> ExitCode {
        println!("no RDMA devices: {HOW}");
        ExitCode::from(2)
    }
}
