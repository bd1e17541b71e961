//! The fault verbs (hold/release, partition/repair, crash/bounce) and the
//! per-packet rules (drop, delay, duplicate, corrupt), each on the two-node
//! harness: what was delivered, dropped or duplicated, the completions, the
//! fabric's counters and the recovery the RC engine made.
//!
//! Every assertion names the seed and the command that replays it.

mod common;

use common::*;
use rctb_core::time::Duration;
use rctb_core::transport::*;
use rctb_core::wire::roce::Opcode;
use rctb_sim::{
    FaultAction, NodeId, PacketAction, PacketMatch, PacketRule, RuleStats, ScheduledFault, SimError, SimTransport,
};

/// A node id that `Sim`s of two nodes never handed out: the eighth node of
/// another fabric (ids cannot be forged, so a foreign one stands in).
fn foreign_node() -> NodeId {
    let other = rctb_sim::Sim::new(0);
    let mut last = None;
    for i in 0..8u8 {
        last = Some(other.add_node(rctb_sim::NodeConfig::new(format!("n{i}"), [10, 9, 0, i + 1].into())).unwrap());
    }
    last.unwrap()
}

fn replay(p: &Pair, test: &str) -> String {
    format!("seed {}; replay: cargo test -p rctb-sim --test faults {test}", p.cfg.seed)
}

fn write(p: &mut Pair, wr_id: u64, len: u32) -> Vec<u8> {
    let data = fill(&mut p.a, 0, len as usize, wr_id as u8);
    post(&mut p.a, wr_id, SendOp::Write { remote: p.b.mr.remote(0) }, 0, len).unwrap();
    data
}

fn statuses(c: &[Completion]) -> Vec<(u64, WcStatus)> {
    c.iter().map(|c| (c.wr_id, c.status)).collect()
}

// ---- hold / release ----

#[test]
fn hold_keeps_every_packet_and_release_delivers_them_in_order() {
    let t = "hold_keeps_every_packet_and_release_delivers_them_in_order";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    for i in 0..3 {
        post_recv(&mut p.b, i, i * 100, 100);
    }
    p.sim.hold(p.a.node, p.b.node).unwrap();
    assert!(p.sim.held(p.a.node, p.b.node).unwrap() && p.sim.held(p.b.node, p.a.node).unwrap(), "{r}");
    let mut sent = Vec::new();
    for i in 0..3u64 {
        sent.push(fill(&mut p.a, i * 100, 100, i as u8));
        post(&mut p.a, i, SendOp::Send, i * 100, 100).unwrap();
    }
    // Well inside the ACK timeout (code 14: 67 ms): nothing retransmits.
    p.sim.run_until(at(10_000_000));
    let before = p.sim.stats();
    assert_eq!((before.held, before.delivered), (3, 0), "{before:?}; {r}");
    assert!(drain(&mut p.b).is_empty() && drain(&mut p.a).is_empty(), "{r}");
    p.sim.release(p.a.node, p.b.node).unwrap();
    assert!(!p.sim.held(p.a.node, p.b.node).unwrap(), "{r}");
    let rc = completions(&mut p.b, 3, secs(1));
    assert_eq!(statuses(&rc), vec![(0, WcStatus::Success), (1, WcStatus::Success), (2, WcStatus::Success)], "{r}");
    for (i, data) in sent.iter().enumerate() {
        assert_eq!(&read(&p.b, i as u64 * 100, 100), data, "message {i}; {r}");
    }
    let sc = completions(&mut p.a, 3, secs(1));
    assert!(sc.iter().all(|c| c.status == WcStatus::Success), "{sc:?}; {r}");
    let st = p.sim.stats();
    // In order: no PSN gap, no NAK, nothing sent again; nothing lost.
    assert_eq!((st.seq_naks, st.retransmitted, st.timeouts), (0, 0, 0), "{st:?}; {r}");
    assert_eq!(st.dropped_loss + st.dropped_partition + st.dropped_rule + st.dropped_corrupt, 0, "{st:?}; {r}");
    assert_eq!(st.held, 3, "the ACKs came after the release: {st:?}; {r}");
    // The release delivers all three before b's transmit pass runs, so one
    // coalesced ACK answers them (a pass run after the first delivery would
    // have answered it alone, and the other two after).
    assert_eq!(st.acks, 1, "{st:?}; {r}");
}

#[test]
fn a_hold_catches_packets_already_on_the_wire() {
    let t = "a_hold_catches_packets_already_on_the_wire";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    let data = write(&mut p, 1, 64);
    // Transmitted at 0, it reaches b after the 1 us link latency.
    p.sim.run_until(at(500));
    assert_eq!(p.sim.stats().frames_sent, 1, "{r}");
    p.sim.hold(p.a.node, p.b.node).unwrap();
    p.sim.run_until(at(5_000_000));
    let st = p.sim.stats();
    assert_eq!((st.held, st.delivered), (1, 0), "{st:?}; {r}");
    p.sim.release(p.a.node, p.b.node).unwrap();
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 64), data, "{r}");
}

#[test]
fn a_hold_past_the_ack_timeout_loses_nothing_and_the_duplicates_settle() {
    let t = "a_hold_past_the_ack_timeout_loses_nothing_and_the_duplicates_settle";
    let mut cfg = PairConfig::default();
    cfg.rts.timeout = 10; // 4.19 ms
    let mut p = Pair::new(cfg);
    let r = replay(&p, t);
    post_recv(&mut p.b, 7, 0, 64);
    p.sim.hold(p.a.node, p.b.node).unwrap();
    let data = fill(&mut p.a, 0, 64, 9);
    post(&mut p.a, 1, SendOp::Send, 0, 64).unwrap();
    // Two timeouts pass: the requester sends the SEND twice more, kept too.
    p.sim.run_until(at(10_000_000));
    let st = p.sim.stats();
    assert_eq!((st.held, st.timeouts, st.retransmitted), (3, 2, 2), "{st:?}; {r}");
    p.sim.release(p.a.node, p.b.node).unwrap();
    let rc = completions(&mut p.b, 1, secs(1));
    assert_eq!(statuses(&rc), vec![(7, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 64), data, "{r}");
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    p.sim.run_until(p.sim.now() + secs(1));
    assert!(drain(&mut p.a).is_empty() && drain(&mut p.b).is_empty(), "one message, one completion each; {r}");
}

#[test]
fn scheduled_hold_and_release_are_the_same_verbs() {
    let t = "scheduled_hold_and_release_are_the_same_verbs";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    let (a, b) = ("a".to_string(), "b".to_string());
    p.sim.schedule(ScheduledFault { at: at(0), action: FaultAction::Hold { a: a.clone(), b: b.clone() } });
    p.sim.schedule(ScheduledFault { at: at(3_000_000), action: FaultAction::Release { a, b } });
    write(&mut p, 1, 64);
    let sc = completions(&mut p.a, 1, secs(1));
    assert_eq!(statuses(&sc), vec![(1, WcStatus::Success)], "{r}");
    let now = p.sim.now().as_nanos();
    assert!((3_000_000..3_100_000).contains(&now), "completed at {now} ns, after the release; {r}");
    assert_eq!(p.sim.stats().held, 1, "{r}");
}

// ---- partition / repair ----

#[test]
fn partition_loses_what_is_sent_and_repair_lets_the_retry_through() {
    let t = "partition_loses_what_is_sent_and_repair_lets_the_retry_through";
    let mut cfg = PairConfig::default();
    cfg.rts.timeout = 10; // 4.19 ms
    let mut p = Pair::new(cfg);
    let r = replay(&p, t);
    p.sim.partition(p.a.node, p.b.node).unwrap();
    assert!(p.sim.partitioned(p.b.node, p.a.node).unwrap(), "{r}");
    let data = write(&mut p, 1, 3000);
    p.sim.run_until(at(6_000_000));
    let st = p.sim.stats();
    // Three packets, then all three again after one timeout: all lost.
    assert_eq!((st.dropped_partition, st.delivered, st.timeouts, st.retransmitted), (6, 0, 1, 3), "{st:?}; {r}");
    p.sim.repair(p.a.node, p.b.node).unwrap();
    assert!(!p.sim.partitioned(p.a.node, p.b.node).unwrap(), "{r}");
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 3000), data, "{r}");
    assert_eq!(p.sim.stats().timeouts, 2, "{r}");
}

// ---- crash / bounce ----

#[test]
fn a_crashed_responder_is_silence_its_peer_exhausts_retry_cnt() {
    let t = "a_crashed_responder_is_silence_its_peer_exhausts_retry_cnt";
    let mut cfg = PairConfig::default();
    cfg.rts.retry_cnt = 2;
    cfg.rts.timeout = 10;
    let mut p = Pair::new(cfg);
    let r = replay(&p, t);
    assert!(p.sim.is_up(p.b.node).unwrap(), "{r}");
    p.sim.crash(p.b.node).unwrap();
    assert!(!p.sim.is_up(p.b.node).unwrap(), "{r}");
    // Its endpoint is gone: no objects, the port down, the old handles unknown.
    assert_eq!(p.sim.node_objects(p.b.node), 0, "{r}");
    assert_eq!(p.b.t.port(1).unwrap().state, PortState::Down, "{r}");
    assert!(matches!(p.b.t.poll_cq(p.b.cq, 1, &mut Vec::new()), Err(TransportError::InvalidHandle { .. })), "{r}");
    for i in 0..2 {
        write(&mut p, i, 64);
    }
    let sc = completions(&mut p.a, 2, secs(5));
    assert_eq!(statuses(&sc), vec![(0, WcStatus::RetryExcErr), (1, WcStatus::WrFlushErr)], "{r}");
    let st = p.sim.stats();
    // Both WRITEs, then both again per retry: all cut at the dead port.
    assert_eq!((st.timeouts, st.delivered, st.acks, st.retransmitted), (3, 0, 0, 4), "{st:?}; {r}");
    assert_eq!(st.dropped_partition, 6, "{st:?}; {r}");
}

#[test]
fn what_a_node_sent_before_it_crashed_still_arrives() {
    let t = "what_a_node_sent_before_it_crashed_still_arrives";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    post_recv(&mut p.a, 3, 0, 64);
    let data = fill(&mut p.b, 0, 64, 5);
    post(&mut p.b, 1, SendOp::Send, 0, 64).unwrap();
    p.sim.run_until(at(500));
    assert_eq!(p.sim.stats().frames_sent, 1, "{r}");
    p.sim.crash(p.b.node).unwrap();
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(3, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.a, 0, 64), data, "{r}");
    // Its ACK finds the port down.
    p.sim.run_until(p.sim.now() + secs(1));
    let st = p.sim.stats();
    assert_eq!((st.acks, st.dropped_partition), (1, 1), "{st:?}; {r}");
}

/// A PD, CQ, region and RC QP on `t` (after a boot), not yet connected.
fn fresh(t: &mut SimTransport) -> (CqId, QpInfo, MrInfo) {
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(64).unwrap();
    let mr = t.reg_mr(pd, 1 << 16, all).unwrap();
    let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false, srq: None }).unwrap();
    (cq, qp, mr)
}

/// RESET to RTS, connected to `peer_qpn` at `peer_ip`.
fn connect(t: &mut SimTransport, qp: QpId, peer_qpn: u32, peer_ip: &str, rq_psn: Psn, sq_psn: Psn) {
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    t.modify_qp(qp, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: all })).unwrap();
    let rtr = RtrAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: peer_qpn,
        rq_psn,
        max_dest_rd_atomic: 16,
        min_rnr_timer: RnrTimer::default(),
        av: AddressVector::new(Gid::from_ipv4(peer_ip.parse().unwrap()), 1),
    };
    t.modify_qp(qp, &QpTransition::Rtr(rtr)).unwrap();
    let rts = RtsAttr { sq_psn, timeout: 10, retry_cnt: 2, rnr_retry: 7, max_rd_atomic: 16 };
    t.modify_qp(qp, &QpTransition::Rts(rts)).unwrap();
}

#[test]
fn after_a_bounce_the_old_qp_is_gone_and_new_ones_work() {
    let t = "after_a_bounce_the_old_qp_is_gone_and_new_ones_work";
    let mut cfg = PairConfig::default();
    cfg.rts.retry_cnt = 2;
    cfg.rts.timeout = 10;
    let mut p = Pair::new(cfg);
    let r = replay(&p, t);
    let old_qpn = p.b.qp.qpn;
    p.sim.bounce(p.b.node).unwrap();
    assert!(p.sim.is_up(p.b.node).unwrap(), "{r}");
    assert_eq!(p.b.t.port(1).unwrap().state, PortState::Active, "{r}");
    assert_eq!(p.sim.node_objects(p.b.node), 0, "{r}");
    // The peer's QP still points at the old QPN: its WRITE is dropped
    // unanswered, as rxe drops a packet for an unknown QPN.
    write(&mut p, 1, 64);
    let sc = completions(&mut p.a, 1, secs(5));
    assert_eq!(statuses(&sc), vec![(1, WcStatus::RetryExcErr)], "{r}");
    let st = p.sim.stats();
    assert_eq!((st.dropped_no_qp, st.timeouts, st.acks, st.other_naks), (3, 3, 0, 0), "{st:?}; {r}");
    // The booted node hands out QPNs from the start again; new QPs on
    // both sides, connected afresh, work.
    let (_, bq, bmr) = fresh(&mut p.b.t);
    assert_eq!(bq.qpn, old_qpn, "{r}");
    let (acq, aq, amr) = fresh(&mut p.a.t);
    let (a_psn, b_psn) = (Psn::wrapping(100), Psn::wrapping(200));
    connect(&mut p.b.t, bq.id, aq.qpn, "10.0.0.1", a_psn, b_psn);
    connect(&mut p.a.t, aq.id, bq.qpn, "10.0.0.2", b_psn, a_psn);
    let data = vec![0x5a; 256];
    p.a.t.mr_write(amr.id, 0, &data).unwrap();
    let sge = [Sge::new(amr.id, 0, 256)];
    p.a.t.post_send(aq.id, &SendWr::new(9, SendOp::Write { remote: bmr.remote(0) }, &sge)).unwrap();
    let deadline = p.a.t.now() + secs(1);
    let mut out = Vec::new();
    while out.is_empty() && p.a.t.wait(&[acq], deadline).unwrap() == Readiness::Ready {
        p.a.t.poll_cq(acq, 1, &mut out).unwrap();
    }
    assert_eq!(statuses(&out), vec![(9, WcStatus::Success)], "{r}");
    let mut got = vec![0; 256];
    p.b.t.mr_read(bmr.id, 0, &mut got).unwrap();
    assert_eq!(got, data, "{r}");
}

#[test]
fn a_crashed_node_sends_nothing_until_it_boots() {
    let t = "a_crashed_node_sends_nothing_until_it_boots";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    p.sim.crash(p.b.node).unwrap();
    // An application still calling verbs on it gets nowhere: the QP it
    // makes never reaches the wire, and the boot discards it.
    let (_, qp, _) = fresh(&mut p.b.t);
    connect(&mut p.b.t, qp.id, p.a.qp.qpn, "10.0.0.1", Psn::wrapping(0), Psn::wrapping(0));
    let sge: [Sge; 0] = [];
    p.b.t.post_send(qp.id, &SendWr::new(1, SendOp::Send, &sge)).unwrap();
    p.sim.run_until(at(100_000_000));
    assert_eq!(p.sim.stats().frames_sent, 0, "{r}");
    p.sim.crash(p.b.node).unwrap(); // again: nothing changes
    assert!(!p.sim.is_up(p.b.node).unwrap(), "{r}");
    p.sim.bounce(p.b.node).unwrap();
    assert_eq!(p.sim.node_objects(p.b.node), 0, "{r}");
    p.sim.run_until(at(200_000_000));
    assert_eq!(p.sim.stats().frames_sent, 0, "{r}");
}

#[test]
fn verbs_name_an_unknown_node_and_rules_their_bad_field() {
    let p = Pair::default_pair();
    let x = foreign_node();
    assert_eq!(x.index(), 7);
    assert_eq!(p.sim.hold(p.a.node, x), Err(SimError::NoSuchNode(x)));
    assert_eq!(p.sim.release(x, p.b.node), Err(SimError::NoSuchNode(x)));
    assert_eq!(p.sim.partition(p.a.node, x), Err(SimError::NoSuchNode(x)));
    assert_eq!(p.sim.repair(p.a.node, x), Err(SimError::NoSuchNode(x)));
    assert_eq!(p.sim.crash(x), Err(SimError::NoSuchNode(x)));
    assert_eq!(p.sim.bounce(x), Err(SimError::NoSuchNode(x)));
    assert_eq!(p.sim.is_up(x), Err(SimError::NoSuchNode(x)));
    let bad = PacketRule::new(PacketMatch::any().to(x), PacketAction::Drop);
    assert_eq!(p.sim.add_rule(bad), Err(SimError::NoSuchNode(x)));
    let bad = PacketRule::new(PacketMatch::any(), PacketAction::Drop).chance(1.5);
    let err = p.sim.add_rule(bad).unwrap_err();
    assert_eq!(err, SimError::InvalidRule { field: "chance", rule: "a probability within 0..=1" });
    assert!(err.to_string().contains("chance"), "{err}");
    let bad = PacketRule::new(PacketMatch::any(), PacketAction::Drop).chance(f64::NAN);
    assert!(matches!(p.sim.add_rule(bad), Err(SimError::InvalidRule { field: "chance", .. })));
    let bad = PacketRule::new(PacketMatch::any(), PacketAction::Delay(Duration::from_secs(7200)));
    assert!(matches!(p.sim.add_rule(bad), Err(SimError::InvalidRule { field: "action.delay", .. })));
    assert_eq!(p.sim.stats(), Default::default(), "nothing was applied");
}

// ---- packet rules ----

/// `a`'s first PSN (the harness starts it 16 below the 24-bit wrap).
fn a_psn(p: &Pair, n: u32) -> Psn {
    p.cfg.a_psn.add(n)
}

#[test]
fn a_drop_rule_on_one_psn_makes_a_nak_and_go_back_n() {
    let t = "a_drop_rule_on_one_psn_makes_a_nak_and_go_back_n";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    let m = PacketMatch::any().from(p.a.node).to(p.b.node).dest_qp(p.b.qp.qpn).psn(a_psn(&p, 1));
    let rule = p.sim.add_rule(PacketRule::new(m, PacketAction::Drop).once()).unwrap();
    let data = write(&mut p, 1, 3 * 1024 + 5);
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 3 * 1024 + 5), data, "{r}");
    let st = p.sim.stats();
    // PSN+2 finds the gap: one NAK; PSN+1..+3 go again.
    assert_eq!((st.dropped_rule, st.seq_naks, st.retransmitted, st.timeouts), (1, 1, 3, 0), "{st:?}; {r}");
    // The first copy matched and was dropped; the retransmission matched, over the limit.
    assert_eq!(p.sim.rule_stats(rule), Some(RuleStats { matched: 2, applied: 1 }), "{r}");
    assert_eq!(p.sim.remove_rule(rule), Some(RuleStats { matched: 2, applied: 1 }), "{r}");
    assert_eq!(p.sim.rule_stats(rule), None, "{r}");
}

#[test]
fn dropping_an_ack_by_opcode_makes_the_requester_time_out() {
    let t = "dropping_an_ack_by_opcode_makes_the_requester_time_out";
    let mut cfg = PairConfig::default();
    cfg.rts.timeout = 12; // 16.8 ms
    let mut p = Pair::new(cfg);
    let r = replay(&p, t);
    let m = PacketMatch::any().opcode(Opcode::ACKNOWLEDGE).dest_qp(p.a.qp.qpn);
    let rule = p.sim.add_rule(PacketRule::new(m, PacketAction::Drop).once()).unwrap();
    let data = write(&mut p, 1, 64);
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 64), data, "{r}");
    let st = p.sim.stats();
    // The duplicate WRITE is ACKed again, not written twice.
    assert_eq!((st.dropped_rule, st.timeouts, st.retransmitted, st.acks), (1, 1, 1, 2), "{st:?}; {r}");
    let done = p.sim.now().as_nanos();
    assert!(done >= 4096 << 12, "completed at {done} ns: before the ACK timeout; {r}");
    assert_eq!(p.sim.rule_stats(rule).map(|s| s.applied), Some(1), "{r}");
}

#[test]
fn a_delay_rule_holds_one_packet_back_and_costs_no_retransmission() {
    let t = "a_delay_rule_holds_one_packet_back_and_costs_no_retransmission";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    let m = PacketMatch::any().from(p.a.node).opcode(Opcode::WRITE_ONLY);
    p.sim.add_rule(PacketRule::new(m, PacketAction::Delay(Duration::from_millis(5)))).unwrap();
    let data = write(&mut p, 1, 64);
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    let done = p.sim.now().as_nanos();
    assert!((5_000_000..5_100_000).contains(&done), "completed at {done} ns; {r}");
    assert_eq!(read(&p.b, 0, 64), data, "{r}");
    let st = p.sim.stats();
    assert_eq!((st.delayed, st.retransmitted, st.timeouts, st.delivered), (1, 0, 0, 2), "{st:?}; {r}");
}

#[test]
fn a_delayed_first_packet_is_overtaken_and_the_gap_recovers() {
    let t = "a_delayed_first_packet_is_overtaken_and_the_gap_recovers";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    let m = PacketMatch::any().psn(a_psn(&p, 0)).opcode(Opcode::WRITE_FIRST);
    p.sim.add_rule(PacketRule::new(m, PacketAction::Delay(Duration::from_micros(50))).once()).unwrap();
    let data = write(&mut p, 1, 3 * 1024 + 5);
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 3 * 1024 + 5), data, "{r}");
    let st = p.sim.stats();
    // PSN+1 arrives first: a NAK for PSN+0, all four sent again; the late
    // first copy is a duplicate by then, or fills the gap.
    assert_eq!(st.delayed, 1, "{st:?}; {r}");
    assert_eq!(st.seq_naks, 1, "{st:?}; {r}");
    assert_eq!(st.retransmitted, 4, "{st:?}; {r}");
}

#[test]
fn a_duplicate_rule_delivers_twice_and_completes_once() {
    let t = "a_duplicate_rule_delivers_twice_and_completes_once";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    post_recv(&mut p.b, 1, 0, 8192);
    post_recv(&mut p.b, 2, 8192, 8192);
    let rule =
        p.sim.add_rule(PacketRule::new(PacketMatch::any().from(p.a.node).requests(), PacketAction::Duplicate)).unwrap();
    let data = fill(&mut p.a, 0, 3 * 1024 + 5, 3);
    post(&mut p.a, 1, SendOp::Send, 0, 3 * 1024 + 5).unwrap();
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    let rc = completions(&mut p.b, 1, secs(1));
    assert_eq!(statuses(&rc), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(rc[0].byte_len, 3 * 1024 + 5, "{r}");
    assert_eq!(read(&p.b, 0, 3 * 1024 + 5), data, "{r}");
    p.sim.run_until(p.sim.now() + secs(1));
    assert!(drain(&mut p.a).is_empty() && drain(&mut p.b).is_empty(), "duplicates completed again; {r}");
    let st = p.sim.stats();
    assert_eq!((st.duplicated, st.retransmitted), (4, 0), "{st:?}; {r}");
    // 4 requests sent once and delivered twice; 5 ACKs (the message's,
    // and the re-ACKs of duplicates), each delivered once.
    assert_eq!((st.frames_sent, st.acks, st.delivered), (9, 5, 13), "{st:?}; {r}");
    assert_eq!(p.sim.rule_stats(rule), Some(RuleStats { matched: 4, applied: 4 }), "{r}");
}

#[test]
fn a_corrupt_packet_fails_its_icrc_and_the_receiver_drops_it() {
    let t = "a_corrupt_packet_fails_its_icrc_and_the_receiver_drops_it";
    let mut cfg = PairConfig::default();
    cfg.rts.timeout = 10;
    let mut p = Pair::new(cfg);
    let r = replay(&p, t);
    p.sim.enable_pcap();
    let m = PacketMatch::any().from(p.a.node).when(|pkt| pkt.bth.opcode == Opcode::WRITE_ONLY);
    p.sim.add_rule(PacketRule::new(m, PacketAction::Corrupt).once()).unwrap();
    let data = write(&mut p, 1, 64);
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 64), data, "{r}");
    let st = p.sim.stats();
    // Dropped silently (no NAK): the requester's timer recovers it.
    assert_eq!((st.dropped_corrupt, st.seq_naks, st.other_naks), (1, 0, 0), "{st:?}; {r}");
    assert_eq!((st.timeouts, st.retransmitted, st.delivered), (1, 1, 2), "{st:?}; {r}");
    assert!(p.sim.take_pcap().is_some_and(|b| !b.is_empty()), "{r}");
}

#[test]
fn skip_limit_and_the_first_rule_that_acts() {
    let t = "skip_limit_and_the_first_rule_that_acts";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    for i in 0..8 {
        post_recv(&mut p.b, i, i * 64, 64);
    }
    let sends = || PacketMatch::any().opcode(Opcode::SEND_ONLY);
    // Lets 2 by, then duplicates 3; the second rule sees what the first
    // did not act on.
    let dup = p.sim.add_rule(PacketRule::new(sends(), PacketAction::Duplicate).skip(2).limit(3)).unwrap();
    let delay = p.sim.add_rule(PacketRule::new(sends(), PacketAction::Delay(Duration::from_nanos(10)))).unwrap();
    for i in 0..8u64 {
        post(&mut p.a, i, SendOp::Send, 0, 64).unwrap();
        assert_eq!(completions(&mut p.a, 1, secs(1)).len(), 1, "{r}");
    }
    assert_eq!(p.sim.rule_stats(dup), Some(RuleStats { matched: 8, applied: 3 }), "{r}");
    assert_eq!(p.sim.rule_stats(delay), Some(RuleStats { matched: 5, applied: 5 }), "{r}");
    let st = p.sim.stats();
    assert_eq!((st.duplicated, st.delayed), (3, 5), "{st:?}; {r}");
    assert_eq!(completions(&mut p.b, 8, secs(1)).len(), 8, "{r}");
    p.sim.clear_rules();
    assert_eq!(p.sim.rule_stats(dup), None, "{r}");
}

/// Drops a third of `a`'s request packets at random; returns the stats.
fn chancy(seed: u64) -> rctb_sim::FabricStats {
    let mut p = Pair::new(PairConfig { seed, ..PairConfig::default() });
    let m = PacketMatch::any().from(p.a.node).requests();
    p.sim.add_rule(PacketRule::new(m, PacketAction::Drop).chance(0.3)).unwrap();
    let data = write(&mut p, 1, 64 * 1024);
    let sc = completions(&mut p.a, 1, secs(10));
    let r = replay(&p, "a_rule_with_a_chance_draws_from_the_seed");
    assert_eq!(statuses(&sc), vec![(1, WcStatus::Success)], "{r}");
    assert_eq!(read(&p.b, 0, 64 * 1024), data, "{r}");
    p.sim.stats()
}

#[test]
fn a_rule_with_a_chance_draws_from_the_seed() {
    let (one, again, other) = (chancy(5), chancy(5), chancy(6));
    assert!(one.dropped_rule > 0 && one.retransmitted > 0, "{one:?}; seed 5");
    assert_eq!(one, again, "seed 5 twice; replay: cargo test -p rctb-sim --test faults chance");
    assert_ne!(one, other, "seeds 5 and 6 drew alike");
}

#[test]
fn a_removed_rule_acts_no_more() {
    let t = "a_removed_rule_acts_no_more";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    let rule = p.sim.add_rule(PacketRule::new(PacketMatch::any().from(p.a.node), PacketAction::Drop)).unwrap();
    p.sim.remove_rule(rule).unwrap();
    write(&mut p, 1, 64);
    assert_eq!(statuses(&completions(&mut p.a, 1, secs(1))), vec![(1, WcStatus::Success)], "{r}");
    let st = p.sim.stats();
    assert_eq!((st.dropped_rule, st.delivered), (0, 2), "{st:?}; {r}");
}

// ---- CM messages meet the verbs too ----

fn cm_init(t: &mut SimTransport) -> QpInit {
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(16).unwrap();
    QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false, srq: None }
}

#[test]
fn a_hold_keeps_cm_messages_and_release_lets_the_connection_finish() {
    let replay = "seed 9; replay: cargo test -p rctb-sim --test faults a_hold_keeps_cm_messages";
    let sim = rctb_sim::Sim::new(9);
    let na = sim.add_node(rctb_sim::NodeConfig::new("client", "10.1.0.1".parse().unwrap())).unwrap();
    let nb = sim.add_node(rctb_sim::NodeConfig::new("server", "10.1.0.2".parse().unwrap())).unwrap();
    let (mut ta, mut tb) = (sim.transport(na), sim.transport(nb));
    let listener = tb.cm_listen(4420).unwrap();
    let (init_a, init_b) = (cm_init(&mut ta), cm_init(&mut tb));
    sim.hold(na, nb).unwrap();
    let remote = "10.1.0.2:4420".parse().unwrap();
    let (conn_a, qp_a) = ta.cm_connect(&ConnectParams::new(remote, init_a, b"hi".to_vec())).unwrap();
    // Inside the CM timeout (100 ms): the REQ waits in the hold.
    sim.run_until(at(50_000_000));
    assert_eq!(tb.cm_poll(), None, "{replay}");
    sim.release(na, nb).unwrap();
    let far = rctb_core::Instant::FAR_FUTURE;
    tb.wait(&[], far).unwrap();
    let Some(CmEvent::ConnectRequest { listener: l, conn, .. }) = tb.cm_poll() else { panic!("no REQ; {replay}") };
    assert_eq!(l, listener, "{replay}");
    tb.cm_accept(conn, &AcceptParams::new(init_b, Vec::new())).unwrap();
    ta.wait(&[], far).unwrap();
    assert!(
        matches!(ta.cm_poll(), Some(CmEvent::Established { conn, qp, .. }) if conn == conn_a && qp == qp_a),
        "{replay}"
    );
}

#[test]
fn a_connect_to_a_crashed_node_times_out() {
    let replay = "seed 9; replay: cargo test -p rctb-sim --test faults a_connect_to_a_crashed_node_times_out";
    let sim = rctb_sim::Sim::new(9);
    let na = sim.add_node(rctb_sim::NodeConfig::new("client", "10.1.0.1".parse().unwrap())).unwrap();
    let nb = sim.add_node(rctb_sim::NodeConfig::new("server", "10.1.0.2".parse().unwrap())).unwrap();
    let (mut ta, mut tb) = (sim.transport(na), sim.transport(nb));
    tb.cm_listen(4420).unwrap();
    let init_a = cm_init(&mut ta);
    sim.crash(nb).unwrap();
    let remote = "10.1.0.2:4420".parse().unwrap();
    let (conn_a, _) = ta.cm_connect(&ConnectParams::new(remote, init_a, Vec::new())).unwrap();
    ta.wait(&[], rctb_core::Instant::FAR_FUTURE).unwrap();
    let ev = ta.cm_poll();
    assert!(
        matches!(ev, Some(CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout }) if conn == conn_a),
        "{ev:?}; {replay}"
    );
    // The listener died with the node: after a boot nobody listens.
    sim.bounce(nb).unwrap();
    let init_a = cm_init(&mut ta);
    let (conn_a, _) = ta.cm_connect(&ConnectParams::new(remote, init_a, Vec::new())).unwrap();
    ta.wait(&[], rctb_core::Instant::FAR_FUTURE).unwrap();
    let ev = ta.cm_poll();
    assert!(
        matches!(ev, Some(CmEvent::Unreachable { conn, reason: UnreachableReason::NoListener }) if conn == conn_a),
        "{ev:?}; {replay}"
    );
}

/// Counts its runs.
struct Counter(std::rc::Rc<std::cell::Cell<u32>>);

impl rctb_sim::Actor for Counter {
    fn run(&mut self, _t: &mut SimTransport) -> Option<rctb_core::Instant> {
        self.0.set(self.0.get() + 1);
        None
    }
}

#[test]
fn a_crashed_nodes_actors_do_not_run_until_it_boots() {
    let t = "a_crashed_nodes_actors_do_not_run_until_it_boots";
    let mut p = Pair::default_pair();
    let r = replay(&p, t);
    let (on_a, on_b) = (std::rc::Rc::new(std::cell::Cell::new(0)), std::rc::Rc::new(std::cell::Cell::new(0)));
    p.sim.add_actor(p.a.node, Box::new(Counter(on_a.clone())));
    p.sim.add_actor(p.b.node, Box::new(Counter(on_b.clone())));
    p.sim.crash(p.b.node).unwrap();
    let (a0, b0) = (on_a.get(), on_b.get());
    write(&mut p, 1, 64);
    p.sim.run_until(at(1_000_000));
    assert!(on_a.get() > a0, "{r}");
    assert_eq!(on_b.get(), b0, "{r}");
    p.sim.bounce(p.b.node).unwrap();
    p.sim.run_until(at(200_000_000));
    assert!(on_b.get() > b0, "{r}");
}
