//! The gateway answers as versitygw's RC routes do (docs/protocols.md §3a), over
//! real HTTP on 127.0.0.1 (the serving code of `rctb object serve`, the
//! session server on the simulator): one table per behaviour, each row's
//! status and XML `<Code>` asserted.
//!
//! 1. READY with qpn 0: 400 unless the control-plane-only test mode is on.
//! 2. Target decoding: encoded slashes, decoded upload ids, every refused
//!    query form, GetPart, traversal after decoding.
//! 3. READY outcomes: timeout 504, verify failure 502, wire failure 502,
//!    each with its own code.
//! 4. `x-amz-rdma-capabilities: mp` exactly on the answers given once a
//!    session exists.
//! 5. The client: a multipart object uploaded over RC, read back by part.

mod common;

use bytes::Bytes;
use common::{ALICE, Answer, Rig, RigOptions, pattern, post, prepare_headers, prepared, send, t0};
use rctb_core::rcsession::{ClientConfig, Op, ReadyRequest, ServerConfig};
use rctb_core::time::Duration;
use rctb_core::wire::hipobj::{Crc64Nvme, PrepareHeaders, PrincipalId};
use rctb_gateway::client::{NoProgress, ObjectError, RdmaPort, ReadyAnswer};
use rctb_gateway::http::GatewayOptions;
use rctb_gateway::store::{ObjectPath, ObjectStore, StoreError};

const CAP: &str = "x-amz-rdma-capabilities";

fn ready_headers<'a>(session: &'a str, qpn: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("x-amz-rdma-protocol", "hipobj-rc-v2"),
        ("x-amz-rdma-session", session),
        ("x-amz-rdma-cookie", "1234abcd"),
        ("x-amz-rdma-qpn", qpn),
        ("x-amz-rdma-mr-addr", "0"),
        ("x-amz-rdma-mr-rkey", "0"),
    ]
}

fn test_mode() -> GatewayOptions {
    {
        let mut gateway_options = GatewayOptions::default();
        gateway_options.control_plane_only = true;
        gateway_options
    }
}

async fn prepare(rig: &Rig, op: &str, target: &str, size: &str) -> Answer {
    post(rig, "/.hipobj-rc/prepare", ALICE, &prepare_headers(op, target, size)).await
}

/// Item 1: qpn 0 is refused (naming qpn) and changes nothing, unless the
/// server runs in the control-plane-only test mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_with_qpn_0_is_refused_outside_the_test_mode() {
    // (test mode, qpn, status, code)
    let table = [
        (false, "0", 400, "InvalidRdmaRequest"),
        (false, "000000", 400, "InvalidRdmaRequest"),
        (true, "0", 200, ""),
        (true, "000000", 200, ""),
    ];
    for (mode, qpn, status, code) in table {
        let gateway = if mode { test_mode() } else { GatewayOptions::default() };
        let rig = Rig::start(RigOptions { clients: 0, gateway, ..RigOptions::default() }).await;
        let p = prepare(&rig, "PUT", "/bk/q0", "4096").await;
        assert_eq!(p.status, 200, "{}", p.body);
        let session = p.h("x-amz-rdma-session").unwrap().to_string();
        let a = post(&rig, "/.hipobj-rc/ready", ALICE, &ready_headers(&session, qpn)).await;
        assert_eq!((a.status, a.code().as_str()), (status, code), "mode {mode} qpn {qpn}: {}", a.body);
        if status == 400 {
            assert!(a.message().starts_with("x-amz-rdma-qpn: must be non-zero"), "{}", a.message());
            assert_eq!(a.h(CAP), None, "refused before the data phase");
            // Nothing changed: the session is still Prepared, and a real
            // READY could follow.
            assert_eq!(rig.live_sessions().await, 1);
        } else {
            assert_eq!(a.h("x-amz-rdma-bytes-transferred"), Some("4096"));
            assert_eq!(a.h(CAP), Some("mp"));
            assert!(
                matches!(rig.store.head(&ObjectPath::new("bk", "q0").unwrap()), Err(StoreError::NoSuchKey)),
                "QPN 0 commits nothing"
            );
            assert_eq!(rig.live_sessions().await, 0);
        }
    }
}

/// Stores a 3-part object `bk/multi` (parts of 3, 5 and 2 bytes) and a
/// plain object `bk/a/b`.
fn seed_objects(rig: &Rig) {
    for (n, data) in [(1, &b"one"[..]), (2, b"twoo2"), (3, b"33")] {
        rig.store
            .put(&ObjectPath::from_target(&format!("/bk/multi?partNumber={n}&uploadId=up")).unwrap(), data)
            .unwrap();
    }
    let parts: Vec<(u32, Option<String>)> = (1..=3).map(|n| (n, None)).collect();
    rig.store.complete_upload(&ObjectPath::new("bk", "multi").unwrap(), "up", &parts).unwrap();
    rig.store.put(&ObjectPath::new("bk", "a/b").unwrap(), b"slashed key").unwrap();
}

/// Item 2: PREPARE targets. Accepted forms, and every refused form of
/// §3a's list, each 400 InvalidRdmaRequest naming the query key (or the
/// key rule) before any session exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_decode_and_classify_as_versitygw() {
    let mut gateway = GatewayOptions::default();
    gateway.max_part_number = 500;
    let rig = Rig::start(RigOptions { clients: 0, gateway, ..RigOptions::default() }).await;
    seed_objects(&rig);
    // (op, target, size, status, code, message contains)
    let table: &[(&str, &str, &str, u16, &str, &str)] = &[
        // An encoded slash is a slash of the key: both spellings name bk/a/b.
        ("GET", "/bk/a/b", "11", 200, "", ""),
        ("GET", "/bk/a%2Fb", "11", 200, "", ""),
        ("GET", "/bk/a%2fb", "11", 200, "", ""),
        ("PUT", "/bk/x%2Fy", "10", 200, "", ""),
        // UploadPart, either order, the upload id decoded (a%2Bb is a+b).
        ("PUT", "/bk/k?partNumber=3&uploadId=a%2Bb", "10", 200, "", ""),
        ("PUT", "/bk/k?uploadId=a%2Bb&partNumber=3", "10", 200, "", ""),
        ("PUT", "/bk/k?partNumber=500&uploadId=u", "10", 200, "", ""),
        // GetPart: part N of a completed object, 1..=N within the limit.
        ("GET", "/bk/multi?partNumber=2", "5", 200, "", ""),
        ("GET", "/bk/a/b?partNumber=1", "11", 200, "", ""),
        // Refused, no session made.
        ("PUT", "/bk/k?uploadId=u", "10", 400, "InvalidRdmaRequest", "query key 'partNumber': UploadPart needs"),
        ("PUT", "/bk/k?partNumber=1", "10", 400, "InvalidRdmaRequest", "query key 'uploadId': UploadPart needs"),
        (
            "PUT",
            "/bk/k?partNumber=1&uploadId=",
            "10",
            400,
            "InvalidRdmaRequest",
            "query key 'uploadId': must not be empty",
        ),
        (
            "PUT",
            "/bk/k?partNumber=1&uploadId=u&versionId=3",
            "10",
            400,
            "InvalidRdmaRequest",
            "query key 'versionId': only",
        ),
        ("GET", "/bk/a/b?versionId=3", "11", 400, "InvalidRdmaRequest", "query key 'versionId': only"),
        ("PUT", "/bk/k?checksumCRC32=AAAAAA%3D%3D", "10", 400, "InvalidRdmaRequest", "query key 'checksumCRC32': only"),
        (
            "PUT",
            "/bk/k?partNumber=1&partNumber=2&uploadId=u",
            "10",
            400,
            "InvalidRdmaRequest",
            "query key 'partNumber': must not be repeated",
        ),
        (
            "PUT",
            "/bk/k?partNumber=1&uploadId=u&uploadId=v",
            "10",
            400,
            "InvalidRdmaRequest",
            "query key 'uploadId': must not be repeated",
        ),
        ("PUT", "/bk/k?", "10", 400, "InvalidRdmaRequest", "query key '': an empty query"),
        ("GET", "/bk/a/b?", "11", 400, "InvalidRdmaRequest", "query key '': an empty query"),
        (
            "PUT",
            "/bk/k?partNumber=%zz&uploadId=u",
            "10",
            400,
            "InvalidRdmaRequest",
            "query key 'partNumber': malformed percent-encoding",
        ),
        (
            "PUT",
            "/bk/k?partNumber=1&uploadId=a%2",
            "10",
            400,
            "InvalidRdmaRequest",
            "query key 'uploadId': malformed percent-encoding",
        ),
        (
            "PUT",
            "/bk/k?partNumber=0&uploadId=u",
            "10",
            400,
            "InvalidRdmaRequest",
            "query key 'partNumber': must be a decimal number 1..=10000",
        ),
        ("PUT", "/bk/k?partNumber=-1&uploadId=u", "10", 400, "InvalidRdmaRequest", "query key 'partNumber'"),
        ("PUT", "/bk/k?partNumber=1x&uploadId=u", "10", 400, "InvalidRdmaRequest", "query key 'partNumber'"),
        ("PUT", "/bk/k?partNumber=10001&uploadId=u", "10", 400, "InvalidRdmaRequest", "query key 'partNumber'"),
        ("PUT", "/bk/k?partNumber=501&uploadId=u", "10", 400, "InvalidRdmaRequest", "within the server's part limit"),
        ("GET", "/bk/multi?partNumber=0", "1", 400, "InvalidRdmaRequest", "query key 'partNumber'"),
        ("GET", "/bk/multi?partNumber=501", "1", 400, "InvalidRdmaRequest", "query key 'partNumber'"),
        (
            "GET",
            "/bk/multi?uploadId=up",
            "1",
            400,
            "InvalidRdmaRequest",
            "query key 'uploadId': a GET takes partNumber alone",
        ),
        (
            "GET",
            "/bk/multi?partNumber=1&uploadId=up",
            "1",
            400,
            "InvalidRdmaRequest",
            "query key 'uploadId': a GET takes",
        ),
        // Traversal stays impossible: the checks run after decoding.
        ("PUT", "/bk/%2E%2E%2Fescape", "10", 400, "InvalidRdmaRequest", "key: must not have a . or .. segment"),
        (
            "PUT",
            "/bk/a%2F%2E%2E%2F%2E%2E%2Fescape",
            "10",
            400,
            "InvalidRdmaRequest",
            "key: must not have a . or .. segment",
        ),
        ("GET", "/bk/a%2F..%2F..%2Fescape", "10", 400, "InvalidRdmaRequest", "key: must not have a . or .. segment"),
        ("PUT", "/bk/.%2Fa", "10", 400, "InvalidRdmaRequest", "key: must not have a . or .. segment"),
        ("PUT", "/bk/a%2F%2Fb", "10", 400, "InvalidRdmaRequest", "key: must not have an empty segment"),
        ("PUT", "/bk/%2Fetc", "10", 400, "InvalidRdmaRequest", "key: must not be absolute"),
        ("PUT", "/%2E%2E/k", "10", 400, "InvalidRdmaRequest", "bucket: "),
    ];
    let mut sessions = 0;
    for (op, target, size, status, code, message) in table {
        let a = prepare(&rig, op, target, size).await;
        assert_eq!((a.status, a.code().as_str()), (*status, *code), "{op} {target}: {}", a.body);
        assert!(a.message().contains(message), "{op} {target}: {}", a.message());
        if *status == 200 {
            sessions += 1;
        } else {
            assert!(a.message().starts_with("x-amz-rdma-target: "), "{op} {target}: {}", a.message());
            assert_eq!(a.h(CAP), None, "{op} {target}: refused before any session");
        }
        assert_eq!(rig.live_sessions().await, sessions, "{op} {target}");
    }
    // GetPart past the object's parts, or past the part's end: 416, after
    // the session step (the answer advertises).
    let table = [
        ("/bk/multi?partNumber=4", "1", 416, "InvalidPartNumber"),
        ("/bk/a/b?partNumber=2", "1", 416, "InvalidPartNumber"),
        ("/bk/multi?partNumber=2", "6", 416, "InvalidRange"),
        ("/bk/none?partNumber=1", "1", 404, "NoSuchKey"),
    ];
    for (target, size, status, code) in table {
        let a = prepare(&rig, "GET", target, size).await;
        assert_eq!((a.status, a.code().as_str()), (status, code), "{target}: {}", a.body);
        assert_eq!(a.h(CAP), Some("mp"), "{target}");
    }
    // Nothing was written outside the store's root.
    let beside: Vec<String> =
        std::fs::read_dir(rig.dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(beside, ["root"]);
}

/// Item 3: each READY outcome answers with its own status and code, and
/// advertises (the session existed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_outcomes_answer_by_their_own_codes() {
    #[derive(Debug, Clone, Copy)]
    enum Case {
        /// A PUT whose client never writes, past t_exec.
        Timeout,
        /// A PUT whose data is not what its checksum declared.
        Verify,
        /// A GET into a region the client's rkey does not open.
        Wire,
    }
    let table = [
        (Case::Timeout, 504, "RdmaTransferTimeout", "TIMEOUT"),
        (Case::Verify, 502, "RdmaTransferVerifyFailed", "VERIFY_FAIL"),
        (Case::Wire, 502, "RdmaTransferFailed", "WIRE_FAIL"),
    ];
    for (case, status, code, outcome) in table {
        let mut server = ServerConfig::default();
        server.t_exec = Duration::from_millis(100);
        let rig = Rig::start(RigOptions { server, ..RigOptions::default() }).await;
        rig.store.put(&ObjectPath::new("bk", "src").unwrap(), &pattern(3000, 4)).unwrap();
        let data = pattern(3000, 1);
        let (x, mut r) = match case {
            Case::Timeout => prepared(&rig, 0, Op::Put, "/bk/t", data.clone(), Some(Crc64Nvme::of(&data))).await,
            Case::Verify => prepared(&rig, 0, Op::Put, "/bk/v", data, Some(Crc64Nvme::of(b"other"))).await,
            Case::Wire => prepared(&rig, 0, Op::Get, "/bk/src", vec![0; 3000], None).await,
        };
        if let Case::Wire = case {
            r.client_mr_rkey = r.client_mr_rkey.wrapping_add(0x100);
        }
        let cp = rig.control_plane(ALICE);
        let ready = tokio::spawn(async move { cp.ready(&r).await });
        if let Case::Verify = case {
            rig.on_client(0, move |p| p.start_put(&mut x.clone()).unwrap()).await;
        }
        match ready.await.unwrap() {
            Err(ObjectError::Http { status: s, code: c, message, capabilities, .. }) => {
                assert_eq!((s, c.as_str()), (status, code), "{case:?}: {message}");
                assert!(message.contains(outcome), "{case:?}: {message}");
                assert_eq!(capabilities.as_deref(), Some("mp"), "{case:?}");
            }
            other => panic!("{case:?}: {other:?}"),
        }
        assert!(matches!(rig.store.head(&ObjectPath::new("bk", "t").unwrap()), Err(StoreError::NoSuchKey)));
        assert!(matches!(rig.store.head(&ObjectPath::new("bk", "v").unwrap()), Err(StoreError::NoSuchKey)));
        assert_eq!(rig.live_sessions().await, 0, "{case:?}: the failed session is reaped");
    }
}

/// Item 4: the capability header on exactly the answers given once a
/// session exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_are_advertised_once_a_session_exists() {
    let rig = Rig::start(RigOptions { clients: 1, ..RigOptions::default() }).await;
    seed_objects(&rig);
    let mut table: Vec<(&str, Answer, u16, &str, Option<&str>)> = Vec::new();
    let ok_put = prepare(&rig, "PUT", "/bk/new", "10").await;
    table.push(("PREPARE PUT ok", ok_put, 200, "", None));
    table.push(("PREPARE GET ok", prepare(&rig, "GET", "/bk/a/b", "11").await, 200, "", None));
    table.push(("GET of a missing object", prepare(&rig, "GET", "/bk/nope", "1").await, 404, "NoSuchKey", Some("mp")));
    table.push(("GET past the end", prepare(&rig, "GET", "/bk/a/b", "12").await, 416, "InvalidRange", Some("mp")));
    let bad = prepare(&rig, "PUT", "/bk/k?acl", "10").await;
    table.push(("validation", bad, 400, "InvalidRdmaRequest", None));
    let unsigned = send(&rig, "POST", "/.hipobj-rc/prepare", None, t0(), &prepare_headers("PUT", "/bk/k", "1")).await;
    table.push(("authorization", unsigned, 403, "AccessDenied", None));
    let unknown =
        post(&rig, "/.hipobj-rc/ready", ALICE, &ready_headers("0123456789abcdef0123456789abcdef", "11")).await;
    table.push(("READY of no session", unknown, 404, "NoSuchRdmaSession", None));
    // A whole PUT and GET through the client: READY's success answer.
    let c = rig.client(0);
    assert_eq!(c.control_plane().capabilities(), None, "nothing advertised before a READY");
    let put = c.put("bk", "via-rc", Bytes::from(pattern(2000, 3)), &NoProgress).await.unwrap();
    assert_eq!(put.capabilities.as_deref(), Some("mp"));
    let (_, got) = c.get("bk", "via-rc", &NoProgress).await.unwrap();
    assert_eq!(got.capabilities.as_deref(), Some("mp"));
    assert!(c.control_plane().multipart());
    for (what, a, status, code, cap) in &table {
        assert_eq!((a.status, a.code().as_str()), (*status, *code), "{what}: {}", a.body);
        assert_eq!(a.h(CAP), *cap, "{what}");
    }
    // Admission refused (shutting down): no header either.
    rig.gw.gate.close().await;
    let a = prepare(&rig, "PUT", "/bk/k", "10").await;
    assert_eq!((a.status, a.code().as_str(), a.h(CAP)), (503, "RdmaServiceUnavailable", None));
}

/// Item 5: a multipart object uploaded part by part over RC (an upload id
/// that needs percent-encoding), completed, then read back part by part
/// with GetPart, each part byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_uploads_parts_over_rc_and_reads_them_back_with_get_part() {
    let rig = Rig::start(RigOptions {
        client: {
            let mut client_config = ClientConfig::default();
            client_config.capacity = 1 << 20;
            client_config
        },
        ..RigOptions::default()
    })
    .await;
    let c = rig.client(0);
    let upload = "up+load=1";
    let parts: Vec<Vec<u8>> =
        [70_000usize, 1, 4097, 33].iter().enumerate().map(|(i, n)| pattern(*n, i as u8)).collect();
    let mut etags = Vec::new();
    for (i, data) in parts.iter().enumerate() {
        let n = i as u32 + 1;
        let t = c.put_part("bk", "dir/big one", upload, n, Bytes::from(data.clone()), &NoProgress).await.unwrap();
        assert_eq!(t.size, data.len() as u64);
        etags.push((n, t.etag));
    }
    // The upload id arrived decoded: the parts live under "up+load=1".
    let stored = ObjectPath::from_target("/bk/dir/big%20one?partNumber=2&uploadId=up%2Bload%3D1").unwrap();
    assert_eq!(rig.store.head(&stored).unwrap().size, 1);
    let done = c.control_plane().complete_upload("bk", "dir/big one", upload, &etags).await.unwrap();
    let whole: Vec<u8> = parts.concat();
    let (all, info) = c.get("bk", "dir/big one", &NoProgress).await.unwrap();
    assert!(all == whole, "the whole object is the parts in order");
    assert_eq!(info.etag, done.etag);
    for (i, data) in parts.iter().enumerate() {
        let n = i as u32 + 1;
        let head = c.control_plane().head_part("bk", "dir/big one", n).await.unwrap();
        assert_eq!((head.size, head.parts), (data.len() as u64, 4), "part {n}");
        let (got, t) = c.get_part("bk", "dir/big one", n, &NoProgress).await.unwrap();
        assert!(got == *data, "part {n} differs");
        assert_eq!((t.size, t.etag.as_str()), (data.len() as u64, done.etag.as_str()), "part {n}");
    }
    match c.get_part("bk", "dir/big one", 5, &NoProgress).await {
        Err(e) => assert_eq!(e.status(), Some(416), "{e}"),
        Ok(_) => panic!("part 5 of 4"),
    }
    // A plain object is one part.
    c.put("bk", "plain", Bytes::from_static(b"just one part"), &NoProgress).await.unwrap();
    let (got, _) = c.get_part("bk", "plain", 1, &NoProgress).await.unwrap();
    assert_eq!(got, b"just one part");
    assert_eq!(rig.live_sessions().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_answer_of_the_test_mode_has_the_capabilities() {
    let rig = Rig::start(RigOptions { clients: 0, gateway: test_mode(), ..RigOptions::default() }).await;
    let cp = rig.control_plane(ALICE);
    let h = PrepareHeaders {
        op: Op::Put,
        target: "/bk/cp".into(),
        size: 10,
        offset: 0,
        psn: 1,
        cookie: 0xabc,
        token: None,
        checksum: None,
    };
    let reply = cp.prepare(&h).await.unwrap();
    assert_eq!(cp.capabilities(), None, "a successful PREPARE never advertises");
    let r = ReadyRequest {
        principal: PrincipalId::from_credentials(ALICE.0, ALICE.1),
        session: reply.session,
        cookie: 0xabc,
        client_qpn: 0,
        client_mr_addr: 0,
        client_mr_rkey: 0,
    };
    let a = cp.ready(&r).await.unwrap();
    assert!(matches!(a, ReadyAnswer::Ok { capabilities: Some(ref c), .. } if c == "mp"), "{a:?}");
    assert!(cp.multipart());
}
