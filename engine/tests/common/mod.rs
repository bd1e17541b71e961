//! Two endpoints connected by hand (RESET -> INIT -> RTR -> RTS, PSN 0 both
//! ways), driven in memory by the tests: the test is the wire and the clock.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_engine::{Endpoint, EndpointConfig};

pub struct Side {
    pub ep: Endpoint,
    pub cq: CqId,
    pub qp: QpInfo,
    pub mr: MrInfo,
}

/// An endpoint with a 64-entry CQ, one region of `mr_len` bytes with
/// `access`, and one RC QP (16 WRs each way, every send signalled).
pub fn side(name: &str, ip: Ipv4Addr, seed: u64, mr_len: u64, access: Access) -> Side {
    let mut ep = Endpoint::new(EndpointConfig::new(name, ip), Box::new(ChaCha8Rng::seed_from_u64(seed)));
    let pd = ep.alloc_pd().unwrap();
    let cq = ep.create_cq(64).unwrap();
    let mr = ep.reg_mr(pd, mr_len, access).unwrap();
    let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, ..QpCaps::default() };
    let qp = ep.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: None }).unwrap();
    Side { ep, cq, qp, mr }
}

/// `a` (10.0.0.1, seed 1) and `b` (10.0.0.2, seed 2), their QPs granting
/// `access` and taking `rd_atomic` READs and atomics each way; MTU 1024,
/// ACK timeout code 14, retry counts 7.
pub fn connected(mr_len: u64, access: Access, rd_atomic: u8) -> (Side, Side) {
    let (ia, ib) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (mut a, mut b) = (side("a", ia, 1, mr_len, access), side("b", ib, 2, mr_len, access));
    connect(&mut a, &mut b, access, rd_atomic);
    (a, b)
}

/// Connects `a`'s QP (at 10.0.0.1) and `b`'s (at 10.0.0.2), both in RESET,
/// as [`connected`] does.
pub fn connect(a: &mut Side, b: &mut Side, access: Access, rd_atomic: u8) {
    connect_with(a, b, access, rd_atomic, 7, 7);
}

/// [`connect`] with the RTS retry counts given (`retry_cnt`, `rnr_retry`).
pub fn connect_with(a: &mut Side, b: &mut Side, access: Access, rd_atomic: u8, retry_cnt: u8, rnr_retry: u8) {
    let (ia, ib) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (aq, bq) = (a.qp.qpn, b.qp.qpn);
    let now = Instant::ZERO;
    for (s, dest, ip) in [(a, bq, ib), (b, aq, ia)] {
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).unwrap();
        let rtr = RtrAttr {
            path_mtu: Mtu::Mtu1024,
            dest_qpn: dest,
            rq_psn: Psn::wrapping(0),
            max_dest_rd_atomic: rd_atomic,
            min_rnr_timer: RnrTimer::default(),
            av: AddressVector::new(Gid::from_ipv4(ip), 1),
        };
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Rtr(rtr)).unwrap();
        let rts = RtsAttr { sq_psn: Psn::wrapping(0), timeout: 14, retry_cnt, rnr_retry, max_rd_atomic: rd_atomic };
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Rts(rts)).unwrap();
    }
}

/// Packets `s`'s endpoint could not take and dropped
/// ([`EndpointCounters::packets_dropped`](rctb_engine::EndpointCounters)).
pub fn dropped(s: &Side) -> u64 {
    s.ep.counters().packets_dropped
}
