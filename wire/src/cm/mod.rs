//! InfiniBand Communication Manager MADs (IBA vol. 1 §12.6) as RoCEv2
//! carries them: a UD SEND to QP 1 with a DETH, then one 256-byte MAD.
//!
//! RDMA CM (librdmacm, the kernel's `rdma_cm`) connects RC QPs with these:
//! REQ, REP, RTU to connect, REJ to refuse, MRA to ask for more time, DREQ
//! and DREP to disconnect. With an IP-based service id (prefix
//! `0x0000_0000_01`, IBA Annex A11) the REQ's private data starts with the
//! 36-byte CMA header (addresses and the source port) and the consumer's
//! private data follows; the other messages carry the consumer's bytes as is.
//!
//! Decoding drops reserved bits; encoding writes them as zero, so
//! `decode(encode(m)) == m` for every message `decode` returns.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

mod ip;
mod mad;
mod messages;
#[cfg(test)]
mod tests;

pub use ip::{IpCmHeader, IpServiceId};
pub use mad::CmMad;
pub use messages::*;

/// A MAD's length on the wire.
pub const MAD_LEN: usize = 256;
/// The common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// The CM message after the MAD header.
pub const CM_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// Management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The GSI's well-known Q_Key (QP 1).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// REQ private data: 92 bytes at CM data offset 140 (IBA table 99 onwards
/// gives each message's size). On an IP-addressed REQ the first
/// [`IP_CM_HEADER_LEN`] of them are the CMA header.
pub const REQ_PRIVATE_LEN: usize = 92;
/// REP private data: 196 bytes at CM data offset 36.
pub const REP_PRIVATE_LEN: usize = 196;
/// REJ private data: 148 bytes at CM data offset 84, after the 72 bytes of
/// Additional Reject Information.
pub const REJ_PRIVATE_LEN: usize = 148;
/// RTU private data: 224 bytes at CM data offset 8, right after the two
/// communication ids.
pub const RTU_PRIVATE_LEN: usize = 224;
/// MRA private data: 222 bytes at CM data offset 10.
pub const MRA_PRIVATE_LEN: usize = 222;
/// DREQ private data: 220 bytes at CM data offset 12, after the Remote QPN.
pub const DREQ_PRIVATE_LEN: usize = 220;
/// DREP private data: 224 bytes at CM data offset 8, the same layout as RTU.
pub const DREP_PRIVATE_LEN: usize = 224;
/// The CMA header at the start of an IP-addressed REQ's private data.
pub const IP_CM_HEADER_LEN: usize = 36;
/// Port space of RDMA_PS_TCP, the one NVMe/RDMA and most RC users connect in.
pub const RDMA_PS_TCP: u8 = 0x06;

/// Why a MAD could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CmError {
    /// The input is shorter than the structure: fewer than [`MAD_LEN`] bytes
    /// given to [`CmMad::decode`], or fewer than [`IP_CM_HEADER_LEN`] given to
    /// [`IpCmHeader::split`].
    #[error("CM MAD: truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the structure needs.
        need: usize,
        /// Bytes the caller passed.
        have: usize,
    },
    /// A field holds a value the codec refuses: a wrong base version or
    /// management class on decode, an unknown IP version in the CMA header,
    /// or a value too wide for its bit field on encode.
    #[error("MAD.{field} = {value:#x}: {rule}")]
    BadField {
        /// The field, qualified by message where it helps (`"base_version"`,
        /// `"REQ.starting_psn"`, `"path.sl"`, `"ip_cm.ip_version"`).
        field: &'static str,
        /// The offending value, widened to 64 bits.
        value: u64,
        /// The rule it broke, e.g. `"must fit 24 bits"`.
        rule: &'static str,
    },
    /// The MAD header's Attribute ID is none of the seven CM messages this
    /// codec handles (for example SIDR_REQ, LAP or ClassPortInfo).
    #[error("MAD.attribute_id = {0:#06x}: not a CM message this codec knows (REQ, MRA, REJ, REP, RTU, DREQ, DREP)")]
    UnknownAttribute(u16),
    /// On encode, a message's private data is longer than its fixed slot
    /// (the `*_PRIVATE_LEN` constants).
    #[error("CM {message}.private_data: {len} bytes, at most {max}")]
    PrivateDataTooLong {
        /// The message name, as [`CmMessage::name`] spells it.
        message: &'static str,
        /// Bytes the caller supplied.
        len: usize,
        /// The slot's size in bytes.
        max: usize,
    },
}

/// The common MAD header (IBA 13.4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadHeader {
    /// BaseVersion, byte 0: the MAD format version. [`CmMad::decode`] accepts
    /// only 1 and returns [`CmError::BadField`] (`"base_version"`) otherwise.
    pub base_version: u8,
    /// MgmtClass, byte 1. [`CmMad::decode`] accepts only [`MGMT_CLASS_CM`]
    /// and returns [`CmError::BadField`] (`"mgmt_class"`) otherwise.
    pub mgmt_class: u8,
    /// ClassVersion, byte 2: [`MadHeader::cm`] writes 2; not checked on
    /// decode.
    pub class_version: u8,
    /// Method, byte 3, with its response bit (bit 7); every CM message uses
    /// [`MadHeader::METHOD_SEND`].
    pub method: u8,
    /// Status, bytes 4..6 in network order; carried as is, not checked.
    pub status: u16,
    /// ClassSpecific, bytes 6..8 in network order; [`MadHeader::cm`] writes 0.
    pub class_specific: u16,
    /// TransactionID, bytes 8..16 in network order: set by the sender of a
    /// request and echoed by the messages that answer it.
    pub transaction_id: u64,
    /// AttributeID, bytes 16..18 in network order: which CM message follows
    /// (the [`CmMessage`] constants). [`CmMad::encode`] ignores this field
    /// and writes the message's own id.
    pub attribute_id: u16,
    /// AttributeModifier, bytes 20..24 in network order (bytes 18..20 are
    /// reserved); 0 for the CM messages here.
    pub attribute_modifier: u32,
}

impl MadHeader {
    /// `Send()`: the method of every CM message.
    pub const METHOD_SEND: u8 = 0x03;

    /// The header librdmacm puts on a CM message.
    pub fn cm(attribute_id: u16, transaction_id: u64) -> MadHeader {
        MadHeader {
            base_version: 1,
            mgmt_class: MGMT_CLASS_CM,
            class_version: 2,
            method: Self::METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    fn decode(b: &[u8; MAD_HEADER_LEN]) -> MadHeader {
        MadHeader {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: u16::from_be_bytes([b[4], b[5]]),
            class_specific: u16::from_be_bytes([b[6], b[7]]),
            transaction_id: u64::from_be_bytes(b[8..16].try_into().unwrap_or_default()),
            attribute_id: u16::from_be_bytes([b[16], b[17]]),
            attribute_modifier: u32::from_be_bytes([b[20], b[21], b[22], b[23]]),
        }
    }

    fn encode(&self, b: &mut [u8; MAD_HEADER_LEN]) {
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = self.method;
        b[4..6].copy_from_slice(&self.status.to_be_bytes());
        b[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        b[8..16].copy_from_slice(&self.transaction_id.to_be_bytes());
        b[16..18].copy_from_slice(&self.attribute_id.to_be_bytes());
        b[18..20].fill(0);
        b[20..24].copy_from_slice(&self.attribute_modifier.to_be_bytes());
    }
}

/// One path of a REQ (primary or alternate), 44 bytes.
///
/// "Local" is the REQ's sender (the active side), "remote" the passive side.
/// Offsets below are from the start of the path. [`CmMad::encode`] checks
/// the narrow fields and returns [`CmError::BadField`] (`"path.flow_label"`,
/// `"path.packet_rate"`, `"path.sl"`, `"path.local_ack_timeout"`) when one
/// does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmPath {
    /// Local Port LID, bytes 0..2. RoCE has no LIDs; the kernel sends the
    /// permissive LID 0xFFFF.
    pub local_lid: u16,
    /// Remote Port LID, bytes 2..4; 0xFFFF on RoCE, as for `local_lid`.
    pub remote_lid: u16,
    /// Local Port GID, bytes 4..20. On RoCE: the GIDs, IPv4-mapped
    /// (`::ffff:a.b.c.d`) for RoCEv2 over IPv4.
    pub local_gid: [u8; 16],
    /// Remote Port GID, bytes 20..36, in the same form as `local_gid`.
    pub remote_gid: [u8; 16],
    /// Flow Label, 20 bits: the top 20 bits of the network-order word at
    /// bytes 36..40.
    pub flow_label: u32,
    /// Packet Rate, 6 bits: the low 6 bits of the word at bytes 36..40 (an
    /// IBA static rate code).
    pub packet_rate: u8,
    /// Traffic Class, byte 40: the GRH traffic class (the IP TOS byte on
    /// RoCEv2).
    pub traffic_class: u8,
    /// Hop Limit, byte 41: the GRH hop limit (the IP TTL on RoCEv2).
    pub hop_limit: u8,
    /// SL (service level), 4 bits: the top nibble of byte 42.
    pub sl: u8,
    /// Subnet Local, bit 3 of byte 42: the remote port is on the local
    /// subnet.
    pub subnet_local: bool,
    /// Local ACK Timeout, 5 bits: the top of byte 43. The QP's transport
    /// timeout on this path, 4.096 µs × 2^value.
    pub local_ack_timeout: u8,
}

impl CmPath {
    const LEN: usize = 44;

    fn decode(b: &[u8]) -> CmPath {
        let w = be32(b, 36);
        CmPath {
            local_lid: be16(b, 0),
            remote_lid: be16(b, 2),
            local_gid: arr16(b, 4),
            remote_gid: arr16(b, 20),
            flow_label: w >> 12,
            packet_rate: (w & 0x3F) as u8,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: b[42] >> 4,
            subnet_local: b[42] & 0x08 != 0,
            local_ack_timeout: b[43] >> 3,
        }
    }

    fn encode(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&self.local_lid.to_be_bytes());
        b[2..4].copy_from_slice(&self.remote_lid.to_be_bytes());
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        let w = ((self.flow_label & 0xF_FFFF) << 12) | u32::from(self.packet_rate & 0x3F);
        b[36..40].copy_from_slice(&w.to_be_bytes());
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = ((self.sl & 0xF) << 4) | if self.subnet_local { 0x08 } else { 0 };
        b[43] = (self.local_ack_timeout & 0x1F) << 3;
    }

    fn validate(&self) -> Result<(), CmError> {
        check_bits("path.flow_label", self.flow_label.into(), 20)?;
        check_bits("path.packet_rate", self.packet_rate.into(), 6)?;
        check_bits("path.sl", self.sl.into(), 4)?;
        check_bits("path.local_ack_timeout", self.local_ack_timeout.into(), 5)
    }
}

fn check_bits(field: &'static str, value: u64, bits: u32) -> Result<(), CmError> {
    if value >> bits == 0 {
        Ok(())
    } else {
        Err(CmError::BadField {
            field,
            value,
            rule: match bits {
                2 => "must fit 2 bits",
                3 => "must fit 3 bits",
                4 => "must fit 4 bits",
                5 => "must fit 5 bits",
                6 => "must fit 6 bits",
                7 => "must fit 7 bits",
                20 => "must fit 20 bits",
                _ => "must fit 24 bits",
            },
        })
    }
}

fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

fn be24(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([0, b[off], b[off + 1], b[off + 2]])
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn be64(b: &[u8], off: usize) -> u64 {
    (u64::from(be32(b, off)) << 32) | u64::from(be32(b, off + 4))
}

fn arr16(b: &[u8], off: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    a
}

fn put24(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}
