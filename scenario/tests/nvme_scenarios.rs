//! `op = "nvme"` streams: the NVMe-oF initiator against the target model in
//! scenario files (scenarios/nvme-*.toml and inline ones), their faults,
//! reconnects, checks and validation. Deterministic: a failure prints the
//! seed and the replay command.

mod common;

use rctb_scenario::report::Report;
use rctb_scenario::scenario::{Invalid, Scenario, ScenarioError};

fn note<'a>(r: &'a Report, stream: &str) -> &'a str {
    let prefix = format!("{stream}: nvme: ");
    r.notes.iter().find(|n| n.starts_with(&prefix)).unwrap_or_else(|| panic!("no nvme note in {:?}", r.notes))
}

/// The number before `what` in a note (`"12 reads"` -> 12).
fn figure(note: &str, what: &str) -> u64 {
    let at = note.find(what).unwrap_or_else(|| panic!("{what:?} not in {note}"));
    let head = note[..at].trim_end();
    head.rsplit([' ', ':', '('])
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before {what:?} in {note}"))
}

fn check<'a>(r: &'a Report, what: &str) -> &'a rctb_scenario::expect::Check {
    r.checks.iter().find(|c| c.what.contains(what)).unwrap_or_else(|| panic!("no check {what:?}:\n{}", r.to_text()))
}

#[test]
fn nvme_io_mixes_reads_writes_and_flushes_with_every_read_verified() {
    let scenario = common::load("nvme-io.toml");
    for seed in [scenario.default_seed, 2] {
        let r = common::run(&scenario, seed, false).report;
        common::assert_passed("nvme-io.toml", &r);
        let n = note(&r, "io");
        let (reads, writes, flushes) = (figure(n, "reads"), figure(n, "writes,"), figure(n, "flushes"));
        assert_eq!(reads + writes + flushes, 3000, "seed {seed}: {n}");
        assert!(reads > 1000 && writes > 1000 && flushes > 50, "seed {seed}: {n}");
        assert!(figure(n, "keep-alives") >= 1, "seed {seed}: Keep Alives come from service: {n}");
        assert_eq!(figure(n, "blocks unchecked"), 0, "seed {seed}: without faults every block is known: {n}");
        assert!(r.fabric.0.iter().any(|(k, v)| *k == "retransmitted" && *v > 0), "seed {seed}: the loss bit");
    }
}

#[test]
fn nvme_faults_give_typed_errors_then_reconnect_and_go_on() {
    let scenario = common::load("nvme-faults.toml");
    for seed in [scenario.default_seed, 7] {
        let r = common::run(&scenario, seed, false).report;
        common::assert_passed("nvme-faults.toml", &r);
        assert_eq!(r.outcome, "completed");
        let n = note(&r, "io");
        assert_eq!(figure(n, "crashes"), 1, "seed {seed}: {n}");
        assert!(figure(n, "reconnects") >= 3, "seed {seed}: {n}");
        assert!(figure(n, "failed attempts") >= 1, "seed {seed}: reconnects fail while the target is down: {n}");
        assert!(n.contains("timeout x") && n.contains("disconnected x"), "seed {seed}: {n}");
    }
}

#[test]
fn nvme_runs_are_deterministic() {
    let scenario = common::load("nvme-faults.toml");
    let a = common::run(&scenario, 5, false).report.to_json();
    let b = common::run(&scenario, 5, false).report.to_json();
    assert!(a == b, "seed 5 gave two reports; replay: {}", common::replay("nvme-faults.toml", 5));
}

const TWO: &str = r#"
name = "inline-nvme"
time_limit = "2s"
[fabric]
latency = "2us"
[[fabric.nodes]]
name = "h"
ip = "10.9.0.1"
[[fabric.nodes]]
name = "t"
ip = "10.9.0.2"
[[streams]]
name = "io"
op = "nvme"
from = "h"
to = "t"
count = 400
size = { min = 512, max = 8192 }
queue_depth = 8
"#;

fn inline(extra: &str) -> Report {
    let text = format!("{TWO}{extra}");
    let s = Scenario::from_toml(&text, "inline").unwrap_or_else(|e| panic!("{e}"));
    common::run(&s, 1, false).report
}

#[test]
fn a_crash_without_reconnect_ends_the_stream_with_typed_errors() {
    let r = inline(
        "nvme = { timeout = \"5ms\", faults = [{ at = \"200us\", action = \"crash\" }] }\n\
         expect = { delivered = { max = 399 }, errors = { disconnected = { min = 1 } } }\n",
    );
    assert!(r.passed, "{}", r.to_text());
    assert_eq!(r.outcome, "completed", "no hang");
    let n = note(&r, "io");
    assert_eq!(figure(n, "reconnects"), 0, "{n}");
    assert!(r.streams[0].completed < 400);
    assert!(r.streams[0].posted < 400, "nothing is submitted after the failure");
}

#[test]
fn a_target_that_never_comes_back_makes_reconnect_give_up() {
    let r = inline(
        "nvme = { timeout = \"5ms\", reconnect = true, reconnect_attempts = 3, faults = [{ at = \"200us\", action = \"crash\" }] }\n\
         expect = { errors = { disconnected = { min = 1 } } }\n",
    );
    assert!(!r.passed);
    assert_eq!(r.outcome, "completed", "no hang: the stream gives up");
    let c = check(&r, "io: no local errors");
    assert!(!c.passed && c.got.contains("gave up after 3 reconnect attempts"), "{c:?}");
    assert_eq!(figure(note(&r, "io"), "failed attempts"), 3);
    assert!(r.streams[0].posted < 400, "the stream stopped");
}

#[test]
fn unexpected_failures_and_missing_reconnects_fail_their_checks() {
    let r = inline(
        "nvme = { timeout = \"5ms\", reconnects = { min = 1 }, faults = [{ at = \"200us\", action = \"drop\" }] }\n",
    );
    assert!(!r.passed);
    let c = check(&r, "io: no failed commands");
    assert!(!c.passed && c.got.starts_with("timeout x"), "{c:?}");
    assert!(!check(&r, "io: reconnects >= 1").passed);
    assert!(!check(&r, "io: commands completed = 400").passed);
}

#[test]
fn a_slow_target_still_completes_everything() {
    let r = inline("nvme = { response_delay = \"200us\", timeout = \"50ms\" }\n");
    assert!(r.passed, "{}", r.to_text());
    // 400 commands at depth 8, each at least 200 us: 10 ms or more.
    assert!(r.virtual_time_ns >= 10_000_000, "{}", r.virtual_time_ns);
}

fn invalid(extra: &str) -> Vec<String> {
    let text = format!("{TWO}{extra}");
    match Scenario::from_toml(&text, "test.toml") {
        Err(ScenarioError::Invalid { errors, .. }) => errors.iter().map(Invalid::to_string).collect(),
        other => panic!("expected rule violations, got {other:?}"),
    }
}

#[test]
fn nvme_fields_are_validated_naming_the_field() {
    let e = invalid(
        "retry_cnt = 3\nnvme = { lba_size = 1024, mdts = 9, in_capsule = 100, read = 0.8, flush = 0.3 }\n\
         expect = { errors = { RETRY_EXC_ERR = 1 } }\n",
    );
    let want = [
        "streams.\"io\".retry_cnt: does not apply to op = \"nvme\"",
        "streams.\"io\".nvme.lba_size = \"1024\": must be one of 512, 4096",
        "streams.\"io\".nvme.mdts = 9: must be within 1..=8",
        "streams.\"io\".nvme.in_capsule: must be a multiple of 16",
        "streams.\"io\".nvme.flush: read + flush = 1.1 is above 1",
        "streams.\"io\".expect.errors.RETRY_EXC_ERR = \"RETRY_EXC_ERR\": must be one of timeout, disconnected",
    ];
    for w in want {
        assert!(e.iter().any(|x| x.starts_with(w)), "missing {w:?} in {e:#?}");
    }
    let e = invalid(
        "nvme = { lba_size = 4096, faults = [{ at = \"1ms\", action = \"restart\" }, { at = \"2ms\", action = \"explode\" }] }\n",
    );
    assert!(e.iter().any(|x| x.starts_with("streams.\"io\".size: reads and writes are whole blocks")), "{e:#?}");
    assert!(e.iter().any(|x| x == "streams.\"io\".nvme.faults[0].action: restart without an earlier crash"), "{e:#?}");
    assert!(
        e.iter().any(|x| x.starts_with(
            "streams.\"io\".nvme.faults[1].action = \"explode\": must be one of delay, drop, crash, restart"
        )),
        "{e:#?}"
    );
    let e = invalid("nvme = { blocks = 8 }\n");
    assert_eq!(e, vec!["streams.\"io\".size.max: is larger than the namespace (blocks x lba_size)".to_string()]);
}

#[test]
fn nvme_nodes_are_the_streams_own() {
    let e = invalid("[[streams]]\nname = \"other\"\nop = \"send\"\nfrom = \"h\"\nto = \"t\"\ncount = 1\nsize = 1\n");
    assert!(
        e.iter().any(|x| x.starts_with("streams.\"io\".from: node \"h\" is also used by stream \"other\"")),
        "{e:#?}"
    );
    // And the nvme table is refused on other streams.
    let text = format!(
        "{TWO}\n[[streams]]\nname = \"x\"\nop = \"send\"\nfrom = \"t\"\nto = \"h\"\ncount = 1\nsize = 1\nnvme = {{}}\n"
    );
    let e = match Scenario::from_toml(&text, "t") {
        Err(ScenarioError::Invalid { errors, .. }) => errors,
        other => panic!("{other:?}"),
    };
    assert!(e.iter().any(|x| x.to_string() == "streams.\"x\".nvme: is only for op = \"nvme\""), "{e:#?}");
}

#[test]
fn the_documented_nvme_example_is_valid() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios.md"))
        .expect("docs/scenarios.md");
    let at =
        doc.find("```toml\n[[streams]]\nname = \"io\"\nop = \"nvme\"").expect("docs/scenarios.md has the nvme example");
    let start = at + "```toml\n".len();
    let end = start + doc[start..].find("```").expect("closed block");
    let text = format!(
        "name = \"readme\"\n[fabric]\n[[fabric.nodes]]\nname = \"host\"\nip = \"10.0.0.1\"\n\
         [[fabric.nodes]]\nname = \"target\"\nip = \"10.0.0.2\"\n{}",
        &doc[start..end]
    );
    let s = Scenario::from_toml(&text, "docs/scenarios.md").unwrap_or_else(|e| panic!("{e}"));
    let n = s.streams[0].nvme.as_ref().expect("an nvme stream");
    assert_eq!((n.faults.len(), n.reconnect, n.mdts), (4, true, 5));
}
