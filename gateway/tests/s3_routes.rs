//! The plain S3 routes an ordinary client uses, over real HTTP: GetObject
//! (whole, every Range form and its edge cases, GetPart), PutObject of
//! sizes across the old 64 KiB limit (streamed to the store, with the size
//! limit, the payload hash, CRC32 and `aws-chunked` checked before
//! anything is stored), and the multipart routes (happy path, wrong ETag,
//! unknown upload, abort). Objects written by the RDMA client are read by
//! these routes and the other way round. boto3 itself runs in
//! gateway/tests/boto3.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{ALICE, Rig, RigOptions, pattern, t0};
use http_body_util::{BodyExt, Full};
use md5::{Digest, Md5};
use rctb_gateway::auth::{self, User};
use rctb_gateway::client::NoProgress;
use rctb_gateway::http::GatewayOptions;
use rctb_gateway::store::{ObjectPath, ObjectStore};

/// An answer with a binary body.
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn h(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn code(&self) -> String {
        let t = self.text();
        t.split("<Code>").nth(1).and_then(|s| s.split("</Code>").next()).unwrap_or("").to_string()
    }
    fn tag(&self, tag: &str) -> String {
        let t = self.text();
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        t.split(open.as_str()).nth(1).and_then(|s| s.split(close.as_str()).next()).unwrap_or("").to_string()
    }
}

fn user() -> User {
    User { access_key: ALICE.0.into(), secret_key: ALICE.1.into(), admin: false }
}

/// One request as Alice; `payload`: the `x-amz-content-sha256` to sign
/// (None: the body's hash).
async fn s3_req(
    rig: &Rig,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    payload: Option<&str>,
) -> Got {
    let mut h: Vec<(String, String)> = vec![("host".into(), rig.addr.to_string())];
    h.extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let signed = match payload {
        None => auth::sign(&user(), "us-east-1", t0(), method, path, &h, body),
        Some(p) => auth::sign_payload(&user(), "us-east-1", t0(), method, path, &h, p),
    };
    h.extend(signed.unwrap());
    let stream = tokio::net::TcpStream::connect(rig.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method(method).uri(path);
    for (k, v) in &h {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = sender.send_request(req.body(Full::new(Bytes::copy_from_slice(body))).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let headers =
        resp.headers().iter().map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap().to_string())).collect();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    Got { status, headers, body }
}

async fn get(rig: &Rig, path: &str, headers: &[(&str, &str)]) -> Got {
    s3_req(rig, "GET", path, headers, b"", None).await
}

async fn put(rig: &Rig, path: &str, body: &[u8]) -> Got {
    s3_req(rig, "PUT", path, &[], body, None).await
}

fn md5_hex(d: &[u8]) -> String {
    Md5::digest(d).iter().map(|b| format!("{b:02x}")).collect()
}

/// Nothing is left in the store's temporary directory, and no upload
/// directory (`*.u`) under `bucket`.
fn no_leftovers(rig: &Rig) {
    let root = rig.store.root();
    let tmp: Vec<_> = std::fs::read_dir(root.join(".tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "temporaries left: {tmp:?}");
    fn walk(d: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.extension().is_some_and(|x| x == "u") {
                    out.push(p.display().to_string());
                }
                walk(&p, out);
            }
        }
    }
    let mut uploads = Vec::new();
    walk(root, &mut uploads);
    assert!(uploads.is_empty(), "uploads left: {uploads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_sizes_across_the_old_64k_limit() {
    let rig = Rig::start(RigOptions::default()).await;
    for (i, n) in [0usize, 1, 65_535, 65_536, 65_537, (3 << 20) + 1].into_iter().enumerate() {
        let data = pattern(n, i as u8);
        let path = format!("/bk/size/{n}");
        let a = put(&rig, &path, &data).await;
        assert_eq!(a.status, 200, "PUT {n}: {}", a.text());
        let etag = format!("\"{}\"", md5_hex(&data));
        assert_eq!(a.h("etag"), Some(etag.as_str()), "PUT {n}");
        let version = a.h("x-amz-version-id").unwrap().to_string();
        let g = get(&rig, &path, &[]).await;
        assert_eq!(g.status, 200, "GET {n}: {}", g.text());
        assert!(g.body == data, "GET {n}: {} bytes back", g.body.len());
        assert_eq!(g.h("content-length"), Some(n.to_string().as_str()));
        assert_eq!((g.h("etag"), g.h("x-amz-version-id")), (Some(etag.as_str()), Some(version.as_str())));
        assert_eq!(g.h("accept-ranges"), Some("bytes"));
        // Last-Modified, an HTTP date (the file's mtime: within a minute).
        let lm = g.h("last-modified").unwrap_or_default();
        assert!(lm.ends_with(" GMT") && lm.len() == 29, "{lm:?}");
    }
    let l = get(&rig, "/bk?list-type=2&prefix=size/1", &[]).await.text();
    // ISO 8601 with milliseconds, as S3 lists.
    let lm = l.split("<Key>size/1</Key><LastModified>").nth(1).and_then(|r| r.split("</LastModified>").next());
    assert!(lm.is_some_and(|t| t.len() == 24 && t.ends_with('Z') && t.as_bytes()[10] == b'T'), "{l}");
    let g = get(&rig, "/bk/size/none", &[]).await;
    assert_eq!((g.status, g.code().as_str()), (404, "NoSuchKey"));
    let g = get(&rig, "/bk/size/1?versionId=x", &[]).await;
    assert_eq!((g.status, g.code().as_str()), (400, "InvalidArgument"), "{}", g.text());
    assert!(g.text().contains("versionId"), "{}", g.text());
    no_leftovers(&rig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_as_s3_answers_them() {
    let rig = Rig::start(RigOptions::default()).await;
    let data = pattern(100, 9);
    assert_eq!(put(&rig, "/bk/r", &data).await.status, 200);
    for (spec, first, last) in [
        ("bytes=0-0", 0, 0),
        ("bytes=0-99", 0, 99),
        ("bytes=10-19", 10, 19),
        ("bytes=10-", 10, 99),
        ("bytes=99-", 99, 99),
        ("bytes=90-1000", 90, 99),
        ("bytes=-1", 99, 99),
        ("bytes=-100", 0, 99),
        ("bytes=-1000", 0, 99),
        (" bytes=5-6 ", 5, 6),
    ] {
        let g = get(&rig, "/bk/r", &[("range", spec)]).await;
        assert_eq!(g.status, 206, "{spec}: {}", g.text());
        assert_eq!(g.h("content-range"), Some(format!("bytes {first}-{last}/100").as_str()), "{spec}");
        assert_eq!(g.body, &data[first..=last], "{spec}");
        assert_eq!(g.h("content-length"), Some((last - first + 1).to_string().as_str()), "{spec}");
    }
    for spec in ["bytes=100-", "bytes=100-200", "bytes=-0"] {
        let g = get(&rig, "/bk/r", &[("range", spec)]).await;
        assert_eq!((g.status, g.code().as_str()), (416, "InvalidRange"), "{spec}: {}", g.text());
        assert_eq!(g.h("content-range"), Some("bytes */100"), "{spec}");
    }
    for (spec, rule) in [
        ("bytes=5-4", "before the first"),
        ("bytes=a-b", "decimal"),
        ("items=0-1", "bytes="),
        ("bytes=0-1,3-4", "one range"),
        ("bytes=-", "FIRST-LAST"),
        ("bytes=1", "FIRST-LAST"),
        ("bytes=99999999999999999999999-", "decimal"),
    ] {
        let g = get(&rig, "/bk/r", &[("range", spec)]).await;
        assert_eq!((g.status, g.code().as_str()), (400, "InvalidArgument"), "{spec}: {}", g.text());
        assert!(g.text().contains("Range: ") && g.text().contains(rule), "{spec}: {}", g.text());
    }
    // Conditions: If-Match (s3transfer sends it on each ranged GET) and
    // If-None-Match, on GET and HEAD.
    let etag = format!("\"{}\"", md5_hex(&data));
    for (h, v, status) in [
        ("if-match", etag.as_str(), 206),
        ("if-match", "\"0123\", *", 206),
        ("if-match", "\"0123\"", 412),
        ("if-none-match", etag.as_str(), 304),
        ("if-none-match", "\"0123\"", 206),
    ] {
        let g = get(&rig, "/bk/r", &[("range", "bytes=0-1"), (h, v)]).await;
        assert_eq!(g.status, status, "{h}: {v}: {}", g.text());
        let head = s3_req(&rig, "HEAD", "/bk/r", &[(h, v)], b"", None).await;
        assert_eq!(head.status, if status == 206 { 200 } else { status }, "HEAD {h}: {v}");
        if status == 412 {
            assert_eq!(g.code(), "PreconditionFailed");
            assert!(g.text().contains("If-Match"), "{}", g.text());
        }
    }
    // An empty object has no satisfiable range.
    assert_eq!(put(&rig, "/bk/empty", b"").await.status, 200);
    for spec in ["bytes=0-", "bytes=-1", "bytes=0-0"] {
        assert_eq!(get(&rig, "/bk/empty", &[("range", spec)]).await.status, 416, "{spec}");
    }
    // Across the 1 MiB read chunks.
    let big = pattern((2 << 20) + 10, 3);
    assert_eq!(put(&rig, "/bk/big", &big).await.status, 200);
    let (a, b) = ((1 << 20) - 5, (2 << 20) + 2);
    let g = get(&rig, "/bk/big", &[("range", &format!("bytes={a}-{b}"))]).await;
    assert_eq!(g.status, 206);
    assert!(g.body == big[a..=b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_part_reads_one_part_of_a_completed_upload() {
    let rig = Rig::start(RigOptions::default()).await;
    let parts = [pattern(70_000, 1), pattern(10, 2), pattern(3, 3)];
    let id = create(&rig, "/bk/mp").await;
    let mut list = String::from("<CompleteMultipartUpload>");
    for (i, p) in parts.iter().enumerate() {
        let a = put(&rig, &format!("/bk/mp?partNumber={}&uploadId={id}", i + 1), p).await;
        assert_eq!(a.status, 200, "{}", a.text());
        list.push_str(&format!("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, a.h("etag").unwrap()));
    }
    list.push_str("</CompleteMultipartUpload>");
    let a = s3_req(&rig, "POST", &format!("/bk/mp?uploadId={id}"), &[], list.as_bytes(), None).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let total = 70_013;
    for (n, start) in [(1usize, 0usize), (2, 70_000), (3, 70_010)] {
        let g = get(&rig, &format!("/bk/mp?partNumber={n}"), &[]).await;
        assert_eq!(g.status, 206, "part {n}: {}", g.text());
        assert_eq!(g.body, parts[n - 1], "part {n}");
        assert_eq!(g.h("x-amz-mp-parts-count"), Some("3"));
        // As S3: the part's place in the whole object.
        let end = start + parts[n - 1].len() - 1;
        assert_eq!(g.h("content-range"), Some(format!("bytes {start}-{end}/{total}").as_str()), "part {n}");
    }
    let g = get(&rig, "/bk/mp?partNumber=4", &[]).await;
    assert_eq!((g.status, g.code().as_str()), (416, "InvalidPartNumber"), "{}", g.text());
    let g = get(&rig, "/bk/mp?partNumber=1", &[("range", "bytes=0-1")]).await;
    assert_eq!((g.status, g.code().as_str()), (400, "InvalidRequest"), "{}", g.text());
    assert!(g.text().contains("Range and partNumber"), "{}", g.text());
    let g = get(&rig, "/bk/mp?partNumber=0", &[]).await;
    assert_eq!(g.status, 400, "{}", g.text());
    assert!(g.text().contains("partNumber"), "{}", g.text());
    let whole: Vec<u8> = parts.concat();
    assert!(get(&rig, "/bk/mp", &[]).await.body == whole);
    no_leftovers(&rig);
}

/// CreateMultipartUpload: the new upload id.
async fn create(rig: &Rig, path: &str) -> String {
    let a = s3_req(rig, "POST", &format!("{path}?uploads"), &[], b"", None).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(a.text().contains("<InitiateMultipartUploadResult>"), "{}", a.text());
    let id = a.tag("UploadId");
    assert!(!id.is_empty());
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_happy_path_and_list_parts() {
    let rig = Rig::start(RigOptions::default()).await;
    let id = create(&rig, "/bk/dir/obj").await;
    let p1 = pattern(100_000, 4);
    let p2 = pattern(5, 5);
    let e1 = put(&rig, &format!("/bk/dir/obj?uploadId={id}&partNumber=1"), &p1).await;
    assert_eq!(e1.status, 200, "{}", e1.text());
    let e2 = put(&rig, &format!("/bk/dir/obj?partNumber=2&uploadId={id}"), &p2).await;
    let (e1, e2) = (e1.h("etag").unwrap().to_string(), e2.h("etag").unwrap().to_string());
    assert_eq!(e1, format!("\"{}\"", md5_hex(&p1)));
    let l = get(&rig, &format!("/bk/dir/obj?uploadId={id}"), &[]).await;
    assert_eq!(l.status, 200, "{}", l.text());
    let t = l.text();
    let numbers: Vec<&str> = t.split("<PartNumber>").skip(1).map(|p| p.split('<').next().unwrap()).collect();
    assert_eq!(numbers, ["1", "2"], "{t}");
    assert!(t.contains(&format!("<ETag>&quot;{}&quot;</ETag><Size>100000</Size></Part>", md5_hex(&p1))), "{t}");
    assert!(t.contains("<LastModified>20"), "{t}");
    assert!(t.contains("<IsTruncated>false</IsTruncated>"), "{t}");
    let l = get(&rig, &format!("/bk/dir/obj?uploadId={id}&max-parts=1"), &[]).await;
    assert!(l.text().contains("<IsTruncated>true</IsTruncated>") && l.text().contains("<NextPartNumberMarker>1<"));
    let l = get(&rig, &format!("/bk/dir/obj?uploadId={id}&part-number-marker=1"), &[]).await;
    assert!(!l.text().contains("<PartNumber>1<") && l.text().contains("<PartNumber>2<"), "{}", l.text());
    // The object does not exist before completion.
    assert_eq!(get(&rig, "/bk/dir/obj", &[]).await.status, 404);
    let body = format!(
        "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Part><ETag>{e1}</ETag><PartNumber>1</PartNumber></Part><Part><ETag>{e2}</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>"
    );
    let a = s3_req(&rig, "POST", &format!("/bk/dir/obj?uploadId={id}"), &[], body.as_bytes(), None).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.tag("Key"), "dir/obj");
    let whole = [p1, p2].concat();
    let g = get(&rig, "/bk/dir/obj", &[]).await;
    assert!(g.body == whole);
    // The RDMA client reads what the S3 routes wrote.
    let (got, _) = rig.client(0).get("bk", "dir/obj", &NoProgress).await.unwrap();
    assert!(got == whole);
    no_leftovers(&rig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_refusals_name_the_rule_and_keep_or_drop_parts_as_s3() {
    let rig = Rig::start(RigOptions::default()).await;
    let id = create(&rig, "/bk/m").await;
    let e1 = put(&rig, &format!("/bk/m?partNumber=1&uploadId={id}"), b"one").await.h("etag").unwrap().to_string();
    let e2 = put(&rig, &format!("/bk/m?partNumber=2&uploadId={id}"), b"two").await.h("etag").unwrap().to_string();
    let complete = |parts: &[(u32, &str)]| {
        let mut b = String::from("<CompleteMultipartUpload>");
        for (n, e) in parts {
            b.push_str(&format!("<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"));
        }
        b + "</CompleteMultipartUpload>"
    };
    let post = |path: String, body: String| {
        let rig = &rig;
        async move { s3_req(rig, "POST", &path, &[], body.as_bytes(), None).await }
    };
    // A wrong ETag: InvalidPart; the upload and its parts stay.
    let a = post(format!("/bk/m?uploadId={id}"), complete(&[(1, &e1), (2, &e1)])).await;
    assert_eq!((a.status, a.code().as_str()), (400, "InvalidPart"), "{}", a.text());
    assert!(a.text().contains("ETag"), "{}", a.text());
    let a = post(format!("/bk/m?uploadId={id}"), complete(&[(2, &e2), (1, &e1)])).await;
    assert_eq!((a.status, a.code().as_str()), (400, "InvalidPartOrder"), "{}", a.text());
    let a = post(format!("/bk/m?uploadId={id}"), complete(&[(1, &e1), (3, "\"x\"")])).await;
    assert_eq!((a.status, a.code().as_str()), (400, "InvalidPart"), "{}", a.text());
    let a = post(format!("/bk/m?uploadId={id}"), "<Nope/>".into()).await;
    assert_eq!((a.status, a.code().as_str()), (400, "MalformedXML"), "{}", a.text());
    assert_eq!(get(&rig, "/bk/m", &[]).await.status, 404);
    assert!(get(&rig, &format!("/bk/m?uploadId={id}"), &[]).await.text().contains("<PartNumber>2<"));
    // An unknown upload: NoSuchUpload on every route, nothing stored.
    for (m, path) in
        [("PUT", "/bk/m?partNumber=1&uploadId=nope"), ("GET", "/bk/m?uploadId=nope"), ("DELETE", "/bk/m?uploadId=nope")]
    {
        let a = s3_req(&rig, m, path, &[], b"x", None).await;
        assert_eq!((a.status, a.code().as_str()), (404, "NoSuchUpload"), "{m} {path}: {}", a.text());
        assert!(a.text().contains("uploadId"), "{}", a.text());
    }
    let a = post("/bk/m?uploadId=nope".into(), complete(&[(1, &e1)])).await;
    assert_eq!((a.status, a.code().as_str()), (404, "NoSuchUpload"), "{}", a.text());
    // Malformed ids and queries name the field.
    for (m, path, field) in [
        ("DELETE", "/bk/m?uploadId=", "uploadId"),
        ("DELETE", "/bk/m?uploadId=..%2Fx", "uploadId"),
        ("PUT", "/bk/m?partNumber=10001&uploadId=u", "partNumber"),
        ("PUT", "/bk/m?uploadId=u", "partNumber"),
        ("POST", "/bk/m?uploads&x=1", "x"),
        ("GET", "/bk/m?uploadId=u&max-parts=1001", "max-parts"),
    ] {
        let a = s3_req(&rig, m, path, &[], b"", None).await;
        assert_eq!(a.status, 400, "{m} {path}: {}", a.text());
        assert!(a.text().contains(field), "{m} {path}: {}", a.text());
    }
    // Bodies over a route's limit: 2 MiB for a part list, 64 KiB elsewhere
    // (the control plane answers as for any malformed request).
    let a = s3_req(&rig, "POST", &format!("/bk/m?uploadId={id}"), &[], &vec![b' '; (2 << 20) + 1], None).await;
    assert_eq!((a.status, a.code().as_str()), (400, "MaxMessageLengthExceeded"), "{}", a.text());
    assert!(a.text().contains("2097152 bytes"), "{}", a.text());
    let a = s3_req(&rig, "POST", "/bk/m?uploads", &[], &[0u8; 65_537], None).await;
    assert_eq!((a.status, a.code().as_str()), (400, "MaxMessageLengthExceeded"), "{}", a.text());
    let a = s3_req(&rig, "POST", "/.hipobj-rc/prepare", &[], &[0u8; 65_537], None).await;
    assert_eq!((a.status, a.code().as_str()), (400, "InvalidRdmaRequest"), "{}", a.text());
    // Abort drops the upload and its parts.
    let a = s3_req(&rig, "DELETE", &format!("/bk/m?uploadId={id}"), &[], b"", None).await;
    assert_eq!(a.status, 204, "{}", a.text());
    assert_eq!(s3_req(&rig, "DELETE", &format!("/bk/m?uploadId={id}"), &[], b"", None).await.status, 404);
    let a = post(format!("/bk/m?uploadId={id}"), complete(&[(1, &e1)])).await;
    assert_eq!(a.code(), "NoSuchUpload");
    no_leftovers(&rig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_stores_nothing_unless_the_whole_body_checks_out() {
    let mut g = GatewayOptions::default();
    g.max_object_size = 100_000;
    let rig = Rig::start(RigOptions { gateway: g, ..RigOptions::default() }).await;
    let old = pattern(10, 1);
    assert_eq!(put(&rig, "/bk/o", &old).await.status, 200);
    let unchanged = |rig: &Rig| {
        let mut b = vec![0u8; 10];
        rig.store.read_range(&ObjectPath::new("bk", "o").unwrap(), 0, &mut b).unwrap();
        assert_eq!(b, old);
    };
    // The limit: exactly is fine, one more is EntityTooLarge (declared up
    // front by Content-Length, or found while reading an aws-chunked body).
    assert_eq!(put(&rig, "/bk/limit", &pattern(100_000, 2)).await.status, 200);
    let a = put(&rig, "/bk/o", &pattern(100_001, 2)).await;
    assert_eq!((a.status, a.code().as_str()), (400, "EntityTooLarge"), "{}", a.text());
    assert!(a.text().contains("100000 bytes"), "{}", a.text());
    unchanged(&rig);
    // A body whose SHA-256 is not the signed one.
    let other: String = {
        use sha2::Digest as _;
        sha2::Sha256::digest(b"other").iter().map(|b| format!("{b:02x}")).collect()
    };
    let a = s3_req(&rig, "PUT", "/bk/o", &[], &pattern(70_000, 3), Some(&other)).await;
    assert_eq!((a.status, a.code().as_str()), (400, "XAmzContentSHA256Mismatch"), "{}", a.text());
    unchanged(&rig);
    // CRC32 in the header: checked.
    let a = s3_req(&rig, "PUT", "/bk/o", &[("x-amz-checksum-crc32", "NSRBww==")], b"abc", None).await;
    assert_eq!((a.status, a.code().as_str()), (400, "BadDigest"), "{}", a.text());
    let a = s3_req(&rig, "PUT", "/bk/o", &[("x-amz-checksum-crc32", "NSRB")], b"abc", None).await;
    assert_eq!((a.status, a.code().as_str()), (400, "InvalidRequest"), "{}", a.text());
    assert!(a.text().contains("x-amz-checksum-crc32"), "{}", a.text());
    unchanged(&rig);
    let a = s3_req(&rig, "PUT", "/bk/crc", &[("x-amz-checksum-crc32", "NSRBwg==")], b"abc", None).await;
    assert_eq!(a.status, 200, "{}", a.text());
    // UNSIGNED-PAYLOAD.
    let a = s3_req(&rig, "PUT", "/bk/unsigned", &[], b"free", Some("UNSIGNED-PAYLOAD")).await;
    assert_eq!(a.status, 200, "{}", a.text());
    // aws-chunked with an unsigned CRC32 trailer (as boto3 sends over TLS).
    let chunked = |data: &[u8], crc: &str| {
        let mut b = Vec::new();
        for c in data.chunks(65_536) {
            b.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            b.extend_from_slice(c);
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(format!("0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n").as_bytes());
        b
    };
    let trailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
    let h3 = [
        ("content-encoding", "aws-chunked"),
        ("x-amz-trailer", "x-amz-checksum-crc32"),
        ("x-amz-decoded-content-length", "3"),
    ];
    let a = s3_req(&rig, "PUT", "/bk/chunked", &h3, &chunked(b"abc", "NSRBwg=="), Some(trailer)).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(get(&rig, "/bk/chunked", &[]).await.body, b"abc");
    let a = s3_req(&rig, "PUT", "/bk/o", &h3, &chunked(b"abc", "NSRBww=="), Some(trailer)).await;
    assert_eq!((a.status, a.code().as_str()), (400, "BadDigest"), "{}", a.text());
    let a = s3_req(&rig, "PUT", "/bk/o", &h3, b"3\r\nabcXX0\r\n\r\n", Some(trailer)).await;
    assert_eq!((a.status, a.code().as_str()), (400, "InvalidRequest"), "{}", a.text());
    assert!(a.text().contains("aws-chunked body: a chunk's data must be followed by CRLF"), "{}", a.text());
    // Declared 3 bytes but sends more: the limit is found while reading.
    let big = pattern(100_001, 4);
    let a = s3_req(&rig, "PUT", "/bk/o", &h3, &chunked(&big, "AAAAAA=="), Some(trailer)).await;
    assert_eq!((a.status, a.code().as_str()), (400, "EntityTooLarge"), "declared 3: {}", a.text());
    // Declared over the limit: refused before reading.
    let mut over = h3;
    over[2].1 = "100001";
    let a = s3_req(&rig, "PUT", "/bk/o", &over, &chunked(b"abc", "NSRBwg=="), Some(trailer)).await;
    assert_eq!((a.status, a.code().as_str()), (400, "EntityTooLarge"), "{}", a.text());
    // Declared 4, sends 3.
    over[2].1 = "4";
    let a = s3_req(&rig, "PUT", "/bk/o", &over, &chunked(b"abc", "NSRBwg=="), Some(trailer)).await;
    assert_eq!((a.status, a.code().as_str()), (400, "IncompleteBody"), "{}", a.text());
    assert!(a.text().contains("x-amz-decoded-content-length: 4 declared, 3 received"), "{}", a.text());
    let a = s3_req(
        &rig,
        "PUT",
        "/bk/o",
        &[("content-encoding", "aws-chunked")],
        &chunked(b"abc", "NSRBwg=="),
        Some(trailer),
    )
    .await;
    assert_eq!((a.status, a.code().as_str()), (411, "MissingContentLength"), "{}", a.text());
    let a = s3_req(&rig, "PUT", "/bk/o", &[], b"abc", Some("STREAMING-AWS4-HMAC-SHA256-PAYLOAD")).await;
    assert_eq!((a.status, a.code().as_str()), (501, "NotImplemented"), "{}", a.text());
    let a = s3_req(&rig, "PUT", "/bk/o", &[("x-amz-copy-source", "/bk/limit")], b"", None).await;
    assert_eq!((a.status, a.code().as_str()), (501, "NotImplemented"), "{}", a.text());
    unchanged(&rig);
    no_leftovers(&rig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_body_leaves_nothing() {
    let rig = Rig::start(RigOptions::default()).await;
    let path = "/bk/cut";
    let mut h: Vec<(String, String)> =
        vec![("host".into(), rig.addr.to_string()), ("content-length".into(), "1000000".into())];
    let signed = auth::sign_payload(&user(), "us-east-1", t0(), "PUT", path, &h, "UNSIGNED-PAYLOAD").unwrap();
    h.extend(signed);
    let mut head = format!("PUT {path} HTTP/1.1\r\n");
    for (k, v) in &h {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let addr = rig.addr;
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&pattern(300_000, 1)).unwrap();
        // Hang up 700000 bytes short.
    })
    .await
    .unwrap();
    // The handler finishes on its own task; wait for it.
    for _ in 0..200 {
        if rig.gw.gate.active() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(rig.gw.gate.active(), 0);
    assert!(rig.store.head(&ObjectPath::new("bk", "cut").unwrap()).is_err());
    no_leftovers(&rig);
    // An RDMA PUT is read back by GetObject.
    let data = pattern(200_000, 7);
    rig.client(0).put("bk", "rdma", Bytes::from(data.clone()), &NoProgress).await.unwrap();
    assert!(get(&rig, "/bk/rdma", &[]).await.body == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_with_a_delimiter_rolls_up_common_prefixes() {
    let rig = Rig::start(RigOptions::default()).await;
    for k in ["a/1", "a/2", "a/b/3", "a0", "b", "c/4", "c/5/6"] {
        assert_eq!(put(&rig, &format!("/bk/{k}"), b"x").await.status, 200, "{k}");
    }
    let list = |q: &'static str| {
        let rig = &rig;
        async move {
            let a = get(rig, &format!("/bk?list-type=2{q}"), &[]).await;
            assert_eq!(a.status, 200, "{q}: {}", a.text());
            let t = a.text();
            let items = |tag: &str| -> Vec<String> {
                let open = format!("<{tag}>");
                t.split(open.as_str()).skip(1).map(|r| r.split('<').next().unwrap().to_string()).collect()
            };
            let keys = items("Key");
            let prefixes: Vec<String> =
                t.split("<CommonPrefixes><Prefix>").skip(1).map(|r| r.split('<').next().unwrap().to_string()).collect();
            (keys, prefixes, a.tag("KeyCount"), a.tag("IsTruncated"))
        }
    };
    let (k, p, n, more) = list("&delimiter=/").await;
    assert_eq!(
        (k, p, n.as_str(), more.as_str()),
        (vec!["a0".into(), "b".into()], vec!["a/".into(), "c/".into()], "4", "false")
    );
    let (k, p, ..) = list("&delimiter=/&prefix=a/").await;
    assert_eq!((k, p), (vec!["a/1".to_string(), "a/2".into()], vec!["a/b/".to_string()]));
    let (k, p, ..) = list("&delimiter=/&prefix=c").await;
    assert_eq!((k, p), (Vec::<String>::new(), vec!["c/".to_string()]));
    // max-keys counts keys and prefixes together.
    let (k, p, n, more) = list("&delimiter=/&max-keys=2").await;
    assert_eq!((k, p, n.as_str(), more.as_str()), (vec!["a0".to_string()], vec!["a/".to_string()], "2", "true"));
    // Without a delimiter: every key.
    assert_eq!(list("").await.0.len(), 7);
}
