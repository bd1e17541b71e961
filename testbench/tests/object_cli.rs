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
    let server = ObjectServer::spawn(&["--root", &dir, "--listen", "127.0.0.1:0", "--backend", "sim"], &env);
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

    // A missing object is a run failure naming the answer; a bad URL a usage error.
    let out = rctb(&["object", "get", "s3://bk/nope", &got, "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = rctb(&["object", "get", "bk/nope", &got, "--endpoint", &ep]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("s3://bucket/key"));
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

fn tempfile_dir() -> String {
    let d = std::env::temp_dir().join(format!("rctb-object-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}
