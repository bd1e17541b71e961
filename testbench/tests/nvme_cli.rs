//! `rctb nvme` on the simulator: what each subcommand prints (identify and
//! discovery pinned by insta snapshots), exit codes, and a file written
//! then read back through the initiator and the target model.

use std::process::{Command, Output};

fn rctb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rctb")).arg("nvme").args(args).output().expect("run rctb")
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "rctb failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn identify_and_discover_output() {
    insta::assert_snapshot!("nvme_identify", stdout(&rctb(&["identify"])));
    insta::assert_snapshot!("nvme_discover", stdout(&rctb(&["discover"])));
}

#[test]
fn write_then_read_in_one_fabric_each() {
    // Each invocation builds its own fabric: a read sees zeroes, and a
    // write's checksum is the data's.
    let dir = std::env::temp_dir();
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    let input = dir.join(format!("rctb-nvme-{}-in.bin", std::process::id()));
    let output = dir.join(format!("rctb-nvme-{}-out.bin", std::process::id()));
    std::fs::write(&input, &data).unwrap();
    let w = stdout(&rctb(&["write", "--nsid", "2", "--slba", "3", "-d", input.to_str().unwrap(), "--flush"]));
    let fnv = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    assert!(w.starts_with(&format!("wrote 8192 bytes to nsid 2 block 3: fnv1a {fnv:016x}")), "{w}");
    let r = stdout(&rctb(&["read", "--nsid", "2", "--length", "8192", "-o", output.to_str().unwrap()]));
    assert!(r.starts_with("read 8192 bytes from nsid 2 block 0"), "{r}");
    assert_eq!(std::fs::read(&output).unwrap(), vec![0u8; 8192]);
    let _ = std::fs::remove_file(input);
    let _ = std::fs::remove_file(output);
}

#[test]
fn errors_exit_1_with_the_reason() {
    let o = rctb(&["connect", "-n", "nqn.2026-01.io.rctb:nobody"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid subsystem NQN"));
    let o = rctb(&["connect", "-s", "4421", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("10.0.0.2:4421: nothing listens on that port"));
    let o = rctb(&["read", "--nsid", "2", "--length", "100"]);
    assert_eq!(o.status.code(), Some(1), "a length that is not whole blocks");
    let o = rctb(&["connect", "--backend", "verbs"]);
    assert_eq!(o.status.code(), Some(2), "usage error without --device (or without the verbs feature)");
}

#[test]
fn bench_spreads_over_io_queues_and_polls_as_told() {
    let o = stdout(&rctb(&["bench", "--ios", "64", "--qd", "8", "-i", "4", "--poll", "adaptive", "--spin", "16"]));
    assert!(o.contains("BENCH nvme-randread-4KiB-qd8 rctb "), "{o}");
    assert!(
        o.contains("64 random 4096-byte reads of nsid 1 at depth 8 over 4 I/O queues (adaptive, spin 16 polling)"),
        "{o}"
    );
    let o = stdout(&rctb(&["bench", "--ios", "16", "--qd", "4"]));
    assert!(o.contains("over 1 I/O queues (event polling)"), "the defaults: {o}");
}

#[test]
fn bench_reads_sequentially_when_told_and_names_the_row_so() {
    // nsid 1 holds 4 MiB: 10 sequential 1 MiB reads run off its end after
    // the fourth unless they wrap to block 0 (a read past the end fails
    // the run with exit 1).
    let o = stdout(&rctb(&["bench", "--pattern", "seq", "--bs", "1048576", "--ios", "10", "--qd", "2", "-i", "2"]));
    assert!(o.contains("BENCH nvme-seqread-1MiB-qd2 rctb "), "{o}");
    assert!(!o.contains("randread"), "{o}");
    assert!(o.contains("10 sequential 1048576-byte reads of nsid 1 at depth 2 over 2 I/O queues"), "{o}");
    let o = stdout(&rctb(&["bench", "--pattern", "seq", "--nsid", "2", "--ios", "1500", "--qd", "4"]));
    assert!(o.contains("BENCH nvme-seqread-4KiB-qd4 rctb "), "{o}");
    assert!(o.contains("1500 sequential 4096-byte reads of nsid 2 at depth 4"), "past nsid 2's 1024 blocks: {o}");
    // rand stays the default, and its name.
    let o = stdout(&rctb(&["bench", "--pattern", "rand", "--ios", "8", "--qd", "2"]));
    assert!(o.contains("BENCH nvme-randread-4KiB-qd2 rctb ") && o.contains("8 random 4096-byte reads"), "{o}");
}

#[test]
fn bench_pinned_to_a_cpu_runs_there() {
    // The summary reads the thread's affinity back from the kernel: one
    // CPU, the one asked for. (On a one-CPU machine every thread is on
    // CPU 0 anyway; with two or more, a pin that did nothing shows them.)
    let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    for cpu in [0, last] {
        let o = stdout(&rctb(&["bench", "--cpu", &cpu.to_string(), "--ios", "16", "--qd", "4"]));
        assert!(o.contains(&format!("over 1 I/O queues (event polling, pinned to CPU {cpu})")), "{o}");
    }
    let o = stdout(&rctb(&["bench", "--ios", "16", "--qd", "4"]));
    assert!(!o.contains("pinned"), "not pinned unless asked: {o}");
}

#[test]
fn bench_knobs_out_of_range_are_usage_errors_naming_the_flag() {
    for (args, want) in [
        (&["bench", "-i", "0"][..], "-i/--nr-io-queues 0"),
        (&["bench", "--qd", "0"][..], "--qd 0"),
        (&["bench", "--poll", "adaptive", "--spin", "0"][..], "--spin"),
        (&["bench", "--poll", "busy"][..], "--poll busy"),
        (&["bench", "--poll", "never"][..], "expected busy, adaptive or event"),
        (&["bench", "--pattern", "zigzag"][..], "--pattern"),
        (&["bench", "--nsid", "2", "--bs", "8388608"][..], "--bs 8388608: larger than nsid 2"),
        (&["bench", "--cpu", "100000"][..], "--cpu 100000: 100000 is not a CPU this process may run on (allowed: 0"),
    ] {
        let o = rctb(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn bench_jobs_split_the_reads_and_the_depth_and_each_runs_on_its_cpu() {
    let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let cpus = format!("0,{last}");
    let o = stdout(&rctb(&["bench", "--jobs", "3", "--cpu", &cpus, "--ios", "100", "--qd", "8"]));
    assert!(o.contains("BENCH nvme-randread-4KiB-qd8 rctb "), "the row names the depth in all: {o}");
    assert!(
        o.contains(
            "100 random 4096-byte reads of nsid 1 at depth 8 in 3 jobs, each its own controller over 1 I/O queues"
        ),
        "{o}"
    );
    // 100 over 3 is 34, 33, 33; depth 8 is 3, 3, 2; job i on the i-th CPU of the list, round-robin.
    for (i, (n, qd, cpu)) in [(34, 3, 0), (33, 3, last), (33, 2, 0)].into_iter().enumerate() {
        let line = o.lines().find(|l| l.starts_with(&format!("job {i}: "))).unwrap_or_else(|| panic!("job {i}: {o}"));
        assert!(line.starts_with(&format!("job {i}: {n} reads at depth {qd} in ")), "{line}");
        assert!(line.ends_with(&format!(" IOPS, pinned to CPU {cpu}")), "{line}");
    }
    assert!(!o.contains("job 3"), "{o}");
    // Sequential jobs start at their own stretch of the namespace, and
    // unpinned jobs say nothing of CPUs.
    let o = stdout(&rctb(&["bench", "--jobs", "2", "--pattern", "seq", "--ios", "40", "--qd", "4", "-i", "2"]));
    assert!(o.contains("40 sequential 4096-byte reads of nsid 1 at depth 4 in 2 jobs"), "{o}");
    assert!(o.contains("over 2 I/O queues") && !o.contains("pinned"), "{o}");
}

#[test]
fn bench_jobs_out_of_range_are_usage_errors() {
    for (args, want) in [
        (&["bench", "--jobs", "0"][..], "--jobs 0: at least one job"),
        (&["bench", "--jobs", "3", "--qd", "2"][..], "--jobs 3: more jobs than --qd 2"),
        (&["bench", "--jobs", "4", "--ios", "3"][..], "--jobs 4: more jobs than --qd 32 or --ios 3"),
        (&["bench", "--jobs", "2", "--backend", "udp", "--device", "127.0.0.1"][..], "--jobs 2 with --backend udp"),
        (&["bench", "--jobs", "2", "--cpu", "0,100000"][..], "--cpu 0,100000: 100000 is not a CPU"),
        (&["bench", "--jobs", "2", "--nsid", "2", "--bs", "8388608"][..], "--bs 8388608: larger than nsid 2"),
    ] {
        let o = rctb(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
