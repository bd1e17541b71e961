//! Replays the committed corpus of the `engine_cm` fuzz target through the
//! check the target runs (`rctb_engine::fuzzing::cm_receive`).

use std::path::Path;

#[test]
fn every_corpus_file_passes_the_engine_cm_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rctb_core::fuzzing::replay(&repo, "engine_cm", rctb_engine::fuzzing::cm_receive) {
        Ok(n) => assert!(n >= 6, "only {n} corpus files"),
        Err(failures) => panic!("corpus failures:\n{failures}"),
    }
}
