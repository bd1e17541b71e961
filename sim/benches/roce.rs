//! Receiver overhead of the RoCEv2 receive server (`rctb_core::roce`) per
//! frame, on the simulator: the same SEND_WITH_IMM stream (64-byte frames,
//! 32 in flight, 256 receive slots) received once by a bare verbs loop
//! (poll, re-post) and once by `RoceServer` (poll, immediate decoding,
//! checks, frame handle, zero-copy read of the bytes, release and re-post).
//! Both include the sender and the fabric, so the difference per frame is
//! the server's cost; with callgrind it is exact:
//!
//! ```sh
//! cargo bench -p rctb-sim --bench roce
//! valgrind --tool=callgrind --toggle-collect='*frames_bare_verbs*' target/release/deps/roce-* --bench frames_bare_verbs
//! valgrind --tool=callgrind --toggle-collect='*frames_roce_server*' target/release/deps/roce-* --bench frames_roce_server
//! ```

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use rctb_core::Instant;
use rctb_core::roce::{RoceServer, ServerConfig, TransportConfig};
use rctb_core::transport::*;
use rctb_sim::{NodeConfig, Sim, SimTransport};

fn main() {
    divan::main();
}

const FRAMES: u64 = 10_000;
const SIZE: u32 = 64;
const WINDOW: u64 = 32;
const DEPTH: u32 = 256;

/// The FPGA side: a bare RC QP that sends SEND_WITH_IMM.
struct Sender {
    t: SimTransport,
    cq: CqId,
    qp: QpInfo,
    mr: MrInfo,
}

fn sender(sim: &Sim) -> Sender {
    let node = sim.add_node(NodeConfig::new("fpga", "10.0.0.2".parse().unwrap())).unwrap();
    let mut t = sim.transport(node);
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(2 * WINDOW as u32).unwrap();
    let mr = t.reg_mr(pd, 1 << 16, Access::LOCAL_WRITE).unwrap();
    let caps = QpCaps { max_send_wr: WINDOW as u32, max_recv_wr: 1, ..QpCaps::default() };
    let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: None }).unwrap();
    t.modify_qp(qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: Access::LOCAL_WRITE })).unwrap();
    Sender { t, cq, qp, mr }
}

/// RTR and RTS of `qp` towards `peer`'s QP `dest_qpn` (PMTU 4096).
fn connect(t: &mut SimTransport, qp: QpId, peer: &str, dest_qpn: Qpn, sq_psn: Psn, rq_psn: Psn) {
    let av = AddressVector::new(Gid::from_ipv4(peer.parse().unwrap()), 1);
    let rtr = RtrAttr {
        path_mtu: Mtu::Mtu4096,
        dest_qpn,
        rq_psn,
        max_dest_rd_atomic: 16,
        min_rnr_timer: RnrTimer::default(),
        av,
    };
    t.modify_qp(qp, &QpTransition::Rtr(rtr)).unwrap();
    let rts = RtsAttr { sq_psn, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 16 };
    t.modify_qp(qp, &QpTransition::Rts(rts)).unwrap();
}

impl Sender {
    fn connect(&mut self, dest_qpn: Qpn, sq_psn: Psn, rq_psn: Psn) {
        connect(&mut self.t, self.qp.id, "10.0.0.1", dest_qpn, sq_psn, rq_psn);
    }

    /// Posts frame `i` (channel i mod 4) when the window allows.
    fn post(&mut self, i: u64) {
        let sge = [Sge::new(self.mr.id, 0, SIZE)];
        let imm = ((i as u32 & 0xFF_FFFF) << 8) | (i as u32 & 3);
        self.t.post_send(self.qp.id, &SendWr::new(i, SendOp::SendWithImm { imm }, &sge)).unwrap();
    }

    fn reap(&mut self, out: &mut Vec<Completion>) -> u64 {
        out.clear();
        self.t.poll_cq(self.cq, WINDOW as usize, out).unwrap() as u64
    }

    /// Streams `FRAMES` frames, `WINDOW` in flight, to a receiver: `receive`
    /// waits for frames and takes them, returning how many it took.
    fn stream(&mut self, sent: &mut Vec<Completion>, mut receive: impl FnMut() -> u64) {
        let (mut posted, mut acked, mut received) = (0u64, 0u64, 0u64);
        while received < FRAMES {
            while posted < FRAMES && posted - acked < WINDOW {
                self.post(posted);
                posted += 1;
            }
            received += receive();
            acked += self.reap(sent);
        }
        while acked < posted {
            self.t.wait(&[self.cq], Instant::FAR_FUTURE).unwrap();
            acked += self.reap(sent);
        }
    }
}

/// Baseline: the receiver is a bare verbs loop.
#[divan::bench(sample_count = 10)]
fn frames_bare_verbs(bencher: Bencher<'_, '_>) {
    let sim = Sim::new(1);
    let node = sim.add_node(NodeConfig::new("host", "10.0.0.1".parse().unwrap())).unwrap();
    let mut s = sender(&sim);
    let mut t = sim.transport(node);
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(DEPTH).unwrap();
    let mr = t.reg_mr(pd, DEPTH as u64 * 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let caps = QpCaps { max_send_wr: 1, max_recv_wr: DEPTH, ..QpCaps::default() };
    let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false, srq: None }).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    t.modify_qp(qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).unwrap();
    let sges: Vec<[Sge; 1]> = (0..DEPTH as u64).map(|i| [Sge::new(mr.id, i * 4096, 4096)]).collect();
    for (i, sge) in sges.iter().enumerate() {
        t.post_recv(qp.id, &RecvWr::new(i as u64, sge)).unwrap();
    }
    connect(&mut t, qp.id, "10.0.0.2", s.qp.qpn, Psn::wrapping(0), Psn::wrapping(0));
    s.connect(qp.qpn, Psn::wrapping(0), Psn::wrapping(0));
    let (mut out, mut sent) = (Vec::new(), Vec::new());
    let mut bytes = 0u64;
    bencher.counter(ItemsCount::new(FRAMES)).bench_local(|| {
        s.stream(&mut sent, || {
            t.wait(&[cq], Instant::FAR_FUTURE).unwrap();
            out.clear();
            t.poll_cq(cq, 16, &mut out).unwrap();
            for wc in &out {
                // Read the bytes in place, as the server's consumer does.
                let (off, len) = (wc.wr_id * 4096, wc.byte_len as u64);
                t.mr_view(mr.id, off, len, &mut |b: &[u8]| bytes += b.len() as u64 + b[0] as u64 % 2).unwrap();
                t.post_recv(qp.id, &RecvWr::new(wc.wr_id, &sges[wc.wr_id as usize])).unwrap();
            }
            out.len() as u64
        });
    });
    black_box(bytes);
}

/// The same stream into `RoceServer`.
#[divan::bench(sample_count = 10)]
fn frames_roce_server(bencher: Bencher<'_, '_>) {
    let sim = Sim::new(1);
    let node = sim.add_node(NodeConfig::new("host", "10.0.0.1".parse().unwrap())).unwrap();
    let mut s = sender(&sim);
    let cfg = ServerConfig::builder("10.0.0.2".parse().unwrap(), "sim-host")
        .rx_queue_depth(DEPTH)
        .max_payload(4096)
        .build()
        .unwrap();
    let mut server = RoceServer::create(sim.transport(node), cfg, &mut || 0).unwrap();
    let hp = server.host_params();
    s.connect(hp.qpn, hp.sq_psn, hp.rq_psn);
    let tc = TransportConfig::default();
    server.complete_connection(s.qp.qpn, &tc, s.mr.lkey).unwrap();
    let (mut frames, mut sent) = (Vec::new(), Vec::new());
    let mut bytes = 0u64;
    bencher.counter(ItemsCount::new(FRAMES)).bench_local(|| {
        s.stream(&mut sent, || {
            server.wait_frames(&mut frames, Instant::FAR_FUTURE).unwrap();
            let n = frames.len() as u64;
            for f in frames.drain(..) {
                server.with_frame_data(&f, &mut |b: &[u8]| bytes += b.len() as u64 + b[0] as u64 % 2).unwrap();
                server.release(f).unwrap();
            }
            n
        });
    });
    black_box(bytes);
    assert_eq!(server.counters().bad_length + server.counters().errors, 0);
}
