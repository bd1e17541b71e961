//! IPv4 header with every field kept as read (options, id, flags, checksum),
//! and the header checksum.
//!
//! The version is always 4 and the IHL follows from the options, so neither is
//! stored: anything else is rejected on decode.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;

use super::codec::{array_at, put_at};
use super::error::RoceError;

/// Length of an IPv4 header without options (IHL 5).
pub const IPV4_MIN_HEADER_LEN: usize = 20;
/// Length of an IPv4 header with the most options (IHL 15).
pub const IPV4_MAX_HEADER_LEN: usize = 60;
const MAX_OPTIONS_LEN: usize = IPV4_MAX_HEADER_LEN - IPV4_MIN_HEADER_LEN;
/// IPv4 protocol number of UDP; any other makes frame decoding return
/// [`NotRoce::IpProtocol`](super::NotRoce::IpProtocol).
pub const IP_PROTO_UDP: u8 = 17;
/// Don't Fragment, in `flags_frag`.
pub const IPV4_DF: u16 = 0x4000;
/// More Fragments, in `flags_frag`.
pub const IPV4_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1FFF;

/// IPv4 options (0..=40 bytes, a multiple of 4), stored inline so that
/// [`Ipv4Header`] stays `Copy` with no lifetime.
#[derive(Clone, Copy)]
pub struct Ipv4Options {
    len: u8,
    bytes: [u8; MAX_OPTIONS_LEN],
}

impl Ipv4Options {
    /// No options (IHL 5).
    pub const EMPTY: Ipv4Options = Ipv4Options { len: 0, bytes: [0; MAX_OPTIONS_LEN] };

    /// Options from raw bytes; their length must be a multiple of 4, at most 40.
    pub fn new(bytes: &[u8]) -> Result<Self, RoceError> {
        if bytes.len() > MAX_OPTIONS_LEN || !bytes.len().is_multiple_of(4) {
            return Err(RoceError::BadField {
                header: "IPv4",
                field: "options",
                value: bytes.len() as u64,
                rule: "options length must be a multiple of 4, at most 40",
            });
        }
        let mut options = Ipv4Options::EMPTY;
        put_at(&mut options.bytes, 0, bytes);
        options.len = bytes.len() as u8;
        Ok(options)
    }

    /// The option bytes as carried after the 20-byte fixed header.
    pub fn as_slice(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// Length of the options in bytes (0..=40, a multiple of 4).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are no options.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// By hand: only the used prefix of the inline buffer is the value.
impl PartialEq for Ipv4Options {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Ipv4Options {}

impl Default for Ipv4Options {
    fn default() -> Self {
        Ipv4Options::EMPTY
    }
}

impl Hash for Ipv4Options {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for Ipv4Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ipv4Options({:02x?})", self.as_slice())
    }
}

/// IPv4 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Header {
    /// DSCP (6 bits) and ECN (2 bits).
    pub tos: u8,
    /// Header plus payload, in bytes.
    pub total_len: u16,
    /// Identification (bytes 4..6), kept as read.
    pub id: u16,
    /// Flags (3 bits: reserved, DF, MF) and fragment offset (13 bits).
    pub flags_frag: u16,
    /// Time to live (byte 8); the ICRC covers it as all ones.
    pub ttl: u8,
    /// Protocol (byte 9): [`IP_PROTO_UDP`] for RoCEv2.
    pub protocol: u8,
    /// Header checksum as carried; see [`Ipv4Header::compute_checksum`].
    pub checksum: u16,
    /// Source address (bytes 12..16).
    pub src: Ipv4Addr,
    /// Destination address (bytes 16..20).
    pub dst: Ipv4Addr,
    /// Options (bytes 20 up to the IHL); their length sets the IHL on encode.
    pub options: Ipv4Options,
}

impl Ipv4Header {
    /// The header's name in errors.
    pub const NAME: &'static str = "IPv4";

    /// Header length in bytes (IHL x 4).
    pub fn header_len(&self) -> usize {
        IPV4_MIN_HEADER_LEN + self.options.len()
    }

    /// Whether this is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.flags_frag & (IPV4_MF | FRAG_OFFSET_MASK) != 0
    }

    /// Decodes the header at the start of `bytes` and returns the bytes after
    /// the header (not cut to `total_len`: that is the caller's rule to apply).
    pub fn split(bytes: &[u8]) -> Result<(Ipv4Header, &[u8]), RoceError> {
        let Some(fixed) = bytes.first_chunk::<IPV4_MIN_HEADER_LEN>() else {
            return Err(RoceError::Truncated { header: Self::NAME, need: IPV4_MIN_HEADER_LEN, have: bytes.len() });
        };
        let [version_ihl, tos, ..] = *fixed;
        let version = version_ihl >> 4;
        if version != 4 {
            return Err(RoceError::BadField {
                header: Self::NAME,
                field: "version",
                value: version.into(),
                rule: "must be 4",
            });
        }
        let ihl = usize::from(version_ihl & 0xF) * 4;
        if ihl < IPV4_MIN_HEADER_LEN {
            return Err(RoceError::BadField {
                header: Self::NAME,
                field: "ihl",
                value: (ihl / 4) as u64,
                rule: "must be at least 5 (20 bytes)",
            });
        }
        let Some((header, rest)) = bytes.split_at_checked(ihl) else {
            return Err(RoceError::Truncated { header: Self::NAME, need: ihl, have: bytes.len() });
        };
        let options = Ipv4Options::new(header.get(IPV4_MIN_HEADER_LEN..).unwrap_or_default())?;
        let ip = Ipv4Header {
            tos,
            total_len: u16::from_be_bytes(array_at(fixed, 2)),
            id: u16::from_be_bytes(array_at(fixed, 4)),
            flags_frag: u16::from_be_bytes(array_at(fixed, 6)),
            ttl: fixed[8],
            protocol: fixed[9],
            checksum: u16::from_be_bytes(array_at(fixed, 10)),
            src: Ipv4Addr::from(array_at::<4>(fixed, 12)),
            dst: Ipv4Addr::from(array_at::<4>(fixed, 16)),
            options,
        };
        Ok((ip, rest))
    }

    /// Decodes the header at the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Ipv4Header, RoceError> {
        Self::split(bytes).map(|(header, _)| header)
    }

    /// The encoded header in a fixed buffer; the first
    /// [`header_len`](Self::header_len) bytes are meaningful. Lets the
    /// checksum and ICRC work without allocating.
    pub fn to_bytes(&self) -> [u8; IPV4_MAX_HEADER_LEN] {
        let mut b = [0u8; IPV4_MAX_HEADER_LEN];
        b[0] = 0x40 | (self.header_len() / 4) as u8;
        b[1] = self.tos;
        put_at(&mut b, 2, &self.total_len.to_be_bytes());
        put_at(&mut b, 4, &self.id.to_be_bytes());
        put_at(&mut b, 6, &self.flags_frag.to_be_bytes());
        b[8] = self.ttl;
        b[9] = self.protocol;
        put_at(&mut b, 10, &self.checksum.to_be_bytes());
        put_at(&mut b, 12, &self.src.octets());
        put_at(&mut b, 16, &self.dst.octets());
        put_at(&mut b, IPV4_MIN_HEADER_LEN, self.options.as_slice());
        b
    }

    /// Appends the encoded header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let bytes = self.to_bytes();
        out.extend_from_slice(bytes.get(..self.header_len()).unwrap_or_default());
    }

    /// The header checksum these fields call for (the stored one is ignored).
    pub fn compute_checksum(&self) -> u16 {
        let bytes = self.to_bytes();
        ipv4_checksum(bytes.get(..self.header_len()).unwrap_or_default())
    }

    /// Whether the stored checksum is the right one.
    pub fn checksum_ok(&self) -> bool {
        self.checksum == self.compute_checksum()
    }
}

/// The RFC 791 header checksum of an encoded IPv4 header, treating its
/// checksum field (bytes 10..12) as zero.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for (i, word) in header.chunks(2).enumerate() {
        if i == 5 {
            continue;
        }
        let hi = word.first().copied().unwrap_or(0);
        let lo = word.get(1).copied().unwrap_or(0);
        sum += u32::from(u16::from_be_bytes([hi, lo]));
    }
    // At most 30 words of 0xFFFF: two folds always suffice.
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_captured_header() {
        // Frame 25 of rxe-send-write.pcap; checksum 0xd81c on the wire.
        let hdr = [
            0x45, 0x00, 0x00, 0x50, 0x4e, 0x6a, 0x40, 0x00, 0x40, 0x11, 0xd8, 0x1c, 0x0a, 0x0a, 0x00, 0x02, 0x0a, 0x0a,
            0x00, 0x01,
        ];
        assert_eq!(ipv4_checksum(&hdr), 0xd81c);
        let ip = Ipv4Header::decode(&hdr).expect("valid header");
        assert!(ip.checksum_ok());
        let mut out = Vec::new();
        ip.encode(&mut out);
        assert_eq!(out, hdr);
    }

    #[test]
    fn options_round_trip_and_reject_bad_lengths() {
        let opts = Ipv4Options::new(&[1, 1, 1, 0]).expect("4 bytes");
        assert_eq!(opts.as_slice(), &[1, 1, 1, 0]);
        assert!(matches!(Ipv4Options::new(&[1, 2, 3]), Err(RoceError::BadField { field: "options", value: 3, .. })));
        assert!(matches!(Ipv4Options::new(&[0; 44]), Err(RoceError::BadField { field: "options", value: 44, .. })));
    }
}
