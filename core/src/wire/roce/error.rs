//! The one error type of the RoCEv2 codec. Every variant names the header and,
//! where there is one, the field and the rule that was broken, so a rejected
//! capture frame can be diagnosed from the message alone.

use thiserror::Error;

use super::headers::Opcode;

/// Why a frame or header could not be decoded or built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum RoceError {
    /// Fewer bytes than the header needs.
    #[error("{header}: truncated: need {need} bytes, have {have}")]
    Truncated { header: &'static str, need: usize, have: usize },

    /// A well-formed frame that is simply not RoCEv2 (ARP, TCP, other UDP).
    #[error("not RoCEv2: {0}")]
    NotRoce(NotRoce),

    /// Valid on the wire but outside what this codec handles (IPv6, fragments).
    #[error("{header}.{field} = {value:#x}: unsupported: {rule}")]
    Unsupported { header: &'static str, field: &'static str, value: u64, rule: &'static str },

    /// A field holds a value the format forbids.
    #[error("{header}.{field} = {value:#x}: {rule}")]
    BadField { header: &'static str, field: &'static str, value: u64, rule: &'static str },

    /// A length field disagrees with the bytes actually present.
    #[error("{header}.{field} = {value}: {rule} (have {have} bytes)")]
    BadLength { header: &'static str, field: &'static str, value: usize, have: usize, rule: &'static str },

    /// A BTH opcode whose extended headers this codec does not know.
    #[error("BTH.opcode = {0:?}: unknown opcode")]
    UnknownOpcode(Opcode),

    /// The BTH pad count does not fit the bytes between headers and ICRC.
    #[error("BTH.pad = {pad}: {rule} ({len} bytes between the headers and the ICRC)")]
    BadPad { pad: u8, len: usize, rule: &'static str },

    /// Extended headers handed to an encoder disagree with the opcode.
    #[error("{opcode}: {header} must be {}", if *.required { "present" } else { "absent" })]
    ExtMismatch { opcode: Opcode, header: &'static str, required: bool },

    /// The ICRC on the wire is not the one the bytes give.
    #[error("ICRC: {on_wire:#010x} on the wire, {computed:#010x} computed")]
    IcrcMismatch { on_wire: u32, computed: u32 },

    /// A frame too long for the IPv4 total length field.
    #[error("IPv4.total_length: {len} bytes do not fit 16 bits")]
    TooLarge { len: usize },
}

impl RoceError {
    /// Whether the input was simply another protocol (not a malformed RoCEv2 frame).
    pub fn is_not_roce(&self) -> bool {
        matches!(self, RoceError::NotRoce(_))
    }
}

/// The layer at which a frame turned out not to be RoCEv2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum NotRoce {
    #[error("Ethernet.ethertype = {0:#06x}")]
    EtherType(u16),
    #[error("IPv4.protocol = {0}")]
    IpProtocol(u8),
    #[error("UDP.dst_port = {0}, not 4791")]
    UdpPort(u16),
}
