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
        QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false }
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
