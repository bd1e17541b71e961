//! The engine's CM against the kernel's, byte for byte where the protocol
//! fixes the bytes: the NVMe/RDMA host's REQ from
//! `testdata/captures/nvme-rdma.pcap` (Linux `nvme connect` over rxe) is
//! served by an engine listening on 4420, and the engine's own REQ and
//! REP carry what the kernel's carry.

use std::net::{Ipv4Addr, SocketAddrV4};

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_core::wire::cm::{self, CmMad, IpCmHeader, IpServiceId, RDMA_PS_TCP};
use rctb_core::wire::roce::RoceFrame;
use rctb_engine::{Endpoint, EndpointConfig, Packet};

const HOST: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 2);
const TARGET: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);

/// The capture's QP1 frames, as packets the engine takes.
fn capture_mads() -> Vec<Packet> {
    capture_qp1().into_iter().map(|(_, p)| p).collect()
}

/// The capture's QP1 frames, each with its Ethernet source (the sender's MAC).
fn capture_qp1() -> Vec<([u8; 6], Packet)> {
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/nvme-rdma.pcap")).unwrap();
    let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    let mut out = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.unwrap();
        let Ok(f) = RoceFrame::decode(&pkt.data) else { continue };
        if f.bth.dest_qp != 1 {
            continue;
        }
        let pkt = Packet {
            src_ip: f.ip.src,
            dst_ip: f.ip.dst,
            udp_src_port: f.udp.src_port,
            bth: f.bth,
            reth: None,
            aeth: None,
            atomic: None,
            atomic_ack: None,
            deth: f.ext.deth,
            imm: None,
            payload: f.payload[..cm::MAD_LEN].to_vec(),
            corrupt: false,
        };
        out.push((f.eth.expect("an Ethernet capture").src.0, pkt));
    }
    out
}

fn mad(p: &Packet) -> cm::CmMessage {
    CmMad::decode(&p.payload).unwrap().message
}

fn endpoint(name: &str, ip: Ipv4Addr) -> Endpoint {
    let mut cfg = EndpointConfig::new(name, ip);
    cfg.mtu = Mtu::Mtu1024;
    Endpoint::new(cfg, Box::new(ChaCha8Rng::seed_from_u64(7)))
}

fn qp_init(ep: &mut Endpoint) -> QpInit {
    let pd = ep.alloc_pd().unwrap();
    let cq = ep.create_cq(64).unwrap();
    QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: true, srq: None }
}

#[test]
fn the_kernel_hosts_req_is_served_and_answered_as_nvmet_answers_it() {
    let frames = capture_mads();
    let (req, kernel_rep, kernel_rtu) = (&frames[0], &frames[1], &frames[2]);
    let mut t = endpoint("target", TARGET);
    t.cm_listen(4420).unwrap();
    let now = Instant::ZERO;
    t.handle_packet(now, req).unwrap();
    let Some(CmEvent::ConnectRequest { conn, remote, private_data, .. }) = t.poll_cm_event() else {
        panic!("the REQ made no request")
    };
    assert_eq!(remote, SocketAddrV4::new(HOST, 0xcfc2));
    // nvme_rdma_cm_req: recfmt 0, qid 0, hrqsize 32, hsqsize 31.
    assert_eq!(private_data[..8], [0, 0, 0, 0, 0x20, 0, 0x1f, 0]);
    let init = qp_init(&mut t);
    let qp = t.cm_accept(now, conn, &AcceptParams::new(init, vec![0, 0, 0x20, 0])).unwrap();
    let rep = t.poll_cm_packet(&mut Vec::new()).expect("a REP");
    assert_eq!((rep.dst_ip, rep.bth.dest_qp, rep.deth.map(|d| d.qkey)), (HOST, 1, Some(cm::GSI_QKEY)));
    let (cm::CmMessage::Rep(ours), cm::CmMessage::Rep(kernels), cm::CmMessage::Req(r)) =
        (mad(&rep), mad(kernel_rep), mad(req))
    else {
        panic!()
    };
    assert_eq!(ours.remote_comm_id, r.local_comm_id);
    assert_eq!(ours.remote_comm_id, kernels.remote_comm_id);
    assert_eq!(ours.local_qpn, t.query_qp(qp).unwrap().qpn);
    for (what, a, b) in [
        ("local_qkey", ours.local_qkey, kernels.local_qkey),
        ("local_eecn", ours.local_eecn, kernels.local_eecn),
        ("target_ack_delay", ours.target_ack_delay.into(), kernels.target_ack_delay.into()),
        ("failover_accepted", ours.failover_accepted.into(), kernels.failover_accepted.into()),
        ("end_to_end_flow_control", ours.end_to_end_flow_control.into(), kernels.end_to_end_flow_control.into()),
        ("srq", ours.srq.into(), kernels.srq.into()),
    ] {
        assert_eq!(a, b, "REP.{what}");
    }
    assert_eq!(ours.private_data[..4], kernels.private_data[..4]);
    // The QP took the host's QPN and PSN and the smaller MTU.
    assert_eq!(t.query_qp(qp).unwrap().state, QpState::Rts);
    // The host's RTU (addressed to our communication id) establishes it.
    let mut rtu = kernel_rtu.clone();
    rtu.payload[24 + 4..24 + 8].copy_from_slice(&ours.local_comm_id.to_be_bytes());
    t.handle_packet(now, &rtu).unwrap();
    assert!(matches!(t.poll_cm_event(), Some(CmEvent::Established { conn: c, .. }) if c == conn));

    // PSNs as the kernel's ib_cm pairs them: the host sends from our REP's
    // starting PSN, and we send from its REQ's.
    let pd = init.pd;
    let mr = t.reg_mr(pd, 4096, Access::LOCAL_WRITE).unwrap();
    t.post_recv(now, qp, &RecvWr::new(1, &[Sge::new(mr.id, 0, 64)])).unwrap();
    let mut send = Packet {
        src_ip: HOST,
        dst_ip: TARGET,
        udp_src_port: 0xC000,
        bth: rctb_core::wire::roce::Bth::new(
            rctb_core::wire::roce::Opcode::SEND_ONLY,
            ours.local_qpn,
            Psn::wrapping(ours.starting_psn),
        ),
        reth: None,
        aeth: None,
        atomic: None,
        atomic_ack: None,
        deth: None,
        imm: None,
        payload: vec![0x7f; 64],
        corrupt: false,
    };
    send.bth.ack_req = true;
    t.handle_packet(now, &send).unwrap();
    let mut wc = Vec::new();
    let cq = init.recv_cq;
    t.poll_cq(cq, 4, &mut wc).unwrap();
    assert!(matches!(wc[..], [Completion { status: WcStatus::Success, byte_len: 64, .. }]), "{wc:?}");
    let mut buf = Vec::new();
    while let Some(tx) = t.poll_transmit(now, &mut buf) {
        // The ACK goes to the host's QP.
        assert_eq!(tx.packet.bth.dest_qp, r.local_qpn);
    }
    let smr = t.reg_mr(pd, 4096, Access::LOCAL_WRITE).unwrap();
    t.post_send(now, qp, &SendWr::new(2, SendOp::Send, &[Sge::new(smr.id, 0, 16)])).unwrap();
    let tx = t.poll_transmit(now, &mut buf).expect("our SEND");
    assert_eq!(tx.packet.bth.psn, Psn::wrapping(r.starting_psn), "we send from the REQ's starting PSN");
}

#[test]
fn the_engines_req_carries_what_the_kernel_hosts_does() {
    let frames = capture_mads();
    let cm::CmMessage::Req(kernels) = mad(&frames[0]) else { panic!() };
    let mut h = endpoint("host", HOST);
    let init = qp_init(&mut h);
    let private = [0, 0, 0, 0, 0x20, 0, 0x1f, 0];
    let params = ConnectParams::new(SocketAddrV4::new(TARGET, 4420), init, private.to_vec());
    h.cm_connect(Instant::ZERO, &params).unwrap();
    let pkt = h.poll_cm_packet(&mut Vec::new()).unwrap();
    let cm::CmMessage::Req(ours) = mad(&pkt) else { panic!() };
    assert_eq!(IpServiceId::from_service_id(ours.service_id), Some(IpServiceId { protocol: RDMA_PS_TCP, port: 4420 }));
    assert_eq!(ours.service_id, kernels.service_id);
    for (what, a, b) in [
        ("local_qkey", ours.local_qkey, kernels.local_qkey),
        ("transport_service_type", ours.transport_service_type.into(), kernels.transport_service_type.into()),
        ("end_to_end_flow_control", ours.end_to_end_flow_control.into(), kernels.end_to_end_flow_control.into()),
        ("partition_key", ours.partition_key.into(), kernels.partition_key.into()),
        ("path_mtu", ours.path_mtu.into(), kernels.path_mtu.into()),
        ("srq", ours.srq.into(), kernels.srq.into()),
        ("local_lid", ours.primary_path.local_lid.into(), kernels.primary_path.local_lid.into()),
        ("remote_lid", ours.primary_path.remote_lid.into(), kernels.primary_path.remote_lid.into()),
        ("hop_limit", ours.primary_path.hop_limit.into(), kernels.primary_path.hop_limit.into()),
    ] {
        assert_eq!(a, b, "REQ.{what}");
    }
    assert_eq!(ours.primary_path.local_gid, kernels.primary_path.local_gid);
    assert_eq!(ours.primary_path.remote_gid, kernels.primary_path.remote_gid);
    assert_eq!(ours.alternate_path, kernels.alternate_path);
    let (ours_ip, consumer) = IpCmHeader::split(&ours.private_data).unwrap();
    let (kernels_ip, _) = IpCmHeader::split(&kernels.private_data).unwrap();
    assert_eq!((ours_ip.cma_version, ours_ip.ip_version), (kernels_ip.cma_version, kernels_ip.ip_version));
    assert_eq!((ours_ip.src_addr, ours_ip.dst_addr), (kernels_ip.src_addr, kernels_ip.dst_addr));
    assert_eq!(consumer[..8], private);
    // The whole MAD reads back as it was written (nothing out of range).
    assert_eq!(CmMad::decode(&pkt.payload).unwrap().encode().unwrap()[..], pkt.payload[..]);
}

#[test]
fn the_engines_ca_guids_are_the_ones_rxe_made_from_the_same_macs() {
    // rxe makes a port's node GUID from its MAC (EUI-64); an engine with
    // the host's MAC sends the GUID the kernel's REQ carries, and one with
    // the target's MAC the GUID of the kernel's REP.
    let frames = capture_qp1();
    let ((host_mac, kernel_req), (target_mac, kernel_rep)) = (&frames[0], &frames[1]);
    let (cm::CmMessage::Req(kreq), cm::CmMessage::Rep(krep)) = (mad(kernel_req), mad(kernel_rep)) else { panic!() };
    let with_mac = |name, ip, mac: [u8; 6]| {
        let mut cfg = EndpointConfig::new(name, ip);
        cfg.mac = mac;
        Endpoint::new(cfg, Box::new(ChaCha8Rng::seed_from_u64(7)))
    };
    let (mut h, mut t) = (with_mac("host", HOST, *host_mac), with_mac("target", TARGET, *target_mac));
    t.cm_listen(4420).unwrap();
    let init = qp_init(&mut h);
    h.cm_connect(Instant::ZERO, &ConnectParams::new(SocketAddrV4::new(TARGET, 4420), init, Vec::new())).unwrap();
    let req = h.poll_cm_packet(&mut Vec::new()).unwrap();
    let cm::CmMessage::Req(ours) = mad(&req) else { panic!() };
    assert_eq!(ours.local_ca_guid, kreq.local_ca_guid);
    t.handle_packet(Instant::ZERO, &req).unwrap();
    let Some(CmEvent::ConnectRequest { conn, .. }) = t.poll_cm_event() else { panic!() };
    let init = qp_init(&mut t);
    t.cm_accept(Instant::ZERO, conn, &AcceptParams::new(init, Vec::new())).unwrap();
    let cm::CmMessage::Rep(ours) = mad(&t.poll_cm_packet(&mut Vec::new()).unwrap()) else { panic!() };
    assert_eq!(ours.local_ca_guid, krep.local_ca_guid);
}
