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
