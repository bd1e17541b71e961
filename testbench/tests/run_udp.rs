//! `rctb run SCENARIO --backend udp`: a scenario's streams between real UDP
//! endpoints on loopback (two 127.x addresses, every frame through the
//! kernel), with the same checks and report as on the simulator; and the
//! scenarios it refuses. Across network namespaces (a veth pair, tc netem
//! loss) it runs in `.ci/run` through `ci/udp-netns`, which needs root.

use std::process::{Command, Output};

fn rctb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rctb"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(args)
        .output()
        .expect("run rctb")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn udp_pair_passes_between_two_loopback_endpoints() {
    let o = rctb(&[
        "run",
        "scenarios/udp-pair.toml",
        "--backend",
        "udp",
        "--node",
        "a=127.91.8.1",
        "--node",
        "b=127.91.8.2",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("result: PASS (37 checks)"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("note: udp: node a on 127.91.8.1:4791 (")), "{out}");
    // Every stream's data crossed the sockets: both endpoints sent and received, none refused.
    for node in ["a", "b"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("note: udp: node {node}: sent ")))
            .unwrap_or_else(|| panic!("no counters for {node}: {out}"));
        assert!(!line.contains(": sent 0 frames") && !line.contains("received 0 "), "{line}");
        assert!(line.contains("dropped 0 bad ICRC, 0 malformed, 0 unsupported"), "{line}");
    }
    assert!(out.contains("  roce channels: 0: 250 x "), "{out}");
}

/// Streams that connect with RDMA CM: the MADs cross the sockets too.
#[test]
fn cm_streams_connect_through_udp_endpoints() {
    let o = rctb(&[
        "run",
        "scenarios/udp-cm.toml",
        "--backend",
        "udp",
        "--node",
        "alpha=127.91.10.1",
        "--node",
        "beta=127.91.10.2",
        "--node",
        "gamma=127.91.10.3",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("result: PASS"), "{out}");
    assert!(out.contains("PASS  read: delivered = 100"), "{out}");
}

#[test]
fn scenarios_the_udp_backend_cannot_run_are_refused_by_name() {
    let refused = |args: &[&str], want: &str| {
        let o = rctb(args);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}\n{out}\n{err}");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    };
    refused(
        &["run", "scenarios/quickstart.toml", "--backend", "udp"],
        ".op: rcsession workloads run on the simulator only",
    );
    refused(
        &["run", "scenarios/rc-session.toml", "--backend", "udp"],
        ".op: rcsession workloads run on the simulator only",
    );
    refused(
        &["run", "scenarios/udp-pair.toml", "--backend", "udp", "--node", "c=127.0.0.9"],
        "--node c: unknown node (nodes: a, b)",
    );
    refused(
        &["run", "scenarios/udp-pair.toml", "--node", "a=127.0.0.9"],
        "--node places UDP endpoints: it needs --backend udp",
    );
    refused(
        &[
            "run",
            "scenarios/udp-pair.toml",
            "--backend",
            "udp",
            "--node",
            "a=127.91.9.1:5000",
            "--node",
            "b=127.91.9.2",
        ],
        "every endpoint needs the same UDP port",
    );
    refused(
        &["run", "scenarios/udp-pair.toml", "--backend", "udp", "--node", "a=127.91.9.1@"],
        "empty namespace after @",
    );
    refused(
        &["run", "scenarios/udp-pair.toml", "--backend", "udp", "--node", "a=127.91.9.1@rctb-no-such-ns"],
        "network namespace rctb-no-such-ns: open",
    );
}
