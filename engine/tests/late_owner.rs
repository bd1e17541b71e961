//! The engine under a late owner: driven the way `rctb-udp`'s reactor
//! drives it (frames that arrived first, then the timers that fell due,
//! then at most a chunk of frames taken), by a host that is slow and
//! sometimes stalls (a loaded VM), against a prompt peer (rxe).
//!
//! `a` is our endpoint (it runs only when its host gets to it), `b` stands
//! in for rxe (it answers as soon as a frame arrives). The time is the
//! test's own, so every run is the same. These are the engine's promises
//! to a late owner (see `Endpoint`): a frame not yet taken stays in its QP
//! with no ACK timer running for it, and a late timer fires once.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_core::wire::roce::Opcode;
use rctb_engine::{Endpoint, EndpointConfig, Packet};

/// The PSN the conformance suite starts at: a 1 MiB message crosses the wrap.
const START_PSN: u32 = 0x00FF_FF00;
const MIB: u32 = 1 << 20;
/// One way on the wire.
const LATENCY: Duration = Duration::from_micros(20);
/// Frames the owner takes from the engine per turn (what `rctb-udp`'s
/// reactor sends before it reads its sockets again).
const TX_CHUNK: usize = 64;

struct End {
    ep: Endpoint,
    cq: CqId,
    qp: QpInfo,
    mr: MrInfo,
}

fn end(seed: u64, name: &str, ip: Ipv4Addr) -> End {
    let mut ep = Endpoint::new(EndpointConfig::new(name, ip), Box::new(ChaCha8Rng::seed_from_u64(seed)));
    let pd = ep.alloc_pd().unwrap();
    let cq = ep.create_cq(64).unwrap();
    let mr = ep.reg_mr(pd, MIB as u64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = ep.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: None }).unwrap();
    End { ep, cq, qp, mr }
}

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// `a` and `b` connected as the conformance suite connects them: MTU 1024,
/// ACK timeout 14 (67 ms), retry_cnt 7, both directions starting at
/// [`START_PSN`].
fn connect(seed: u64) -> (End, End) {
    let mut a = end(seed, "a", A_IP);
    let mut b = end(seed ^ 1, "b", B_IP);
    let psn = Psn::wrapping(START_PSN);
    let (aq, bq) = (a.qp.qpn, b.qp.qpn);
    for (s, peer_qpn, peer_ip) in [(&mut a, bq, B_IP), (&mut b, aq, A_IP)] {
        let now = Instant::ZERO;
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).unwrap();
        let rtr = RtrAttr {
            path_mtu: Mtu::Mtu1024,
            dest_qpn: peer_qpn,
            rq_psn: psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::from_code(1).unwrap(),
            av: AddressVector::new(Gid::from_ipv4(peer_ip), 1),
        };
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Rtr(rtr)).unwrap();
        let rts = RtsAttr { sq_psn: psn, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 };
        s.ep.modify_qp(now, s.qp.id, &QpTransition::Rts(rts)).unwrap();
    }
    (a, b)
}

/// One turn of an owner at `now`: the frames that arrived, then the timers
/// that fell due (late ones fire once, now), then up to `max` frames taken.
fn turn(ep: &mut Endpoint, now: Instant, arrived: &mut Vec<Packet>, max: usize) -> Vec<Packet> {
    for pkt in arrived.drain(..) {
        let _ = ep.handle_packet(now, &pkt);
    }
    if ep.poll_timeout().is_some_and(|t| t <= now) {
        ep.handle_timeout(now);
    }
    let mut out = Vec::new();
    while out.len() < max {
        let Some(tx) = ep.poll_transmit(now, &mut Vec::new()) else { break };
        out.push(tx.packet);
    }
    out
}

/// How `a`'s host behaves: each frame it puts on the wire costs `tx_cost`,
/// and after its `n`th frame it freezes for the given time (the VM was
/// descheduled), once per entry.
struct Host {
    tx_cost: Duration,
    stalls: Vec<(u64, Duration)>,
}

/// What the run produced.
#[derive(Debug)]
struct Outcome {
    a_completions: Vec<Completion>,
    b_completions: Vec<Completion>,
    /// Request frames `a` put on the wire, in order, with the time.
    a_psns: Vec<(Instant, u32)>,
    timeouts: u64,
    retransmitted: u64,
}

/// Frames `b` answers with right now (it is prompt: rxe in the kernel).
fn b_receives(b: &mut End, at: Instant, pkt: Packet, to_a: &mut VecDeque<(Instant, Packet)>) {
    let out = turn(&mut b.ep, at, &mut vec![pkt], usize::MAX);
    to_a.extend(out.into_iter().map(|p| (at + LATENCY, p)));
}

/// Runs `a`'s host the way `rctb-udp`'s reactor turns (read the socket,
/// one turn of the engine, the chunk it took onto the wire), until `a` has
/// `want` completions or `limit` passed.
fn run(a: &mut End, b: &mut End, host: &Host, want: usize, limit: Duration) -> Outcome {
    let start = Instant::ZERO;
    let mut now = start;
    let mut socket: VecDeque<(Instant, Packet)> = VecDeque::new();
    let mut arrived = Vec::new();
    let mut out = Outcome {
        a_completions: Vec::new(),
        b_completions: Vec::new(),
        a_psns: Vec::new(),
        timeouts: 0,
        retransmitted: 0,
    };
    let mut sent = 0u64;
    while out.a_completions.len() < want && now - start < limit {
        while socket.front().is_some_and(|(at, _)| *at <= now) {
            arrived.push(socket.pop_front().unwrap().1);
        }
        let received = arrived.len();
        let taken = turn(&mut a.ep, now, &mut arrived, TX_CHUNK);
        let n = taken.len();
        for pkt in taken {
            sent += 1;
            now += host.tx_cost;
            if pkt.bth.opcode != Opcode::ACKNOWLEDGE {
                out.a_psns.push((now, pkt.bth.psn.get()));
            }
            b_receives(b, now + LATENCY, pkt, &mut socket);
            if let Some(&(_, stall)) = host.stalls.iter().find(|(k, _)| *k == sent) {
                now += stall;
            }
        }
        a.ep.poll_cq(a.cq, 16, &mut out.a_completions).unwrap();
        if n == 0 && received == 0 {
            // Idle: the host sleeps until a frame arrives or a timer is due.
            let next = [a.ep.poll_timeout(), socket.front().map(|(at, _)| *at)].into_iter().flatten().min();
            match next {
                Some(t) if t > now => now = t,
                Some(_) => {}
                None => break,
            }
        }
    }
    b.ep.poll_cq(b.cq, 16, &mut out.b_completions).unwrap();
    let c = a.ep.counters();
    out.timeouts = c.timeouts;
    out.retransmitted = c.retransmitted;
    out
}

fn replay_hint(name: &str) -> String {
    format!("replay: cargo test -p rctb-engine --test late_owner {name}")
}

/// The VM failure of `udp-to-rxe/send/1mib` (RETRY_EXC_ERR against rxe on a
/// loaded host), made deterministic: the host sends a chunk, freezes for
/// longer than several ACK timeouts, and keeps being slow. A real NIC's
/// timer starts when a frame leaves, fires once however late it is handled,
/// and never beats a response already waiting to be read; so the message
/// must arrive intact and complete with SUCCESS after at most a couple of
/// timeouts, and the requester must not resend the message over and over.
#[test]
fn lagging_host_sends_one_mib_across_the_psn_wrap_without_retry_exhaustion() {
    let seed = 7;
    let (mut a, mut b) = connect(seed);
    let data: Vec<u8> = (0..MIB).map(|i| (i as u8).wrapping_mul(37).wrapping_add((i >> 10) as u8)).collect();
    a.ep.mr_write(a.mr.id, 0, &data).unwrap();
    b.ep.post_recv(Instant::ZERO, b.qp.id, &RecvWr::new(2, &[Sge::new(b.mr.id, 0, MIB)])).unwrap();
    a.ep.post_send(Instant::ZERO, a.qp.id, &SendWr::new(1, SendOp::Send, &[Sge::new(a.mr.id, 0, MIB)])).unwrap();
    // The capture's pattern: a 450 ms freeze right after the first 64
    // frames, then freezes of 136 and 213 ms, 0.2 ms per frame otherwise.
    let host = Host {
        tx_cost: Duration::from_micros(200),
        stalls: vec![
            (64, Duration::from_millis(450)),
            (128, Duration::from_millis(136)),
            (176, Duration::from_millis(213)),
        ],
    };
    let out = run(&mut a, &mut b, &host, 1, Duration::from_secs(30));
    let hint = replay_hint("lagging_host_sends_one_mib_across_the_psn_wrap_without_retry_exhaustion");
    let ctx = format!(
        "seed {seed}; {hint}; a: {:?}; b: {:?}; timeouts {}, retransmitted {}, {} request frames",
        out.a_completions,
        out.b_completions,
        out.timeouts,
        out.retransmitted,
        out.a_psns.len()
    );
    assert_eq!(out.a_completions.len(), 1, "{ctx}");
    assert_eq!(out.a_completions[0].status, WcStatus::Success, "{ctx}");
    assert_eq!(out.b_completions.len(), 1, "{ctx}");
    assert_eq!(out.b_completions[0].status, WcStatus::Success, "{ctx}");
    assert_eq!(out.b_completions[0].byte_len, MIB, "{ctx}");
    let mut got = vec![0; MIB as usize];
    b.ep.mr_read(b.mr.id, 0, &mut got).unwrap();
    assert!(got == data, "payload differs; {ctx}");
    // Three freezes longer than the 67 ms timer: at most one timeout each.
    assert!(out.timeouts <= 3, "{ctx}");
    // Each timeout resends at most what was unacknowledged and on the wire
    // (a chunk and the chunk the host had taken), not the whole message.
    assert!(out.retransmitted <= 3 * 2 * TX_CHUNK as u64, "{ctx}");
}

/// Every frame `a` transmits at `now`, after the frames that `arrived`.
fn drain_a(a: &mut End, now: Instant, arrived: &mut Vec<Packet>) -> Vec<Packet> {
    turn(&mut a.ep, now, arrived, usize::MAX)
}

/// IBA 9.7.4.1.3 / rxe: an ACK for any PSN in [una, highest sent) counts,
/// also while a go-back is under way. Here the first flight's ACKs are late:
/// the ACK timeout rewinds the requester to the message's first PSN, then an
/// ACK for most of the message arrives. The requester must resume after it,
/// not resend what rxe already has.
#[test]
fn ack_during_go_back_moves_the_transmit_point_past_what_it_covers() {
    let seed = 11;
    let hint = replay_hint("ack_during_go_back_moves_the_transmit_point_past_what_it_covers");
    let (mut a, mut b) = connect(seed);
    let t0 = Instant::ZERO;
    b.ep.post_recv(t0, b.qp.id, &RecvWr::new(2, &[Sge::new(b.mr.id, 0, MIB)])).unwrap();
    a.ep.post_send(t0, a.qp.id, &SendWr::new(1, SendOp::Send, &[Sge::new(a.mr.id, 0, MIB)])).unwrap();
    let first = Psn::wrapping(START_PSN);
    // The whole message leaves at once (the window is 1024 packets) and b
    // acknowledges it; its ACKs are held back.
    let flight = drain_a(&mut a, t0, &mut Vec::new());
    assert_eq!(flight.len(), 1024, "seed {seed}; {hint}");
    let mut acks = VecDeque::new();
    for pkt in flight {
        b_receives(&mut b, t0 + LATENCY, pkt, &mut acks);
    }
    let acks: Vec<Packet> = acks.into_iter().map(|(_, p)| p).collect();
    let psns: Vec<u32> = acks.iter().map(|p| p.bth.psn.get()).collect();
    assert!(acks.len() >= 3 && psns.last() == Some(&first.add(1023).get()), "seed {seed}; {hint}; ACKs {psns:x?}");
    // 100 ms later (the timer is 67 ms) the go-back starts at the first PSN.
    let t1 = t0 + Duration::from_millis(100);
    // One turn: the host puts one chunk of retransmissions on the wire.
    let resent = turn(&mut a.ep, t1, &mut Vec::new(), TX_CHUNK);
    assert_eq!(resent.len(), TX_CHUNK, "seed {seed}; {hint}");
    assert_eq!(a.ep.counters().timeouts, 1, "seed {seed}; {hint}");
    assert_eq!(resent.first().map(|p| p.bth.psn), Some(first), "seed {seed}; {hint}");
    // The ACK before the last one arrives: it covers up to `covered`.
    let late = acks[acks.len() - 2].clone();
    let covered = late.bth.psn;
    let next = drain_a(&mut a, t1 + Duration::from_micros(1), &mut vec![late]);
    let next_psns: Vec<u32> = next.iter().map(|p| p.bth.psn.get()).collect();
    assert_eq!(
        next.first().map(|p| p.bth.psn),
        Some(covered.add(1)),
        "seed {seed}; {hint}; after the ACK of {covered:?} a sent {next_psns:x?}"
    );
    // Nothing it sends from now on was covered by that ACK, and the message
    // completes once b's final ACK arrives.
    assert!(next.iter().all(|p| p.bth.psn.diff(covered) > 0), "seed {seed}; {hint}; {next_psns:x?}");
    let last = acks.last().unwrap().clone();
    drain_a(&mut a, t1 + Duration::from_micros(2), &mut vec![last]);
    let mut wc = Vec::new();
    a.ep.poll_cq(a.cq, 4, &mut wc).unwrap();
    assert_eq!(wc.len(), 1, "seed {seed}; {hint}; {wc:?}");
    assert_eq!(wc[0].status, WcStatus::Success, "seed {seed}; {hint}; {wc:?}");
}
