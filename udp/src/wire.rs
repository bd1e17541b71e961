//! The RC engine's packets to UDP datagrams and back.
//!
//! Sending: the kernel builds the IPv4 and UDP headers, so the ICRC must be
//! computed over the headers it *will* write. With `IP_PMTUDISC_DO` on an
//! unconnected socket Linux sends IP ID 0 with DF set, no options; TOS, TTL
//! and both checksums are masked out of the ICRC. [`encode`] therefore builds
//! the whole IPv4 packet exactly so, and the socket sends the bytes after the
//! UDP header.
//!
//! Receiving: [`decode`] takes a whole IPv4 packet (from a raw socket, or
//! rebuilt by [`synth_headers`] around a UDP payload), checks that it is
//! addressed to this endpoint, checks the ICRC over the real headers, and
//! decodes it with the core codec.

use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::wire::cm::GSI_QKEY;
use rctb_core::wire::roce::Opcode;
use rctb_core::wire::roce::{
    FrameBuilder, IP_PROTO_UDP, IPV4_DF, MacAddr, ROCEV2_UDP_PORT, RoceError, RoceFrame, UDP_HEADER_LEN, icrc_ipv4,
    icrc_on_wire,
};
use rctb_engine::Packet;
use rctb_engine::cm::mad::GSI_QPN;
use thiserror::Error;

/// IPv4 (20, no options) + UDP (8): where a UDP payload starts in an
/// IPv4 packet this backend sends or rebuilds.
pub const HEADERS_LEN: usize = 20 + UDP_HEADER_LEN;

/// Why a received datagram was not handed to the RC engine.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RxDrop {
    /// Not UDP to this endpoint's address and port (raw sockets see every
    /// UDP packet to the address).
    #[error("not addressed to this endpoint")]
    NotForUs,
    /// The ICRC does not match the packet.
    #[error("bad ICRC: on the wire {on_wire:#010x}, computed {computed:#010x}")]
    BadIcrc {
        /// The frame's ICRC.
        on_wire: u32,
        /// The one its bytes give.
        computed: u32,
    },
    /// Not a well-formed RoCEv2 packet.
    #[error("malformed RoCEv2 packet: {0}")]
    Malformed(RoceError),
    /// A valid RoCEv2 packet of a kind this RC engine does not handle.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

/// Encodes `pkt` into `out` (cleared first) as the whole IPv4 packet the
/// kernel will put on the wire when the UDP payload is sent from
/// `src_port` to `dst_port`; returns where the UDP payload starts.
pub fn encode(pkt: &Packet, src_port: u16, dst_port: u16, out: &mut Vec<u8>) -> Result<usize, RoceError> {
    let mut b = FrameBuilder::new(MacAddr([0; 6]), MacAddr([0; 6]), pkt.src_ip, pkt.dst_ip);
    b.udp_src_port = src_port;
    let ext = pkt.ext_headers();
    let mut frame = b.frame(pkt.bth, ext, &pkt.payload)?;
    frame.eth = None;
    if dst_port != ROCEV2_UDP_PORT {
        frame.udp.dst_port = dst_port;
        frame.seal()?;
    }
    out.clear();
    frame.encode(out);
    Ok(frame.ip.header_len() + UDP_HEADER_LEN)
}

/// Writes the IPv4 and UDP headers a sender using this backend's rules
/// (IP ID 0, DF, no options) put in front of a `payload_len`-byte UDP
/// payload from `src` to `dst`: what a plain UDP socket does not show.
/// TOS, TTL and the checksums are left zero (the ICRC masks them).
pub fn synth_headers(hdr: &mut [u8; HEADERS_LEN], src: SocketAddrV4, dst: SocketAddrV4, payload_len: usize) {
    let total = (HEADERS_LEN + payload_len).min(u16::MAX as usize) as u16;
    let udp_len = total.saturating_sub(20);
    hdr.fill(0);
    hdr[0] = 0x45;
    hdr[2..4].copy_from_slice(&total.to_be_bytes());
    hdr[6..8].copy_from_slice(&IPV4_DF.to_be_bytes());
    hdr[8] = 64;
    hdr[9] = IP_PROTO_UDP;
    hdr[12..16].copy_from_slice(&src.ip().octets());
    hdr[16..20].copy_from_slice(&dst.ip().octets());
    hdr[20..22].copy_from_slice(&src.port().to_be_bytes());
    hdr[22..24].copy_from_slice(&dst.port().to_be_bytes());
    hdr[24..26].copy_from_slice(&udp_len.to_be_bytes());
}

/// Checks and decodes the IPv4 packet `ip` received by the endpoint
/// `local`:`port`. The payload is copied into `payload` (cleared first),
/// which becomes the packet's buffer. `ip` may be modified (the UDP
/// destination port is rewritten to 4791 for the codec when the endpoint
/// uses another port).
pub fn decode(ip: &mut [u8], local: Ipv4Addr, port: u16, mut payload: Vec<u8>) -> Result<Packet, (RxDrop, Vec<u8>)> {
    let fail = |why, payload| Err((why, payload));
    let Some(&first) = ip.first() else { return fail(RxDrop::NotForUs, payload) };
    let ihl = usize::from(first & 0xF) * 4;
    if first >> 4 != 4 || ihl < 20 || ip.len() < ihl + UDP_HEADER_LEN || ip[9] != IP_PROTO_UDP {
        return fail(RxDrop::NotForUs, payload);
    }
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let dport = u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]);
    if dst != local || dport != port {
        return fail(RxDrop::NotForUs, payload);
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let Some(packet) = ip.get(..total).filter(|p| p.len() >= ihl + UDP_HEADER_LEN + 4) else {
        let e = RoceError::BadLength {
            header: "IPv4",
            field: "total_length",
            value: total,
            have: ip.len(),
            rule: "exceeds the received bytes or leaves no room for UDP and ICRC",
        };
        return fail(RxDrop::Malformed(e), payload);
    };
    let on_wire = icrc_on_wire(packet).unwrap_or_default();
    let computed = match icrc_ipv4(&packet[..total - 4]) {
        Ok(c) => c,
        Err(e) => return fail(RxDrop::Malformed(e), payload),
    };
    if on_wire != computed {
        return fail(RxDrop::BadIcrc { on_wire, computed }, payload);
    }
    if port != ROCEV2_UDP_PORT {
        ip[ihl + 2..ihl + 4].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
    }
    let frame = match RoceFrame::decode_ip_packet(&ip[..total]) {
        Ok(f) => f,
        Err(e) => return fail(RxDrop::Malformed(e), payload),
    };
    let ext = frame.ext;
    let gsi = frame.bth.dest_qp == GSI_QPN && frame.bth.opcode == Opcode::UD_SEND_ONLY;
    let unsupported = if ext.deth.is_some() && !gsi {
        Some("UD datagrams to a QP other than the GSI (QP1)")
    } else if gsi && ext.deth.is_none_or(|d| d.qkey != GSI_QKEY) {
        Some("a QP1 packet without the GSI's Q_Key")
    } else if ext.ieth.is_some() {
        Some("SEND with invalidate")
    } else {
        None
    };
    if let Some(what) = unsupported {
        return fail(RxDrop::Unsupported(what), payload);
    }
    payload.clear();
    payload.extend_from_slice(frame.payload);
    Ok(Packet {
        src_ip: frame.ip.src,
        dst_ip: frame.ip.dst,
        udp_src_port: frame.udp.src_port,
        bth: frame.bth,
        reth: ext.reth,
        atomic: ext.atomic,
        aeth: ext.aeth,
        atomic_ack: ext.atomic_ack,
        deth: ext.deth,
        imm: ext.imm,
        payload,
        corrupt: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctb_core::transport::Psn;
    use rctb_core::wire::roce::{Bth, Reth};

    fn pkt(payload: Vec<u8>) -> Packet {
        let mut bth = Bth::new(Opcode::WRITE_ONLY, 0x11, Psn::wrapping(0x12_3456));
        bth.ack_req = true;
        Packet {
            src_ip: Ipv4Addr::new(127, 0, 0, 1),
            dst_ip: Ipv4Addr::new(127, 0, 0, 2),
            udp_src_port: 0xC001,
            bth,
            reth: Some(Reth { va: 0x7f00_0000_1000, rkey: 0x1234, dma_len: payload.len() as u32 }),
            atomic: None,
            aeth: None,
            atomic_ack: None,
            deth: None,
            imm: None,
            payload,
            corrupt: false,
        }
    }

    fn round_trip(dport: u16) {
        let p = pkt((0..37u8).collect());
        let mut ip = Vec::new();
        let at = encode(&p, 4791, dport, &mut ip).unwrap();
        assert_eq!(at, HEADERS_LEN);
        // What the kernel writes differs only in masked fields: TTL, TOS, checksums.
        ip[1] = 0x10;
        ip[8] = 3;
        ip[10] = 0xAB;
        ip[26] = 0xCD;
        let got = decode(&mut ip.clone(), p.dst_ip, dport, Vec::new()).map_err(|(e, _)| e).unwrap();
        let mut bth = p.bth;
        bth.pad = 3; // 37 bytes of payload
        assert_eq!((got.bth, got.reth, got.payload.clone()), (bth, p.reth, p.payload.clone()));
        assert_eq!(got.udp_src_port, 4791);
        // A UDP socket's view, rebuilt, checks out the same.
        let mut hdr = [0u8; HEADERS_LEN];
        let (src, dst) = (SocketAddrV4::new(p.src_ip, 4791), SocketAddrV4::new(p.dst_ip, dport));
        synth_headers(&mut hdr, src, dst, ip.len() - at);
        let mut rebuilt = hdr.to_vec();
        rebuilt.extend_from_slice(&ip[at..]);
        assert!(decode(&mut rebuilt, p.dst_ip, dport, Vec::new()).is_ok());
    }

    #[test]
    fn encoded_packets_decode_with_their_icrc_on_4791_and_other_ports() {
        round_trip(ROCEV2_UDP_PORT);
        round_trip(14791);
    }

    #[test]
    fn a_flipped_bit_or_another_ip_id_fails_the_icrc() {
        let p = pkt(vec![7; 64]);
        let mut ip = Vec::new();
        encode(&p, 4791, 4791, &mut ip).unwrap();
        for at in [4usize, 30, 60, ip.len() - 1] {
            let mut bad = ip.clone();
            bad[at] ^= 0x01;
            match decode(&mut bad, p.dst_ip, 4791, Vec::new()) {
                Err((RxDrop::BadIcrc { .. }, _)) => {}
                other => panic!("byte {at}: {:?}", other.map(|_| ()).map_err(|e| e.0)),
            }
        }
    }

    #[test]
    fn packets_for_other_addresses_or_ports_are_not_ours() {
        let p = pkt(vec![1; 8]);
        let mut ip = Vec::new();
        encode(&p, 4791, 4791, &mut ip).unwrap();
        let other = Ipv4Addr::new(127, 0, 0, 3);
        assert_eq!(decode(&mut ip.clone(), other, 4791, Vec::new()).err().map(|e| e.0), Some(RxDrop::NotForUs));
        assert_eq!(decode(&mut ip.clone(), p.dst_ip, 4792, Vec::new()).err().map(|e| e.0), Some(RxDrop::NotForUs));
        assert_eq!(decode(&mut [], p.dst_ip, 4791, Vec::new()).err().map(|e| e.0), Some(RxDrop::NotForUs));
    }

    /// IPv4/UDP bytes the ICRC does not cover: TOS, TTL, the IPv4 and UDP
    /// checksums (BTH byte 4 is masked too, but its reserved bits may be refused).
    const MASKED: [usize; 6] = [1, 8, 10, 11, 26, 27];

    proptest::proptest! {
        /// Any change to a covered byte of a valid packet is refused (never
        /// a panic, never a wrong packet); changes to masked bytes pass.
        #[test]
        fn one_changed_byte_is_caught(len in 0usize..300, at in 0usize..400, xor in 1u8..=255) {
            let p = pkt((0..len).map(|i| i as u8).collect());
            let mut ip = Vec::new();
            encode(&p, 4791, 4791, &mut ip).unwrap();
            let at = at % ip.len();
            ip[at] ^= xor;
            let r = decode(&mut ip, p.dst_ip, 4791, Vec::new());
            if MASKED.contains(&at) {
                proptest::prop_assert!(r.is_ok());
            } else if at != HEADERS_LEN + 4 {
                // The IPv4 version and header length, the protocol, and the
                // destination address and port make it another endpoint's
                // packet; an IPv4 or UDP length past the bytes is malformed,
                // and so is a shorter one that cuts into the BTH (a shorter
                // one that keeps the BTH fails the ICRC); every other covered
                // byte fails the ICRC.
                let drop = r.err().map(|e| e.0);
                match at {
                    0 | 9 | 16..=19 | 22 | 23 => proptest::prop_assert_eq!(drop, Some(RxDrop::NotForUs), "byte {}", at),
                    2 | 3 | 24 | 25 => proptest::prop_assert!(
                        matches!(
                            drop,
                            Some(RxDrop::Malformed(RoceError::BadLength { .. } | RoceError::Truncated { .. }) | RxDrop::BadIcrc { .. })
                        ),
                        "byte {}: {:?}", at, drop
                    ),
                    _ => proptest::prop_assert!(matches!(drop, Some(RxDrop::BadIcrc { .. })), "byte {}: {:?}", at, drop),
                }
            }
        }

        /// Nothing a socket can deliver makes decode panic.
        #[test]
        fn decode_never_panics(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = decode(&mut bytes, Ipv4Addr::new(127, 0, 0, 2), 4791, Vec::new());
        }
    }
}
