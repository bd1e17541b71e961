//! Simulator throughput: bulk RDMA WRITE against a memcpy of the same bytes
//! (run in the same process, so the ratio is what to compare across
//! machines), and the small-SEND message rate.
//!
//! `cargo bench -p rctb-sim --bench fabric`

use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};
use rctb_core::Instant;
use rctb_core::transport::*;
use rctb_sim::{NodeConfig, Sim, SimTransport};

fn main() {
    divan::main();
}

struct End {
    t: SimTransport,
    cq: CqId,
    qp: QpInfo,
    mr: MrInfo,
}

fn pair(mr_len: u64, depth: u32) -> (Sim, End, End) {
    let sim = Sim::new(1);
    let mut ends = Vec::new();
    for (name, ip) in [("a", "10.0.0.1"), ("b", "10.0.0.2")] {
        let node = sim.add_node(NodeConfig::new(name, ip.parse().unwrap())).unwrap();
        let mut t = sim.transport(node);
        let pd = t.alloc_pd().unwrap();
        let cq = t.create_cq(depth * 2).unwrap();
        let mr = t.reg_mr(pd, mr_len, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        let caps = QpCaps { max_send_wr: depth, max_recv_wr: depth, ..QpCaps::default() };
        let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false, srq: None }).unwrap();
        ends.push(End { t, cq, qp, mr });
    }
    let mut b = ends.pop().unwrap();
    let mut a = ends.pop().unwrap();
    let (aq, bq) = (a.qp.qpn, b.qp.qpn);
    for (e, dest, ip) in [(&mut a, bq, "10.0.0.2"), (&mut b, aq, "10.0.0.1")] {
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        e.t.modify_qp(e.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).unwrap();
        let av = AddressVector::new(Gid::from_ipv4(ip.parse().unwrap()), 1);
        let rtr = RtrAttr {
            path_mtu: Mtu::Mtu4096,
            dest_qpn: dest,
            rq_psn: Psn::wrapping(0),
            max_dest_rd_atomic: 16,
            min_rnr_timer: RnrTimer::default(),
            av,
        };
        e.t.modify_qp(e.qp.id, &QpTransition::Rtr(rtr)).unwrap();
        let rts = RtsAttr { sq_psn: Psn::wrapping(0), timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 16 };
        e.t.modify_qp(e.qp.id, &QpTransition::Rts(rts)).unwrap();
    }
    (sim, a, b)
}

const BULK: u64 = 64 << 20;

#[divan::bench(sample_count = 10)]
fn memcpy_64mib(bencher: Bencher<'_, '_>) {
    let src = vec![0x5au8; BULK as usize];
    let mut dst = vec![0u8; BULK as usize];
    bencher.counter(BytesCount::new(BULK)).bench_local(|| {
        dst.copy_from_slice(black_box(&src));
        black_box(&dst);
    });
}

#[divan::bench(sample_count = 10)]
fn rdma_write_64mib_pmtu4096(bencher: Bencher<'_, '_>) {
    let (_sim, mut a, b) = pair(BULK, 16);
    let remote = b.mr.remote(0);
    let sge = [Sge::new(a.mr.id, 0, BULK as u32)];
    let mut out = Vec::new();
    bencher.counter(BytesCount::new(BULK)).bench_local(|| {
        a.t.post_send(a.qp.id, &SendWr::new(1, SendOp::Write { remote }, &sge)).unwrap();
        a.t.wait(&[a.cq], Instant::FAR_FUTURE).unwrap();
        out.clear();
        a.t.poll_cq(a.cq, 1, &mut out).unwrap();
        assert_eq!(out[0].status, WcStatus::Success);
    });
}

const MSGS: u64 = 10_000;

#[divan::bench(sample_count = 10)]
fn send_64b_messages(bencher: Bencher<'_, '_>) {
    let depth = 256u32;
    let (_sim, mut a, mut b) = pair(1 << 20, depth);
    let sge = [Sge::new(a.mr.id, 0, 64)];
    let rsge: Vec<[Sge; 1]> = (0..depth as u64).map(|i| [Sge::new(b.mr.id, i * 64, 64)]).collect();
    for (i, s) in rsge.iter().enumerate() {
        b.t.post_recv(b.qp.id, &RecvWr::new(i as u64, s)).unwrap();
    }
    let mut out = Vec::with_capacity(depth as usize);
    bencher.counter(ItemsCount::new(MSGS)).bench_local(|| {
        let (mut posted, mut received) = (0u64, 0u64);
        while received < MSGS {
            // Keep half the send queue busy; every 16th WR is signalled so the
            // send queue drains.
            while posted < MSGS && posted - received < depth as u64 / 2 {
                let wr = SendWr::new(posted, SendOp::Send, &sge);
                let wr = if posted % 16 == 15 || posted + 1 == MSGS { wr } else { wr.unsignaled() };
                a.t.post_send(a.qp.id, &wr).unwrap();
                posted += 1;
            }
            b.t.wait(&[b.cq], Instant::FAR_FUTURE).unwrap();
            out.clear();
            b.t.poll_cq(b.cq, depth as usize, &mut out).unwrap();
            for wc in &out {
                received += 1;
                let slot = (wc.wr_id % depth as u64) as usize;
                b.t.post_recv(b.qp.id, &RecvWr::new(wc.wr_id, &rsge[slot])).unwrap();
            }
            out.clear();
            a.t.poll_cq(a.cq, depth as usize, &mut out).unwrap();
        }
    });
}
