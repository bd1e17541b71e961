//! Replays every committed corpus file of the `scenario_toml` fuzz target
//! (`fuzz/corpus/scenario_toml/`, and crash reproductions in
//! `fuzz/regressions/scenario_toml/` when any exist) through the same check the
//! target runs, so the corpus guards every `cargo test`.

use std::path::Path;

#[test]
fn every_corpus_file_passes_the_scenario_toml_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rctb_core::fuzzing::replay(&repo, "scenario_toml", rctb_scenario::fuzzing::scenario_toml) {
        Ok(n) => assert!(n > 0),
        Err(failures) => panic!("corpus failures:\n{failures}"),
    }
}
