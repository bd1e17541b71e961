//! A busy poller and the clock. Where the fine clock traps (a guest whose
//! clock source has no vDSO reader), reading it on every empty poll cost
//! more than the poll: an empty poll reads it only when a timer may be due
//! by the coarse clock, and a timer still fires for a program that does
//! nothing but poll.

use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::transport::{ConnectParams, QpCaps, QpInit};
use rctb_udp::{Driver, UdpConfig};

const ADDR: Ipv4Addr = Ipv4Addr::new(127, 93, 0, 1);
/// Nobody listens there: a REQ to it is never answered.
const SILENT: Ipv4Addr = Ipv4Addr::new(127, 93, 0, 2);

#[test]
fn empty_polls_read_the_fine_clock_only_when_a_timer_may_be_due() {
    let mut d = Driver::new(1);
    let i = d.add(UdpConfig::new("a", ADDR)).unwrap_or_else(|e| panic!("bind {ADDR}: {e}"));

    // No timer and no delayed frame: a thousand empty polls, no reading.
    let before = d.engine_stats().clock_reads;
    for _ in 0..1000 {
        assert_eq!(d.poll_receive().unwrap(), 0);
    }
    assert_eq!(d.engine_stats().clock_reads, before, "empty polls with nothing pending read the clock");

    // A REQ nobody answers arms the CM's retransmission.
    let (engine, now) = d.engine_mut(i);
    let pd = engine.alloc_pd().unwrap();
    let cq = engine.create_cq(16).unwrap();
    let qp = QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: true, srq: None };
    engine.cm_connect(now, &ConnectParams::new(SocketAddrV4::new(SILENT, 4420), qp, Vec::new())).unwrap();
    d.turn().unwrap();
    assert_eq!(d.engine(i).counters().cm_retransmitted, 0);
    let due = d.next_wake().expect("the REQ's retransmission is armed");

    // Polls alone, until the clock passes the deadline: the REQ goes out
    // again (the timer ran from a poll), and the polls near the deadline
    // read the fine clock. Bounded: the CM's first retry comes within
    // seconds.
    let reads = d.engine_stats().clock_reads;
    let mut polls = 0u64;
    while d.engine(i).counters().cm_retransmitted == 0 {
        d.poll_receive().unwrap();
        d.poll_flush().unwrap();
        polls += 1;
        assert!(polls < 50_000_000, "no retransmission after {polls} polls (due at {due:?}, now {:?})", d.clock_now());
    }
    assert!(d.clock_now() >= due);
    assert!(d.engine_stats().clock_reads > reads, "the timer ran without a fine reading");
}
