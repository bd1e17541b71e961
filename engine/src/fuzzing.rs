//! The check the `engine_cm` fuzz target runs, kept here so `cargo test`
//! replays its corpus through the same code (`tests/fuzz_corpus.rs`). Not
//! a stable API.
//!
//! An endpoint listening on a port takes a stream of QP1 packets made
//! from the fuzzer's bytes: real MADs (the REQ, REP, RTU, MRA, REJ, DREQ
//! and DREP an engine writes) mutated byte by byte, interleaved with time
//! passing and the application accepting or rejecting what it was asked.
//! Whatever comes, nothing panics, every REQ the endpoint refuses gets a
//! REJ or a counted drop, no connection or QP appears without a request
//! the application took, and once time has run far enough every timer has
//! fired: nothing is left retransmitting.

use std::net::Ipv4Addr;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;

use crate::cm::CmMessage;
use crate::cm::mad::{self, GSI_QPN};
use crate::{Endpoint, EndpointConfig, Packet};

const PEER: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const PORT: u16 = 4420;

/// A fixed-output RNG: the check must be a function of its bytes.
struct Counter(u64);

impl rand_core::RngCore for Counter {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for b in dst {
            *b = self.next_u32() as u8;
        }
    }
}

fn templates() -> Vec<[u8; rctb_core::wire::cm::MAD_LEN]> {
    let c = |n| ConnId(n);
    let msgs = [
        CmMessage::Req {
            src_conn: c(7),
            src_port: 0xC007,
            port: PORT,
            qpn: 0x22,
            psn: Psn::wrapping(0x1234),
            mtu: Mtu::Mtu1024,
            private_data: vec![0, 0, 0, 0, 0x20, 0, 0x1f, 0],
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            response_timeout: 12,
            max_retries: 3,
        },
        CmMessage::Rtu { dst_conn: c(1), src_conn: c(7) },
        CmMessage::Mra { dst_conn: c(1), src_conn: c(7), service_timeout: 14 },
        CmMessage::Rej { dst_conn: c(1), src_conn: c(7), reason: 28, private_data: vec![0, 0, 6, 0] },
        CmMessage::Dreq { dst_conn: c(1), src_conn: c(7), remote_qpn: 0x11 },
        CmMessage::Drep { dst_conn: c(1), src_conn: c(7) },
        CmMessage::Rep {
            dst_conn: c(1),
            src_conn: c(7),
            qpn: 0x22,
            psn: Psn::wrapping(5),
            mtu: Mtu::Mtu1024,
            private_data: vec![0, 0, 0x20, 0],
            responder_resources: 0,
            initiator_depth: 16,
            rnr_retry_count: 7,
        },
    ];
    msgs.iter().filter_map(|m| mad::to_mad(m, PEER, LOCAL, 0x0200_00ff_fe00_0001).ok()).collect()
}

/// Runs the byte stream `data` (3-byte records) against a listening endpoint.
pub fn cm_receive(data: &[u8]) -> Result<(), String> {
    let mut ep = Endpoint::new(EndpointConfig::new("fuzz", LOCAL), Box::new(Counter(1)));
    ep.cm_listen(PORT).map_err(|e| e.to_string())?;
    let pd = ep.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ep.create_cq(64).map_err(|e| e.to_string())?;
    let templates = templates();
    let mut cur = templates[0];
    let mut now = Instant::ZERO;
    let (mut requests_seen, mut accepted) = (0usize, 0usize);
    let mut pending = Vec::new();
    for rec in data.chunks_exact(3) {
        let (op, a, b) = (rec[0] % 5, rec[1], rec[2]);
        match op {
            0 => cur[usize::from(a)] ^= b,
            1 => cur = templates[usize::from(a) % templates.len()],
            2 => {
                let pkt = Packet {
                    src_ip: PEER,
                    dst_ip: LOCAL,
                    udp_src_port: 0xC000,
                    bth: rctb_core::wire::roce::Bth::new(
                        rctb_core::wire::roce::Opcode::UD_SEND_ONLY,
                        GSI_QPN,
                        Psn::wrapping(0),
                    ),
                    reth: None,
                    aeth: None,
                    atomic: None,
                    atomic_ack: None,
                    deth: Some(rctb_core::wire::roce::Deth {
                        qkey: rctb_core::wire::cm::GSI_QKEY,
                        resv8: 0,
                        src_qp: GSI_QPN,
                    }),
                    imm: None,
                    payload: cur.to_vec(),
                    corrupt: false,
                };
                let _ = ep.handle_packet(now, &pkt);
            }
            3 => {
                now += Duration::from_millis(u64::from(b) * 4);
                ep.handle_timeout(now);
            }
            _ => {
                for conn in pending.drain(..) {
                    if a & 1 == 0 {
                        let init = QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false };
                        if ep.cm_accept(now, conn, &AcceptParams::new(init, vec![0, 0, 0x20, 0])).is_ok() {
                            accepted += 1;
                        }
                    } else {
                        let _ = ep.cm_reject(conn, &[0, 0, 6, 0]);
                    }
                }
            }
        }
        while let Some(ev) = ep.poll_cm_event() {
            if let CmEvent::ConnectRequest { conn, .. } = ev {
                requests_seen += 1;
                pending.push(conn);
            }
        }
        // What it sends must itself be a MAD a peer reads.
        while let Some(out) = ep.poll_cm_packet(&mut Vec::new()) {
            if out.bth.dest_qp != GSI_QPN || out.dst_ip != PEER {
                return Err(format!("a CM packet to {} QP {}", out.dst_ip, out.bth.dest_qp));
            }
            rctb_core::wire::cm::CmMad::decode(&out.payload).map_err(|e| format!("it sent a bad MAD: {e}"))?;
        }
    }
    if ep.resources().qps > accepted {
        return Err(format!("{} QPs for {accepted} accepted requests", ep.resources().qps));
    }
    if accepted > requests_seen {
        return Err(format!("{accepted} accepted of {requests_seen} requests"));
    }
    // Every retransmission runs out: after long enough, no timer is left.
    for _ in 0..64 {
        let Some(t) = ep.poll_timeout() else { break };
        now = now.max(t);
        ep.handle_timeout(now);
        while ep.poll_cm_packet(&mut Vec::new()).is_some() {}
    }
    if let Some(t) = ep.poll_timeout() {
        return Err(format!("a timer still pending at {t:?} after every retry ran out"));
    }
    Ok(())
}
