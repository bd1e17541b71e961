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
//!
//! This file runs the command: the backends, the jobs and the connection;
//! `args.rs` holds the command line, `ops.rs` what each subcommand does on
//! a connected controller, `text.rs` what it prints.

mod args;
mod ops;
mod text;

use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::rc::Rc;

use rctb_core::Transport;
use rctb_core::nvmeof::protocol::*;
use rctb_core::nvmeof::{Controller, ControllerConfig, NvmeError, discover};
use rctb_core::time::Duration;
use rctb_core::transport::{Mtu, PollMode};
use rctb_models::nvme::{NvmeTarget, TargetConfig};
use rctb_sim::{NodeConfig, Sim, SimTransport};
use rctb_udp::UdpTransport;

use crate::cli::backend;
use crate::cli::jobs::{self, Job};

pub use args::{Common, Io, NvmeArgs, NvmeBackend, NvmeOp, Pattern};
pub use text::{controller_text, discovery_text, fnv1a, namespace_text};

use ops::op;
use text::render;

/// The subsystem NQN of the simulated target.
pub const SIM_NQN: &str = "nqn.2026-01.io.rctb:sim-target";
/// The simulated target's address (the host is 10.0.0.1).
pub const SIM_TARGET_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
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
