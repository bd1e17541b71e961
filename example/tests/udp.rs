//! rc-pingpong over real UDP sockets on loopback: the server and the
//! client as two processes of the binary, each a RoCEv2 RC peer (rctb-udp),
//! RDMA CM included; nothing of RDMA on the machine.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn two_processes_ping_pong_over_udp() {
    let bin = env!("CARGO_BIN_EXE_rc-pingpong");
    let mut server = Command::new(bin)
        .args(["server", "--backend", "udp", "--device", "127.95.1.1", "--for", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the server");
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "LISTENING 127.95.1.1:7471");
    let client = Command::new(bin)
        .args(["client", "--backend", "udp", "--device", "127.95.1.2", "--peer", "127.95.1.1", "-n", "200"])
        .output()
        .expect("run the client");
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&client.stdout);
    assert!(client.status.success(), "{text}{}", String::from_utf8_lossy(&client.stderr));
    assert!(text.starts_with("rtt n=200 min="), "{text}");
}

#[test]
fn the_sim_role_and_bad_input() {
    let bin = env!("CARGO_BIN_EXE_rc-pingpong");
    let o = Command::new(bin).args(["sim", "-n", "50", "--seed", "3", "--drop", "0.02"]).output().unwrap();
    assert!(o.status.success());
    let a = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(a.starts_with("rtt n=50 "), "{a}");
    let again = Command::new(bin).args(["sim", "-n", "50", "--seed", "3", "--drop", "0.02"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&again.stdout), a, "a seed replays");
    let o = Command::new(bin).args(["client", "--backend", "udp", "--device", "rxe0", "--peer", "10.0.0.1"]).output();
    let o = o.unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--device \"rxe0\": an IPv4 address on udp"));
}
