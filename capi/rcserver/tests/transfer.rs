//! A whole GET and a whole PUT through the C entry points of librcserver,
//! with rctb's own hipobj client (`RcClient`) on the other side of a real
//! RC connection: the server on a device of rctb's libibverbs.so.1 (found
//! with dlopen, as on rxe or a NIC), the client on rctb-udp, two RoCEv2
//! endpoints on loopback. No RDMA stack, root or VM.
//!
//! The server's libibverbs must be rctb's, and the process must be started
//! with it on `LD_LIBRARY_PATH`: the test re-runs itself so, with
//! `target/<profile>/rctb-verbs` (built first when missing).

use std::ffi::c_void;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Mutex;

mod common;

use common::rctb_verbs_dir;
use rcserver::abi::*;
use rcserver::*;
use rctb_rcsession::{ClientConfig, Op, PrepareReply, PrincipalId, RcClient, SessionId};
use rctb_transport::Mtu;
use rctb_udp::{UdpConfig, UdpTransport};

/// Set in the re-run: the client's endpoint, `IP[@NETNS][/MTU]` (the
/// server's device is RCTB_IBV_ADDR's). Set from outside, the test runs at
/// once on the libibverbs the process has (the VM's check on rxe).
const CHILD: &str = "RCTB_RCSERVER_TRANSFER_CLIENT";

/// Terminal notifications seen: (session id, outcome, bytes).
static ENDED: Mutex<Vec<(String, i32, u64)>> = Mutex::new(Vec::new());

extern "C" fn on_terminal(_ctx: *mut c_void, id: *const std::ffi::c_char, outcome: i32, bytes: u64) {
    // SAFETY: the server passes a NUL-terminated id that lives for the call.
    let id = unsafe { std::ffi::CStr::from_ptr(id) }.to_string_lossy().into_owned();
    ENDED.lock().unwrap().push((id, outcome, bytes));
}

fn s(text: &str) -> rc_str_in {
    rc_str_in { ptr: text.as_ptr().cast(), len: text.len() as u32 }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Re-runs this test binary's `name` with rctb's libibverbs.so.1, the
/// server's device on `server` and the client on `client` (each test its
/// own pair: tests run at once), plus `env`; panics with its output if it
/// fails.
fn rerun(name: &str, server: &str, client: &str, env: &[(&str, &str)]) -> String {
    let dir = rctb_verbs_dir();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, client)
        .env("LD_LIBRARY_PATH", &dir)
        .env("RCTB_IBV_ADDR", server)
        .env("RCTB_IBV_STATS", "1")
        .envs(env.iter().copied())
        .output()
        .expect("re-run the test with rctb's libibverbs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "the run with {env:?} failed:\n{text}");
    text
}

#[test]
fn get_and_put_move_the_bytes_over_rc() {
    if std::env::var_os(CHILD).is_some() {
        return transfers();
    }
    rerun("get_and_put_move_the_bytes_over_rc", "127.0.0.41", "127.0.0.42", &[]);
}

/// The same transfers with the server's packets dropped, duplicated and
/// reordered (seeded): the RC engines' retransmissions carry them, and
/// the drops are shown to have happened.
#[test]
fn get_and_put_survive_loss_and_reordering() {
    if std::env::var_os(CHILD).is_some() {
        return transfers();
    }
    let text = rerun(
        "get_and_put_survive_loss_and_reordering",
        "127.0.0.43",
        "127.0.0.44",
        &[("RCTB_IBV_FAULTS", "seed=11,drop=0.02,dup=0.01,reorder=0.02")],
    );
    let dropped = text
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .skip_while(|w| *w != "dropped")
        .nth(1)
        .and_then(|n| n.parse::<u64>().ok());
    assert!(dropped.is_some_and(|n| n > 0), "no packet was dropped: the faults did not happen\n{text}");
}

/// A PREPARE through the C ABI from the client's request.
fn prepare(srv: *mut rc_server, req: &rctb_rcsession::PrepareRequest) -> PrepareReply {
    let token = req.client_token.clone().unwrap_or_default();
    let c = rc_prepare_req {
        principal: rc_principal_id { id: *req.principal.digest() },
        op: u8::from(req.op == Op::Put),
        target: s(&req.target),
        offset: req.offset,
        size: req.size,
        client_psn: req.client_psn,
        cookie: req.cookie,
        client_token: s(&token),
    };
    // SAFETY: a zeroed plain C struct.
    let mut resp: rc_prepare_resp = unsafe { std::mem::zeroed() };
    // SAFETY: a live server and valid request and reply structs.
    assert_eq!(unsafe { rc_prepare(srv, &c, &mut resp) }, RC_OK);
    let id: String = resp.session_id[..32].iter().map(|&b| b as u8 as char).collect();
    let token: String = resp.reply_token[..resp.reply_len as usize].iter().map(|&b| b as u8 as char).collect();
    PrepareReply {
        session: SessionId::parse(&id).unwrap(),
        server_qpn: resp.server_qpn,
        server_psn: resp.server_psn,
        staging_addr: resp.staging_addr,
        staging_rkey: resp.staging_rkey,
        reply_token: Some(rctb_rcsession::hipobj::RdmaToken::from_hex(&token).unwrap()),
    }
}

/// READY through the C ABI on another thread, while this one drives the client.
fn ready(srv: *mut rc_server, req: &rctb_rcsession::ReadyRequest) -> std::thread::JoinHandle<(i32, rc_ready_resp)> {
    let id = req.session.to_string();
    let (who, cookie, qpn, addr, rkey) =
        (*req.principal.digest(), req.cookie, req.client_qpn, req.client_mr_addr, req.client_mr_rkey);
    let srv = srv as usize;
    std::thread::spawn(move || {
        let c = rc_ready_req {
            principal: rc_principal_id { id: who },
            session_id: s(&id),
            cookie,
            client_qpn: qpn,
            client_mr_addr: addr,
            client_mr_rkey: rkey,
        };
        // SAFETY: a zeroed plain C struct.
        let mut resp: rc_ready_resp = unsafe { std::mem::zeroed() };
        // SAFETY: the server outlives this thread (joined before destroy).
        let rc = unsafe { rc_ready_transfer(srv as *mut rc_server, &c, &mut resp) };
        (rc, resp)
    })
}

/// The client's endpoint from `IP[@NETNS][/MTU]` (the VM's check puts it
/// in a network namespace, on rxe's MTU of 1024).
fn client_endpoint(spec: &str) -> UdpConfig {
    let (rest, mtu) = match spec.split_once('/') {
        Some((rest, mtu)) => (rest, Some(mtu)),
        None => (spec, None),
    };
    let (ip, netns) = match rest.split_once('@') {
        Some((ip, ns)) => (ip, Some(ns)),
        None => (rest, None),
    };
    let mut cfg = UdpConfig::new("client", ip.parse::<Ipv4Addr>().expect("the client's IPv4 address"));
    cfg.netns = netns.map(Into::into);
    if let Some(mtu) = mtu {
        cfg.mtu = Mtu::from_bytes(mtu.parse().expect("an MTU in bytes")).expect("256, 512, 1024, 2048 or 4096");
    }
    cfg
}

fn transfers() {
    // The server's device: the one whose GID holds this address (rctb's
    // libibverbs: RCTB_IBV_ADDR; rxe in the VM: RCTB_RCSERVER_GID_HINT).
    let hint = std::env::var("RCTB_RCSERVER_GID_HINT").or_else(|_| std::env::var("RCTB_IBV_ADDR")).unwrap();
    let server = std::ffi::CString::new(hint).unwrap();
    let client = client_endpoint(&std::env::var(CHILD).unwrap());
    let opts = rc_device_opts {
        gid_hint: server.as_ptr(),
        port: 1,
        gid_index: -1,
        max_sessions: 16,
        max_user_sessions: 16,
        max_staging_bytes: 1 << 24,
        max_user_staging_bytes: 1 << 24,
        max_qps: 16,
        max_user_qps: 0,
        t_prep_ms: 10_000,
        t_exec_ms: 10_000,
        max_ready_slots: 0,
        max_stage_slots: 0,
    };
    let mut srv = std::ptr::null_mut();
    // SAFETY: valid options and out-pointer.
    assert_eq!(unsafe { rc_server_init(&opts, &mut srv) }, RC_OK, "rc_server_init on {server:?}");
    // SAFETY: a live server; the hook is a function of this test.
    unsafe { rc_server_set_terminal_notify(srv, Some(on_terminal), std::ptr::null_mut()) };

    let transport = UdpTransport::bind(client).expect("the client's udp endpoint");
    let mut ccfg = ClientConfig::default();
    ccfg.capacity = 1 << 20;
    let mut client = RcClient::new(transport, ccfg).expect("the client");
    let who = PrincipalId::from_credentials("alice", "secret");

    for (i, size) in [1usize, 4096, 65_537, 1 << 20].into_iter().enumerate() {
        // GET: the gateway stages the object, the server writes it to the client.
        let object = pattern(i as u8, size);
        let (mut x, req) =
            client.begin(who, Op::Get, "/bucket/get", size as u64, 0x100 + i as u32, 0xC0DE_0000 + i as u32).unwrap();
        let reply = prepare(srv, &req);
        let id = reply.session.to_string();
        // SAFETY: a zeroed plain C struct.
        let mut lease: rc_staging_lease = unsafe { std::mem::zeroed() };
        // SAFETY: a live server; a writable lease.
        assert_eq!(unsafe { rc_borrow_staging(srv, s(&id), &mut lease) }, RC_OK);
        assert_eq!(lease.capacity, size);
        // SAFETY: the lease lends `capacity` bytes of the server's memory until it is returned.
        unsafe { std::slice::from_raw_parts_mut(lease.buf, lease.capacity) }.copy_from_slice(&object);
        // SAFETY: a live server; the lease as lent.
        assert_eq!(unsafe { rc_finish_staging(srv, lease, 1, size, s("etag-g"), s("v1")) }, RC_OK);
        // SAFETY: a live server.
        assert_eq!(unsafe { rc_finish_prepare(srv, s(&id), 1) }, RC_OK);
        let ready_req = client.connect(&mut x, &reply, true).unwrap();
        client.ready_sent(&mut x);
        let server = ready(srv, &ready_req);
        let mut done = false;
        while !(done && server.is_finished()) {
            done |= client.poll(&mut x).unwrap().is_some();
        }
        let (rc, resp) = server.join().unwrap();
        assert_eq!(rc, RC_OK, "GET of {size}: READY");
        assert_eq!((resp.outcome, resp.bytes_transferred), (RC_READY_OK, size as u64));
        assert_eq!(&resp.etag[..resp.etag_len as usize].iter().map(|&b| b as u8).collect::<Vec<_>>(), b"etag-g");
        // SAFETY: a live server.
        assert_eq!(unsafe { rc_finish_final(srv, s(&id)) }, RC_OK);
        let mut got = vec![0u8; size];
        client.read_payload(&mut got).unwrap();
        assert!(got == object, "GET of {size}: the client's bytes differ");

        // PUT: the client writes into staging; the gateway reads the view.
        let object = pattern(100 + i as u8, size);
        client.write_payload(&object).unwrap();
        let (mut x, req) =
            client.begin(who, Op::Put, "/bucket/put", size as u64, 0x200 + i as u32, 0xB0B0_0000 + i as u32).unwrap();
        let reply = prepare(srv, &req);
        let id = reply.session.to_string();
        // SAFETY: a live server.
        assert_eq!(unsafe { rc_finish_prepare(srv, s(&id), 1) }, RC_OK);
        let ready_req = client.connect(&mut x, &reply, false).unwrap();
        let server = ready(srv, &ready_req);
        client.start_put(&mut x).unwrap();
        // The client's engine runs while it is polled: a WRITE that reached
        // the server before READY made its QP ready is sent again.
        while !server.is_finished() {
            let _ = client.poll(&mut x).unwrap();
        }
        let (rc, resp) = server.join().unwrap();
        assert_eq!(rc, RC_OK, "PUT of {size}: READY");
        assert_eq!((resp.outcome, resp.bytes_transferred), (RC_READY_OK, size as u64));
        // SAFETY: a zeroed plain C struct.
        let mut view: rc_put_view = unsafe { std::mem::zeroed() };
        // SAFETY: a live server; a writable view.
        assert_eq!(unsafe { rc_get_put_data(srv, s(&id), &mut view) }, RC_OK);
        // SAFETY: the view lends `len` bytes of the server's memory until it is returned.
        let data = unsafe { std::slice::from_raw_parts(view.buf, view.len) };
        assert!(data == object.as_slice(), "PUT of {size}: the server's bytes differ");
        // SAFETY: a live server; the view as lent.
        assert_eq!(unsafe { rc_finish_put(srv, view, 1, s("etag-p"), s("")) }, RC_OK);
    }
    // SAFETY: a live server, destroyed once; nothing uses it after.
    unsafe { rc_server_destroy(srv) };
    let ended = ENDED.lock().unwrap();
    assert_eq!(ended.len(), 8, "one terminal notification per session: {ended:?}");
    assert!(ended.iter().all(|(_, outcome, bytes)| *outcome == RC_READY_OK && *bytes > 0), "{ended:?}");
    println!("8 sessions over RC: GET and PUT of 1 B, 4 KiB, 64 KiB + 1 and 1 MiB, each byte checked");
}
