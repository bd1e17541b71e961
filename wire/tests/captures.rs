//! The RoCEv2 codec against real captures: rxe SEND/WRITE traffic and an
//! NVMe-oF/RDMA session. Facts asserted here were read off with tshark and
//! `icrc_check.py` (which verifies ICRCs independently of this crate).

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::OnceLock;

use pcap_file::pcap::PcapReader;
use proptest::prelude::*;
use rctb_wire::roce::{AckKind, ETHERTYPE_ARP, NotRoce, Opcode, RoceError, RoceFrame, icrc_ipv4, icrc_on_wire};

const RXE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/rxe-send-write.pcap");
const NVME: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/nvme-rdma.pcap");

fn read_frames(path: &str) -> Vec<Vec<u8>> {
    let file = File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut reader = PcapReader::new(file).expect("pcap header");
    let mut frames = Vec::new();
    while let Some(packet) = reader.next_packet() {
        frames.push(packet.expect("pcap record").data.into_owned());
    }
    frames
}

/// Decodes every frame; checks each RoCEv2 one round-trips byte for byte and
/// carries a good ICRC and IPv4 checksum. Returns frame number (1-based, as
/// tshark counts) with the decode result.
fn decode_all(frames: &[Vec<u8>]) -> Vec<(usize, Result<RoceFrame<'_>, RoceError>)> {
    let mut out = Vec::new();
    for (i, bytes) in frames.iter().enumerate() {
        let number = i + 1;
        let decoded = RoceFrame::decode(bytes);
        if let Ok(frame) = &decoded {
            let mut encoded = Vec::new();
            frame.encode(&mut encoded);
            assert_eq!(&encoded, bytes, "frame {number}: re-encoding differs");
            assert_eq!(frame.encoded_len(), bytes.len(), "frame {number}: encoded_len");
            assert!(frame.icrc_ok(), "frame {number}: ICRC {:#010x} != {:#010x}", frame.icrc, frame.compute_icrc());
            assert!(frame.ip.checksum_ok(), "frame {number}: IPv4 checksum");

            // The byte-level ICRC must agree with the field-level one.
            let ip_packet = bytes.get(14..14 + usize::from(frame.ip.total_len)).expect("IP packet");
            let (covered, _) = ip_packet.split_at(ip_packet.len() - 4);
            assert_eq!(icrc_ipv4(covered), Ok(frame.icrc), "frame {number}: icrc_ipv4");
            assert_eq!(icrc_on_wire(ip_packet), Some(frame.icrc));

            // Starting at the IP header gives the same frame, minus Ethernet.
            let from_ip = RoceFrame::decode_ip_packet(ip_packet).expect("decode_ip_packet");
            assert_eq!(RoceFrame { eth: frame.eth, ..from_ip }, *frame);

            // Sealing a decoded frame changes nothing: all derived fields are right.
            let mut sealed = Vec::new();
            frame.encode_sealed(&mut sealed).expect("seal");
            assert_eq!(&sealed, bytes, "frame {number}: sealing changed the frame");
        }
        out.push((number, decoded));
    }
    out
}

fn roce_only<'a>(decoded: &'a [(usize, Result<RoceFrame<'a>, RoceError>)]) -> Vec<(usize, &'a RoceFrame<'a>)> {
    decoded.iter().filter_map(|(n, r)| r.as_ref().ok().map(|f| (*n, f))).collect()
}

#[test]
fn rxe_capture_decodes_round_trips_and_checks() {
    let frames = read_frames(RXE);
    assert_eq!(frames.len(), 28);
    let decoded = decode_all(&frames);
    let roce = roce_only(&decoded);
    assert_eq!(roce.len(), 24, "tshark -Y udp.port==4791 counts 24");

    // Frames 1-4 are ARP: reported as "not RoCEv2", not as malformed.
    for (n, result) in decoded.iter().take(4) {
        assert_eq!(result.as_ref().err(), Some(&RoceError::NotRoce(NotRoce::EtherType(ETHERTYPE_ARP))), "frame {n}");
    }

    // Five SEND Only, five WRITE Only, SEND Only Imm, WRITE Only Imm, each ACKed.
    let opcodes: Vec<u8> = roce.iter().map(|(_, f)| f.bth.opcode.0).collect();
    let mut want = Vec::new();
    for request in [[0x04; 5].as_slice(), &[0x0A; 5], &[0x05], &[0x0B]] {
        for op in request {
            want.extend([*op, 0x11]);
        }
    }
    assert_eq!(opcodes, want);
}

#[test]
fn rxe_capture_field_values() {
    let frames = read_frames(RXE);
    let frame = |n: usize| RoceFrame::decode(&frames[n - 1]).expect("RoCEv2 frame");

    let send = frame(5);
    assert_eq!(send.bth.opcode, Opcode::SEND_ONLY);
    assert_eq!(send.bth.dest_qp, 0x13);
    assert_eq!(send.bth.psn.get(), 15_083_422);
    assert!(send.bth.ack_req);
    assert_eq!(send.bth.pkey, 0xFFFF);
    assert_eq!(send.udp.src_port, 49475);
    assert_eq!(send.udp.checksum, 0);
    assert_eq!(send.ip.ttl, 64);
    assert_eq!(send.ip.id, 0x4c88);
    assert_eq!(send.eth.map(|e| e.src.to_string()), Some("06:96:f1:99:8a:e0".to_string()));

    let ack = frame(6);
    assert_eq!(ack.bth.opcode, Opcode::ACKNOWLEDGE);
    let aeth = ack.ext.aeth.expect("AETH");
    assert_eq!((aeth.syndrome, aeth.msn), (0x1F, 1));
    assert_eq!(aeth.kind(), AckKind::Ack { credits: 31 });
    assert!(ack.payload.is_empty());

    let write = frame(15);
    let reth = write.ext.reth.expect("RETH");
    assert_eq!((reth.va, reth.rkey, reth.dma_len), (0x5555_ac90_d000, 0x5f1, 64));
    assert_eq!(write.payload.len(), 64);

    let send_imm = frame(25);
    assert_eq!(send_imm.bth.opcode, Opcode::SEND_ONLY_IMM);
    assert_eq!(send_imm.ext.imm, Some(0x1234_5678));
    assert!(send_imm.payload.starts_with(b"hello via SEND_WITH_IMM\0"));
    assert_eq!(send_imm.payload.len(), 32);
    // Wire bytes 18 41 c3 ab, read little-endian.
    assert_eq!(send_imm.icrc, 0xabc3_4118);

    let write_imm = frame(27);
    assert_eq!(write_imm.bth.opcode, Opcode::WRITE_ONLY_IMM);
    assert_eq!(write_imm.ext.imm, Some(0xcafe_babe));
    let reth = write_imm.ext.reth.expect("RETH");
    assert_eq!((reth.va, reth.rkey, reth.dma_len), (0x5575_919f_a960, 0x6b0, 17));
    assert_eq!(write_imm.bth.pad, 3);
    assert_eq!(write_imm.payload, b"hi via WRITE_IMM\0");
    assert_eq!(write_imm.pad_bytes, &[0, 0, 0]);
}

#[test]
fn nvme_capture_decodes_round_trips_and_checks() {
    let frames = read_frames(NVME);
    let decoded = decode_all(&frames);
    for (n, result) in &decoded {
        assert!(result.is_ok(), "frame {n}: {:?}", result.as_ref().err());
    }
    let roce = roce_only(&decoded);
    assert_eq!(roce.len(), 1668, "tshark -Y udp.port==4791 counts 1668");

    // Opcode histogram from `tshark -T fields -e infiniband.bth.opcode`.
    let mut histogram = BTreeMap::new();
    for (_, f) in &roce {
        *histogram.entry(f.bth.opcode.0).or_insert(0usize) += 1;
    }
    let want = BTreeMap::from([
        (0x00, 2),
        (0x02, 2),
        (0x04, 73),
        (0x06, 33),
        (0x07, 1067),
        (0x08, 33),
        (0x0A, 2),
        (0x0C, 4),
        (0x0D, 2),
        (0x0E, 252),
        (0x0F, 2),
        (0x10, 2),
        (0x11, 149),
        (0x17, 31),
        (0x64, 14),
    ]);
    assert_eq!(histogram, want);

    // CM MADs on QP1: UD SEND Only with the GSI Q_Key and a 256-byte MAD.
    let (_, mad) = roce[0];
    assert_eq!(mad.bth.opcode, Opcode::UD_SEND_ONLY);
    let deth = mad.ext.deth.expect("DETH");
    assert_eq!((deth.qkey, deth.src_qp), (0x8001_0000, 1));
    assert_eq!(mad.payload.len(), 256);

    // Frame 8: the NVMe completion sent with Invalidate.
    let (_, inv) = roce[7];
    assert_eq!(inv.bth.opcode, Opcode::SEND_ONLY_INV);
    assert_eq!(inv.bth.dest_qp, 0x16);
    assert_eq!(inv.ext.ieth, Some(0xbbe));
    assert_eq!(inv.payload.len(), 16);
}

/// Frames of both captures that are RoCEv2 (all but rxe's four ARPs), read once.
fn roce_frames() -> &'static [Vec<u8>] {
    static FRAMES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    FRAMES.get_or_init(|| {
        let mut frames = read_frames(RXE);
        frames.retain(|f| RoceFrame::decode(f).is_ok());
        // The first few hundred NVMe frames hold every header kind there (UD,
        // SEND Inv, READ, WRITE, ACK) and keep each case cheap.
        frames.extend(read_frames(NVME).into_iter().take(400));
        frames
    })
}

/// Byte offsets (no VLAN, no IP options) of the fields the ICRC masks, plus
/// the Ethernet header it does not cover.
fn icrc_ignores(offset: usize) -> bool {
    offset < 14 || matches!(offset, 15 | 22 | 24 | 25 | 40 | 41 | 46)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn truncated_capture_frames_are_errors(index in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>()) {
        let frames = roce_frames();
        let frame = index.get(frames);
        let len = cut.index(frame.len());
        // A cut frame is short of a header, or shorter than its own
        // IPv4/UDP length says; either error names what is missing.
        let e = RoceFrame::decode(&frame[..len]).unwrap_err();
        prop_assert!(
            matches!(e, RoceError::Truncated { have, .. } if have < frame.len())
                || matches!(e, RoceError::BadLength { value, have, .. } if value > have),
            "{e:?}"
        );
    }

    #[test]
    fn bit_flipped_capture_frames_never_panic(
        index in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let frames = roce_frames();
        let mut frame = index.get(frames).clone();
        let offset = at.index(frame.len());
        frame[offset] ^= 1 << bit;
        if let Ok(decoded) = RoceFrame::decode(&frame) {
            // Whatever decodes re-encodes exactly...
            let mut encoded = Vec::new();
            decoded.encode(&mut encoded);
            prop_assert_eq!(&encoded, &frame);
            // ...and a CRC catches every single-bit error it covers.
            prop_assert_eq!(decoded.icrc_ok(), icrc_ignores(offset), "offset {}", offset);
            if !icrc_ignores(offset) {
                prop_assert!(
                    matches!(decoded.check_icrc(), Err(RoceError::IcrcMismatch { .. })),
                    "check_icrc must report the mismatch"
                );
            }
        }
    }
}
