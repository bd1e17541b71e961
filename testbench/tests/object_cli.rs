//! `rctb object serve` in its own process, reached over loopback with
//! hand-written HTTP/1.1 signed by rctb_gateway::auth::sign (wall clock:
//! the server checks skew against its own).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::SystemTime;

use rctb_gateway::auth::{self, User};

mod common;
use common::ObjectServer;

fn request(addr: &str, method: &str, path: &str, who: Option<&User>, extra: &[(&str, &str)]) -> (u16, String) {
    let mut h: Vec<(String, String)> = vec![("host".into(), addr.to_string())];
    h.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    if let Some(u) = who {
        // SigV4 signs wall-clock time; the server checks it against its own.
        let now: SystemTime = auth::wall_clock()();
        h.extend(auth::sign(u, "us-east-1", now, method, path, &h, b"").unwrap());
    }
    let mut s = TcpStream::connect(addr).unwrap();
    let mut text = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in &h {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("content-length: 0\r\nconnection: close\r\n\r\n");
    s.write_all(text.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out)
}

#[test]
fn serve_answers_signed_requests_over_loopback() {
    let dir = tempfile_dir();
    let env = [("AWS_ACCESS_KEY_ID", "AKCLI"), ("AWS_SECRET_ACCESS_KEY", "clisecret")];
    let server = ObjectServer::spawn(&["--root", &dir, "--listen", "127.0.0.1:0", "--backend", "sim"], &env);
    let addr = server.addr.clone();
    let admin = User { access_key: "AKCLI".into(), secret_key: "clisecret".into(), admin: true };
    let (st, body) = request(&addr, "GET", "/rc-sessions", None, &[]);
    assert_eq!(st, 403, "{body}");
    let prep = [
        ("x-amz-rdma-protocol", "hipobj-rc-v2"),
        ("x-amz-rdma-op", "PUT"),
        ("x-amz-rdma-target", "/bk/obj"),
        ("x-amz-rdma-size", "100"),
        ("x-amz-rdma-offset", "0"),
        ("x-amz-rdma-psn", "1"),
        ("x-amz-rdma-cookie", "c0ffee"),
    ];
    let (st, body) = request(&addr, "POST", "/.hipobj-rc/prepare", Some(&admin), &prep);
    assert_eq!(st, 200, "{body}");
    assert!(body.to_ascii_lowercase().contains("x-amz-rdma-session: "), "{body}");
    let (st, body) = request(&addr, "GET", "/rc-sessions", Some(&admin), &[]);
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("<Target>/bk/obj</Target>"), "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rctb object load`, `put` and `get` from other processes against
/// `rctb object serve --backend sim` (no RDMA: the load is control-plane
/// only, and an empty object moves without a data phase).
#[test]
fn load_put_and_get_from_other_processes() {
    let dir = tempfile_dir() + "-load";
    std::fs::create_dir_all(&dir).unwrap();
    let env = [("AWS_ACCESS_KEY_ID", "AKCLI"), ("AWS_SECRET_ACCESS_KEY", "clisecret")];
    // The load's READYs use QPN 0: the server runs in the test mode.
    let server = ObjectServer::spawn(
        &["--root", &dir, "--listen", "127.0.0.1:0", "--backend", "sim", "--control-plane-only"],
        &env,
    );
    let ep = server.endpoint();
    let rctb = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_rctb")).args(args).envs(env).output().unwrap();

    let out = rctb(&["object", "load", "--endpoint", &ep, "--clients", "8", "--prepares", "200"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("ok 200 errors 0"), "{text}");
    assert!(text.contains("PREPARE n=200 p50 ") && text.contains("READY   n=200 p50 "), "{text}");

    let empty = format!("{dir}/empty");
    std::fs::write(&empty, b"").unwrap();
    let out = rctb(&["object", "put", "s3://bk/empty", &empty, "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("etag=d41d8cd98f00b204e9800998ecf8427e"));
    let got = format!("{dir}/got");
    std::fs::write(&got, b"old").unwrap();
    let out = rctb(&["object", "get", "s3://bk/empty", &got, "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&got).unwrap(), b"");
    // GetPart: a plain object is part 1; it has no part 2 (416); 0 is a usage error.
    std::fs::write(&got, b"old").unwrap();
    let out = rctb(&["object", "get", "s3://bk/empty", &got, "--part", "1", "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("get part 1 of s3://bk/empty 0 bytes"));
    assert_eq!(std::fs::read(&got).unwrap(), b"");
    let out = rctb(&["object", "get", "s3://bk/empty", &got, "--part", "2", "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("416"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = rctb(&["object", "get", "s3://bk/empty", &got, "--part", "0", "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--part: must be 1..=10000"));

    // A missing object is a run failure naming the answer; a bad URL a usage error.
    let out = rctb(&["object", "get", "s3://bk/nope", &got, "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = rctb(&["object", "get", "bk/nope", &got, "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("s3://bucket/key"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The raw answer's `<Code>` and whether it has `x-amz-rdma-capabilities: mp`.
fn code_and_caps(raw: &str) -> (String, bool) {
    let code = raw.split("<Code>").nth(1).and_then(|s| s.split("</Code>").next()).unwrap_or("").to_string();
    (code, raw.to_ascii_lowercase().contains("\r\nx-amz-rdma-capabilities: mp\r\n"))
}

fn header<'a>(raw: &'a str, name: &str) -> &'a str {
    raw.split("\r\n")
        .find_map(|l| l.split_once(": ").filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v))
        .unwrap_or("")
}

/// §3a's answers from the real binary, `rctb object serve --backend sim`,
/// with and without `--control-plane-only`: status, `<Code>` and the
/// capability header of each row.
#[test]
fn serve_answers_as_versitygws_rc_routes() {
    let dir = tempfile_dir() + "-routes";
    std::fs::create_dir_all(&dir).unwrap();
    let env = [("AWS_ACCESS_KEY_ID", "AKCLI"), ("AWS_SECRET_ACCESS_KEY", "clisecret")];
    let admin = User { access_key: "AKCLI".into(), secret_key: "clisecret".into(), admin: true };
    let prep = |op: &'static str, target: &'static str| {
        vec![
            ("x-amz-rdma-protocol", "hipobj-rc-v2"),
            ("x-amz-rdma-op", op),
            ("x-amz-rdma-target", target),
            ("x-amz-rdma-size", "100"),
            ("x-amz-rdma-offset", "0"),
            ("x-amz-rdma-psn", "1"),
            ("x-amz-rdma-cookie", "c0ffee"),
        ]
    };
    for test_mode in [false, true] {
        let mut args = vec!["--root", dir.as_str(), "--listen", "127.0.0.1:0", "--backend", "sim"];
        if test_mode {
            args.push("--control-plane-only");
        }
        let server = ObjectServer::spawn(&args, &env);
        let addr = server.addr.clone();
        // (op, target, status, code, capability header)
        let table: &[(&str, &str, u16, &str, bool)] = &[
            ("PUT", "/bk/a%2Fb", 200, "", false),
            ("PUT", "/bk/k?uploadId=a%2Bb&partNumber=3", 200, "", false),
            ("PUT", "/bk/%2E%2E%2Fescape", 400, "InvalidRdmaRequest", false),
            ("PUT", "/bk/k?versionId=1", 400, "InvalidRdmaRequest", false),
            ("PUT", "/bk/k?partNumber=1", 400, "InvalidRdmaRequest", false),
            ("PUT", "/bk/k?", 400, "InvalidRdmaRequest", false),
            ("GET", "/bk/k?uploadId=u", 400, "InvalidRdmaRequest", false),
            ("GET", "/bk/k?partNumber=10001", 400, "InvalidRdmaRequest", false),
            ("GET", "/bk/nope?partNumber=1", 404, "NoSuchKey", true),
            ("GET", "/bk/nope", 404, "NoSuchKey", true),
        ];
        for (op, target, status, code, caps) in table {
            let (st, raw) = request(&addr, "POST", "/.hipobj-rc/prepare", Some(&admin), &prep(op, target));
            assert_eq!((st, code_and_caps(&raw)), (*status, (code.to_string(), *caps)), "{op} {target}: {raw}");
        }
        // READY with qpn 0 of a prepared session.
        let (st, raw) = request(&addr, "POST", "/.hipobj-rc/prepare", Some(&admin), &prep("PUT", "/bk/q0"));
        assert_eq!(st, 200, "{raw}");
        let session = header(&raw, "x-amz-rdma-session").to_string();
        let ready = [
            ("x-amz-rdma-protocol", "hipobj-rc-v2"),
            ("x-amz-rdma-session", session.as_str()),
            ("x-amz-rdma-cookie", "c0ffee"),
            ("x-amz-rdma-qpn", "0"),
            ("x-amz-rdma-mr-addr", "0"),
            ("x-amz-rdma-mr-rkey", "0"),
        ];
        let (st, raw) = request(&addr, "POST", "/.hipobj-rc/ready", Some(&admin), &ready);
        if test_mode {
            assert_eq!((st, code_and_caps(&raw)), (200, (String::new(), true)), "{raw}");
            assert_eq!(header(&raw, "x-amz-rdma-bytes-transferred"), "100");
        } else {
            assert_eq!((st, code_and_caps(&raw)), (400, ("InvalidRdmaRequest".into(), false)), "{raw}");
            assert!(raw.contains("<Message>x-amz-rdma-qpn: must be non-zero"), "{raw}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_without_users_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_rctb"))
        .args(["object", "serve", "--root", "/nonexistent-unused", "--listen", "127.0.0.1:0"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AWS_ACCESS_KEY_ID"));
}

/// `--store` and its credentials are checked before anything starts, each
/// refusal naming the option (or variable) and its rule; a store that does
/// not answer stops start-up naming it (with the s3 feature), or a build
/// without the feature says which feature to build with.
#[test]
fn serve_with_a_bad_s3_store_is_refused_naming_the_rule() {
    let serve = |args: &[&str], creds: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rctb"));
        c.args(["object", "serve", "--listen", "127.0.0.1:0"]).args(args);
        if creds {
            c.env("AWS_ACCESS_KEY_ID", "AK").env("AWS_SECRET_ACCESS_KEY", "SK");
        } else {
            c.env_remove("AWS_ACCESS_KEY_ID").env_remove("AWS_SECRET_ACCESS_KEY");
        }
        let out = c.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = serve(&["--store", "rctb", "--endpoint", "http://127.0.0.1:1"], true);
    assert_eq!((code, err.trim()), (Some(2), "rctb object serve: --store: must be s3://BUCKET"));
    let (code, err) = serve(&["--store", "s3://ab"], true);
    assert_eq!(code, Some(2));
    assert!(err.contains("--store: the bucket must be 3..=63 bytes (S3's rule)"), "{err}");
    let (code, err) = serve(&["--store", "s3://rctb", "--endpoint", "127.0.0.1:1"], true);
    assert_eq!(code, Some(2));
    assert!(err.contains("--endpoint: must be an http:// or https:// URL"), "{err}");
    let (code, err) = serve(&["--store", "s3://rctb", "--endpoint", "http://127.0.0.1:1"], false);
    assert_eq!(code, Some(2));
    assert!(err.contains("AWS_ACCESS_KEY_ID: must be set, with AWS_SECRET_ACCESS_KEY"), "{err}");
    let (code, _) = serve(&["--store", "s3://rctb", "--root", "/nonexistent-unused"], true);
    assert_eq!(code, Some(2), "--root and --store together");
    // Port 1 refuses: start-up stops, naming the store (or the feature).
    let (code, err) = serve(&["--store", "s3://rctb", "--endpoint", "http://127.0.0.1:1"], true);
    assert_eq!(code, Some(1));
    if cfg!(feature = "s3") {
        assert!(err.contains("S3 store s3://rctb at http://127.0.0.1:1: HEAD"), "{err}");
    } else {
        assert!(err.contains("built without the s3 feature"), "{err}");
    }
}

fn tempfile_dir() -> String {
    let d = std::env::temp_dir().join(format!("rctb-object-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}
