//! `rctb fpga-emu --backend udp` streaming to `rctb roce-rx --backend udp`:
//! two processes on loopback, every frame a real RoCEv2 datagram through the
//! kernel's UDP stack, the connection made through the hand-off files. The
//! receiver checks every PRBS payload and its counters against the FPGA's
//! `done` totals. (The VM check `ci/vm/checks.d/udp.sh` runs the same
//! fpga-emu against kernel rxe.)

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn rctb() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rctb"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs the pair between `host` and `fpga` (127.x addresses) with extra
/// roce-rx arguments; returns (roce-rx output, fpga-emu output).
fn stream(dir: &Path, host: &str, fpga: &str, rx_extra: &[&str], emu_extra: &[&str]) -> (Output, Output) {
    let (h, f) = (dir.join("host.params"), dir.join("fpga.params"));
    let (h, f) = (h.to_str().unwrap(), f.to_str().unwrap());
    let rx = rctb()
        .args(["roce-rx", "--backend", "udp", "--device", host, "--fpga-ip", fpga, "--wait-done"])
        .args(["--host-params", h, "--fpga-params", f, "--interval", "0s", "--handoff-timeout", "60s"])
        .args(rx_extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roce-rx");
    let emu = rctb()
        .args(["fpga-emu", "--backend", "udp", "--device", fpga, "--host-ip", host])
        .args(["--host-params", h, "--fpga-params", f, "--interval", "0s", "--handoff-timeout", "60s"])
        .args(emu_extra)
        .output()
        .expect("run fpga-emu");
    (rx.wait_with_output().expect("roce-rx"), emu)
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rctb-roce-udp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn fpga_emu_over_udp_streams_prbs_frames_to_roce_rx_over_udp() {
    let dir = tempdir("prbs");
    let out = dir.join("out");
    let emu = ["--frames", "3000", "--channels", "0,1,2,3", "--size", "64,1500,4096,1"];
    let (rx, fpga) = stream(&dir, "127.93.0.1", "127.93.0.2", &["--output-dir", out.to_str().unwrap()], &emu);
    let (rx_text, fpga_text) = (text(&rx), text(&fpga));
    assert!(fpga.status.success(), "fpga-emu:\n{fpga_text}\nroce-rx:\n{rx_text}");
    assert!(rx.status.success(), "roce-rx:\n{rx_text}\nfpga-emu:\n{fpga_text}");
    // 3000 frames cycling 4 sizes: 750 of each.
    let bytes = 750 * (64 + 1500 + 4096 + 1);
    let want = format!(
        "RESULT PASS frames=3000 bytes={bytes} lost=0 out_of_order=0 corrupt=0 rx_errors=0 fpga=3000 {bytes} 0"
    );
    assert!(rx_text.lines().any(|l| l == want), "{rx_text}");
    // Channel i gets frames i, i+4, ...: always the same size; every byte kept.
    for (ch, size) in [(0u64, 64u64), (1, 1500), (2, 4096), (3, 1)] {
        let file = std::fs::read(out.join(format!("channel-{ch}.bin"))).unwrap();
        assert_eq!(file.len() as u64, 750 * size, "channel {ch}");
        assert!(rx_text.contains(&format!("  channel {ch}: 750 frames, {} bytes", 750 * size)), "{rx_text}");
    }
    assert!(fpga_text.contains("fpga-emu: 3000 frames, "), "{fpga_text}");
    // Every frame each side read passed its ICRC check.
    for (t, p) in [(&rx_text, "roce-rx: udp "), (&fpga_text, "fpga-emu: udp ")] {
        assert!(
            t.lines().any(|l| l.starts_with(p) && l.ends_with("dropped 0 bad ICRC, 0 malformed, 0 unsupported")),
            "{t}"
        );
    }
    // One packet per frame at PMTU 4096: at least 3000 reached the host.
    assert!(count(&rx_text, "roce-rx: udp ", "received", " frames") >= 3000, "{rx_text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Four receive slots for a window of 16 sends: the receiver runs out of
/// posted receives, answers with RNR NAKs over UDP, and the FPGA's RC
/// engine waits and retries; nothing is lost.
#[test]
fn a_receiver_with_four_slots_back_pressures_the_fpga_over_udp_without_loss() {
    let dir = tempdir("rnr");
    let emu = ["--frames", "400", "--channels", "5", "--size", "2048", "--window", "16"];
    let (rx, fpga) = stream(&dir, "127.93.1.1", "127.93.1.2", &["--depth", "4"], &emu);
    let (rx_text, fpga_text) = (text(&rx), text(&fpga));
    assert!(fpga.status.success() && rx.status.success(), "fpga-emu:\n{fpga_text}\nroce-rx:\n{rx_text}");
    let bytes = 400 * 2048;
    let want =
        format!("RESULT PASS frames=400 bytes={bytes} lost=0 out_of_order=0 corrupt=0 rx_errors=0 fpga=400 {bytes} 0");
    assert!(rx_text.lines().any(|l| l == want), "{rx_text}");
    // The receiver's engine said RNR NAK, and the FPGA's socket heard it.
    assert!(count(&rx_text, "roce-rx: udp ", "sent", " RNR NAKs") > 0, "{rx_text}");
    assert!(count(&fpga_text, "fpga-emu: udp ", "received", " RNR NAKs") > 0, "{fpga_text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The number before `what` in the `sent ...` or `received ...` part of the
/// line starting with `prefix`.
fn count(text: &str, prefix: &str, part: &str, what: &str) -> u64 {
    let line = text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} line"));
    let part = line.split("; ").find(|p| p.contains(&format!("{part} "))).unwrap_or_else(|| panic!("{line}"));
    let before = &part[..part.find(what).unwrap_or_else(|| panic!("{line}"))];
    before.rsplit([' ', '(']).next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn udp_front_ends_refuse_a_device_that_is_not_an_address() {
    let o =
        rctb().args(["fpga-emu", "--backend", "udp", "--device", "rxe0", "--host-ip", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--device \"rxe0\": with --backend udp, an IPv4 address or ADDR:PORT"), "{}", text(&o));
    let o = rctb().args(["roce-rx", "--backend", "udp", "--fpga-ip", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--backend udp needs --device"), "{}", text(&o));
}
