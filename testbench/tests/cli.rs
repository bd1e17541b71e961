//! The `rctb` binary: exit codes, JSON output, pcap files and the replay
//! commands a sweep prints for failing seeds.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

fn rctb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rctb")).args(args).output().expect("run rctb")
}

fn quickstart() -> String {
    common::scenarios_dir().join("quickstart.toml").to_string_lossy().into_owned()
}

/// A scratch file unique to this test process and `name`.
fn scratch(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("rctb-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).expect("write scratch file");
    path
}

const FAILING: &str = r#"
name = "always-fails"
[fabric]
[[fabric.nodes]]
name = "a"
ip = "10.0.0.1"
[[fabric.nodes]]
name = "b"
ip = "10.0.0.2"
[[streams]]
name = "s"
op = "send"
from = "a"
to = "b"
count = 3
size = 100
[streams.expect]
delivered = 4
"#;

#[test]
fn run_passes_with_exit_zero_and_a_text_report() {
    let out = rctb(&["run", &quickstart()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("scenario quickstart (seed 1)"), "{stdout}");
    assert!(stdout.trim_end().ends_with("result: PASS (50 checks)"), "{stdout}");
}

#[test]
fn run_json_is_the_report_and_the_pcap_is_written() {
    let pcap = std::env::temp_dir().join(format!("rctb-cli-{}.pcap", std::process::id()));
    let out = rctb(&["run", &quickstart(), "--seed", "3", "--json", "--pcap", pcap.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!((json["seed"].as_u64(), json["passed"].as_bool()), (Some(3), Some(true)));
    assert_eq!(json["streams"].as_array().map(Vec::len), Some(8));
    let bytes = std::fs::read(&pcap).expect("pcap written");
    assert_eq!(&bytes[..4], &0xa1b2_3c4du32.to_le_bytes(), "a little-endian nanosecond pcap");
    let _ = std::fs::remove_file(pcap);
}

#[test]
fn a_failed_expectation_exits_one_and_prints_the_replay_command() {
    let path = scratch("fail.toml", FAILING);
    let p = path.to_str().unwrap();
    let out = rctb(&["run", p, "--seed", "12"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("expected s: delivered = 4, got 3"), "{stderr}");
    assert!(stderr.contains(&format!("replay: rctb run {p} --seed 12")), "{stderr}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn an_invalid_scenario_exits_two_naming_the_field() {
    let path = scratch("bad.toml", &FAILING.replace("to = \"b\"", "to = \"nowhere\""));
    let out = rctb(&["run", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("streams.\"s\".to: unknown node \"nowhere\""), "{stderr}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn sweep_lists_each_failing_seed_with_its_replay_command() {
    let path = scratch("sweep.toml", FAILING);
    let p = path.to_str().unwrap();
    let out = rctb(&["sweep", p, "--seeds", "6", "--start", "40", "--shard", "2/2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for seed in [41, 43, 45] {
        assert!(stdout.contains(&format!("FAIL seed {seed}\n")), "{stdout}");
        assert!(stdout.contains(&format!("replay: rctb run {p} --seed {seed}")), "{stdout}");
    }
    assert!(!stdout.contains("seed 40"), "shard 2/2 runs every second seed: {stdout}");
    assert!(stdout.contains("3 seeds (shard 2/2, from 40): 0 passed, 3 failed"), "{stdout}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn sweep_of_quickstart_passes() {
    let out = rctb(&["sweep", &quickstart(), "--seeds", "4"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
}

#[test]
fn version_and_help_name_the_backends_compiled_in() {
    let verbs = if cfg!(feature = "verbs") { "verbs yes" } else { "verbs no (build with --features verbs)" };
    let out = rctb(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("rctb {}", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.contains(&format!("backends: sim yes, udp yes, {verbs}")), "{text}");
    let s3 = if cfg!(feature = "s3") { "s3 yes" } else { "s3 no (build with --features s3)" };
    assert!(text.contains(&format!("object stores: fs yes, {s3}")), "{text}");

    let out = rctb(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("backends: sim yes, udp yes, {verbs}")), "{text}");
}

/// Every verbs path of a build without verbs says what is missing, and how
/// to get it, instead of failing some other way.
#[test]
#[cfg(not(feature = "verbs"))]
fn a_build_without_verbs_says_so_on_every_verbs_path() {
    let cases: &[&[&str]] = &[
        &["devices"],
        &["conformance", "--backend", "verbs", "--device", "rxe1", "--peer", "rxe0"],
        &["nvme", "identify", "--backend", "verbs", "--device", "rxe1", "-a", "10.10.0.1", "-n", "nqn.x"],
        &["roce-rx", "--backend", "verbs", "--device", "rxe0", "--fpga-ip", "10.10.0.2"],
        &["fpga-emu", "--backend", "verbs", "--device", "rxe1"],
        &["object", "serve", "--backend", "verbs", "--device", "rxe0", "--root", "/nonexistent"],
        &["rc-session", "selftest", "--backend", "verbs", "--device", "rxe1", "--peer", "rxe0"],
    ];
    for args in cases {
        // object serve asks for credentials before it opens a device
        let out = Command::new(env!("CARGO_BIN_EXE_rctb"))
            .args(*args)
            .env("AWS_ACCESS_KEY_ID", "rctb-test")
            .env("AWS_SECRET_ACCESS_KEY", "rctb-test-secret")
            .output()
            .expect("run rctb");
        assert!(!out.status.success(), "{args:?} succeeded");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("built without the verbs backend"), "{args:?}: {text}");
        assert!(text.contains("--features verbs"), "{args:?}: {text}");
    }
}

/// Some seeds lose a packet on the way (and fail the "no retransmission"
/// expectation), the others do not: a sweep with both verdicts.
const MIXED: &str = r#"
name = "sometimes-retransmits"
[fabric]
faults = { drop = 0.02 }
[[fabric.nodes]]
name = "a"
ip = "10.0.0.1"
[[fabric.nodes]]
name = "b"
ip = "10.0.0.2"
[[streams]]
name = "s"
op = "send"
from = "a"
to = "b"
count = 20
size = 100
[expect]
fabric = { retransmitted = { max = 0 } }
"#;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn four_shards_merged_give_the_verdicts_failures_and_replay_lines_of_one_run() {
    let path = scratch("mixed.toml", MIXED);
    let p = path.to_str().unwrap();
    let whole = rctb(&["sweep", p, "--seeds", "24", "--start", "100", "--json"]);
    assert_eq!(whole.status.code(), Some(1), "{}", String::from_utf8_lossy(&whole.stderr));
    let lines = stdout(&whole);
    assert_eq!(lines.lines().count(), 24, "one JSON object per seed:\n{lines}");
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["seed"], 100);
    assert_eq!(first["scenario"], "sometimes-retransmits");
    assert_eq!(first["replay"], format!("rctb run {p} --seed 100"));
    assert!(first["virtual_time_ns"].as_u64().unwrap() > 0);
    let (pass, fail) = (lines.matches(r#""verdict":"pass""#).count(), lines.matches(r#""verdict":"fail""#).count());
    assert!(pass > 0 && fail > 0 && pass + fail == 24, "both verdicts in the sweep: {pass} passed, {fail} failed");
    assert!(lines.contains("fabric retransmitted"), "a failure names its check:\n{lines}");

    let shards: Vec<PathBuf> = (1..=4)
        .map(|i| {
            let o = rctb(&["sweep", p, "--seeds", "24", "--start", "100", "--shard", &format!("{i}/4"), "--json"]);
            assert!(o.status.code().is_some_and(|c| c <= 1), "{}", String::from_utf8_lossy(&o.stderr));
            scratch(&format!("shard{i}.jsonl"), &stdout(&o))
        })
        .collect();
    let files: Vec<&str> = shards.iter().map(|f| f.to_str().unwrap()).collect();
    let merged = rctb(&[&["sweep", "merge"], &files[..], &["--json"]].concat());
    assert_eq!(merged.status.code(), Some(1), "a failed seed fails the merge");
    assert_eq!(stdout(&merged), lines, "merged shards differ from the unsharded run");

    // The text reports agree too, but for the summary line.
    let text = stdout(&rctb(&["sweep", p, "--seeds", "24", "--start", "100"]));
    let merged_text = stdout(&rctb(&[&["sweep", "merge"], &files[..]].concat()));
    let body = |t: &str| t.lines().filter(|l| !l.starts_with("sometimes-retransmits: ")).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&merged_text), body(&text));
    assert!(
        merged_text.contains(&format!("24 seeds (merged from 4 files): {pass} passed, {fail} failed")),
        "{merged_text}"
    );
    for f in shards.iter().chain([&path]) {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn junit_has_one_case_per_seed_and_the_replay_line_in_each_failure() {
    let path = scratch("junit.toml", MIXED);
    let p = path.to_str().unwrap();
    let xml = std::env::temp_dir().join(format!("rctb-cli-{}-junit.xml", std::process::id()));
    let o = rctb(&["sweep", p, "--seeds", "12", "--junit", xml.to_str().unwrap(), "--json"]);
    let records: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let failed: Vec<u64> =
        records.iter().filter(|r| r["verdict"] == "fail").map(|r| r["seed"].as_u64().unwrap()).collect();
    let doc = std::fs::read_to_string(&xml).expect("the JUnit file");
    assert!(doc.starts_with("<?xml"), "{doc}");
    assert_eq!(doc.matches("<testcase ").count(), 12, "{doc}");
    assert!(doc.contains(r#"<testsuite name="sometimes-retransmits" tests="12""#), "{doc}");
    assert!(doc.contains(&format!(r#"failures="{}""#, failed.len())), "{doc}");
    for seed in &failed {
        assert!(doc.contains(&format!(r#"<testcase name="seed {seed}" classname="sometimes-retransmits""#)), "{doc}");
        assert!(doc.contains(&format!("(replay: rctb run {p} --seed {seed})")), "seed {seed}: {doc}");
    }
    let _ = std::fs::remove_file(xml);
    let _ = std::fs::remove_file(path);
}

#[test]
fn merge_refuses_overlapping_foreign_and_garbled_shards() {
    let mixed = scratch("merge-mixed.toml", MIXED);
    let failing = scratch("merge-failing.toml", FAILING);
    let shard = |p: &PathBuf, name: &str| {
        let o = rctb(&["sweep", p.to_str().unwrap(), "--seeds", "3", "--json"]);
        scratch(name, &stdout(&o))
    };
    let (a, b) = (shard(&mixed, "m.jsonl"), shard(&failing, "f.jsonl"));
    let junk = scratch("junk.jsonl", "{\"seed\": 1}\n");
    let (a_, b_, j_) = (a.to_str().unwrap(), b.to_str().unwrap(), junk.to_str().unwrap());
    for (files, says) in [
        (vec![a_, a_], format!("seed 0 is in {a_} and in {a_}: the shards overlap")),
        (vec![a_, b_], format!("{b_}: scenario \"always-fails\", but the first file's is \"sometimes-retransmits\"")),
        (vec![j_], format!("{j_}:1: not a sweep record")),
    ] {
        let o = rctb(&[&["sweep", "merge"], &files[..]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{files:?}: {err}");
        assert!(err.contains(&says), "{files:?}: {err}");
    }
    let o = rctb(&["sweep", "merge"]);
    assert_eq!(o.status.code(), Some(2), "merge needs files");
    for f in [mixed, failing, a, b, junk] {
        let _ = std::fs::remove_file(f);
    }
}
