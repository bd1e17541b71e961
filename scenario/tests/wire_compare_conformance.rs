//! The conformance suite's own traffic, rxe against the simulator.
//!
//! `testdata/traces/rxe-conformance.txt` is rxe's traffic for the
//! conformance cases that put RC frames on the wire (55 connections: one
//! SRQ case uses two), reduced to header
//! sequences (its first lines say how it was made). The simulator runs the
//! same suite; per case and per direction the two must agree on what RC
//! semantics fix:
//! - the first transmission of every request PSN, in order, with every
//!   header field (opcode, relative PSN, length, AckReq, pad, RETH, ImmDt,
//!   the AtomicETH's operands);
//! - every READ response PSN with its fields, every atomic acknowledge with
//!   its MSN and original value, and the final acknowledgement (PSN and
//!   MSN);
//! - the kinds of responses seen (ACK, RNR NAK with its timer, NAK codes);
//! - where rxe never had two READs or atomics in flight at once (the
//!   connection of `atomic/shares_rd_atomic_with_read`, `max_rd_atomic` 1,
//!   shows the strict alternation), that the simulator had none either.
//!
//! What is left free, and why (the differences that remain):
//! - How often and where a packet is sent again, and with it the duplicate
//!   ACKs the responder answers each copy with (C9-105), and the AckReq
//!   cadence inside a long message after the first resend (rxe counts resent
//!   packets towards its every-66-packets AckReq). That depends on
//!   timing (an earlier golden run had veth drops in the two 1 MiB *_imm
//!   cases, and rxe went back from PSN 594); and rxe rounds the RNR
//!   wait up to whole jiffies (4 ms at HZ=250), so in `rnr/receive_posted_late`
//!   one retry covers the 3 ms pause where the simulator, timing IBA table 45
//!   exactly (0.64 ms, as hardware does), retries four times.
//! - Where the ACKs fall between requests (capture timing).
//! - IP ids, QPNs, absolute PSNs, keys and addresses.

use rctb_conformance as conformance;
use rctb_core::transport::Mtu;
use rctb_scenario::wiretrace::{self, Record};
use rctb_sim::{NodeConfig, Sim};

/// The golden rxe trace: one list of lines per connection.
fn rxe() -> Vec<Vec<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/traces/rxe-conformance.txt");
    let text = std::fs::read_to_string(path).expect("golden trace present");
    let mut conns: Vec<Vec<String>> = Vec::new();
    for line in text.lines() {
        if line.starts_with("# connection") {
            conns.push(Vec::new());
        } else if !line.starts_with('#')
            && let Some(c) = conns.last_mut()
        {
            c.push(line.to_string());
        }
    }
    conns
}

fn simulated() -> Vec<Vec<String>> {
    let sim = Sim::new(1);
    let mtu = Mtu::Mtu1024;
    let a = sim
        .add_node({
            let mut node_config = NodeConfig::new("rxe1", "10.10.0.2".parse().unwrap());
            node_config.mtu = mtu;
            node_config
        })
        .unwrap();
    let b = sim
        .add_node({
            let mut node_config = NodeConfig::new("rxe0", "10.10.0.1".parse().unwrap());
            node_config.mtu = mtu;
            node_config
        })
        .unwrap();
    sim.enable_pcap();
    let results = conformance::run(&mut sim.transport(a), &mut sim.transport(b), "", &mut |_| {});
    assert!(results.iter().all(|r| r.passed()), "the suite passes on the simulator");
    let conns = wiretrace::connections(&sim.take_pcap().unwrap()).unwrap();
    conns.iter().map(|c| c.records.iter().map(Record::to_string).collect()).collect()
}

/// The relative PSN of a trace line (`psn+N`).
fn psn_of(line: &str) -> i32 {
    line.split_whitespace().find_map(|w| w.strip_prefix("psn")).and_then(|n| n.parse().ok()).unwrap_or(i32::MIN)
}

/// The first request PSN sent a second time, if any.
fn first_resend(lines: &[String]) -> Option<i32> {
    let mut seen = std::collections::BTreeSet::new();
    lines.iter().filter(|l| l.starts_with("->")).map(|l| psn_of(l)).find(|&p| !seen.insert(p))
}

/// First transmission of each PSN of `prefix` lines, in order; from PSN
/// `cut` on, AckReq is dropped from First/Middle packets.
fn first_per_psn(lines: &[String], prefix: &str, cut: i32) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    lines
        .iter()
        .filter(|l| l.starts_with(prefix) && seen.insert(psn_of(l)))
        .map(|l| {
            let inner = l.contains(" First ") || l.contains(" Middle ");
            if inner && psn_of(l) >= cut { l.replacen(" A", "", 1) } else { l.clone() }
        })
        .collect()
}

/// What the comparison keeps of one connection.
#[derive(Debug, PartialEq)]
struct Essence {
    requests: Vec<String>,
    read_responses: Vec<String>,
    atomic_acks: Vec<String>,
    final_ack: Option<String>,
    response_kinds: std::collections::BTreeSet<String>,
    /// The most READ and atomic requests in flight at once, kept where
    /// rxe's trace fixes it (see [`compare`]).
    reads_and_atomics_in_flight: Option<usize>,
}

/// The most READ and atomic requests that were in flight at once: each
/// request's first transmission opens one, its atomic acknowledge or the
/// last packet of its READ response closes one.
fn most_in_flight(lines: &[String]) -> usize {
    let (mut sent, mut open, mut most) = (std::collections::BTreeSet::new(), 0usize, 0usize);
    for l in lines {
        let request =
            ["-> RC RDMA Read Request", "-> RC Fetch Add", "-> RC Compare Swap"].iter().any(|p| l.starts_with(p));
        if request && sent.insert(psn_of(l)) {
            open += 1;
            most = most.max(open);
        }
        let done = ["<- RC Atomic Acknowledge", "<- RC RDMA Read Response Only", "<- RC RDMA Read Response Last"]
            .iter()
            .any(|p| l.starts_with(p));
        if done {
            open = open.saturating_sub(1);
        }
    }
    most
}

fn essence(lines: &[String], cut: i32) -> Essence {
    let requests = first_per_psn(lines, "->", cut);
    let read_responses = first_per_psn(lines, "<- RC RDMA Read Response", i32::MAX);
    let atomic_acks = first_per_psn(lines, "<- RC Atomic Acknowledge", i32::MAX);
    let final_ack = lines.iter().rfind(|l| l.starts_with("<- RC Acknowledge")).cloned();
    let response_kinds = lines
        .iter()
        .filter(|l| l.starts_with("<-"))
        .map(|l| {
            // "... len N KIND msn M": the kind is what stands between the length and the MSN.
            let after_len = l.split(" len ").nth(1).unwrap_or("");
            let kind = after_len.split_once(' ').map_or("", |(_, k)| k);
            kind.rsplit_once(" msn").map_or(kind, |(k, _)| k).to_string()
        })
        .collect();
    let reads_and_atomics_in_flight = Some(most_in_flight(lines));
    Essence { requests, read_responses, atomic_acks, final_ack, response_kinds, reads_and_atomics_in_flight }
}

/// Both connections reduced with the same cut: the earliest resend in either.
/// How many READs and atomics were in flight at once is kept where rxe had
/// at most one (`max_rd_atomic` 1, as in `atomic/shares_rd_atomic_with_read`,
/// or requests posted one at a time): then the simulator must not have had
/// more. Where rxe had several, how many depends on timing.
fn compare(rxe: &[String], sim: &[String]) -> (Essence, Essence) {
    let cut = first_resend(rxe).into_iter().chain(first_resend(sim)).min().unwrap_or(i32::MAX);
    let (mut er, mut es) = (essence(rxe, cut), essence(sim, cut));
    if er.reads_and_atomics_in_flight > Some(1) {
        (er.reads_and_atomics_in_flight, es.reads_and_atomics_in_flight) = (None, None);
    }
    (er, es)
}

#[test]
fn conformance_traffic_matches_rxe_in_what_rc_fixes() {
    let (rxe, sim) = (rxe(), simulated());
    assert_eq!(rxe.len(), 55, "the golden trace has the 55 connections of the cases with RC traffic");
    assert_eq!(sim.len(), rxe.len(), "the simulator puts RC traffic on the wire in the same cases");
    let mut failures = Vec::new();
    for (i, (r, s)) in rxe.iter().zip(&sim).enumerate() {
        let (er, es) = compare(r, s);
        if er != es {
            failures.push(format!("connection {i}:\n  rxe: {er:?}\n  sim: {es:?}"));
        }
    }
    assert!(failures.is_empty(), "{} connections differ from rxe:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn the_comparison_catches_a_wrong_ack_request_cadence() {
    // rxe asks for an ACK at packets 65, 131, ... of a long message; moving
    // one AckReq bit must make the 1 MiB SEND case differ.
    let mut rxe = rxe();
    let send_1mib = &mut rxe[6];
    let at = send_1mib.iter().position(|l| l.contains("psn+65 ") && l.starts_with("->")).expect("packet 65");
    send_1mib[at] = send_1mib[at].trim_end_matches(" A").to_string();
    let (er, es) = compare(&rxe[6], &simulated()[6]);
    assert_ne!(er, es);
}
