//! The gateway (HTTP and the RC data path on the simulator) over S3Store:
//! RDMA PUT and GET, multipart over RC and GetPart, with a SeaweedFS (or
//! any S3 server) that `RCTB_S3_ENDPOINT` names (SKIP without one); and over
//! a store that stalls (no server needed): the client gets 503
//! ServiceUnavailable naming the store, and the gateway holds no session
//! and no staging afterwards. Needs the `s3` feature.

#![cfg(feature = "s3")]

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{Rig, RigOptions, pattern};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::rcsession::ClientConfig;
use rctb_gateway::client::{NoProgress, ObjectError};
use rctb_gateway::store::{ObjectPath, ObjectStore, S3Options, S3Store};

fn fresh_bucket(tag: &str) -> String {
    let mut r = [0u8; 6];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut r)).unwrap();
    format!("{tag}-{}", r.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn rig_on(store: Arc<dyn ObjectStore>) -> RigOptions {
    let mut client = ClientConfig::default();
    client.capacity = 4 << 20;
    RigOptions { client, backend: Some(store), ..RigOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rc_data_path_is_unchanged_on_s3_store() {
    let Ok(endpoint) = std::env::var("RCTB_S3_ENDPOINT") else {
        eprintln!(
            "SKIP the_rc_data_path_is_unchanged_on_s3_store: RCTB_S3_ENDPOINT is not set (ci/s3/seaweed-up.sh starts SeaweedFS)"
        );
        return;
    };
    let bucket = std::env::var("RCTB_S3_BUCKET").unwrap_or_else(|_| "rctb".into());
    let o = S3Options::from_url(&format!("s3://{bucket}"), Some(endpoint)).unwrap();
    let store = Arc::new(S3Store::connect(&o, Box::new(ChaCha8Rng::seed_from_u64(41))).unwrap());
    let rig = Rig::start(rig_on(store.clone())).await;
    let c = rig.client(0);
    let bk = fresh_bucket("rc");
    for (i, size) in [0usize, 1, 4097, (3 << 20) + 5].into_iter().enumerate() {
        let data = pattern(size, i as u8);
        let key = format!("dir/obj {i}");
        let put = c.put(&bk, &key, Bytes::from(data.clone()), &NoProgress).await.unwrap();
        let s = store.clone();
        let p = ObjectPath::new(&bk, &key).unwrap();
        let meta = tokio::task::spawn_blocking(move || s.head(&p)).await.unwrap().unwrap();
        assert_eq!((put.size, &put.etag, &put.version_id), (size as u64, &meta.etag, &meta.version_id), "{size}");
        let (got, info) = c.get(&bk, &key, &NoProgress).await.unwrap();
        assert!(got == data, "size {size}: GET differs from PUT");
        assert_eq!((info.etag, info.version_id), (meta.etag, meta.version_id));
    }
    // Multipart over RC with the client's own upload id, then GetPart.
    let (a, b) = (pattern(70_000, 1), pattern(1000, 2));
    let pa = c.put_part(&bk, "mp", "my-upload", 1, Bytes::from(a.clone()), &NoProgress).await.unwrap();
    let pb = c.put_part(&bk, "mp", "my-upload", 2, Bytes::from(b.clone()), &NoProgress).await.unwrap();
    c.control_plane().complete_upload(&bk, "mp", "my-upload", &[(1, pa.etag), (2, pb.etag)]).await.unwrap();
    let (got, _) = c.get_part(&bk, "mp", 2, &NoProgress).await.unwrap();
    assert!(got == b);
    let (got, _) = c.get(&bk, "mp", &NoProgress).await.unwrap();
    assert!(got == [a, b].concat());
    assert_eq!(rig.live_sessions().await, 0);
}

fn assert_503(e: ObjectError, what: &str) {
    match e {
        ObjectError::Http { status: 503, code, message, .. } => {
            // A HEAD's answer has no body: no code or message to check.
            if !code.is_empty() {
                assert_eq!(code, "ServiceUnavailable", "{what}: {message}");
                assert!(message.contains("S3 store s3://stall at http://"), "{what}: {message}");
            }
        }
        other => panic!("{what}: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_answers_503_and_the_gateway_holds_nothing() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    let mut o = S3Options::from_url("s3://stall", None).unwrap();
    o.endpoint = Some(format!("http://{addr}"));
    o.max_retries = 1;
    o.retry_timeout = Duration::from_secs(2);
    o.request_timeout = Duration::from_millis(400);
    o.credentials = Some(("AKSTALL".into(), "stallsecret".into()));
    let store = Arc::new(S3Store::connect(&o, Box::new(ChaCha8Rng::seed_from_u64(42))).unwrap());
    let rig = Rig::start(rig_on(store)).await;
    let c = rig.client(0);
    // The PUT's data phase ran; its commit to the store fails: the session
    // and its staging are released.
    assert_503(c.put("bk", "k", Bytes::from(pattern(100_000, 3)), &NoProgress).await.unwrap_err(), "PUT");
    assert_503(c.get("bk", "k", &NoProgress).await.unwrap_err(), "GET");
    let usage = rig.gw.engine.call(|x| x.usage()).await.unwrap();
    assert_eq!((usage.sessions, usage.staging_bytes), (0, 0), "{usage:?}");
}
