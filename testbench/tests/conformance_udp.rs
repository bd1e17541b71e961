//! `rctb conformance --backend udp` and `rctb udp-bench` on loopback: what
//! the VM hooks read from the front ends. The suite itself runs in the udp
//! crate's own tests (`udp/tests/conformance.rs`).
//!
//! These run in real time: one test at a time ([`one_at_a_time`]), so a
//! test's timers never compete for the cores with a sibling's transfers.

use std::sync::{Mutex, MutexGuard};

/// Held for the whole of each test; a failed test's poison is ignored.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn rctb(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rctb")).args(args).output().expect("run rctb")
}

/// `rctb conformance --backend udp` and `rctb udp-bench` between two
/// loopback endpoints: the lines the VM hooks read.
#[test]
fn the_udp_front_ends_print_what_the_hooks_read() {
    let _serial = one_at_a_time();
    let out = rctb(&["conformance", "--backend", "udp", "--device", "127.91.5.2", "--peer", "127.91.5.1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("PASS write/1mib") && text.contains("PASS cm/connect_accept_private_data"), "{text}");
    for case in [
        "psn_gap_go_back_n",
        "duplicate_requests",
        "lost_ack_timeout",
        "duplicated_seq_nak_one_retry",
        "atomic_ack_lost_replayed_once",
        "rnr_retry_counted",
    ] {
        assert!(text.lines().any(|l| l == format!("PASS faults/{case}")), "{text}");
    }
    assert!(text.lines().any(|l| l == "conformance: 68 passed, 0 failed"), "{text}");

    let args = ["udp-bench", "--device", "127.91.6.2", "--peer", "127.91.6.1", "--iters", "8", "--reps", "2"];
    let out = rctb(&[&args[..], &["--pingpong", "20", "--idle-secs", "0.05", "--two-processes"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.lines().filter(|l| l.starts_with("BENCH write_bw-1MiB rctb-udp ")).count(), 2, "{text}");
    // The same WRITEs into a target in another rctb process.
    assert_eq!(text.lines().filter(|l| l.starts_with("BENCH write_bw-1MiB rctb-udp-2proc ")).count(), 2, "{text}");
    assert!(text.lines().any(|l| l.starts_with("LATENCY send-64B round trip over 20 iterations")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("IDLE cpu ")), "{text}");

    // Both sides must be given as something: two devices are not this backend.
    let out = rctb(&["conformance", "--backend", "udp", "--device", "not-an-address", "--peer", "rxe-nope"]);
    assert_eq!(out.status.code(), Some(2));
}
