//! Replays the committed corpus of the `surf_metadata` fuzz target through
//! the check the target runs.

use std::path::Path;

#[test]
fn every_corpus_file_passes_the_surf_metadata_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rctb_core::fuzzing::replay(&repo, "surf_metadata", rctb_core::fuzzing::surf_metadata) {
        Ok(n) => assert!(n > 0),
        Err(failures) => panic!("corpus failures:\n{failures}"),
    }
}
