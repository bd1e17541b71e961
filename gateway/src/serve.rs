//! `rctb object serve`: the control plane over real HTTP with the session
//! server on a simulated fabric (`--backend sim`), so clients in other
//! processes can exercise every route and every READY check that precedes
//! the data phase without RDMA hardware.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::rcsession::{ServerConfig, SessionManager};

use crate::auth::{Users, wall_clock};
use crate::engine::Engine;
use crate::http::{Gateway, serve};
use crate::store::FsStore;

/// What `serve_sim` needs.
#[derive(Debug)]
pub struct ServeOptions {
    pub root: PathBuf,
    pub listen: SocketAddr,
    pub users: Users,
    pub region: String,
    /// Seeds version ids, temporary names and session ids.
    pub seed: [u8; 32],
}

/// Serves until the process is killed. Prints `listening on ADDR` once
/// the socket is bound (port 0 picks one).
pub fn serve_sim(opts: ServeOptions) -> std::io::Result<()> {
    let store = FsStore::open(&opts.root, Box::new(ChaCha8Rng::from_seed(opts.seed)))
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut session_seed = opts.seed;
    session_seed[0] ^= 0x5e;
    let engine = Engine::spawn(
        move || {
            let sim = rctb_sim::Sim::new(u64::from_le_bytes(session_seed[..8].try_into().unwrap_or_default()));
            let node = sim
                .add_node(rctb_sim::NodeConfig::new("gateway", std::net::Ipv4Addr::new(10, 0, 0, 1)))
                .map_err(|_| rctb_core::rcsession::RcError::Internal("cannot add the simulated node"))?;
            SessionManager::new(sim.transport(node), ChaCha8Rng::from_seed(session_seed), ServerConfig::default())
        },
        Arc::new(store),
    )?;
    let gw = Gateway { engine, users: Arc::new(opts.users), region: opts.region, clock: wall_clock() };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(opts.listen).await?;
        println!("listening on {}", listener.local_addr()?);
        serve(gw, listener).await
    })
}
