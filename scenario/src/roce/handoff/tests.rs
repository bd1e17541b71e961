//! Messages round-trip and refuse what is malformed; channels deliver in
//! order and time out.

use std::io::Write as _;

use super::*;

const HOST: &str = "host qpn=0x000011 rq_psn=0x3a1b2c sq_psn=0x0c0ffe mr_addr=0x7f2a00000000 mr_len=1048576 \
    rkey=0x00001234 gid=0000:0000:0000:0000:0000:ffff:0a0a:0001 pmtu=1024 max_payload=4096";

fn host() -> HostMsg {
    let Ok(Message::Host(h)) = Message::parse(HOST, 1) else { panic!("HOST parses") };
    h
}

#[test]
fn every_message_round_trips_through_its_line() {
    let h = host();
    assert_eq!(h.params.qpn, 0x11);
    assert_eq!(h.params.rq_psn.get(), 0x3a1b2c);
    assert_eq!(h.params.mr_len, 1 << 20);
    assert_eq!(h.gid.to_ipv4(), Some("10.10.0.1".parse().unwrap()));
    assert_eq!(h.pmtu, Mtu::Mtu1024);
    let all = [
        Message::Host(h),
        Message::Fpga(FpgaMsg { qpn: 0xFFFFFF, lkey: u32::MAX, gid: Gid::from_ipv4("10.10.0.2".parse().unwrap()) }),
        Message::Ready,
        Message::Done(DoneMsg { frames: 100_000, bytes: 1 << 40, errors: 0 }),
    ];
    for m in all {
        assert_eq!(Message::parse(&m.to_string(), 1).unwrap(), m, "{m}");
    }
    assert_eq!(Message::Host(h).to_string(), HOST.split_whitespace().collect::<Vec<_>>().join(" "));
}

fn err(line: &str) -> String {
    Message::parse(line, 3).unwrap_err().to_string()
}

#[test]
fn malformed_lines_name_the_message_the_field_and_the_rule() {
    assert_eq!(err("   "), "line 3: empty message");
    assert_eq!(err("hello x=1"), "line 3: unknown message \"hello\" (expected host, fpga, ready or done)");
    assert_eq!(err("fpga qpn"), "line 3: fpga: \"qpn\" is not key=value");
    assert_eq!(err("fpga qpn=1 lkey=2 gid=x color=3"), "line 3: fpga.color: unknown field (fields: qpn, lkey, gid)");
    assert_eq!(err("done frames=1 frames=2"), "line 3: done.frames: given twice");
    assert_eq!(err("fpga qpn=1 gid=0000:0000:0000:0000:0000:ffff:0a0a:0001"), "line 3: fpga.lkey: missing");
    assert_eq!(
        err(&HOST.replace("qpn=0x000011", "qpn=0x1000000")),
        "line 3: host.qpn = \"0x1000000\": must fit 24 bits (0..=0xffffff)"
    );
    assert_eq!(
        err(&HOST.replace("mr_len=1048576", "mr_len=0")),
        "line 3: host.mr_len = \"0\": must be 1..=2^32-1 (the engine's length is 32 bits)"
    );
    assert_eq!(
        err(&HOST.replace("mr_len=1048576", "mr_len=4294967296")),
        "line 3: host.mr_len = \"4294967296\": must be 1..=2^32-1 (the engine's length is 32 bits)"
    );
    assert_eq!(
        err(&HOST.replace("pmtu=1024", "pmtu=1500")),
        "line 3: host.pmtu = \"1500\": must be 256, 512, 1024, 2048 or 4096"
    );
    assert_eq!(
        err(&HOST.replace("rkey=0x00001234", "rkey=0x1_0000")),
        "line 3: host.rkey = \"0x1_0000\": must fit 32 bits"
    );
    assert_eq!(
        err(&HOST.replace("gid=0000:0000:0000:0000:0000:ffff:0a0a:0001", "gid=::ffff:10.10.0.1")),
        "line 3: host.gid = \"::ffff:10.10.0.1\": must be 8 groups of 4 hex digits joined by ':'"
    );
    assert_eq!(err("fpga qpn=1 lkey=-1 gid=0"), "line 3: fpga.lkey = \"-1\": must fit 32 bits");
}

#[test]
fn a_reader_skips_comments_and_wants_the_expected_kind() {
    let text = "# from roce-rx\n\nready\nhost qpn=1\n";
    let mut r = HandoffIn::from_reader("test", std::io::Cursor::new(text));
    let t = Duration::from_secs(5);
    assert_eq!(r.expect("ready", t).unwrap(), Message::Ready);
    let e = r.expect("host", t).unwrap_err();
    assert!(matches!(e, HandoffError::Missing { line: 2, kind: "host", field: "rq_psn" }), "{e}");
    let e = r.expect("fpga", t).unwrap_err();
    assert_eq!(e.to_string(), "test: closed before the fpga message");
    let mut r = HandoffIn::from_reader("test", std::io::Cursor::new("ready\n"));
    let e = r.expect("fpga", t).unwrap_err();
    assert_eq!(e.to_string(), "line 1: expected a fpga message, got ready");
}

#[test]
fn a_file_is_followed_from_before_it_exists_until_its_lines_are_complete() {
    let path = std::env::temp_dir().join(format!("rctb-handoff-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut r = HandoffIn::open(&Channel::parse(path.to_str().unwrap()));
    assert_eq!(r.poll("ready").unwrap(), None, "no file yet");
    let mut w = HandoffOut::open(&Channel::File(path.clone())).unwrap();
    // A line in two writes: the reader must wait for its end.
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"fpga qpn=0x12 lkey=7 ").unwrap();
    f.flush().unwrap();
    let e = r.expect("fpga", Duration::from_millis(100)).unwrap_err();
    assert!(matches!(e, HandoffError::Timeout { expected: "fpga", .. }), "{e}");
    f.write_all(b"gid=0000:0000:0000:0000:0000:ffff:0a0a:0002\n").unwrap();
    let m = r.expect("fpga", Duration::from_secs(5)).unwrap();
    assert!(matches!(m, Message::Fpga(FpgaMsg { qpn: 0x12, lkey: 7, .. })), "{m:?}");
    w.send(&Message::Done(DoneMsg { frames: 1, bytes: 2, errors: 0 })).unwrap();
    let m = r.expect("done", Duration::from_secs(5)).unwrap();
    assert_eq!(m, Message::Done(DoneMsg { frames: 1, bytes: 2, errors: 0 }));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_path_that_becomes_a_fifo_after_the_reader_opened_is_read_as_one() {
    let path = std::env::temp_dir().join(format!("rctb-handoff-late-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut r = HandoffIn::open(&Channel::parse(path.to_str().unwrap()));
    assert_eq!(r.poll("ready").unwrap(), None, "nothing there yet");
    let made = std::process::Command::new("mkfifo").arg(&path).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
    // The reader finds a FIFO at its next look and opens it in a thread
    // (opening blocks until this writer comes).
    assert_eq!(r.poll("ready").unwrap(), None, "no writer yet");
    let mut w = HandoffOut::open(&Channel::File(path.clone())).unwrap();
    w.send(&Message::Ready).unwrap();
    drop(w);
    let t = Duration::from_secs(5);
    assert_eq!(r.expect("ready", t).unwrap(), Message::Ready);
    let e = r.expect("done", t).unwrap_err();
    assert!(matches!(e, HandoffError::Closed { expected: "done", .. }), "{e}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_fifo_carries_the_messages_and_its_writers_close_ends_the_channel() {
    let path = std::env::temp_dir().join(format!("rctb-handoff-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let made = std::process::Command::new("mkfifo").arg(&path).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
    // The reader opens it in its thread; the writer's open waits for it.
    let mut r = HandoffIn::open(&Channel::parse(path.to_str().unwrap()));
    let mut w = HandoffOut::open(&Channel::File(path.clone())).unwrap();
    w.send(&Message::Ready).unwrap();
    w.send(&Message::Done(DoneMsg { frames: 3, bytes: 4, errors: 0 })).unwrap();
    let t = Duration::from_secs(5);
    assert_eq!(r.expect("ready", t).unwrap(), Message::Ready);
    drop(w);
    assert_eq!(r.expect("done", t).unwrap(), Message::Done(DoneMsg { frames: 3, bytes: 4, errors: 0 }));
    // Every writer closed it: the channel is closed, not silent.
    let e = r.expect("fpga", t).unwrap_err();
    assert!(matches!(e, HandoffError::Closed { expected: "fpga", .. }), "{e}");
    let _ = std::fs::remove_file(&path);
}
