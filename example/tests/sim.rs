//! rc-pingpong on rctb's simulator: the tests `docs/guide.md` walks
//! through (a fabric in a test, seeds and replay lines, the fault verbs and
//! the per-packet hook, a proptest against a model, a pcap), plus a fault
//! sweep over many seeds.

use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;

use proptest::prelude::*;
use rc_pingpong::{Echo, PORT, PingError, Pinger};
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_core::wire::roce::Opcode;
use rctb_sim::{LinkConfig, LinkFaults, NodeConfig, PacketAction, PacketMatch, PacketRule, Sim, SimTransport};

// ---- 2. A simulated fabric in a test -------------------------------------

/// A client and an echo server on a fresh fabric of `seed`; the server runs
/// as an actor of its node, so it answers while the client blocks.
fn fabric(seed: u64) -> (Sim, SimTransport, Rc<RefCell<Echo>>, SocketAddrV4) {
    let sim = Sim::new(seed);
    let c = sim.add_node(NodeConfig::new("client", "10.0.0.1".parse().unwrap())).unwrap();
    let s = sim.add_node(NodeConfig::new("server", "10.0.0.2".parse().unwrap())).unwrap();
    let echo = Rc::new(RefCell::new(Echo::default()));
    let actor = echo.clone();
    sim.add_actor(s, Box::new(move |t: &mut SimTransport| actor.borrow_mut().step(t).expect("the echo server")));
    let t = sim.transport(c);
    (sim, t, echo, SocketAddrV4::new("10.0.0.2".parse().unwrap(), PORT))
}

/// Where a failing seed tells how to run it again.
fn replay(seed: u64, test: &str) -> String {
    format!("seed {seed}; replay: cargo test -p rc-pingpong --test sim {test}")
}

#[test]
fn a_hundred_pings_come_back_and_a_seed_replays_exactly() {
    let run = |seed| {
        let (sim, mut t, echo, server) = fabric(seed);
        let mut p = Pinger::new(server, 100);
        let rtts =
            p.run(&mut t, Duration::from_secs(1)).unwrap_or_else(|e| panic!("{e:?}; {}", replay(seed, "a_hundred")));
        assert_eq!(echo.borrow().echoed, 100, "{}", replay(seed, "a_hundred"));
        (rtts.to_vec(), sim.now())
    };
    let (first, end) = run(7);
    assert_eq!(first.len(), 100);
    assert!(first.iter().all(|&rtt| rtt > Duration::ZERO && rtt < Duration::from_micros(100)), "{first:?}");
    assert_eq!(run(7), (first, end), "the same seed, the same run: {}", replay(7, "a_hundred"));
}

// ---- 3. Faults: the verbs and the per-packet hook ------------------------

#[test]
fn a_lost_echo_is_resent_by_rc_and_the_pinger_never_sees_it() {
    let (sim, mut t, _echo, server) = fabric(3);
    // The server's 10th SEND (the 10th echo) is lost once; RC resends it
    // after the ACK timeout, so that ping just takes longer.
    let server_node = sim.node("server").unwrap();
    let rule = PacketRule::new(PacketMatch::any().from(server_node).opcode(Opcode::SEND_ONLY), PacketAction::Drop)
        .skip(9)
        .once();
    let id = sim.add_rule(rule).unwrap();
    let mut p = Pinger::new(server, 20);
    let rtts = p.run(&mut t, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e:?}; {}", replay(3, "a_lost_echo")));
    assert_eq!(sim.rule_stats(id).unwrap().applied, 1);
    let slowest = rtts.iter().enumerate().max_by_key(|(_, r)| **r).unwrap();
    assert_eq!(slowest.0, 9, "the 10th ping waited for the resend: {rtts:?}");
    assert!(*slowest.1 > Duration::from_millis(1), "an ACK timeout, not a link delay: {rtts:?}");
}

#[test]
fn a_partition_that_never_heals_ends_in_a_typed_error() {
    let (sim, mut t, _echo, server) = fabric(4);
    let mut p = Pinger::new(server, 1000);
    // Connect and ping a little, then cut the link for good.
    sim.schedule(rctb_sim::ScheduledFault {
        at: Instant::ZERO + Duration::from_micros(500),
        action: rctb_sim::FaultAction::Partition { a: "client".into(), b: "server".into() },
    });
    let e = p.run(&mut t, Duration::from_secs(60)).unwrap_err();
    assert_eq!(e, PingError::Completion(WcStatus::RetryExcErr), "{}", replay(4, "a_partition"));
    assert!(!p.rtts.is_empty(), "some pings came back before the cut");
}

#[test]
fn a_fault_sweep_every_seed_converges_after_the_storm() {
    // Loss, duplication and reordering on every link, and a partition from
    // 100 us to 2 ms, in the middle of the pings: RC must hide all of it
    // from the application, on every seed. (rctb sweep does this for
    // scenario files, on all cores.)
    let mut failed = Vec::new();
    for seed in 0..64 {
        let (sim, mut t, echo, server) = fabric(seed);
        let mut faults = LinkFaults::default();
        faults.drop = 0.03;
        faults.duplicate = 0.02;
        faults.reorder = 0.05;
        faults.reorder_window = Duration::from_micros(5);
        let mut link = LinkConfig::default();
        link.faults = faults;
        sim.set_default_link(link);
        let (a, b) = ("client".to_string(), "server".to_string());
        for (at, action) in [
            (100, rctb_sim::FaultAction::Partition { a: a.clone(), b: b.clone() }),
            (2_000, rctb_sim::FaultAction::Heal { a, b }),
        ] {
            sim.schedule(rctb_sim::ScheduledFault { at: Instant::ZERO + Duration::from_micros(at), action });
        }
        let mut p = Pinger::new(server, 200);
        match p.run(&mut t, Duration::from_secs(30)) {
            // Ending after the heal shows the partition met the pings.
            Ok(rtts)
                if rtts.len() == 200
                    && echo.borrow().echoed == 200
                    && sim.now() > Instant::ZERO + Duration::from_millis(2) => {}
            other => failed.push(format!("{other:?}; {}", replay(seed, "a_fault_sweep"))),
        }
    }
    assert!(failed.is_empty(), "{} of 64 seeds failed:\n{}", failed.len(), failed.join("\n"));
}

// ---- 4. A property against a model ---------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the seed and the steady loss and duplication, every ping
    /// comes back exactly as sent, in order: the model is "an echo is its
    /// ping", and RC must make the lossy fabric look like that.
    #[test]
    fn every_echo_is_its_ping_under_loss_and_duplication(
        seed in any::<u64>(),
        drop in 0.0f64..0.05,
        duplicate in 0.0f64..0.05,
        count in 1u64..40,
    ) {
        let (sim, mut t, echo, server) = fabric(seed);
        let mut faults = LinkFaults::default();
        faults.drop = drop;
        faults.duplicate = duplicate;
        let mut link = LinkConfig::default();
        link.faults = faults;
        sim.set_default_link(link);
        let mut p = Pinger::new(server, count);
        let r = p.run(&mut t, Duration::from_secs(30)).map(<[Duration]>::len);
        prop_assert_eq!(r, Ok(count as usize), "{}", replay(seed, "every_echo"));
        prop_assert_eq!(echo.borrow().echoed, count);
    }
}

// ---- 5. A pcap for Wireshark ---------------------------------------------

#[test]
fn the_run_is_a_pcap_wireshark_reads() {
    let (sim, mut t, _echo, server) = fabric(5);
    sim.enable_pcap();
    Pinger::new(server, 3).run(&mut t, Duration::from_secs(1)).unwrap();
    let pcap = sim.take_pcap().expect("enabled");
    assert_eq!(&pcap[..4], &0xa1b2_3c4du32.to_le_bytes(), "a nanosecond pcap");
    // 3 pings, 3 echoes and their ACKs, besides the CM exchange: every
    // frame a real Ethernet/IPv4/UDP 4791 RoCEv2 frame with its ICRC.
    // Keep it with std::fs::write("pingpong.pcap", &pcap) and open it.
    let frames = pcap_frames(&pcap);
    assert!(frames >= 12, "{frames} frames");
}

/// Frames in a classic pcap: 24-byte file header, then 16-byte record
/// headers each followed by the captured bytes.
fn pcap_frames(pcap: &[u8]) -> usize {
    let (mut at, mut n) = (24, 0);
    while at + 16 <= pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
        n += 1;
    }
    n
}

// ---- The guide quotes this file -------------------------------------------

#[test]
fn every_line_the_guide_quotes_is_in_this_file() {
    let guide = include_str!("../../docs/guide.md");
    let here: Vec<&str> =
        [include_str!("../src/lib.rs"), include_str!("sim.rs")].iter().flat_map(|f| f.lines()).map(str::trim).collect();
    let mut quoted = 0;
    for block in guide.split("```rust\n").skip(1) {
        let code = block.split("```").next().expect("a closed block");
        for line in code.lines().map(str::trim).filter(|l| !l.is_empty()) {
            assert!(here.contains(&line), "docs/guide.md quotes a line example/ lacks: {line}");
            quoted += 1;
        }
    }
    assert!(quoted > 20, "the guide quotes the example ({quoted} lines)");
}
