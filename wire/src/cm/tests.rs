//! The codecs against captures of the kernel's CM and against themselves.

use super::*;

/// Frame 1 of `testdata/captures/nvme-rdma.pcap` (the kernel NVMe host's
/// REQ to nvmet), MAD bytes only, with the fields tshark shows.
fn capture_req() -> Vec<u8> {
    let bytes =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/nvme-rdma.pcap")).expect("capture");
    let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).expect("pcap");
    let pkt = reader.next_packet().expect("frame 1").expect("frame 1 reads");
    let frame = crate::roce::RoceFrame::decode(&pkt.data).expect("frame 1 is RoCEv2");
    frame.payload.to_vec()
}

#[test]
fn capture_req_matches_tshark() {
    let mad = CmMad::decode(&capture_req()).expect("REQ decodes");
    assert_eq!(mad.header.transaction_id, 0x0000_0004_e77a_fc92);
    let CmMessage::Req(req) = &mad.message else { panic!("not a REQ: {mad:?}") };
    assert_eq!(req.local_comm_id, 0x92fc_7ae7);
    assert_eq!(IpServiceId::from_service_id(req.service_id), Some(IpServiceId { protocol: RDMA_PS_TCP, port: 4420 }));
    assert_eq!(req.local_ca_guid, 0x0496_f1ff_fe99_8ae0);
    assert_eq!(req.local_qpn, 0x16);
    assert_eq!(req.responder_resources, 0x80);
    assert_eq!(req.initiator_depth, 0);
    assert_eq!(req.remote_cm_response_timeout, 0x14);
    assert!(req.end_to_end_flow_control);
    assert_eq!(req.starting_psn, 0xeade26);
    assert_eq!((req.retry_count, req.rnr_retry_count, req.max_cm_retries), (7, 7, 15));
    assert_eq!(req.partition_key, 0xffff);
    assert_eq!(req.path_mtu, 3);
    let p = &req.primary_path;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
    assert_eq!(p.local_gid[12..], [10, 10, 0, 2]);
    assert_eq!(p.remote_gid[12..], [10, 10, 0, 1]);
    // tshark 4.0 shows this word (93 9c 20 00) as flow label 0x00939 and
    // packet rate 0x13; IBA table 100 puts the flow label in its top 20
    // bits and the packet rate in its low 6, as the kernel writes them.
    assert_eq!((p.flow_label, p.packet_rate, p.hop_limit, p.local_ack_timeout), (0x939c2, 0, 0x40, 0x13));
    let (ip, consumer) = IpCmHeader::split(&req.private_data).expect("CMA header");
    assert_eq!(ip.ip_version, 4);
    assert_eq!(ip.src_port, 0xcfc2);
    assert_eq!(ip.src_addr, IpAddr::V4(Ipv4Addr::new(10, 10, 0, 2)));
    assert_eq!(ip.dst_addr, IpAddr::V4(Ipv4Addr::new(10, 10, 0, 1)));
    assert_eq!(consumer.len(), REQ_PRIVATE_LEN - IP_CM_HEADER_LEN);
    assert_eq!(consumer[..8], [0, 0, 0, 0, 0x20, 0, 0x1f, 0]);
    assert_eq!(IpCmHeader::split(&ip.encode()).map(|(h, _)| h), Ok(ip));
}

#[test]
fn every_capture_mad_reencodes_byte_for_byte() {
    // The kernel leaves every reserved bit zero, so nothing is lost.
    let bytes =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/nvme-rdma.pcap")).expect("capture");
    let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).expect("pcap");
    let mut names = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.expect("packet");
        let Ok(frame) = crate::roce::RoceFrame::decode(&pkt.data) else { continue };
        if frame.bth.dest_qp != 1 {
            continue;
        }
        let mad = CmMad::decode(frame.payload).expect("every QP1 frame is a CM MAD");
        assert_eq!(mad.encode().expect("encodes")[..], frame.payload[..MAD_LEN], "{mad:?}");
        names.push(mad.message.name());
    }
    // Four connections (nvme discover's admin queue, then nvme connect's
    // admin and I/O queues, …) and one disconnect, as tshark lists them.
    let count = |name: &str| names.iter().filter(|n| **n == name).count();
    assert_eq!([count("REQ"), count("REP"), count("RTU"), count("DREQ"), count("DREP")], [4, 4, 4, 1, 1]);
}

#[test]
fn every_message_round_trips() {
    let ids = CommIds { local_comm_id: 1, remote_comm_id: 2, private_data: vec![9; 8] };
    let messages = [
        CmMessage::Rtu(ids.clone()),
        CmMessage::Drep(ids),
        CmMessage::Dreq(Dreq { local_comm_id: 3, remote_comm_id: 4, remote_qpn: 0xabcdef, private_data: vec![] }),
        CmMessage::Mra(Mra {
            local_comm_id: 5,
            remote_comm_id: 6,
            message_mraed: 1,
            service_timeout: 31,
            private_data: vec![1, 2, 3],
        }),
        CmMessage::Rej(Rej {
            local_comm_id: 7,
            remote_comm_id: 8,
            message_rejected: 0,
            reject_info_length: 0,
            reason: 28,
            additional_reject_info: [0; 72],
            private_data: vec![0, 0, 6, 0],
        }),
        CmMessage::Rep(Rep {
            local_comm_id: 9,
            remote_comm_id: 10,
            local_qkey: 0,
            local_qpn: 0x18,
            local_eecn: 0,
            starting_psn: 0xffffff,
            responder_resources: 0,
            initiator_depth: 16,
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: false,
            local_ca_guid: 0x1122_3344_5566_7788,
            private_data: vec![0, 0, 32, 0],
        }),
    ];
    for message in messages {
        let mad = CmMad { header: MadHeader::cm(message.attribute_id(), 42), message };
        let bytes = mad.encode().expect("encodes");
        let back = CmMad::decode(&bytes).expect("decodes");
        assert_eq!(back.header, mad.header);
        // Private data comes back zero padded to its fixed length.
        let sent = mad.message.private_data();
        assert_eq!(&back.message.private_data()[..sent.len()], sent);
        assert!(back.message.private_data()[sent.len()..].iter().all(|&b| b == 0));
        assert_eq!(CmMad::decode(&back.encode().expect("re-encodes")), Ok(back));
    }
}

#[test]
fn bad_input_names_the_field() {
    let mut bytes = capture_req();
    assert_eq!(CmMad::decode(&bytes[..255]), Err(CmError::Truncated { need: 256, have: 255 }));
    bytes[17] = 0x20;
    assert_eq!(CmMad::decode(&bytes), Err(CmError::UnknownAttribute(0x0020)));
    bytes[1] = 0x81;
    assert!(matches!(CmMad::decode(&bytes), Err(CmError::BadField { field: "mgmt_class", .. })));
    let rtu = CmMad {
        header: MadHeader::cm(CmMessage::RTU, 1),
        message: CmMessage::Rtu(CommIds { local_comm_id: 1, remote_comm_id: 2, private_data: vec![0; 225] }),
    };
    assert_eq!(rtu.encode(), Err(CmError::PrivateDataTooLong { message: "RTU", len: 225, max: 224 }));
    let dreq = CmMad {
        header: MadHeader::cm(CmMessage::DREQ, 1),
        message: CmMessage::Dreq(Dreq {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn: 1 << 24,
            private_data: vec![],
        }),
    };
    assert!(matches!(dreq.encode(), Err(CmError::BadField { field: "DREQ.remote_qpn", .. })));
    assert!(matches!(IpCmHeader::split(&[0; 35]), Err(CmError::Truncated { need: 36, have: 35 })));
    let mut v5 = [0u8; 36];
    v5[1] = 0x50;
    assert!(matches!(IpCmHeader::split(&v5), Err(CmError::BadField { field: "ip_cm.ip_version", .. })));
}

#[test]
fn ip_service_ids() {
    let id = IpServiceId { protocol: RDMA_PS_TCP, port: 4420 };
    assert_eq!(id.service_id(), 0x0000_0000_0106_1144);
    assert_eq!(IpServiceId::from_service_id(id.service_id()), Some(id));
    assert_eq!(IpServiceId::from_service_id(0x1000_0000_0106_1144), None);
}
