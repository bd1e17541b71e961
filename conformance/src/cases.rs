//! The conformance cases. Each returns `Err(why)` on the first thing that
//! differs from RC semantics as verbs specifies them (and rxe implements).

use rctb_core::time::Duration;
use rctb_core::transport::*;

use crate::CaseFn;
use crate::harness::{Endpoints, Link, QpPair, cm_event, completions, expect_wc, pattern, pause};

const ALL_ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);
const MIB: u32 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
}

const OPS: [(Op, &str); 5] = [
    (Op::Send, "send"),
    (Op::SendImm, "send_imm"),
    (Op::Write, "write"),
    (Op::WriteImm, "write_imm"),
    (Op::Read, "read"),
];

/// Message sizes around the path MTU: 0, 1, MTU-1, MTU, MTU+1, 3 MTU+5, 1 MiB.
/// Cases name sizes relative to the MTU so one list serves every MTU.
const SIZES: [&str; 7] = ["0", "1", "mtu-1", "mtu", "mtu+1", "3mtu+5", "1mib"];

fn size(name: &str, mtu: u32) -> u32 {
    match name {
        "0" => 0,
        "1" => 1,
        "mtu-1" => mtu - 1,
        "mtu" => mtu,
        "mtu+1" => mtu + 1,
        "3mtu+5" => 3 * mtu + 5,
        _ => MIB,
    }
}

macro_rules! data_case {
    ($op:expr, $size:expr) => {
        (|ends| data_path(ends, $op, $size)) as fn(&mut Endpoints<'_, _>) -> Result<(), String>
    };
}

pub fn all<T: Transport>() -> Vec<(String, CaseFn<T>)> {
    let mut v: Vec<(String, CaseFn<T>)> = Vec::new();
    // One function per (op, size) keeps case names precise in the report.
    let table: [[CaseFn<T>; 7]; 5] = [
        [
            data_case!(Op::Send, "0"),
            data_case!(Op::Send, "1"),
            data_case!(Op::Send, "mtu-1"),
            data_case!(Op::Send, "mtu"),
            data_case!(Op::Send, "mtu+1"),
            data_case!(Op::Send, "3mtu+5"),
            data_case!(Op::Send, "1mib"),
        ],
        [
            data_case!(Op::SendImm, "0"),
            data_case!(Op::SendImm, "1"),
            data_case!(Op::SendImm, "mtu-1"),
            data_case!(Op::SendImm, "mtu"),
            data_case!(Op::SendImm, "mtu+1"),
            data_case!(Op::SendImm, "3mtu+5"),
            data_case!(Op::SendImm, "1mib"),
        ],
        [
            data_case!(Op::Write, "0"),
            data_case!(Op::Write, "1"),
            data_case!(Op::Write, "mtu-1"),
            data_case!(Op::Write, "mtu"),
            data_case!(Op::Write, "mtu+1"),
            data_case!(Op::Write, "3mtu+5"),
            data_case!(Op::Write, "1mib"),
        ],
        [
            data_case!(Op::WriteImm, "0"),
            data_case!(Op::WriteImm, "1"),
            data_case!(Op::WriteImm, "mtu-1"),
            data_case!(Op::WriteImm, "mtu"),
            data_case!(Op::WriteImm, "mtu+1"),
            data_case!(Op::WriteImm, "3mtu+5"),
            data_case!(Op::WriteImm, "1mib"),
        ],
        [
            data_case!(Op::Read, "0"),
            data_case!(Op::Read, "1"),
            data_case!(Op::Read, "mtu-1"),
            data_case!(Op::Read, "mtu"),
            data_case!(Op::Read, "mtu+1"),
            data_case!(Op::Read, "3mtu+5"),
            data_case!(Op::Read, "1mib"),
        ],
    ];
    for (row, (_, op_name)) in table.iter().zip(OPS) {
        for (case, size_name) in row.iter().zip(SIZES) {
            v.push((format!("{op_name}/{size_name}"), *case));
        }
    }
    v.push(("rem_access_err/bad_rkey".into(), rem_access_bad_rkey));
    v.push(("rem_access_err/write_without_remote_write".into(), rem_access_no_remote_write));
    v.push(("rem_access_err/read_without_remote_read".into(), rem_access_no_remote_read));
    v.push(("receive_too_small".into(), receive_too_small));
    v.push(("rnr/receive_posted_late".into(), rnr_then_success));
    v.push(("rnr/retry_exhausted".into(), rnr_retry_exhausted));
    v.push(("flush/err_flushes_receives".into(), flush_after_err));
    v.push(("cm/connect_accept_private_data".into(), cm_connect_accept));
    v.push(("cm/reject_private_data".into(), cm_reject));
    v.push(("cm/passive_reads_what_the_request_offers".into(), cm_passive_reads));
    v.extend(crate::atomic_cases::cases());
    v.extend(crate::srq_cases::cases());
    v
}

/// Bytes checked past the end of a message in [`data_path`].
const GUARD: usize = 64;
/// What the destination holds past the message before it arrives.
const DEST_GUARD: u8 = 0xEE;
/// What the source holds past the message: what an overrun would copy.
const SOURCE_TAIL: u8 = 0x77;

/// One message of `op` and `size_name` from a to b, checked on both sides:
/// the bytes, the completions (a READ's requester `byte_len` too), and
/// that nothing past the message changed at the destination.
fn data_path<T: Transport>(x: &mut Endpoints<'_, T>, op: Op, size_name: &str) -> Result<(), String> {
    let mtu = x.path_mtu().bytes();
    let len = size(size_name, mtu);
    let ma = x.mr(true, MIB as u64 + GUARD as u64, ALL_ACCESS)?;
    let mb = x.mr(false, MIB as u64 + GUARD as u64, ALL_ACCESS)?;
    let qps = x.connect(Link::default())?;
    let data = pattern(len ^ 0x5a, len as usize);
    let imm = 0xC0DE_0000 | len;
    // A READ moves b's data to a; everything else moves a's data to b.
    // Past the message, the source holds other bytes and the destination a
    // guard: a transfer that runs past `len` shows in the guard.
    let (src, dst) =
        if op == Op::Read { ((&mut *x.b, mb), (&mut *x.a, ma)) } else { ((&mut *x.a, ma), (&mut *x.b, mb)) };
    src.0.mr_write(src.1.id, 0, &data).map_err(|e| format!("mr_write: {e}"))?;
    src.0.mr_write(src.1.id, len as u64, &[SOURCE_TAIL; GUARD]).map_err(|e| format!("mr_write: {e}"))?;
    dst.0.mr_write(dst.1.id, len as u64, &[DEST_GUARD; GUARD]).map_err(|e| format!("mr_write: {e}"))?;
    let consumes_receive = matches!(op, Op::Send | Op::SendImm | Op::WriteImm);
    if consumes_receive {
        let sge = [Sge::new(mb.id, 0, MIB)];
        x.b.post_recv(qps.b.id, &RecvWr::new(7, &sge)).map_err(|e| format!("post_recv: {e}"))?;
    }
    let remote = mb.remote(0);
    let send_op = match op {
        Op::Send => SendOp::Send,
        Op::SendImm => SendOp::SendWithImm { imm },
        Op::Write => SendOp::Write { remote },
        Op::WriteImm => SendOp::WriteWithImm { remote, imm },
        Op::Read => SendOp::Read { remote },
    };
    let sge = [Sge::new(ma.id, 0, len)];
    x.a.post_send(qps.a.id, &SendWr::new(1, send_op, &sge)).map_err(|e| format!("post_send: {e}"))?;

    let sc = completions(x.a, &x.sa, 1)?;
    let opcode = match op {
        Op::Send | Op::SendImm => WcOpcode::Send,
        Op::Write | Op::WriteImm => WcOpcode::RdmaWrite,
        Op::Read => WcOpcode::RdmaRead,
    };
    // A READ's requester completion counts the bytes read (verbs: byte_len
    // is valid in the send queue for READs and atomics).
    let read_len = (op == Op::Read).then_some(len);
    expect_wc(sc.first(), "requester", WcStatus::Success, Some(opcode), read_len, None)?;
    if consumes_receive {
        let rc = completions(x.b, &x.sb, 1)?;
        let (rop, rimm) = match op {
            Op::Send => (WcOpcode::Recv, None),
            Op::SendImm => (WcOpcode::Recv, Some(imm)),
            _ => (WcOpcode::RecvRdmaWithImm, Some(imm)),
        };
        expect_wc(rc.first(), "responder", WcStatus::Success, Some(rop), Some(len), Some(rimm))?;
    }
    let mut got = vec![0u8; len as usize];
    let (reader, region) = if op == Op::Read { (&*x.a, ma) } else { (&*x.b, mb) };
    reader.mr_read(region.id, 0, &mut got).map_err(|e| format!("mr_read: {e}"))?;
    if got != data {
        let at = got.iter().zip(&data).position(|(g, d)| g != d).unwrap_or(0);
        return Err(format!("data differs from byte {at} of {len}"));
    }
    let mut guard = [0u8; GUARD];
    reader.mr_read(region.id, len as u64, &mut guard).map_err(|e| format!("mr_read: {e}"))?;
    if let Some(at) = guard.iter().position(|&g| g != DEST_GUARD) {
        return Err(format!("byte {} written past the {len}-byte message", len as usize + at));
    }
    Ok(())
}

fn expect_access_error<T: Transport>(x: &mut Endpoints<'_, T>, qps: QpPair) -> Result<(), String> {
    let sc = completions(x.a, &x.sa, 1)?;
    expect_wc(sc.first(), "requester", WcStatus::RemAccessErr, None, None, None)?;
    let state = x.a.query_qp(qps.a.id).map_err(|e| format!("query_qp: {e}"))?.state;
    if state != QpState::Err {
        return Err(format!("requester QP in {state:?} after REM_ACCESS_ERR (expected Err)"));
    }
    Ok(())
}

fn rem_access_bad_rkey<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ALL_ACCESS)?;
    let mb = x.mr(false, 4096, ALL_ACCESS)?;
    let qps = x.connect(Link::default())?;
    let bad = RemoteAddr { addr: mb.addr, rkey: mb.rkey ^ 0x00A5_5A00 };
    let sge = [Sge::new(ma.id, 0, 64)];
    x.a.post_send(qps.a.id, &SendWr::new(1, SendOp::Write { remote: bad }, &sge))
        .map_err(|e| format!("post_send: {e}"))?;
    expect_access_error(x, qps)
}

fn rem_access_no_remote_write<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ALL_ACCESS)?;
    let mb = x.mr(false, 4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let qps = x.connect(Link::default())?;
    let sge = [Sge::new(ma.id, 0, 64)];
    let wr = SendWr::new(1, SendOp::Write { remote: mb.remote(0) }, &sge);
    x.a.post_send(qps.a.id, &wr).map_err(|e| format!("post_send: {e}"))?;
    expect_access_error(x, qps)
}

fn rem_access_no_remote_read<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ALL_ACCESS)?;
    let mb = x.mr(false, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let qps = x.connect(Link::default())?;
    let sge = [Sge::new(ma.id, 0, 64)];
    let wr = SendWr::new(1, SendOp::Read { remote: mb.remote(0) }, &sge);
    x.a.post_send(qps.a.id, &wr).map_err(|e| format!("post_send: {e}"))?;
    expect_access_error(x, qps)
}

/// A SEND larger than the posted receive. IBA (and mlx5) say LOC_LEN_ERR on
/// the receive and REM_INV_REQ_ERR on the send; rxe (Linux 6.1) handles it as
/// a malformed WQE: LOC_QP_OP_ERR and REM_OP_ERR. rxe is the reference here.
fn receive_too_small<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ALL_ACCESS)?;
    let mb = x.mr(false, 4096, ALL_ACCESS)?;
    let qps = x.connect(Link::default())?;
    let rsge = [Sge::new(mb.id, 0, 16)];
    x.b.post_recv(qps.b.id, &RecvWr::new(9, &rsge)).map_err(|e| format!("post_recv: {e}"))?;
    let sge = [Sge::new(ma.id, 0, 64)];
    x.a.post_send(qps.a.id, &SendWr::new(1, SendOp::Send, &sge)).map_err(|e| format!("post_send: {e}"))?;
    let rc = completions(x.b, &x.sb, 1)?;
    expect_wc(rc.first(), "responder", WcStatus::LocQpOpErr, None, None, None)?;
    let sc = completions(x.a, &x.sa, 1)?;
    expect_wc(sc.first(), "requester", WcStatus::RemOpErr, None, None, None)
}

fn rnr_then_success<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ALL_ACCESS)?;
    let mb = x.mr(false, 4096, ALL_ACCESS)?;
    // 0.64 ms RNR timer, retried forever: the SEND waits for the receive.
    let link = Link { min_rnr_timer: RnrTimer::from_code(12).expect("code 12"), ..Link::default() };
    let qps = x.connect(link)?;
    let data = pattern(77, 100);
    x.a.mr_write(ma.id, 0, &data).map_err(|e| format!("mr_write: {e}"))?;
    let sge = [Sge::new(ma.id, 0, 100)];
    x.a.post_send(qps.a.id, &SendWr::new(1, SendOp::Send, &sge)).map_err(|e| format!("post_send: {e}"))?;
    // Nothing can complete while no receive is posted.
    pause(x.a, Duration::from_millis(3))?;
    let early = completions_now(x.a, &x.sa)?;
    if !early.is_empty() {
        return Err(format!("completed without a receive posted: {early:?}"));
    }
    let rsge = [Sge::new(mb.id, 0, 4096)];
    x.b.post_recv(qps.b.id, &RecvWr::new(5, &rsge)).map_err(|e| format!("post_recv: {e}"))?;
    let rc = completions(x.b, &x.sb, 1)?;
    expect_wc(rc.first(), "responder", WcStatus::Success, Some(WcOpcode::Recv), Some(100), Some(None))?;
    let sc = completions(x.a, &x.sa, 1)?;
    expect_wc(sc.first(), "requester", WcStatus::Success, Some(WcOpcode::Send), None, None)?;
    let mut got = vec![0u8; 100];
    x.b.mr_read(mb.id, 0, &mut got).map_err(|e| format!("mr_read: {e}"))?;
    if got != data {
        return Err("data differs after RNR recovery".into());
    }
    Ok(())
}

fn completions_now<T: Transport>(t: &mut T, s: &crate::Side) -> Result<Vec<Completion>, String> {
    let mut out = Vec::new();
    t.poll_cq(s.cq, 16, &mut out).map_err(|e| format!("poll_cq: {e}"))?;
    Ok(out)
}

fn rnr_retry_exhausted<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ALL_ACCESS)?;
    x.mr(false, 4096, ALL_ACCESS)?;
    let link = Link { rnr_retry: 1, min_rnr_timer: RnrTimer::from_code(1).expect("code 1"), ..Link::default() };
    let qps = x.connect(link)?;
    let sge = [Sge::new(ma.id, 0, 64)];
    x.a.post_send(qps.a.id, &SendWr::new(1, SendOp::Send, &sge)).map_err(|e| format!("post_send: {e}"))?;
    x.a.post_send(qps.a.id, &SendWr::new(2, SendOp::Send, &sge)).map_err(|e| format!("post_send: {e}"))?;
    let sc = completions(x.a, &x.sa, 2)?;
    expect_wc(sc.first(), "first WR", WcStatus::RnrRetryExcErr, None, None, None)?;
    expect_wc(sc.get(1), "second WR", WcStatus::WrFlushErr, None, None, None)?;
    let rc = completions_now(x.b, &x.sb)?;
    if !rc.is_empty() {
        return Err(format!("the responder completed something: {rc:?}"));
    }
    Ok(())
}

fn flush_after_err<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let mb = x.mr(false, 4096, ALL_ACCESS)?;
    let qps = x.connect(Link::default())?;
    for i in 0..4u64 {
        let sge = [Sge::new(mb.id, i * 64, 64)];
        x.b.post_recv(qps.b.id, &RecvWr::new(100 + i, &sge)).map_err(|e| format!("post_recv: {e}"))?;
    }
    x.b.modify_qp(qps.b.id, &QpTransition::Err).map_err(|e| format!("modify_qp ERR: {e}"))?;
    let rc = completions(x.b, &x.sb, 4)?;
    if rc.len() != 4 {
        return Err(format!("{} flush completions of 4", rc.len()));
    }
    for (i, wc) in rc.iter().enumerate() {
        if wc.wr_id != 100 + i as u64 || wc.status != WcStatus::WrFlushErr {
            return Err(format!(
                "receive {i}: wr_id {} status {} (expected {} WR_FLUSH_ERR)",
                wc.wr_id,
                wc.status,
                100 + i
            ));
        }
    }
    Ok(())
}

/// A CM port per case, apart from the NVMe-oF (4420) and perftest (18515) ones.
const CM_PORT: u16 = 21000;

fn cm_connect_accept<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let listener = x.b.cm_listen(CM_PORT).map_err(|e| format!("cm_listen: {e}"))?;
    x.track_cm(false, None, Some(listener), None);
    let caps = QpCaps::default();
    let ia = QpInit { pd: x.sa.pd, send_cq: x.sa.cq, recv_cq: x.sa.cq, caps, sq_sig_all: false, srq: None };
    let ib = QpInit { pd: x.sb.pd, send_cq: x.sb.cq, recv_cq: x.sb.cq, caps, sq_sig_all: false, srq: None };
    let remote = std::net::SocketAddrV4::new(x.sb.ip, CM_PORT);
    let (conn_a, qp_a) =
        x.a.cm_connect(&ConnectParams::new(remote, ia, b"rctb-hello".to_vec()))
            .map_err(|e| format!("cm_connect: {e}"))?;
    x.track_cm(true, Some(conn_a), None, Some(qp_a));
    let (conn_b, private) = match cm_event(x.b)? {
        CmEvent::ConnectRequest { conn, private_data, .. } => (conn, private_data),
        other => return Err(format!("server: expected a connect request, got {other:?}")),
    };
    x.track_cm(false, Some(conn_b), None, None);
    // IB CM pads REQ private data; the application's bytes come first.
    if !private.starts_with(b"rctb-hello") {
        return Err(format!("server: request private data {private:02x?}"));
    }
    let qp_b =
        x.b.cm_accept(conn_b, &AcceptParams::new(ib, b"rctb-welcome".to_vec()))
            .map_err(|e| format!("cm_accept: {e}"))?;
    x.track_cm(false, None, None, Some(qp_b));
    match cm_event(x.a)? {
        CmEvent::Established { conn, private_data, .. } if conn == conn_a => {
            if !private_data.starts_with(b"rctb-welcome") {
                return Err(format!("client: accept private data {private_data:02x?}"));
            }
        }
        other => return Err(format!("client: expected Established, got {other:?}")),
    }
    match cm_event(x.b)? {
        CmEvent::Established { conn, .. } if conn == conn_b => {}
        other => return Err(format!("server: expected Established, got {other:?}")),
    }
    for (t, qp, who) in [(&*x.a, qp_a, "client"), (&*x.b, qp_b, "server")] {
        let state = t.query_qp(qp).map_err(|e| format!("query_qp: {e}"))?.state;
        if state != QpState::Rts {
            return Err(format!("{who} QP in {state:?} after Established (expected Rts)"));
        }
    }
    // Both sides see the disconnect (rdma_cm tells the initiator too).
    x.a.cm_disconnect(conn_a).map_err(|e| format!("cm_disconnect: {e}"))?;
    match cm_event(x.a)? {
        CmEvent::Disconnected { conn } if conn == conn_a => {}
        other => return Err(format!("client: expected Disconnected, got {other:?}")),
    }
    match cm_event(x.b)? {
        CmEvent::Disconnected { conn } if conn == conn_b => Ok(()),
        other => Err(format!("server: expected Disconnected, got {other:?}")),
    }
}

fn cm_reject<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let listener = x.b.cm_listen(CM_PORT + 1).map_err(|e| format!("cm_listen: {e}"))?;
    x.track_cm(false, None, Some(listener), None);
    let ia = QpInit {
        pd: x.sa.pd,
        send_cq: x.sa.cq,
        recv_cq: x.sa.cq,
        caps: QpCaps::default(),
        sq_sig_all: false,
        srq: None,
    };
    let remote = std::net::SocketAddrV4::new(x.sb.ip, CM_PORT + 1);
    let (conn_a, qp_a) =
        x.a.cm_connect(&ConnectParams::new(remote, ia, vec![1, 2, 3])).map_err(|e| format!("cm_connect: {e}"))?;
    x.track_cm(true, Some(conn_a), None, Some(qp_a));
    let conn_b = match cm_event(x.b)? {
        CmEvent::ConnectRequest { conn, .. } => conn,
        other => return Err(format!("server: expected a connect request, got {other:?}")),
    };
    x.track_cm(false, Some(conn_b), None, None);
    // NVMe/RDMA's reject format: recfmt 0, status 6 (no resources).
    x.b.cm_reject(conn_b, &[0, 0, 6, 0]).map_err(|e| format!("cm_reject: {e}"))?;
    match cm_event(x.a)? {
        CmEvent::Rejected { conn, private_data } if conn == conn_a => {
            if !private_data.starts_with(&[0, 0, 6, 0]) {
                return Err(format!("client: reject private data {private_data:02x?}"));
            }
            Ok(())
        }
        other => Err(format!("client: expected Rejected, got {other:?}")),
    }
}

/// A requester that serves RDMA READs but sends none (responder resources
/// 4, initiator depth 0), as the kernel's NVMe/RDMA host connects: the
/// passive side sees the REQ's two fields as offered, and its accept may
/// take up to 4 READs of its own, so a READ it posts completes. (librdmacm
/// hands the passive side those fields swapped; reading them unswapped
/// leaves the acceptor an initiator depth of 0, and its READs never leave.)
fn cm_passive_reads<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let listener = x.b.cm_listen(CM_PORT + 2).map_err(|e| format!("cm_listen: {e}"))?;
    x.track_cm(false, None, Some(listener), None);
    let ma = x.mr(true, 4096, ALL_ACCESS)?;
    let mb = x.mr(false, 4096, ALL_ACCESS)?;
    let caps = QpCaps::default();
    let ia = QpInit { pd: x.sa.pd, send_cq: x.sa.cq, recv_cq: x.sa.cq, caps, sq_sig_all: false, srq: None };
    let ib = QpInit { pd: x.sb.pd, send_cq: x.sb.cq, recv_cq: x.sb.cq, caps, sq_sig_all: false, srq: None };
    let mut req = ConnectParams::new(std::net::SocketAddrV4::new(x.sb.ip, CM_PORT + 2), ia, b"reads".to_vec());
    (req.responder_resources, req.initiator_depth) = (4, 0);
    let (conn_a, qp_a) = x.a.cm_connect(&req).map_err(|e| format!("cm_connect: {e}"))?;
    x.track_cm(true, Some(conn_a), None, Some(qp_a));
    let conn_b = match cm_event(x.b)? {
        CmEvent::ConnectRequest { conn, responder_resources: 4, initiator_depth: 0, .. } => conn,
        other => return Err(format!("server: expected a request offering 4 READs and sending none, got {other:?}")),
    };
    x.track_cm(false, Some(conn_b), None, None);
    let qp_b = x.b.cm_accept(conn_b, &AcceptParams::new(ib, vec![])).map_err(|e| format!("cm_accept: {e}"))?;
    x.track_cm(false, None, None, Some(qp_b));
    for (t, conn, who) in [(&mut *x.a, conn_a, "client"), (&mut *x.b, conn_b, "server")] {
        match cm_event(t)? {
            CmEvent::Established { conn: c, .. } if c == conn => {}
            other => return Err(format!("{who}: expected Established, got {other:?}")),
        }
    }
    let data = pattern(9, 4096);
    x.a.mr_write(ma.id, 0, &data).map_err(|e| format!("mr_write: {e}"))?;
    let sge = [Sge::new(mb.id, 0, 4096)];
    x.b.post_send(qp_b, &SendWr::new(5, SendOp::Read { remote: ma.remote(0) }, &sge))
        .map_err(|e| format!("post_send: {e}"))?;
    let wc = completions(x.b, &x.sb, 1)?;
    expect_wc(wc.first(), "server's READ", WcStatus::Success, Some(WcOpcode::RdmaRead), None, None)?;
    let mut got = vec![0u8; 4096];
    x.b.mr_read(mb.id, 0, &mut got).map_err(|e| format!("mr_read: {e}"))?;
    if got != data {
        return Err("the server's READ brought other bytes".into());
    }
    x.a.cm_disconnect(conn_a).map_err(|e| format!("cm_disconnect: {e}"))?;
    for (t, conn, who) in [(&mut *x.a, conn_a, "client"), (&mut *x.b, conn_b, "server")] {
        match cm_event(t)? {
            CmEvent::Disconnected { conn: c } if c == conn => {}
            other => return Err(format!("{who}: expected Disconnected, got {other:?}")),
        }
    }
    Ok(())
}
