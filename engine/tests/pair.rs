//! Two endpoints driven in memory, as a sans-IO owner drives them: the
//! test is the wire and the clock. Dropping a packet is one line.

use std::net::Ipv4Addr;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_engine::{CmMessage, Packet};

const LATENCY: Duration = Duration::from_micros(1);

mod common;

use common::Side;

const ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn side(name: &str, ip: Ipv4Addr, seed: u64) -> Side {
    common::side(name, ip, seed, 1 << 16, ACCESS)
}

fn connected() -> (Side, Side) {
    common::connected(1 << 16, ACCESS, 1)
}

/// Runs both endpoints until neither has anything to send or a timer
/// before `until`; `lose` decides which of a's packets the wire drops.
fn drive(
    a: &mut Side,
    b: &mut Side,
    mut now: Instant,
    until: Instant,
    lose: &mut dyn FnMut(&Packet) -> bool,
) -> Instant {
    let mut wire: Vec<(Instant, bool, Packet)> = Vec::new();
    loop {
        for (from_a, s) in [(true, &mut *a), (false, &mut *b)] {
            let mut buf = Vec::new();
            while let Some(tx) = s.ep.poll_transmit(now, &mut buf) {
                if !(from_a && lose(&tx.packet)) {
                    wire.push((now + LATENCY, from_a, tx.packet));
                }
            }
        }
        let next_timer = [a.ep.poll_timeout(), b.ep.poll_timeout()].into_iter().flatten().min();
        let next_frame = wire.iter().map(|(t, _, _)| *t).min();
        let Some(next) = [next_timer, next_frame].into_iter().flatten().min() else { return now };
        if next > until {
            return now;
        }
        now = now.max(next);
        let (due, later): (Vec<_>, Vec<_>) = wire.drain(..).partition(|(t, _, _)| *t <= now);
        wire = later;
        for (_, from_a, pkt) in due {
            let to = if from_a { &mut *b } else { &mut *a };
            to.ep.handle_packet(now, &pkt).unwrap();
        }
        a.ep.handle_timeout(now);
        b.ep.handle_timeout(now);
    }
}

fn send(a: &mut Side, b: &mut Side, len: u32) {
    b.ep.post_recv(Instant::ZERO, b.qp.id, &RecvWr::new(2, &[Sge::new(b.mr.id, 0, len)])).unwrap();
    a.ep.mr_write(a.mr.id, 0, &vec![0x5a; len as usize]).unwrap();
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(1, SendOp::Send, &[Sge::new(a.mr.id, 0, len)])).unwrap();
}

fn completions(s: &mut Side) -> Vec<Completion> {
    let mut out = Vec::new();
    s.ep.poll_cq(s.cq, 16, &mut out).unwrap();
    out
}

#[test]
fn a_send_crosses_and_both_sides_complete() {
    let (mut a, mut b) = connected();
    send(&mut a, &mut b, 3000);
    drive(&mut a, &mut b, Instant::ZERO, Instant::from_nanos(1_000_000), &mut |_| false);
    let (wa, wb) = (completions(&mut a), completions(&mut b));
    assert_eq!(wa.len(), 1, "{wa:?}");
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(wb.len(), 1, "{wb:?}");
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 3000));
    let mut got = vec![0; 3000];
    b.ep.mr_read(b.mr.id, 0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0x5a));
    assert_eq!(a.ep.counters().timeouts, 0);
}

#[test]
fn a_lost_last_packet_is_sent_again_when_the_ack_timer_fires() {
    let (mut a, mut b) = connected();
    send(&mut a, &mut b, 3000);
    // The third (last) packet of the message is lost once: no NAK can
    // report it, so only the ACK timer (code 14: about 67 ms) recovers it.
    let mut lost = false;
    let end = drive(&mut a, &mut b, Instant::ZERO, Instant::from_nanos(1_000_000_000), &mut |p| {
        let drop = !lost && p.bth.psn.get() == 2;
        lost |= drop;
        drop
    });
    assert!(lost);
    let wa = completions(&mut a);
    assert_eq!(wa.len(), 1, "{wa:?}");
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(a.ep.counters().timeouts, 1);
    assert!(a.ep.counters().retransmitted >= 1);
    assert!(end >= Instant::from_nanos(67_000_000), "recovered at {end:?}, before the timer");
}

#[test]
fn cm_connects_through_messages_the_owner_carries() {
    let (ia, ib) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let mut a = side("a", ia, 1);
    let mut b = side("b", ib, 2);
    let now = Instant::ZERO;
    b.ep.cm_listen(4420).unwrap();
    let params = ConnectParams::new(std::net::SocketAddrV4::new(ib, 4420), a.qp_init(), Vec::new());
    let (conn, _qp) = a.ep.cm_connect(now, &params).unwrap();
    let req = a.ep.poll_cm_transmit().unwrap();
    assert_eq!(req.dst, ib);
    assert!(matches!(req.msg, CmMessage::Req { .. }));
    b.ep.handle_cm(now, ia, req.msg);
    let Some(CmEvent::ConnectRequest { conn: bconn, .. }) = b.ep.poll_cm_event() else { panic!("no request") };
    let init = b.qp_init();
    b.ep.cm_accept(now, bconn, &AcceptParams::new(init, Vec::new())).unwrap();
    let rep = b.ep.poll_cm_transmit().unwrap();
    a.ep.handle_cm(now, ib, rep.msg);
    assert!(matches!(a.ep.poll_cm_event(), Some(CmEvent::Established { conn: c, .. }) if c == conn));
    let rtu = a.ep.poll_cm_transmit().unwrap();
    b.ep.handle_cm(now, ia, rtu.msg);
    assert!(matches!(b.ep.poll_cm_event(), Some(CmEvent::Established { .. })));
    // The REP timer is disarmed: nothing times out later.
    a.ep.handle_timeout(now + Duration::from_secs(1));
    assert_eq!(a.ep.poll_cm_event(), None);
}

#[test]
fn an_unanswered_req_is_sent_again_then_times_out() {
    let mut a = side("a", Ipv4Addr::new(10, 0, 0, 1), 1);
    let params = ConnectParams::new("10.0.0.9:4420".parse().unwrap(), a.qp_init(), Vec::new());
    let (conn, _) = a.ep.cm_connect(Instant::ZERO, &params).unwrap();
    let first = a.ep.poll_cm_transmit().expect("the REQ");
    let step = rctb_engine::cm_time(rctb_engine::CM_RESPONSE_TIMEOUT);
    for n in 1..=rctb_engine::CM_MAX_RETRIES as u64 {
        let t = a.ep.poll_timeout().unwrap();
        assert_eq!(t, Instant::ZERO + step * n as u32);
        a.ep.handle_timeout(Instant::from_nanos(t.as_nanos() - 1));
        assert!(a.ep.poll_cm_transmit().is_none(), "retry {n} went out early");
        a.ep.handle_timeout(t);
        assert_eq!(a.ep.poll_cm_transmit().as_ref(), Some(&first), "retry {n} is the same REQ");
        assert_eq!(a.ep.poll_cm_event(), None);
    }
    let t = a.ep.poll_timeout().unwrap();
    assert_eq!(t, Instant::ZERO + rctb_engine::CM_TIMEOUT);
    a.ep.handle_timeout(t);
    let ev = a.ep.poll_cm_event();
    assert_eq!(ev, Some(CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout }));
    // The peer hears that we gave up (a REJ "timeout" naming our side).
    let rej = a.ep.poll_cm_transmit().expect("a REJ");
    assert!(matches!(rej.msg, CmMessage::Rej { reason: 4, src_conn, .. } if src_conn == conn), "{rej:?}");
    assert_eq!(a.ep.counters().cm_retransmitted, rctb_engine::CM_MAX_RETRIES as u64);
    assert_eq!(a.ep.counters().cm_timeouts, 1);
}

impl Side {
    fn qp_init(&mut self) -> QpInit {
        let pd = self.ep.alloc_pd().unwrap();
        let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, ..QpCaps::default() };
        QpInit { pd, send_cq: self.cq, recv_cq: self.cq, caps, sq_sig_all: true, srq: None }
    }
}
