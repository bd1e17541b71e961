//! Happy paths of every send opcode across MTU boundaries.

mod common;

use common::*;
use rctb_core::transport::*;

fn sizes(mtu: u32) -> Vec<u32> {
    vec![0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 5, 1 << 20]
}

#[test]
fn send_and_send_with_imm_deliver_data_and_immediate() {
    for with_imm in [false, true] {
        let mut p = Pair::default_pair();
        let mtu = p.cfg.mtu.bytes();
        for (i, len) in sizes(mtu).into_iter().enumerate() {
            let data = fill(&mut p.a, 0, len as usize, i as u8);
            post_recv(&mut p.b, 100 + i as u64, 0, 1 << 20);
            let op = if with_imm { SendOp::SendWithImm { imm: 0xdead_0000 + i as u32 } } else { SendOp::Send };
            post(&mut p.a, i as u64, op, 0, len).unwrap();
            let rc = completions(&mut p.b, 1, secs(1));
            assert_eq!(rc.len(), 1, "len {len}: no receive completion");
            assert_eq!(rc[0].status, WcStatus::Success, "len {len}");
            assert_eq!(rc[0].opcode, WcOpcode::Recv);
            assert_eq!(rc[0].byte_len, len, "len {len}");
            assert_eq!(rc[0].wr_id, 100 + i as u64);
            assert_eq!(rc[0].imm, with_imm.then_some(0xdead_0000 + i as u32));
            assert_eq!(read(&p.b, 0, len as usize), data, "len {len}: data differs");
            let sc = completions(&mut p.a, 1, secs(1));
            assert_eq!(sc.len(), 1);
            assert_eq!((sc[0].status, sc[0].opcode, sc[0].wr_id), (WcStatus::Success, WcOpcode::Send, i as u64));
        }
    }
}

#[test]
fn rdma_write_places_data_and_write_with_imm_completes_a_receive() {
    let mut p = Pair::default_pair();
    let mtu = p.cfg.mtu.bytes();
    for (i, len) in sizes(mtu).into_iter().enumerate() {
        for with_imm in [false, true] {
            let data = fill(&mut p.a, 0, len as usize, i as u8 ^ with_imm as u8);
            let remote = p.b.mr.remote(0);
            let op = if with_imm { SendOp::WriteWithImm { remote, imm: i as u32 } } else { SendOp::Write { remote } };
            if with_imm {
                post_recv(&mut p.b, 7, 0, 0);
            }
            post(&mut p.a, i as u64, op, 0, len).unwrap();
            let sc = completions(&mut p.a, 1, secs(1));
            assert_eq!(sc[0].status, WcStatus::Success, "len {len}");
            assert_eq!(sc[0].opcode, WcOpcode::RdmaWrite);
            assert_eq!(read(&p.b, 0, len as usize), data, "len {len}");
            let rc = drain(&mut p.b);
            if with_imm {
                assert_eq!(rc.len(), 1);
                assert_eq!(rc[0].opcode, WcOpcode::RecvRdmaWithImm);
                assert_eq!((rc[0].byte_len, rc[0].imm), (len, Some(i as u32)));
            } else {
                assert!(rc.is_empty(), "a plain WRITE consumes no receive: {rc:?}");
            }
        }
    }
}

#[test]
fn rdma_read_fetches_remote_data() {
    let mut p = Pair::default_pair();
    let mtu = p.cfg.mtu.bytes();
    for (i, len) in sizes(mtu).into_iter().enumerate() {
        let data = fill(&mut p.b, 0, len as usize, 0x40 + i as u8);
        post(&mut p.a, i as u64, SendOp::Read { remote: p.b.mr.remote(0) }, 0, len).unwrap();
        let sc = completions(&mut p.a, 1, secs(1));
        assert_eq!(sc.len(), 1, "len {len}");
        assert_eq!((sc[0].status, sc[0].opcode, sc[0].byte_len), (WcStatus::Success, WcOpcode::RdmaRead, len));
        assert_eq!(read(&p.a, 0, len as usize), data, "len {len}");
    }
}

#[test]
fn segmentation_follows_the_path_mtu_and_psns_wrap() {
    // a's first PSN is 0xFFFFF0, so a 1 MiB message at MTU 1024 wraps the
    // 24-bit space; the transfer must still complete with data intact.
    let mut p = Pair::default_pair();
    let len = 1 << 20;
    let data = fill(&mut p.a, 0, len, 3);
    post_recv(&mut p.b, 1, 0, len as u32);
    post(&mut p.a, 1, SendOp::Send, 0, len as u32).unwrap();
    assert_eq!(completions(&mut p.b, 1, secs(1))[0].status, WcStatus::Success);
    assert_eq!(read(&p.b, 0, len), data);
    let st = p.sim.stats();
    // 1024 data packets at MTU 1024, ACKs requested every 64 packets and at
    // the end, and coalesced by the responder.
    assert_eq!(st.frames_sent - st.acks, 1024);
    assert!(st.acks >= 1 && st.acks <= 1024 / 64 + 1, "acks: {}", st.acks);
}

#[test]
fn unsignaled_sends_complete_silently_and_signalled_ones_report() {
    let mut p = Pair::default_pair();
    for i in 0..4u64 {
        post_recv(&mut p.b, i, i * 64, 64);
    }
    let sge = [Sge::new(p.a.mr.id, 0, 64)];
    for i in 0..4u64 {
        let wr = SendWr::new(i, SendOp::Send, &sge);
        let wr = if i < 3 { wr.unsignaled() } else { wr };
        p.a.t.post_send(p.a.qp.id, &wr).unwrap();
    }
    let sc = completions(&mut p.a, 4, secs(1));
    assert_eq!(sc.len(), 1);
    assert_eq!(sc[0].wr_id, 3);
    assert_eq!(completions(&mut p.b, 4, secs(1)).len(), 4);
}

#[test]
fn cm_connect_accept_carries_private_data_both_ways() {
    let sim = rctb_sim::Sim::new(9);
    let na = sim.add_node(rctb_sim::NodeConfig::new("client", "10.1.0.1".parse().unwrap())).unwrap();
    let nb = sim.add_node(rctb_sim::NodeConfig::new("server", "10.1.0.2".parse().unwrap())).unwrap();
    let (mut ta, mut tb) = (sim.transport(na), sim.transport(nb));
    let qp_init = |t: &mut rctb_sim::SimTransport| {
        let pd = t.alloc_pd().unwrap();
        let cq = t.create_cq(16).unwrap();
        QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false, srq: None }
    };
    let listener = tb.cm_listen(4420).unwrap();
    let init_a = qp_init(&mut ta);
    let init_b = qp_init(&mut tb);
    let remote = "10.1.0.2:4420".parse().unwrap();
    let (conn_a, qp_a) = ta.cm_connect(&ConnectParams::new(remote, init_a, b"hello".to_vec())).unwrap();
    let far = rctb_core::Instant::FAR_FUTURE;
    tb.wait(&[], far).unwrap();
    let Some(CmEvent::ConnectRequest { listener: l, conn, private_data, .. }) = tb.cm_poll() else {
        panic!("expected a connect request")
    };
    assert_eq!((l, private_data.as_slice()), (listener, &b"hello"[..]));
    let qp_b = tb.cm_accept(conn, &AcceptParams::new(init_b, b"welcome".to_vec())).unwrap();
    ta.wait(&[], far).unwrap();
    assert_eq!(ta.cm_poll(), Some(CmEvent::Established { conn: conn_a, qp: qp_a, private_data: b"welcome".to_vec() }));
    tb.wait(&[], far).unwrap();
    assert!(matches!(tb.cm_poll(), Some(CmEvent::Established { qp, .. }) if qp == qp_b));
    assert_eq!(ta.query_qp(qp_a).unwrap().state, QpState::Rts);
    assert_eq!(tb.query_qp(qp_b).unwrap().state, QpState::Rts);
    // Disconnect moves both QPs to ERR and tells both sides.
    ta.cm_disconnect(conn_a).unwrap();
    assert_eq!(ta.cm_poll(), Some(CmEvent::Disconnected { conn: conn_a }));
    tb.wait(&[], far).unwrap();
    assert_eq!(tb.cm_poll(), Some(CmEvent::Disconnected { conn }));
    assert_eq!(tb.query_qp(qp_b).unwrap().state, QpState::Err);
}

/// Two QPs of one node connected to each other (loopback, as verbs and rxe
/// allow; the session server's loopback tokens do it): SEND and RDMA WRITE
/// arrive, on a fabric whose lossy default links do not apply to loopback.
/// Found by the rcsession fuzz target: the fabric had no node-to-itself path
/// and panicked.
#[test]
fn loopback_between_two_qps_of_one_node() {
    use rctb_core::time::Duration;
    use rctb_sim::{LinkConfig, LinkFaults, NodeConfig, Sim};
    let sim = Sim::new(5);
    sim.set_default_link({
        let mut link_config = LinkConfig::default();
        link_config.latency = Duration::from_micros(5);
        link_config.faults = {
            let mut link_faults = LinkFaults::default();
            link_faults.drop = 1.0;
            link_faults
        };
        link_config
    });
    let node = sim.add_node(NodeConfig::new("solo", "10.0.0.9".parse().unwrap())).unwrap();
    let mut t = sim.transport(node);
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(64).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = t.reg_mr(pd, 8192, all).unwrap();
    let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let init = QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: None };
    let (q1, q2) = (t.create_qp(&init).unwrap(), t.create_qp(&init).unwrap());
    let gid = Gid::from_ipv4("10.0.0.9".parse().unwrap());
    for (q, peer) in [(q1.id, q2.qpn), (q2.id, q1.qpn)] {
        t.modify_qp(q, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: all })).unwrap();
        let rtr = RtrAttr {
            path_mtu: Mtu::Mtu1024,
            dest_qpn: peer,
            rq_psn: Psn::wrapping(100),
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::from_code(1).unwrap(),
            av: AddressVector::new(gid, 1),
        };
        t.modify_qp(q, &QpTransition::Rtr(rtr)).unwrap();
        let rts = RtsAttr { sq_psn: Psn::wrapping(100), timeout: 14, retry_cnt: 0, rnr_retry: 0, max_rd_atomic: 1 };
        t.modify_qp(q, &QpTransition::Rts(rts)).unwrap();
    }
    t.mr_write(mr.id, 0, &[7u8; 3000]).unwrap();
    t.post_recv(q2.id, &RecvWr::new(1, &[Sge::new(mr.id, 4096, 3000)])).unwrap();
    t.post_send(q1.id, &SendWr::new(2, SendOp::Send, &[Sge::new(mr.id, 0, 3000)])).unwrap();
    sim.run_until_idle();
    let mut wcs = Vec::new();
    t.poll_cq(cq, 8, &mut wcs).unwrap();
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|wc| wc.status == WcStatus::Success), "{wcs:?}");
    let mut back = vec![0u8; 3000];
    t.mr_read(mr.id, 4096, &mut back).unwrap();
    assert_eq!(back, vec![7u8; 3000]);
}

#[test]
fn a_send_gathers_from_several_sges_and_scatters_into_several() {
    // Several SGEs on both ends, a message over three packets: the gather
    // and the scatter walk their lists across packet boundaries (one SGE
    // takes a shorter path, which the tests above cover).
    let mut p = Pair::default_pair();
    let mtu = p.cfg.mtu.bytes() as usize;
    let len = 2 * mtu + 300;
    let first = fill(&mut p.a, 0, 100, 1);
    let second = fill(&mut p.a, 8192, len - 100, 2);
    let rsges = [Sge::new(p.b.mr.id, 0, 7), Sge::new(p.b.mr.id, 4096, mtu as u32), Sge::new(p.b.mr.id, 16384, 1 << 16)];
    p.b.t.post_recv(p.b.qp.id, &RecvWr::new(7, &rsges)).unwrap();
    let sges = [Sge::new(p.a.mr.id, 0, 100), Sge::new(p.a.mr.id, 8192, (len - 100) as u32)];
    p.a.t.post_send(p.a.qp.id, &SendWr::new(1, SendOp::Send, &sges)).unwrap();
    let rc = completions(&mut p.b, 1, secs(1));
    assert_eq!((rc.len(), rc[0].status, rc[0].byte_len), (1, WcStatus::Success, len as u32), "{rc:?}");
    let sent = [first, second].concat();
    let mut got = read(&p.b, 0, 7);
    got.extend(read(&p.b, 4096, mtu));
    got.extend(read(&p.b, 16384, len - 7 - mtu));
    assert_eq!(got, sent, "the message as the three receive SGEs hold it");
    let sc = completions(&mut p.a, 1, secs(1));
    assert_eq!((sc.len(), sc[0].status), (1, WcStatus::Success));
}
