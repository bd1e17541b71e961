//! Same seed, same bytes: the report (text and JSON) and the pcap of a run
//! are functions of the scenario and the seed alone.

mod common;

#[test]
fn quickstart_twice_gives_identical_reports_and_pcaps() {
    let scenario = common::load("quickstart.toml");
    let seed = scenario.default_seed;
    let first = common::run(&scenario, seed, true);
    let second = common::run(&scenario, seed, true);
    common::assert_passed("quickstart.toml", &first.report);
    assert_eq!(
        first.report.to_text(),
        second.report.to_text(),
        "text report differs; {}",
        common::replay("quickstart.toml", seed)
    );
    assert_eq!(first.report.to_json(), second.report.to_json(), "JSON report differs");
    let (a, b) = (first.pcap.expect("pcap asked for"), second.pcap.expect("pcap asked for"));
    assert!(a.len() > 10_000, "the pcap holds the run's frames ({} bytes)", a.len());
    assert!(a == b, "pcap bytes differ between two runs of seed {seed}");
}

#[test]
fn another_seed_gives_another_run() {
    let scenario = common::load("quickstart.toml");
    let a = common::run(&scenario, 1, true);
    let b = common::run(&scenario, 2, true);
    assert_ne!(a.pcap, b.pcap, "seeds 1 and 2 produced the same frames: the seed is not reaching the fabric");
    assert_ne!(a.report.to_json(), b.report.to_json());
}

#[test]
fn capture_does_not_change_the_run() {
    let scenario = common::load("quickstart.toml");
    let with = common::run(&scenario, 9, true);
    let without = common::run(&scenario, 9, false);
    assert_eq!(with.report, without.report);
    assert!(without.pcap.is_none());
}
