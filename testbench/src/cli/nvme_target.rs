//! `rctb nvme target`: the NVMe-oF/RDMA target model (`rctb_models::nvme`)
//! served on a real endpoint, so a real host connects to it: the kernel's
//! `nvme connect -t rdma`, or `rctb nvme` on another machine or process.
//!
//! On `--backend udp` the endpoint is a UDP socket (`--device ADDR[:PORT]`)
//! and RDMA CM comes as MADs on QP1, so the host side needs RDMA (rxe or a
//! NIC) and this side needs none. On `--backend verbs` it is an RDMA device
//! (`--device rxe0`), listening with librdmacm at the device's IPv4
//! address (or `-a`).
//!
//! One subsystem (`-n`, default [`DEFAULT_NQN`]) and the discovery
//! subsystem. Its namespaces are in memory (a 512-byte and a 4096-byte
//! one) unless `--namespace FILE[:LBA_SIZE]` (repeated: nsid 1, 2, ...)
//! backs them with files: a file's size gives the block count, its bytes
//! are the namespace's, and what a Flush makes durable (everything, on an
//! orderly stop) is written to the file and synced before the Flush is
//! answered; what a crash loses never reaches the file. The namespace is
//! held in memory meanwhile (a file must fit in memory).
//!
//! Faults, for a host's error paths, all on I/O queues: `--response-delay
//! MS` holds every response back, `--drop-responses N` executes the next N
//! commands without answering, `--error-io N` answers the next N
//! Reads/Writes with `--error-status`, from command `--faults-after K` and
//! Write `--faults-after-writes K` on; `--disconnect-at-write K` drops every
//! connection at the Kth Write (the host reconnects); `--crash-after-writes
//! K` crashes the target at its Kth Write (connections torn down,
//! unflushed writes lost) and restarts it `--restart-ms` later. Random
//! faults, drawn per I/O command from `--seed`: `--error-rate`,
//! `--drop-rate` and `--delay-rate P` (0..=1), the delay `--random-delay
//! MS`. Counted or seeded, the same commands meet the same faults.
//!
//! `--config FILE` reads all of it from TOML ([`TargetFile`]; paths in it
//! are relative to the file); a flag given beside it wins.
//!
//! It prints `LISTENING ADDR:PORT NQN` once it listens, then serves until
//! `--for SECONDS` passes (default: until killed) and prints the target's
//! counters (`TARGET commands=... reads=... writes=...`).

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rctb_core::Transport;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::CqId;
use rctb_models::nvme::{DurableStore, NamespaceConfig, NvmeTarget, RandomFaults, TargetConfig, TargetFaults};
use serde::Deserialize;

use super::backend;
use super::nvme::{Common, Failure, NvmeBackend};

/// The subsystem a target serves when `-n` does not name one.
pub const DEFAULT_NQN: &str = "nqn.2026-01.io.rctb:target";

/// The `target` subcommand's own options. Fault flags left out take the
/// `--config` file's value, else none.
#[derive(Debug, Default, clap::Args)]
pub struct TargetArgs {
    /// Serve this long, then print the counters and exit (default: until killed).
    #[arg(long = "for", value_name = "SECONDS")]
    pub serve_for: Option<f64>,
    /// The target, its namespaces and its faults from a TOML file (flags win).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A namespace backed by FILE, with blocks of LBA_SIZE bytes (default
    /// 512); repeat for nsid 2, 3, ... (default: two in memory).
    #[arg(long = "namespace", value_name = "FILE[:LBA_SIZE]")]
    pub namespaces: Vec<String>,
    /// Hold every response back this many milliseconds (default 0).
    #[arg(long, value_name = "MS")]
    pub response_delay: Option<u64>,
    /// Execute the next N commands without sending their responses.
    #[arg(long, value_name = "N")]
    pub drop_responses: Option<u32>,
    /// Answer the next N Reads and Writes with `--error-status` (DNR set)
    /// without executing them.
    #[arg(long, value_name = "N")]
    pub error_io: Option<u32>,
    /// The generic status code of `--error-io` and `--error-rate`
    /// (default 6, Internal Error).
    #[arg(long, value_name = "SC")]
    pub error_status: Option<u8>,
    /// Drop every connection (the target stays up, data kept) at this Write.
    #[arg(long, value_name = "K")]
    pub disconnect_at_write: Option<u64>,
    /// The faults start after this many commands (Fabrics Connect,
    /// Property Get/Set and Identify come first: a host's bring-up is
    /// about 10 per queue).
    #[arg(long, value_name = "K")]
    pub faults_after: Option<u64>,
    /// ... and after this many Writes (the host's bring-up and scan only
    /// read, so `--faults-after-writes 1` puts the fault on the first
    /// write the application makes).
    #[arg(long, value_name = "K")]
    pub faults_after_writes: Option<u64>,
    /// Crash when this many Write commands have been taken (every
    /// connection torn down, unflushed writes lost), then come back after
    /// `--restart-ms`.
    #[arg(long, value_name = "K")]
    pub crash_after_writes: Option<u64>,
    /// How long a crashed target stays down (default 1000).
    #[arg(long, value_name = "MS")]
    pub restart_ms: Option<u64>,
    /// The share of I/O commands answered with `--error-status` (random,
    /// from `--seed`).
    #[arg(long, value_name = "P")]
    pub error_rate: Option<f64>,
    /// The share of I/O commands executed and never answered.
    #[arg(long, value_name = "P")]
    pub drop_rate: Option<f64>,
    /// The share of I/O commands answered `--random-delay` late.
    #[arg(long, value_name = "P")]
    pub delay_rate: Option<f64>,
    /// The delay of `--delay-rate` (default 100).
    #[arg(long, value_name = "MS")]
    pub random_delay: Option<u64>,
}

/// `--config FILE`: what the flags say, as TOML. Every key is optional;
/// an unknown one is an error naming it.
///
/// ```toml
/// nqn = "nqn.2026-01.io.rctb:target"
/// port = 4420
/// [[namespace]]            # nsid 1: in memory
/// lba_size = 512
/// blocks = 8192
/// [[namespace]]            # nsid 2: a file (its size gives the blocks)
/// file = "ns2.img"
/// lba_size = 4096
/// [faults]
/// response_delay_ms = 0
/// drop_responses = 0
/// error_io = 1
/// error_status = 6
/// after_commands = 0
/// after_writes = 1
/// disconnect_at_write = 0   # 0: never
/// crash_at_write = 0        # 0: never
/// restart_ms = 1000
/// [faults.random]
/// seed = 7
/// error_rate = 0.01
/// drop_rate = 0.0
/// delay_rate = 0.05
/// delay_ms = 100
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetFile {
    pub nqn: Option<String>,
    pub port: Option<u16>,
    #[serde(default)]
    pub namespace: Vec<NamespaceFile>,
    #[serde(default)]
    pub faults: FaultsFile,
}

/// One `[[namespace]]`: `file`, or `blocks` in memory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceFile {
    pub file: Option<PathBuf>,
    pub lba_size: Option<u32>,
    pub blocks: Option<u64>,
}

/// `[faults]`: the target model's counted faults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsFile {
    pub response_delay_ms: Option<u64>,
    pub drop_responses: Option<u32>,
    pub error_io: Option<u32>,
    pub error_status: Option<u8>,
    pub after_commands: Option<u64>,
    pub after_writes: Option<u64>,
    pub disconnect_at_write: Option<u64>,
    pub crash_at_write: Option<u64>,
    pub restart_ms: Option<u64>,
    pub random: Option<RandomFile>,
}

/// `[faults.random]`: faults drawn per I/O command from `seed`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomFile {
    pub seed: Option<u64>,
    pub error_rate: Option<f64>,
    pub drop_rate: Option<f64>,
    pub delay_rate: Option<f64>,
    pub delay_ms: Option<u64>,
}

/// The block size of a file namespace when none is given (nvmet's too).
const DEFAULT_FILE_LBA: u32 = 512;

/// A namespace as the target serves it: its configuration, and the file
/// behind it, if any.
#[derive(Debug)]
struct Namespace {
    cfg: NamespaceConfig,
    path: Option<PathBuf>,
    /// The open file behind `path`, until the target's store takes it.
    file: Option<File>,
}

/// Everything `serve` needs, from the flags and the file together.
#[derive(Debug)]
struct Plan {
    nqn: String,
    port: u16,
    namespaces: Vec<Namespace>,
    faults: TargetFaults,
    random: RandomFaults,
    restart: Duration,
}

fn usage(m: impl Into<String>) -> Failure {
    Failure::Usage(m.into())
}

/// A rate as parts per million, refused outside 0..=1 by name.
fn ppm(field: &str, p: Option<f64>) -> Result<u32, Failure> {
    match p {
        None => Ok(0),
        Some(p) if (0.0..=1.0).contains(&p) => Ok((p * 1e6).round() as u32),
        Some(p) => Err(usage(format!("{field} {p}: a share of I/O commands, 0..=1"))),
    }
}

/// Opens namespace file `path` for reading and writing, its size a whole
/// number of `lba`-byte blocks.
fn open_namespace(nsid: u32, path: &Path, lba: u32) -> Result<Namespace, Failure> {
    let file = File::options()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| usage(format!("namespace {nsid} file {}: {e}", path.display())))?;
    let len = file.metadata().map_err(|e| Failure::Io(format!("{}: {e}", path.display())))?.len();
    if len == 0 || len % lba as u64 != 0 {
        return Err(usage(format!(
            "namespace {nsid} file {}: {len} bytes; it must be a non-zero multiple of the block size {lba}",
            path.display()
        )));
    }
    let cfg = NamespaceConfig { nsid, lba_size: lba, blocks: len / lba as u64 };
    Ok(Namespace { cfg, path: Some(path.to_path_buf()), file: Some(file) })
}

/// `FILE[:LBA_SIZE]` (the last `:` splits when what follows is a number).
fn namespace_flag(nsid: u32, text: &str) -> Result<Namespace, Failure> {
    let (path, lba) = match text.rsplit_once(':') {
        Some((p, l)) if !p.is_empty() && l.chars().all(|c| c.is_ascii_digit()) && !l.is_empty() => {
            let lba = l.parse().map_err(|_| usage(format!("--namespace {text:?}: LBA_SIZE {l} is too large")))?;
            (p, lba)
        }
        _ => (text, DEFAULT_FILE_LBA),
    };
    open_namespace(nsid, Path::new(path), lba)
}

impl Plan {
    fn new(c: &Common, a: &TargetArgs) -> Result<Plan, Failure> {
        let (file, base) = match &a.config {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| usage(format!("--config {}: {e}", p.display())))?;
                let f: TargetFile =
                    toml::from_str(&text).map_err(|e| usage(format!("--config {}: {e}", p.display())))?;
                (f, p.parent().map(Path::to_path_buf).unwrap_or_default())
            }
            None => (TargetFile::default(), PathBuf::new()),
        };
        let nqn = c.nqn.clone().or(file.nqn).unwrap_or_else(|| DEFAULT_NQN.to_string());
        let port = c.trsvcid.or(file.port).unwrap_or(rctb_core::nvmeof::protocol::NVME_RDMA_PORT);
        let mut namespaces = Vec::new();
        if !a.namespaces.is_empty() {
            for (i, text) in a.namespaces.iter().enumerate() {
                namespaces.push(namespace_flag(i as u32 + 1, text)?);
            }
        } else {
            for (i, ns) in file.namespace.iter().enumerate() {
                let nsid = i as u32 + 1;
                namespaces.push(match (&ns.file, ns.blocks) {
                    (Some(_), Some(_)) => {
                        return Err(usage(format!(
                            "namespace {nsid}: file or blocks, not both (a file's size gives blocks)"
                        )));
                    }
                    (Some(f), None) => open_namespace(nsid, &base.join(f), ns.lba_size.unwrap_or(DEFAULT_FILE_LBA))?,
                    (None, Some(blocks)) => {
                        let cfg = NamespaceConfig { nsid, lba_size: ns.lba_size.unwrap_or(512), blocks };
                        Namespace { cfg, path: None, file: None }
                    }
                    (None, None) => return Err(usage(format!("namespace {nsid}: give file or blocks"))),
                });
            }
        }
        let f = &file.faults;
        let faults = TargetFaults {
            response_delay: Duration::from_millis(a.response_delay.or(f.response_delay_ms).unwrap_or(0)),
            drop_responses: a.drop_responses.or(f.drop_responses).unwrap_or(0),
            wrong_cid_responses: 0,
            after_commands: a.faults_after.or(f.after_commands).unwrap_or(0),
            after_writes: a.faults_after_writes.or(f.after_writes).unwrap_or(0),
            io_only: true,
            error_io: a.error_io.or(f.error_io).unwrap_or(0),
            error_status: a.error_status.or(f.error_status).unwrap_or(6),
            disconnect_at_write: a.disconnect_at_write.or(f.disconnect_at_write).unwrap_or(0),
            crash_at_write: a.crash_after_writes.or(f.crash_at_write).unwrap_or(0),
        };
        let r = f.random.as_ref();
        let seed = c.seed.or(r.and_then(|r| r.seed)).unwrap_or(1);
        let random = RandomFaults {
            seed,
            error_ppm: ppm("error_rate", a.error_rate.or(r.and_then(|r| r.error_rate)))?,
            drop_ppm: ppm("drop_rate", a.drop_rate.or(r.and_then(|r| r.drop_rate)))?,
            delay_ppm: ppm("delay_rate", a.delay_rate.or(r.and_then(|r| r.delay_rate)))?,
            delay: Duration::from_millis(a.random_delay.or(r.and_then(|r| r.delay_ms)).unwrap_or(100)),
        };
        let restart = Duration::from_millis(a.restart_ms.or(f.restart_ms).unwrap_or(1000));
        Ok(Plan { nqn, port, namespaces, faults, random, restart })
    }

    /// The model this plan describes, at `ip`: its file namespaces loaded
    /// and backing it (the files move into the target's store).
    fn target(&mut self, ip: Ipv4Addr) -> Result<NvmeTarget, Failure> {
        let mut cfg = TargetConfig::new(&self.nqn);
        cfg.port = self.port;
        if !self.namespaces.is_empty() {
            cfg.subsystems[0].namespaces = self.namespaces.iter().map(|n| n.cfg.clone()).collect();
        }
        let mut target = NvmeTarget::new(cfg, ip).map_err(|e| usage(e.to_string()))?;
        *target.faults_mut() = self.faults;
        target.set_random_faults(self.random).map_err(|e| usage(e.to_string()))?;
        let mut store = FileStore::default();
        for ns in &mut self.namespaces {
            let (Some(path), Some(file)) = (&ns.path, ns.file.take()) else { continue };
            let data = target.namespace_data_mut(&self.nqn, ns.cfg.nsid).expect("configured above");
            file.read_exact_at(data, 0).map_err(|e| Failure::Io(format!("reading {}: {e}", path.display())))?;
            store.files.push((ns.cfg.nsid, file));
        }
        if !store.files.is_empty() {
            target.set_store(Some(Box::new(store)));
        }
        Ok(target)
    }
}

/// File namespaces: what a Flush makes durable is written at its offset
/// and synced (`fdatasync`) before the Flush is answered.
#[derive(Debug, Default)]
struct FileStore {
    files: Vec<(u32, File)>,
}

impl FileStore {
    fn file(&self, nsid: u32) -> std::io::Result<&File> {
        let found = self.files.iter().find(|(n, _)| *n == nsid).map(|(_, f)| f);
        found.ok_or_else(|| std::io::Error::other(format!("namespace {nsid} has no file")))
    }
}

impl DurableStore for FileStore {
    fn write(&mut self, _: &str, nsid: u32, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        self.file(nsid)?.write_all_at(bytes, offset)
    }
    fn sync(&mut self, _: &str, nsid: u32) -> std::io::Result<()> {
        self.file(nsid)?.sync_data()
    }
}

/// Serves the target on the endpoint `--backend` and `--device` name.
pub fn serve(c: &Common, a: &TargetArgs) -> Result<String, Failure> {
    let mut plan = Plan::new(c, a)?;
    let serve_for = a.serve_for.map(Duration::from_secs_f64);
    match c.backend {
        NvmeBackend::Udp => {
            let (mut t, at) = super::nvme::udp_endpoint(c, "target", "target")?;
            let mut target = plan.target(*at.ip())?;
            let mut out = run(&mut t, &mut target, &plan, *at.ip(), serve_for)?;
            let cm = t.engine_counters();
            let _ = writeln!(
                out,
                "CM retransmitted={} duplicates={} ignored={} rejected={} timeouts={} dropped={}",
                cm.cm_retransmitted, cm.cm_duplicates, cm.cm_ignored, cm.cm_rejected, cm.cm_timeouts, cm.cm_dropped
            );
            Ok(out)
        }
        NvmeBackend::Verbs => {
            let verbs = backend::verbs().map_err(|e| usage(e.to_string()))?;
            let device =
                c.device.as_deref().ok_or_else(|| usage("target --backend verbs needs --device, e.g. rxe0"))?;
            let mut t = verbs.open(device).map_err(|e| Failure::Io(e.to_string()))?;
            let ip = match c.traddr {
                Some(ip) => ip,
                None => device_ipv4(&t).ok_or_else(|| {
                    usage(format!("{device} has no IPv4 GID on port 1: give the address to listen on with -a"))
                })?,
            };
            let mut target = plan.target(ip)?;
            run(&mut t, &mut target, &plan, ip, serve_for)
        }
        NvmeBackend::Sim => Err(usage(
            "target is served on --backend udp or verbs (on sim, every rctb nvme command has a target already)",
        )),
    }
}

/// The first IPv4 address in port 1's GID table.
fn device_ipv4<T: Transport>(t: &T) -> Option<Ipv4Addr> {
    t.port(1).ok()?.gids.iter().find_map(|g| g.gid.to_ipv4())
}

fn run<T: Transport>(
    t: &mut T,
    target: &mut NvmeTarget,
    plan: &Plan,
    ip: Ipv4Addr,
    serve_for: Option<Duration>,
) -> Result<String, Failure> {
    // The first run listens; say so only then, so a host started after
    // this line finds the port open.
    target.run(t);
    if let Some(e) = &target.last_error {
        return Err(Failure::Io(format!("the target could not start: {e}")));
    }
    for ns in &plan.namespaces {
        let store = ns.path.as_ref().map_or("memory".to_string(), |p| p.display().to_string());
        println!("NAMESPACE {} lba_size={} blocks={} {store}", ns.cfg.nsid, ns.cfg.lba_size, ns.cfg.blocks);
    }
    println!("LISTENING {ip}:{} {}", target.config().port, plan.nqn);
    let _ = std::io::stdout().flush();
    let end = serve_for.map(|d| t.now() + d);
    let mut restart_at: Option<Instant> = None;
    let mut cqs: Vec<CqId> = Vec::new();
    loop {
        let now = t.now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        let mut wake = target.run(t).unwrap_or(Instant::FAR_FUTURE);
        if !target.is_up() && restart_at.is_none() {
            println!("CRASH at write {}, back in {:?}", target.stats().writes, plan.restart);
            let _ = std::io::stdout().flush();
            restart_at = Some(now + plan.restart);
        }
        if let Some(at) = restart_at {
            if now >= at {
                target.restart(t);
                println!("RESTART");
                let _ = std::io::stdout().flush();
                restart_at = None;
            } else {
                wake = wake.min(at);
            }
        }
        // Sleep until a completion or CM event, the target's own timer,
        // or within a second (the end of --for is checked then).
        let until = wake.min(now + Duration::from_secs(1)).min(end.unwrap_or(Instant::FAR_FUTURE));
        cqs.clear();
        cqs.extend(target.cqs());
        t.wait(&cqs, until).map_err(|e| Failure::Io(e.to_string()))?;
    }
    target.shutdown(t);
    if let Some(e) = &target.last_error {
        eprintln!("rctb nvme target: {e}");
    }
    let s = target.stats();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "TARGET commands={} errors={} reads={} writes={} flushes={} bytes_read={} bytes_written={} \
         dropped_responses={} connections={} rejected_connects={} dropped_connections={} \
         random_errors={} random_drops={} random_delays={}",
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
        s.dropped_connections,
        s.random_errors,
        s.random_drops,
        s.random_delays
    );
    Ok(out)
}
