//! The quickstart report, as text and as JSON, is pinned by insta snapshots
//! (testbench/tests/snapshots/). A change to the simulator's behaviour or to
//! the report format shows up here as a diff to review with `cargo insta review`.

mod common;

#[test]
fn quickstart_report_text() {
    let scenario = common::load("quickstart.toml");
    let out = common::run(&scenario, scenario.default_seed, false);
    insta::assert_snapshot!("quickstart_text", out.report.to_text());
}

#[test]
fn quickstart_report_json() {
    let scenario = common::load("quickstart.toml");
    let out = common::run(&scenario, scenario.default_seed, false);
    insta::assert_snapshot!("quickstart_json", out.report.to_json());
}

/// The RoCEv2 receive-server scenarios: per-channel counts, RNR NAKs and
/// retransmissions are pinned, so a change in the server, the engine model
/// or RC recovery shows up as a diff.
#[test]
fn roce_scenario_reports_text() {
    for name in ["roce-prbs", "roce-backpressure", "roce-faults"] {
        let scenario = common::load(&format!("{name}.toml"));
        let out = common::run(&scenario, scenario.default_seed, false);
        assert!(out.report.passed, "{}", out.report.to_text());
        insta::assert_snapshot!(name, out.report.to_text());
    }
}
