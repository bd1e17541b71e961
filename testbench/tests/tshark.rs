//! The quickstart pcap decodes cleanly in tshark and every frame carries a
//! correct ICRC (checked by ci/vm/icrc_check.py, independent of our
//! encoder). Skipped with a message when tshark or the checker is absent,
//! except with `RCTB_REQUIRE_TOOLS` set (`.ci/run` sets it once it has
//! installed tshark), where that is a failure.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn have_tshark() -> bool {
    Command::new("which").arg("tshark").output().map(|o| o.status.success()).unwrap_or(false)
}

#[test]
fn quickstart_pcap_decodes_in_tshark_with_good_icrcs() {
    let required = std::env::var_os("RCTB_REQUIRE_TOOLS").is_some();
    if !have_tshark() {
        // Where the tools were installed on purpose, their absence is a
        // broken set-up, not a skip.
        assert!(!required, "RCTB_REQUIRE_TOOLS is set but tshark is not installed");
        eprintln!("SKIP quickstart_pcap_decodes_in_tshark_with_good_icrcs: tshark is not installed");
        return;
    }
    let scenario = common::load("quickstart.toml");
    let out = common::run(&scenario, scenario.default_seed, true);
    let file = std::env::temp_dir().join(format!("rctb-quickstart-{}.pcap", std::process::id()));
    std::fs::write(&file, out.pcap.expect("pcap asked for")).expect("write pcap");

    let decoded = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-V", "--disable-heuristic", "rpcrdma_infiniband"])
        .output()
        .expect("run tshark");
    let text = String::from_utf8_lossy(&decoded.stdout);
    assert!(decoded.status.success(), "tshark failed: {}", String::from_utf8_lossy(&decoded.stderr));
    assert!(!text.contains("Malformed"), "tshark found malformed frames; {}", common::replay("quickstart.toml", 1));
    assert!(text.contains("InfiniBand"), "tshark decoded no InfiniBand frame");

    // The project's copy of shared/vm/icrc_check.py (an ICRC check independent
    // of our encoder), so the test needs nothing outside the repository.
    let checker = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ci/vm/icrc_check.py");
    if !checker.exists() {
        assert!(!required, "RCTB_REQUIRE_TOOLS is set but {} is missing", checker.display());
        eprintln!("SKIP ICRC check: {} is not present", checker.display());
    } else {
        let checked = Command::new("python3").arg(&checker).arg(&file).output().expect("run python3");
        assert!(
            checked.status.success(),
            "icrc_check.py failed:\n{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }
    let _ = std::fs::remove_file(&file);
}
