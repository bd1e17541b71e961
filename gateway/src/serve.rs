//! `rctb object serve`: the control plane over real HTTP, with the session
//! server on any transport: the simulator (`--backend sim`: every route and
//! every READY check without RDMA hardware, data phases only with clients
//! in the same process) or a real device (the caller builds the manager).
//!
//! The control-plane-only test mode ([`GatewayOptions::control_plane_only`],
//! `rctb object serve --control-plane-only`) is off by default; when on,
//! start-up says so on stderr.
//!
//! SIGINT or SIGTERM shuts down gracefully: new requests answer 503, the
//! admitted ones (data phases, commits) finish, then the process exits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::rcsession::{RcError, ServerConfig, SessionManager};
use rctb_core::transport::Transport;

use crate::auth::{Users, wall_clock};
use crate::engine::{Engine, Pacing};
use crate::http::{Gateway, GatewayOptions, serve};
use crate::store::{FsStore, ObjectStore, S3Options};

/// What `serve_*` needs.
// Not non_exhaustive: every field is required (no default root, users or
// seed); what may grow goes in the non_exhaustive GatewayOptions and ServerConfig.
#[derive(Debug)]
pub struct ServeOptions {
    /// The object store's directory (unused with `s3`).
    pub root: PathBuf,
    /// Objects in an S3 bucket (`S3Store`, feature `s3`) instead of under `root`.
    pub s3: Option<S3Options>,
    /// The HTTP listen address.
    pub listen: SocketAddr,
    /// Who may sign requests.
    pub users: Users,
    /// The SigV4 region.
    pub region: String,
    /// Seeds version ids, temporary names and session ids.
    pub seed: [u8; 32],
    /// The session server's configuration (port, GID index, limits).
    pub server: ServerConfig,
    /// The HTTP routes' options (test mode, part limit).
    pub gateway: GatewayOptions,
}

/// Serves with the session server on a simulated fabric.
pub fn serve_sim(opts: ServeOptions) -> std::io::Result<()> {
    let cfg = opts.server;
    let mut sim_seed = [0u8; 8];
    sim_seed.copy_from_slice(&opts.seed[8..16]);
    let sim_seed = u64::from_le_bytes(sim_seed);
    serve_with(
        opts,
        move |rng| {
            let sim = rctb_sim::Sim::new(sim_seed);
            let node = sim
                .add_node(rctb_sim::NodeConfig::new("gateway", std::net::Ipv4Addr::new(10, 0, 0, 1)))
                .map_err(|_| RcError::Internal("cannot add the simulated node"))?;
            SessionManager::new(sim.transport(node), rng, cfg)
        },
        Pacing::SIM,
    )
}

/// Serves until SIGINT/SIGTERM with the manager `make` builds on the
/// engine thread (from a seeded RNG for session ids). Prints
/// `listening on ADDR` once the socket is bound (port 0 picks one).
pub fn serve_with<T, F>(opts: ServeOptions, make: F, pacing: Pacing) -> std::io::Result<()>
where
    T: Transport + 'static,
    F: FnOnce(ChaCha8Rng) -> Result<SessionManager<T, ChaCha8Rng>, RcError> + Send + 'static,
{
    let rng = Box::new(ChaCha8Rng::from_seed(opts.seed));
    let store: Arc<dyn ObjectStore> = match &opts.s3 {
        #[cfg(feature = "s3")]
        Some(s3) => {
            use crate::store::S3Store;
            // Fail at start-up, not at the first request, when the bucket
            // does not answer.
            let s = S3Store::connect(s3, rng).map_err(|e| std::io::Error::other(e.to_string()))?;
            s.check().map_err(|e| std::io::Error::other(e.to_string()))?;
            eprintln!("objects in the {}", s.name());
            Arc::new(s)
        }
        #[cfg(not(feature = "s3"))]
        Some(_) => {
            return Err(std::io::Error::other(
                "--store s3://: this rctb was built without the s3 feature (cargo build --release -p rctb --features s3)",
            ));
        }
        None => Arc::new(FsStore::open(&opts.root, rng).map_err(|e| std::io::Error::other(e.to_string()))?),
    };
    let mut session_seed = opts.seed;
    session_seed[0] ^= 0x5e;
    let engine = Engine::spawn_paced(move || make(ChaCha8Rng::from_seed(session_seed)), pacing)?;
    let gw = Gateway::new(engine, store, opts.users, &opts.region, wall_clock()).with_options(opts.gateway);
    if opts.gateway.control_plane_only {
        eprintln!(
            "control-plane-only test mode: READY with x-amz-rdma-qpn 0 answers OK without moving data (a PUT commits nothing)"
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(opts.listen).await?;
        println!("listening on {}", listener.local_addr()?);
        let server = tokio::spawn(serve(gw.clone(), listener));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = server => return r.map_err(std::io::Error::other)?,
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("shutting down: new requests answer 503, {} in progress finish", gw.gate.active());
        gw.shutdown().await;
        Ok(())
    })
}
