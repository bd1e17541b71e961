//! Replays the committed corpus of the `cm_mad` fuzz target through the
//! check the target runs.

use std::path::Path;

#[test]
fn every_corpus_file_passes_the_cm_mad_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rctb_core::fuzzing::replay(&repo, "cm_mad", rctb_core::fuzzing::cm_mad) {
        Ok(n) => assert!(n >= 7, "only {n} corpus files"),
        Err(failures) => panic!("corpus failures:\n{failures}"),
    }
}
