//! PUT and GET over real HTTP on 127.0.0.1 with the data phase on the
//! simulator: the gateway's own client (`rctb_gateway::client`) against
//! the gateway, sizes 0 to 64 MiB byte-identical, concurrent clients and
//! concurrent data phases, limits (429), BUSY (409, retried), the
//! control-plane-only READY, and a graceful shutdown (503 for new
//! requests while the admitted ones finish).

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{ALICE, Rig, RigOptions, pattern, post, prepared};
use rctb_core::rcsession::{ClientConfig, Limits, Op, ReadyRequest, ServerConfig};
use rctb_core::wire::hipobj::{Crc64Nvme, PrepareHeaders};
use rctb_gateway::client::{NoProgress, ObjectError, RdmaPort, ReadyAnswer, target};
use rctb_gateway::http::GatewayOptions;
use rctb_gateway::store::{ObjectPath, ObjectStore, StoreError};

fn big_rig(capacity: u64, clients: usize) -> RigOptions {
    RigOptions {
        clients,
        client: {
            let mut client_config = ClientConfig::default();
            client_config.capacity = capacity;
            client_config
        },
        ..RigOptions::default()
    }
}

/// Waits (yielding) until `cond` holds on the engine.
async fn until(
    rig: &Rig,
    cond: impl Fn(&mut dyn rctb_gateway::engine::Sessions) -> bool + Send + Sync + Copy + 'static,
) {
    for _ in 0..100_000 {
        if rig.gw.engine.call(cond).await.unwrap() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("the condition never held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_then_get_is_byte_identical_from_0_bytes_to_64_mib() {
    let rig = Rig::start(big_rig(64 << 20, 1)).await;
    let c = rig.client(0);
    let sizes = [0usize, 1, 4096, 4097, 100_003, (1 << 20) + 7, 64 << 20];
    for (i, size) in sizes.into_iter().enumerate() {
        let data = pattern(size, i as u8);
        let key = format!("dir/obj {i}");
        let put = c.put("bk", &key, Bytes::from(data.clone()), &NoProgress).await.unwrap();
        let meta = rig.store.head(&ObjectPath::new("bk", &key).unwrap()).unwrap();
        assert_eq!((put.size, meta.size), (size as u64, size as u64));
        assert_eq!(put.etag, meta.etag, "size {size}");
        assert_eq!(put.version_id, meta.version_id, "size {size}");
        let (got, info) = c.get("bk", &key, &NoProgress).await.unwrap();
        assert!(got == data, "size {size}: GET differs from PUT");
        assert_eq!((info.etag, info.version_id), (meta.etag, meta.version_id), "size {size}");
    }
    assert_eq!(rig.live_sessions().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_mismatch_is_verify_fail_and_writes_nothing() {
    let rig = Rig::start(RigOptions::default()).await;
    let data = pattern(5000, 9);
    let (x, r) = prepared(&rig, 0, Op::Put, &target("bk", "bad"), data, Some(Crc64Nvme::of(b"other"))).await;
    let cp = rig.control_plane(ALICE);
    let ready = tokio::spawn(async move { cp.ready(&r).await });
    rig.on_client(0, move |p| p.start_put(&mut x.clone()).unwrap()).await;
    match ready.await.unwrap() {
        Err(ObjectError::Http { status: 502, code, message, capabilities, .. }) => {
            assert_eq!(code, "RdmaTransferVerifyFailed");
            assert!(message.contains("VERIFY_FAIL"), "{message}");
            assert_eq!(capabilities.as_deref(), Some("mp"), "the session existed: the answer advertises");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(rig.store.head(&ObjectPath::new("bk", "bad").unwrap()), Err(StoreError::NoSuchKey)));
    assert_eq!(rig.live_sessions().await, 0);
}

/// Two PUT data phases run at once: both READYs wait for their clients'
/// WRITEs together (one engine thread, no data phase holds it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_phases_run_concurrently() {
    let rig = Rig::start(big_rig(1 << 20, 2)).await;
    let a = pattern(300_000, 1);
    let b = pattern(70_001, 2);
    let (xa, ra) = prepared(&rig, 0, Op::Put, &target("bk", "a"), a.clone(), Some(Crc64Nvme::of(&a))).await;
    let (xb, rb) = prepared(&rig, 1, Op::Put, &target("bk", "b"), b.clone(), Some(Crc64Nvme::of(&b))).await;
    let (cpa, cpb) = (rig.control_plane(ALICE), rig.control_plane(ALICE));
    let ready_a = tokio::spawn(async move { cpa.ready(&ra).await });
    let ready_b = tokio::spawn(async move { cpb.ready(&rb).await });
    until(&rig, |s| s.in_flight() == 2).await;
    rig.on_client(1, move |p| p.start_put(&mut xb.clone()).unwrap()).await;
    rig.on_client(0, move |p| p.start_put(&mut xa.clone()).unwrap()).await;
    for (ready, key, data) in [(ready_a, "a", a), (ready_b, "b", b)] {
        let answer = ready.await.unwrap().unwrap();
        assert!(matches!(answer, ReadyAnswer::Ok { bytes, .. } if bytes == data.len() as u64), "{answer:?}");
        let mut got = vec![0u8; data.len()];
        rig.store.read_range(&ObjectPath::new("bk", key).unwrap(), 0, &mut got).unwrap();
        assert!(got == data, "{key}");
    }
    assert_eq!(rig.live_sessions().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_each_get_their_own_bytes() {
    const N: usize = 8;
    let rig = Arc::new(Rig::start(big_rig(1 << 20, N)).await);
    let mut tasks = Vec::new();
    for i in 0..N {
        let rig = rig.clone();
        tasks.push(tokio::spawn(async move {
            let c = rig.client(i);
            for round in 0..3 {
                let size = 1 + (i * 77_777 + round * 13_131) % (1 << 20);
                let data = pattern(size, (i * 3 + round) as u8);
                let key = format!("c{i}/r{round}");
                c.put("bk", &key, Bytes::from(data.clone()), &NoProgress).await.unwrap();
                let (got, _) = c.get("bk", &key, &NoProgress).await.unwrap();
                assert!(got == data, "client {i} round {round}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(rig.live_sessions().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_429_and_free_up() {
    let mut limits = Limits::generous();
    limits.max_sessions = 2;
    let rig = Rig::start(RigOptions {
        server: {
            let mut server_config = ServerConfig::default();
            server_config.limits = limits;
            server_config
        },
        ..RigOptions::default()
    })
    .await;
    let h = |t: &'static str| {
        vec![
            ("x-amz-rdma-protocol", "hipobj-rc-v2"),
            ("x-amz-rdma-op", "PUT"),
            ("x-amz-rdma-target", t),
            ("x-amz-rdma-size", "100"),
            ("x-amz-rdma-offset", "0"),
            ("x-amz-rdma-psn", "1"),
            ("x-amz-rdma-cookie", "5"),
        ]
    };
    let first = post(&rig, "/.hipobj-rc/prepare", ALICE, &h("/bk/1")).await;
    assert_eq!(first.status, 200);
    assert_eq!(post(&rig, "/.hipobj-rc/prepare", ALICE, &h("/bk/2")).await.status, 200);
    let third = post(&rig, "/.hipobj-rc/prepare", ALICE, &h("/bk/3")).await;
    assert_eq!((third.status, third.code().as_str()), (429, "RdmaResourceLimit"), "{}", third.body);
    assert_eq!(rig.live_sessions().await, 2);
    let session = first.h("x-amz-rdma-session").unwrap().to_string();
    let cancel = [("x-amz-rdma-protocol", "hipobj-rc-v2"), ("x-amz-rdma-session", session.as_str())];
    assert_eq!(post(&rig, "/.hipobj-rc/cancel", ALICE, &cancel).await.status, 200);
    assert_eq!(post(&rig, "/.hipobj-rc/prepare", ALICE, &h("/bk/3")).await.status, 200);
}

/// A client that posts its GET receive late: the server's WRITE meets RNR
/// NAKs, READY answers 409 BUSY; the client's retry then succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_409_and_the_client_retries() {
    let mut server = ServerConfig::default();
    server.rnr_retry = 0;
    let rig = Rig::start(RigOptions { server, ..RigOptions::default() }).await;
    let data = pattern(10_000, 4);
    rig.store.put(&ObjectPath::new("bk", "busy").unwrap(), &data).unwrap();

    rig.on_client(0, |p| p.skip_recv = 1).await;
    let c = rig.client(0);
    let (got, t) = c.get("bk", "busy", &NoProgress).await.unwrap();
    assert!(got == data);
    assert_eq!(t.busy_retries, 1, "the first READY must have been BUSY");
    assert_eq!(rig.live_sessions().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_busy_ready_is_409() {
    let mut server = ServerConfig::default();
    server.rnr_retry = 0;
    let rig = Rig::start(RigOptions { server, ..RigOptions::default() }).await;
    let data = pattern(3000, 5);
    rig.store.put(&ObjectPath::new("bk", "o").unwrap(), &data).unwrap();
    rig.on_client(0, |p| p.skip_recv = 1).await;
    let (_x, r) = prepared(&rig, 0, Op::Get, &target("bk", "o"), vec![0; 3000], None).await;
    let a = rig.control_plane(ALICE).ready(&r).await.unwrap();
    assert_eq!(a, ReadyAnswer::Busy);
    // The session is Prepared again: CANCEL frees it.
    assert_eq!(rig.live_sessions().await, 1);
    rig.control_plane(ALICE).cancel(r.session).await.unwrap();
    assert_eq!(rig.live_sessions().await, 0);
}

/// READY with client QPN 0 over HTTP in the control-plane-only test mode:
/// no data moves, the reply says `size` bytes, and a PUT commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_only_ready_over_http() {
    let mut gateway = GatewayOptions::default();
    gateway.control_plane_only = true;
    let rig = Rig::start(RigOptions { clients: 0, gateway, ..RigOptions::default() }).await;
    let cp = rig.control_plane(ALICE);
    let h = PrepareHeaders {
        op: Op::Put,
        target: "/bk/cp".into(),
        size: 4096,
        offset: 0,
        psn: 1,
        cookie: 0xabc,
        token: None,
        checksum: None,
    };
    let reply = cp.prepare(&h).await.unwrap();
    let r = ReadyRequest {
        principal: rctb_core::wire::hipobj::PrincipalId::from_credentials(ALICE.0, ALICE.1),
        session: reply.session,
        cookie: 0xabc,
        client_qpn: 0,
        client_mr_addr: 0,
        client_mr_rkey: 0,
    };
    let a = cp.ready(&r).await.unwrap();
    assert_eq!(a, ReadyAnswer::Ok { bytes: 4096, etag: None, version_id: None, capabilities: Some("mp".into()) });
    assert!(matches!(rig.store.head(&ObjectPath::new("bk", "cp").unwrap()), Err(StoreError::NoSuchKey)));
    assert_eq!(rig.live_sessions().await, 0);
    // Its session is gone: a second READY is NO_SESSION.
    match cp.ready(&r).await {
        Err(ObjectError::Http { status: 404, .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// Shutdown: new requests answer 503 while the admitted READY (its data
/// phase waiting for the client's WRITE) finishes and commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_503_while_in_flight_requests_finish() {
    let rig = Rig::start(RigOptions { clients: 2, ..RigOptions::default() }).await;
    let data = pattern(50_000, 6);
    let (x, r) = prepared(&rig, 0, Op::Put, &target("bk", "late"), data.clone(), Some(Crc64Nvme::of(&data))).await;
    let cp = rig.control_plane(ALICE);
    let ready = tokio::spawn(async move { cp.ready(&r).await });
    until(&rig, |s| s.in_flight() == 1).await;
    let gw = rig.gw.clone();
    let shutdown = tokio::spawn(async move { gw.shutdown().await });
    while !rig.gw.gate.is_closing() {
        tokio::task::yield_now().await;
    }
    let c = rig.client(1);
    match c.put("bk", "new", Bytes::from_static(b"x"), &NoProgress).await {
        Err(ObjectError::Http { status: 503, code, .. }) => assert_eq!(code, "RdmaServiceUnavailable"),
        other => panic!("{other:?}"),
    }
    assert!(!shutdown.is_finished(), "shutdown must wait for the admitted READY");
    rig.on_client(0, move |p| p.start_put(&mut x.clone()).unwrap()).await;
    let answer = ready.await.unwrap().unwrap();
    assert!(matches!(answer, ReadyAnswer::Ok { bytes: 50_000, .. }), "{answer:?}");
    shutdown.await.unwrap();
    let mut got = vec![0u8; data.len()];
    rig.store.read_range(&ObjectPath::new("bk", "late").unwrap(), 0, &mut got).unwrap();
    assert!(got == data);
    assert_eq!(rig.live_sessions().await, 0);
}

/// What `rctb object roundtrip` runs, on the simulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundtrip_of_many_objects() {
    let rig = Rig::start(big_rig(64 << 10, 3)).await;
    let clients: Vec<_> = (0..3).map(|i| Arc::new(rig.client(i))).collect();
    let r = rctb_gateway::client::roundtrip(&clients, "rt", "run1", 40, 64 << 10, 9).await;
    assert_eq!(r.failures, Vec::<(String, String)>::new());
    assert_eq!(r.objects, 40);
    assert_eq!(rig.live_sessions().await, 0);
}
