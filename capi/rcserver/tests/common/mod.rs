//! What the tests that need a device share: rctb's libibverbs.so.1, and
//! re-running a test with it on `LD_LIBRARY_PATH` (the dynamic loader reads
//! that variable once, at start).

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/rctb-verbs`, holding rctb's libibverbs.so.1; built
/// here (`cargo build -p rctb-ibverbs`, the test's profile) when it is not
/// there yet, as in a fresh clone, where `cargo test` builds no cdylib.
pub fn rctb_verbs_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test>-<hash>
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").to_path_buf();
    let dir = profile_dir.join("rctb-verbs");
    if !dir.join("libibverbs.so.1").exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).args(["build", "-q", "-p", "rctb-ibverbs"]);
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            cmd.arg("--release");
        }
        if let Some(target) = profile_dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        let status = cmd.status().expect("run cargo build -p rctb-ibverbs");
        assert!(status.success(), "cargo build -p rctb-ibverbs failed");
    }
    assert!(dir.join("libibverbs.so.1").exists(), "{} has no libibverbs.so.1 after the build", dir.display());
    dir
}
