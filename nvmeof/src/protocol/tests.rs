//! Byte layouts against docs/protocols.md §2, and decode(encode(x)) == x.

use proptest::prelude::*;

use super::*;

#[test]
fn cm_request_layout() {
    let b = CmRequest::new(1, 128, 7).unwrap().encode();
    assert_eq!(&b[..10], &[0, 0, 1, 0, 128, 0, 127, 0, 7, 0]);
    assert!(b[10..].iter().all(|&x| x == 0));
    // The admin queue always carries controller id 0.
    assert_eq!(CmRequest::new(0, 32, 7).unwrap().cntlid, 0);
    assert!(matches!(
        CmRequest::new(1, 1, 0),
        Err(ProtocolError::Field { what: "CmRequest", field: "depth", value: 1, .. })
    ));
    assert!(matches!(
        CmRequest::new(1, 257, 0),
        Err(ProtocolError::Field { what: "CmRequest", field: "depth", value: 257, .. })
    ));
    assert_eq!(CmRequest::decode(&b).unwrap(), CmRequest { recfmt: 0, qid: 1, hrqsize: 128, hsqsize: 127, cntlid: 7 });
    let mut bad = b;
    bad[0] = 1;
    assert!(matches!(CmRequest::decode(&bad), Err(ProtocolError::Field { field: "recfmt", .. })));
    assert!(matches!(CmRequest::decode(&b[..9]), Err(ProtocolError::Short { .. })));
}

#[test]
fn cm_request_check_gives_reject_reasons() {
    let ok = CmRequest::new(1, 32, 1).unwrap();
    assert_eq!(ok.check(128), None);
    assert_eq!(CmRequest { hrqsize: 200, ..ok }.check(128), Some(RejectStatus::InvalidHrqsize));
    assert_eq!(CmRequest { hsqsize: 0, ..ok }.check(128), Some(RejectStatus::InvalidHsqsize));
}

#[test]
fn cm_accept_and_reject_layouts() {
    let a = CmAccept { recfmt: 0, crqsize: 32 }.encode();
    assert_eq!(&a[..4], &[0, 0, 32, 0]);
    assert_eq!(CmAccept::decode(&a[..8]).unwrap().crqsize, 32);
    assert!(
        matches!(
            CmAccept::decode(&[0, 0, 0, 0]),
            Err(ProtocolError::Field { what: "CmAccept", field: "crqsize", value: 0, .. })
        ),
        "crqsize 0"
    );
    let r = CmReject::new(RejectStatus::InvalidHsqsize).encode();
    assert_eq!(r, [0, 0, 4, 0]);
    for code in 1..=8 {
        assert_eq!(RejectStatus::from_code(code).code(), code);
    }
    assert_eq!(CmReject::decode(&[0, 0, 6, 0]).unwrap().status, RejectStatus::NoResources);
    assert_eq!(RejectStatus::from_code(99), RejectStatus::Other(99));
}

#[test]
fn keyed_sgl_layout_and_bounds() {
    let s = Sgl::keyed(0x1122_3344_5566_7788, 0x00AB_CDEF, 0xDEAD_BEEF).unwrap();
    let b = s.encode();
    assert_eq!(&b[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(&b[8..11], &[0xEF, 0xCD, 0xAB]);
    assert_eq!(&b[11..15], &0xDEAD_BEEFu32.to_le_bytes());
    assert_eq!(b[15], 0x40);
    assert_eq!(Sgl::decode(&b).unwrap(), s);
    assert!(matches!(
        Sgl::keyed(0, 1 << 24, 0),
        Err(ProtocolError::Field { what: "Sgl", field: "length", value: 0x100_0000, .. })
    ));
    let mr = crate::transport::MrInfo {
        id: crate::transport::MrId(1),
        addr: 0x1000,
        len: 8192,
        lkey: 1,
        rkey: 2,
        access: crate::transport::Access::NONE,
    };
    assert_eq!(
        Sgl::for_region(&mr, 4096, 4096).unwrap(),
        Sgl::Keyed { addr: 0x2000, len: 4096, key: 2, invalidate: false }
    );
    assert!(matches!(
        Sgl::for_region(&mr, 4097, 4096),
        Err(ProtocolError::Field { what: "Sgl", field: "offset+length", value: 8193, .. })
    ));
    assert!(matches!(
        Sgl::for_region(&mr, u64::MAX, 2),
        Err(ProtocolError::Field { what: "Sgl", field: "offset+length", value: u64::MAX, .. })
    ));
    let mut inv = b;
    inv[15] = 0x4F;
    assert!(matches!(Sgl::decode(&inv).unwrap(), Sgl::Keyed { invalidate: true, .. }));
    let ic = Sgl::InCapsule { offset: 0, len: 512 }.encode();
    assert_eq!(ic[15], 0x01);
    assert_eq!(&ic[8..12], &512u32.to_le_bytes());
    let mut unknown = b;
    unknown[15] = 0x20;
    assert!(matches!(Sgl::decode(&unknown), Err(ProtocolError::Field { field: "type", .. })));
}

#[test]
fn connect_command_layout() {
    let sgl = Sgl::keyed(0xAA00, 1024, 0x55).unwrap();
    let c = NvmeCommand::connect(3, 128, 5000, sgl).unwrap().to_command(9).encode();
    assert_eq!(c[0], 0x7F);
    assert_eq!(c[1], 0x40, "PSDT SGL");
    assert_eq!(&c[2..4], &[9, 0]);
    assert_eq!(c[4], 0x01, "fctype Connect");
    assert_eq!(c[39], 0x40);
    assert_eq!(&c[40..42], &[0, 0], "recfmt");
    assert_eq!(&c[42..44], &[3, 0], "qid");
    assert_eq!(&c[44..46], &[127, 0], "sqsize 0's based");
    assert_eq!(c[46], 0, "cattr");
    assert_eq!(&c[48..52], &5000u32.to_le_bytes());
    assert!(
        matches!(
            NvmeCommand::connect(0, 32, 0, Sgl::keyed(0, 512, 0).unwrap()),
            Err(ProtocolError::Field { what: "Connect", field: "sgl.length", value: 512, .. })
        ),
        "connect data is 1024 bytes"
    );
}

#[test]
fn property_commands_layout() {
    let g = NvmeCommand::PropertyGet { size: PropSize::Eight, offset: REG_CAP }.to_command(1).encode();
    assert_eq!((g[0], g[4], g[40]), (0x7F, 0x04, 1));
    assert_eq!(&g[44..48], &0u32.to_le_bytes());
    let s =
        NvmeCommand::PropertySet { size: PropSize::Four, offset: REG_CC, value: 0x0046_0001 }.to_command(2).encode();
    assert_eq!((s[4], s[40]), (0x00, 0));
    assert_eq!(&s[44..48], &0x14u32.to_le_bytes());
    assert_eq!(&s[48..56], &0x0046_0001u64.to_le_bytes());
    // No data: PSDT still set, and a null keyed SGL (nvmet-rdma refuses
    // an all-zero descriptor).
    assert_eq!(s[1], 0x40);
    assert_eq!(&s[24..40], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40]);
    assert_eq!(Sgl::decode(&s[24..40]).unwrap(), Sgl::None);
}

#[test]
fn admin_and_io_command_layouts() {
    let sgl = Sgl::keyed(0x10, 4096, 7).unwrap();
    let id = NvmeCommand::Identify { cns: CNS_CONTROLLER, cntid: 0, nsid: 0, sgl }.to_command(4).encode();
    assert_eq!((id[0], id[40]), (0x06, 1));
    let sf =
        NvmeCommand::SetFeatures { fid: FEAT_NUMBER_OF_QUEUES, nsid: 0, value: 0x0003_0003 }.to_command(5).encode();
    assert_eq!((sf[0], sf[40]), (0x09, 7));
    assert_eq!(&sf[44..48], &0x0003_0003u32.to_le_bytes());
    let rd = NvmeCommand::read(1, 0x1_0000_0002, 65536, sgl).unwrap().to_command(6).encode();
    assert_eq!((rd[0], rd[1]), (0x02, 0x40));
    assert_eq!(&rd[4..8], &1u32.to_le_bytes());
    assert_eq!(&rd[40..48], &0x1_0000_0002u64.to_le_bytes());
    assert_eq!(&rd[48..50], &[0xFF, 0xFF], "NLB is 0's based");
    assert!(matches!(
        NvmeCommand::read(1, 0, 0, sgl),
        Err(ProtocolError::Field { what: "Read", field: "blocks", value: 0, .. })
    ));
    assert!(matches!(
        NvmeCommand::write(1, 0, 65537, sgl),
        Err(ProtocolError::Field { what: "Write", field: "blocks", value: 65537, .. })
    ));
    assert_eq!(NvmeCommand::write(1, 0, 1, sgl).unwrap().to_command(0).encode()[0], 0x01);
    assert_eq!(NvmeCommand::Flush { nsid: 1 }.to_command(0).encode()[0], 0x00);
    assert_eq!(NvmeCommand::KeepAlive.to_command(0).encode()[0], 0x18);
    let lp = NvmeCommand::get_log_page(LID_DISCOVERY, 3072, 0, sgl).unwrap().to_command(0).encode();
    assert_eq!((lp[0], lp[40]), (0x02, 0x70));
    assert_eq!(u16::from_le_bytes([lp[42], lp[43]]), 767, "NUMDL = dwords - 1");
    assert!(matches!(
        NvmeCommand::get_log_page(LID_DISCOVERY, 10, 0, sgl),
        Err(ProtocolError::Field { what: "GetLogPage", field: "length", value: 10, .. })
    ));
}

#[test]
fn admin_and_io_opcodes_decode_by_queue() {
    let sgl = Sgl::keyed(0x10, 512, 7).unwrap();
    let rd = NvmeCommand::read(1, 5, 1, sgl).unwrap();
    let raw = rd.to_command(3).encode();
    assert_eq!(NvmeCommand::decode(&raw, QueueKind::Io).unwrap(), (3, rd));
    // The same bytes on the admin queue are a Get Log Page.
    assert!(matches!(NvmeCommand::decode(&raw, QueueKind::Admin).unwrap().1, NvmeCommand::GetLogPage { .. }));
    let mut bad = raw;
    bad[0] = 0x99;
    assert!(matches!(NvmeCommand::decode(&bad, QueueKind::Io), Err(ProtocolError::Field { field: "opcode", .. })));
}

#[test]
fn completion_layout_and_status() {
    let status = Status::new(SCT_GENERIC, SC_LBA_OUT_OF_RANGE, true);
    let mut c = Completion::new(0x1234, status, 0xAABB_CCDD);
    c.sq_head = 5;
    c.sq_id = 1;
    let b = c.encode();
    assert_eq!(&b[..8], &0xAABB_CCDDu64.to_le_bytes());
    assert_eq!(&b[8..10], &[5, 0]);
    assert_eq!(&b[10..12], &[1, 0]);
    assert_eq!(&b[12..14], &[0x34, 0x12]);
    // SC 0x80 at bits 8:1, DNR at bit 15 (14 after dropping the phase).
    assert_eq!(u16::from_le_bytes([b[14], b[15]]), 0x80 << 1 | 1 << 15);
    let d = Completion::decode(&b).unwrap();
    assert_eq!(d, c);
    let s = d.status();
    assert_eq!((s.sc, s.sct, s.dnr, s.more), (0x80, 0, true, false));
    assert_eq!(d.check().unwrap_err().status, status);
    assert_eq!(s.to_string(), "LBA out of range (SCT 0x0, SC 0x80, DNR)");
    // The phase bit alone is success.
    assert!(Status::from_field(1).is_success());
    let more = Status::from_field((1 << 13 | 0x1 << 8 | 0x82) << 1);
    assert_eq!((more.sct, more.sc, more.more), (1, 0x82, true));
}

#[test]
fn connect_data_layout_and_nqn_rules() {
    let d = ConnectData {
        host_id: [7; 16],
        cntlid: CNTLID_DYNAMIC,
        subnqn: Nqn::new("nqn.2026-01.io.rctb:sub").unwrap(),
        hostnqn: Nqn::from_host_id(&[7; 16]),
    };
    let b = d.encode();
    assert_eq!(&b[..16], &[7; 16]);
    assert_eq!(&b[16..18], &[0xFF, 0xFF]);
    assert_eq!(&b[256..279], b"nqn.2026-01.io.rctb:sub");
    assert_eq!(b[279], 0);
    assert!(b[512..].starts_with(b"nqn.2014-08.org.nvmexpress:uuid:07070707-0707-"));
    assert_eq!(ConnectData::decode(&b).unwrap(), d);
    assert!(matches!(Nqn::new("short"), Err(ProtocolError::Field { what: "Nqn", field: "length", value: 5, .. })));
    assert!(matches!(
        Nqn::new("x".repeat(224)),
        Err(ProtocolError::Field { what: "Nqn", field: "length", value: 224, .. })
    ));
    assert!(matches!(Nqn::new("nqn.with\0nul.x"), Err(ProtocolError::Text { what: "Nqn", field: "text", .. })));
    let mut empty = b;
    empty[256..512].fill(0);
    assert!(matches!(ConnectData::decode(&empty), Err(ProtocolError::Field { field: "subnqn", .. })));
    assert_eq!(ConnectResult::from_dw0(0x0002_0005), ConnectResult { cntlid: 5, auth_required: true });
    assert_eq!(InvalidParameter::from_dw0(InvalidParameter::data_dw0(256)).name(), "subsystem NQN");
}

#[test]
fn registers() {
    let cap = Cap::build(127, 15, 1 << 6 | 1, 0, 0);
    assert_eq!((cap.mqes(), cap.to(), cap.mpsmin(), cap.page_size()), (127, 15, 0, 4096));
    assert!(cap.supports_csi());
    assert_eq!(cc_enable(cap), 1 | 6 << 16 | 4 << 20 | 6 << 4);
    assert_eq!(cc_enable(Cap::build(1, 0, 1, 1, 1)), 1 | 6 << 16 | 4 << 20 | 1 << 7);
    assert_eq!(ready_timeout(cap), std::time::Duration::from_secs(8));
    assert_eq!(ready_timeout(Cap::build(1, 0, 1, 0, 0)), std::time::Duration::from_millis(500));
    assert_eq!(max_transfer(4096, 0), MAX_KEYED_SGL_LENGTH as u64);
    assert_eq!(max_transfer(4096, 5), 128 * 1024);
    assert_eq!(max_transfer(4096, 40), MAX_KEYED_SGL_LENGTH as u64);
}

#[test]
fn identify_layouts() {
    let c = ControllerInfo {
        vid: 0x1b36,
        serial: "SN1".into(),
        model: "rctb".into(),
        firmware: "1.0".into(),
        mdts: 5,
        cntlid: 0x21,
        version: 0x0001_0400,
        cntrltype: CNTRLTYPE_IO,
        kas: 10,
        maxcmd: 128,
        nn: 2,
        sgls: SGLS_SUPPORTED | SGLS_KEYED,
        subnqn: "nqn.2026-01.io.rctb:sub".into(),
        ioccsz: 260,
        iorcsz: 1,
        icdoff: 0,
        fcatt: 0,
        msdbd: 1,
    };
    let b = c.encode();
    assert_eq!(&b[4..8], b"SN1 ");
    assert_eq!((b[77], b[78], b[1803]), (5, 0x21, 1));
    assert_eq!(&b[514..516], &128u16.to_le_bytes());
    assert_eq!(&b[536..540], &5u32.to_le_bytes());
    assert_eq!(&b[1792..1796], &260u32.to_le_bytes());
    assert_eq!(ControllerInfo::decode(&b[..]).unwrap(), c);
    assert_eq!(c.in_capsule_bytes(), 4096);
    assert!(matches!(
        ControllerInfo::decode(&b[..4095]),
        Err(ProtocolError::Short { what: "IdentifyController", len: 4095, need: 4096 })
    ));

    let ns = NamespaceInfo {
        nsid: 1,
        nsze: 100,
        ncap: 100,
        nuse: 10,
        nsfeat: 0,
        flbas: 1,
        formats: vec![LbaFormat { ms: 0, lbads: 9, rp: 0 }, LbaFormat { ms: 8, lbads: 12, rp: 0 }],
    };
    let b = ns.encode();
    assert_eq!((b[25], b[26]), (1, 1));
    assert_eq!(&b[132..136], &[8, 0, 12, 0]);
    let d = NamespaceInfo::decode(1, &b[..]).unwrap();
    assert_eq!(d, ns);
    assert_eq!((d.lba_size(), d.metadata_size(), d.separate_metadata()), (4096, 8, true));
    let mut bad = b.clone();
    bad[26] = 5;
    assert!(matches!(NamespaceInfo::decode(1, &bad[..]), Err(ProtocolError::Field { field: "flbas", .. })));
    let mut tiny = b;
    tiny[26] = 0;
    tiny[130] = 8;
    assert!(matches!(NamespaceInfo::decode(1, &tiny[..]), Err(ProtocolError::Field { field: "lbaf.lbads", .. })));
}

#[test]
fn discovery_log_layout() {
    let e = DiscoveryEntry {
        trtype: TRTYPE_RDMA,
        adrfam: ADRFAM_IPV4,
        subtype: SUBTYPE_NVME,
        treq: 0,
        portid: 1,
        cntlid: 0xFFFF,
        asqsz: 32,
        eflags: 0,
        trsvcid: "4420".into(),
        subnqn: "nqn.2026-01.io.rctb:sub".into(),
        traddr: "10.0.0.1".into(),
        rdma_qptype: 1,
        rdma_prtype: 1,
        rdma_cms: 1,
        rdma_pkey: 0,
    };
    let log = DiscoveryLog { header: DiscoveryLogHeader { genctr: 3, numrec: 1, recfmt: 0 }, entries: vec![e] };
    let b = log.encode();
    assert_eq!(b.len(), 2048);
    assert_eq!(&b[8..16], &1u64.to_le_bytes());
    assert_eq!((b[1024], b[1025], b[1026]), (1, 1, 2));
    assert_eq!(&b[1024 + 32..1024 + 36], b"4420");
    assert_eq!(&b[1024 + 512..1024 + 520], b"10.0.0.1");
    assert_eq!(DiscoveryLog::decode(&b).unwrap(), log);
    assert!(matches!(DiscoveryLog::decode(&b[..2047]), Err(ProtocolError::Short { .. })));
    let mut huge = b.clone();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        DiscoveryLog::decode(&huge),
        Err(ProtocolError::Field { what: "DiscoveryLog", field: "numrec", .. })
    ));
    // A page length from a target's NUMREC never overflows.
    assert_eq!(DiscoveryLog::len_for(2), 3 * 1024);
    assert_eq!(DiscoveryLog::len_for(u64::MAX), u64::MAX);
    assert_eq!(DiscoveryLog::len_for(u64::MAX / 1024), u64::MAX);
}

proptest! {
    /// Decoders never panic, whatever the bytes.
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let _ = CmRequest::decode(&bytes);
        let _ = CmAccept::decode(&bytes);
        let _ = CmReject::decode(&bytes);
        let _ = Sgl::decode(&bytes);
        let _ = NvmeCommand::decode(&bytes, QueueKind::Admin);
        let _ = NvmeCommand::decode(&bytes, QueueKind::Io);
        let _ = Completion::decode(&bytes);
        let _ = ConnectData::decode(&bytes);
        let _ = ControllerInfo::decode(&bytes);
        let _ = NamespaceInfo::decode(1, &bytes);
        let _ = DiscoveryLog::decode(&bytes);
    }

    #[test]
    fn rw_commands_round_trip(read in any::<bool>(), nsid in any::<u32>(), slba in any::<u64>(), blocks in 1u32..=65536, addr in any::<u64>(), len in 0u64..(1 << 24), key in any::<u32>(), cid in any::<u16>()) {
        let sgl = Sgl::keyed(addr, len, key).unwrap();
        let cmd = if read { NvmeCommand::read(nsid, slba, blocks, sgl) } else { NvmeCommand::write(nsid, slba, blocks, sgl) }.unwrap();
        prop_assert_eq!(NvmeCommand::decode(&cmd.to_command(cid).encode(), QueueKind::Io).unwrap(), (cid, cmd));
    }

    #[test]
    fn completions_round_trip(result in any::<u64>(), head in any::<u16>(), sq in any::<u16>(), cid in any::<u16>(), field in any::<u16>()) {
        let c = Completion { result, sq_head: head, sq_id: sq, cid, status_field: field };
        prop_assert_eq!(Completion::decode(&c.encode()).unwrap(), c);
        let s = c.status();
        // Every bit of the field is phase, SC, SCT, CRD, More or DNR.
        prop_assert_eq!(s.to_field(field & 1 == 1), field);
    }
}
