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
//!
//! The later record kinds (5 and up; the first five keep their codes) use
//! the QPs the application accepted: shared receive queues (created with a
//! small `max_wr` and sometimes a limit, posted to, modified with limits in
//! and out of range, destroyed while used), CQs of 1 to 8 entries, accepts
//! onto them, RC SEND and WRITE with immediate arriving for those QPs, and
//! the application polling its CQs and asynchronous events. Every verb's
//! error is one its rules allow; every receive completes at most once, with
//! a `wr_id` posted to its QP's SRQ (or the QP); a `CqErr` names a CQ that
//! exists or existed, and (every completion here being a receive's) one of
//! the QPs receiving on it is in ERR; each armed SRQ limit fires at most
//! once; at the end everything destroys in order and the PD deallocates.

use std::collections::BTreeMap;
use std::fmt;
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
        CmMessage::Rej {
            dst_conn: c(1),
            src_conn: c(7),
            rejected: crate::cm::Rejected::Req,
            reason: 28,
            private_data: vec![0, 0, 6, 0],
        },
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

/// Record kinds: 0-4 the CM's (mutate, template, deliver, time, answer),
/// 5-14 the verbs' ([`Verbs`]).
const RECORD_KINDS: u8 = 15;

/// Runs the byte stream `data` (3-byte records) against a listening endpoint.
pub fn cm_receive(data: &[u8]) -> Result<(), String> {
    cm_receive_reached(data).map(|_| ())
}

/// What a run of [`cm_receive`] got to (for the seeds' test).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Receives completed from an SRQ.
    pub srq_completions: usize,
    /// `CqErr` events.
    pub cq_errs: usize,
    /// `SrqLimitReached` events.
    pub limits: usize,
    /// Verbs refused as their rules say.
    pub refused: usize,
}

/// [`cm_receive`], saying how far it got.
pub fn cm_receive_reached(data: &[u8]) -> Result<Reached, String> {
    let mut ep = Endpoint::new(EndpointConfig::new("fuzz", LOCAL), Box::new(Counter(1)));
    ep.cm_listen(PORT).map_err(|e| e.to_string())?;
    let pd = ep.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ep.create_cq(64).map_err(|e| e.to_string())?;
    let mut v = Verbs::new(&mut ep, pd, cq)?;
    let templates = templates();
    let mut cur = templates[0];
    let mut now = Instant::ZERO;
    let (mut requests_seen, mut accepted) = (0usize, 0usize);
    let mut pending = Vec::new();
    for rec in data.chunks_exact(3) {
        let (op, a, b) = (rec[0] % RECORD_KINDS, rec[1], rec[2]);
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
            4 => {
                for conn in pending.drain(..) {
                    if a & 1 == 0 {
                        let init = QpInit {
                            pd,
                            send_cq: cq,
                            recv_cq: cq,
                            caps: QpCaps::default(),
                            sq_sig_all: false,
                            srq: None,
                        };
                        if let Ok(qp) = ep.cm_accept(now, conn, &AcceptParams::new(init, vec![0, 0, 0x20, 0])) {
                            accepted += 1;
                            v.accepted(&ep, conn, qp, 0, None);
                        }
                    } else {
                        let _ = ep.cm_reject(conn, &[0, 0, 6, 0]);
                    }
                }
            }
            10 => {
                for conn in pending.drain(..) {
                    if v.accept(&mut ep, now, conn, a, b)? {
                        accepted += 1;
                    }
                }
            }
            _ => v.record(&mut ep, now, op, a, b)?,
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
    v.finish(&mut ep)
}

// ---- the verbs records: shared receive queues and CQ pressure ----

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Receive buffers: this many slots of [`SLOT`] bytes, then the area
/// WRITE with immediate lands in.
const SLOTS: u64 = 32;
const SLOT: u64 = 512;
const WRITE_AREA: u64 = SLOTS * SLOT;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Srq(usize),
    Rq(usize),
}

/// Work requests a fuzz driver posted, by `wr_id`, each to complete at most
/// once and where it was posted (`O` names the queue). Shared with the
/// simulator's `sim_rc` program.
#[derive(Debug)]
pub struct WrLedger<O> {
    posted: BTreeMap<u64, (O, u32, bool)>,
    next: u64,
}

impl<O: Copy + PartialEq + fmt::Debug> Default for WrLedger<O> {
    fn default() -> Self {
        WrLedger { posted: BTreeMap::new(), next: 1 }
    }
}

impl<O: Copy + PartialEq + fmt::Debug> WrLedger<O> {
    /// The `wr_id` the next [`post`](Self::post) records.
    pub fn next_id(&self) -> u64 {
        self.next
    }

    /// Records a WR of `len` bytes posted to `owner`; its `wr_id`.
    pub fn post(&mut self, owner: O, len: u32) -> u64 {
        let id = self.next;
        self.next += 1;
        self.posted.insert(id, (owner, len, false));
        id
    }

    /// Marks completion `w` done, checking that its WR was posted to `want`
    /// and not completed before; the WR's length.
    pub fn complete(&mut self, want: O, w: &Completion) -> Result<u32, String> {
        let Some((owner, len, done)) = self.posted.get_mut(&w.wr_id) else {
            return Err(format!("a completion of wr_id {} never posted: {w:?}", w.wr_id));
        };
        check!(!*done, "wr_id {} completed twice: {w:?}", w.wr_id);
        check!(*owner == want, "wr_id {} of {owner:?} completed where {want:?} takes from: {w:?}", w.wr_id);
        *done = true;
        Ok(*len)
    }

    /// [`complete`](Self::complete) for a receive, which also must have
    /// completed as one and, as a SEND, fit its `len` bytes.
    pub fn complete_recv(&mut self, want: O, w: &Completion) -> Result<(), String> {
        let len = self.complete(want, w)?;
        if w.status == WcStatus::Success {
            check!(
                matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
                "a receive completed as {:?}",
                w.opcode
            );
            check!(w.opcode != WcOpcode::Recv || w.byte_len <= len, "{} bytes into {len}", w.byte_len);
        }
        Ok(())
    }
}

#[derive(Debug)]
struct SrqSlot {
    id: SrqId,
    max_wr: u32,
    live: bool,
    /// Posted and not seen completed: at least what the SRQ holds.
    outstanding: usize,
    arms: u32,
    fired: u32,
}

#[derive(Debug)]
struct Accepted {
    qp: QpId,
    qpn: u32,
    srq: Option<usize>,
    recv_cq: usize,
    /// The PSN the next request from the peer carries, as the QP's ACKs and
    /// NAKs tell.
    next: Psn,
    /// Posted to its own receive queue and not seen completed.
    outstanding: usize,
}

/// The application's verbs objects and what it posted.
#[derive(Debug)]
struct Verbs {
    pd: PdId,
    mr: MrInfo,
    /// CQs with whether they are live; the first is the one every QP sends on.
    cqs: Vec<(CqId, bool)>,
    srqs: Vec<SrqSlot>,
    qps: Vec<Accepted>,
    ledger: WrLedger<Owner>,
    reached: Reached,
}

fn pick<T>(v: &[T], i: u8) -> Option<usize> {
    (!v.is_empty()).then(|| usize::from(i) % v.len())
}

impl Verbs {
    fn new(ep: &mut Endpoint, pd: PdId, cq: CqId) -> Result<Verbs, String> {
        let access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
        let mr = ep.reg_mr(pd, WRITE_AREA + 4096, access).map_err(|e| e.to_string())?;
        let cqs = vec![(cq, true)];
        let (srqs, qps, ledger) = (Vec::new(), Vec::new(), WrLedger::default());
        Ok(Verbs { pd, mr, cqs, srqs, qps, ledger, reached: Reached::default() })
    }

    /// Tracks a QP `cm_accept` made for `conn`.
    fn accepted(&mut self, ep: &Endpoint, conn: ConnId, qp: QpId, recv_cq: usize, srq: Option<usize>) {
        let next = ep.conns.get(&conn).map_or(Psn::wrapping(0), |c| c.local_psn);
        let qpn = ep.query_qp(qp).map_or(0, |i| i.qpn);
        self.qps.push(Accepted { qp, qpn, srq, recv_cq, next, outstanding: 0 });
    }

    /// Accepts `conn` onto CQ `x` and, with `y`'s top bit, SRQ `y & 0x7F`;
    /// whether it was accepted. Destroyed handles must be refused.
    fn accept(&mut self, ep: &mut Endpoint, now: Instant, conn: ConnId, x: u8, y: u8) -> Result<bool, String> {
        let c = pick(&self.cqs, x).unwrap_or(0);
        let s = if y & 0x80 != 0 { pick(&self.srqs, y & 0x7F) } else { None };
        let init = QpInit {
            pd: self.pd,
            send_cq: self.cqs[0].0,
            recv_cq: self.cqs[c].0,
            caps: QpCaps::default(),
            sq_sig_all: false,
            srq: s.map(|s| self.srqs[s].id),
        };
        let usable = self.cqs[c].1 && s.is_none_or(|s| self.srqs[s].live);
        let known = ep.conns.contains_key(&conn);
        match ep.cm_accept(now, conn, &AcceptParams::new(init, vec![0, 0, 0x20, 0])) {
            Ok(qp) => {
                check!(usable, "cm_accept onto a destroyed CQ or SRQ");
                self.accepted(ep, conn, qp, c, s);
                Ok(true)
            }
            // The CQ or SRQ destroyed, or the connection gone.
            Err(TransportError::InvalidHandle { .. }) if !usable || !known => Ok(false),
            // A connection past its request, or one the REQ's values cannot
            // connect (the CM's own rules, as with the plain accept).
            Err(TransportError::Busy { .. } | TransportError::InvalidArgument { .. }) => Ok(false),
            Err(e) => Err(format!("cm_accept: {e}")),
        }
    }

    /// Counts a verb's refusal (one the checks after it let pass).
    fn note<T>(&mut self, r: &Result<T, TransportError>) {
        self.reached.refused += usize::from(r.is_err());
    }

    /// One verbs record (kinds 5-9 and 11-14).
    fn record(&mut self, ep: &mut Endpoint, now: Instant, op: u8, x: u8, y: u8) -> Result<(), String> {
        match op {
            5 => {
                let max_wr = u32::from(x % 9);
                let limit = if y & 0x80 == 0 { 0 } else { u32::from(y & 0x7F) % 11 };
                let r = ep.create_srq(&SrqInit { pd: self.pd, max_wr, max_sge: 1, limit });
                self.note(&r);
                match r {
                    Ok(id) => {
                        check!(max_wr > 0 && limit <= max_wr, "create_srq took max_wr {max_wr}, limit {limit}");
                        let arms = u32::from(limit > 0);
                        self.srqs.push(SrqSlot { id, max_wr, live: true, outstanding: 0, arms, fired: 0 });
                    }
                    Err(TransportError::InvalidArgument { .. }) => {
                        check!(max_wr == 0 || limit > max_wr, "create_srq refused max_wr {max_wr}, limit {limit}")
                    }
                    Err(e) => return Err(format!("create_srq: {e}")),
                }
            }
            6 => {
                let Some(s) = pick(&self.srqs, x & 0x7F) else { return Ok(()) };
                let len = (u32::from(y) * 2 + 1).min(SLOT as u32);
                // The top bit of `x` puts the SGE past the region.
                let offset = if x & 0x80 != 0 { self.mr.len } else { self.ledger.next_id() % SLOTS * SLOT };
                let sge = [Sge::new(self.mr.id, offset, len)];
                let r = ep.post_srq_recv(self.srqs[s].id, &RecvWr::new(self.ledger.next_id(), &sge));
                self.note(&r);
                let slot = &self.srqs[s];
                match r {
                    Ok(()) => {
                        check!(slot.live, "post_srq_recv to a destroyed SRQ");
                        self.ledger.post(Owner::Srq(s), len);
                        self.srqs[s].outstanding += 1;
                    }
                    Err(TransportError::QueueFull { .. }) => check!(
                        slot.live && slot.outstanding >= slot.max_wr as usize,
                        "post_srq_recv: QueueFull with {} of {} outstanding",
                        slot.outstanding,
                        slot.max_wr
                    ),
                    Err(TransportError::InvalidHandle { .. }) => {
                        check!(!slot.live, "post_srq_recv: a live SRQ unknown")
                    }
                    Err(e) => return Err(format!("post_srq_recv: {e}")),
                }
            }
            7 => {
                let Some(s) = pick(&self.srqs, x) else { return Ok(()) };
                let limit = u32::from(y % 12);
                let r = ep.modify_srq(self.srqs[s].id, limit);
                self.note(&r);
                let slot = &mut self.srqs[s];
                match r {
                    Ok(()) => {
                        check!(slot.live && limit <= slot.max_wr, "modify_srq took limit {limit} of {}", slot.max_wr);
                        slot.arms += u32::from(limit > 0);
                    }
                    Err(TransportError::InvalidArgument { .. }) => {
                        check!(slot.live && limit > slot.max_wr, "modify_srq refused limit {limit} of {}", slot.max_wr)
                    }
                    Err(TransportError::InvalidHandle { .. }) => check!(!slot.live, "modify_srq: a live SRQ unknown"),
                    Err(e) => return Err(format!("modify_srq: {e}")),
                }
            }
            8 => {
                let Some(s) = pick(&self.srqs, x) else { return Ok(()) };
                // Accepted QPs live until the end: an SRQ one took stays busy.
                let users = self.qps.iter().filter(|q| q.srq == Some(s)).count();
                let live = self.srqs[s].live;
                let r = ep.destroy_srq(self.srqs[s].id);
                self.note(&r);
                match r {
                    Ok(()) => {
                        check!(live && users == 0, "destroy_srq went (live {live}, {users} QPs on it)");
                        self.srqs[s].live = false;
                    }
                    Err(TransportError::Busy { .. }) => check!(live && users > 0, "destroy_srq: Busy with no QP"),
                    Err(TransportError::InvalidHandle { .. }) => check!(!live, "destroy_srq: a live SRQ unknown"),
                    Err(e) => return Err(format!("destroy_srq: {e}")),
                }
            }
            9 => {
                let depth = 1 + u32::from(x % 8);
                let cq = ep.create_cq(depth).map_err(|e| format!("create_cq({depth}): {e}"))?;
                self.cqs.push((cq, true));
            }
            11 => self.deliver(ep, now, x, y)?,
            12 => {
                let Some(i) = pick(&self.qps, x) else { return Ok(()) };
                let len = (u32::from(y) * 2 + 1).min(SLOT as u32);
                let sge = [Sge::new(self.mr.id, self.ledger.next_id() % SLOTS * SLOT, len)];
                let r = ep.post_recv(now, self.qps[i].qp, &RecvWr::new(self.ledger.next_id(), &sge));
                self.note(&r);
                let q = &self.qps[i];
                match r {
                    Ok(()) => {
                        check!(q.srq.is_none(), "post_recv taken by a QP on an SRQ");
                        self.ledger.post(Owner::Rq(i), len);
                        self.qps[i].outstanding += 1;
                    }
                    Err(TransportError::InvalidArgument { .. }) => {
                        check!(q.srq.is_some(), "post_recv refused on a QP with its own receive queue: {r:?}")
                    }
                    Err(TransportError::QueueFull { .. }) => check!(
                        q.srq.is_none() && q.outstanding >= QpCaps::default().max_recv_wr as usize,
                        "post_recv: QueueFull with {} outstanding",
                        q.outstanding
                    ),
                    Err(e) => return Err(format!("post_recv: {e}")),
                }
            }
            13 => {
                let Some(c) = pick(&self.cqs, x) else { return Ok(()) };
                self.poll(ep, c, 1 + usize::from(y % 8))?;
            }
            _ => self.poll_async(ep)?,
        }
        Ok(())
    }

    /// An RC request from the peer to accepted QP `x`: SEND, SEND with
    /// immediate or WRITE with immediate (`y % 3`), at the PSN expected,
    /// one past it or one before (`y >> 2 & 3`), of `(y >> 4) * 16` bytes.
    /// The QP's answer tells the PSN it expects next.
    fn deliver(&mut self, ep: &mut Endpoint, now: Instant, x: u8, y: u8) -> Result<(), String> {
        use rctb_core::wire::roce::{AckKind, Bth, Opcode, Reth};
        let Some(i) = pick(&self.qps, x) else { return Ok(()) };
        let q = &self.qps[i];
        let psn = match (y >> 2) & 3 {
            2 => q.next.add(1),
            3 => q.next.add(0x00FF_FFFF),
            _ => q.next,
        };
        let len = u32::from(y >> 4) * 16;
        let (opcode, reth) = match y % 3 {
            0 => (Opcode::SEND_ONLY, None),
            1 => (Opcode::SEND_ONLY_IMM, None),
            _ => {
                let reth = Reth { va: self.mr.addr + WRITE_AREA, rkey: self.mr.rkey, dma_len: len };
                (Opcode::WRITE_ONLY_IMM, Some(reth))
            }
        };
        let mut bth = Bth::new(opcode, q.qpn, psn);
        bth.ack_req = true;
        let pkt = Packet {
            src_ip: PEER,
            dst_ip: LOCAL,
            udp_src_port: 0xC001,
            bth,
            reth,
            aeth: None,
            atomic: None,
            atomic_ack: None,
            deth: None,
            imm: (!y.is_multiple_of(3)).then_some(0x1A00_0000 | u32::from(y)),
            payload: vec![y; len as usize],
            corrupt: false,
        };
        let _ = ep.handle_packet(now, &pkt);
        let mut buf = Vec::new();
        while let Some(t) = ep.poll_transmit(now, &mut buf) {
            let out = t.packet;
            check!(out.dst_ip == PEER, "a reply to {}", out.dst_ip);
            if let Some(aeth) = out.aeth {
                self.qps[i].next = match aeth.kind() {
                    AckKind::Ack { .. } => out.bth.psn.add(1),
                    _ => out.bth.psn,
                };
            }
        }
        Ok(())
    }

    fn poll(&mut self, ep: &mut Endpoint, c: usize, max: usize) -> Result<(), String> {
        let mut out = Vec::new();
        match ep.poll_cq(self.cqs[c].0, max, &mut out) {
            Ok(n) => check!(self.cqs[c].1 && n == out.len() && n <= max, "poll_cq: {n} of {max}: {out:?}"),
            Err(TransportError::InvalidHandle { .. }) => check!(!self.cqs[c].1, "poll_cq: a live CQ unknown"),
            Err(e) => return Err(format!("poll_cq: {e}")),
        }
        for w in &out {
            self.check_recv(c, w)?;
        }
        Ok(())
    }

    /// A completion: a receive of its QP's SRQ or RQ, at most once.
    fn check_recv(&mut self, c: usize, w: &Completion) -> Result<(), String> {
        let Some(i) = self.qps.iter().position(|q| q.qp == w.qp) else {
            return Err(format!("a completion for no accepted QP: {w:?}"));
        };
        check!(self.qps[i].recv_cq == c, "{w:?} on CQ {c}, its QP receives on {}", self.qps[i].recv_cq);
        let want = match self.qps[i].srq {
            Some(s) => Owner::Srq(s),
            None => Owner::Rq(i),
        };
        self.ledger.complete_recv(want, w)?;
        match want {
            Owner::Srq(s) => {
                self.srqs[s].outstanding -= 1;
                self.reached.srq_completions += 1;
            }
            Owner::Rq(i) => self.qps[i].outstanding -= 1,
        }
        Ok(())
    }

    fn poll_async(&mut self, ep: &mut Endpoint) -> Result<(), String> {
        while let Some(ev) = ep.poll_async_event() {
            match ev {
                AsyncEvent::CqErr { cq } => {
                    let Some(c) = self.cqs.iter().position(|s| s.0 == cq) else {
                        return Err(format!("CqErr names {cq}, never a CQ of the endpoint"));
                    };
                    // The accepted QPs never send: every completion is a
                    // receive's, and one that did not fit moved its QP to ERR
                    // (or was flushed from one already there).
                    let mut users = 0;
                    let mut in_err = false;
                    for q in self.qps.iter().filter(|q| q.recv_cq == c) {
                        users += 1;
                        in_err |= ep.query_qp(q.qp).map_err(|e| format!("query_qp: {e}"))?.state == QpState::Err;
                    }
                    check!(users > 0, "CqErr on CQ {c}, on which no QP receives");
                    check!(in_err, "CqErr on CQ {c}, yet none of its {users} QPs is in ERR");
                    self.reached.cq_errs += 1;
                }
                AsyncEvent::SrqLimitReached { srq } => {
                    let Some(s) = self.srqs.iter_mut().find(|s| s.id == srq) else {
                        return Err(format!("SrqLimitReached names {srq}, never an SRQ of the endpoint"));
                    };
                    s.fired += 1;
                    check!(s.fired <= s.arms, "limit of {srq} fired {} times, armed {}", s.fired, s.arms);
                    self.reached.limits += 1;
                }
                AsyncEvent::QpFatal { qp } | AsyncEvent::QpLastWqeReached { qp } => {
                    check!(self.qps.iter().any(|q| q.qp == qp), "{ev:?} names no accepted QP")
                }
                AsyncEvent::Other { .. } => return Err(format!("{ev:?} from the engine")),
                _ => return Err(format!("{ev:?}, an event this check does not know, from the engine")),
            }
        }
        Ok(())
    }

    /// Takes what is left, then destroys everything in order: each must
    /// succeed and nothing may be left.
    fn finish(mut self, ep: &mut Endpoint) -> Result<Reached, String> {
        self.poll_async(ep)?;
        for c in 0..self.cqs.len() {
            if self.cqs[c].1 {
                self.poll(ep, c, usize::MAX)?;
            }
        }
        let e = |what: &str, x: TransportError| format!("teardown: {what}: {x}");
        for q in &self.qps {
            ep.destroy_qp(q.qp).map_err(|x| e("destroy_qp", x))?;
        }
        for s in self.srqs.iter().filter(|s| s.live) {
            ep.destroy_srq(s.id).map_err(|x| e("destroy_srq", x))?;
        }
        for &(cq, live) in &self.cqs {
            if live {
                ep.destroy_cq(cq).map_err(|x| e("destroy_cq", x))?;
            }
        }
        ep.dereg_mr(self.mr.id).map_err(|x| e("dereg_mr", x))?;
        ep.dealloc_pd(self.pd).map_err(|x| e("dealloc_pd", x))?;
        let left = ep.resources();
        check!(left == crate::Resources::default(), "left after teardown: {left:?}");
        Ok(self.reached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(name: &str) -> Reached {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/engine_cm").join(name);
        cm_receive_reached(&std::fs::read(path).expect("seed")).unwrap_or_else(|why| panic!("{name}: {why}"))
    }

    /// The verbs seeds reach SRQ receives, the limit, CQ overflow and the
    /// refusals, so the fuzzer starts there.
    #[test]
    fn verbs_seeds_reach_srqs_and_overflows() {
        let r = seed("srq-overflow");
        assert!(r.srq_completions >= 2 && r.limits >= 1 && r.cq_errs >= 1 && r.refused >= 5, "{r:?}");
        let r = seed("own-rq-overflow");
        assert!(r.cq_errs >= 1 && r.refused >= 2, "{r:?}");
    }
}
