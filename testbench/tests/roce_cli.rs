//! `rctb roce-rx` and `rctb fpga-emu`: argument errors (exit 2, naming the
//! argument and the rule) and runs on the simulator backend (exit 0 with a
//! RESULT line whose counters are exact). The verbs backend runs in the VM
//! check (ci/vm/checks.d/roce.sh).

use std::process::{Command, Output};

fn rctb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rctb")).args(args).output().expect("run rctb")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Exit 2 and a stderr line containing `want`.
fn refused(args: &[&str], want: &str) {
    let o = rctb(args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}\nstdout: {out}\nstderr: {err}");
    assert!(err.contains(want), "{args:?}: stderr {err:?} lacks {want:?}");
}

#[test]
fn roce_rx_sim_receives_every_frame_with_exact_counters() {
    let o = rctb(&["roce-rx", "--backend", "sim", "--frames", "500", "--sim-sizes", "100,4096,7"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // 500 frames cycling 3 sizes: 167 x 100 + 167 x 4096 + 166 x 7.
    let bytes = 167 * 100 + 167 * 4096 + 166 * 7;
    assert!(
        out.contains(&format!(
            "RESULT PASS frames=500 bytes={bytes} lost=0 out_of_order=0 corrupt=0 rx_errors=0 fpga=500 {bytes} 0"
        )),
        "{out}"
    );
    assert!(out.contains("  channel 3: 125 frames"), "{out}");
    assert!(out.contains("hand-off: host qpn="), "the hand-off lines are shown: {out}");
}

#[test]
fn fpga_emu_sim_streams_to_a_default_receiver() {
    let o = rctb(&["fpga-emu", "--backend", "sim", "--frames", "64", "--channels", "9,200", "--size", "64,2000"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("RESULT PASS frames=64 bytes=66048 "), "{out}");
    assert!(out.contains("  channel 200: 32 frames, 64000 bytes"), "{out}");
}

#[test]
fn a_slow_consumer_is_back_pressured_through_rnr_naks_without_loss() {
    let o = rctb(&["roce-rx", "--backend", "sim", "--frames", "100", "--depth", "4", "--sim-consumer-delay", "250us"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("RESULT PASS frames=100 "), "{out}");
    let naks: u64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("fabric (virtual time): "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a fabric line");
    assert!(naks > 0, "{out}");
}

#[test]
fn bad_arguments_exit_2_naming_the_argument_and_the_rule() {
    refused(&["roce-rx", "--backend", "sim", "--depth", "0"], "rx_queue_depth = 0: must be 1..=32768");
    refused(&["roce-rx", "--backend", "sim", "--max-payload", "0"], "max_payload = 0: must be > 0");
    refused(&["roce-rx", "--backend", "sim", "--pmtu", "1500"], "pmtu = 1500: must be 256, 512, 1024, 2048 or 4096");
    refused(&["roce-rx", "--backend", "sim", "--min-rnr-timer", "32"], "min_rnr_timer = 32: must be 0..=31");
    refused(&["roce-rx", "--backend", "sim", "--port", "0"], "ib_port = 0: must be 1..=255");
    refused(
        &["roce-rx", "--backend", "sim", "--sim-sizes", "5000"],
        "frame size 5000 is above the host's max_payload 4096",
    );
    refused(&["roce-rx", "--gid-index", "first"], "\"first\" is not a GID index (a number, or auto)");
    refused(&["roce-rx", "--idle-timeout", "5"], "is not a duration");
    refused(&["fpga-emu", "--backend", "sim", "--size", "0"], "size = 0: every frame size must be > 0");
    refused(&["fpga-emu", "--backend", "sim", "--window", "33"], "window = 33: must be 1..=32");
    refused(&["fpga-emu", "--backend", "sim", "--frames", "0"], "frames = 0: must be > 0");
    refused(&["fpga-emu", "--backend", "sim", "--rnr-retry", "8"], "rnr_retry = 8: must be 0..=7");
    refused(&["fpga-emu", "--channels", "0,256"], "256");
    refused(&["fpga-emu", "--payload", "zeros"], "expected prbs or unchecked");
    refused(&["fpga-emu", "--backend", "sim", "--host-ip", "10.9.9.9"], "the simulated host is 10.0.0.1");
}

#[test]
fn the_verbs_backend_needs_its_device_and_peer_address() {
    // Without the verbs feature the message says how to get it; with it, what is missing.
    let o = rctb(&["roce-rx", "--fpga-ip", "10.10.0.2"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--device") || err.contains("without the verbs backend"), "{err}");
    let o = rctb(&["fpga-emu", "--device", "rxe1"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--host-ip") || err.contains("without the verbs backend"), "{err}");
}

#[test]
fn cost_knobs_out_of_range_are_refused_by_flag() {
    refused(&["roce-rx", "--backend", "sim", "--repost-batch", "0"], "--repost-batch must be 1..=--depth");
    refused(&["roce-rx", "--backend", "sim", "--depth", "8", "--repost-batch", "9"], "repost_batch = 9");
    refused(&["roce-rx", "--backend", "sim", "--poll", "adaptive", "--spin", "0"], "spin = 0");
    refused(&["roce-rx", "--backend", "sim", "--poll", "sometimes"], "expected busy, adaptive or event");
    refused(&["roce-rx", "--backend", "sim", "--poll", "event", "--busy-poll"], "--busy-poll is --poll busy");
    refused(&["fpga-emu", "--backend", "sim", "--signal-every", "0"], "--signal-every must be 1..=--window");
    refused(&["fpga-emu", "--backend", "sim", "--window", "8", "--signal-every", "9"], "signal_every = 9");
    refused(&["fpga-emu", "--backend", "sim", "--poll", "adaptive", "--spin", "0"], "spin = 0");
}

#[test]
fn cost_knobs_in_range_run_on_the_simulator() {
    let o = rctb(&["roce-rx", "--backend", "sim", "--frames", "50", "--depth", "8", "--repost-batch", "8"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let o = rctb(&["fpga-emu", "--backend", "sim", "--frames", "50", "--signal-every", "16", "--poll", "busy"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let o = rctb(&["fpga-emu", "--backend", "sim", "--frames", "50", "--busy-poll", "--poll", "busy"]);
    assert!(o.status.success(), "--busy-poll and --poll busy agree");
}
