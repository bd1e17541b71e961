//! Replays every committed corpus file of the `scenario_toml` fuzz target
//! (`fuzz/corpus/scenario_toml/`, and crash reproductions in
//! `fuzz/regressions/scenario_toml/` when any exist) through the same check the
//! target runs, so the corpus guards every `cargo test`.

use std::path::PathBuf;

fn files(dir: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz").join(dir).join("scenario_toml");
    let mut out: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.is_file()).collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

#[test]
fn every_corpus_file_passes_the_scenario_toml_check() {
    let corpus = files("corpus");
    assert!(!corpus.is_empty(), "fuzz/corpus/scenario_toml is empty or missing");
    let mut failures = Vec::new();
    for path in corpus.iter().chain(&files("regressions")) {
        let bytes = std::fs::read(path).expect("readable corpus file");
        let result: Result<(), String> = rctb::fuzzing::scenario_toml(&bytes);
        if let Err(why) = result {
            failures.push(format!("{}: {why}", path.display()));
        }
    }
    assert!(failures.is_empty(), "corpus failures:\n{}", failures.join("\n"));
}
