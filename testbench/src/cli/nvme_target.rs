//! `rctb nvme target`: the NVMe-oF/RDMA target model (`rctb_models::nvme`)
//! served on a real endpoint, so a real host connects to it: the kernel's
//! `nvme connect -t rdma`, or `rctb nvme` on another machine or process.
//!
//! On `--backend udp` the endpoint is a UDP socket (`--device ADDR[:PORT]`)
//! and RDMA CM comes as MADs on QP1, so the host side needs RDMA (rxe or a
//! NIC) and this side needs none. The namespaces are in memory: one
//! subsystem (`-n`, default [`DEFAULT_NQN`]) with a 512-byte and a
//! 4096-byte namespace, and the discovery subsystem. Faults, for a host's
//! error paths: `--response-delay MS` holds every response back,
//! `--drop-responses N` executes the next N commands without answering,
//! `--error-io N` answers the next N Reads/Writes with `--error-status`,
//! all on I/O queues, from command `--faults-after K` and Write
//! `--faults-after-writes K` on; `--disconnect-at-write K` drops
//! every connection at the Kth Write (the host reconnects); `--crash-after-writes K`
//! crashes the target at its Kth Write (connections torn down, unflushed
//! writes lost) and restarts it `--restart-ms` later. Faults are counted
//! in commands, not time, so a run replays.
//!
//! It prints `LISTENING ADDR:PORT NQN` once it listens, then serves until
//! `--for SECONDS` passes (default: until killed) and prints the target's
//! counters (`TARGET commands=... reads=... writes=...`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddrV4;

use rctb_core::Transport;
use rctb_core::time::{Duration, Instant};
use rctb_models::nvme::{NvmeTarget, TargetConfig};
use rctb_udp::UdpTransport;

use super::nvme::{Common, Failure};

/// The subsystem a target serves when `-n` does not name one.
pub const DEFAULT_NQN: &str = "nqn.2026-01.io.rctb:target";

/// The `target` subcommand's own options.
#[derive(Debug, clap::Args)]
pub struct TargetArgs {
    /// Serve this long, then print the counters and exit (default: until killed).
    #[arg(long = "for", value_name = "SECONDS")]
    pub serve_for: Option<f64>,
    /// Hold every response back this many milliseconds.
    #[arg(long, default_value_t = 0)]
    pub response_delay: u64,
    /// Execute the next N commands without sending their responses.
    #[arg(long, default_value_t = 0)]
    pub drop_responses: u32,
    /// Answer the next N Reads and Writes with `--error-status` (DNR set)
    /// without executing them.
    #[arg(long, default_value_t = 0)]
    pub error_io: u32,
    /// The generic status code of `--error-io` (default 6, Internal Error).
    #[arg(long, default_value_t = 6)]
    pub error_status: u8,
    /// Drop every connection (the target stays up, data kept) at this Write.
    #[arg(long)]
    pub disconnect_at_write: Option<u64>,
    /// The faults above start after this many commands (Fabrics Connect,
    /// Property Get/Set and Identify come first: a host's bring-up is
    /// about 10 per queue).
    #[arg(long, default_value_t = 0)]
    pub faults_after: u64,
    /// ... and after this many Writes (the host's bring-up and scan only
    /// read, so `--faults-after-writes 1` puts the fault on the first
    /// write the application makes). The faults meet I/O queues only.
    #[arg(long, default_value_t = 0)]
    pub faults_after_writes: u64,
    /// Crash when this many Write commands have been taken (every
    /// connection torn down, unflushed writes lost), then come back after
    /// `--restart-ms`.
    #[arg(long)]
    pub crash_after_writes: Option<u64>,
    /// How long a crashed target stays down.
    #[arg(long, default_value_t = 1000)]
    pub restart_ms: u64,
}

/// Serves the target on the endpoint `--backend` and `--device` name.
pub fn serve(c: &Common, a: &TargetArgs) -> Result<String, Failure> {
    let (t, at) = super::nvme::udp_endpoint(c, "target", "target")?;
    let nqn = c.nqn.clone().unwrap_or_else(|| DEFAULT_NQN.to_string());
    let mut cfg = TargetConfig::new(&nqn);
    cfg.port = c.trsvcid;
    let mut target = NvmeTarget::new(cfg, *at.ip()).map_err(|e| Failure::Usage(e.to_string()))?;
    target.faults_mut().response_delay = Duration::from_millis(a.response_delay);
    target.faults_mut().drop_responses = a.drop_responses;
    target.faults_mut().after_commands = a.faults_after;
    target.faults_mut().after_writes = a.faults_after_writes;
    target.faults_mut().io_only = true;
    target.faults_mut().crash_at_write = a.crash_after_writes.unwrap_or(0);
    target.faults_mut().error_io = a.error_io;
    target.faults_mut().error_status = a.error_status;
    target.faults_mut().disconnect_at_write = a.disconnect_at_write.unwrap_or(0);
    let down = Duration::from_millis(a.restart_ms);
    run(t, &mut target, at, &nqn, a.serve_for.map(Duration::from_secs_f64), down)
}

fn run(
    mut t: UdpTransport,
    target: &mut NvmeTarget,
    at: SocketAddrV4,
    nqn: &str,
    serve_for: Option<Duration>,
    down: Duration,
) -> Result<String, Failure> {
    let reactor = t.reactor();
    // The first run listens; say so only then, so a host started after
    // this line finds the port open.
    target.run(&mut t);
    if let Some(e) = &target.last_error {
        return Err(Failure::Io(format!("the target could not start: {e}")));
    }
    println!("LISTENING {}:{} {nqn}", at.ip(), target.config().port);
    let _ = std::io::stdout().flush();
    let end = serve_for.map(|d| t.now() + d);
    let mut restart_at: Option<Instant> = None;
    loop {
        let now = t.now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        reactor.turn().map_err(|e| Failure::Io(e.to_string()))?;
        let mut wake = target.run(&mut t).unwrap_or(Instant::FAR_FUTURE);
        if !target.is_up() && restart_at.is_none() {
            println!("CRASH at write {}, back in {down:?}", target.stats().writes);
            let _ = std::io::stdout().flush();
            restart_at = Some(now + down);
        }
        if let Some(at) = restart_at {
            if now >= at {
                target.restart(&mut t);
                println!("RESTART");
                let _ = std::io::stdout().flush();
                restart_at = None;
            } else {
                wake = wake.min(at);
            }
        }
        // Wake for the next frame, the target's own timer, or within a
        // second (the end of --for is checked then).
        let until = wake.min(now + Duration::from_secs(1)).min(end.unwrap_or(Instant::FAR_FUTURE));
        reactor.block(until).map_err(|e| Failure::Io(e.to_string()))?;
    }
    target.shutdown(&mut t);
    let s = target.stats();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "TARGET commands={} errors={} reads={} writes={} flushes={} bytes_read={} bytes_written={} \
         dropped_responses={} connections={} rejected_connects={} dropped_connections={}",
        s.commands,
        s.errors,
        s.reads,
        s.writes,
        s.flushes,
        s.bytes_read,
        s.bytes_written,
        s.dropped_responses,
        s.connections,
        s.rejected_connects,
        s.dropped_connections
    );
    let cm = t.engine_counters();
    let _ = writeln!(
        out,
        "CM retransmitted={} duplicates={} ignored={} rejected={} timeouts={} dropped={}",
        cm.cm_retransmitted, cm.cm_duplicates, cm.cm_ignored, cm.cm_rejected, cm.cm_timeouts, cm.cm_dropped
    );
    Ok(out)
}
