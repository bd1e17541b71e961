//! `rctb rc-session selftest`: the front end of [`rctb_scenario::session_selftest`]
//! (its arguments, the backend it opens, the lines it prints). Exit status:
//! 0 when every run passed, 1 when one failed, 2 when it could not run.

use rctb_core::rcsession::ServerConfig;
use rctb_core::time::Duration;

use crate::cli::backend;
use rctb_scenario::session_selftest::{OpMix, SelftestConfig, SelftestReport, parse_size, run, run_sim};

/// Backends of `rctb rc-session selftest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SelftestBackend {
    /// Two simulated nodes (server 10.10.0.1, client 10.10.0.2, MTU 1024).
    Sim,
    /// Two RDMA devices: the client on --device, the server on --peer.
    Verbs,
}

/// `rctb rc-session`.
#[derive(Debug, clap::Args)]
pub struct RcSessionArgs {
    #[command(subcommand)]
    pub command: RcSessionCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum RcSessionCommand {
    /// Session server and client in one process: GET and PUT transfers over RC,
    /// every byte checked, every session reaped.
    Selftest(SelftestArgs),
}

/// `rctb rc-session selftest`.
#[derive(Clone, Debug, clap::Args)]
pub struct SelftestArgs {
    #[arg(long, value_enum, default_value_t = SelftestBackend::Sim)]
    pub backend: SelftestBackend,
    /// The client's device (verbs), e.g. rxe1.
    #[arg(long)]
    pub device: Option<String>,
    /// The server's device (verbs), e.g. rxe0.
    #[arg(long)]
    pub peer: Option<String>,
    /// GID index of both devices (the IPv4-mapped RoCE v2 entry; rxe: 1).
    #[arg(long, default_value_t = 1)]
    pub gid_index: u32,
    #[arg(long, default_value_t = 1000)]
    pub transfers: u64,
    /// Smallest object (bytes; suffixes K, KiB, M, MiB).
    #[arg(long, default_value = "1", value_parser = parse_size)]
    pub min_size: u64,
    /// Largest object.
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub max_size: u64,
    /// The largest drawn size (log-uniform in min..=draw-max after the edges
    /// min and max; default max-size): fewer big objects on a slow link.
    #[arg(long, value_parser = parse_size)]
    pub draw_max: Option<u64>,
    /// Every object this size (instead of log-uniform sizes in min..=max).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    #[arg(long, value_enum, default_value_t = Ops::Mixed)]
    pub ops: Ops,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Sessions in flight at once (one client QP each).
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Do not check the data (a benchmark).
    #[arg(long)]
    pub no_verify: bool,
    /// Spin on the completion queues instead of sleeping (verbs).
    #[arg(long)]
    pub busy_poll: bool,
    /// Runs (each a fresh server and clients); with --bench one BENCH line each.
    #[arg(long, default_value_t = 1)]
    pub reps: u32,
    /// Print `BENCH <WORKLOAD> <TOOL> <MB/s> MB/s` after each run (MB = 2^20,
    /// as perftest), e.g. write_bw-1MiB.
    #[arg(long, value_name = "WORKLOAD")]
    pub bench: Option<String>,
    /// The tool column of the BENCH lines.
    #[arg(long, default_value = "rctb-session")]
    pub bench_tool: String,
    /// Give up after this long (transport time: virtual on sim).
    #[arg(long, default_value = "600s", value_parser = rctb_scenario::scenario::parse_duration)]
    pub time_limit: Duration,
}

impl SelftestArgs {
    pub fn config(&self) -> SelftestConfig {
        SelftestConfig {
            transfers: self.transfers,
            min_size: self.min_size,
            max_size: self.max_size,
            fixed_size: self.size,
            draw_max: self.draw_max,
            ops: self.ops.into(),
            seed: self.seed,
            depth: self.depth,
            verify: !self.no_verify,
            busy_poll: self.busy_poll,
            time_limit: self.time_limit,
            server: {
                let mut server_config = ServerConfig::default();
                server_config.gid_index = self.gid_index;
                server_config
            },
            client_gid_index: self.gid_index,
        }
    }
}

/// Runs one selftest on two RDMA devices: the server on `peer`, the client
/// on `device` (opened in this order).
fn run_verbs(device: &str, peer: &str, cfg: &SelftestConfig) -> Result<SelftestReport, String> {
    let verbs = backend::verbs().map_err(|e| e.to_string())?;
    let open = |name: &str| verbs.open(name).map_err(|e| e.to_string());
    run(open(peer)?, || open(device), cfg)
}

/// `rctb rc-session ...`: exit 0 when every run passed, 1 when one failed, 2
/// when it could not run.
pub fn main(args: &RcSessionArgs) -> std::process::ExitCode {
    use std::process::ExitCode;
    let RcSessionCommand::Selftest(a) = &args.command;
    let cfg = a.config();
    let (device, peer) = match a.backend {
        SelftestBackend::Sim => ("sim1".to_string(), "sim0".to_string()),
        SelftestBackend::Verbs => match (&a.device, &a.peer) {
            (Some(d), Some(p)) => (d.clone(), p.clone()),
            _ => {
                eprintln!("rctb rc-session selftest: --backend verbs needs --device (client) and --peer (server)");
                return ExitCode::from(2);
            }
        },
    };
    let sizes = match cfg.fixed_size {
        Some(s) => format!("{s} bytes"),
        None => match cfg.draw_max.filter(|d| *d < cfg.max_size) {
            Some(d) => format!("{} and {} bytes, then {}..={d} log-uniform", cfg.min_size, cfg.max_size, cfg.min_size),
            None => format!("{}..={} bytes, log-uniform", cfg.min_size, cfg.max_size),
        },
    };
    println!(
        "rc-session selftest: server on {peer}, client on {device}, {} transfers ({:?}), {sizes}, depth {}, seed {}",
        cfg.transfers, cfg.ops, cfg.depth, cfg.seed
    );
    let mut all_passed = true;
    for rep in 0..a.reps.max(1) {
        let cfg = SelftestConfig { seed: cfg.seed.wrapping_add(u64::from(rep)), ..cfg.clone() };
        let report = match a.backend {
            SelftestBackend::Sim => run_sim(&cfg),
            SelftestBackend::Verbs => run_verbs(&device, &peer, &cfg),
        };
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                eprintln!("rctb rc-session selftest: {e}");
                return ExitCode::from(2);
            }
        };
        print!("{}", report.text());
        if let Some(w) = &a.bench {
            println!("BENCH {w} {} {:.1} MB/s", a.bench_tool, report.mib_per_sec());
        }
        let failures = report.failures(&cfg);
        for f in &failures {
            println!("failed: {f}");
        }
        println!(
            "RESULT {} transfers={} gets={} puts={} bytes={} mismatches={} errors={} busy={} held={} leaked={}",
            if failures.is_empty() { "PASS" } else { "FAIL" },
            report.transfers(),
            report.gets,
            report.puts,
            report.bytes,
            report.mismatches,
            report.errors.len(),
            report.busy,
            report.usage_after.sessions + report.sessions_after as u32,
            report.usage_after.leaked_mrs + report.usage_after.leaked_qps
        );
        if !failures.is_empty() {
            all_passed = false;
            if a.backend == SelftestBackend::Sim {
                eprintln!(
                    "rctb: replay: rctb rc-session selftest --backend sim --transfers {} --seed {}",
                    cfg.transfers, cfg.seed
                );
            }
        }
    }
    if all_passed { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// `--ops`: the selftest's [`OpMix`], as clap names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Ops {
    /// GET and PUT, drawn per transfer.
    Mixed,
    /// Only GETs.
    Get,
    /// Only PUTs.
    Put,
}

impl From<Ops> for OpMix {
    fn from(o: Ops) -> OpMix {
        match o {
            Ops::Mixed => OpMix::Mixed,
            Ops::Get => OpMix::Get,
            Ops::Put => OpMix::Put,
        }
    }
}
