//! `rctb object`: the hipobj gateway (rctb_gateway) from the command line:
//! `serve` (the HTTP control plane and the session server), `put` / `get`
//! (the gateway's client over verbs), `load` (a control-plane load test).
//!
//! Exit status: 0 done, 1 the transfer or server failed, 2 bad arguments
//! or environment (each message names the argument and the rule).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use rctb_core::rcsession::{ClientConfig, ServerConfig};
use rctb_gateway::auth::{Users, wall_clock};
use rctb_gateway::client::{
    ControlPlane, Credentials, Endpoint, ObjectClient, ObjectError, Progress, RdmaRunner, parse_s3_url, part_target,
};
use rctb_gateway::http::GatewayOptions;
use rctb_gateway::serve::{ServeOptions, serve_sim};

#[derive(Debug, clap::Args)]
pub struct ObjectArgs {
    #[command(subcommand)]
    command: ObjectCommand,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ObjectBackend {
    /// The session server on a simulated fabric: every control-plane route
    /// over real HTTP, no RDMA hardware (the data phase needs a client on
    /// the same fabric, so only in-process tests run it). `serve` only.
    Sim,
    /// An RDMA device (rxe or a NIC; a binary built with `--features verbs`).
    Verbs,
    /// A UDP endpoint (rctb-udp: the RC engine, rctb-engine, on a UDP socket,
    /// port 4791): `--device ADDR[:PORT]`, no RDMA device or kernel support;
    /// server and client may be two processes on one machine.
    Udp,
}

/// The RDMA device options (verbs).
#[derive(Clone, Debug, clap::Args)]
struct DeviceArgs {
    /// The RDMA device (verbs), e.g. rxe0; with udp, the endpoint's IPv4 address[:port].
    #[arg(long)]
    device: Option<String>,
    /// The device's port (1-based).
    #[arg(long, default_value_t = 1)]
    port: u8,
    /// The source GID index, or auto: the RoCE v2 IPv4 GID (serve: the
    /// device's own address; get/put: the one on the endpoint's /24).
    #[arg(long, default_value = "auto")]
    gid_index: String,
}

/// The client's options.
#[derive(Clone, Debug, clap::Args)]
struct ClientArgs {
    /// The gateway, http://HOST:PORT.
    #[arg(long)]
    endpoint: String,
    #[arg(long, value_enum, default_value = "verbs")]
    backend: ObjectBackend,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Local ACK timeout code of our QP (4.096 us x 2^code). A PUT's first
    /// WRITE may reach the server before READY made its QP ready to
    /// receive, and is then resent after this timeout.
    #[arg(long, default_value_t = 12)]
    ack_timeout: u8,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Print each phase (PREPARE, RDMA WRITE, ...) to stderr as it starts.
    #[arg(long)]
    phases: bool,
}

#[derive(Debug, clap::Subcommand)]
enum ObjectCommand {
    /// Serve the control plane (POST /.hipobj-rc/{prepare,ready,cancel}, GET /rc-sessions)
    /// and the plain S3 object routes (GET with ranges, HEAD, PUT, DELETE, ListObjectsV2,
    /// multipart uploads) with objects under --root, or in an S3 bucket (--store).
    Serve {
        /// Where objects live (created if missing).
        #[arg(long, required_unless_present = "store", conflicts_with = "store")]
        root: Option<PathBuf>,
        /// Keep objects in an S3 bucket instead: s3://BUCKET (the bucket must exist;
        /// credentials and region from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
        /// AWS_REGION or AWS_DEFAULT_REGION).
        #[arg(long, value_name = "s3://BUCKET")]
        store: Option<String>,
        /// The S3 server's URL for --store (http:// allowed), e.g. http://127.0.0.1:8333.
        /// Without it, AWS.
        #[arg(long, requires = "store", value_name = "URL")]
        endpoint: Option<String>,
        /// Address to listen on (port 0 picks one; the chosen address is printed).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        #[arg(long, value_enum, default_value = "sim")]
        backend: ObjectBackend,
        #[command(flatten)]
        dev: DeviceArgs,
        /// TOML users file: [[user]] access_key, secret_key, admin. Without it,
        /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are the one, admin, user.
        #[arg(long)]
        users: Option<PathBuf>,
        /// SigV4 region.
        #[arg(long, default_value = "us-east-1")]
        region: String,
        /// Test mode: READY with x-amz-rdma-qpn 0 answers OK without moving data (what
        /// `object load` needs). Off, QPN 0 gets 400 InvalidRdmaRequest.
        #[arg(long)]
        control_plane_only: bool,
        /// The highest part number a target may name (1..=10000).
        #[arg(long, default_value_t = 10_000)]
        max_part_number: u32,
        /// The largest body an S3 PutObject or UploadPart over plain HTTP may carry, in
        /// bytes (streamed to the store, never held in memory; larger ones get 400
        /// EntityTooLarge and store nothing). Default 5 GiB, S3's single-PUT limit.
        #[arg(long, default_value_t = rctb_gateway::http::DEFAULT_MAX_OBJECT_SIZE)]
        max_object_size: u64,
    },
    /// Store FILE as s3://BUCKET/KEY (credentials and region from the AWS environment).
    Put {
        /// s3://BUCKET/KEY
        url: String,
        file: PathBuf,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Fetch s3://BUCKET/KEY (or one part of it) into FILE.
    Get {
        /// s3://BUCKET/KEY
        url: String,
        file: PathBuf,
        /// Only part N (1..=10000) of the object (S3 GetObject partNumber: a
        /// multipart object's part N; any other object is part 1).
        #[arg(long)]
        part: Option<u32>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// PUT COUNT objects (0 B, 1 B, then random sizes up to --max-size), GET each back and
    /// compare byte for byte; exit 1 on any difference.
    Roundtrip {
        #[arg(long, default_value_t = 200)]
        count: usize,
        #[arg(long, default_value_t = 65536)]
        max_size: u64,
        #[arg(long, default_value = "roundtrip")]
        bucket: String,
        /// Key prefix (default: a random one, so runs do not overwrite each other).
        #[arg(long)]
        prefix: Option<String>,
        /// Concurrent clients (each its own QP and region, objects dealt round robin).
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Control-plane load: CLIENTS connections run PREPARES PREPARE + READY (client QPN 0:
    /// no data moves, nothing is committed; the server must run --control-plane-only);
    /// prints p50/p99 latency and errors.
    Load {
        /// The gateway, http://HOST:PORT.
        #[arg(long)]
        endpoint: String,
        #[arg(long, default_value_t = 100)]
        clients: usize,
        #[arg(long, default_value_t = 10_000)]
        prepares: usize,
        /// Bytes each PREPARE asks the server to stage.
        #[arg(long, default_value_t = 4096)]
        size: u64,
        #[arg(long, default_value = "load")]
        bucket: String,
    },
}

/// A failure: usage (exit 2) or run (exit 1).
enum Failure {
    Usage(String),
    Run(String),
}

impl From<ObjectError> for Failure {
    fn from(e: ObjectError) -> Self {
        Failure::Run(e.to_string())
    }
}

pub fn main(args: &ObjectArgs) -> ExitCode {
    let (name, r) = match &args.command {
        ObjectCommand::Serve {
            root,
            store,
            endpoint,
            listen,
            backend,
            dev,
            users,
            region,
            control_plane_only,
            max_part_number,
            max_object_size,
        } => {
            let mut g = GatewayOptions::default();
            g.control_plane_only = *control_plane_only;
            g.max_part_number = *max_part_number;
            g.max_object_size = *max_object_size;
            let where_ = match (root, store) {
                (_, Some(url)) => rctb_gateway::store::S3Options::from_url(url, endpoint.clone())
                    .map(Where::S3)
                    .map_err(|e| Failure::Usage(e.to_string())),
                (Some(root), None) => Ok(Where::Root(root.clone())),
                (None, None) => Err(Failure::Usage("--root or --store: one is needed".into())),
            };
            ("serve", where_.and_then(|w| serve(w, *listen, *backend, dev, users.as_deref(), region, g)))
        }
        ObjectCommand::Put { url, file, client } => ("put", transfer(true, url, file, None, client)),
        ObjectCommand::Get { url, file, part, client } => ("get", transfer(false, url, file, *part, client)),
        ObjectCommand::Roundtrip { count, max_size, bucket, prefix, jobs, client } => {
            ("roundtrip", roundtrip(*count, *max_size, bucket, prefix.as_deref(), *jobs, client))
        }
        ObjectCommand::Load { endpoint, clients, prepares, size, bucket } => {
            ("load", load(endpoint, *clients, *prepares, *size, bucket))
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("rctb object {name}: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Run(m)) => {
            eprintln!("rctb object {name}: {m}");
            ExitCode::from(1)
        }
    }
}

fn random_seed() -> Result<[u8; 32], Failure> {
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed))
        .map_err(|e| Failure::Usage(format!("/dev/urandom: {e}")))?;
    Ok(seed)
}

/// `auto` or a number.
fn gid_arg(s: &str) -> Result<Option<u32>, Failure> {
    if s == "auto" {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| Failure::Usage(format!("--gid-index {s:?}: must be a number or auto")))
}

/// Where `serve` keeps objects.
enum Where {
    Root(PathBuf),
    S3(rctb_gateway::store::S3Options),
}

fn serve(
    store: Where,
    listen: SocketAddr,
    backend: ObjectBackend,
    dev: &DeviceArgs,
    users: Option<&Path>,
    region: &str,
    gateway: GatewayOptions,
) -> Result<(), Failure> {
    if gateway.max_part_number == 0 || gateway.max_part_number > 10_000 {
        return Err(Failure::Usage("--max-part-number: must be 1..=10000".into()));
    }
    let users = match users {
        Some(p) => Users::load(p),
        None => Users::from_env(std::env::var("AWS_ACCESS_KEY_ID").ok(), std::env::var("AWS_SECRET_ACCESS_KEY").ok()),
    }
    .map_err(|e| Failure::Usage(e.to_string()))?;
    // Version ids and session ids must differ across restarts: seed them
    // from the kernel's random source.
    let seed = random_seed()?;
    let (root, s3) = match store {
        Where::Root(r) => (r, None),
        Where::S3(o) => (PathBuf::new(), Some(o)),
    };
    let opts = ServeOptions {
        root,
        s3,
        listen,
        users,
        region: region.to_string(),
        seed,
        server: ServerConfig::default(),
        gateway,
    };
    let r = match backend {
        ObjectBackend::Sim => serve_sim(opts),
        ObjectBackend::Verbs => verbs::serve(opts, dev)?,
        ObjectBackend::Udp => udp::serve(opts, dev)?,
    };
    r.map_err(|e| Failure::Run(e.to_string()))
}

/// Progress on stderr: a byte bar for large objects, phases as its
/// message (and as lines with `--phases`).
struct Bar(ProgressBar, bool);

impl Progress for Bar {
    fn phase(&self, what: &str) {
        if self.1 {
            self.0.suspend(|| eprintln!("phase: {what}"));
        }
        self.0.set_message(what.to_string());
    }
    fn advance(&self, n: u64) {
        self.0.inc(n);
    }
}

/// Objects from this size on get a progress bar.
const BAR_FROM: u64 = 1 << 20;

fn bar(size: u64, quiet: bool, phases: bool, total_steps: u64) -> Bar {
    if quiet || size < BAR_FROM {
        return Bar(ProgressBar::hidden(), phases);
    }
    let pb = ProgressBar::new(size * total_steps);
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Bar(pb, phases)
}

#[allow(clippy::disallowed_methods)] // the testbench reads the clock for display only
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

fn transfer(put: bool, url: &str, file: &Path, part: Option<u32>, a: &ClientArgs) -> Result<(), Failure> {
    let (bucket, key) = parse_s3_url(url).map_err(|e| Failure::Usage(e.to_string()))?;
    if part.is_some_and(|n| !(1..=10_000).contains(&n)) {
        return Err(Failure::Usage("--part: must be 1..=10000".into()));
    }
    let endpoint = Endpoint::parse(&a.endpoint).map_err(|e| Failure::Usage(format!("--endpoint: {e}")))?;
    let creds = Credentials::from_env(|k| std::env::var(k).ok()).map_err(|e| Failure::Usage(e.to_string()))?;
    if a.backend == ObjectBackend::Sim {
        return Err(Failure::Usage(
            "--backend sim: a simulated client cannot reach another process's fabric; use verbs or udp".into(),
        ));
    }
    if a.ack_timeout > 31 {
        return Err(Failure::Usage("--ack-timeout: must be 0..=31".into()));
    }
    let seed = u64::from_le_bytes(random_seed()?[..8].try_into().unwrap_or_default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::Run(e.to_string()))?;
    rt.block_on(async move {
        let cp = Arc::new(ControlPlane::new(endpoint.clone(), creds, wall_clock()));
        let data = if put {
            Some(std::fs::read(file).map_err(|e| Failure::Usage(format!("{}: {e}", file.display())))?)
        } else {
            None
        };
        let size = match (&data, part) {
            (Some(d), _) => d.len() as u64,
            (None, Some(n)) => cp.head_part(&bucket, &key, n).await?.size,
            (None, None) => cp.head(&bucket, &key).await?.size,
        };
        let server_ip = server_ipv4(&endpoint).await;
        let mut cfg = ClientConfig::default();
        cfg.capacity = size.max(1);
        cfg.timeout = a.ack_timeout;
        let rdma: Arc<dyn RdmaRunner> = if size == 0 {
            // Nothing moves over RDMA: no device needed.
            Arc::new(NoRdma)
        } else {
            rdma_client(a, server_ip, cfg)?
        };
        let client = ObjectClient::new(cp, rdma, seed);
        let pb = bar(size, a.quiet, a.phases, 2);
        let start = now();
        let done = match data {
            Some(d) => client.put(&bucket, &key, Bytes::from(d), &pb).await?,
            None => {
                // The size is known (HeadObject above): no second HEAD.
                let (bytes, t) = match part {
                    Some(n) if size > 0 => client.get_target(part_target(&bucket, &key, n), 0, size, &pb).await?,
                    Some(n) => client.get_part(&bucket, &key, n, &pb).await?,
                    None if size == 0 => client.get(&bucket, &key, &pb).await?,
                    None => client.get_range(&bucket, &key, 0, size, &pb).await?,
                };
                pb.0.set_message("writing the file");
                std::fs::write(file, &bytes).map_err(|e| Failure::Run(format!("{}: {e}", file.display())))?;
                pb.0.inc(size);
                t
            }
        };
        pb.0.finish_and_clear();
        let secs = start.elapsed().as_secs_f64();
        let what = match part {
            Some(n) => format!("part {n} of "),
            None => String::new(),
        };
        println!(
            "{} {what}{url} {} bytes etag={} version={} busy_retries={} capabilities={} in {:.3} s ({:.1} MB/s)",
            if put { "put" } else { "get" },
            done.size,
            done.etag,
            done.version_id,
            done.busy_retries,
            done.capabilities.as_deref().unwrap_or("-"),
            secs,
            done.size as f64 / secs.max(1e-9) / 1e6
        );
        Ok(())
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::Run(e.to_string()))
}

fn roundtrip(
    count: usize,
    max_size: u64,
    bucket: &str,
    prefix: Option<&str>,
    jobs: usize,
    a: &ClientArgs,
) -> Result<(), Failure> {
    if jobs == 0 || jobs > 64 {
        return Err(Failure::Usage("--jobs: must be 1..=64".into()));
    }
    let endpoint = Endpoint::parse(&a.endpoint).map_err(|e| Failure::Usage(format!("--endpoint: {e}")))?;
    let creds = Credentials::from_env(|k| std::env::var(k).ok()).map_err(|e| Failure::Usage(e.to_string()))?;
    if a.backend == ObjectBackend::Sim {
        return Err(Failure::Usage("--backend sim: use verbs or udp".into()));
    }
    if max_size == 0 || max_size > u64::from(u32::MAX >> 1) {
        return Err(Failure::Usage("--max-size: must be 1..=2147483647".into()));
    }
    let seed = u64::from_le_bytes(random_seed()?[..8].try_into().unwrap_or_default());
    let prefix = prefix.map_or_else(|| format!("{seed:016x}"), str::to_string);
    runtime()?.block_on(async move {
        let server_ip = server_ipv4(&endpoint).await;
        let mut cfg = ClientConfig::default();
        cfg.capacity = max_size;
        cfg.timeout = a.ack_timeout;
        let mut clients = Vec::new();
        for j in 0..jobs {
            let cp = Arc::new(ControlPlane::new(endpoint.clone(), creds.clone(), wall_clock()));
            let rdma = rdma_client(a, server_ip, cfg)?;
            clients.push(Arc::new(ObjectClient::new(cp, rdma, seed.wrapping_add(j as u64))));
        }
        let r = rctb_gateway::client::roundtrip(&clients, bucket, &prefix, count, max_size, seed).await;
        let secs = (r.put_time + r.get_time).as_secs_f64();
        for (key, why) in &r.failures {
            println!("FAIL {bucket}/{key}: {why}");
        }
        println!(
            "roundtrip: {} of {count} objects identical ({} bytes each way, prefix {prefix}), {jobs} clients, busy_retries={}, PUTs {:.2} s, GETs {:.2} s ({:.1} objects/s)",
            r.objects,
            r.bytes,
            r.busy_retries,
            r.put_time.as_secs_f64(),
            r.get_time.as_secs_f64(),
            2.0 * count as f64 / secs.max(1e-9)
        );
        if r.failures.is_empty() && r.objects == count {
            Ok(())
        } else {
            Err(Failure::Run(format!("{} of {count} objects failed", r.failures.len())))
        }
    })
}

/// The client's RDMA side on the chosen backend.
fn rdma_client(a: &ClientArgs, server_ip: Option<Ipv4Addr>, cfg: ClientConfig) -> Result<Arc<dyn RdmaRunner>, Failure> {
    match a.backend {
        ObjectBackend::Udp => udp::client(&a.dev, cfg),
        _ => verbs::client(&a.dev, server_ip, cfg),
    }
}

/// The endpoint's IPv4 address (picks the GID on its /24).
async fn server_ipv4(endpoint: &Endpoint) -> Option<Ipv4Addr> {
    if let Ok(ip) = endpoint.host().parse() {
        return Some(ip);
    }
    match rctb_gateway::client::resolve(endpoint).await {
        Ok(SocketAddr::V4(a)) => Some(*a.ip()),
        _ => None,
    }
}

/// The port of an empty object's transfer: never used.
#[derive(Debug)]
struct NoRdma;

impl RdmaRunner for NoRdma {
    fn submit(&self, _job: rctb_gateway::client::RdmaJob) -> Result<(), ObjectError> {
        Err(ObjectError::Stopped)
    }
}

fn load(endpoint: &str, clients: usize, prepares: usize, size: u64, bucket: &str) -> Result<(), Failure> {
    let endpoint = Endpoint::parse(endpoint).map_err(|e| Failure::Usage(format!("--endpoint: {e}")))?;
    let creds = Credentials::from_env(|k| std::env::var(k).ok()).map_err(|e| Failure::Usage(e.to_string()))?;
    if clients == 0 || size == 0 {
        return Err(Failure::Usage("--clients and --size must be at least 1".into()));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::Run(e.to_string()))?;
    let opts = rctb_gateway::load::LoadOptions { clients, prepares, size, bucket: bucket.to_string() };
    let report = rt
        .block_on(rctb_gateway::load::run(&opts, |_| ControlPlane::new(endpoint.clone(), creds.clone(), wall_clock())));
    println!("load: {clients} clients, {prepares} PREPAREs of {size} bytes, control-plane-only READY");
    for l in report.lines() {
        println!("{l}");
    }
    if report.error_count() == 0 { Ok(()) } else { Err(Failure::Run(format!("{} errors", report.error_count()))) }
}

/// The verbs backend: the session server's and the client's RC on an RDMA
/// device each, opened through [`backend::verbs`] (first, so a build without
/// it says so before anything else).
mod verbs {
    use super::*;
    use rctb_core::rcsession::SessionManager;
    use rctb_gateway::client::RdmaThread;
    use rctb_gateway::engine::Pacing;
    use rctb_gateway::serve::serve_with;

    use crate::cli::backend::{self, Verbs};

    fn verbs() -> Result<Verbs, Failure> {
        backend::verbs().map_err(|e| Failure::Usage(e.to_string()))
    }

    fn device(dev: &DeviceArgs) -> Result<String, Failure> {
        dev.device.clone().ok_or_else(|| Failure::Usage("--backend verbs needs --device, e.g. rxe0".into()))
    }

    pub(super) fn serve(mut opts: ServeOptions, dev: &DeviceArgs) -> Result<std::io::Result<()>, Failure> {
        let verbs = verbs()?;
        let name = device(dev)?;
        let port = dev.port;
        let gid = gid_arg(&dev.gid_index)?;
        // Open once here to check the device and find the GID, and close it
        // again: the engine thread opens its own transport.
        let gid_index = {
            let t = verbs.open(&name).map_err(|e| Failure::Run(e.to_string()))?;
            match gid {
                Some(i) => i,
                None => {
                    let ip = t
                        .device_ipv4()
                        .ok_or_else(|| Failure::Usage(format!("{name} has no IPv4 address: give --gid-index")))?;
                    t.detect_gid_index(port, ip).map_err(|e| Failure::Usage(e.to_string()))?
                }
            }
        };
        opts.server.port = port;
        opts.server.gid_index = gid_index;
        let cfg = opts.server;
        eprintln!("rctb object serve: {name} port {port} GID index {gid_index}");
        Ok(serve_with(
            opts,
            move |rng| {
                let t = verbs.open(&name).map_err(|e| e.error)?;
                SessionManager::new(t, rng, cfg)
            },
            Pacing::REAL,
        ))
    }

    pub(super) fn client(
        dev: &DeviceArgs,
        server_ip: Option<Ipv4Addr>,
        mut cfg: ClientConfig,
    ) -> Result<Arc<dyn RdmaRunner>, Failure> {
        let verbs = verbs()?;
        let name = device(dev)?;
        cfg.port = dev.port;
        cfg.gid_index = match gid_arg(&dev.gid_index)? {
            Some(i) => i,
            None => {
                let ip = server_ip.ok_or_else(|| {
                    Failure::Usage("--gid-index auto needs the endpoint's IPv4 address: give --gid-index".into())
                })?;
                let t = verbs.open(&name).map_err(|e| Failure::Run(e.to_string()))?;
                t.detect_gid_index(dev.port, ip).map_err(|e| Failure::Usage(e.to_string()))?
            }
        };
        let runner =
            RdmaThread::rc_client(move || verbs.open(&name).map_err(|e| ObjectError::Rdma(e.error.into())), cfg)?;
        Ok(Arc::new(runner))
    }
}

/// The udp backend: the session server's and the client's RC on a UDP
/// endpoint (rctb-udp) each, opened in their engine thread.
mod udp {
    use std::net::SocketAddrV4;

    use super::*;
    use rctb_core::Transport;
    use rctb_core::rcsession::{ClientError, RcClient, SessionManager};
    use rctb_core::transport::{Mtu, TransportError, Verb};
    use rctb_gateway::client::RdmaJob;
    use rctb_gateway::engine::Pacing;
    use rctb_gateway::serve::serve_with;
    use rctb_udp::{UdpConfig, UdpTransport};

    use crate::cli::backend;

    /// `--device ADDR[:PORT]`.
    fn endpoint(dev: &DeviceArgs) -> Result<SocketAddrV4, Failure> {
        let d = dev.device.as_deref().ok_or_else(|| {
            Failure::Usage(
                "--backend udp needs --device: the UDP endpoint's IPv4 address[:port], e.g. 127.0.0.1".into(),
            )
        })?;
        backend::Endpoint::udp(d)
            .ok_or_else(|| Failure::Usage(format!("--device {d:?}: with --backend udp, an IPv4 address or ADDR:PORT")))
    }

    /// The endpoint's GID index: its IPv4-mapped GID (1), or the one given.
    fn gid(dev: &DeviceArgs) -> Result<u32, Failure> {
        Ok(gid_arg(&dev.gid_index)?.unwrap_or(1))
    }

    fn config(name: &str, at: SocketAddrV4) -> UdpConfig {
        // MTU 1024 fits any 1500-byte link (and is what rxe uses there).
        backend::udp_config(name, at, Mtu::Mtu1024)
    }

    fn open(name: &'static str, at: SocketAddrV4) -> impl FnOnce() -> Result<UdpTransport, TransportError> {
        move || {
            UdpTransport::bind(config(name, at)).map_err(|e| TransportError::Os {
                verb: Verb::QueryDevice,
                what: "udp endpoint",
                errno: 0,
                message: e.to_string(),
            })
        }
    }

    pub(super) fn serve(mut opts: ServeOptions, dev: &DeviceArgs) -> Result<std::io::Result<()>, Failure> {
        let at = endpoint(dev)?;
        // Bind once here so a taken port is a usage error, not a dead engine.
        drop(open("server", at)().map_err(|e| Failure::Usage(format!("--device {at}: {e}")))?);
        opts.server.port = dev.port;
        opts.server.gid_index = gid(dev)?;
        let cfg = opts.server;
        eprintln!("rctb object serve: udp endpoint {at}");
        Ok(serve_with(opts, move |rng| SessionManager::new(open("server", at)()?, rng, cfg), Pacing::REAL))
    }

    pub(super) fn client(dev: &DeviceArgs, mut cfg: ClientConfig) -> Result<Arc<dyn RdmaRunner>, Failure> {
        let at = endpoint(dev)?;
        cfg.port = dev.port;
        cfg.gid_index = gid(dev)?;
        Ok(Arc::new(ClientThread::spawn(open("client", at), cfg)?))
    }

    /// How long the client's thread waits on its endpoint before it looks
    /// for a job again.
    const SLICE: rctb_core::time::Duration = rctb_core::time::Duration::from_millis(1);

    /// The client's `RcClient` on a thread of its own, like
    /// `rctb_gateway::client::RdmaThread`, but between jobs the thread keeps
    /// its UDP endpoint going: an endpoint answers only while it is called
    /// (an RDMA NIC answers by itself), and a GET's data arrives, as the
    /// server's RDMA WRITE, while the client waits for READY's answer.
    #[derive(Debug)]
    struct ClientThread {
        tx: std::sync::Mutex<std::sync::mpsc::Sender<RdmaJob>>,
    }

    impl ClientThread {
        fn spawn<F>(make: F, cfg: ClientConfig) -> Result<Self, ObjectError>
        where
            F: FnOnce() -> Result<UdpTransport, TransportError> + Send + 'static,
        {
            use std::sync::mpsc::{TryRecvError, channel};
            let (tx, rx) = channel::<RdmaJob>();
            let (ok_tx, ok_rx) = channel();
            std::thread::Builder::new()
                .name("rc-client-udp".into())
                .spawn(move || {
                    let made = make().map_err(ClientError::from).and_then(|t| RcClient::new(t, cfg));
                    let mut client = match made {
                        Ok(c) => {
                            let _ = ok_tx.send(Ok(()));
                            c
                        }
                        Err(e) => {
                            let _ = ok_tx.send(Err(ObjectError::Rdma(e)));
                            return;
                        }
                    };
                    loop {
                        match rx.try_recv() {
                            Ok(job) => job(&mut client),
                            Err(TryRecvError::Disconnected) => return,
                            Err(TryRecvError::Empty) => {
                                let t = client.transport_mut();
                                let until = t.now() + SLICE;
                                // A failing socket shows in the next job's verbs.
                                let _ = t.wait(&[], until);
                            }
                        }
                    }
                })
                .map_err(|e| ObjectError::Transport(format!("spawning the RDMA thread: {e}")))?;
            ok_rx.recv().map_err(|_| ObjectError::Stopped)??;
            Ok(ClientThread { tx: std::sync::Mutex::new(tx) })
        }
    }

    impl RdmaRunner for ClientThread {
        fn submit(&self, job: RdmaJob) -> Result<(), ObjectError> {
            self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(job).map_err(|_| ObjectError::Stopped)
        }
    }
}
