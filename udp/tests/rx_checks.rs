//! What arrives at an endpoint is checked before the RC engine sees it:
//! a bad ICRC, a malformed packet and an unsupported one are dropped and
//! counted; a good one reaches the engine.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

use rctb_core::time::Duration;
use rctb_core::transport::Psn;
use rctb_core::wire::roce::{Bth, Opcode};
use rctb_udp::Packet;
use rctb_udp::{UdpConfig, UdpReactor, UdpStats, wire};

/// Turns the reactor until `done` holds for the endpoint's counters (at
/// most 5 s on its clock).
fn until(reactor: &UdpReactor, stats: impl Fn() -> UdpStats, done: impl Fn(&UdpStats) -> bool) -> UdpStats {
    let deadline = reactor.now() + Duration::from_secs(5);
    loop {
        reactor.turn().unwrap();
        let s = stats();
        if done(&s) || reactor.now() >= deadline {
            return s;
        }
        reactor.block(deadline).unwrap();
    }
}

#[test]
fn bad_icrc_malformed_and_unsupported_frames_are_dropped_and_counted() {
    let (local, peer) = (Ipv4Addr::new(127, 91, 4, 1), Ipv4Addr::new(127, 91, 4, 2));
    let reactor = UdpReactor::new(Some(9));
    let t = reactor.endpoint(UdpConfig::new("rx", local)).expect("bind 127.91.4.1:4791");
    let sender = UdpSocket::bind(SocketAddrV4::new(peer, 4791)).unwrap();
    rustix::net::sockopt::set_ip_mtu_discover(&sender, rustix::net::sockopt::Ipv4PathMtuDiscovery::DO).unwrap();
    let to = SocketAddrV4::new(local, 4791);
    let pkt = |op, payload: Vec<u8>| Packet {
        src_ip: peer,
        dst_ip: local,
        udp_src_port: 4791,
        bth: Bth::new(op, 0x99, Psn::wrapping(5)),
        reth: None,
        aeth: None,
        atomic: None,
        atomic_ack: None,
        deth: None,
        imm: None,
        payload,
        corrupt: false,
    };
    let mut ip = Vec::new();
    let at = wire::encode(&pkt(Opcode::SEND_ONLY, vec![1; 64]), 4791, 4791, &mut ip).unwrap();

    // A good frame reaches the engine (which has no QP 0x99: dropped there).
    sender.send_to(&ip[at..], to).unwrap();
    let s = until(&reactor, || t.stats(), |s| s.rx_frames == 1);
    assert_eq!(s.rx_frames, 1, "{s:?}");
    assert_eq!(reactor.engine_stats().dropped_no_qp, 1);

    // One bit flipped in the payload: the ICRC check drops it.
    let mut bad = ip[at..].to_vec();
    bad[20] ^= 0x10;
    sender.send_to(&bad, to).unwrap();
    let s = until(&reactor, || t.stats(), |s| s.rx_bad_icrc == 1);
    assert_eq!((s.rx_bad_icrc, s.rx_frames), (1, 1), "{s:?}");

    // Too short to be RoCEv2.
    sender.send_to(&[0u8; 6], to).unwrap();
    let s = until(&reactor, || t.stats(), |s| s.rx_malformed == 1);
    assert_eq!((s.rx_malformed, s.rx_frames), (1, 1), "{s:?}");
    assert_eq!(reactor.engine_stats().dropped_no_qp, 1);
}
