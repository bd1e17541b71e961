//! The RC QP's own rules (engine/src/rc/mod.rs), each seen from outside:
//! what a QP takes in which state, from where, the BTH pad count, when
//! the ACK timer restarts, and which completions are solicited. Driven
//! by hand, packet by packet, at explicit instants.

use std::net::Ipv4Addr;

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_core::wire::roce::Opcode;
use rctb_engine::Packet;

mod common;

use common::Side;

const ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);

fn connected(rd_atomic: u8) -> (Side, Side) {
    common::connected(1 << 16, ACCESS, rd_atomic)
}

fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn transmitted(s: &mut Side, now: Instant) -> Vec<Packet> {
    let (mut out, mut buf) = (Vec::new(), Vec::new());
    while let Some(tx) = s.ep.poll_transmit(now, &mut buf) {
        out.push(tx.packet);
    }
    out
}

fn completions(s: &mut Side) -> Vec<Completion> {
    let mut out = Vec::new();
    s.ep.poll_cq(s.cq, 64, &mut out).unwrap();
    out
}

fn post_send(s: &mut Side, wr_id: u64, offset: u64, len: u32) {
    s.ep.post_send(Instant::ZERO, s.qp.id, &SendWr::new(wr_id, SendOp::Send, &[Sge::new(s.mr.id, offset, len)]))
        .unwrap();
}

fn post_recv(s: &mut Side, wr_id: u64, len: u32) {
    s.ep.post_recv(Instant::ZERO, s.qp.id, &RecvWr::new(wr_id, &[Sge::new(s.mr.id, 0, len)])).unwrap();
}

/// 4.096 us << 14: the ACK timeout `common::connected` sets (code 14).
const ACK_TIMEOUT_NS: u64 = 4096 << 14;

#[test]
fn the_pad_count_rounds_each_payload_up_to_four_bytes() {
    // A 2049-byte SEND at MTU 1024: two full packets (pad 0) and a last one
    // of 1 byte (pad 3). A formula that gets either wrong (a pad of 4 or 8
    // for a full packet, 1 for the last) would misframe the ICRC.
    let (mut a, _b) = connected(1);
    post_send(&mut a, 1, 0, 2049);
    let sent = transmitted(&mut a, Instant::ZERO);
    let shape: Vec<_> = sent.iter().map(|p| (p.payload.len(), p.bth.pad)).collect();
    assert_eq!(shape, [(1024, 0), (1024, 0), (1, 3)]);
}

#[test]
fn rtr_takes_a_dest_qpn_of_24_bits_and_nothing_wider() {
    // 0xFFFFFF is the largest QPN; 0x1000000 needs a 25th bit the BTH has
    // not got, and 0 is no QP.
    let (mut a, _b) = connected(1);
    let ip = Ipv4Addr::new(10, 0, 0, 2);
    let rtr = |dest_qpn| {
        QpTransition::Rtr(RtrAttr {
            path_mtu: Mtu::Mtu1024,
            dest_qpn,
            rq_psn: Psn::wrapping(0),
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::default(),
            av: AddressVector::new(Gid::from_ipv4(ip), 1),
        })
    };
    let init = QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: ACCESS });
    let to_init = |a: &mut Side| {
        a.ep.modify_qp(Instant::ZERO, a.qp.id, &QpTransition::Reset).unwrap();
        a.ep.modify_qp(Instant::ZERO, a.qp.id, &init).unwrap();
    };
    for (qpn, ok) in [(0x0100_0000, false), (0, false), (0x00FF_FFFF, true)] {
        to_init(&mut a);
        let r = a.ep.modify_qp(Instant::ZERO, a.qp.id, &rtr(qpn));
        assert_eq!(r.is_ok(), ok, "dest_qpn {qpn:#x}: {r:?}");
        let state = a.ep.query_qp(a.qp.id).unwrap().state;
        assert_eq!(state, if ok { QpState::Rtr } else { QpState::Init }, "dest_qpn {qpn:#x}");
    }
}

#[test]
fn sq_sig_all_completes_a_send_posted_unsignaled() {
    // `common::side` creates its QPs with sq_sig_all: a WR posted without
    // the signaled flag completes all the same.
    let (mut a, mut b) = connected(1);
    post_recv(&mut b, 7, 64);
    let sge = [Sge::new(a.mr.id, 0, 16)];
    let wr = SendWr::new(3, SendOp::Send, &sge).unsignaled();
    a.ep.post_send(Instant::ZERO, a.qp.id, &wr).unwrap();
    for p in transmitted(&mut a, Instant::ZERO) {
        b.ep.handle_packet(Instant::ZERO, &p).unwrap();
    }
    for p in transmitted(&mut b, Instant::ZERO) {
        a.ep.handle_packet(Instant::ZERO, &p).unwrap();
    }
    let wc = completions(&mut a);
    assert_eq!(wc.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(3, WcStatus::Success)]);
}

#[test]
fn a_receive_is_refused_in_reset_and_flushed_at_once_in_err() {
    let (mut a, _b) = connected(1);
    a.ep.modify_qp(Instant::ZERO, a.qp.id, &QpTransition::Err).unwrap();
    let r = a.ep.post_recv(Instant::ZERO, a.qp.id, &RecvWr::new(5, &[Sge::new(a.mr.id, 0, 8)]));
    assert!(r.is_ok(), "{r:?}");
    let wc = completions(&mut a);
    assert_eq!(
        wc.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect::<Vec<_>>(),
        [(5, WcStatus::WrFlushErr, WcOpcode::Recv)]
    );
    a.ep.modify_qp(Instant::ZERO, a.qp.id, &QpTransition::Reset).unwrap();
    let r = a.ep.post_recv(Instant::ZERO, a.qp.id, &RecvWr::new(6, &[Sge::new(a.mr.id, 0, 8)]));
    assert!(matches!(r, Err(TransportError::InvalidState { state: QpState::Reset, .. })), "{r:?}");
    assert!(completions(&mut a).is_empty());
}

#[test]
fn a_qp_takes_requests_only_from_its_peer_and_only_once_it_has_a_path() {
    let (mut a, mut b) = connected(1);
    post_recv(&mut b, 7, 64);
    post_send(&mut a, 1, 0, 16);
    let send = transmitted(&mut a, Instant::ZERO).remove(0);
    // From another address: dropped, no ACK, the receive still posted.
    let mut stranger = send.clone();
    stranger.src_ip = Ipv4Addr::new(10, 0, 0, 9);
    b.ep.handle_packet(Instant::ZERO, &stranger).unwrap();
    assert!(transmitted(&mut b, Instant::ZERO).is_empty());
    assert!(completions(&mut b).is_empty());
    assert_eq!(common::dropped(&b), 1, "the stranger's packet is counted as dropped");
    // From the peer: taken.
    b.ep.handle_packet(Instant::ZERO, &send).unwrap();
    assert_eq!(transmitted(&mut b, Instant::ZERO).len(), 1);
    assert_eq!(completions(&mut b).iter().map(|c| c.wr_id).collect::<Vec<_>>(), [7]);
    // Back in RESET then INIT, b has no path: the same packet is dropped
    // (counted, no panic, no answer).
    assert_eq!(common::dropped(&b), 1, "the peer's packet is taken, not dropped");
    b.ep.modify_qp(Instant::ZERO, b.qp.id, &QpTransition::Reset).unwrap();
    b.ep.handle_packet(Instant::ZERO, &send).unwrap();
    assert_eq!(common::dropped(&b), 2, "a QP in RESET has no path");
    b.ep.modify_qp(Instant::ZERO, b.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: ACCESS }))
        .unwrap();
    post_recv(&mut b, 8, 64);
    b.ep.handle_packet(Instant::ZERO, &send).unwrap();
    assert!(transmitted(&mut b, Instant::ZERO).is_empty());
    assert!(completions(&mut b).is_empty());
    assert_eq!(common::dropped(&b), 3, "nor has one in INIT");
}

#[test]
fn a_qp_in_rtr_ignores_responses() {
    // b acknowledges a's SEND; a, taken back to RTR, has no requester yet
    // and drops the ACK (it must neither act on it nor fail).
    let (mut a, mut b) = connected(1);
    post_recv(&mut b, 7, 64);
    post_send(&mut a, 1, 0, 16);
    for p in transmitted(&mut a, Instant::ZERO) {
        b.ep.handle_packet(Instant::ZERO, &p).unwrap();
    }
    let ack = transmitted(&mut b, Instant::ZERO).remove(0);
    assert_eq!(ack.bth.opcode, Opcode::ACKNOWLEDGE);
    a.ep.modify_qp(Instant::ZERO, a.qp.id, &QpTransition::Reset).unwrap();
    let ip = Ipv4Addr::new(10, 0, 0, 2);
    a.ep.modify_qp(Instant::ZERO, a.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: ACCESS }))
        .unwrap();
    let rtr = RtrAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: b.qp.qpn,
        rq_psn: Psn::wrapping(0),
        max_dest_rd_atomic: 1,
        min_rnr_timer: RnrTimer::default(),
        av: AddressVector::new(Gid::from_ipv4(ip), 1),
    };
    a.ep.modify_qp(Instant::ZERO, a.qp.id, &QpTransition::Rtr(rtr)).unwrap();
    assert_eq!(common::dropped(&a), 0);
    a.ep.handle_packet(Instant::ZERO, &ack).unwrap();
    assert!(transmitted(&mut a, Instant::ZERO).is_empty());
    assert!(completions(&mut a).is_empty());
    assert_eq!(a.ep.query_qp(a.qp.id).unwrap().state, QpState::Rtr);
    assert_eq!(common::dropped(&a), 1, "the response is counted as dropped");
}

#[test]
fn a_second_read_waits_for_the_first_when_max_rd_atomic_is_one() {
    // With one READ allowed in flight, the second READ leaves only once
    // the first one's response has arrived, however often the owner asks.
    let (mut a, mut b) = connected(1);
    for wr_id in [1, 2] {
        let op = SendOp::Read { remote: b.mr.remote(256 * wr_id) };
        a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(wr_id, op, &[Sge::new(a.mr.id, 256 * wr_id, 8)])).unwrap();
    }
    let first = transmitted(&mut a, Instant::ZERO);
    assert_eq!(first.iter().map(|p| (p.bth.opcode, p.bth.psn.get())).collect::<Vec<_>>(), [(Opcode::READ_REQUEST, 0)]);
    assert!(transmitted(&mut a, at(1)).is_empty());
    b.ep.handle_packet(at(1), &first[0]).unwrap();
    for p in transmitted(&mut b, at(1)) {
        a.ep.handle_packet(at(2), &p).unwrap();
    }
    let second = transmitted(&mut a, at(2));
    assert_eq!(second.iter().map(|p| (p.bth.opcode, p.bth.psn.get())).collect::<Vec<_>>(), [(Opcode::READ_REQUEST, 1)]);
}

#[test]
fn an_ack_that_makes_progress_restarts_the_ack_timer_from_its_arrival() {
    // Two one-packet SENDs leave at 0; the second is lost. The ACK of the
    // first arrives at 1 ms: the timer for the second then runs from 1 ms,
    // so it is sent again at 1 ms + the timeout, not earlier, and not never.
    let (mut a, mut b) = connected(1);
    post_recv(&mut b, 7, 64);
    post_recv(&mut b, 8, 64);
    post_send(&mut a, 1, 0, 16);
    post_send(&mut a, 2, 0, 16);
    let sent = transmitted(&mut a, Instant::ZERO);
    assert_eq!(sent.len(), 2);
    b.ep.handle_packet(at(500), &sent[0]).unwrap();
    let acks = transmitted(&mut b, at(500));
    assert_eq!(acks.len(), 1);
    let t_ack = 1_000_000;
    a.ep.handle_packet(at(t_ack), &acks[0]).unwrap();
    assert_eq!(completions(&mut a).iter().map(|c| c.wr_id).collect::<Vec<_>>(), [1]);
    // Where the first timer (from 0) would have fired: nothing.
    let early = at(ACK_TIMEOUT_NS + 1);
    a.ep.handle_timeout(early);
    assert!(transmitted(&mut a, early).is_empty());
    assert_eq!(a.ep.counters().timeouts, 0);
    // Just before the restarted timer: nothing yet; at it: the second again.
    a.ep.handle_timeout(at(t_ack + ACK_TIMEOUT_NS - 1));
    assert!(transmitted(&mut a, at(t_ack + ACK_TIMEOUT_NS - 1)).is_empty());
    let due = at(t_ack + ACK_TIMEOUT_NS);
    a.ep.handle_timeout(due);
    let again = transmitted(&mut a, due);
    assert_eq!(again.iter().map(|p| p.bth.psn.get()).collect::<Vec<_>>(), [1]);
    assert_eq!(a.ep.counters().timeouts, 1);
}

#[test]
fn a_flushed_receive_wakes_a_cq_armed_for_solicited_completions() {
    // A successful receive of a message without the solicited-event bit
    // does not answer a solicited-only request; a failed receive (here a
    // flush) does.
    let (mut a, mut b) = connected(1);
    post_recv(&mut b, 7, 64);
    post_recv(&mut b, 8, 64);
    b.ep.req_notify_cq(b.cq, true).unwrap();
    post_send(&mut a, 1, 0, 16);
    for p in transmitted(&mut a, Instant::ZERO) {
        b.ep.handle_packet(Instant::ZERO, &p).unwrap();
    }
    assert_eq!(completions(&mut b).iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(7, WcStatus::Success)]);
    assert_eq!(b.ep.poll_cq_notification(), None);
    b.ep.modify_qp(Instant::ZERO, b.qp.id, &QpTransition::Err).unwrap();
    assert_eq!(b.ep.poll_cq_notification(), Some(b.cq));
    assert_eq!(
        completions(&mut b).iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(8, WcStatus::WrFlushErr)]
    );
}

#[test]
fn an_rnr_nak_holds_back_a_qp_already_queued_to_send() {
    // a's first SEND finds no receive at b: RNR NAK. a's second SEND was
    // posted before the NAK arrived, so a is already queued to transmit;
    // still nothing leaves during the RNR wait, and both leave after it.
    let (mut a, mut b) = connected(1);
    post_send(&mut a, 1, 0, 16);
    let first = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &first[0]).unwrap();
    let nak = transmitted(&mut b, Instant::ZERO);
    assert_eq!(nak.len(), 1);
    post_send(&mut a, 2, 0, 16);
    a.ep.handle_packet(at(1), &nak[0]).unwrap();
    assert!(transmitted(&mut a, at(1)).is_empty());
    let wait = RnrTimer::default().duration().as_nanos() as u64;
    let after = at(1 + wait);
    a.ep.handle_timeout(after);
    let again = transmitted(&mut a, after);
    assert_eq!(again.iter().map(|p| p.bth.psn.get()).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn after_an_ack_a_qp_goes_on_to_its_own_requests_and_says_when_none_is_left() {
    // b owes an ACK for a's SEND. Alone, the ACK leaves with `more` false;
    // with a SEND of b's own waiting too, the ACK says `more` and the SEND
    // follows it.
    let (mut a, mut b) = connected(1);
    post_recv(&mut b, 7, 64);
    post_recv(&mut b, 8, 64);
    post_send(&mut a, 1, 0, 16);
    post_send(&mut a, 2, 0, 16);
    let sends = transmitted(&mut a, Instant::ZERO);
    let mut buf = Vec::new();
    b.ep.handle_packet(Instant::ZERO, &sends[0]).unwrap();
    let alone = b.ep.poll_transmit(Instant::ZERO, &mut buf).unwrap();
    assert_eq!((alone.packet.bth.opcode, alone.more), (Opcode::ACKNOWLEDGE, false));
    assert!(b.ep.poll_transmit(Instant::ZERO, &mut buf).is_none());
    b.ep.handle_packet(Instant::ZERO, &sends[1]).unwrap();
    post_send(&mut b, 9, 0, 16);
    let out: Vec<_> = std::iter::from_fn(|| b.ep.poll_transmit(Instant::ZERO, &mut buf))
        .map(|t| (t.packet.bth.opcode, t.more))
        .collect();
    assert_eq!(out, [(Opcode::ACKNOWLEDGE, true), (Opcode::SEND_ONLY, false)]);
}
