//! rctb's hipobj RC client (`RcClient` on a rctb-udp endpoint) driven by
//! lines on stdin, for C programs that test a session server through its C
//! ABI: `tests/c/transfer_test.c` runs it as the other side of a whole GET
//! and PUT. One transfer at a time:
//!
//! ```text
//! -> get SIZE SEED            | put SIZE SEED      (PUT: the object is pattern(SEED))
//! <- prepare OP PRINCIPAL_HEX SIZE PSN COOKIE TOKEN
//! -> reply SESSION SERVER_QPN SERVER_PSN STAGING_ADDR STAGING_RKEY REPLY_TOKEN
//! <- ready CLIENT_QPN MR_ADDR MR_RKEY                (the client is connected)
//! <- done FNV1A64                                    (GET: of the bytes received; PUT: its WRITE completed)
//! -> quit
//! ```
//!
//! Usage: `rc_client IP[@NETNS][/MTU]`. Errors go to stderr with exit 1.

use std::io::{BufRead, Write};
use std::net::Ipv4Addr;

use rctb_rcsession::hipobj::RdmaToken;
use rctb_rcsession::{ClientConfig, Op, PrepareReply, PrincipalId, RcClient, SessionId};
use rctb_transport::Mtu;
use rctb_udp::{UdpConfig, UdpTransport};

/// The object of a transfer: byte i is (i * 31 + seed) mod 256.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// FNV-1a, 64 bits: what the C side computes over its own bytes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

fn endpoint(spec: &str) -> Result<UdpConfig, String> {
    let (rest, mtu) = spec.split_once('/').map_or((spec, None), |(r, m)| (r, Some(m)));
    let (ip, netns) = rest.split_once('@').map_or((rest, None), |(i, n)| (i, Some(n)));
    let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{ip}: {e}"))?;
    let mut cfg = UdpConfig::new("rc_client", ip);
    cfg.netns = netns.map(Into::into);
    if let Some(m) = mtu {
        let bytes: u32 = m.parse().map_err(|e| format!("MTU {m}: {e}"))?;
        cfg.mtu = Mtu::from_bytes(bytes).map_err(|e| e.to_string())?;
    }
    Ok(cfg)
}

fn field<'a>(words: &[&'a str], i: usize, what: &str) -> Result<&'a str, String> {
    words.get(i).copied().ok_or_else(|| format!("missing {what}"))
}

fn num(words: &[&str], i: usize, what: &str) -> Result<u64, String> {
    let w = field(words, i, what)?;
    let parsed = match w.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => w.parse(),
    };
    parsed.map_err(|e| format!("{what} {w}: {e}"))
}

fn run() -> Result<(), String> {
    let spec = std::env::args().nth(1).ok_or("usage: rc_client IP[@NETNS][/MTU]")?;
    let t = UdpTransport::bind(endpoint(&spec)?).map_err(|e| e.to_string())?;
    let mut cfg = ClientConfig::default();
    cfg.capacity = 1 << 24;
    let mut client = RcClient::new(t, cfg).map_err(|e| e.to_string())?;
    let who = PrincipalId::from_credentials("alice", "secret");
    let principal: String = who.digest().iter().map(|b| format!("{b:02x}")).collect();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    let mut next = || -> Result<String, String> { lines.next().ok_or("stdin closed")?.map_err(|e| e.to_string()) };
    let mut n = 0u32;
    loop {
        let line = next()?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let op = match words.first().copied() {
            Some("quit") | None => return Ok(()),
            Some("get") => Op::Get,
            Some("put") => Op::Put,
            Some(other) => return Err(format!("unknown command {other}")),
        };
        let size = num(&words, 1, "size")?;
        let seed = num(&words, 2, "seed")? as u8;
        n += 1;
        if op == Op::Put {
            client.write_payload(&pattern(seed, size as usize)).map_err(|e| e.to_string())?;
        }
        let (mut x, req) =
            client.begin(who, op, "/bucket/key", size, 0x1000 + n, 0xC0DE_0000 + n).map_err(|e| e.to_string())?;
        writeln!(
            out,
            "prepare {} {principal} {size} {} {} {}",
            u8::from(op == Op::Put),
            req.client_psn,
            req.cookie,
            req.client_token.as_deref().unwrap_or("")
        )
        .and_then(|_| out.flush())
        .map_err(|e| e.to_string())?;
        let line = next()?;
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.first() != Some(&"reply") {
            return Err(format!("expected reply, got {line:?}"));
        }
        let reply = PrepareReply {
            session: SessionId::parse(field(&w, 1, "session")?).map_err(|e| e.to_string())?,
            server_qpn: num(&w, 2, "server QPN")? as u32,
            server_psn: num(&w, 3, "server PSN")? as u32,
            staging_addr: num(&w, 4, "staging address")?,
            staging_rkey: num(&w, 5, "staging rkey")? as u32,
            reply_token: Some(RdmaToken::from_hex(field(&w, 6, "reply token")?).map_err(|e| e.to_string())?),
        };
        let ready = client.connect(&mut x, &reply, true).map_err(|e| e.to_string())?;
        writeln!(out, "ready {} {} {}", ready.client_qpn, ready.client_mr_addr, ready.client_mr_rkey)
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())?;
        match op {
            Op::Get => client.ready_sent(&mut x),
            Op::Put => client.start_put(&mut x).map_err(|e| e.to_string())?,
        }
        // The client's engine runs while it is polled: until the data landed
        // (GET) or its WRITE completed (PUT).
        while client.poll(&mut x).map_err(|e| e.to_string())?.is_none() {}
        let sum = match op {
            Op::Get => {
                let mut got = vec![0u8; size as usize];
                client.read_payload(&mut got).map_err(|e| e.to_string())?;
                fnv1a(&got)
            }
            Op::Put => fnv1a(&pattern(seed, size as usize)),
        };
        writeln!(out, "done {sum:016x}").and_then(|_| out.flush()).map_err(|e| e.to_string())?;
    }
}

fn main() {
    if let Err(why) = run() {
        eprintln!("rc_client: {why}");
        std::process::exit(1);
    }
}
