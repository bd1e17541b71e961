//! Ethernet II header with at most one 802.1Q / 802.1ad tag, kept raw.

use std::fmt;

use super::codec::array_at;
use super::error::RoceError;

/// Length of an untagged Ethernet II header: destination MAC, source MAC and
/// EtherType.
pub const ETH_HEADER_LEN: usize = 14;
/// Length of one 802.1Q / 802.1ad tag: TPID (2) and TCI (2).
pub const VLAN_TAG_LEN: usize = 4;
/// EtherType of IPv4, the only network layer the frame decoder accepts.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP; a frame decoder given it reports [`NotRoce::EtherType`](super::NotRoce::EtherType).
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6; RoCEv2 over IPv6 decodes to
/// [`RoceError::Unsupported`].
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// 802.1Q customer tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// 802.1ad service tag (outer tag of QinQ).
pub const ETHERTYPE_QINQ: u16 = 0x88A8;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff, the broadcast address.
    pub const BROADCAST: MacAddr = MacAddr([0xFF; 6]);
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MacAddr({self})")
    }
}

/// One VLAN tag as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// 0x8100 or 0x88A8.
    pub tpid: u16,
    /// Priority (3 bits), drop eligible (1), VLAN id (12).
    pub tci: u16,
}

impl VlanTag {
    /// VLAN identifier: TCI bits 11:0.
    pub fn vid(&self) -> u16 {
        self.tci & 0x0FFF
    }

    /// Priority code point: TCI bits 15:13.
    pub fn pcp(&self) -> u8 {
        (self.tci >> 13) as u8
    }
}

/// Ethernet II header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthHeader {
    /// Destination MAC (bytes 0..6).
    pub dst: MacAddr,
    /// Source MAC (bytes 6..12).
    pub src: MacAddr,
    /// The tag after the source MAC, present when the outer EtherType is
    /// [`ETHERTYPE_VLAN`] or [`ETHERTYPE_QINQ`]; a second tag is
    /// [`RoceError::Unsupported`].
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload (after the tag, when there is one).
    pub ethertype: u16,
}

impl EthHeader {
    /// The header's name in errors.
    pub const NAME: &'static str = "Ethernet";

    /// Encoded length: 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        ETH_HEADER_LEN + if self.vlan.is_some() { VLAN_TAG_LEN } else { 0 }
    }

    /// Decodes the header at the start of `bytes` and returns the bytes after it.
    pub fn split(bytes: &[u8]) -> Result<(EthHeader, &[u8]), RoceError> {
        let Some((head, rest)) = bytes.split_first_chunk::<ETH_HEADER_LEN>() else {
            return Err(RoceError::Truncated { header: Self::NAME, need: ETH_HEADER_LEN, have: bytes.len() });
        };
        let dst = MacAddr(array_at(head, 0));
        let src = MacAddr(array_at(head, 6));
        let outer_type = u16::from_be_bytes(array_at(head, 12));
        if !matches!(outer_type, ETHERTYPE_VLAN | ETHERTYPE_QINQ) {
            return Ok((EthHeader { dst, src, vlan: None, ethertype: outer_type }, rest));
        }
        let Some((tag, rest)) = rest.split_first_chunk::<VLAN_TAG_LEN>() else {
            return Err(RoceError::Truncated {
                header: Self::NAME,
                need: ETH_HEADER_LEN + VLAN_TAG_LEN,
                have: bytes.len(),
            });
        };
        let [t0, t1, e0, e1] = *tag;
        let ethertype = u16::from_be_bytes([e0, e1]);
        if matches!(ethertype, ETHERTYPE_VLAN | ETHERTYPE_QINQ) {
            return Err(RoceError::Unsupported {
                header: Self::NAME,
                field: "ethertype",
                value: ethertype.into(),
                rule: "more than one VLAN tag",
            });
        }
        let vlan = VlanTag { tpid: outer_type, tci: u16::from_be_bytes([t0, t1]) };
        Ok((EthHeader { dst, src, vlan: Some(vlan), ethertype }, rest))
    }

    /// Decodes the header at the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<EthHeader, RoceError> {
        Self::split(bytes).map(|(header, _)| header)
    }

    /// Appends the encoded header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dst.0);
        out.extend_from_slice(&self.src.0);
        if let Some(tag) = self.vlan {
            out.extend_from_slice(&tag.tpid.to_be_bytes());
            out.extend_from_slice(&tag.tci.to_be_bytes());
        }
        out.extend_from_slice(&self.ethertype.to_be_bytes());
    }
}
