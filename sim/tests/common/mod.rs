//! A two-node harness: nodes `a` and `b`, each with a PD, a CQ, one region and
//! an RC QP connected to the other by explicit transitions (the FPGA-style
//! out-of-band hand-off).
#![allow(dead_code)]

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_sim::{LinkConfig, NodeConfig, NodeId, Sim, SimTransport};

pub struct Side {
    /// The node, as the fabric handed it out (fault verbs name it).
    pub node: NodeId,
    pub t: SimTransport,
    pub pd: PdId,
    pub cq: CqId,
    pub qp: QpInfo,
    pub mr: MrInfo,
}

#[derive(Clone, Copy, Debug)]
pub struct PairConfig {
    pub seed: u64,
    pub mtu: Mtu,
    pub mr_len: u64,
    pub a_access: Access,
    pub b_access: Access,
    pub qp_access: Access,
    pub a_psn: Psn,
    pub b_psn: Psn,
    /// What `b` expects from `a` (normally `a_psn`).
    pub b_rq_psn: Psn,
    pub rts: RtsAttr,
    pub min_rnr_timer: RnrTimer,
    /// READs each responder takes at once (RTR max_dest_rd_atomic).
    pub max_dest_rd_atomic: u8,
    pub caps: QpCaps,
    pub link: LinkConfig,
}

impl Default for PairConfig {
    fn default() -> Self {
        let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        PairConfig {
            seed: 1,
            mtu: Mtu::Mtu1024,
            mr_len: 1 << 20,
            a_access: all,
            b_access: all,
            qp_access: all,
            a_psn: Psn::wrapping(0x00FF_FFF0),
            b_psn: Psn::wrapping(0x1234),
            b_rq_psn: Psn::wrapping(0x00FF_FFF0),
            rts: RtsAttr { sq_psn: Psn::default(), timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 16 },
            min_rnr_timer: RnrTimer::from_code(1).unwrap(),
            max_dest_rd_atomic: 16,
            caps: QpCaps { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 0 },
            link: LinkConfig::default(),
        }
    }
}

pub struct Pair {
    pub sim: Sim,
    pub a: Side,
    pub b: Side,
    pub cfg: PairConfig,
}

fn side(sim: &Sim, name: &str, ip: &str, cfg: &PairConfig, access: Access) -> Side {
    let node = sim
        .add_node({
            let mut node_config = NodeConfig::new(name, ip.parse().unwrap());
            node_config.mtu = Mtu::Mtu4096;
            node_config
        })
        .unwrap();
    let mut t = sim.transport(node);
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(4096).unwrap();
    let mr = t.reg_mr(pd, cfg.mr_len, access).unwrap();
    let qp =
        t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps: cfg.caps, sq_sig_all: false, srq: None }).unwrap();
    Side { node, t, pd, cq, qp, mr }
}

fn bring_up(s: &mut Side, cfg: &PairConfig, peer_qpn: u32, peer_ip: &str, rq_psn: Psn, sq_psn: Psn) {
    let gid = Gid::from_ipv4(peer_ip.parse().unwrap());
    s.t.modify_qp(s.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: cfg.qp_access })).unwrap();
    s.t.modify_qp(
        s.qp.id,
        &QpTransition::Rtr(RtrAttr {
            path_mtu: cfg.mtu,
            dest_qpn: peer_qpn,
            rq_psn,
            max_dest_rd_atomic: cfg.max_dest_rd_atomic,
            min_rnr_timer: cfg.min_rnr_timer,
            av: AddressVector::new(gid, 1),
        }),
    )
    .unwrap();
    s.t.modify_qp(s.qp.id, &QpTransition::Rts(RtsAttr { sq_psn, ..cfg.rts })).unwrap();
}

impl Pair {
    pub fn new(cfg: PairConfig) -> Pair {
        let sim = Sim::new(cfg.seed);
        sim.set_default_link(cfg.link);
        let mut a = side(&sim, "a", "10.0.0.1", &cfg, cfg.a_access);
        let mut b = side(&sim, "b", "10.0.0.2", &cfg, cfg.b_access);
        let (aq, bq) = (a.qp.qpn, b.qp.qpn);
        bring_up(&mut a, &cfg, bq, "10.0.0.2", cfg.b_psn, cfg.a_psn);
        bring_up(&mut b, &cfg, aq, "10.0.0.1", cfg.b_rq_psn, cfg.b_psn);
        Pair { sim, a, b, cfg }
    }

    pub fn default_pair() -> Pair {
        Pair::new(PairConfig::default())
    }
}

/// Posts a signalled WR from `s` using its own region at `offset`.
pub fn post(s: &mut Side, wr_id: u64, op: SendOp, offset: u64, len: u32) -> Result<(), TransportError> {
    let sge = [Sge::new(s.mr.id, offset, len)];
    s.t.post_send(s.qp.id, &SendWr::new(wr_id, op, &sge))
}

pub fn post_recv(s: &mut Side, wr_id: u64, offset: u64, len: u32) {
    let sge = [Sge::new(s.mr.id, offset, len)];
    s.t.post_recv(s.qp.id, &RecvWr::new(wr_id, &sge)).unwrap();
}

/// Waits (in virtual time) until `n` completions arrived on `s`'s CQ or
/// `limit` of virtual time passed; returns what arrived.
pub fn completions(s: &mut Side, n: usize, limit: Duration) -> Vec<Completion> {
    let deadline = s.t.now() + limit;
    let mut out = Vec::new();
    while out.len() < n {
        s.t.poll_cq(s.cq, n - out.len(), &mut out).unwrap();
        if out.len() >= n {
            break;
        }
        if s.t.wait(&[s.cq], deadline).unwrap() == Readiness::TimedOut {
            s.t.poll_cq(s.cq, n - out.len(), &mut out).unwrap();
            break;
        }
    }
    out
}

/// Everything the CQ holds now.
pub fn drain(s: &mut Side) -> Vec<Completion> {
    let mut out = Vec::new();
    s.t.poll_cq(s.cq, usize::MAX, &mut out).unwrap();
    out
}

pub fn fill(s: &mut Side, offset: u64, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    s.t.mr_write(s.mr.id, offset, &data).unwrap();
    data
}

pub fn read(s: &Side, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    s.t.mr_read(s.mr.id, offset, &mut buf).unwrap();
    buf
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub fn at(nanos: u64) -> Instant {
    Instant::from_nanos(nanos)
}
