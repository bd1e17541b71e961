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
struct Target {
    child: Child,
    /// Its stdout after the LISTENING line.
    out: BufReader<std::process::ChildStdout>,
}

impl Target {
    fn start(addr: &str, extra: &[&str]) -> Target {
        let child = Command::new(env!("CARGO_BIN_EXE_rctb"))
            .args(["nvme", "target", "--backend", "udp", "--device", addr, "--for", "60"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the target");
        Target::started(child, addr).0
    }

    /// Waits for `child`'s LISTENING line; gives the lines before it.
    fn started(mut child: Child, addr: &str) -> (Target, Vec<String>) {
        let mut before = Vec::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "the target ended before listening: {before:?}");
            if line.starts_with("LISTENING") {
                assert_eq!(line.trim(), format!("LISTENING {addr}:4420 {NQN}"), "the target did not come up");
                return (Target { child, out }, before);
            }
            before.push(line.trim().to_string());
        }
    }

    /// A target with `args` (`--for 60` unless they say), and the lines
    /// it printed before listening.
    fn with(addr: &str, args: &[&str]) -> (Target, Vec<String>) {
        let serve_for = if args.contains(&"--for") { &[][..] } else { &["--for", "60"][..] };
        let child = Command::new(env!("CARGO_BIN_EXE_rctb"))
            .args(["nvme", "target", "--backend", "udp", "--device", addr])
            .args(serve_for)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the target");
        Target::started(child, addr)
    }
}

impl Target {
    /// The rest of its stdout, once it ends by itself (`--for`).
    fn finish(mut self) -> String {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.out, &mut rest).unwrap();
        rest
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
fn an_error_status_reaches_the_host_and_a_dropped_connection_leaves_the_target_serving() {
    // The first I/O command is answered with Internal Error (DNR): the
    // host reports it by name; the next one is served.
    let _t = Target::start("127.94.14.1", &["--error-io", "1"]);
    let (h, a) = ("127.94.14.2", "127.94.14.1");
    let write = || host(h, a, &["write", "--length", "4096", "--timeout", "2"]);
    let o = write();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).to_lowercase().contains("internal"), "{}", text(&o));
    assert!(write().status.success());

    // Every connection is dropped once the first Write is taken. The Write
    // itself executed and was answered; whether the answer got out before
    // the queue went depends on the race between the two, so that host
    // either reports the write, or its queue flushed or disconnected. The
    // CLI host does not
    // reconnect: the next write is a new host, and the target, still up,
    // serves it. The target's own count shows the drop happened.
    let (t, _) = Target::with("127.94.15.1", &["--disconnect-at-write", "1", "--for", "4"]);
    let (h, a) = ("127.94.15.2", "127.94.15.1");
    let write = || host(h, a, &["write", "--length", "4096", "--timeout", "2"]);
    let first = write();
    assert!(
        first.status.success() || ["WR_FLUSH_ERR", "is disconnected"].iter().any(|m| text(&first).contains(m)),
        "the first host: {:?}\n{}",
        first.status,
        text(&first)
    );
    let second = write();
    assert!(second.status.success(), "after the drop: {}\nfirst: {}", text(&second), text(&first));
    let stats = t.finish();
    for counter in ["writes=2 ", "dropped_connections=1 "] {
        assert!(stats.contains(counter), "{counter}in {stats}");
    }
}

/// A scratch directory of this test process, `name` in it.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rctb-nvme-target-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn block(fill: u8, salt: u32) -> Vec<u8> {
    (0..4096u32).map(|i| fill ^ (i.wrapping_mul(2654435761).wrapping_add(salt) >> 11) as u8).collect()
}

#[test]
fn a_file_namespace_serves_the_file_and_keeps_what_was_flushed_through_a_kill() {
    let dir = scratch("file");
    let (img, data, back) = (dir.join("ns1.img"), dir.join("data"), dir.join("back"));
    let original: Vec<u8> = (0..16).flat_map(|b| block(0x5A, b)).collect();
    std::fs::write(&img, &original).unwrap();
    let ns = format!("{}:4096", img.display());
    let (t, lines) = Target::with("127.94.16.1", &["--namespace", &ns]);
    assert_eq!(lines, [format!("NAMESPACE 1 lba_size=4096 blocks=16 {}", img.display())]);
    let (h, a) = ("127.94.16.2", "127.94.16.1");
    // The file's bytes are the namespace's.
    let o = host(h, a, &["read", "--slba", "3", "--length", "8192", "-o", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::read(&back).unwrap() == original[3 * 4096..5 * 4096], "read differs from the file");
    // Written and flushed: in the file once the host has its answer.
    std::fs::write(&data, block(0xA5, 2)).unwrap();
    let o = host(h, a, &["write", "--slba", "2", "-d", data.to_str().unwrap(), "--flush"]);
    assert!(o.status.success(), "{}", text(&o));
    // Written, not flushed: in the volatile cache only.
    std::fs::write(&data, block(0xC3, 5)).unwrap();
    let o = host(h, a, &["write", "--slba", "5", "-d", data.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    drop(t); // SIGKILL: no orderly stop, so the cache is lost
    let file = std::fs::read(&img).unwrap();
    assert!(file[2 * 4096..3 * 4096] == block(0xA5, 2), "the flushed block is not in the file");
    assert!(file[5 * 4096..6 * 4096] == original[5 * 4096..6 * 4096], "an unflushed block reached the file");
    assert!(file[..2 * 4096] == original[..2 * 4096] && file[6 * 4096..] == original[6 * 4096..]);

    // A new target on the file serves what the last one made durable.
    let (_t, _) = Target::with("127.94.16.3", &["--namespace", &ns]);
    let o = host(h, "127.94.16.3", &["read", "--slba", "2", "--length", "4096", "-o", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::read(&back).unwrap() == block(0xA5, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_toml_file_sets_namespaces_and_faults_and_a_flag_beside_it_wins() {
    let dir = scratch("toml");
    let cfg = dir.join("target.toml");
    std::fs::write(
        &cfg,
        "[[namespace]]\nlba_size = 4096\nblocks = 32\n[[namespace]]\nblocks = 100\n\
         [faults]\nerror_io = 1\nerror_status = 0x80\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let (_t, lines) = Target::with("127.94.17.1", &["--config", cfg]);
    assert_eq!(lines, ["NAMESPACE 1 lba_size=4096 blocks=32 memory", "NAMESPACE 2 lba_size=512 blocks=100 memory"]);
    let (h, a) = ("127.94.17.2", "127.94.17.1");
    let o = host(h, a, &["identify"]);
    assert!(o.status.success(), "{}", text(&o));
    let write = |a| host(h, a, &["write", "--length", "4096", "--timeout", "2"]);
    let o = write(a);
    assert_eq!(o.status.code(), Some(1), "the file's error_io: {}", text(&o));
    assert!(text(&o).contains("SC 0x80"), "the file's error_status: {}", text(&o));
    assert!(write(a).status.success(), "one error only");
    // The same file with --error-io 0: the flag wins.
    let (_t, _) = Target::with("127.94.17.3", &["--config", cfg, "--error-io", "0"]);
    assert!(write("127.94.17.3").status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn random_faults_come_from_the_seed_and_are_counted() {
    // Every I/O command errs at rate 1; the counters say they were random.
    let o = {
        let (t, _) = Target::with("127.94.18.1", &["--for", "3", "--seed", "9", "--error-rate", "1"]);
        let o = host("127.94.18.2", "127.94.18.1", &["write", "--length", "4096", "--timeout", "2"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("internal error"), "{}", text(&o));
        t.finish()
    };
    assert!(o.contains("random_errors=1 random_drops=0 random_delays=0"), "{o}");
}

#[test]
fn bad_target_input_is_refused_by_name_before_listening() {
    let dir = scratch("bad");
    let odd = dir.join("odd.img");
    std::fs::write(&odd, [0u8; 1000]).unwrap();
    let unknown = dir.join("unknown.toml");
    std::fs::write(&unknown, "[faults]\nlose_everything = true\n").unwrap();
    let both = dir.join("both.toml");
    std::fs::write(&both, "[[namespace]]\nfile = \"x.img\"\nblocks = 4\n").unwrap();
    let target =
        |args: &[&str]| rctb(&[&["nvme", "target", "--backend", "udp", "--device", "127.94.19.1"], args].concat());
    for (args, says) in [
        (vec!["--namespace", "/nonexistent/ns.img"], "namespace 1 file /nonexistent/ns.img"),
        (
            vec!["--namespace", odd.to_str().unwrap()],
            "1000 bytes; it must be a non-zero multiple of the block size 512",
        ),
        (vec!["--config", unknown.to_str().unwrap()], "unknown field `lose_everything`"),
        (vec!["--config", both.to_str().unwrap()], "namespace 1: file or blocks, not both"),
        (vec!["--drop-rate", "1.5"], "drop_rate 1.5: a share of I/O commands, 0..=1"),
    ] {
        let o = target(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains("LISTENING"), "{args:?}");
    }
    let o = rctb(&["nvme", "target", "--backend", "sim"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--backend udp or verbs"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
