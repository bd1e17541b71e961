//! `rctb nvme target --backend udp` and the initiator `rctb nvme --backend
//! udp` as two processes on loopback: RDMA CM and RC over real sockets, no
//! RDMA anywhere. Data written comes back intact; the target's faults
//! (a held-back response, a lost one) reach the host as a slower command
//! or its typed timeout, and the host recovers by connecting again.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

const NQN: &str = "nqn.2026-01.io.rctb:target";

fn rctb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rctb")).args(args).output().expect("run rctb")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A target serving at `addr` for a while; killed when dropped.
struct Target(Child);

impl Target {
    fn start(addr: &str, extra: &[&str]) -> Target {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rctb"))
            .args(["nvme", "target", "--backend", "udp", "--device", addr, "--for", "60"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the target");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), format!("LISTENING {addr}:4420 {NQN}"), "the target did not come up");
        Target(child)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn host(host: &str, target: &str, args: &[&str]) -> Output {
    let common = ["--backend", "udp", "--device", host, "-a", target, "-n", NQN];
    rctb(&[&["nvme"], args, &common[..]].concat())
}

#[test]
fn the_initiator_reaches_the_target_over_udp_and_the_data_comes_back() {
    let _t = Target::start("127.94.10.1", &[]);
    let (h, a) = ("127.94.10.2", "127.94.10.1");
    let o = host(h, a, &["identify"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains(&format!("subnqn  : {NQN}")) && out.contains("NVME Identify Namespace 2:"), "{out}");

    let dir = std::env::temp_dir().join(format!("rctb-nvme-udp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (data, back) = (dir.join("data"), dir.join("back"));
    let bytes: Vec<u8> = (0..40960u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&data, &bytes).unwrap();
    let o = host(h, a, &["write", "--nsid", "2", "--slba", "3", "-d", data.to_str().unwrap(), "--flush"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = host(h, a, &["read", "--nsid", "2", "--slba", "3", "--length", "40960", "-o", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::read(&back).unwrap() == bytes, "the blocks read back differ from the ones written");
    let _ = std::fs::remove_dir_all(&dir);

    let o = host(h, a, &["discover"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("subnqn:  {NQN}")), "{}", text(&o));
    let o = host(h, a, &["bench", "--qd", "8", "--ios", "200"]);
    assert!(o.status.success() && text(&o).contains("BENCH nvme-randread-4KiB-qd8 rctb "), "{}", text(&o));
}

#[test]
fn a_lost_response_times_out_typed_and_a_held_one_only_slows_the_host() {
    let _t = Target::start("127.94.11.1", &["--drop-responses", "1"]);
    let (h, a) = ("127.94.11.2", "127.94.11.1");
    // The first response on an I/O queue (its Fabrics Connect) never comes.
    let o = host(h, a, &["identify", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("timed out after 1s"), "{}", text(&o));
    // The target lives on: the next host connects.
    let o = host(h, a, &["identify", "--timeout", "1"]);
    assert!(o.status.success(), "{}", text(&o));

    let _t = Target::start("127.94.12.1", &["--response-delay", "50"]);
    let o = host("127.94.12.2", "127.94.12.1", &["write", "--slba", "0", "--length", "4096", "--flush"]);
    assert!(o.status.success(), "{}", text(&o));

    // A crash at the target's 2nd Write: that write is never answered (the
    // host sees its connection go), the target is back 300 ms later, and
    // the next host connects and writes.
    let _t = Target::start("127.94.13.1", &["--crash-after-writes", "2", "--restart-ms", "300"]);
    let (h, a) = ("127.94.13.2", "127.94.13.1");
    let write = || host(h, a, &["write", "--length", "4096", "--timeout", "2"]);
    assert!(write().status.success());
    let o = write();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // Until it is back the host is refused (no listener); then it writes.
    let mut last = write();
    for _ in 0..100 {
        if last.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        last = write();
    }
    assert!(last.status.success(), "not back after the restart: {}", text(&last));
}

#[test]
fn an_error_status_reaches_the_host_and_a_dropped_connection_is_reconnected() {
    // The first I/O command is answered with Internal Error (DNR): the
    // host reports it by name; the next one is served.
    let _t = Target::start("127.94.14.1", &["--error-io", "1"]);
    let (h, a) = ("127.94.14.2", "127.94.14.1");
    let write = || host(h, a, &["write", "--length", "4096", "--timeout", "2"]);
    let o = write();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).to_lowercase().contains("internal"), "{}", text(&o));
    assert!(write().status.success());

    // Every connection dropped at the first Write: that host loses its
    // queue; the target stays up, and the next host writes.
    let _t = Target::start("127.94.15.1", &["--disconnect-at-write", "1"]);
    let (h, a) = ("127.94.15.2", "127.94.15.1");
    let write = || host(h, a, &["write", "--length", "4096", "--timeout", "2"]);
    let first = write();
    let second = write();
    assert!(second.status.success(), "after the drop: {}\nfirst: {}", text(&second), text(&first));
}
