//! The `rctb` command line: the argument tree and the dispatch. Each
//! subcommand group is a module of [`crate::cli`]:
//!
//! - `run`, `sweep`: `cli::scenario` (the scenario engine's front end).
//! - `conformance`: `cli::conformance` (sim, verbs), `cli::udp` (udp).
//! - `devices`: `cli::devices`.
//! - `roce-rx`, `fpga-emu`: `cli::roce`.
//! - `udp-bench`: `cli::udp`.
//! - `nvme`: `cli::nvme`.
//! - `object`: `cli::object`.
//! - `rc-session`: `cli::rc_session`.
//! - `decode`: `cli::decode`.
//!
//! Every front end opens its backend through `cli::backend`.
//!
//! Exit status: 0 when every expectation (case, transfer) held, 1 when one
//! failed, 2 when the input could not be used (unreadable, invalid, a
//! backend this build lacks) or output failed.

use std::process::ExitCode;

use crate::cli::{self, backend::Backend};
use clap::{Parser, Subcommand};

/// `rctb --version`: the version, then the backends compiled in.
const LONG_VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), "\n", crate::backends_line!(), "\n", crate::stores_line!());

#[derive(Debug, Parser)]
#[command(
    name = "rctb",
    version,
    long_version = LONG_VERSION,
    about = "RDMA RC testbench: scenarios on a deterministic RoCEv2 fabric",
    after_help = cli::backend::SUMMARY
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
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
        /// udp: place a node, `NAME=ADDR[:PORT][@NETNS]` (NETNS: an `ip netns` name); repeatable.
        #[arg(long = "node", value_name = "NAME=ADDR[@NETNS]")]
        nodes: Vec<rctb_scenario::udp_run::NodePlace>,
    },
    /// Run a scenario over many seeds; print each failing seed with its replay command
    /// (`--json`, `--junit FILE` for CI; `rctb sweep merge` joins shards).
    Sweep(cli::scenario::SweepArgs),
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
    RoceRx(cli::roce::args::RoceRxArgs),
    /// A software FPGA engine streaming SEND_WITH_IMM frames (PRBS payload) to roce-rx.
    FpgaEmu(cli::roce::args::FpgaEmuArgs),
    /// udp backend figures: 1 MiB RDMA WRITE bandwidth (BENCH lines), 64-byte SEND round
    /// trips, CPU time while idle; between UDP endpoints or against an RDMA device.
    UdpBench(cli::udp::BenchArgs),
    /// NVMe-oF/RDMA initiator (nvme-cli-like): discover, connect, identify, read, write, flush.
    Nvme(cli::nvme::NvmeArgs),
    /// The hipobj gateway: `object serve` (HTTP control plane with SigV4, filesystem objects),
    /// `object put|get` (its client over verbs), `object load` (control-plane load test).
    Object(cli::object::ObjectArgs),
    /// The RC session server (hipobj-rc-v2): `rc-session selftest` runs server and client
    /// in one process over sim or two RDMA devices.
    RcSession(cli::rc_session::RcSessionArgs),
    /// Decode the RoCEv2 frames of a pcap (BTH, RETH, AETH, ImmDt, ICRC).
    Decode {
        /// The capture (classic pcap: tcpdump, tshark -F pcap, or `rctb run --pcap`).
        pcap: String,
        /// One JSON object per frame per line.
        #[arg(long)]
        json: bool,
    },
}

impl Cli {
    /// Runs the subcommand and returns the exit status (see the module
    /// docs).
    pub fn run(self) -> ExitCode {
        match self.command {
            Command::Run { scenario, seed, pcap, json, backend, nodes } => {
                cli::scenario::run(&scenario, seed, pcap.as_deref(), json, backend, &nodes)
            }
            Command::Sweep(args) => cli::scenario::sweep_main(&args),
            Command::Conformance { backend, device, peer, filter, mtu } => match backend {
                Backend::Sim => cli::conformance::sim(&filter),
                Backend::Verbs => cli::conformance::verbs(device.as_deref(), peer.as_deref(), &filter),
                Backend::Udp => cli::udp::conformance(device.as_deref(), peer.as_deref(), mtu, &filter),
            },
            Command::Devices => cli::devices::main(),
            Command::Decode { pcap, json } => cli::decode::decode(&pcap, json),
            Command::RoceRx(args) => cli::roce::roce_rx(&args),
            Command::FpgaEmu(args) => cli::roce::fpga_emu(&args),
            Command::UdpBench(args) => cli::udp::bench(&args),
            Command::Nvme(args) => cli::nvme::main(&args),
            Command::Object(args) => cli::object::main(&args),
            Command::RcSession(args) => cli::rc_session::main(&args),
        }
    }
}
