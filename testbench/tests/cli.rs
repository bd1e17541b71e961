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
