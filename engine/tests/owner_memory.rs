//! Two things a C library over the engine needs: regions over memory the
//! engine does not own (`reg_mr_external`, what `ibv_reg_mr` registers),
//! and requests for notification on a CQ (`req_notify_cq`, what a
//! completion channel waits on).

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_engine::{Endpoint, EndpointConfig, ExternalMemory};

/// An application's buffer, shared with the test so it can look inside
/// (the C library's implementation holds a raw pointer instead).
#[derive(Debug, Clone)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl ExternalMemory for Shared {
    fn read_into(&self, offset: u64, len: usize, out: &mut Vec<u8>) {
        let v = self.0.lock().unwrap();
        out.extend_from_slice(&v[offset as usize..offset as usize + len]);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        let mut v = self.0.lock().unwrap();
        v[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    }
}

const IPS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];
const IOVA: u64 = 0x5000_0000;

struct Side {
    ep: Endpoint,
    pd: PdId,
    cq: CqId,
    qp: QpInfo,
}

fn pair() -> [Side; 2] {
    let mut sides = [0, 1].map(|i| {
        let mut ep =
            Endpoint::new(EndpointConfig::new(format!("n{i}"), IPS[i]), Box::new(ChaCha8Rng::seed_from_u64(i as u64)));
        let pd = ep.alloc_pd().unwrap();
        let cq = ep.create_cq(16).unwrap();
        let qp = ep.create_qp(&QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            caps: QpCaps::default(),
            sq_sig_all: true,
            srq: None,
        });
        Side { ep, pd, cq, qp: qp.unwrap() }
    });
    let qpns = [sides[0].qp.qpn, sides[1].qp.qpn];
    for (i, s) in sides.iter_mut().enumerate() {
        let now = Instant::ZERO;
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).unwrap();
        let av = AddressVector::new(Gid::from_ipv4(IPS[1 - i]), 1);
        let rtr = RtrAttr {
            path_mtu: Mtu::Mtu1024,
            dest_qpn: qpns[1 - i],
            rq_psn: Psn::wrapping(0),
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::default(),
            av,
        };
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Rtr(rtr)).unwrap();
        let rts = RtsAttr { sq_psn: Psn::wrapping(0), timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 };
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Rts(rts)).unwrap();
    }
    sides
}

/// Carries packets both ways until both sides are quiet.
fn run(sides: &mut [Side; 2]) {
    let mut buf = Vec::new();
    loop {
        let mut moved = false;
        for i in 0..2 {
            while let Some(tx) = sides[i].ep.poll_transmit(Instant::ZERO, &mut buf) {
                let [a, b] = sides;
                let to = if i == 0 { b } else { a };
                to.ep.handle_packet(Instant::ZERO, &tx.packet).unwrap();
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

fn poll_one(s: &mut Side) -> Completion {
    let mut wcs = Vec::new();
    assert_eq!(s.ep.poll_cq(s.cq, 1, &mut wcs).unwrap(), 1, "a completion");
    wcs[0]
}

#[test]
fn writes_and_reads_land_in_and_come_from_the_callers_memory_at_its_iova() {
    let mut sides = pair();
    // b's buffer is the application's, addressed from IOVA.
    let target = Shared(Arc::new(Mutex::new(vec![0u8; 8192])));
    target.0.lock().unwrap()[4096..4100].copy_from_slice(b"read");
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let b = &mut sides[1];
    let mr_b = b.ep.reg_mr_external(b.pd, IOVA, 8192, access, Box::new(target.clone())).unwrap();
    assert_eq!((mr_b.addr, mr_b.len), (IOVA, 8192));
    // a's source is external too; 3000 bytes span three 1024-byte packets.
    let source = Shared(Arc::new(Mutex::new((0..4096u32).map(|i| i as u8).collect())));
    let a = &mut sides[0];
    let mr_a = a.ep.reg_mr_external(a.pd, 0x1000, 4096, Access::LOCAL_WRITE, Box::new(source.clone())).unwrap();
    let remote = RemoteAddr { addr: IOVA + 100, rkey: mr_b.rkey };
    let sge = [Sge::new(mr_a.id, 0, 3000)];
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(1, SendOp::Write { remote }, &sge)).unwrap();
    run(&mut sides);
    assert_eq!(poll_one(&mut sides[0]).status, WcStatus::Success);
    let expect: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    assert_eq!(&target.0.lock().unwrap()[100..3100], &expect[..]);
    // A READ fetches b's bytes into a's buffer.
    let remote = RemoteAddr { addr: IOVA + 4096, rkey: mr_b.rkey };
    let sge = [Sge::new(mr_a.id, 3000, 4)];
    let a = &mut sides[0];
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(2, SendOp::Read { remote }, &sge)).unwrap();
    run(&mut sides);
    assert_eq!(poll_one(&mut sides[0]).status, WcStatus::Success);
    assert_eq!(&source.0.lock().unwrap()[3000..3004], b"read");
    // Past the registered length: a remote access error, memory untouched.
    let remote = RemoteAddr { addr: IOVA + 8190, rkey: mr_b.rkey };
    let sge = [Sge::new(mr_a.id, 0, 4)];
    let a = &mut sides[0];
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(3, SendOp::Write { remote }, &sge)).unwrap();
    run(&mut sides);
    assert_eq!(poll_one(&mut sides[0]).status, WcStatus::RemAccessErr);
    assert_eq!(&target.0.lock().unwrap()[8188..8192], &[0, 0, 0, 0]);
    // The engine's own view of the region is the caller's bytes.
    let mut buf = [0u8; 4];
    sides[1].ep.mr_read(mr_b.id, 4096, &mut buf).unwrap();
    assert_eq!(&buf, b"read");
}

#[test]
fn an_external_region_that_would_wrap_is_refused_by_name() {
    let mut sides = pair();
    let b = &mut sides[1];
    let mem = Shared(Arc::new(Mutex::new(vec![0; 16])));
    let e = b.ep.reg_mr_external(b.pd, u64::MAX - 4, 16, Access::LOCAL_WRITE, Box::new(mem)).unwrap_err();
    assert!(e.to_string().contains("iova+len"), "{e}");
}

#[test]
fn a_notification_answers_the_next_completion_once() {
    let mut sides = pair();
    let mrs = sides.each_mut().map(|s| s.ep.reg_mr(s.pd, 4096, Access::LOCAL_WRITE).unwrap());
    let b = &mut sides[1];
    for wr_id in 0..4 {
        b.ep.post_recv(Instant::ZERO, b.qp.id, &RecvWr::new(wr_id, &[Sge::new(mrs[1].id, 0, 64)])).unwrap();
    }
    let send = |sides: &mut [Side; 2], solicited: bool| {
        let a = &mut sides[0];
        let sge = [Sge::new(mrs[0].id, 0, 8)];
        let mut wr = SendWr::new(9, SendOp::Send, &sge);
        wr.solicited = solicited;
        a.ep.post_send(Instant::ZERO, a.qp.id, &wr).unwrap();
        run(sides);
    };
    // Not armed: a completion arrives, no notice.
    send(&mut sides, false);
    assert_eq!(sides[1].ep.poll_cq_notification(), None);
    // Armed: the next one is noticed, once; the one already there does not count.
    let cq_b = sides[1].cq;
    sides[1].ep.req_notify_cq(cq_b, false).unwrap();
    assert_eq!(sides[1].ep.poll_cq_notification(), None);
    send(&mut sides, false);
    assert_eq!(sides[1].ep.poll_cq_notification(), Some(cq_b));
    assert_eq!(sides[1].ep.poll_cq_notification(), None);
    // Solicited only: an ordinary SEND does not answer it, one with SE does.
    sides[1].ep.req_notify_cq(cq_b, true).unwrap();
    send(&mut sides, false);
    assert_eq!(sides[1].ep.poll_cq_notification(), None);
    send(&mut sides, true);
    assert_eq!(sides[1].ep.poll_cq_notification(), Some(cq_b));
    // An unknown CQ is an invalid handle; a destroyed armed CQ is forgotten.
    assert!(matches!(sides[1].ep.req_notify_cq(CqId(999), false), Err(TransportError::InvalidHandle { .. })));
    let extra = sides[1].ep.create_cq(4).unwrap();
    sides[1].ep.req_notify_cq(extra, false).unwrap();
    sides[1].ep.destroy_cq(extra).unwrap();
    assert_eq!(sides[1].ep.poll_cq_notification(), None);
}

#[test]
fn an_endpoint_moves_between_threads() {
    fn is_send<T: Send>() {}
    is_send::<Endpoint>();
}
