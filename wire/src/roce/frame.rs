//! [`RoceFrame`]: a whole RoCEv2 frame decoded without copying, and its
//! byte-exact re-encoding.
//!
//! Decoding validates structure (lengths, ports, opcode, pad) but not the
//! checksums: a frame with a bad ICRC is still a frame worth looking at, so
//! the ICRC is checked on request ([`RoceFrame::check_icrc`]).

use super::error::{NotRoce, RoceError};
use super::eth::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthHeader};
use super::ext::ExtHeaders;
use super::headers::{BTH_LEN, Bth, ICRC_LEN, ROCEV2_UDP_PORT};
use super::icrc::IcrcHasher;
use super::ipv4::{IP_PROTO_UDP, Ipv4Header};
use super::udp::{UDP_HEADER_LEN, UdpHeader};

/// Source of the zero pad bytes of sealed frames, so that `pad_bytes` can
/// stay a borrowed slice.
static ZERO_PAD: [u8; 3] = [0; 3];

/// A decoded RoCEv2 frame; headers are parsed, data is borrowed.
///
/// Every field is kept as read, so [`encode`](Self::encode) reproduces the
/// input byte for byte. After editing fields, [`seal`](Self::seal) recomputes
/// what depends on them (lengths, pad, IPv4 checksum, ICRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    /// The link header; `None` when decoded from an IP packet (raw sockets).
    pub eth: Option<EthHeader>,
    /// The IPv4 header (only IPv4 decodes; IPv6 is [`RoceError::Unsupported`]).
    pub ip: Ipv4Header,
    /// The UDP header: destination port 4791, length equal to the IPv4 total length
    /// minus the IPv4 header.
    pub udp: UdpHeader,
    /// The Base Transport Header; its opcode is one [`Opcode::is_known`](super::Opcode::is_known)
    /// accepts.
    pub bth: Bth,
    /// The extended headers the opcode carries, between the BTH and the payload.
    pub ext: ExtHeaders,
    /// Message data of this packet, without the pad.
    pub payload: &'a [u8],
    /// The `bth.pad` bytes after the payload, as read (zeros when sent by rxe).
    pub pad_bytes: &'a [u8],
    /// The ICRC as transmitted, read little-endian.
    pub icrc: u32,
    /// Bytes after the IPv4 packet (Ethernet minimum-size padding).
    pub trailer: &'a [u8],
}

impl<'a> RoceFrame<'a> {
    /// Decodes a whole Ethernet frame (without FCS).
    ///
    /// Frames of other protocols give [`RoceError::NotRoce`].
    pub fn decode(bytes: &'a [u8]) -> Result<Self, RoceError> {
        let (eth, rest) = EthHeader::split(bytes)?;
        match eth.ethertype {
            ETHERTYPE_IPV4 => {}
            ETHERTYPE_IPV6 => return Err(ipv6_unsupported("Ethernet", "ethertype", ETHERTYPE_IPV6.into())),
            other => return Err(RoceError::NotRoce(NotRoce::EtherType(other))),
        }
        let mut frame = Self::decode_ip_packet(rest)?;
        frame.eth = Some(eth);
        Ok(frame)
    }

    /// Decodes a packet that starts at the IPv4 header, as a raw IP socket
    /// delivers it. The result has `eth: None`.
    pub fn decode_ip_packet(bytes: &'a [u8]) -> Result<Self, RoceError> {
        if let Some(version @ 6) = bytes.first().map(|b| b >> 4) {
            return Err(ipv6_unsupported("IP", "version", version.into()));
        }
        let (ip, _) = Ipv4Header::split(bytes)?;
        if ip.protocol != IP_PROTO_UDP {
            return Err(RoceError::NotRoce(NotRoce::IpProtocol(ip.protocol)));
        }
        if ip.is_fragment() {
            return Err(RoceError::Unsupported {
                header: Ipv4Header::NAME,
                field: "flags_frag",
                value: ip.flags_frag.into(),
                rule: "fragmented packets",
            });
        }
        let (total, ihl) = (usize::from(ip.total_len), ip.header_len());
        if total < ihl {
            return Err(RoceError::BadLength {
                header: Ipv4Header::NAME,
                field: "total_length",
                value: total,
                have: bytes.len(),
                rule: "smaller than the IPv4 header",
            });
        }
        let Some((packet, trailer)) = bytes.split_at_checked(total) else {
            return Err(RoceError::BadLength {
                header: Ipv4Header::NAME,
                field: "total_length",
                value: total,
                have: bytes.len(),
                rule: "exceeds the captured bytes",
            });
        };
        let datagram = packet.get(ihl..).unwrap_or_default();
        let (udp, udp_payload) = UdpHeader::split(datagram)?;
        if udp.dst_port != ROCEV2_UDP_PORT {
            return Err(RoceError::NotRoce(NotRoce::UdpPort(udp.dst_port)));
        }
        if usize::from(udp.len) != datagram.len() {
            return Err(RoceError::BadLength {
                header: UdpHeader::NAME,
                field: "length",
                value: usize::from(udp.len),
                have: datagram.len(),
                rule: "must equal the IPv4 total length minus the IPv4 header",
            });
        }
        let (bth, rest) = Bth::split(udp_payload)?;
        if !bth.opcode.is_known() {
            return Err(RoceError::UnknownOpcode(bth.opcode));
        }
        let Some((rest, icrc)) = rest.split_last_chunk::<ICRC_LEN>() else {
            return Err(RoceError::Truncated { header: "ICRC", need: ICRC_LEN, have: rest.len() });
        };
        let (ext, body) = ExtHeaders::split(bth.opcode, rest)?;
        let (payload, pad_bytes) = split_pad(bth.pad, body)?;
        Ok(RoceFrame { eth: None, ip, udp, bth, ext, payload, pad_bytes, icrc: u32::from_le_bytes(*icrc), trailer })
    }

    /// Length of [`encode`](Self::encode)'s output.
    pub fn encoded_len(&self) -> usize {
        self.eth.map_or(0, |eth| eth.header_len())
            + self.ip.header_len()
            + UDP_HEADER_LEN
            + BTH_LEN
            + self.ext.wire_len()
            + self.payload.len()
            + self.pad_bytes.len()
            + ICRC_LEN
            + self.trailer.len()
    }

    /// Appends the frame to `out` exactly as the fields say (no checksum or
    /// length is recomputed): a decoded frame comes out byte for byte.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        if let Some(eth) = &self.eth {
            eth.encode(out);
        }
        self.ip.encode(out);
        self.udp.encode(out);
        self.bth.encode(out);
        self.ext.encode(out);
        out.extend_from_slice(self.payload);
        out.extend_from_slice(self.pad_bytes);
        out.extend_from_slice(&self.icrc.to_le_bytes());
        out.extend_from_slice(self.trailer);
    }

    /// The ICRC these fields call for (the stored `icrc` is ignored).
    pub fn compute_icrc(&self) -> u32 {
        let mut hasher = IcrcHasher::new();
        hasher.ipv4_header(self.ip.to_bytes(), self.ip.header_len());
        hasher.udp_header(self.udp.to_bytes());
        hasher.bth(self.bth.to_bytes());
        self.ext.for_each_encoded(|bytes| hasher.update(bytes));
        hasher.update(self.payload);
        hasher.update(self.pad_bytes);
        hasher.finish()
    }

    /// Whether the stored ICRC is the right one.
    pub fn icrc_ok(&self) -> bool {
        self.icrc == self.compute_icrc()
    }

    /// Like [`icrc_ok`](Self::icrc_ok), as an error that carries both values.
    pub fn check_icrc(&self) -> Result<(), RoceError> {
        let computed = self.compute_icrc();
        if computed == self.icrc { Ok(()) } else { Err(RoceError::IcrcMismatch { on_wire: self.icrc, computed }) }
    }

    /// Recomputes every derived field from the others: BTH pad count and
    /// (zero) pad bytes from the payload length, UDP length, IPv4 total
    /// length and checksum, then the ICRC. The UDP checksum is left alone
    /// (RoCEv2 senders use 0).
    ///
    /// Fails if the extended headers do not match the opcode or the packet
    /// would not fit an IPv4 total length.
    pub fn seal(&mut self) -> Result<(), RoceError> {
        self.ext.check(self.bth.opcode)?;
        let pad = (4 - self.payload.len() % 4) % 4;
        self.bth.pad = pad as u8;
        self.pad_bytes = ZERO_PAD.get(..pad).unwrap_or_default();
        let udp_len = UDP_HEADER_LEN + BTH_LEN + self.ext.wire_len() + self.payload.len() + pad + ICRC_LEN;
        let total = self.ip.header_len() + udp_len;
        let too_large = RoceError::TooLarge { len: total };
        self.ip.total_len = u16::try_from(total).map_err(|_| too_large)?;
        self.udp.len = u16::try_from(udp_len).map_err(|_| too_large)?;
        self.ip.checksum = self.ip.compute_checksum();
        self.icrc = self.compute_icrc();
        Ok(())
    }

    /// Appends a [sealed](Self::seal) copy of the frame to `out`: fresh
    /// lengths, pad, IPv4 checksum and ICRC.
    pub fn encode_sealed(&self, out: &mut Vec<u8>) -> Result<(), RoceError> {
        let mut sealed = *self;
        sealed.seal()?;
        sealed.encode(out);
        Ok(())
    }
}

/// Splits the bytes between the extended headers and the ICRC into payload
/// and pad, per the BTH pad count.
fn split_pad(pad: u8, body: &[u8]) -> Result<(&[u8], &[u8]), RoceError> {
    let Some(payload_len) = body.len().checked_sub(usize::from(pad)) else {
        return Err(RoceError::BadPad { pad, len: body.len(), rule: "pad count exceeds the bytes after the headers" });
    };
    // Every header is a multiple of 4 bytes, so an unaligned body means the
    // sender's pad count (or length fields) is wrong.
    if !body.len().is_multiple_of(4) {
        return Err(RoceError::BadPad { pad, len: body.len(), rule: "payload plus pad must be a multiple of 4" });
    }
    body.split_at_checked(payload_len).ok_or(RoceError::BadPad {
        pad,
        len: body.len(),
        rule: "pad count exceeds the bytes after the headers",
    })
}

fn ipv6_unsupported(header: &'static str, field: &'static str, value: u64) -> RoceError {
    RoceError::Unsupported { header, field, value, rule: "RoCEv2 over IPv6 is not supported" }
}
