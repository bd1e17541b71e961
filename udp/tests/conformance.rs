//! The conformance suite (crate `rctb-conformance`) on the `udp` backend:
//! two endpoints of one reactor on loopback addresses, every frame through
//! real UDP sockets (and, when the test may open raw sockets, read back with
//! its IPv4 header and ICRC-checked). The `cm/` cases connect through RDMA
//! CM MADs on QP1.
//!
//! These run in real time: RC's ACK timers and retry budget meet the
//! scheduler. One test at a time ([`one_at_a_time`]), so a test's timers
//! never compete for the cores with a sibling's 1 MiB transfers (on a
//! 2-core machine, two of them at once starved a 1 MiB SEND into
//! RETRY_EXC_ERR).

use std::sync::{Mutex, MutexGuard};

use rctb_conformance as conformance;
use rctb_core::transport::Mtu;
use rctb_udp::{RawRx, UdpConfig, UdpReactor};

/// Held for the whole of each test; a failed test's poison is ignored.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn every_conformance_case_passes_on_udp_loopback() {
    let _serial = one_at_a_time();
    let reactor = UdpReactor::new(Some(1));
    let cfg = |name: &str, ip: &str| {
        let mut udp_config = UdpConfig::new(name, ip.parse().unwrap());
        udp_config.mtu = Mtu::Mtu1024;
        udp_config
    };
    let mut a = reactor.endpoint(cfg("udp1", "127.91.0.2")).expect("bind 127.91.0.2:4791");
    let mut b = reactor.endpoint(cfg("udp0", "127.91.0.1")).expect("bind 127.91.0.1:4791");
    let mut lines = Vec::new();
    let results = conformance::run_selected(&mut a, &mut b, &|_| true, &mut |r| {
        eprintln!("{}", r.line());
        lines.push(r.line())
    });
    let failed: Vec<String> = results.iter().filter(|r| !r.passed()).map(|r| r.line()).collect();
    assert!(failed.is_empty(), "conformance failures on udp loopback:\n{}", failed.join("\n"));
    assert_eq!(results.len(), conformance::cases::<rctb_udp::UdpTransport>().len(), "every case ran");
    let (sa, sb) = (a.stats(), b.stats());
    eprintln!("a: {sa:?}\nb: {sb:?}\nengine: {:?}", reactor.engine_stats());
    assert_eq!((sa.rx_bad_icrc, sb.rx_bad_icrc, sa.rx_malformed, sb.rx_malformed), (0, 0, 0, 0));
    assert!(sa.rx_frames > 0 && sb.rx_frames > 0);
}

/// Without a raw socket (as an unprivileged process runs) the IPv4 header
/// is rebuilt around the UDP payload; on a port other than 4791 the ICRC
/// covers that port. Every data case still passes.
#[test]
fn data_cases_pass_without_raw_sockets_on_another_port() {
    let _serial = one_at_a_time();
    let reactor = UdpReactor::new(Some(2));
    let cfg = |name: &str, ip: &str| {
        let mut udp_config = UdpConfig::new(name, ip.parse().unwrap());
        udp_config.mtu = Mtu::Mtu1024;
        udp_config.port = 14791;
        udp_config.peer_port = 14791;
        udp_config.raw_rx = RawRx::Off;
        udp_config
    };
    let mut a = reactor.endpoint(cfg("udp1", "127.91.1.2")).expect("bind 127.91.1.2:14791");
    let mut b = reactor.endpoint(cfg("udp0", "127.91.1.1")).expect("bind 127.91.1.1:14791");
    let data = |name: &str| ["send/", "send_imm/", "write/", "write_imm/", "read/"].iter().any(|p| name.starts_with(p));
    let results = conformance::run_selected(&mut a, &mut b, &data, &mut |_| {});
    let failed: Vec<String> = results.iter().filter(|r| !r.passed()).map(|r| r.line()).collect();
    assert!(failed.is_empty(), "failures without raw sockets:\n{}", failed.join("\n"));
    assert_eq!(results.len(), 35);
    let (sa, sb) = (a.stats(), b.stats());
    assert!(!sa.raw_rx && !sb.raw_rx);
    assert_eq!((sa.rx_bad_icrc, sb.rx_bad_icrc), (0, 0), "{sa:?} {sb:?}");
}

/// Loss on the UDP path (the drop hook loses 3% of frames each way at both
/// ends): every data case of 1 MiB and of several packets still completes
/// with its data intact, through NAKs, go-back-N and timeouts.
#[test]
fn transfers_complete_intact_under_loss() {
    let _serial = one_at_a_time();
    let reactor = UdpReactor::new(Some(3));
    let cfg = |name: &str, ip: &str, seed| {
        {
            let mut udp_config = UdpConfig::new(name, ip.parse().unwrap());
            udp_config.mtu = Mtu::Mtu1024;
            udp_config
        }
        .with_loss(0.03, 0.03, seed)
    };
    let mut a = reactor.endpoint(cfg("udp1", "127.91.2.2", 11)).expect("bind 127.91.2.2:4791");
    let mut b = reactor.endpoint(cfg("udp0", "127.91.2.1", 12)).expect("bind 127.91.2.1:4791");
    let lossy = |name: &str| {
        ["send/", "send_imm/", "write/", "write_imm/", "read/"].iter().any(|p| name.starts_with(p))
            && (name.ends_with("/1mib") || name.ends_with("/3mtu+5") || name.ends_with("/1"))
    };
    let results = conformance::run_selected(&mut a, &mut b, &lossy, &mut |r| eprintln!("{}", r.line()));
    let failed: Vec<String> = results.iter().filter(|r| !r.passed()).map(|r| r.line()).collect();
    let (sa, sb, engine) = (a.stats(), b.stats(), reactor.engine_stats());
    eprintln!("a: {sa:?}\nb: {sb:?}\nengine: {engine:?}");
    assert!(failed.is_empty(), "failures under loss:\n{}", failed.join("\n"));
    assert_eq!(results.len(), 15);
    // The loss happened and was recovered from.
    assert!(sa.tx_dropped + sa.rx_dropped > 0 && sb.tx_dropped + sb.rx_dropped > 0);
    assert!(engine.retransmitted > 0);
}

/// Two reactors, as two processes would have, each endpoint waiting through
/// a [`Driven`] that also drives the other's reactor (what the harness does
/// between this backend and an RDMA device, which needs no driving).
#[test]
fn data_cases_pass_between_two_reactors() {
    let _serial = one_at_a_time();
    use rctb_udp::mixed::{Driven, Either};
    let cfg = |name: &str, ip: &str| {
        let mut udp_config = UdpConfig::new(name, ip.parse().unwrap());
        udp_config.mtu = Mtu::Mtu1024;
        udp_config
    };
    let (r1, r2) = (UdpReactor::new(Some(4)), UdpReactor::new(Some(5)));
    let a = r1.endpoint(cfg("udp1", "127.91.3.2")).expect("bind 127.91.3.2:4791");
    let b = r2.endpoint(cfg("udp0", "127.91.3.1")).expect("bind 127.91.3.1:4791");
    let mut a: Either<Driven<_>, Driven<_>> = Either::A(Driven::new(a, r2.clone()));
    let mut b = Either::B(Driven::new(b, r1.clone()));
    let data = |name: &str| ["send/", "write/", "read/"].iter().any(|p| name.starts_with(p));
    let results = conformance::run_selected(&mut a, &mut b, &data, &mut |r| eprintln!("{}", r.line()));
    let failed: Vec<String> = results.iter().filter(|r| !r.passed()).map(|r| r.line()).collect();
    eprintln!("a: {:?}\nb: {:?}", r1.engine_stats(), r2.engine_stats());
    assert!(failed.is_empty(), "failures between two reactors:\n{}", failed.join("\n"));
    assert_eq!(results.len(), 21);
}
