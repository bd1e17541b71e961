//! A sweep over many seeds of quickstart finds no failure.

mod common;

use rctb_scenario::sweep::{Shard, run_seeds, shard_seeds};

#[test]
fn twenty_seeds_of_quickstart_all_pass() {
    let scenario = common::load("quickstart.toml");
    let seeds = shard_seeds(0, 20, Shard::WHOLE);
    let results = run_seeds(&scenario, &seeds, 4, &|_| {});
    assert_eq!(results.iter().map(|r| r.seed).collect::<Vec<_>>(), seeds, "one result per seed, sorted");
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| {
            format!(
                "seed {}: {}\n  replay: {}",
                r.seed,
                r.failures.join("; "),
                common::replay("quickstart.toml", r.seed)
            )
        })
        .collect();
    assert!(failed.is_empty(), "failing seeds:\n{}", failed.join("\n"));
}

#[test]
fn every_committed_scenario_passes_with_a_few_seeds() {
    let mut names: Vec<String> = std::fs::read_dir(common::scenarios_dir())
        .expect("scenarios/ exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "quickstart and the fault scenarios are there: {names:?}");
    for name in names {
        let scenario = common::load(&name);
        let seeds = [scenario.default_seed, 1000, 1001];
        for r in run_seeds(&scenario, &seeds, 3, &|_| {}) {
            assert!(
                r.passed,
                "{name} seed {}: {}\nreplay: {}",
                r.seed,
                r.failures.join("; "),
                common::replay(&name, r.seed)
            );
        }
    }
}

/// Swarm: each seed draws its own faults; they differ between seeds, some
/// seeds' partitions really cut traffic, and every seed still converges.
#[test]
fn swarm_seeds_draw_different_faults_and_all_converge() {
    let scenario = common::load("swarm.toml");
    let mut drawn = std::collections::BTreeSet::new();
    let mut cut = 0;
    for seed in 0..30u64 {
        let out = common::run(&scenario, seed, false);
        common::assert_passed("swarm.toml", &out.report);
        let notes: Vec<&String> = out.report.notes.iter().filter(|n| n.starts_with("swarm ")).collect();
        assert!(!notes.is_empty(), "seed {seed}: the report lists the drawn faults");
        drawn.insert(notes.iter().map(|n| n.as_str()).collect::<Vec<_>>().join("\n"));
        let fabric = serde_json::to_value(&out.report.fabric).unwrap();
        if fabric["dropped_partition"].as_u64().unwrap_or(0) > 0 {
            cut += 1;
        }
    }
    assert_eq!(drawn.len(), 30, "every seed drew its own faults");
    assert!(cut > 0, "no seed's partition cut any traffic: the swarm is not exercising partitions");
}
