//! Replays every committed corpus file of the `sim_rc` fuzz target
//! (`fuzz/corpus/sim_rc/`, and crash reproductions in
//! `fuzz/regressions/sim_rc/` when any exist) through the same check the
//! target runs, so the corpus guards every `cargo test`.

use std::path::Path;

fn sim_rc(bytes: &[u8]) -> Result<(), String> {
    match rctb_sim::fuzzing::Case::from_bytes(bytes) {
        Some(case) => rctb_sim::fuzzing::run(&case),
        None => Ok(()),
    }
}

#[test]
fn every_corpus_file_passes_the_sim_rc_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rctb_core::fuzzing::replay(&repo, "sim_rc", sim_rc) {
        Ok(n) => assert!(n > 0),
        Err(failures) => panic!("corpus failures:\n{failures}"),
    }
}

#[test]
fn every_corpus_file_passes_the_rcsession_check() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rctb_core::fuzzing::replay(&repo, "rcsession", rctb_sim::fuzzing_rcsession::session_calls) {
        Ok(n) => assert!(n >= 5, "only {n} corpus files"),
        Err(failures) => panic!("corpus failures:\n{failures}"),
    }
}

/// The hand-made seeds reach past PREPARE: staged GETs, control-plane-only
/// READYs, PUT views and cancels, so the fuzzer starts deep in the chart.
#[test]
fn rcsession_seeds_reach_deep() {
    use rctb_sim::fuzzing_rcsession::session_calls_reached;
    let seed = |name: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/rcsession").join(name);
        session_calls_reached(&std::fs::read(path).expect("seed")).expect("seed passes")
    };
    let get = seed("get-control-plane");
    assert!(get.prepared == 1 && get.staged == 1 && get.ready_ok == 1, "{get:?}");
    let put = seed("put-control-plane");
    assert!(put.prepared == 1 && put.ready_ok == 1 && put.put_views == 1, "{put:?}");
    let zero = seed("zero-limits");
    assert_eq!(zero.prepared, 0, "zero limits block PREPARE: {zero:?}");
}
