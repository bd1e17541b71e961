//! PUT then GET over real HTTP with the data phase on the simulator: the
//! client's RC QP lives in the same simulated fabric as the server's, on
//! the engine thread (the simulator is single-threaded), and the test
//! drives it there through `Engine::call`.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::rcsession::{ClientConfig, ClientTransfer, Op, PrepareReply, RcClient, ServerConfig, SessionManager};
use rctb_core::wire::hipobj::{Crc64Nvme, PrincipalId, RdmaToken, SessionId};
use rctb_gateway::auth::{self, User, Users};
use rctb_gateway::engine::Engine;
use rctb_gateway::http::{Gateway, serve};
use rctb_gateway::store::{FsStore, ObjectPath, ObjectStore, StoreError};
use rctb_sim::{NodeConfig, Sim, SimTransport};
use tokio::net::{TcpListener, TcpStream};

const ALICE: (&str, &str) = ("AKALICE", "alicesecret");

thread_local! {
    static CLIENT: RefCell<Option<RcClient<SimTransport>>> = const { RefCell::new(None) };
}

fn t0() -> SystemTime {
    auth::parse_amz_date("20261129T120000Z").unwrap()
}

struct Server {
    addr: std::net::SocketAddr,
    gw: Gateway,
    store: Arc<FsStore>,
    _dir: tempfile::TempDir,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FsStore::open(dir.path(), Box::new(ChaCha8Rng::seed_from_u64(3))).unwrap());
    let engine = Engine::spawn(
        || {
            let sim = Sim::new(11);
            let n = sim.add_node(NodeConfig::new("gw", "10.0.0.1".parse().unwrap())).unwrap();
            let c = sim.add_node(NodeConfig::new("client", "10.0.0.2".parse().unwrap())).unwrap();
            let client =
                RcClient::new(sim.transport(c), ClientConfig { capacity: 1 << 20, ..ClientConfig::default() }).unwrap();
            CLIENT.with(|x| *x.borrow_mut() = Some(client));
            SessionManager::new(sim.transport(n), ChaCha8Rng::seed_from_u64(5), ServerConfig::default())
        },
        store.clone(),
    )
    .unwrap();
    let gw = Gateway {
        engine,
        users: Arc::new(Users::new([User { access_key: ALICE.0.into(), secret_key: ALICE.1.into(), admin: false }])),
        region: "us-east-1".into(),
        clock: Arc::new(t0),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(gw.clone(), listener));
    Server { addr, gw, store, _dir: dir }
}

/// Runs `f` with the client on the engine thread.
async fn on_client<X: Send + 'static>(
    s: &Server,
    f: impl FnOnce(&mut RcClient<SimTransport>) -> X + Send + 'static,
) -> X {
    s.gw.engine.call(move |_| CLIENT.with(|c| f(c.borrow_mut().as_mut().unwrap()))).await.unwrap()
}

async fn post(s: &Server, path: &str, headers: &[(String, String)]) -> (u16, Vec<(String, String)>, String) {
    let mut h: Vec<(String, String)> = vec![("host".into(), s.addr.to_string())];
    h.extend(headers.iter().cloned());
    let u = User { access_key: ALICE.0.into(), secret_key: ALICE.1.into(), admin: false };
    h.extend(auth::sign(&u, "us-east-1", t0(), "POST", path, &h, b"").unwrap());
    let stream = TcpStream::connect(s.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method("POST").uri(path);
    for (k, v) in &h {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = sender.send_request(req.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let headers =
        resp.headers().iter().map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap().to_string())).collect();
    let body = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    (status, headers, body)
}

fn get<'a>(h: &'a [(String, String)], name: &str) -> &'a str {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {name} in {h:?}"))
}

fn hv(k: &str, v: impl Into<String>) -> (String, String) {
    (k.to_string(), v.into())
}

/// PREPARE over HTTP, then connect the client's QP; returns the transfer.
async fn prepare(
    s: &Server,
    op: Op,
    target: &'static str,
    data: Vec<u8>,
    size: u64,
    checksum: Option<Crc64Nvme>,
) -> Result<ClientTransfer, (u16, String)> {
    let who = PrincipalId::from_credentials(ALICE.0, ALICE.1);
    let (xfer, req) = on_client(s, move |c| {
        if op == Op::Put {
            c.write_payload(&data).unwrap();
        }
        c.begin(who, op, target, size, 0x123, 0xC00C1E).unwrap()
    })
    .await;
    let mut h = vec![
        hv("x-amz-rdma-protocol", "hipobj-rc-v2"),
        hv("x-amz-rdma-op", op.name()),
        hv("x-amz-rdma-target", target),
        hv("x-amz-rdma-size", size.to_string()),
        hv("x-amz-rdma-offset", "0"),
        hv("x-amz-rdma-psn", format!("{:x}", req.client_psn)),
        hv("x-amz-rdma-cookie", format!("{:x}", req.cookie)),
        hv("x-amz-rdma-token", req.client_token.clone().unwrap()),
    ];
    if let Some(c) = checksum {
        h.push(hv("x-amz-rdma-checksum", c.to_header()));
    }
    let (status, rh, body) = post(s, "/.hipobj-rc/prepare", &h).await;
    if status != 200 {
        return Err((status, body));
    }
    let token = get(&rh, "x-amz-rdma-reply").strip_prefix("200:").unwrap();
    let hex = |n: &str| u64::from_str_radix(get(&rh, n), 16).unwrap();
    let opt_hex = |n: &str| rh.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| u64::from_str_radix(v, 16).unwrap());
    let reply = PrepareReply {
        session: SessionId::parse(get(&rh, "x-amz-rdma-session")).unwrap(),
        server_qpn: hex("x-amz-rdma-qpn") as u32,
        server_psn: hex("x-amz-rdma-psn") as u32,
        staging_addr: opt_hex("x-amz-rdma-mr-addr"),
        staging_rkey: opt_hex("x-amz-rdma-mr-rkey") as u32,
        reply_token: Some(RdmaToken::from_hex(token).unwrap()),
    };
    Ok(on_client(s, move |c| {
        let mut x = xfer;
        c.connect(&mut x, &reply, true).unwrap();
        match op {
            Op::Put => c.start_put(&mut x).unwrap(),
            Op::Get => c.ready_sent(&mut x),
        }
        x
    })
    .await)
}

async fn ready(s: &Server, x: ClientTransfer) -> (u16, Vec<(String, String)>, String) {
    let r = on_client(s, move |c| c.ready_request(&x)).await;
    let h = vec![
        hv("x-amz-rdma-protocol", "hipobj-rc-v2"),
        hv("x-amz-rdma-session", r.session.to_string()),
        hv("x-amz-rdma-cookie", format!("{:x}", r.cookie)),
        hv("x-amz-rdma-qpn", format!("{:x}", r.client_qpn)),
        hv("x-amz-rdma-mr-addr", format!("{:x}", r.client_mr_addr)),
        hv("x-amz-rdma-mr-rkey", format!("{:x}", r.client_mr_rkey)),
    ];
    post(s, "/.hipobj-rc/ready", &h).await
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_then_get_is_byte_identical_with_etag_and_version() {
    let s = start().await;
    for (i, size) in [1usize, 4096, 100_000].into_iter().enumerate() {
        let data = pattern(size, i as u8);
        let target: &'static str = Box::leak(format!("/bk/dir/obj{i}").into_boxed_str());
        let x = prepare(&s, Op::Put, target, data.clone(), size as u64, Some(Crc64Nvme::of(&data))).await.unwrap();
        let (status, h, body) = ready(&s, x).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(get(&h, "x-amz-rdma-bytes-transferred"), size.to_string());
        assert_eq!(get(&h, "x-amz-rdma-cookie"), "00C00C1E");
        let meta = s.store.head(&ObjectPath::from_target(target).unwrap()).unwrap();
        assert_eq!(get(&h, "x-amz-rdma-etag"), meta.etag);
        assert_eq!(get(&h, "x-amz-rdma-version-id"), meta.version_id);
        assert_eq!(meta.size, size as u64);

        let x = prepare(&s, Op::Get, target, Vec::new(), size as u64, None).await.unwrap();
        let (status, h, body) = ready(&s, x.clone()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(get(&h, "x-amz-rdma-etag"), meta.etag);
        let got = on_client(&s, move |c| {
            let mut x = x;
            assert_eq!(c.poll(&mut x).unwrap(), Some(()));
            let mut buf = vec![0u8; size];
            c.read_payload(&mut buf).unwrap();
            buf
        })
        .await;
        assert!(got == data, "size {size}: GET differs from PUT");
    }
    assert_eq!(s.gw.engine.call(|x| x.usage().sessions).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_mismatch_is_verify_fail_and_writes_nothing() {
    let s = start().await;
    let data = pattern(5000, 9);
    let x = prepare(&s, Op::Put, "/bk/bad", data.clone(), 5000, Some(Crc64Nvme::of(b"other"))).await.unwrap();
    let (status, _h, body) = ready(&s, x).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("<Code>RdmaTransferFailed</Code>") && body.contains("VERIFY_FAIL"), "{body}");
    assert!(matches!(s.store.head(&ObjectPath::new("bk", "bad").unwrap()), Err(StoreError::NoSuchKey)));
    assert_eq!(s.gw.engine.call(|x| x.usage().sessions).await.unwrap(), 0);
}
