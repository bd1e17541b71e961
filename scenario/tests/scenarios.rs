//! Behaviour of the committed fault scenarios and of small inline ones:
//! what RC does under a partition, RNR, a stall, a time limit, and how a
//! failed expectation is reported.

mod common;

use rctb_scenario::report::{Report, StreamReport};
use rctb_scenario::scenario::Scenario;

fn stream<'a>(r: &'a Report, name: &str) -> &'a StreamReport {
    r.streams.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no stream {name}"))
}

fn counter(r: &Report, name: &str) -> u64 {
    r.fabric.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no counter {name}"))
}

/// Two nodes `a` and `b` and the given extra TOML (faults, streams, expect).
fn inline(extra: &str) -> Scenario {
    parse(&two_nodes(extra))
}

fn parse(text: &str) -> Scenario {
    Scenario::from_toml(text, "inline").unwrap_or_else(|e| panic!("{e}"))
}

fn two_nodes(extra: &str) -> String {
    format!(
        r#"
name = "inline"
[fabric]
latency = "2us"
[[fabric.nodes]]
name = "a"
ip = "10.9.0.1"
[[fabric.nodes]]
name = "b"
ip = "10.9.0.2"
{extra}
"#
    )
}

#[test]
fn unhealed_partition_exhausts_retries_then_flushes() {
    let scenario = common::load("partition-retry-exhausted.toml");
    let out = common::run(&scenario, scenario.default_seed, false);
    let r = &out.report;
    common::assert_passed("partition-retry-exhausted.toml", r);
    let send = stream(r, "send");
    assert_eq!(send.errors.get("RETRY_EXC_ERR"), Some(&1));
    assert_eq!(send.errors.get("WR_FLUSH_ERR"), Some(&3), "queue_depth - 1 WRs were behind the failed one");
    assert_eq!(send.posted, send.completed + 4, "every posted WR completed exactly once");
    assert!(send.received >= send.completed, "the responder got at least what was acknowledged");
    assert_eq!(send.recv_flushed, 4, "the responder's posted receives flush at teardown");
    // Timeout code 10 is 4.194304 ms; the first expiry plus 3 retries fail
    // the WR about 4 x 4.19 ms after the last ACK (just before the 100 us cut).
    let failed_at = send.finished_ns.expect("finished");
    assert!((16_700_000..17_000_000).contains(&failed_at), "send gave up at {failed_at} ns");
    // CM's timeout code 14 is 67.108864 ms, and retry_cnt 2 gives 3 expiries.
    let write = stream(r, "write");
    assert_eq!(write.errors.get("RETRY_EXC_ERR"), Some(&1));
    let failed_at = write.finished_ns.expect("finished");
    assert!((201_000_000..201_800_000).contains(&failed_at), "write gave up at {failed_at} ns");
    assert_eq!(counter(r, "timeouts"), 4 + 3);
}

#[test]
fn storm_then_heal_converges_with_every_fault_seen() {
    let scenario = common::load("storm-then-heal.toml");
    let out = common::run(&scenario, scenario.default_seed, false);
    let r = &out.report;
    common::assert_passed("storm-then-heal.toml", r);
    for s in &r.streams {
        assert_eq!((s.completed, s.mismatches), (s.count, 0), "stream {}", s.name);
        assert!(s.errors.is_empty(), "stream {}: {:?}", s.name, s.errors);
    }
    let late = stream(r, "after-heal");
    assert!(late.started_ns.expect("started") >= 6_000_000, "a stream starts at its `start` time");
}

#[test]
fn missing_receives_cause_rnr_naks_that_rnr_retry_rides_out() {
    // Unlimited bandwidth on the requester delivers a burst in one instant, so SENDs arrive
    // before the responder can repost its single receive.
    let base = r#"
[[streams]]
name = "s"
op = "send"
from = "a"
to = "b"
count = 20
size = 256
queue_depth = 8
recv_depth = 1
connect = "manual"
min_rnr_timer = 1
"#;
    let unlimited =
        |extra: String| parse(&two_nodes(&extra).replace("ip = \"10.9.0.1\"", "ip = \"10.9.0.1\"\nbandwidth_gbps = 0"));
    let scenario = unlimited(format!("{base}rnr_retry = 7\n"));
    let out = common::run(&scenario, 5, false);
    common::assert_passed("(inline rnr)", &out.report);
    assert!(counter(&out.report, "rnr_naks") > 0, "the scenario did exercise RNR");

    let scenario = unlimited(format!("{base}rnr_retry = 0\n"));
    let out = common::run(&scenario, 5, false);
    let s = stream(&out.report, "s");
    assert_eq!(s.errors.get("RNR_RETRY_EXC_ERR"), Some(&1), "{:?}", s.errors);
    assert!(!out.report.passed);
}

#[test]
fn an_infinite_ack_timeout_under_a_partition_is_reported_as_stalled() {
    let scenario = inline(
        r#"
[[faults]]
at = "50us"
action = "partition"
between = ["a", "b"]
[[streams]]
name = "stuck"
op = "write"
from = "a"
to = "b"
count = 100000
size = 4096
connect = "manual"
timeout = 0
"#,
    );
    let r = common::run(&scenario, 1, false).report;
    assert_eq!(r.outcome, "stalled");
    assert!(!r.passed);
    assert!(r.failures()[0].contains("stalled") && r.failures()[0].contains("stuck"), "{:?}", r.failures());
    assert_eq!(r.leaked.qps, 0, "a stalled run still releases its resources");
}

#[test]
fn the_time_limit_stops_a_run_that_would_take_longer() {
    // CM's 67 ms ACK timeout cannot expire within a 5 ms limit.
    let scenario = inline(
        r#"
[[faults]]
at = "50us"
action = "partition"
between = ["a", "b"]
[[streams]]
name = "slow"
op = "send"
from = "a"
to = "b"
count = 100000
size = 64
"#,
    );
    let mut scenario = scenario;
    scenario.time_limit = rctb_core::time::Duration::from_millis(5);
    let r = common::run(&scenario, 1, false).report;
    assert_eq!(r.outcome, "time_limit");
    assert_eq!(r.virtual_time_ns, 5_000_000, "the run stops at the limit");
    assert!(r.failures()[0].contains("time limit 5ms"), "{:?}", r.failures());
}

#[test]
fn a_failed_expectation_says_what_was_expected_and_what_happened() {
    let scenario = inline(
        r#"
[[streams]]
name = "w"
op = "write"
from = "a"
to = "b"
count = 10
size = 100
[streams.expect]
delivered = 11
data_integrity = false
[expect]
max_duration = "1ns"
fabric = { seq_naks = { min = 1 } }
"#,
    );
    let r = common::run(&scenario, 1, false).report;
    let failures = r.failures();
    let expected = [
        "expected w: delivered = 11, got 10",
        "expected w: a data mismatch detected, got 0 mismatches",
        "expected virtual duration <= 1ns",
        "expected fabric seq_naks >= 1, got 0",
    ];
    for e in expected {
        assert!(failures.iter().any(|f| f.starts_with(e)), "missing {e:?} in {failures:#?}");
    }
    assert_eq!(failures.len(), expected.len(), "{failures:#?}");
}

/// Zero-length messages are legal verbs for every opcode (a SEND completes a
/// receive with byte_len 0, a WRITE or READ of 0 bytes needs no valid rkey):
/// each runs end to end.
#[test]
fn zero_length_messages_of_every_opcode_complete() {
    for op in ["send", "send_imm", "write", "write_imm", "read"] {
        let text = format!(
            "name = \"zero-{op}\"\n[fabric]\n[[fabric.nodes]]\nname = \"a\"\nip = \"10.0.0.1\"\n\
             [[fabric.nodes]]\nname = \"b\"\nip = \"10.0.0.2\"\n\
             [[streams]]\nname = \"z\"\nop = \"{op}\"\nfrom = \"a\"\nto = \"b\"\ncount = 10\nsize = {{ min = 0, max = 1 }}\n"
        );
        let scenario = rctb_scenario::scenario::Scenario::from_toml(&text, "zero").unwrap();
        let out = common::run(&scenario, 3, false);
        common::assert_passed(&format!("zero-{op}"), &out.report);
    }
}
