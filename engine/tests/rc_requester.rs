//! The requester's own rules (engine/src/rc/requester.rs and its ack.rs
//! and transmit.rs), each seen from outside: how many times it sends again
//! before it gives up, what an ACK covers (one WR, several, part of one),
//! where a go-back resumes, which WRs are still sent after a partial ACK,
//! and what a QP taken through RTS again starts from. Driven by hand,
//! packet by packet, at explicit instants.

use std::net::Ipv4Addr;

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_core::wire::roce::{Aeth, Opcode};
use rctb_engine::Packet;

mod common;

use common::Side;

const ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);
/// 4.096 us << 14: the ACK timeout `common::connect_with` sets (code 14).
const T: u64 = 4096 << 14;

fn pair(retry_cnt: u8, rnr_retry: u8) -> (Side, Side) {
    let (ia, ib) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (mut a, mut b) = (common::side("a", ia, 1, 1 << 16, ACCESS), common::side("b", ib, 2, 1 << 16, ACCESS));
    common::connect_with(&mut a, &mut b, ACCESS, 1, retry_cnt, rnr_retry);
    (a, b)
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

fn psns(p: &[Packet]) -> Vec<u32> {
    p.iter().map(|p| p.bth.psn.get()).collect()
}

fn completions(s: &mut Side) -> Vec<(u64, WcStatus)> {
    let mut out = Vec::new();
    s.ep.poll_cq(s.cq, 64, &mut out).unwrap();
    out.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn post_send(s: &mut Side, wr_id: u64, len: u32) {
    s.ep.post_send(Instant::ZERO, s.qp.id, &SendWr::new(wr_id, SendOp::Send, &[Sge::new(s.mr.id, 0, len)])).unwrap();
}

fn post_recv(s: &mut Side, wr_id: u64, len: u32) {
    s.ep.post_recv(Instant::ZERO, s.qp.id, &RecvWr::new(wr_id, &[Sge::new(s.mr.id, 0, len)])).unwrap();
}

/// Fires `s`'s timers at each next deadline (at most 32 firings, while it
/// has one) and returns what each firing that sent anything sent (by
/// PSN), and the last instant.
fn time_out_until_quiet(s: &mut Side, mut now: u64) -> (Vec<Vec<u32>>, u64) {
    let mut rounds = Vec::new();
    for _ in 0..32 {
        let Some(next) = s.ep.poll_timeout() else { break };
        now = next.as_nanos().max(now);
        s.ep.handle_timeout(at(now));
        let sent = psns(&transmitted(s, at(now)));
        if !sent.is_empty() {
            rounds.push(sent);
        }
    }
    (rounds, now)
}

#[test]
fn retry_cnt_bounds_the_sends_of_an_unanswered_request_then_it_fails() {
    // retry_cnt 2: the SEND leaves once, then twice more on timeouts, and
    // the third timeout completes it with RETRY_EXC_ERR. An engine that
    // never spends its budget would send for ever; one that spends it
    // wrongly would give up early or late.
    for retry_cnt in [0u8, 2, 5] {
        let (mut a, _b) = pair(retry_cnt, 7);
        post_send(&mut a, 1, 16);
        assert_eq!(psns(&transmitted(&mut a, Instant::ZERO)), [0]);
        let (rounds, _) = time_out_until_quiet(&mut a, 0);
        assert_eq!(rounds, vec![vec![0]; retry_cnt as usize], "retry_cnt {retry_cnt}");
        assert_eq!(completions(&mut a), [(1, WcStatus::RetryExcErr)], "retry_cnt {retry_cnt}");
        assert_eq!(a.ep.counters().timeouts, u64::from(retry_cnt) + 1, "retry_cnt {retry_cnt}");
    }
}

#[test]
fn retry_cnt_7_sends_again_without_end() {
    // 7 is never spent (as rxe): 20 timeouts, 20 sends, no completion.
    let (mut a, _b) = pair(7, 7);
    post_send(&mut a, 1, 16);
    transmitted(&mut a, Instant::ZERO);
    let (rounds, _) = time_out_until_quiet(&mut a, 0);
    assert_eq!(rounds.len(), 32, "still sending after 32 timeouts");
    assert!(completions(&mut a).is_empty());
}

#[test]
fn progress_gives_the_retry_budget_back() {
    // retry_cnt 1. Two SENDs; the first is answered after one timeout, the
    // second never: it still gets its own full budget (one more send).
    let (mut a, mut b) = pair(1, 7);
    post_recv(&mut b, 7, 64);
    post_send(&mut a, 1, 16);
    post_send(&mut a, 2, 16);
    assert_eq!(psns(&transmitted(&mut a, Instant::ZERO)), [0, 1]);
    a.ep.handle_timeout(at(T));
    let again = transmitted(&mut a, at(T));
    assert_eq!(psns(&again), [0, 1]);
    b.ep.handle_packet(at(T), &again[0]).unwrap();
    for p in transmitted(&mut b, at(T)) {
        a.ep.handle_packet(at(T + 1), &p).unwrap();
    }
    assert_eq!(completions(&mut a), [(1, WcStatus::Success)]);
    let (rounds, _) = time_out_until_quiet(&mut a, T + 1);
    assert_eq!(rounds, [vec![1]]);
    assert_eq!(completions(&mut a), [(2, WcStatus::RetryExcErr)]);
}

#[test]
fn rnr_retry_bounds_the_sends_after_rnr_naks() {
    // rnr_retry 2 and no receive posted at b: the SEND is refused (RNR NAK)
    // three times; the third NAK completes it with RNR_RETRY_EXC_ERR.
    let (mut a, mut b) = pair(7, 2);
    post_send(&mut a, 1, 16);
    let mut now = 0;
    let mut sends = 0;
    let mut pending = transmitted(&mut a, at(now));
    while !pending.is_empty() {
        sends += 1;
        b.ep.handle_packet(at(now), &pending[0]).unwrap();
        let nak = transmitted(&mut b, at(now));
        assert_eq!(nak.len(), 1);
        a.ep.handle_packet(at(now), &nak[0]).unwrap();
        let Some(next) = a.ep.poll_timeout() else { break };
        now = next.as_nanos();
        a.ep.handle_timeout(next);
        pending = transmitted(&mut a, next);
        assert!(sends < 10, "RNR retries without end");
    }
    assert_eq!(sends, 3);
    assert_eq!(completions(&mut a), [(1, WcStatus::RnrRetryExcErr)]);
}

#[test]
fn one_ack_covers_every_wr_it_reaches_and_no_more() {
    // Three one-packet SENDs (PSN 0, 1, 2); b answers the first two with
    // one coalesced ACK of PSN 1 (a's packets delivered, b's ACK for the
    // first dropped). a completes 1 and 2, not 3, and a timeout resends
    // only PSN 2.
    let (mut a, mut b) = pair(7, 7);
    for wr in [10, 11, 12] {
        post_recv(&mut b, wr, 64);
    }
    for wr in [1, 2, 3] {
        post_send(&mut a, wr, 16);
    }
    let sent = transmitted(&mut a, Instant::ZERO);
    assert_eq!(psns(&sent), [0, 1, 2]);
    b.ep.handle_packet(Instant::ZERO, &sent[0]).unwrap();
    b.ep.handle_packet(Instant::ZERO, &sent[1]).unwrap();
    let acks = transmitted(&mut b, Instant::ZERO);
    let last = acks.last().expect("an ACK");
    assert_eq!((last.bth.opcode, last.bth.psn.get()), (Opcode::ACKNOWLEDGE, 1));
    a.ep.handle_packet(at(1), last).unwrap();
    assert_eq!(completions(&mut a), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let (rounds, _) = time_out_until_quiet(&mut a, 1);
    assert_eq!(rounds.first().map(Vec::as_slice), Some(&[2][..]), "only the unacknowledged SEND again");
    // A stale ACK (of PSN 0, again) changes nothing.
    a.ep.handle_packet(at(2 * T), &acks[0]).unwrap();
    assert!(completions(&mut a).is_empty());
}

#[test]
fn an_ack_of_part_of_a_message_sends_only_the_rest_again() {
    // A 3-packet SEND (PSN 0..2); b got the first two (the second twice:
    // a duplicate is answered with an ACK of PSN 1); the last packet was
    // lost. a does not complete the SEND, and its timeout resends PSN 2
    // alone, not the whole message.
    let (mut a, mut b) = pair(7, 7);
    post_recv(&mut b, 10, 4096);
    post_send(&mut a, 1, 2100);
    let sent = transmitted(&mut a, Instant::ZERO);
    assert_eq!(psns(&sent), [0, 1, 2]);
    for i in [0, 1, 1] {
        b.ep.handle_packet(Instant::ZERO, &sent[i]).unwrap();
    }
    let acks = transmitted(&mut b, Instant::ZERO);
    assert_eq!(psns(&acks), [1]);
    for p in &acks {
        a.ep.handle_packet(at(1), p).unwrap();
    }
    assert!(completions(&mut a).is_empty(), "part of a message is not the message");
    a.ep.handle_timeout(at(1 + T));
    let again = transmitted(&mut a, at(1 + T));
    assert_eq!(psns(&again), [2]);
    b.ep.handle_packet(at(1 + T), &again[0]).unwrap();
    for p in transmitted(&mut b, at(1 + T)) {
        a.ep.handle_packet(at(2 + T), &p).unwrap();
    }
    assert_eq!(completions(&mut a), [(1, WcStatus::Success)]);
    assert_eq!(completions(&mut b), [(10, WcStatus::Success)]);
}

#[test]
fn an_ack_that_arrives_during_a_go_back_skips_what_it_covers() {
    // Two SENDs go out; the timeout rewinds to PSN 0 and sends both again,
    // but before a transmits its retry the first flight's ACK of PSN 0
    // arrives: the retry starts at PSN 1.
    let (mut a, mut b) = pair(7, 7);
    post_recv(&mut b, 10, 64);
    post_recv(&mut b, 11, 64);
    post_send(&mut a, 1, 16);
    post_send(&mut a, 2, 16);
    let sent = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &sent[0]).unwrap();
    let ack = transmitted(&mut b, Instant::ZERO);
    a.ep.handle_timeout(at(T));
    a.ep.handle_packet(at(T), &ack[0]).unwrap();
    assert_eq!(completions(&mut a), [(1, WcStatus::Success)]);
    assert_eq!(psns(&transmitted(&mut a, at(T))), [1]);
}

#[test]
fn an_ack_past_an_unanswered_read_sends_the_read_again() {
    // A READ (PSN 0) then a SEND (PSN 1). b answers both, but a sees only
    // the SEND's ACK (PSN 1), not the READ's response: the ACK implies the
    // response was lost, so a asks for the READ again rather than
    // completing anything.
    let (mut a, mut b) = pair(7, 7);
    post_recv(&mut b, 10, 64);
    let read = SendOp::Read { remote: b.mr.remote(0) };
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(1, read, &[Sge::new(a.mr.id, 512, 8)])).unwrap();
    post_send(&mut a, 2, 16);
    let sent = transmitted(&mut a, Instant::ZERO);
    assert_eq!(psns(&sent), [0, 1]);
    for p in &sent {
        b.ep.handle_packet(Instant::ZERO, p).unwrap();
    }
    let answers = transmitted(&mut b, Instant::ZERO);
    let ack = answers.iter().find(|p| p.bth.opcode == Opcode::ACKNOWLEDGE).expect("the SEND's ACK");
    a.ep.handle_packet(at(1), ack).unwrap();
    assert!(completions(&mut a).is_empty(), "nothing completes before the READ's data");
    let again = transmitted(&mut a, at(1));
    let first = again.first().map(|p| (p.bth.opcode, p.bth.psn.get()));
    assert_eq!(first, Some((Opcode::READ_REQUEST, 0)), "the READ first, at its own PSN");
    // The READ's response and the repeated SEND's ACK complete both, in order.
    for p in &again {
        b.ep.handle_packet(at(1), p).unwrap();
    }
    for p in transmitted(&mut b, at(1)) {
        a.ep.handle_packet(at(2), &p).unwrap();
    }
    assert_eq!(completions(&mut a), [(1, WcStatus::Success), (2, WcStatus::Success)]);
}

#[test]
fn a_qp_brought_to_rts_again_starts_from_its_new_psn_with_a_full_budget() {
    // retry_cnt 1. The first connection spends its retry and fails; the
    // QP goes RESET -> INIT -> RTR -> RTS again: a new SEND leaves at PSN
    // 0 and is sent once more on a timeout before it fails, as the first.
    let (mut a, mut b) = pair(1, 7);
    post_send(&mut a, 1, 16);
    transmitted(&mut a, Instant::ZERO);
    let (rounds, now) = time_out_until_quiet(&mut a, 0);
    assert_eq!(rounds, [vec![0]]);
    assert_eq!(completions(&mut a), [(1, WcStatus::RetryExcErr)]);
    for s in [&mut a, &mut b] {
        s.ep.modify_qp(at(now), s.qp.id, &QpTransition::Reset).unwrap();
    }
    common::connect_with(&mut a, &mut b, ACCESS, 1, 1, 7);
    post_send(&mut a, 2, 16);
    assert_eq!(psns(&transmitted(&mut a, at(now))), [0]);
    let (rounds, _) = time_out_until_quiet(&mut a, now);
    assert_eq!(rounds, [vec![0]]);
    assert_eq!(completions(&mut a), [(2, WcStatus::RetryExcErr)]);
}

#[test]
fn a_wr_refused_at_post_fails_in_order_after_those_before_it() {
    // A SEND whose SGE lies outside its region is accepted at the post and
    // fails there: it completes with a local error after the SEND before
    // it, and the one after it is flushed; nothing of either is sent.
    let (mut a, mut b) = pair(7, 7);
    post_recv(&mut b, 10, 64);
    post_send(&mut a, 1, 16);
    let bad = [Sge::new(a.mr.id, (1 << 16) - 8, 64)];
    // Accepted at the post (verbs reports a bad SGE as a completion).
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(2, SendOp::Send, &bad)).unwrap();
    post_send(&mut a, 3, 16);
    let sent = transmitted(&mut a, Instant::ZERO);
    assert_eq!(psns(&sent), [0], "nothing after the refused WR leaves");
    b.ep.handle_packet(Instant::ZERO, &sent[0]).unwrap();
    for p in transmitted(&mut b, Instant::ZERO) {
        a.ep.handle_packet(at(1), &p).unwrap();
    }
    let done = completions(&mut a);
    assert_eq!(done.first(), Some(&(1, WcStatus::Success)));
    assert!(matches!(done.get(1), Some((2, s)) if *s != WcStatus::Success && *s != WcStatus::WrFlushErr), "{done:?}");
    assert_eq!(done.get(2), Some(&(3, WcStatus::WrFlushErr)));
}

/// Posts a READ of `len` bytes of b's region at 0 into a's region at `at`.
fn post_read(a: &mut Side, b: &Side, wr_id: u64, at: u64, len: u32) {
    let op = SendOp::Read { remote: b.mr.remote(0) };
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(wr_id, op, &[Sge::new(a.mr.id, at, len)])).unwrap();
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(3)).collect()
}

fn read_back(s: &Side, at: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    s.ep.mr_read(s.mr.id, at, &mut buf).unwrap();
    buf
}

#[test]
fn a_read_of_three_packets_lands_each_at_its_offset() {
    // 2500 bytes at MTU 1024: responses of 1024, 1024 and 452 bytes, each
    // scattered at pmtu x its index; the READ completes with the last.
    let (mut a, mut b) = pair(7, 7);
    let data = pattern(2500);
    b.ep.mr_write(b.mr.id, 0, &data).unwrap();
    post_read(&mut a, &b, 1, 4096, 2500);
    let req = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &req[0]).unwrap();
    let responses = transmitted(&mut b, Instant::ZERO);
    assert_eq!(responses.iter().map(|p| p.payload.len()).collect::<Vec<_>>(), [1024, 1024, 452]);
    for (i, p) in responses.iter().enumerate() {
        a.ep.handle_packet(at(1), p).unwrap();
        let done = completions(&mut a);
        assert_eq!(done.is_empty(), i < 2, "completion after response {i}: {done:?}");
    }
    assert_eq!(read_back(&a, 4096, 2500), data);
}

#[test]
fn a_lost_read_response_asks_again_once_from_what_is_missing() {
    // The middle response is lost: the third shows the gap, and a asks for
    // the READ again (once, however many later responses of the first
    // flight arrive); a duplicate of a response already taken changes
    // nothing; the data ends up whole and the READ completes once.
    let (mut a, mut b) = pair(7, 7);
    let data = pattern(2500);
    b.ep.mr_write(b.mr.id, 0, &data).unwrap();
    post_read(&mut a, &b, 1, 4096, 2500);
    let req = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &req[0]).unwrap();
    let first = transmitted(&mut b, Instant::ZERO);
    a.ep.handle_packet(at(1), &first[0]).unwrap();
    assert_eq!(common::dropped(&a), 0);
    a.ep.handle_packet(at(1), &first[0]).unwrap(); // a duplicate
    assert_eq!(common::dropped(&a), 1, "the duplicate is dropped");
    a.ep.handle_packet(at(1), &first[2]).unwrap(); // past the gap
    assert_eq!(common::dropped(&a), 2, "the response past the gap is dropped");
    let again = transmitted(&mut a, at(1));
    assert_eq!(again.iter().map(|p| (p.bth.opcode, p.bth.psn.get())).collect::<Vec<_>>(), [(Opcode::READ_REQUEST, 1)]);
    a.ep.handle_packet(at(1), &first[2]).unwrap(); // the same gap again: no new request
    assert!(transmitted(&mut a, at(1)).is_empty(), "one request again per gap");
    assert_eq!(common::dropped(&a), 3);
    assert!(completions(&mut a).is_empty());
    b.ep.handle_packet(at(2), &again[0]).unwrap();
    let rest = transmitted(&mut b, at(2));
    assert_eq!(psns(&rest), [1, 2]);
    for p in &rest {
        a.ep.handle_packet(at(3), p).unwrap();
    }
    assert_eq!(completions(&mut a), [(1, WcStatus::Success)]);
    assert_eq!(read_back(&a, 4096, 2500), data);
}

#[test]
fn a_response_to_a_psn_that_is_not_a_read_is_a_bad_response() {
    // A SEND (PSN 0) then a READ (PSN 1); a READ response that claims PSN 0
    // fails a's QP with BAD_RESP_ERR on the SEND.
    let (mut a, mut b) = pair(7, 7);
    post_recv(&mut b, 10, 64);
    post_send(&mut a, 1, 16);
    post_read(&mut a, &b, 2, 4096, 8);
    let sent = transmitted(&mut a, Instant::ZERO);
    for p in &sent {
        b.ep.handle_packet(Instant::ZERO, p).unwrap();
    }
    let mut forged =
        transmitted(&mut b, Instant::ZERO).into_iter().find(|p| p.bth.opcode.is_read_response()).expect("a response");
    forged.bth.psn = Psn::wrapping(0);
    a.ep.handle_packet(at(1), &forged).unwrap();
    let done = completions(&mut a);
    assert_eq!(done.first(), Some(&(1, WcStatus::BadRespErr)), "{done:?}");
}

#[test]
fn responses_outside_what_was_sent_are_ignored() {
    // A response for a PSN a never sent (or already retired) is dropped:
    // no completion, nothing sent, and the real one still completes.
    let (mut a, mut b) = pair(7, 7);
    post_recv(&mut b, 10, 64);
    post_send(&mut a, 1, 16);
    let sent = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &sent[0]).unwrap();
    let ack = transmitted(&mut b, Instant::ZERO).remove(0);
    for psn in [5, 0xFF_FFFF] {
        let mut stray = ack.clone();
        stray.bth.psn = Psn::wrapping(psn);
        a.ep.handle_packet(at(1), &stray).unwrap();
        assert!(completions(&mut a).is_empty(), "an ACK of PSN {psn} completes nothing");
    }
    assert_eq!(common::dropped(&a), 2, "both strays are counted as dropped");
    // An ACK with no AETH, and one whose AETH is of the reserved kind:
    // dropped, and the WR still waits for the real one.
    let mut bare = ack.clone();
    bare.aeth = None;
    a.ep.handle_packet(at(1), &bare).unwrap();
    assert_eq!(common::dropped(&a), 3, "an ACK without an AETH is dropped");
    let mut reserved = ack.clone();
    reserved.aeth = Some(Aeth { syndrome: 0x40, msn: 0 });
    a.ep.handle_packet(at(1), &reserved).unwrap();
    assert!(completions(&mut a).is_empty());
    assert_eq!(common::dropped(&a), 4, "an AETH of the reserved kind is dropped");
    a.ep.handle_packet(at(1), &ack).unwrap();
    assert_eq!(completions(&mut a), [(1, WcStatus::Success)]);
    a.ep.handle_packet(at(2), &ack).unwrap();
    assert!(completions(&mut a).is_empty(), "a retired PSN's ACK again: nothing");
    assert_eq!(common::dropped(&a), 5);
}

#[test]
fn a_remote_access_nak_fails_the_write_and_flushes_what_follows() {
    // A WRITE with a wrong rkey: b NAKs it (remote access error); a
    // completes it with REM_ACCESS_ERR and flushes the SEND behind it.
    let (mut a, mut b) = pair(7, 7);
    let bad = RemoteAddr { addr: b.mr.addr, rkey: b.mr.rkey ^ 0x55 };
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(1, SendOp::Write { remote: bad }, &[Sge::new(a.mr.id, 0, 8)]))
        .unwrap();
    post_send(&mut a, 2, 8);
    let sent = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &sent[0]).unwrap();
    let nak = transmitted(&mut b, Instant::ZERO);
    assert_eq!(nak.len(), 1);
    a.ep.handle_packet(at(1), &nak[0]).unwrap();
    assert_eq!(completions(&mut a), [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]);
}

#[test]
fn a_sequence_nak_goes_back_once_while_its_retry_is_under_way() {
    // Three SENDs; the first is lost. b NAKs the gap once (PSN sequence
    // error, PSN 0), and the NAK arrives twice: a goes back to PSN 0 on the
    // first and ignores (and counts) the second, then everything completes.
    let (mut a, mut b) = pair(7, 7);
    for wr in [10, 11, 12] {
        post_recv(&mut b, wr, 64);
    }
    for wr in [1, 2, 3] {
        post_send(&mut a, wr, 16);
    }
    let sent = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &sent[1]).unwrap();
    b.ep.handle_packet(Instant::ZERO, &sent[2]).unwrap();
    let naks = transmitted(&mut b, Instant::ZERO);
    assert_eq!(naks.len(), 1, "one NAK per gap");
    a.ep.handle_packet(at(1), &naks[0]).unwrap();
    a.ep.handle_packet(at(1), &naks[0]).unwrap();
    let again = transmitted(&mut a, at(1));
    assert_eq!(psns(&again), [0, 1, 2], "back to PSN 0, once");
    assert_eq!(a.ep.counters().seq_naks_ignored, 1, "the second NAK, during the retry, is counted as ignored");
    for p in &again {
        b.ep.handle_packet(at(2), p).unwrap();
    }
    for p in transmitted(&mut b, at(2)) {
        a.ep.handle_packet(at(3), &p).unwrap();
    }
    assert_eq!(completions(&mut a), [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
}

#[test]
fn an_atomic_returns_the_original_value_once() {
    // A fetch-and-add: the original 8 bytes land in a's SGE; a duplicate
    // of the atomic acknowledge changes nothing.
    let access = ACCESS.union(Access::REMOTE_ATOMIC);
    let (ia, ib) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (mut a, mut b) = (common::side("a", ia, 1, 1 << 16, access), common::side("b", ib, 2, 1 << 16, access));
    common::connect_with(&mut a, &mut b, access, 1, 7, 7);
    b.ep.mr_write(b.mr.id, 64, &41u64.to_le_bytes()).unwrap();
    let op = SendOp::FetchAdd { remote: b.mr.remote(64), add: 1 };
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(1, op, &[Sge::new(a.mr.id, 0, 8)])).unwrap();
    let req = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &req[0]).unwrap();
    let ack = transmitted(&mut b, Instant::ZERO);
    assert_eq!(ack[0].bth.opcode, Opcode::ATOMIC_ACKNOWLEDGE);
    a.ep.handle_packet(at(1), &ack[0]).unwrap();
    assert_eq!(completions(&mut a), [(1, WcStatus::Success)]);
    assert_eq!(read_back(&a, 0, 8), 41u64.to_le_bytes());
    a.ep.mr_write(a.mr.id, 0, &[0; 8]).unwrap();
    a.ep.handle_packet(at(2), &ack[0]).unwrap();
    assert!(completions(&mut a).is_empty());
    assert_eq!(read_back(&a, 0, 8), [0; 8], "a duplicate acknowledge writes nothing");
    assert_eq!(read_back(&b, 64, 8), 42u64.to_le_bytes());
}

#[test]
fn the_send_queue_holds_max_send_wr_and_refuses_one_more() {
    // 16 WRs fit (the QP's max_send_wr); the 17th is refused as a full
    // queue; once one completes, one more fits.
    let (mut a, mut b) = pair(7, 7);
    post_recv(&mut b, 10, 64);
    for wr in 0..16 {
        post_send(&mut a, wr, 8);
    }
    let refused = a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(16, SendOp::Send, &[Sge::new(a.mr.id, 0, 8)]));
    assert!(matches!(refused, Err(TransportError::QueueFull { limit: 16, .. })), "{refused:?}");
    let sent = transmitted(&mut a, Instant::ZERO);
    b.ep.handle_packet(Instant::ZERO, &sent[0]).unwrap();
    for p in transmitted(&mut b, Instant::ZERO) {
        a.ep.handle_packet(at(1), &p).unwrap();
    }
    assert_eq!(completions(&mut a), [(0, WcStatus::Success)]);
    post_send(&mut a, 16, 8);
}

#[test]
fn a_compare_and_swap_swaps_only_on_a_match_and_returns_the_original() {
    // The target holds 5: compare 4 leaves it (and returns 5); compare 5
    // swaps in 9 (and returns 5).
    let access = ACCESS.union(Access::REMOTE_ATOMIC);
    let (ia, ib) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (mut a, mut b) = (common::side("a", ia, 1, 1 << 16, access), common::side("b", ib, 2, 1 << 16, access));
    common::connect_with(&mut a, &mut b, access, 1, 7, 7);
    b.ep.mr_write(b.mr.id, 64, &5u64.to_le_bytes()).unwrap();
    for (wr, compare, swap, after) in [(1u64, 4u64, 9u64, 5u64), (2, 5, 9, 9)] {
        let op = SendOp::CompareSwap { remote: b.mr.remote(64), compare, swap };
        a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(wr, op, &[Sge::new(a.mr.id, 0, 8)])).unwrap();
        let req = transmitted(&mut a, at(wr));
        assert_eq!(req.len(), 1);
        b.ep.handle_packet(at(wr), &req[0]).unwrap();
        for p in transmitted(&mut b, at(wr)) {
            a.ep.handle_packet(at(wr), &p).unwrap();
        }
        assert_eq!(completions(&mut a), [(wr, WcStatus::Success)]);
        // The target held 5 before either: the first did not swap it.
        assert_eq!(read_back(&a, 0, 8), 5u64.to_le_bytes(), "the original value comes back");
        assert_eq!(read_back(&b, 64, 8), after.to_le_bytes(), "compare {compare}: swapped only on a match");
    }
}

/// a and b with READ, WRITE and atomic access, `rd_atomic` READs and
/// atomics outstanding each way.
fn pair_atomic(rd_atomic: u8) -> (Side, Side) {
    let access = ACCESS.union(Access::REMOTE_ATOMIC);
    let (ia, ib) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (mut a, mut b) = (common::side("a", ia, 1, 1 << 16, access), common::side("b", ib, 2, 1 << 16, access));
    common::connect_with(&mut a, &mut b, access, rd_atomic, 7, 7);
    (a, b)
}

#[test]
fn a_response_that_overtakes_an_unanswered_read_is_dropped_until_the_read_is_answered() {
    // A READ (PSN 0) then a second READ (PSN 1), and a READ then an atomic:
    // the second response arrives first. The requester may not complete
    // it past the READ still waiting for its data: it drops it (counted),
    // and takes it when it comes again after the first.
    for atomic in [false, true] {
        let (mut a, mut b) = pair_atomic(2);
        b.ep.mr_write(b.mr.id, 0, &7u64.to_le_bytes()).unwrap();
        post_read(&mut a, &b, 1, 64, 8);
        if atomic {
            let op = SendOp::FetchAdd { remote: b.mr.remote(0), add: 1 };
            a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(2, op, &[Sge::new(a.mr.id, 128, 8)])).unwrap();
        } else {
            post_read(&mut a, &b, 2, 128, 8);
        }
        for p in transmitted(&mut a, Instant::ZERO) {
            b.ep.handle_packet(Instant::ZERO, &p).unwrap();
        }
        let answers = transmitted(&mut b, Instant::ZERO);
        assert_eq!(psns(&answers), [0, 1], "atomic {atomic}");
        a.ep.handle_packet(at(1), &answers[1]).unwrap();
        assert!(completions(&mut a).is_empty(), "atomic {atomic}: nothing completes past the first READ");
        assert_eq!(common::dropped(&a), 1, "atomic {atomic}: the overtaking response is dropped");
        a.ep.handle_packet(at(1), &answers[0]).unwrap();
        assert_eq!(completions(&mut a), [(1, WcStatus::Success)], "atomic {atomic}");
        a.ep.handle_packet(at(2), &answers[1]).unwrap();
        assert_eq!(completions(&mut a), [(2, WcStatus::Success)], "atomic {atomic}");
        assert_eq!(common::dropped(&a), 1, "atomic {atomic}: taken the second time");
        assert_eq!(read_back(&a, 128, 8), 7u64.to_le_bytes(), "atomic {atomic}");
    }
}
