//! The reactor's contract seen from outside: a driven endpoint's verbs put
//! their frames on the socket at once, an undriven handle's wait for the
//! caller's `turn`; the capture holds every frame the engines sent; one
//! reactor refuses a second endpoint with the same name or address.

use std::net::Ipv4Addr;

use rctb_core::time::Duration;
use rctb_core::transport::*;
use rctb_udp::{UdpConfig, UdpError, UdpReactor, UdpTransport};

struct End {
    t: UdpTransport,
    cq: CqId,
    qp: QpInfo,
    mr: MrInfo,
}

fn end(reactor: &UdpReactor, name: &str, ip: Ipv4Addr) -> End {
    let mut cfg = UdpConfig::new(name, ip);
    cfg.mtu = Mtu::Mtu1024;
    cfg.seed = Some(3);
    let mut t = reactor.endpoint(cfg).unwrap_or_else(|e| panic!("bind {ip}:4791: {e}"));
    let pd = t.alloc_pd().unwrap();
    let cq = t.create_cq(16).unwrap();
    let mr = t.reg_mr(pd, 1 << 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let caps = QpCaps { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: None }).unwrap();
    End { t, cq, qp, mr }
}

fn connect(x: &mut End, peer: &End, peer_ip: Ipv4Addr) {
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    x.t.modify_qp(x.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).unwrap();
    let rtr = RtrAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: peer.qp.qpn,
        rq_psn: Psn::wrapping(100),
        max_dest_rd_atomic: 1,
        min_rnr_timer: RnrTimer::from_code(1).unwrap(),
        av: AddressVector::new(Gid::from_ipv4(peer_ip), 1),
    };
    x.t.modify_qp(x.qp.id, &QpTransition::Rtr(rtr)).unwrap();
    let rts = RtsAttr { sq_psn: Psn::wrapping(100), timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 };
    x.t.modify_qp(x.qp.id, &QpTransition::Rts(rts)).unwrap();
}

/// Waits on `x` for one completion (at most 5 s).
fn one_completion(x: &mut End) -> Completion {
    let deadline = x.t.now() + Duration::from_secs(5);
    let mut wc = Vec::new();
    while wc.is_empty() {
        assert_eq!(x.t.wait(&[x.cq], deadline).unwrap(), Readiness::Ready, "no completion in 5 s");
        x.t.poll_cq(x.cq, 1, &mut wc).unwrap();
    }
    wc.remove(0)
}

#[test]
fn undriven_verbs_leave_their_frames_to_the_next_turn_and_the_capture_has_every_frame() {
    let (ip_a, ip_b) = (Ipv4Addr::new(127, 91, 40, 1), Ipv4Addr::new(127, 91, 40, 2));
    let reactor = UdpReactor::new(Some(3));
    let (mut a, mut b) = (end(&reactor, "a", ip_a), end(&reactor, "b", ip_b));
    connect(&mut a, &b, ip_b);
    connect(&mut b, &a, ip_a);
    reactor.enable_pcap();
    let len = 3000; // three packets at MTU 1024
    b.t.post_recv(b.qp.id, &RecvWr::new(7, &[Sge::new(b.mr.id, 0, len)])).unwrap();

    // An undriven handle: the SEND waits in the engine until the reactor turns.
    let mut quiet = a.t.undriven();
    a.t.mr_write(a.mr.id, 0, &vec![0x5a; len as usize]).unwrap();
    quiet.post_send(a.qp.id, &SendWr::new(1, SendOp::Send, &[Sge::new(a.mr.id, 0, len)])).unwrap();
    let mut none = Vec::new();
    assert_eq!(quiet.poll_cq(a.cq, 1, &mut none).unwrap(), 0);
    assert_eq!(a.t.stats().tx_frames, 0, "an undriven verb sent: {:?}", a.t.stats());
    reactor.turn().unwrap();
    assert_eq!(a.t.stats().tx_frames, 3, "{:?}", a.t.stats());

    let (wa, wb) = (one_completion(&mut a), one_completion(&mut b));
    assert_eq!((wa.wr_id, wa.status), (1, WcStatus::Success), "{wa:?}");
    assert_eq!((wb.wr_id, wb.status, wb.byte_len), (7, WcStatus::Success, len), "{wb:?}");
    let mut got = vec![0; len as usize];
    b.t.mr_read(b.mr.id, 0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0x5a));

    // A driven verb sends at once: the next SEND is on the socket when
    // post_send returns.
    b.t.post_recv(b.qp.id, &RecvWr::new(8, &[Sge::new(b.mr.id, 0, 64)])).unwrap();
    let before = a.t.stats().tx_frames;
    a.t.post_send(a.qp.id, &SendWr::new(2, SendOp::Send, &[Sge::new(a.mr.id, 0, 64)])).unwrap();
    assert_eq!(a.t.stats().tx_frames, before + 1);
    assert_eq!(one_completion(&mut a).status, WcStatus::Success);
    assert_eq!(one_completion(&mut b).wr_id, 8);

    // The capture: a little-endian nanosecond pcap of Ethernet frames, one
    // per frame the engines sent, addressed between the two endpoints.
    // Loopback delivers at once: after one more turn every frame sent was read.
    reactor.turn().unwrap();
    let engine = reactor.engine_stats();
    let pcap = reactor.take_pcap().expect("capture enabled");
    assert_eq!(&pcap[..4], &0xa1b2_3c4d_u32.to_le_bytes());
    let (mut frames, mut bytes, mut at) = (0u64, 0u64, 24);
    while at < pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..at + 16 + caplen];
        assert_eq!(&frame[12..14], &[0x08, 0x00], "IPv4");
        let (src, dst) = (&frame[26..30], &frame[30..34]);
        assert!(
            (src, dst) == (&ip_a.octets()[..], &ip_b.octets()[..])
                || (src, dst) == (&ip_b.octets()[..], &ip_a.octets()[..])
        );
        frames += 1;
        bytes += caplen as u64;
        at += 16 + caplen;
    }
    assert_eq!((frames, bytes), (engine.frames_sent, engine.bytes_sent), "{engine:?}");
    assert!(engine.acks >= 2 && engine.delivered == frames, "{engine:?}");
}

#[test]
fn one_reactor_refuses_a_second_endpoint_with_the_same_name_or_address() {
    let reactor = UdpReactor::new(Some(1));
    let _a = reactor.endpoint(UdpConfig::new("a", Ipv4Addr::new(127, 91, 41, 1))).unwrap();
    let same_name = reactor.endpoint(UdpConfig::new("a", Ipv4Addr::new(127, 91, 41, 2)));
    assert!(matches!(same_name, Err(UdpError::InUse { field: "name", .. })), "{same_name:?}");
    let mut other_port = UdpConfig::new("b", Ipv4Addr::new(127, 91, 41, 1));
    other_port.port = 4792;
    other_port.peer_port = 4792;
    let same_ip = reactor.endpoint(other_port);
    assert!(matches!(same_ip, Err(UdpError::InUse { field: "address", .. })), "{same_ip:?}");
    // What was refused bound nothing: the address is free again for a new one.
    let c = reactor.endpoint(UdpConfig::new("c", Ipv4Addr::new(127, 91, 41, 2)));
    assert!(c.is_ok(), "{c:?}");
}
