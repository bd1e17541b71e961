//! `rctb object serve --backend udp` and `rctb object put|get|roundtrip
//! --backend udp`: the gateway and its client as two processes on one
//! machine with no RDMA, the data phase included (the client's RDMA WRITE
//! of a PUT, the server's of a GET, each over a UDP endpoint on loopback).

use std::process::{Command, Output};

mod common;
use common::ObjectServer;

const ENV: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "AKUDP"), ("AWS_SECRET_ACCESS_KEY", "udpsecret")];

fn rctb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rctb")).args(args).envs(ENV).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Bytes that are not all alike (a xorshift stream).
fn data(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn put_and_get_move_object_data_over_udp_between_two_processes() {
    let dir = std::env::temp_dir().join(format!("rctb-object-udp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.join("root");
    let server = ObjectServer::spawn(
        &["--root", root.to_str().unwrap(), "--listen", "127.94.1.1:0", "--backend", "udp", "--device", "127.94.1.1"],
        &ENV,
    );
    let ep = server.endpoint();
    let client = ["--endpoint", &ep, "--backend", "udp", "--device", "127.94.1.2", "-q"];

    // 3 MB: about 3,000 packets at MTU 1024 each way.
    let input = dir.join("in.bin");
    let bytes = data(3_000_000, 7);
    std::fs::write(&input, &bytes).unwrap();
    let out = rctb(&[&["object", "put", "s3://bk/big", input.to_str().unwrap()][..], &client[..]].concat());
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("put s3://bk/big 3000000 bytes etag="), "{}", text(&out));
    let got = dir.join("got.bin");
    let out = rctb(&[&["object", "get", "s3://bk/big", got.to_str().unwrap()][..], &client[..]].concat());
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read(&got).unwrap() == bytes, "the object read back over udp differs");
    // GetPart over RC: a plain object is its part 1, and has no part 2.
    let part = dir.join("part.bin");
    let out =
        rctb(&[&["object", "get", "s3://bk/big", part.to_str().unwrap(), "--part", "1"][..], &client[..]].concat());
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("capabilities=mp"), "{}", text(&out));
    assert!(std::fs::read(&part).unwrap() == bytes, "part 1 read back over udp differs");
    let out =
        rctb(&[&["object", "get", "s3://bk/big", part.to_str().unwrap(), "--part", "2"][..], &client[..]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("416"), "{}", text(&out));

    // Many sizes, each PUT then GET and compared by the client.
    let out = rctb(&[&["object", "roundtrip", "--count", "24", "--max-size", "200000"][..], &client[..]].concat());
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("roundtrip: 24 of 24 objects identical"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn udp_object_commands_need_an_address() {
    let out = rctb(&["object", "serve", "--root", "/nonexistent-unused", "--backend", "udp", "--device", "rxe0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--device \"rxe0\": with --backend udp, an IPv4 address or ADDR:PORT"),
        "{}",
        text(&out)
    );
    // A PUT of a non-empty file needs its endpoint before any request.
    let file = std::env::temp_dir().join(format!("rctb-object-udp-arg-{}", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    let out = rctb(&[
        "object",
        "put",
        "s3://bk/k",
        file.to_str().unwrap(),
        "--endpoint",
        "http://127.0.0.1:9",
        "--backend",
        "udp",
    ]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--backend udp needs --device"), "{}", text(&out));
}
