//! `rctb nvme`: an nvme-cli-like front end of the NVMe-oF/RDMA initiator
//! (`rctb_core::nvmeof`), on the simulator (a target model on a second
//! node), on a UDP endpoint (`--backend udp --device ADDR`: RDMA CM and RC
//! over a socket, no RDMA on this machine) or on an RDMA device
//! (`--features verbs`); and `rctb nvme target`, the target model served
//! on a UDP endpoint ([`super::nvme_target`]).
//!
//! `discover`, `connect`, `identify`, `read`, `write`, `flush`, with
//! nvme-cli's `-a` (address), `-s` (service id, the port) and `-n` (NQN).
//! Each invocation connects, does its one thing, and disconnects cleanly.
//! Exit status: 0 on success, 1 when the operation failed (the error says
//! why), 2 on a usage error.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use clap::{Args, Subcommand, ValueEnum};
use rctb_core::Transport;
use rctb_core::nvmeof::protocol::*;
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig, NvmeError, discover};
use rctb_core::time::Duration;
use rctb_core::transport::{DEFAULT_SPIN, Mtu, PollMode, PollModeName};
use rctb_models::nvme::{NvmeTarget, TargetConfig};
use rctb_sim::{NodeConfig, Sim, SimTransport};
use rctb_udp::UdpTransport;

use crate::cli::backend;
use crate::cli::jobs::{self, Job};

/// The subsystem NQN of the simulated target.
pub const SIM_NQN: &str = "nqn.2026-01.io.rctb:sim-target";
/// The simulated target's address (the host is 10.0.0.1).
pub const SIM_TARGET_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NvmeBackend {
    /// A simulated target (two namespaces: 512-byte and 4096-byte blocks).
    Sim,
    /// An RDMA device of this machine (build with `--features verbs`).
    Verbs,
    /// A UDP endpoint of this machine (`--device ADDR[:PORT]`), no RDMA needed.
    Udp,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub struct Common {
    #[arg(long, value_enum, default_value_t = NvmeBackend::Sim, global = true)]
    pub backend: NvmeBackend,
    /// The local RDMA device (verbs), e.g. rxe1, or the UDP endpoint's
    /// address (udp), e.g. 10.10.2.2 or 10.10.2.2:4791.
    #[arg(long, global = true)]
    pub device: Option<String>,
    /// The UDP endpoint's active MTU (udp): 1024 fits a 1500-byte link.
    #[arg(long, default_value_t = 1024, global = true)]
    pub mtu: u32,
    /// Transport address of the target (default on sim: 10.0.0.2).
    #[arg(short = 'a', long = "traddr", global = true)]
    pub traddr: Option<Ipv4Addr>,
    /// Transport service id (port; default 4420).
    #[arg(short = 's', long = "trsvcid", global = true)]
    pub trsvcid: Option<u16>,
    /// Subsystem NQN (default on sim: the simulated target's).
    #[arg(short = 'n', long = "nqn", global = true)]
    pub nqn: Option<String>,
    /// Host NQN (default: derived from the host id).
    #[arg(short = 'q', long = "hostnqn", global = true)]
    pub hostnqn: Option<String>,
    /// Host id: 32 hex digits (default: a fixed rctb id).
    #[arg(short = 'I', long = "hostid", global = true)]
    pub hostid: Option<String>,
    /// I/O queue depth asked for.
    #[arg(short = 'Q', long = "queue-size", default_value_t = 128, global = true)]
    pub queue_depth: u16,
    /// I/O queues asked for (>= 1), each its own QP; `bench` spreads its
    /// reads over them round-robin (--qd in flight in all, so about qd/N per
    /// queue).
    #[arg(short = 'i', long = "nr-io-queues", default_value_t = 1, global = true)]
    pub io_queues: u16,
    /// How the initiator waits for completions: event (arm the CQs and
    /// sleep on their completion channels when nothing is ready; the
    /// default), busy (poll without sleeping, a whole CPU) or adaptive
    /// (poll, and sleep after --spin empty polls in a row).
    #[arg(long, global = true, value_parser = super::roce::args::poll_name, value_name = "busy|adaptive|event")]
    pub poll: Option<PollModeName>,
    /// Empty polls adaptive polling spins through before it sleeps (>= 1).
    #[arg(long, global = true, default_value_t = DEFAULT_SPIN, value_name = "N")]
    pub spin: u32,
    /// Keep-alive timeout in seconds (0: off).
    #[arg(short = 'k', long = "keep-alive-tmo", default_value_t = 0, global = true)]
    pub keep_alive: u64,
    /// Per-command timeout in seconds.
    #[arg(long, default_value_t = 10, global = true)]
    pub timeout: u64,
    /// Seed of the simulated fabric (default 1), or of `target`'s random faults.
    #[arg(long, global = true)]
    pub seed: Option<u64>,
    /// Pin the initiator's polling thread to these CPUs (`0` or `0,1`), as
    /// SPDK pins its reactors and fio its jobs with `cpus_allowed`; with
    /// `bench --jobs N`, job i runs on the i-th CPU of the list alone
    /// (round-robin). On soft-RoCE a pin also keeps each QP's packets in
    /// order: rxe sends from the CPU that rings the doorbell, and a thread
    /// that migrates sends one QP's packets through two CPUs' network
    /// backlogs, which can reorder them into retransmissions. Default: not
    /// pinned.
    #[arg(long, global = true, value_name = "LIST", value_delimiter = ',')]
    pub cpu: Vec<usize>,
}

#[derive(Debug, Args)]
pub struct NvmeArgs {
    #[command(subcommand)]
    pub op: NvmeOp,
    #[command(flatten)]
    pub common: Common,
}

/// What to transfer.
#[derive(Debug, Args)]
pub struct Io {
    /// Namespace id.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Starting block.
    #[arg(long, default_value_t = 0)]
    pub slba: u64,
    /// Bytes (a multiple of the block size; default: the data file's size, or one block).
    #[arg(long)]
    pub length: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum NvmeOp {
    /// Read the discovery log page (like `nvme discover`).
    Discover,
    /// Connect, print the controller, and disconnect.
    Connect,
    /// Identify the controller and every active namespace (or --nsid).
    Identify {
        #[arg(long)]
        nsid: Option<u32>,
    },
    /// Read blocks into a file (or print their FNV-1a checksum).
    Read {
        #[command(flatten)]
        io: Io,
        /// Write the data here.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Write blocks from a file (or a pattern when no file is given).
    Write {
        #[command(flatten)]
        io: Io,
        /// The data to write.
        #[arg(short = 'd', long)]
        data: Option<PathBuf>,
        /// Flush after writing.
        #[arg(long)]
        flush: bool,
    },
    /// Reads at a queue depth, random or sequential; prints a `BENCH` line
    /// (IOPS) as the VM bench table expects, e.g. `BENCH
    /// nvme-randread-4KiB-qd32 rctb 1650 IOPS` or `BENCH
    /// nvme-seqread-1MiB-qd1 rctb 9 IOPS`.
    Bench {
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// Bytes per read (a multiple of the block size).
        #[arg(long, default_value_t = 4096)]
        bs: u64,
        /// Where the reads start: rand (a seeded generator's whole extents of
        /// --bs) or seq (consecutive extents from block 0, wrapping at the
        /// namespace's end).
        #[arg(long, value_enum, default_value_t = Pattern::Rand)]
        pattern: Pattern,
        /// Reads in flight.
        #[arg(long, default_value_t = 32)]
        qd: usize,
        /// Reads in all.
        #[arg(long, default_value_t = 2000)]
        ios: u64,
        /// Initiators, each on its own thread with its own controller
        /// (admin queue, -i I/O queues, QPs), started together; --qd and
        /// --ios are split over them, and the BENCH line counts every
        /// read over the slowest job's time. With --cpu, job i is pinned
        /// to the list's i-th CPU, as the kernel host keeps a queue per CPU.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
    },
    /// Commit the namespace's volatile writes.
    Flush {
        #[arg(long, default_value_t = 1)]
        nsid: u32,
    },
    /// Serve the NVMe-oF target model for a real host (`nvme connect -t
    /// rdma -a ADDR -n NQN`) on a UDP endpoint (`--backend udp --device
    /// ADDR`) or an RDMA device (`--backend verbs --device rxe0`).
    Target(super::nvme_target::TargetArgs),
}

/// Where `bench` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Whole extents of `--bs` picked by a seeded generator.
    Rand,
    /// Consecutive extents of `--bs` from block 0, wrapping at the end.
    Seq,
}

/// Why a command failed.
#[derive(Debug)]
pub enum Failure {
    Usage(String),
    Nvme(NvmeError),
    Io(String),
    /// A job of `bench --jobs` that stopped at the start because another
    /// failed (that one's failure is reported).
    Stopped,
}

impl From<NvmeError> for Failure {
    fn from(e: NvmeError) -> Self {
        Failure::Nvme(e)
    }
}

/// Runs `rctb nvme`.
pub fn main(a: &NvmeArgs) -> ExitCode {
    let r = pin_cpus(&a.common.cpu).and_then(|()| match (&a.op, a.common.backend) {
        (NvmeOp::Target(t), _) => super::nvme_target::serve(&a.common, t),
        (_, NvmeBackend::Sim) => run_sim(a),
        (_, NvmeBackend::Verbs) => run_verbs(a),
        (_, NvmeBackend::Udp) => run_udp(a),
    });
    match r {
        Ok(lines) => {
            print!("{lines}");
            ExitCode::SUCCESS
        }
        Err(Failure::Usage(m)) => {
            eprintln!("rctb nvme: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Nvme(e)) => {
            eprintln!("rctb nvme: {e}");
            ExitCode::from(1)
        }
        Err(Failure::Io(m)) => {
            eprintln!("rctb nvme: {m}");
            ExitCode::from(1)
        }
        Err(Failure::Stopped) => {
            eprintln!("rctb nvme: every job stopped at the start");
            ExitCode::from(1)
        }
    }
}

/// `--cpu LIST`: restricts the calling thread, and so every job thread it
/// starts, to those CPUs.
fn pin_cpus(cpus: &[usize]) -> Result<(), Failure> {
    jobs::pin(cpus).map_err(pin_failure)
}

fn pin_failure(e: jobs::PinError) -> Failure {
    match e {
        jobs::PinError::Usage(m) => Failure::Usage(m),
        jobs::PinError::Os(m) => Failure::Io(m),
    }
}

fn run_sim(a: &NvmeArgs) -> Result<String, Failure> {
    if poll_mode(&a.common)? == PollMode::Busy {
        // Virtual time passes only while someone waits: a lone busy poller
        // would spin at one instant for ever.
        return Err(Failure::Usage(
            "--poll busy: the simulator's time passes only in waits; use --poll adaptive or event with --backend sim"
                .into(),
        ));
    }
    // Each job has a fabric and target of its own (job i seeded seed + i):
    // a simulated world lives on one thread.
    run_jobs(a, |job| {
        let sim = Sim::new(a.common.seed.unwrap_or(1).wrapping_add(job.index as u64));
        let host = sim.add_node(NodeConfig::new("host", Ipv4Addr::new(10, 0, 0, 1))).expect("fresh fabric");
        let tn = sim.add_node(NodeConfig::new("target", SIM_TARGET_IP)).expect("fresh fabric");
        let target = NvmeTarget::new(TargetConfig::new(SIM_NQN), SIM_TARGET_IP).expect("default config is valid");
        let target = Rc::new(RefCell::new(target));
        let actor = target.clone();
        sim.add_actor(tn, Box::new(move |t: &mut SimTransport| actor.borrow_mut().run(t)));
        run(sim.transport(host), a, job, SIM_TARGET_IP, SIM_NQN)
    })
}

fn run_verbs(a: &NvmeArgs) -> Result<String, Failure> {
    let verbs = backend::verbs().map_err(|e| Failure::Usage(e.to_string()))?;
    let device =
        a.common.device.as_deref().ok_or_else(|| Failure::Usage("--backend verbs needs --device, e.g. rxe1".into()))?;
    let addr = a.common.traddr.ok_or_else(|| Failure::Usage("--backend verbs needs -a/--traddr".into()))?;
    run_jobs(a, |job| {
        let t = verbs.open(device).map_err(|e| Failure::Io(e.to_string()))?;
        run(t, a, job, addr, "")
    })
}

fn run_udp(a: &NvmeArgs) -> Result<String, Failure> {
    if let NvmeOp::Bench { jobs: jobs @ 2.., .. } = a.op {
        return Err(Failure::Usage(format!(
            "--jobs {jobs} with --backend udp: a UDP endpoint is one address and port, one initiator; run a process per address"
        )));
    }
    let (t, _) = udp_endpoint(&a.common, "host", "--backend udp")?;
    let addr = a.common.traddr.ok_or_else(|| Failure::Usage("--backend udp needs -a/--traddr".into()))?;
    render(a, vec![run(t, a, &mut Job::single(), addr, "")])
}

/// What one initiator did: text to print, or a bench run to sum up.
enum Outcome {
    Text(String),
    Bench(BenchRun),
}

/// One job's `bench` reads.
struct BenchRun {
    ios: u64,
    qd: usize,
    elapsed: Duration,
    queues: usize,
    poll: PollMode,
    /// ", pinned to CPU N" when `--cpu` was given, as the job's thread has it.
    pinned: String,
}

/// Runs `f` as `bench --jobs N` says (one job otherwise), each job pinned
/// as `--cpu` says, and renders what they did.
fn run_jobs(a: &NvmeArgs, f: impl Fn(&mut Job<'_>) -> Result<Outcome, Failure> + Sync) -> Result<String, Failure> {
    let count = match a.op {
        NvmeOp::Bench { jobs, qd, ios, .. } => {
            if jobs == 0 {
                return Err(Failure::Usage("--jobs 0: at least one job".into()));
            }
            // (One job: --qd 0 and --ios 0 are the bench's own errors.)
            if jobs > 1 && (qd < jobs || ios < jobs as u64) {
                return Err(Failure::Usage(format!(
                    "--jobs {jobs}: more jobs than --qd {qd} or --ios {ios} (each job needs reads to do and one in flight)"
                )));
            }
            jobs
        }
        _ => 1,
    };
    // One job keeps the calling thread, pinned by main to all of --cpu;
    // several take one CPU of it each.
    let cpus = if count > 1 { &a.common.cpu[..] } else { &[] };
    render(a, jobs::run(count, cpus, pin_failure, f))
}

/// The text of a run: one job's as it is, or `bench`'s summed over its
/// jobs; the first failure when a job failed (a usage error before any
/// other, then the one that stopped the rest, named by its job).
fn render(a: &NvmeArgs, results: Vec<Result<Outcome, Failure>>) -> Result<String, Failure> {
    let many = results.len() > 1;
    let mut runs = Vec::with_capacity(results.len());
    let mut failed: Option<Failure> = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(Outcome::Text(t)) => return Ok(t),
            Ok(Outcome::Bench(b)) => runs.push(b),
            Err(e @ Failure::Usage(_)) => return Err(e),
            Err(Failure::Stopped) if failed.is_some() => {}
            Err(e) if failed.is_none() || matches!(failed, Some(Failure::Stopped)) => {
                failed = Some(match e {
                    Failure::Nvme(e) if many => Failure::Io(format!("job {i}: {e}")),
                    Failure::Io(m) if many => Failure::Io(format!("job {i}: {m}")),
                    e => e,
                });
            }
            Err(_) => {}
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let NvmeOp::Bench { nsid, bs, pattern, qd, ios, .. } = a.op else {
        unreachable!("only bench runs several jobs or returns a bench run")
    };
    let elapsed = runs.iter().map(|r| r.elapsed).max().unwrap_or(Duration::ZERO);
    let iops = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let size = if bs % (1 << 20) == 0 {
        format!("{}MiB", bs >> 20)
    } else if bs % 1024 == 0 {
        format!("{}KiB", bs / 1024)
    } else {
        format!("{bs}B")
    };
    let (kind, words) = match pattern {
        Pattern::Rand => ("randread", "random"),
        Pattern::Seq => ("seqread", "sequential"),
    };
    let mut out = String::new();
    let _ = writeln!(out, "BENCH nvme-{kind}-{size}-qd{qd} rctb {:.0} IOPS", iops(ios, elapsed));
    let first = &runs[0];
    if let [one] = &runs[..] {
        let _ = writeln!(
            out,
            "{ios} {words} {bs}-byte reads of nsid {nsid} at depth {qd} over {} I/O queues ({} polling{}) in {elapsed:?}",
            one.queues,
            poll_name(one.poll),
            one.pinned,
        );
    } else {
        let _ = writeln!(
            out,
            "{ios} {words} {bs}-byte reads of nsid {nsid} at depth {qd} in {} jobs, each its own controller over {} I/O queues ({} polling), in {elapsed:?} (the slowest job's)",
            runs.len(),
            first.queues,
            poll_name(first.poll),
        );
        for (i, r) in runs.iter().enumerate() {
            let _ = writeln!(
                out,
                "job {i}: {} reads at depth {} in {:?}: {:.0} IOPS{}",
                r.ios,
                r.qd,
                r.elapsed,
                iops(r.ios, r.elapsed),
                r.pinned
            );
        }
    }
    Ok(out)
}

/// The UDP endpoint `--device ADDR[:PORT]` and `--mtu` name, bound as
/// `name`; `who` says which option wanted it when `--device` is missing.
pub(super) fn udp_endpoint(c: &Common, name: &str, who: &str) -> Result<(UdpTransport, SocketAddrV4), Failure> {
    let device = c.device.as_deref().ok_or_else(|| Failure::Usage(format!("{who} needs --device ADDR[:PORT]")))?;
    let Some(at) = backend::Endpoint::udp(device) else {
        return Err(Failure::Usage(format!("--device {device:?}: an IPv4 address or ADDR:PORT (the UDP endpoint)")));
    };
    let mtu = Mtu::from_bytes(c.mtu).map_err(|e| Failure::Usage(format!("--mtu: {e}")))?;
    let t = UdpTransport::bind(backend::udp_config(name, at, mtu)).map_err(|e| Failure::Io(e.to_string()))?;
    Ok((t, at))
}

fn host_id(c: &Common) -> Result<[u8; 16], Failure> {
    let Some(text) = &c.hostid else { return Ok(*b"rctb-nvme-host01") };
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return Err(Failure::Usage(format!("--hostid {text:?}: 32 hex digits")));
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| Failure::Usage(format!("--hostid {text:?}: not hex")))?;
    }
    Ok(id)
}

fn run<T: Transport>(
    mut t: T,
    a: &NvmeArgs,
    job: &mut Job<'_>,
    default_addr: Ipv4Addr,
    default_nqn: &str,
) -> Result<Outcome, Failure> {
    let c = &a.common;
    let addr = SocketAddrV4::new(c.traddr.unwrap_or(default_addr), c.trsvcid.unwrap_or(NVME_RDMA_PORT));
    let hid = host_id(c)?;
    let timeout = Duration::from_secs(c.timeout.max(1));
    if let NvmeOp::Discover = a.op {
        let log = discover(&mut t, addr, hid, timeout)?;
        return Ok(Outcome::Text(discovery_text(&log)));
    }
    let nqn =
        c.nqn.clone().filter(|s| !s.is_empty()).or_else(|| (!default_nqn.is_empty()).then(|| default_nqn.to_string()));
    let nqn = nqn.ok_or_else(|| Failure::Usage("-n/--nqn: which subsystem?".into()))?;
    let subnqn = Nqn::new(nqn.clone()).map_err(|e| Failure::Usage(format!("-n {nqn:?}: {e}")))?;
    let mut cfg = ControllerConfig::new(addr, subnqn, hid);
    if let Some(h) = &c.hostnqn {
        cfg.hostnqn = Nqn::new(h.clone()).map_err(|e| Failure::Usage(format!("--hostnqn {h:?}: {e}")))?;
    }
    cfg.queue_depth = c.queue_depth.clamp(MIN_QUEUE_DEPTH, MAX_QUEUE_DEPTH);
    if c.io_queues == 0 {
        return Err(Failure::Usage("-i/--nr-io-queues 0: at least one I/O queue".into()));
    }
    cfg.io_queues = c.io_queues;
    let mode = poll_mode(c)?;
    cfg.keep_alive = Duration::from_secs(c.keep_alive);
    cfg.timeout = timeout;
    let mut ctrl = Controller::connect(t, cfg).map_err(|e| Failure::Nvme(e.into_error()))?;
    ctrl.set_poll_mode(mode);
    let r = op(&mut ctrl, &a.op, job, !c.cpu.is_empty());
    ctrl.close();
    r
}

/// The polling mode `--poll` and `--spin` say.
pub(super) fn poll_mode(c: &Common) -> Result<PollMode, Failure> {
    PollMode::from_name(c.poll.unwrap_or_default(), c.spin).map_err(|e| Failure::Usage(format!("--{}: {e}", e.field)))
}

fn op<T: Transport>(ctrl: &mut Controller<T>, op: &NvmeOp, job: &mut Job<'_>, pin: bool) -> Result<Outcome, Failure> {
    let mut out = String::new();
    match op {
        NvmeOp::Discover => unreachable!("handled before connecting"),
        NvmeOp::Connect => {
            let i = ctrl.info();
            let _ = writeln!(
                out,
                "connected: {} cntlid {} ({} {}, fw {})",
                i.subnqn,
                ctrl.cntlid(),
                i.model,
                i.serial,
                i.firmware
            );
            let queues = ctrl.io_queues();
            let _ = writeln!(
                out,
                "io queues: {} x depth {}; max transfer {} bytes; in-capsule {} bytes",
                queues.len(),
                queues.first().map_or(0, |q| q.depth()),
                ctrl.max_transfer(),
                queues.first().map_or(0, |q| q.in_capsule())
            );
        }
        NvmeOp::Identify { nsid } => {
            out.push_str(&controller_text(ctrl.info()));
            let ids = match nsid {
                Some(n) => vec![*n],
                None => ctrl.active_namespaces()?,
            };
            for id in ids {
                let ns = ctrl.namespace(id)?;
                out.push_str(&namespace_text(&ns.info));
            }
        }
        NvmeOp::Read { io, output } => {
            let ns = ctrl.namespace(io.nsid)?;
            let len = io.length.unwrap_or(ns.lba_size());
            let mr = ctrl.alloc(len.max(1))?;
            let start = ctrl.transport().now();
            let r = ctrl.read(&ns, io.slba, Buffer::slice(mr, 0, len));
            let elapsed = ctrl.transport().now() - start;
            let mut data = vec![0u8; len as usize];
            let copied = ctrl.transport().mr_read(mr.id, 0, &mut data);
            let _ = ctrl.free(mr);
            r?;
            copied.map_err(NvmeError::from)?;
            if let Some(p) = output {
                std::fs::write(p, &data).map_err(|e| Failure::Io(format!("writing {}: {e}", p.display())))?;
            }
            let _ = writeln!(
                out,
                "read {len} bytes from nsid {} block {}: fnv1a {:016x}{}",
                io.nsid,
                io.slba,
                fnv1a(&data),
                rate(len, elapsed)
            );
        }
        NvmeOp::Write { io, data, flush } => {
            let ns = ctrl.namespace(io.nsid)?;
            let bytes = match data {
                Some(p) => std::fs::read(p).map_err(|e| Failure::Io(format!("reading {}: {e}", p.display())))?,
                None => {
                    let len = io.length.unwrap_or(ns.lba_size());
                    (0..len).map(|i| (i as u8).wrapping_mul(167) ^ (i >> 12) as u8).collect()
                }
            };
            let len = io.length.unwrap_or(bytes.len() as u64);
            if len > bytes.len() as u64 {
                return Err(Failure::Usage(format!("--length {len} exceeds the {} bytes of data", bytes.len())));
            }
            let mr = ctrl.alloc(len.max(1))?;
            let r = ctrl.transport_mut().mr_write(mr.id, 0, &bytes[..len as usize]).map_err(NvmeError::from);
            let start = ctrl.transport().now();
            let r = r.and_then(|_| ctrl.write(&ns, io.slba, Buffer::slice(mr, 0, len)));
            let elapsed = ctrl.transport().now() - start;
            let _ = ctrl.free(mr);
            r?;
            if *flush {
                ctrl.flush(&ns)?;
            }
            let _ = writeln!(
                out,
                "wrote {len} bytes to nsid {} block {}: fnv1a {:016x}{}{}",
                io.nsid,
                io.slba,
                fnv1a(&bytes[..len as usize]),
                rate(len, elapsed),
                if *flush { "; flushed" } else { "" }
            );
        }
        NvmeOp::Bench { nsid, bs, pattern, qd, ios, .. } => {
            let ns = ctrl.namespace(*nsid)?;
            let lba = ns.lba_size();
            if *qd == 0 {
                return Err(Failure::Usage("--qd 0: at least one read in flight".into()));
            }
            if *bs == 0 || bs % lba != 0 || *ios == 0 {
                return Err(Failure::Usage(format!("--bs {bs} must be a multiple of the block size {lba}; --ios > 0")));
            }
            let per = bs / lba;
            let slots = ns.blocks() / per;
            if slots == 0 {
                return Err(Failure::Usage(format!(
                    "--bs {bs}: larger than nsid {nsid} ({} blocks of {lba} bytes)",
                    ns.blocks()
                )));
            }
            // This job's part of the run (all of it for one job).
            let (n, i) = (job.count, job.index);
            let my_ios = jobs::share(*ios, n, i);
            let my_qd = jobs::share(*qd as u64, n, i) as usize;
            // Each read has its own slice of one buffer, so nothing is reused in flight.
            let total = bs
                .checked_mul(my_ios)
                .ok_or_else(|| Failure::Usage(format!("--bs {bs} x --ios {ios}: too many bytes")))?;
            let mr = ctrl.alloc(total)?;
            // Jobs draw from their own generators, and read sequentially from
            // their own stretch of the namespace.
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ *nsid as u64 ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
            let first = slots * i as u64 / n as u64;
            let reqs: Vec<(u64, Buffer)> = (0..my_ios)
                .map(|k| {
                    let slba = match pattern {
                        Pattern::Rand => {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                            (x >> 33) % slots * per
                        }
                        Pattern::Seq => (first + k) % slots * per,
                    };
                    (slba, Buffer::slice(mr, k * bs, *bs))
                })
                .collect();
            if !job.start() {
                let _ = ctrl.free(mr);
                return Err(Failure::Stopped);
            }
            let start = ctrl.transport().now();
            let r = ctrl.read_many(&ns, &reqs, my_qd);
            let elapsed = ctrl.transport().now() - start;
            let _ = ctrl.free(mr);
            r?;
            return Ok(Outcome::Bench(BenchRun {
                ios: my_ios,
                qd: my_qd,
                elapsed,
                queues: ctrl.io_queues().len(),
                poll: ctrl.poll_mode(),
                pinned: jobs::pinned(pin),
            }));
        }
        NvmeOp::Flush { nsid } => {
            let ns = ctrl.namespace(*nsid)?;
            ctrl.flush(&ns)?;
            let _ = writeln!(out, "flushed nsid {nsid}");
        }
        NvmeOp::Target(_) => unreachable!("served before connecting (main)"),
    }
    Ok(Outcome::Text(out))
}

fn rate(len: u64, elapsed: Duration) -> String {
    if elapsed.is_zero() {
        return String::new();
    }
    format!(" ({:.1} MB/s)", len as f64 / elapsed.as_secs_f64() / 1e6)
}

/// FNV-1a 64 of the data: a short fingerprint to compare runs.
pub use rctb_core::transport::seed::fnv1a;

/// The discovery log as `nvme discover` prints it.
pub fn discovery_text(log: &DiscoveryLog) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "Discovery Log Number of Records {}, Generation counter {}", log.header.numrec, log.header.genctr);
    for (i, e) in log.entries.iter().enumerate() {
        let _ = writeln!(s, "=====Discovery Log Entry {i}======");
        let _ = writeln!(s, "trtype:  {}", e.trtype_name());
        let _ = writeln!(s, "adrfam:  {}", if e.adrfam == ADRFAM_IPV4 { "ipv4" } else { "other" });
        let _ = writeln!(s, "subtype: {}", e.subtype_name());
        let _ = writeln!(s, "portid:  {}", e.portid);
        let _ = writeln!(s, "trsvcid: {}", e.trsvcid);
        let _ = writeln!(s, "subnqn:  {}", e.subnqn);
        let _ = writeln!(s, "traddr:  {}", e.traddr);
    }
    s
}

/// The controller fields the initiator uses.
pub fn controller_text(i: &ControllerInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "NVME Identify Controller:");
    let _ = writeln!(s, "sn      : {}", i.serial);
    let _ = writeln!(s, "mn      : {}", i.model);
    let _ = writeln!(s, "fr      : {}", i.firmware);
    let _ = writeln!(s, "mdts    : {}", i.mdts);
    let _ = writeln!(s, "cntlid  : {:#x}", i.cntlid);
    let _ = writeln!(s, "ver     : {}", i.version_text());
    let _ = writeln!(s, "kas     : {}", i.kas);
    let _ = writeln!(s, "maxcmd  : {}", i.maxcmd);
    let _ = writeln!(s, "nn      : {}", i.nn);
    let _ = writeln!(s, "sgls    : {:#x}", i.sgls);
    let _ = writeln!(s, "subnqn  : {}", i.subnqn);
    let _ = writeln!(s, "ioccsz  : {}", i.ioccsz);
    let _ = writeln!(s, "iorcsz  : {}", i.iorcsz);
    let _ = writeln!(s, "icdoff  : {}", i.icdoff);
    let _ = writeln!(s, "msdbd   : {}", i.msdbd);
    s
}

pub fn namespace_text(n: &NamespaceInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "NVME Identify Namespace {}:", n.nsid);
    let _ = writeln!(s, "nsze    : {:#x}", n.nsze);
    let _ = writeln!(s, "ncap    : {:#x}", n.ncap);
    let _ = writeln!(s, "nuse    : {:#x}", n.nuse);
    let _ = writeln!(s, "nlbaf   : {}", n.formats.len().saturating_sub(1));
    let _ = writeln!(s, "flbas   : {:#x}", n.flbas);
    for (i, f) in n.formats.iter().enumerate() {
        let used = if i == (n.flbas & 0xF) as usize { " (in use)" } else { "" };
        let _ = writeln!(s, "lbaf {i:2} : ms:{} lbads:{} rp:{:#x}{used}", f.ms, f.lbads, f.rp);
    }
    s
}

/// A polling mode as `--poll` spells it.
fn poll_name(m: PollMode) -> String {
    match m {
        PollMode::Busy => "busy".into(),
        PollMode::Adaptive { spin } => format!("adaptive, spin {spin}"),
        PollMode::Event => "event".into(),
    }
}
