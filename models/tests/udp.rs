//! The models are not simulator code: the session pair, unchanged, between
//! two endpoints of the udp backend on loopback (real sockets, real time).
//! (The FPGA engine model on udp is what the Python package's
//! `rctb.rocev2` runs on a `rctb.udp.Network`; `rctb fpga-emu` runs it on
//! verbs.)

use rctb_core::transport::Mtu;
use rctb_core::wire::hipobj::Op;
use rctb_models::rcsession::SessionPair;
use rctb_udp::{UdpConfig, UdpReactor};

#[test]
fn session_pair_moves_objects_intact_between_udp_endpoints() {
    let reactor = UdpReactor::new(Some(11));
    let cfg = |name: &str, ip: &str| {
        let mut udp_config = UdpConfig::new(name, ip.parse().unwrap());
        udp_config.mtu = Mtu::Mtu1024;
        udp_config
    };
    let server = reactor.endpoint(cfg("server", "127.92.0.1")).expect("bind 127.92.0.1:4791");
    let client = reactor.endpoint(cfg("client", "127.92.0.2")).expect("bind 127.92.0.2:4791");
    let mut pair = SessionPair::new(3, 70_000, server, client).expect("a server and a client on udp");
    for (k, size) in [1usize, 4097, 70_000].into_iter().enumerate() {
        let object: Vec<u8> = (0..size).map(|i| (i * 7 + k) as u8).collect();
        for op in [Op::Get, Op::Put] {
            pair.transfer(op, &object).unwrap_or_else(|e| panic!("{op:?} of {size} bytes over udp: {e}"));
        }
    }
    assert_eq!(pair.sessions(), 6);
    let u = pair.server.usage();
    assert_eq!((u.sessions, u.staging_bytes, u.qps, u.leaked_mrs, u.leaked_qps), (0, 0, 0, 0, 0));
}
