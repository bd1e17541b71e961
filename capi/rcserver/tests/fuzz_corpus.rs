//! Replays every committed input of the `rcserver_abi` fuzz target
//! (`fuzz/corpus/rcserver_abi/`, and crash reproductions in
//! `fuzz/regressions/rcserver_abi/`) through `rcserver::fuzzing::abi_calls`,
//! so the corpus guards every `cargo test`. The server needs a device: the
//! test re-runs itself with rctb's libibverbs.so.1 on `LD_LIBRARY_PATH`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD: &str = "RCTB_RCSERVER_FUZZ_REPLAY";

fn inputs(repo: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["fuzz/corpus/rcserver_abi", "fuzz/regressions/rcserver_abi"] {
        if let Ok(entries) = std::fs::read_dir(repo.join(dir)) {
            files.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    files
}

#[test]
fn every_corpus_input_passes_the_abi_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if std::env::var_os(CHILD).is_some() {
        let files = inputs(&repo);
        assert!(files.len() >= 4, "fuzz/corpus/rcserver_abi holds {} inputs", files.len());
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            if let Err(why) = rcserver::fuzzing::abi_calls(&bytes) {
                panic!("{}: {why}", f.display());
            }
        }
        println!("{} inputs replayed", files.len());
        return;
    }
    let dir = common::rctb_verbs_dir();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "every_corpus_input_passes_the_abi_check", "--nocapture"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &dir)
        .env("RCTB_IBV_ADDR", "127.0.0.45")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("inputs replayed"), "the replay failed:\n{text}");
}
