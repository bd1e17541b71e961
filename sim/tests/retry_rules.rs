//! rxe's transport-retry rules, which the engine follows (pinned on rxe by
//! the fault case `faults/retry_cnt_7_never_runs_out` in the VM):
//! - a `retry_cnt` of 7 is never spent, so a path that loses every
//!   transmission for a while is retried until it heals;
//! - while a retry is under way, a further PSN sequence NAK starts none
//!   (and spends nothing) until a response makes progress.
//!
//! Deterministic: each test names its seed; replay with
//! `cargo test -p rctb-sim --test retry_rules`.

mod common;

use common::*;
use rctb_core::transport::*;
use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_sim::{PacketAction, PacketMatch, PacketRule};

/// `a` WRITEs `len` bytes to `b` with `retry_cnt` and a ~1 ms ACK timeout,
/// while `rules` act; the completion and the fabric's counters.
fn write_through(retry_cnt: u8, len: u32, rules: &[PacketRule]) -> (Completion, rctb_sim::FabricStats, Pair) {
    let mut cfg = PairConfig::default();
    cfg.rts.retry_cnt = retry_cnt;
    cfg.rts.timeout = 8;
    let mut p = Pair::new(cfg);
    for r in rules {
        p.sim.add_rule(r.clone()).unwrap();
    }
    let data = fill(&mut p.a, 0, len as usize, 3);
    post(&mut p.a, 1, SendOp::Write { remote: p.b.mr.remote(0) }, 0, len).unwrap();
    let wc = completions(&mut p.a, 1, secs(10)).pop().expect("the WRITE completes, one way or the other");
    if wc.status == WcStatus::Success {
        assert_eq!(read(&p.b, 0, len as usize), data, "seed 1: the written data");
    }
    let st = p.sim.stats();
    (wc, st, p)
}

fn first_requests_lost(n: u64) -> PacketRule {
    PacketRule::new(PacketMatch::any().requests(), PacketAction::Drop).limit(n)
}

#[test]
fn a_retry_count_of_7_is_never_spent() {
    // Twelve transmissions lost: more than 1 + 7 retries would cover.
    let (wc, st, _p) = write_through(7, 64, &[first_requests_lost(12)]);
    assert_eq!(wc.status, WcStatus::Success, "seed 1: {st:?}");
    assert_eq!((st.dropped_rule, st.timeouts, st.retransmitted), (12, 12, 12), "seed 1: {st:?}");
}

#[test]
fn a_retry_count_of_6_runs_out_after_seven_timeouts() {
    let (wc, st, _p) = write_through(6, 64, &[first_requests_lost(12)]);
    assert_eq!(wc.status, WcStatus::RetryExcErr, "seed 1: {st:?}");
    // The first transmission and 6 retries, each timed out once; the 7th
    // timeout finds the budget spent.
    assert_eq!((st.dropped_rule, st.timeouts), (7, 7), "seed 1: {st:?}");
}

fn is_seq_nak(p: &rctb_sim::Packet) -> bool {
    p.bth.opcode == Opcode::ACKNOWLEDGE && p.aeth.is_some_and(|a| a.kind() == AckKind::Nak(NakCode::PsnSequenceError))
}

#[test]
fn a_second_sequence_nak_during_a_retry_is_ignored() {
    // 3 MTU + 5 bytes: four packets. The second is lost once; the NAK the
    // third draws arrives twice. With one retry to spend, a second retry
    // started by the copy would find the budget spent (RETRY_EXC_ERR).
    let lose_second = PacketRule::new(PacketMatch::any().requests(), PacketAction::Drop).skip(1).once();
    let nak_twice = PacketRule::new(PacketMatch::any().when(is_seq_nak), PacketAction::Duplicate).once();
    let (wc, st, _p) = write_through(1, 3 * 1024 + 5, &[lose_second, nak_twice]);
    assert_eq!(wc.status, WcStatus::Success, "seed 1: {st:?}");
    assert_eq!((st.seq_naks, st.duplicated, st.seq_naks_ignored), (1, 1, 1), "seed 1: {st:?}");
    // One go-back: the three packets from the gap on, once.
    assert_eq!((st.retransmitted, st.timeouts), (3, 0), "seed 1: {st:?}");
}
