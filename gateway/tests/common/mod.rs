//! The test rig shared by the gateway's integration tests: the gateway
//! over real HTTP on 127.0.0.1 with the session server on the simulator,
//! and simulated RDMA clients in the same fabric. The simulator is
//! single-threaded, so the clients live on the engine thread (a
//! thread-local there) and run as engine jobs ([`EngineRdma`]).

#![allow(dead_code)] // each test file uses part of the rig

use std::cell::RefCell;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::rcsession::{
    ClientConfig, ClientTransfer, Op, PrepareReply, PrepareRequest, RcClient, ReadyRequest, ServerConfig,
    SessionManager,
};
use rctb_core::wire::hipobj::{Crc64Nvme, PrepareHeaders, PrincipalId};
use rctb_gateway::auth::{self, User, Users};
use rctb_gateway::client::{
    ControlPlane, Credentials, Endpoint, ObjectClient, ObjectError, RdmaJob, RdmaPort, RdmaRunner,
};
use rctb_gateway::engine::Engine;
use rctb_gateway::http::{Gateway, GatewayOptions, serve};
use rctb_gateway::store::{FsStore, ObjectStore};
use rctb_sim::{NodeConfig, Sim, SimTransport};
use tokio::net::{TcpListener, TcpStream};

pub const ADMIN: (&str, &str) = ("AKADMIN", "adminsecret");
pub const ALICE: (&str, &str) = ("AKALICE", "alicesecret");
pub const BOB: (&str, &str) = ("AKBOB", "bobsecret");

/// The fixed time of every request and of the server's clock.
pub fn t0() -> SystemTime {
    auth::parse_amz_date("20261129T120000Z").unwrap()
}

/// A simulated client port: an `RcClient` whose first `skip_recv`
/// connects do not post the GET receive (a slow client: the server's
/// WRITE meets RNR NAKs and, with few RNR retries, READY answers BUSY).
pub struct SimPort {
    pub c: RcClient<SimTransport>,
    pub skip_recv: u32,
}

impl RdmaPort for SimPort {
    fn capacity(&self) -> u64 {
        RdmaPort::capacity(&self.c)
    }
    fn begin(
        &mut self,
        principal: PrincipalId,
        op: Op,
        target: &str,
        size: u64,
        psn: u32,
        cookie: u32,
    ) -> Result<(ClientTransfer, PrepareRequest), ObjectError> {
        RdmaPort::begin(&mut self.c, principal, op, target, size, psn, cookie)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), ObjectError> {
        self.c.write_at(offset, data)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ObjectError> {
        self.c.read_at(offset, buf)
    }
    fn connect(&mut self, xfer: &mut ClientTransfer, reply: &PrepareReply) -> Result<ReadyRequest, ObjectError> {
        if self.skip_recv > 0 && xfer.op == Op::Get {
            self.skip_recv -= 1;
            return Ok(RcClient::connect(&mut self.c, xfer, reply, false)?);
        }
        RdmaPort::connect(&mut self.c, xfer, reply)
    }
    fn start_put(&mut self, xfer: &mut ClientTransfer) -> Result<(), ObjectError> {
        RdmaPort::start_put(&mut self.c, xfer)
    }
    fn on_busy(&mut self, xfer: &mut ClientTransfer) -> Result<ReadyRequest, ObjectError> {
        RdmaPort::on_busy(&mut self.c, xfer)
    }
    fn wait_get(&mut self, xfer: &mut ClientTransfer, timeout: std::time::Duration) -> Result<(), ObjectError> {
        RdmaPort::wait_get(&mut self.c, xfer, timeout)
    }
    fn abandon(&mut self, xfer: &mut ClientTransfer) {
        RdmaPort::abandon(&mut self.c, xfer)
    }
}

thread_local! {
    /// The simulated clients, on the engine thread.
    static CLIENTS: RefCell<Vec<SimPort>> = const { RefCell::new(Vec::new()) };
}

/// Runs client `index`'s jobs on the engine thread.
#[derive(Debug)]
pub struct EngineRdma {
    engine: Engine,
    index: usize,
}

impl RdmaRunner for EngineRdma {
    fn submit(&self, job: RdmaJob) -> Result<(), ObjectError> {
        let i = self.index;
        self.engine.submit(move |_| CLIENTS.with(|c| job(&mut c.borrow_mut()[i]))).map_err(|_| ObjectError::Stopped)
    }
}

/// How to build a rig.
#[derive(Clone, Debug)]
pub struct RigOptions {
    pub server: ServerConfig,
    pub clients: usize,
    pub client: ClientConfig,
    pub seed: u64,
    /// The HTTP routes' options (the control-plane-only test mode is off
    /// by default, as in `rctb object serve`).
    pub gateway: GatewayOptions,
    /// The gateway's store instead of the rig's FsStore (which is still
    /// made, and then unused): tests/s3_gateway.rs puts S3Store here.
    pub backend: Option<Arc<dyn ObjectStore>>,
}

impl Default for RigOptions {
    fn default() -> Self {
        RigOptions {
            server: ServerConfig::default(),
            clients: 1,
            client: {
                let mut client_config = ClientConfig::default();
                client_config.capacity = 1 << 20;
                client_config
            },
            seed: 11,
            gateway: GatewayOptions::default(),
            backend: None,
        }
    }
}

pub struct Rig {
    pub addr: std::net::SocketAddr,
    pub gw: Gateway,
    pub store: Arc<FsStore>,
    pub dir: tempfile::TempDir,
    pub seed: u64,
}

impl Rig {
    pub async fn start(o: RigOptions) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        // The store's root is a subdirectory, so a test can see that
        // nothing is ever written beside it.
        let root = dir.path().join("root");
        let store = Arc::new(FsStore::open(&root, Box::new(ChaCha8Rng::seed_from_u64(o.seed ^ 3))).unwrap());
        let backend: Arc<dyn ObjectStore> = o.backend.clone().unwrap_or_else(|| store.clone());
        let (seed, n, server, client) = (o.seed, o.clients, o.server, o.client);
        let engine = Engine::spawn(move || {
            let sim = Sim::new(seed);
            let gw = sim.add_node(NodeConfig::new("gw", "10.0.0.1".parse().unwrap())).unwrap();
            let mut ports = Vec::new();
            for i in 0..n {
                let ip = std::net::Ipv4Addr::new(10, 0, 1 + (i / 200) as u8, 2 + (i % 200) as u8);
                let c = sim.add_node(NodeConfig::new(format!("client{i}"), ip)).unwrap();
                ports.push(SimPort { c: RcClient::new(sim.transport(c), client).unwrap(), skip_recv: 0 });
            }
            CLIENTS.with(|c| *c.borrow_mut() = ports);
            SessionManager::new(sim.transport(gw), ChaCha8Rng::seed_from_u64(seed ^ 5), server)
        })
        .unwrap();
        let user = |(a, s): (&str, &str), admin| User { access_key: a.into(), secret_key: s.into(), admin };
        let users = Users::new([user(ADMIN, true), user(ALICE, false), user(BOB, false)]);
        let gw = Gateway::new(engine, backend, users, "us-east-1", Arc::new(t0)).with_options(o.gateway);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(gw.clone(), listener));
        Rig { addr, gw, store, dir, seed }
    }

    /// The control plane as `who`.
    pub fn control_plane(&self, who: (&str, &str)) -> Arc<ControlPlane> {
        let ep = Endpoint::parse(&format!("http://{}", self.addr)).unwrap();
        Arc::new(ControlPlane::new(ep, Credentials::new(who.0, who.1, "us-east-1"), Arc::new(t0)))
    }

    /// An object client as Alice over simulated client `index`.
    pub fn client(&self, index: usize) -> ObjectClient {
        let rdma = Arc::new(EngineRdma { engine: self.gw.engine.clone(), index });
        ObjectClient::new(self.control_plane(ALICE), rdma, self.seed.wrapping_mul(1000) + index as u64)
    }

    /// Runs `f` on simulated client `index` (on the engine thread).
    pub async fn on_client<X: Send + 'static>(
        &self,
        index: usize,
        f: impl FnOnce(&mut SimPort) -> X + Send + 'static,
    ) -> X {
        self.gw.engine.call(move |_| CLIENTS.with(|c| f(&mut c.borrow_mut()[index]))).await.unwrap()
    }

    pub async fn live_sessions(&self) -> usize {
        self.gw.engine.call(|x| x.usage().sessions).await.unwrap() as usize
    }
}

/// An answer to a raw request.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn h(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn code(&self) -> String {
        self.body.split("<Code>").nth(1).and_then(|s| s.split("</Code>").next()).unwrap_or("").to_string()
    }

    pub fn message(&self) -> String {
        self.body.split("<Message>").nth(1).and_then(|s| s.split("</Message>").next()).unwrap_or("").to_string()
    }
}

/// Sends one raw request on a new connection, signed by `who` at `at`
/// (unsigned when `who` is None).
pub async fn send(
    rig: &Rig,
    method: &str,
    path: &str,
    who: Option<(&str, &str)>,
    at: SystemTime,
    headers: &[(&str, &str)],
) -> Answer {
    let mut h: Vec<(String, String)> = vec![("host".into(), rig.addr.to_string())];
    h.extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    if let Some((a, sk)) = who {
        let u = User { access_key: a.into(), secret_key: sk.into(), admin: false };
        let add = auth::sign(&u, "us-east-1", at, method, path, &h, b"").unwrap();
        h.extend(add);
    }
    let stream = TcpStream::connect(rig.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method(method).uri(path);
    for (k, v) in &h {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = sender.send_request(req.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let headers =
        resp.headers().iter().map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap().to_string())).collect();
    let body = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Answer { status, headers, body }
}

pub async fn post(rig: &Rig, path: &str, who: (&str, &str), headers: &[(&str, &str)]) -> Answer {
    send(rig, "POST", path, Some(who), t0(), headers).await
}

/// A deterministic payload.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i as u32).wrapping_mul(2654435761) >> 13) as u8 ^ seed).collect()
}

/// The headers of a well-formed PREPARE of `op` on `target` (no token).
pub fn prepare_headers<'a>(op: &'a str, target: &'a str, size: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("x-amz-rdma-protocol", "hipobj-rc-v2"),
        ("x-amz-rdma-op", op),
        ("x-amz-rdma-target", target),
        ("x-amz-rdma-size", size),
        ("x-amz-rdma-offset", "0"),
        ("x-amz-rdma-psn", "abc"),
        ("x-amz-rdma-cookie", "1234abcd"),
    ]
}

/// PREPARE of `target` over HTTP (as ALICE) and connect simulated client
/// `idx` to the reply: the transfer and its READY request.
pub async fn prepared(
    rig: &Rig,
    idx: usize,
    op: Op,
    target: &str,
    data: Vec<u8>,
    checksum: Option<Crc64Nvme>,
) -> (ClientTransfer, ReadyRequest) {
    let principal = PrincipalId::from_credentials(ALICE.0, ALICE.1);
    let (t, size) = (target.to_string(), data.len() as u64);
    let (xfer, req) = rig
        .on_client(idx, move |p| {
            p.write_at(0, &data).unwrap();
            p.begin(principal, op, &t, size, 0x123, 0xC00C1E).unwrap()
        })
        .await;
    let h = PrepareHeaders {
        op,
        target: req.target,
        size,
        offset: 0,
        psn: req.client_psn,
        cookie: req.cookie,
        token: req.client_token,
        checksum,
    };
    let reply = rig.control_plane(ALICE).prepare(&h).await.unwrap();
    rig.on_client(idx, move |p| {
        let mut x = xfer;
        let r = p.connect(&mut x, &reply).unwrap();
        (x, r)
    })
    .await
}
