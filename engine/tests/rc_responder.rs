//! The responder's rules (engine/src/rc/responder.rs), reached with a's
//! real request packets, some edited where no requester of ours would
//! send them: an opcode of another transport, a message restarted in its
//! middle, a PSN past a gap. Driven by hand at one instant.

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_engine::Packet;

const NOW: Instant = Instant::ZERO;

mod common;

use common::Side;

const ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);

fn connected() -> (Side, Side) {
    common::connected(1 << 16, ACCESS, 1)
}

fn transmitted(s: &mut Side) -> Vec<Packet> {
    let (mut out, mut buf) = (Vec::new(), Vec::new());
    while let Some(tx) = s.ep.poll_transmit(NOW, &mut buf) {
        out.push(tx.packet);
    }
    out
}

fn completions(s: &mut Side) -> Vec<(u64, WcStatus)> {
    let mut out = Vec::new();
    s.ep.poll_cq(s.cq, 64, &mut out).unwrap();
    out.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn post_recv(s: &mut Side, wr_id: u64, len: u32) {
    s.ep.post_recv(NOW, s.qp.id, &RecvWr::new(wr_id, &[Sge::new(s.mr.id, 0, len)])).unwrap();
}

/// a's packets for one SEND (or WRITE to b at 0) of `len` bytes.
fn request(a: &mut Side, b: &Side, wr_id: u64, write: bool, len: u32) -> Vec<Packet> {
    let op = if write { SendOp::Write { remote: b.mr.remote(0) } } else { SendOp::Send };
    a.ep.post_send(NOW, a.qp.id, &SendWr::new(wr_id, op, &[Sge::new(a.mr.id, 0, len)])).unwrap();
    transmitted(a)
}

/// What b answered: (opcode, PSN, AETH kind).
fn answers(b: &mut Side) -> Vec<(Opcode, u32, Option<AckKind>)> {
    transmitted(b).iter().map(|p| (p.bth.opcode, p.bth.psn.get(), p.aeth.map(|x| x.kind()))).collect()
}

#[test]
fn a_seventeenth_receive_does_not_fit_a_queue_of_sixteen() {
    let (_a, mut b) = connected();
    for wr_id in 0..16 {
        post_recv(&mut b, wr_id, 8);
    }
    let r = b.ep.post_recv(NOW, b.qp.id, &RecvWr::new(16, &[Sge::new(b.mr.id, 0, 8)]));
    assert!(matches!(r, Err(TransportError::QueueFull { limit: 16, .. })), "{r:?}");
}

#[test]
fn a_request_with_another_transports_opcode_is_dropped_unanswered() {
    // A UD SEND ONLY at the expected PSN: not RC, so dropped without a NAK;
    // the PSN stays expected and the receive stays posted for the real one.
    let (mut a, mut b) = connected();
    post_recv(&mut b, 7, 64);
    let send = request(&mut a, &b, 1, false, 16).remove(0);
    let mut ud = send.clone();
    ud.bth.opcode = Opcode::UD_SEND_ONLY;
    b.ep.handle_packet(NOW, &ud).unwrap();
    assert!(answers(&mut b).is_empty());
    assert!(completions(&mut b).is_empty());
    assert_eq!(common::dropped(&b), 1);
    b.ep.handle_packet(NOW, &send).unwrap();
    assert_eq!(common::dropped(&b), 1, "the RC SEND is taken");
    assert_eq!(completions(&mut b), [(7, WcStatus::Success)]);
    assert_eq!(answers(&mut b), [(Opcode::ACKNOWLEDGE, 0, Some(AckKind::Ack { credits: 31 }))]);
}

#[test]
fn a_psn_gap_is_naked_once_with_the_expected_psn() {
    // Three one-packet SENDs; the first is lost. The second reports the
    // gap (a sequence NAK for PSN 0); the third, in the same gap, does not.
    let (mut a, mut b) = connected();
    for wr_id in 0..3 {
        post_recv(&mut b, wr_id, 64);
    }
    let sends: Vec<Packet> = (0..3).flat_map(|i| request(&mut a, &b, i, false, 16)).collect();
    b.ep.handle_packet(NOW, &sends[1]).unwrap();
    assert_eq!(common::dropped(&b), 1, "the request past the gap is NAKed and dropped");
    b.ep.handle_packet(NOW, &sends[2]).unwrap();
    assert_eq!(common::dropped(&b), 2, "and so is the next");
    assert_eq!(answers(&mut b), [(Opcode::ACKNOWLEDGE, 0, Some(AckKind::Nak(NakCode::PsnSequenceError)))]);
    assert!(completions(&mut b).is_empty());
}

#[test]
fn a_message_that_starts_again_in_its_middle_is_an_invalid_request() {
    // A SEND FIRST (or WRITE FIRST) followed by another FIRST at the next
    // PSN: the first message never ended. NAK invalid request, QP to ERR.
    for write in [false, true] {
        let (mut a, mut b) = connected();
        post_recv(&mut b, 7, 4096);
        let pkts = request(&mut a, &b, 1, write, 3000);
        assert_eq!(pkts.len(), 3);
        b.ep.handle_packet(NOW, &pkts[0]).unwrap();
        let mut again = pkts[0].clone();
        again.bth.psn = pkts[1].bth.psn;
        b.ep.handle_packet(NOW, &again).unwrap();
        assert_eq!(
            answers(&mut b),
            [(Opcode::ACKNOWLEDGE, 1, Some(AckKind::Nak(NakCode::InvalidRequest)))],
            "write {write}"
        );
        assert_eq!(b.ep.query_qp(b.qp.id).unwrap().state, QpState::Err, "write {write}");
    }
}

#[test]
fn a_receive_too_small_fails_as_rxe_fails_it() {
    // 64 bytes into a 16-byte receive: the receive completes with
    // LOC_QP_OP_ERR, the NAK is a remote operational error, b goes to ERR.
    let (mut a, mut b) = connected();
    post_recv(&mut b, 7, 16);
    for p in request(&mut a, &b, 1, false, 64) {
        b.ep.handle_packet(NOW, &p).unwrap();
    }
    assert_eq!(completions(&mut b), [(7, WcStatus::LocQpOpErr)]);
    let nak = transmitted(&mut b);
    assert_eq!(nak.len(), 1);
    assert_eq!(nak[0].aeth.map(|x| x.kind()), Some(AckKind::Nak(NakCode::RemoteOperationalError)));
    assert_eq!(b.ep.query_qp(b.qp.id).unwrap().state, QpState::Err);
    a.ep.handle_packet(NOW, &nak[0]).unwrap();
    assert_eq!(completions(&mut a), [(1, WcStatus::RemOpErr)]);
}

#[test]
fn acks_not_yet_sent_are_coalesced_into_the_newest() {
    // Two one-packet SENDs arrive before b transmits: one ACK, for the
    // second PSN, covers both.
    let (mut a, mut b) = connected();
    post_recv(&mut b, 7, 64);
    post_recv(&mut b, 8, 64);
    for i in 0..2 {
        for p in request(&mut a, &b, i, false, 16) {
            b.ep.handle_packet(NOW, &p).unwrap();
        }
    }
    let acks = answers(&mut b);
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!((acks[0].0, acks[0].1), (Opcode::ACKNOWLEDGE, 1));
}

#[test]
fn the_srq_limit_fires_once_fewer_than_it_remain() {
    // Four receives in b's SRQ, limit 2: taking the first two leaves 3,
    // then 2 (not fewer than 2): no event. The third leaves 1: the event,
    // once; the limit is then disarmed.
    let ib = std::net::Ipv4Addr::new(10, 0, 0, 2);
    let mut a = common::side("a", std::net::Ipv4Addr::new(10, 0, 0, 1), 1, 1 << 16, ACCESS);
    let mut ep = rctb_engine::Endpoint::new(
        rctb_engine::EndpointConfig::new("b", ib),
        Box::new(<rand_chacha::ChaCha8Rng as rand_core::SeedableRng>::seed_from_u64(2)),
    );
    let pd = ep.alloc_pd().unwrap();
    let cq = ep.create_cq(64).unwrap();
    let mr = ep.reg_mr(pd, 1 << 16, ACCESS).unwrap();
    let srq = ep.create_srq(&SrqInit { pd, max_wr: 16, max_sge: 1, limit: 0 }).unwrap();
    let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, ..QpCaps::default() };
    let qp = ep.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: Some(srq) }).unwrap();
    let mut b = Side { ep, cq, qp, mr };
    common::connect(&mut a, &mut b, ACCESS, 1);
    for wr_id in 0..4 {
        b.ep.post_srq_recv(srq, &RecvWr::new(wr_id, &[Sge::new(b.mr.id, 0, 64)])).unwrap();
    }
    b.ep.modify_srq(srq, 2).unwrap();
    for i in 0..2 {
        for p in request(&mut a, &b, i, false, 16) {
            b.ep.handle_packet(NOW, &p).unwrap();
        }
        assert_eq!(b.ep.poll_async_event(), None, "after receive {i}");
    }
    for p in request(&mut a, &b, 2, false, 16) {
        b.ep.handle_packet(NOW, &p).unwrap();
    }
    assert_eq!(b.ep.poll_async_event(), Some(AsyncEvent::SrqLimitReached { srq }));
    for p in request(&mut a, &b, 3, false, 16) {
        b.ep.handle_packet(NOW, &p).unwrap();
    }
    assert_eq!(b.ep.poll_async_event(), None);
    assert_eq!(
        completions(&mut b),
        [(0, WcStatus::Success), (1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
}

#[test]
fn a_read_response_and_a_later_ack_both_go_out_in_order() {
    // A READ and then a SEND reach b before it transmits: the READ's
    // response is queued and the SEND's ACK waits behind it; both leave.
    let (mut a, mut b) = connected();
    post_recv(&mut b, 7, 64);
    let read = SendOp::Read { remote: b.mr.remote(0) };
    a.ep.post_send(NOW, a.qp.id, &SendWr::new(1, read, &[Sge::new(a.mr.id, 512, 8)])).unwrap();
    let mut pkts = request(&mut a, &b, 2, false, 16);
    assert_eq!(pkts.len(), 2);
    for p in pkts.drain(..) {
        b.ep.handle_packet(NOW, &p).unwrap();
    }
    let out: Vec<_> = answers(&mut b).into_iter().map(|(op, psn, _)| (op, psn)).collect();
    assert_eq!(out, [(Opcode::READ_RESPONSE_ONLY, 0), (Opcode::ACKNOWLEDGE, 1)]);
}
