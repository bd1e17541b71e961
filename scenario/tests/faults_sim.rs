//! The targeted fault cases (`rctb_scenario::fault_cases`: PSN gap → NAK and
//! go-back-N, duplicate requests, lost ACK → the requester's timeout,
//! atomics repeated or unacknowledged → answered from the saved result) on
//! the simulator, from a seed: the same cases `rctb conformance --backend
//! udp` runs over UDP and against rxe, here with exact counts of what the
//! packet rule did and what the RC engine made of it.

use rctb_conformance::CaseResult;
use rctb_core::transport::Mtu;
use rctb_scenario::fault_cases;
use rctb_scenario::sim_faults::SimPath;
use rctb_sim::{FabricStats, LiveResources, NodeConfig, Sim};

/// Runs the cases matching `filter` on a fresh fabric from `seed`; returns
/// the results, the fabric's counters and what the rule acted on.
fn run(seed: u64, filter: &str) -> (Vec<CaseResult>, FabricStats, u64, String) {
    let replay = format!("seed {seed}; replay: cargo test -p rctb-scenario --test faults_sim (cases {filter:?})");
    let sim = Sim::new(seed);
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
    let (mut ta, mut tb) = (sim.transport(a), sim.transport(b));
    let mut path = SimPath::new(&sim, a, b);
    let results = fault_cases::run(&mut ta, &mut tb, &mut path, filter, &mut |r| eprintln!("{}", r.line()));
    let failed: Vec<String> = results.iter().filter(|r| !r.passed()).map(|r| r.line()).collect();
    assert!(failed.is_empty(), "fault cases failed on the simulator:\n{}\n{replay}", failed.join("\n"));
    assert_eq!(sim.live_resources(), LiveResources::default(), "a case leaked; {replay}");
    assert_eq!((a.index(), b.index()), (0, 1));
    (results, sim.stats(), path.last_acted(), replay)
}

const SEEDS: [u64; 3] = [1, 7, 1234];

#[test]
fn every_fault_case_passes_on_the_simulator() {
    for seed in SEEDS {
        let (results, st, _, replay) = run(seed, "");
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "faults/psn_gap_go_back_n",
                "faults/duplicate_requests",
                "faults/lost_ack_timeout",
                "faults/retry_cnt_7_never_runs_out",
                "faults/duplicated_seq_nak_one_retry",
                "faults/atomic_ack_lost_replayed_once",
                "faults/atomic_duplicated_applied_once",
                "faults/rnr_retry_counted",
            ],
            "{replay}"
        );
        // One packet lost in the first, third, fifth and sixth case, twelve
        // in the fourth; four duplicated in the second and in the seventh,
        // one NAK in the fifth.
        assert_eq!((st.dropped_rule, st.duplicated), (16, 9), "{st:?}; {replay}");
    }
}

#[test]
fn rnr_retry_2_means_three_sends_and_three_rnr_naks() {
    for seed in SEEDS {
        let (_, st, _, replay) = run(seed, "rnr_retry");
        assert_eq!((st.rnr_naks, st.retransmitted, st.delivered), (3, 2, 3 + 3), "{st:?}; {replay}");
    }
}

#[test]
fn a_lost_request_packet_makes_one_nak_and_a_go_back_n() {
    for seed in SEEDS {
        let (_, st, acted, replay) = run(seed, "psn_gap");
        assert_eq!(acted, 1, "{replay}");
        // 3 MTU + 5 bytes: 4 packets; the second is lost, the third finds
        // the gap (one NAK), the last three go again; no timer fires.
        assert_eq!((st.dropped_rule, st.seq_naks, st.retransmitted, st.timeouts), (1, 1, 3, 0), "{st:?}; {replay}");
        assert_eq!(st.other_naks + st.dropped_corrupt + st.dropped_loss, 0, "{st:?}; {replay}");
    }
}

#[test]
fn a_retry_count_of_7_outlasts_twelve_lost_transmissions() {
    for seed in SEEDS {
        let (_, st, acted, replay) = run(seed, "retry_cnt_7");
        assert_eq!(acted, 12, "{replay}");
        // Each loss costs one ACK timeout and one resend; 7 is never spent.
        assert_eq!((st.dropped_rule, st.timeouts, st.retransmitted), (12, 12, 12), "{st:?}; {replay}");
    }
}

#[test]
fn a_doubled_seq_nak_starts_one_retry() {
    for seed in SEEDS {
        let (_, st, acted, replay) = run(seed, "duplicated_seq_nak");
        // The lost packet and the one NAK, doubled.
        assert_eq!(acted, 2, "{replay}");
        // 4 packets, the second lost: the third finds the gap (one NAK, sent
        // once, arriving twice), the second copy is ignored, the last three
        // go again once; no timer fires.
        assert_eq!(
            (st.dropped_rule, st.duplicated, st.seq_naks, st.seq_naks_ignored, st.retransmitted, st.timeouts),
            (1, 1, 1, 1, 3, 0),
            "{st:?}; {replay}"
        );
    }
}

#[test]
fn duplicated_requests_complete_once() {
    for seed in SEEDS {
        let (_, st, acted, replay) = run(seed, "duplicate_requests");
        assert_eq!(acted, 4, "every request packet of the SEND; {replay}");
        assert_eq!((st.duplicated, st.retransmitted, st.timeouts), (4, 0, 0), "{st:?}; {replay}");
        assert_eq!(st.seq_naks + st.other_naks, 0, "duplicates are not a PSN error; {st:?}; {replay}");
    }
}

#[test]
fn a_lost_ack_makes_the_requester_time_out_and_resend() {
    for seed in SEEDS {
        let (_, st, acted, replay) = run(seed, "lost_ack");
        assert_eq!(acted, 1, "{replay}");
        // The WRITE goes again after one timeout; the responder ACKs the
        // duplicate without writing twice.
        assert_eq!((st.dropped_rule, st.timeouts, st.retransmitted, st.acks), (1, 1, 1, 2), "{st:?}; {replay}");
    }
}

#[test]
fn a_lost_atomic_ack_is_answered_from_the_saved_result() {
    for seed in SEEDS {
        let (_, st, acted, replay) = run(seed, "atomic_ack_lost");
        assert_eq!(acted, 1, "{replay}");
        // The fetch-and-add goes again after one timeout; the responder
        // answers it from its resource (a second atomic ACK), not by adding again.
        assert_eq!(
            (st.dropped_rule, st.timeouts, st.retransmitted, st.atomic_acks, st.atomics_replayed),
            (1, 1, 1, 2, 1),
            "{st:?}; {replay}"
        );
    }
}

#[test]
fn duplicated_atomics_are_applied_once() {
    for seed in SEEDS {
        let (_, st, acted, replay) = run(seed, "atomic_duplicated");
        assert_eq!(acted, 4, "every atomic request; {replay}");
        // Each duplicate is answered from its saved result: eight atomic ACKs for four atomics.
        assert_eq!((st.duplicated, st.atomics_replayed, st.atomic_acks), (4, 4, 8), "{st:?}; {replay}");
        assert_eq!((st.retransmitted, st.timeouts, st.seq_naks + st.other_naks), (0, 0, 0), "{st:?}; {replay}");
    }
}
