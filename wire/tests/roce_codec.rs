//! The RoCEv2 codec on built frames: one test per error the decoder can
//! report, and property tests for build -> decode round trips and for
//! decoding arbitrary bytes.

use std::net::Ipv4Addr;

use proptest::prelude::*;
use rctb_transport::Psn;
use rctb_wire::roce::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ETHERTYPE_ARP, ETHERTYPE_IPV6, ETHERTYPE_VLAN, EthHeader, ExtHeaders,
    FrameBuilder, Ipv4Header, Ipv4Options, MacAddr, NakCode, NotRoce, Opcode, Reth, RoceError, RoceFrame, UdpHeader,
    VlanTag, icrc_ipv4, ipv4_checksum, split_ieth, split_immdt,
};

const ETH: usize = 14;

fn builder() -> FrameBuilder {
    FrameBuilder::new(
        MacAddr([2, 0, 0, 0, 0, 1]),
        MacAddr([2, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(10, 10, 0, 1),
        Ipv4Addr::new(10, 10, 0, 2),
    )
}

fn reth() -> Reth {
    Reth { va: 0x1000, rkey: 0x42, dma_len: 5 }
}

/// A valid frame: `opcode` with the extended headers it needs and `payload`.
fn build(opcode: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut ext = ExtHeaders::NONE;
    if opcode.has_deth() {
        ext.deth = Some(Deth { qkey: 0x8001_0000, resv8: 0, src_qp: 1 });
    }
    if opcode.has_reth() {
        ext.reth = Some(reth());
    }
    if opcode.has_atomic_eth() {
        ext.atomic = Some(AtomicEth { va: 0x2000, rkey: 7, swap_add: 1, compare: 2 });
    }
    if opcode.has_aeth() {
        ext.aeth = Some(Aeth::ack(3));
    }
    if opcode.has_atomic_ack_eth() {
        ext.atomic_ack = Some(AtomicAckEth { orig: 9 });
    }
    if opcode.has_immdt() {
        ext.imm = Some(0xdead_beef);
    }
    if opcode.has_ieth() {
        ext.ieth = Some(0x77);
    }
    let mut out = Vec::new();
    builder().build(Bth::new(opcode, 0x11, Psn::wrapping(5)), ext, payload, &mut out).expect("valid frame");
    out
}

/// The first `ip_len` bytes of the IP packet of `frame`, with IPv4 total
/// length and UDP length rewritten to match, so that the decoder gets past
/// the length checks and reports the header that is actually short.
fn cut(frame: &[u8], ip_len: usize) -> Vec<u8> {
    let mut out = frame[..ETH + ip_len].to_vec();
    out[ETH + 2..ETH + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    if ip_len >= 28 {
        out[ETH + 24..ETH + 26].copy_from_slice(&(ip_len as u16 - 20).to_be_bytes());
    }
    out
}

fn decode_err(bytes: &[u8]) -> RoceError {
    RoceFrame::decode(bytes).expect_err("must not decode")
}

fn truncated(header: &'static str, need: usize, have: usize) -> RoceError {
    RoceError::Truncated { header, need, have }
}

// ---- truncation, header by header ----

#[test]
fn truncated_ethernet_and_vlan() {
    let frame = build(Opcode::SEND_ONLY, b"data");
    assert_eq!(decode_err(&frame[..10]), truncated("Ethernet", 14, 10));
    let mut tagged = frame[..12].to_vec();
    tagged.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
    tagged.extend_from_slice(&[0, 5]);
    assert_eq!(decode_err(&tagged), truncated("Ethernet", 18, 16));
}

#[test]
fn truncated_ipv4() {
    let frame = build(Opcode::SEND_ONLY, b"data");
    assert_eq!(decode_err(&frame[..ETH + 19]), truncated("IPv4", 20, 19));
    // IHL 6 promises 4 bytes of options that are not there.
    let mut short = frame[..ETH + 22].to_vec();
    short[ETH] = 0x46;
    assert_eq!(decode_err(&short), truncated("IPv4", 24, 22));
}

#[test]
fn truncated_udp_bth_icrc() {
    let frame = build(Opcode::SEND_ONLY, b"data");
    assert_eq!(decode_err(&cut(&frame, 25)), truncated("UDP", 8, 5));
    assert_eq!(decode_err(&cut(&frame, 28 + 11)), truncated("BTH", 12, 11));
    assert_eq!(decode_err(&cut(&frame, 40 + 3)), truncated("ICRC", 4, 3));
}

#[test]
fn truncated_extended_headers() {
    // After the BTH, the last 4 bytes are taken as the ICRC, so keeping
    // `have + 4` bytes leaves `have` for the extended header.
    let cases = [
        (Opcode::WRITE_ONLY, "RETH", 16),
        (Opcode::ACKNOWLEDGE, "AETH", 4),
        (Opcode::UD_SEND_ONLY, "DETH", 8),
        (Opcode::COMPARE_SWAP, "AtomicETH", 28),
    ];
    for (opcode, header, need) in cases {
        let frame = build(opcode, b"");
        for have in [0, 1, need - 1] {
            assert_eq!(decode_err(&cut(&frame, 40 + have + 4)), truncated(header, need, have), "{opcode}");
        }
    }
    // Headers that follow another one: the first is complete, the second short.
    let follow = [
        (Opcode::ATOMIC_ACKNOWLEDGE, 4, "AtomicAckETH", 8),
        (Opcode::SEND_ONLY_IMM, 0, "ImmDt", 4),
        (Opcode::WRITE_ONLY_IMM, 16, "ImmDt", 4),
        (Opcode::UD_SEND_ONLY_IMM, 8, "ImmDt", 4),
        (Opcode::SEND_ONLY_INV, 0, "IETH", 4),
    ];
    for (opcode, before, header, need) in follow {
        let frame = build(opcode, b"");
        assert_eq!(decode_err(&cut(&frame, 40 + before + 2 + 4)), truncated(header, need, 2), "{opcode}");
    }
}

#[test]
fn truncated_standalone_headers() {
    assert_eq!(Reth::decode(&[0; 5]), Err(truncated("RETH", 16, 5)));
    assert_eq!(Bth::decode(&[0; 11]), Err(truncated("BTH", 12, 11)));
    assert_eq!(Aeth::decode(&[]), Err(truncated("AETH", 4, 0)));
    assert_eq!(Deth::decode(&[0; 7]), Err(truncated("DETH", 8, 7)));
    assert_eq!(AtomicEth::decode(&[0; 27]), Err(truncated("AtomicETH", 28, 27)));
    assert_eq!(AtomicAckEth::decode(&[0; 7]), Err(truncated("AtomicAckETH", 8, 7)));
    assert_eq!(UdpHeader::decode(&[0; 7]), Err(truncated("UDP", 8, 7)));
    assert_eq!(split_immdt(&[1, 2, 3]), Err(truncated("ImmDt", 4, 3)));
    assert_eq!(split_ieth(&[1]), Err(truncated("IETH", 4, 1)));
    assert_eq!(EthHeader::decode(&[0; 13]), Err(truncated("Ethernet", 14, 13)));
    assert_eq!(
        RoceError::Truncated { header: "RETH", need: 16, have: 5 }.to_string(),
        "RETH: truncated: need 16 bytes, have 5"
    );
}

// ---- not RoCEv2 ----

#[test]
fn other_protocols_are_not_roce() {
    let frame = build(Opcode::SEND_ONLY, b"data");

    let mut arp = frame.clone();
    arp[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    assert_eq!(decode_err(&arp), RoceError::NotRoce(NotRoce::EtherType(ETHERTYPE_ARP)));
    assert!(decode_err(&arp).is_not_roce());

    let mut tcp = frame.clone();
    tcp[ETH + 9] = 6;
    assert_eq!(decode_err(&tcp), RoceError::NotRoce(NotRoce::IpProtocol(6)));

    let mut other_port = frame.clone();
    other_port[ETH + 22..ETH + 24].copy_from_slice(&53u16.to_be_bytes());
    assert_eq!(decode_err(&other_port), RoceError::NotRoce(NotRoce::UdpPort(53)));
    assert_eq!(decode_err(&other_port).to_string(), "not RoCEv2: UDP.dst_port = 53, not 4791");
}

#[test]
fn ipv6_and_stacked_vlans_are_unsupported() {
    let frame = build(Opcode::SEND_ONLY, b"data");
    let mut v6 = frame.clone();
    v6[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    assert!(matches!(decode_err(&v6), RoceError::Unsupported { header: "Ethernet", field: "ethertype", .. }));

    let mut raw_v6 = frame[ETH..].to_vec();
    raw_v6[0] = 0x60;
    assert!(matches!(
        RoceFrame::decode_ip_packet(&raw_v6),
        Err(RoceError::Unsupported { header: "IP", field: "version", value: 6, .. })
    ));

    let mut qinq = frame[..12].to_vec();
    qinq.extend_from_slice(&[0x88, 0xA8, 0, 1, 0x81, 0x00, 0, 2]);
    qinq.extend_from_slice(&frame[12..]);
    assert!(matches!(decode_err(&qinq), RoceError::Unsupported { field: "ethertype", value: 0x8100, .. }));

    let mut fragment = frame.clone();
    fragment[ETH + 6] = 0x20; // MF
    assert!(matches!(decode_err(&fragment), RoceError::Unsupported { field: "flags_frag", .. }));
}

// ---- IPv4 / UDP field rules ----

#[test]
fn bad_ip_version_and_ihl() {
    let frame = build(Opcode::SEND_ONLY, b"data");
    let mut v5 = frame.clone();
    v5[ETH] = 0x55;
    assert_eq!(decode_err(&v5), RoceError::BadField { header: "IPv4", field: "version", value: 5, rule: "must be 4" });
    let mut ihl4 = frame.clone();
    ihl4[ETH] = 0x44;
    assert!(matches!(decode_err(&ihl4), RoceError::BadField { header: "IPv4", field: "ihl", value: 4, .. }));
}

#[test]
fn ip_total_length_must_fit_the_captured_bytes() {
    let frame = build(Opcode::SEND_ONLY, b"data");
    let ip_len = frame.len() - ETH;

    let mut longer = frame.clone();
    longer[ETH + 2..ETH + 4].copy_from_slice(&(ip_len as u16 + 1).to_be_bytes());
    assert_eq!(
        decode_err(&longer),
        RoceError::BadLength {
            header: "IPv4",
            field: "total_length",
            value: ip_len + 1,
            have: ip_len,
            rule: "exceeds the captured bytes"
        }
    );

    let mut tiny = frame.clone();
    tiny[ETH + 2..ETH + 4].copy_from_slice(&19u16.to_be_bytes());
    assert!(matches!(decode_err(&tiny), RoceError::BadLength { field: "total_length", value: 19, .. }));

    // Bytes past the total length are Ethernet padding: kept, re-emitted.
    let mut padded = frame.clone();
    padded.extend_from_slice(&[0; 6]);
    let decoded = RoceFrame::decode(&padded).expect("padded frame");
    assert_eq!(decoded.trailer, &[0; 6]);
    assert!(decoded.icrc_ok());
    let mut out = Vec::new();
    decoded.encode(&mut out);
    assert_eq!(out, padded);
}

#[test]
fn udp_length_must_match_ip() {
    let frame = build(Opcode::SEND_ONLY, b"data");
    let mut bad = frame.clone();
    bad[ETH + 24..ETH + 26].copy_from_slice(&100u16.to_be_bytes());
    assert!(matches!(
        decode_err(&bad),
        RoceError::BadLength { header: "UDP", field: "length", value: 100, have, .. } if have == frame.len() - ETH - 20
    ));
}

// ---- BTH rules ----

#[test]
fn unknown_opcode() {
    let mut frame = build(Opcode::SEND_ONLY, b"data");
    frame[ETH + 28] = 0x81; // CNP
    assert_eq!(decode_err(&frame), RoceError::UnknownOpcode(Opcode(0x81)));
}

#[test]
fn bad_pad() {
    // An ACK has no payload: any pad count exceeds the bytes there.
    let mut ack = build(Opcode::ACKNOWLEDGE, b"");
    ack[ETH + 29] |= 0x20;
    assert_eq!(
        decode_err(&ack),
        RoceError::BadPad { pad: 2, len: 0, rule: "pad count exceeds the bytes after the headers" }
    );

    // Payload + pad not a multiple of 4: the length fields say 5 bytes.
    let frame = build(Opcode::SEND_ONLY, b"abcde");
    let unaligned = cut(&frame, frame.len() - ETH - 3);
    assert!(matches!(
        decode_err(&unaligned),
        RoceError::BadPad { pad: 3, len: 5, rule: "payload plus pad must be a multiple of 4" }
    ));
}

// ---- ICRC ----

#[test]
fn flipped_icrc_is_detected() {
    let mut frame = build(Opcode::WRITE_ONLY, b"payload");
    let last = frame.len() - 1;
    frame[last] ^= 0x01;
    let decoded = RoceFrame::decode(&frame).expect("structure is fine");
    assert!(!decoded.icrc_ok());
    let computed = decoded.compute_icrc();
    assert_eq!(decoded.check_icrc(), Err(RoceError::IcrcMismatch { on_wire: decoded.icrc, computed }));
    assert_eq!(computed ^ decoded.icrc, 0x0100_0000);
}

#[test]
fn flipped_payload_is_detected_but_masked_fields_are_not() {
    let frame = build(Opcode::SEND_ONLY, b"payload!");
    let mut payload_flip = frame.clone();
    payload_flip[ETH + 40] ^= 0x80;
    assert!(!RoceFrame::decode(&payload_flip).expect("decodes").icrc_ok());

    // TTL, TOS, IP checksum, UDP checksum and FECN/BECN may change in transit.
    let mut rerouted = frame.clone();
    for at in [ETH + 1, ETH + 8, ETH + 10, ETH + 26, ETH + 28 + 4] {
        rerouted[at] ^= 0xC0;
    }
    assert!(RoceFrame::decode(&rerouted).expect("decodes").icrc_ok());
    assert!(matches!(icrc_ipv4(&[0x44; 40]), Err(RoceError::BadField { field: "ihl", .. })));
    assert_eq!(icrc_ipv4(&[0x45; 39]), Err(truncated("BTH", 12, 11)));
}

// ---- encoder-side errors ----

#[test]
fn builder_rejects_ext_headers_that_do_not_match_the_opcode() {
    let mut out = Vec::new();
    let bth = Bth::new(Opcode::WRITE_ONLY, 1, Psn::wrapping(0));
    assert_eq!(
        builder().build(bth, ExtHeaders::NONE, b"", &mut out),
        Err(RoceError::ExtMismatch { opcode: Opcode::WRITE_ONLY, header: "RETH", required: true })
    );
    let extra = ExtHeaders { imm: Some(1), reth: Some(reth()), ..ExtHeaders::NONE };
    let err = builder().build(bth, extra, b"", &mut out).expect_err("WRITE Only has no ImmDt");
    assert_eq!(err.to_string(), "RC RDMA Write Only: ImmDt must be absent");
    let unknown = Bth::new(Opcode(0x15), 1, Psn::wrapping(0));
    assert_eq!(builder().build(unknown, ExtHeaders::NONE, b"", &mut out), Err(RoceError::UnknownOpcode(Opcode(0x15))));
    assert!(out.is_empty(), "nothing is written on error");
}

#[test]
fn builder_rejects_oversized_payloads() {
    let payload = vec![0u8; 65_536];
    let mut out = Vec::new();
    let bth = Bth::new(Opcode::SEND_ONLY, 1, Psn::wrapping(0));
    assert_eq!(
        builder().build(bth, ExtHeaders::NONE, &payload, &mut out),
        Err(RoceError::TooLarge { len: 20 + 8 + 12 + 65_536 + 4 })
    );
    let fits = vec![0u8; 65_488]; // 65532 bytes with no pad
    assert!(builder().build(bth, ExtHeaders::NONE, &fits, &mut out).is_ok());
}

#[test]
fn bad_ip_options() {
    assert!(matches!(Ipv4Options::new(&[1, 2, 3]), Err(RoceError::BadField { field: "options", value: 3, .. })));
}

// ---- builder output ----

#[test]
fn built_frames_look_like_rxe() {
    let frame = build(Opcode::WRITE_ONLY_IMM, b"hi via WRITE_IMM\0");
    let decoded = RoceFrame::decode(&frame).expect("decodes");
    assert_eq!(decoded.bth.pad, 3);
    assert_eq!(decoded.pad_bytes, &[0, 0, 0]);
    assert_eq!(decoded.udp.checksum, 0);
    assert_eq!(decoded.udp.dst_port, 4791);
    assert_eq!(decoded.ip.flags_frag, 0x4000);
    assert_eq!(decoded.ip.ttl, 64);
    assert!(decoded.ip.checksum_ok());
    assert_eq!(ipv4_checksum(&frame[ETH..ETH + 20]), decoded.ip.checksum);
    assert!(decoded.icrc_ok());
    // Same length as the rxe capture's WRITE Only Imm frame (frame 27).
    assert_eq!(frame.len(), 98);

    let mut ip_only = Vec::new();
    let bth = Bth::new(Opcode::SEND_ONLY, 3, Psn::wrapping(1));
    let n = builder().build_ip(bth, ExtHeaders::NONE, b"x", &mut ip_only).expect("builds");
    assert_eq!(n, ip_only.len());
    let decoded = RoceFrame::decode_ip_packet(&ip_only).expect("decodes");
    assert_eq!((decoded.eth, decoded.payload), (None, &b"x"[..]));
}

#[test]
fn sealing_an_edited_frame_fixes_derived_fields() {
    let frame = build(Opcode::SEND_ONLY, b"four");
    let mut decoded = RoceFrame::decode(&frame).expect("decodes");
    decoded.payload = b"seven!!";
    assert!(!decoded.icrc_ok());
    let mut out = Vec::new();
    decoded.encode_sealed(&mut out).expect("seals");
    let again = RoceFrame::decode(&out).expect("decodes");
    assert_eq!(again.payload, b"seven!!");
    assert_eq!(again.bth.pad, 1);
    assert!(again.icrc_ok() && again.ip.checksum_ok());
}

#[test]
fn vlan_tag_round_trips() {
    let mut b = builder();
    b.vlan = Some(VlanTag { tpid: ETHERTYPE_VLAN, tci: 0x6005 });
    let mut out = Vec::new();
    b.build(Bth::new(Opcode::SEND_ONLY, 3, Psn::wrapping(1)), ExtHeaders::NONE, b"tagged", &mut out).expect("builds");
    let decoded = RoceFrame::decode(&out).expect("decodes");
    let tag = decoded.eth.and_then(|e| e.vlan).expect("tag");
    assert_eq!((tag.vid(), tag.pcp()), (5, 3));
    assert!(decoded.icrc_ok());
    let mut again = Vec::new();
    decoded.encode(&mut again);
    assert_eq!(again, out);
}

// ---- property tests ----

const KNOWN_OPCODES: [u8; 25] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12,
    0x13, 0x14, 0x16, 0x17, 0x64, 0x65,
];

fn arb_bth() -> impl Strategy<Value = Bth> {
    (
        prop::sample::select(KNOWN_OPCODES.to_vec()),
        any::<(bool, bool, bool)>(),
        0u8..16,
        any::<(u16, u8)>(),
        0u32..=0xFF_FFFF,
        0u8..0x80,
        0u32..=0xFF_FFFF,
    )
        .prop_map(|(op, (se, mig_req, ack_req), tver, (pkey, resv8a), dest_qp, resv7, psn)| Bth {
            opcode: Opcode(op),
            se,
            mig_req,
            pad: 0,
            tver,
            pkey,
            resv8a,
            dest_qp,
            ack_req,
            resv7,
            psn: Psn::wrapping(psn),
        })
}

/// Extended headers with arbitrary values, exactly the set `opcode` carries.
fn arb_ext(opcode: Opcode) -> impl Strategy<Value = ExtHeaders> {
    (
        any::<(u32, u8)>(),
        0u32..=0xFF_FFFF,
        any::<(u64, u32, u32)>(),
        any::<(u64, u32, u64, u64)>(),
        any::<u8>(),
        0u32..=0xFF_FFFF,
        any::<(u64, u32, u32)>(),
    )
        .prop_map(move |((qkey, resv8), src_qp, (va, rkey, dma_len), atomic, syndrome, msn, (orig, imm, ieth))| {
            ExtHeaders {
                deth: opcode.has_deth().then_some(Deth { qkey, resv8, src_qp }),
                reth: opcode.has_reth().then_some(Reth { va, rkey, dma_len }),
                atomic: opcode.has_atomic_eth().then_some(AtomicEth {
                    va: atomic.0,
                    rkey: atomic.1,
                    swap_add: atomic.2,
                    compare: atomic.3,
                }),
                aeth: opcode.has_aeth().then_some(Aeth { syndrome, msn }),
                atomic_ack: opcode.has_atomic_ack_eth().then_some(AtomicAckEth { orig }),
                imm: opcode.has_immdt().then_some(imm),
                ieth: opcode.has_ieth().then_some(ieth),
            }
        })
}

fn arb_builder() -> impl Strategy<Value = FrameBuilder> {
    (
        any::<([u8; 6], [u8; 6])>(),
        prop::option::of(any::<u16>()),
        any::<([u8; 4], [u8; 4])>(),
        any::<(u16, u8, u8, u16, bool)>(),
    )
        .prop_map(|((src_mac, dst_mac), tci, (src_ip, dst_ip), (udp_src_port, ttl, tos, ip_id, dont_fragment))| {
            FrameBuilder {
                src_mac: MacAddr(src_mac),
                dst_mac: MacAddr(dst_mac),
                vlan: tci.map(|tci| VlanTag { tpid: ETHERTYPE_VLAN, tci }),
                src_ip: Ipv4Addr::from(src_ip),
                dst_ip: Ipv4Addr::from(dst_ip),
                udp_src_port,
                ttl,
                tos,
                ip_id,
                dont_fragment,
            }
        })
}

fn arb_packet() -> impl Strategy<Value = (FrameBuilder, Bth, ExtHeaders, Vec<u8>)> {
    (arb_builder(), arb_bth(), prop::collection::vec(any::<u8>(), 0..300))
        .prop_flat_map(|(b, bth, payload)| arb_ext(bth.opcode).prop_map(move |ext| (b, bth, ext, payload.clone())))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn build_then_decode_gives_the_values_back((b, bth, ext, payload) in arb_packet()) {
        let mut out = Vec::new();
        let len = b.build(bth, ext, &payload, &mut out).expect("valid inputs build");
        prop_assert_eq!(len, out.len());
        let frame = RoceFrame::decode(&out).expect("built frames decode");

        let pad = (4 - payload.len() % 4) % 4;
        prop_assert_eq!(frame.bth, Bth { pad: pad as u8, ..bth });
        prop_assert_eq!(frame.ext, ext);
        prop_assert_eq!(frame.payload, &payload[..]);
        prop_assert_eq!(frame.pad_bytes, &[0u8; 3][..pad]);
        let eth = frame.eth.expect("Ethernet header");
        prop_assert_eq!((eth.src, eth.dst, eth.vlan), (b.src_mac, b.dst_mac, b.vlan));
        prop_assert_eq!((frame.ip.src, frame.ip.dst, frame.ip.ttl, frame.ip.tos, frame.ip.id), (b.src_ip, b.dst_ip, b.ttl, b.tos, b.ip_id));
        prop_assert_eq!(frame.udp.src_port, b.udp_src_port);
        prop_assert!(frame.icrc_ok());
        prop_assert!(frame.ip.checksum_ok());
        let ip_start = eth.header_len();
        prop_assert_eq!(icrc_ipv4(&out[ip_start..out.len() - 4]), Ok(frame.icrc));

        let mut again = Vec::new();
        frame.encode(&mut again);
        prop_assert_eq!(&again, &out);

        let mut ip_only = Vec::new();
        b.build_ip(bth, ext, &payload, &mut ip_only).expect("builds");
        prop_assert_eq!(&ip_only[..], &out[ip_start..]);
    }

    #[test]
    fn fixed_headers_keep_every_bit(bytes in any::<[u8; 28]>()) {
        let mut out = Vec::new();
        Bth::decode(&bytes).expect("12 bytes").encode(&mut out);
        Reth::decode(&bytes).expect("16 bytes").encode(&mut out);
        Aeth::decode(&bytes).expect("4 bytes").encode(&mut out);
        Deth::decode(&bytes).expect("8 bytes").encode(&mut out);
        AtomicEth::decode(&bytes).expect("28 bytes").encode(&mut out);
        AtomicAckEth::decode(&bytes).expect("8 bytes").encode(&mut out);
        UdpHeader::decode(&bytes).expect("8 bytes").encode(&mut out);
        let want: Vec<u8> = [12, 16, 4, 8, 28, 8, 8].iter().flat_map(|&n| bytes[..n].iter().copied()).collect();
        prop_assert_eq!(out, want);
    }

    #[test]
    fn ipv4_header_keeps_every_field(mut bytes in any::<[u8; 60]>(), words in 5u8..=15) {
        bytes[0] = 0x40 | words;
        let ip = Ipv4Header::decode(&bytes).expect("valid version and IHL");
        let mut out = Vec::new();
        ip.encode(&mut out);
        prop_assert_eq!(&out[..], &bytes[..usize::from(words) * 4]);
    }

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = RoceFrame::decode(&bytes);
        let _ = RoceFrame::decode_ip_packet(&bytes);
        let _ = icrc_ipv4(&bytes);
        let _ = EthHeader::decode(&bytes);
        let _ = Ipv4Header::decode(&bytes);
    }

    /// Arbitrary bytes behind a valid Ethernet/IPv4/UDP prefix, so that the
    /// BTH and extended-header paths see random input too.
    #[test]
    fn decode_never_panics_behind_valid_lengths(
        opcode in prop::sample::select(KNOWN_OPCODES.to_vec()),
        flags in any::<u8>(),
        rest in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let template = build(Opcode::SEND_ONLY, b"");
        let mut frame = template[..ETH + 28].to_vec();
        frame.extend_from_slice(&[opcode, flags]);
        frame.extend_from_slice(&rest);
        let ip_len = frame.len() - ETH;
        frame[ETH + 2..ETH + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        frame[ETH + 24..ETH + 26].copy_from_slice(&(ip_len as u16 - 20).to_be_bytes());
        if let Ok(decoded) = RoceFrame::decode(&frame) {
            let mut out = Vec::new();
            decoded.encode(&mut out);
            prop_assert_eq!(out, frame);
        }
    }
}

#[test]
fn aeth_helpers_survive_the_wire() {
    for aeth in [Aeth::ack(7), Aeth::rnr_nak(12, 8), Aeth::nak(NakCode::RemoteAccessError, 9)] {
        let mut out = Vec::new();
        aeth.encode(&mut out);
        assert_eq!(Aeth::decode(&out), Ok(aeth));
    }
}
