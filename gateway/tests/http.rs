//! The control plane over real HTTP on 127.0.0.1, the session server on the
//! simulator: every route, SigV4, each malformed-header class, foreign
//! principals, shutdown.

mod common;

use std::time::Duration;

use common::{ADMIN, ALICE, BOB, Rig, RigOptions, post, prepare_headers, send, t0};
use rctb_gateway::store::{ObjectPath, ObjectStore};

async fn start() -> Rig {
    let rig = Rig::start(RigOptions { clients: 0, seed: 1, ..RigOptions::default() }).await;
    rig.store.put(&ObjectPath::new("bk", "obj").unwrap(), &[7u8; 1000]).unwrap();
    rig
}

async fn live_sessions(s: &Rig) -> usize {
    s.live_sessions().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_cancel_and_list() {
    let s = start().await;
    let a = post(&s, "/.hipobj-rc/prepare", ALICE, &prepare_headers("PUT", "/bk/new%20obj", "4096")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.h("x-amz-rdma-protocol"), Some("hipobj-rc-v2"));
    assert_eq!(a.h("x-amz-rdma-reply"), Some(format!("200:{}", "0".repeat(88)).as_str()));
    let session = a.h("x-amz-rdma-session").unwrap().to_string();
    assert!(session.len() == 32 && session.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
    let qpn = u32::from_str_radix(a.h("x-amz-rdma-qpn").unwrap(), 16).unwrap();
    // Server PSN = QPN & 0xFFFFFF, as %06X.
    assert_eq!(a.h("x-amz-rdma-psn").unwrap(), format!("{:06X}", qpn & 0xFF_FFFF));
    assert!(a.h("x-amz-rdma-mr-addr").is_some() && a.h("x-amz-rdma-mr-rkey").is_some());
    assert_eq!(live_sessions(&s).await, 1);

    // The admin lists it; Alice may not list.
    let l = send(&s, "GET", "/rc-sessions", Some(ADMIN), t0(), &[]).await;
    assert_eq!(l.status, 200);
    assert!(l.body.contains(&format!("<Id>{session}</Id>")) && l.body.contains("<Target>/bk/new%20obj</Target>"));
    let alice = rctb_core::wire::hipobj::PrincipalId::from_credentials(ALICE.0, ALICE.1);
    assert!(
        l.body.contains(&format!(
            "<Usage><Sessions>1</Sessions><StagingBytes>4096</StagingBytes><Qps>1</Qps><ReadySlotsFree>64</ReadySlotsFree><StageSlotsFree>32</StageSlotsFree><DataPhases>0</DataPhases><LeakedMrs>0</LeakedMrs><LeakedQps>0</LeakedQps><Principal><Id>{alice}</Id><Sessions>1</Sessions><StagingBytes>4096</StagingBytes></Principal></Usage>"
        )),
        "{}",
        l.body
    );
    assert!(
        l.body.contains(&format!(
            "<Op>PUT</Op><Target>/bk/new%20obj</Target><Size>4096</Size><State>Prepared</State><Published>true</Published><Staged>false</Staged><ReapPending>false</ReapPending><Handles>0</Handles><ServerQpn>{qpn:x}</ServerQpn></Session></RcSessions>"
        )),
        "{}",
        l.body
    );
    let l = send(&s, "GET", "/rc-sessions", Some(ALICE), t0(), &[]).await;
    assert_eq!((l.status, l.code().as_str()), (403, "AccessDenied"));

    // Bob cannot cancel or READY Alice's session: 404, as if it did not exist.
    let cancel = [("x-amz-rdma-protocol", "hipobj-rc-v2"), ("x-amz-rdma-session", session.as_str())];
    let b = post(&s, "/.hipobj-rc/cancel", BOB, &cancel).await;
    assert_eq!((b.status, b.code().as_str(), b.message().as_str()), (404, "NoSuchRdmaSession", "no such session"));
    let ready = |sess: &'static str, cookie: &'static str| {
        vec![
            ("x-amz-rdma-protocol", "hipobj-rc-v2"),
            ("x-amz-rdma-session", sess),
            ("x-amz-rdma-cookie", cookie),
            ("x-amz-rdma-qpn", "12"),
            ("x-amz-rdma-mr-addr", "1000"),
            ("x-amz-rdma-mr-rkey", "5"),
        ]
    };
    let leaked: &'static str = Box::leak(session.clone().into_boxed_str());
    let b = post(&s, "/.hipobj-rc/ready", BOB, &ready(leaked, "1234abcd")).await;
    assert_eq!((b.status, b.code().as_str(), b.message().as_str()), (404, "NoSuchRdmaSession", "no such session"));
    // Alice with the wrong cookie: the same answer.
    let b = post(&s, "/.hipobj-rc/ready", ALICE, &ready(leaked, "1234abce")).await;
    assert_eq!((b.status, b.code().as_str()), (404, "NoSuchRdmaSession"));
    // Unknown and malformed ids: the same answer too.
    let b = post(&s, "/.hipobj-rc/ready", ALICE, &ready("0123456789abcdef0123456789abcdef", "1")).await;
    assert_eq!((b.status, b.code().as_str()), (404, "NoSuchRdmaSession"));
    let b = post(&s, "/.hipobj-rc/ready", ALICE, &ready("XYZ", "1")).await;
    assert_eq!((b.status, b.code().as_str()), (404, "NoSuchRdmaSession"));
    assert_eq!(live_sessions(&s).await, 1);

    // Alice cancels; cancelling again (already gone) is 200 too.
    let c = post(&s, "/.hipobj-rc/cancel", ALICE, &cancel).await;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(live_sessions(&s).await, 0);
    let c = post(&s, "/.hipobj-rc/cancel", ALICE, &cancel).await;
    assert_eq!(c.status, 200);

    // Unknown routes and methods.
    assert_eq!(post(&s, "/.hipobj-rc/other", ALICE, &[]).await.status, 404);
    assert_eq!(send(&s, "GET", "/.hipobj-rc/prepare", Some(ALICE), t0(), &[]).await.status, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_prepare_stages_from_the_store() {
    let s = start().await;
    let a = post(&s, "/.hipobj-rc/prepare", ALICE, &prepare_headers("get", "/bk/obj", "1000")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.h("x-amz-rdma-mr-addr"), None);
    let l = send(&s, "GET", "/rc-sessions", Some(ADMIN), t0(), &[]).await;
    assert!(l.body.contains("<Op>GET</Op>") && l.body.contains("<Published>true</Published>"), "{}", l.body);
    let a = post(&s, "/.hipobj-rc/prepare", ALICE, &prepare_headers("GET", "/bk/nope", "10")).await;
    assert_eq!((a.status, a.code().as_str()), (404, "NoSuchKey"));
    let a = post(&s, "/.hipobj-rc/prepare", ALICE, &prepare_headers("GET", "/bk/obj", "1001")).await;
    assert_eq!((a.status, a.code().as_str()), (416, "InvalidRange"));
    assert_eq!(live_sessions(&s).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_header_class_is_400_and_changes_nothing() {
    let s = start().await;
    let long_target = format!("/bk/{}", "k".repeat(2045));
    let cases: Vec<(&str, &str, Option<&str>, &str)> = vec![
        // (header, value or None to drop it, expected message)
        ("missing", "x-amz-rdma-size", None, "x-amz-rdma-size: missing"),
        ("missing", "x-amz-rdma-offset", None, "x-amz-rdma-offset: missing"),
        ("not hex", "x-amz-rdma-psn", Some("12g"), "ARG: x-amz-rdma-psn: must be bare hex digits"),
        ("not hex", "x-amz-rdma-cookie", Some("0xdead"), "ARG: x-amz-rdma-cookie: must be bare hex digits"),
        ("zero cookie", "x-amz-rdma-cookie", Some("0"), "ARG: x-amz-rdma-cookie: must be non-zero"),
        ("psn range", "x-amz-rdma-psn", Some("1000000"), "ARG: x-amz-rdma-psn: out of range"),
        ("psn range", "x-amz-rdma-psn", Some("0"), "ARG: x-amz-rdma-psn: must be 1..=0xFFFFFF"),
        (
            "percent",
            "x-amz-rdma-target",
            Some("/bk/a%2"),
            "ARG: x-amz-rdma-target: % must be followed by two hex digits",
        ),
        ("percent", "x-amz-rdma-target", Some("/bk/a b"), "ARG: x-amz-rdma-target: segments must be percent-encoded"),
        (
            "oversize",
            "x-amz-rdma-target",
            Some(long_target.as_str()),
            "TRUNC: x-amz-rdma-target: 2049 bytes, at most 2047",
        ),
        ("protocol", "x-amz-rdma-protocol", Some("hipobj-rc-v1"), "ARG: x-amz-rdma-protocol: must be hipobj-rc-v2"),
        ("op", "x-amz-rdma-op", Some("DELETE"), "ARG: x-amz-rdma-op: must be GET or PUT"),
        ("size", "x-amz-rdma-size", Some("0"), "ARG: x-amz-rdma-size: must be 1..=2147483647"),
        (
            "traversal",
            "x-amz-rdma-target",
            Some("/bk/a/%2e%2e/b"),
            "x-amz-rdma-target: key: must not have a . or .. segment",
        ),
        ("nul", "x-amz-rdma-target", Some("/bk/a%00"), "x-amz-rdma-target: key: must not contain NUL"),
    ];
    let token_bad = "zz".repeat(44);
    let mut all = cases;
    all.push(("bad token", "x-amz-rdma-token", Some(token_bad.as_str()), ""));
    all.push(("checksum", "x-amz-rdma-checksum", Some("CRC64NVME AAAAAAAAAAA"), ""));
    all.push(("checksum", "x-amz-rdma-checksum", Some("CRC32 AAAAAAAAAAA="), ""));
    for (class, name, value, want) in all {
        let mut h = prepare_headers("PUT", "/bk/x", "10");
        h.retain(|(k, _)| *k != name);
        if let Some(v) = value {
            h.push((name, v));
        }
        let a = post(&s, "/.hipobj-rc/prepare", ALICE, &h).await;
        assert_eq!((a.status, a.code().as_str()), (400, "InvalidRdmaRequest"), "{class}: {}", a.body);
        if want.is_empty() {
            assert!(a.message().starts_with("ARG: "), "{class}: {}", a.message());
        } else {
            assert_eq!(a.message(), want, "{class}");
        }
        assert_eq!(live_sessions(&s).await, 0, "{class} changed state");
    }
    // The exact messages of the token and checksum classes.
    let mut h = prepare_headers("PUT", "/bk/x", "10");
    h.push(("x-amz-rdma-checksum", "CRC64NVME AAAAAAAAAAA"));
    assert_eq!(
        post(&s, "/.hipobj-rc/prepare", ALICE, &h).await.message(),
        "ARG: checksum: 11 base64 characters, must be exactly 12"
    );
    // READY's own headers.
    let ready = [
        ("x-amz-rdma-protocol", "hipobj-rc-v2"),
        ("x-amz-rdma-session", "0123456789abcdef0123456789abcdef"),
        ("x-amz-rdma-cookie", "1"),
        ("x-amz-rdma-qpn", "1000000"),
        ("x-amz-rdma-mr-addr", "0"),
        ("x-amz-rdma-mr-rkey", "0"),
    ];
    let a = post(&s, "/.hipobj-rc/ready", ALICE, &ready).await;
    assert_eq!((a.status, a.message().as_str()), (400, "ARG: x-amz-rdma-qpn: out of range"));
    // And a good PREPARE still works afterwards.
    assert_eq!(post(&s, "/.hipobj-rc/prepare", ALICE, &prepare_headers("PUT", "/bk/x", "10")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigv4_is_checked_on_every_route() {
    let s = start().await;
    let h = prepare_headers("PUT", "/bk/x", "10");
    let a = send(&s, "POST", "/.hipobj-rc/prepare", None, t0(), &h).await;
    assert_eq!((a.status, a.code().as_str()), (403, "AccessDenied"));
    let a = send(&s, "POST", "/.hipobj-rc/prepare", Some(("AKALICE", "wrong")), t0(), &h).await;
    assert_eq!((a.status, a.code().as_str()), (403, "SignatureDoesNotMatch"));
    let a = send(&s, "POST", "/.hipobj-rc/prepare", Some(("AKNOBODY", "x")), t0(), &h).await;
    assert_eq!((a.status, a.code().as_str()), (403, "InvalidAccessKeyId"));
    let late = t0() - Duration::from_secs(15 * 60 + 1);
    let a = send(&s, "POST", "/.hipobj-rc/prepare", Some(ALICE), late, &h).await;
    assert_eq!((a.status, a.code().as_str()), (403, "RequestTimeTooSkewed"));
    let ok = t0() - Duration::from_secs(15 * 60);
    assert_eq!(send(&s, "POST", "/.hipobj-rc/prepare", Some(ALICE), ok, &h).await.status, 200);
    for (m, p) in [("POST", "/.hipobj-rc/ready"), ("POST", "/.hipobj-rc/cancel"), ("GET", "/rc-sessions")] {
        let a = send(&s, m, p, None, t0(), &[]).await;
        assert_eq!(a.status, 403, "{p}");
        let a = send(&s, m, p, Some(("AKADMIN", "nope")), t0(), &[]).await;
        assert_eq!(a.status, 403, "{p}");
    }
    assert_eq!(live_sessions(&s).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_answers_503() {
    let s = start().await;
    assert_eq!(post(&s, "/.hipobj-rc/prepare", ALICE, &prepare_headers("PUT", "/bk/x", "10")).await.status, 200);
    s.gw.engine.call(|x| x.close()).await.unwrap();
    let a = post(&s, "/.hipobj-rc/prepare", ALICE, &prepare_headers("PUT", "/bk/x", "10")).await;
    assert_eq!((a.status, a.code().as_str()), (503, "RdmaServiceUnavailable"));
    let cancel = [("x-amz-rdma-protocol", "hipobj-rc-v2"), ("x-amz-rdma-session", "0123456789abcdef0123456789abcdef")];
    assert_eq!(post(&s, "/.hipobj-rc/cancel", ALICE, &cancel).await.status, 503);
    assert_eq!(send(&s, "GET", "/rc-sessions", Some(ADMIN), t0(), &[]).await.status, 503);
    assert_eq!(live_sessions(&s).await, 0);
}

/// The S3 object routes beside the control plane: HeadObject, PutObject
/// (small), DeleteObject, ListObjectsV2, CompleteMultipartUpload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_routes() {
    let s = start().await;
    let cp = s.control_plane(ALICE);
    let req = |m: &'static str, p: &'static str, body: &'static [u8]| {
        let cp = cp.clone();
        async move { cp.request(m, p, Vec::new(), bytes::Bytes::from_static(body)).await.unwrap() }
    };
    let body = |a: &rctb_gateway::client::Answer| String::from_utf8_lossy(&a.body).into_owned();
    // Small PUT, HEAD.
    let a = req("PUT", "/bk/dir/small", b"hello").await;
    assert_eq!(a.status, 200, "{}", body(&a));
    assert_eq!(a.header("etag"), Some("\"5d41402abc4b2a76b9719d911017c592\""));
    let info = cp.head("bk", "dir/small").await.unwrap();
    assert_eq!((info.size, info.etag.as_str()), (5, "5d41402abc4b2a76b9719d911017c592"));
    assert_eq!(cp.head("bk", "dir/none").await.unwrap_err().status(), Some(404));
    // A multipart upload whose parts came through PREPARE's part targets.
    for (n, data) in [(1, &b"part one, "[..]), (2, b"part two")] {
        let t = format!("/bk/multi?partNumber={n}&uploadId=u-1");
        s.store.put(&ObjectPath::from_target(&t).unwrap(), data).unwrap();
    }
    let complete = b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part><Part><ETag>\"0cbc6611f5540bd0809a388dc95a615b\"</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>";
    let a = req("POST", "/bk/multi?uploadId=u-1", complete).await;
    assert_eq!(
        (a.status, a.header("content-type")),
        (400, Some("application/xml")),
        "wrong ETag for part 2: {}",
        body(&a)
    );
    assert!(body(&a).contains("<Code>InvalidPart</Code>"), "{}", body(&a));
    let good = b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part><Part><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>";
    let a = req("POST", "/bk/multi?uploadId=u-1", good).await;
    assert_eq!(a.status, 200, "{}", body(&a));
    assert!(body(&a).contains("<Key>multi</Key>"), "{}", body(&a));
    let mut got = vec![0u8; 18];
    s.store.read_range(&ObjectPath::new("bk", "multi").unwrap(), 0, &mut got).unwrap();
    assert_eq!(&got, b"part one, part two");
    assert_eq!(req("POST", "/bk/multi?uploadId=u-1", b"<nope/>").await.status, 400);
    // List (with a prefix, and max-keys), then DELETE (twice: 204 both times).
    let a = req("GET", "/bk?list-type=2", b"").await;
    let l = body(&a);
    assert_eq!(a.status, 200, "{l}");
    let keys: Vec<&str> = l.split("<Key>").skip(1).map(|k| k.split("</Key>").next().unwrap()).collect();
    assert_eq!(keys, ["dir/small", "multi", "obj"]);
    assert!(l.contains("<KeyCount>3</KeyCount>") && l.contains("<IsTruncated>false</IsTruncated>"), "{l}");
    let l = body(&req("GET", "/bk?list-type=2&prefix=di&max-keys=1", b"").await);
    assert!(
        l.contains("<Prefix>di</Prefix><KeyCount>1</KeyCount>")
            && l.contains("<Key>dir/small</Key><LastModified>")
            && l.contains("</LastModified><Size>5</Size>"),
        "{l}"
    );
    let l = body(&req("GET", "/bk?list-type=2&max-keys=1", b"").await);
    assert!(l.contains("<IsTruncated>true</IsTruncated>"), "{l}");
    assert_eq!(req("GET", "/bk?list-type=2&max-keys=1001", b"").await.status, 400);
    assert_eq!(req("GET", "/bk", b"").await.status, 400);
    assert_eq!(req("DELETE", "/bk/dir/small", b"").await.status, 204);
    assert_eq!(req("DELETE", "/bk/dir/small", b"").await.status, 204);
    assert_eq!(cp.head("bk", "dir/small").await.unwrap_err().status(), Some(404));
    assert_eq!(req("DELETE", "/bk/a/%2e%2e/b", b"").await.status, 400);
    // Unsigned: 403 on every object route too.
    for (m, p) in [("HEAD", "/bk/obj"), ("PUT", "/bk/x"), ("DELETE", "/bk/obj"), ("GET", "/bk?list-type=2")] {
        assert_eq!(send(&s, m, p, None, t0(), &[]).await.status, 403, "{m} {p}");
    }
    assert!(s.store.head(&ObjectPath::new("bk", "obj").unwrap()).is_ok());
}
