//! Replays every committed corpus file of the `roce_frame` fuzz target
//! (`fuzz/corpus/roce_frame/`, and crash reproductions in
//! `fuzz/regressions/roce_frame/` when any exist) through the same check the
//! target runs, so the corpus guards every `cargo test`.

use std::path::Path;

#[test]
fn every_corpus_file_passes_the_roce_frame_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match rctb_core::fuzzing::replay(&repo, "roce_frame", rctb_core::fuzzing::roce_frame) {
        Ok(n) => assert!(n > 0),
        Err(failures) => panic!("corpus failures:\n{failures}"),
    }
}
