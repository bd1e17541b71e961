//! The one error type of the RoCEv2 codec. Every variant names the header and,
//! where there is one, the field and the rule that was broken, so a rejected
//! capture frame can be diagnosed from the message alone.

use thiserror::Error;

use super::headers::Opcode;

/// Why a frame or header could not be decoded or built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RoceError {
    /// Fewer bytes than the header needs. Returned by every header's `decode`
    /// and `split`, and by frame decoding when no 4 bytes are left for the
    /// ICRC after the BTH.
    #[error("{header}: truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Name of the short header ("BTH", "IPv4", "ImmDt", "ICRC", ...).
        header: &'static str,
        /// Bytes the header needs (for IPv4, the length its IHL gives).
        need: usize,
        /// Bytes that were there.
        have: usize,
    },

    /// A well-formed frame that is simply not RoCEv2 (ARP, TCP, other UDP).
    #[error("not RoCEv2: {0}")]
    NotRoce(NotRoce),

    /// Valid on the wire but outside what this codec handles (IPv6, fragments).
    /// Also returned for a second VLAN tag (QinQ).
    #[error("{header}.{field} = {value:#x}: unsupported: {rule}")]
    Unsupported {
        /// Header that holds the field ("Ethernet", "IP", "IPv4").
        header: &'static str,
        /// The field whose value is not handled ("ethertype", "version", "flags_frag").
        field: &'static str,
        /// The value as read, widened to 64 bits.
        value: u64,
        /// What is not supported, e.g. "fragmented packets".
        rule: &'static str,
    },

    /// A field holds a value the format forbids: an IPv4 version other than 4,
    /// an IHL below 5, or options whose length is not a multiple of 4 up to 40.
    #[error("{header}.{field} = {value:#x}: {rule}")]
    BadField {
        /// Header that holds the field ("IPv4").
        header: &'static str,
        /// The offending field ("version", "ihl", "options").
        field: &'static str,
        /// The value as read (for "options", their length in bytes).
        value: u64,
        /// The rule the value breaks.
        rule: &'static str,
    },

    /// A length field disagrees with the bytes actually present: an IPv4 total
    /// length smaller than the header or beyond the input, or a UDP length
    /// other than the IPv4 total length minus the IPv4 header.
    #[error("{header}.{field} = {value}: {rule} (have {have} bytes)")]
    BadLength {
        /// Header that holds the length ("IPv4", "UDP").
        header: &'static str,
        /// The length field ("total_length", "length").
        field: &'static str,
        /// The length as read, in bytes.
        value: usize,
        /// Bytes it was checked against: the whole input for IPv4, the
        /// datagram the IPv4 header delimits for UDP.
        have: usize,
        /// The rule the length breaks.
        rule: &'static str,
    },

    /// A BTH opcode whose extended headers this codec does not know (see
    /// [`Opcode::is_known`]); decoding and [`ExtHeaders::check`](super::ExtHeaders::check)
    /// both refuse it.
    #[error("BTH.opcode = {0:?}: unknown opcode")]
    UnknownOpcode(Opcode),

    /// The BTH pad count does not fit the bytes between headers and ICRC.
    #[error("BTH.pad = {pad}: {rule} ({len} bytes between the headers and the ICRC)")]
    BadPad {
        /// The BTH pad count as read (0..=3).
        pad: u8,
        /// Bytes between the extended headers and the ICRC: payload plus pad.
        len: usize,
        /// Which rule failed: more pad than bytes, or a total that is not a
        /// multiple of 4.
        rule: &'static str,
    },

    /// Extended headers handed to an encoder disagree with the opcode.
    /// Returned by [`ExtHeaders::check`](super::ExtHeaders::check) and so by
    /// [`RoceFrame::seal`](super::RoceFrame::seal) and the
    /// [`FrameBuilder`](super::FrameBuilder) methods.
    #[error("{opcode}: {header} must be {}", if *.required { "present" } else { "absent" })]
    ExtMismatch {
        /// The opcode the headers were checked against.
        opcode: Opcode,
        /// The first header, in wire order, whose presence is wrong ("RETH", "ImmDt", ...).
        header: &'static str,
        /// `true` if the opcode needs the header and it is missing, `false` if
        /// it is present but the opcode carries none.
        required: bool,
    },

    /// The ICRC on the wire is not the one the bytes give. Only
    /// [`RoceFrame::check_icrc`](super::RoceFrame::check_icrc) returns it;
    /// decoding does not check the ICRC.
    #[error("ICRC: {on_wire:#010x} on the wire, {computed:#010x} computed")]
    IcrcMismatch {
        /// The ICRC read from the frame (little-endian).
        on_wire: u32,
        /// The ICRC computed over the frame's fields.
        computed: u32,
    },

    /// A frame too long for the IPv4 total length field; returned by
    /// [`RoceFrame::seal`](super::RoceFrame::seal).
    #[error("IPv4.total_length: {len} bytes do not fit 16 bits")]
    TooLarge {
        /// The IPv4 packet length (IPv4 header through ICRC) that was needed.
        len: usize,
    },
}

impl RoceError {
    /// Whether the input was simply another protocol (not a malformed RoCEv2 frame).
    pub fn is_not_roce(&self) -> bool {
        matches!(self, RoceError::NotRoce(_))
    }
}

/// The layer at which a frame turned out not to be RoCEv2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NotRoce {
    /// The EtherType (after any VLAN tag) is neither IPv4 nor IPv6, e.g. ARP
    /// (IPv6 is [`RoceError::Unsupported`] instead).
    #[error("Ethernet.ethertype = {0:#06x}")]
    EtherType(u16),
    /// The IPv4 protocol is not UDP (17).
    #[error("IPv4.protocol = {0}")]
    IpProtocol(u8),
    /// The UDP destination port is not 4791.
    #[error("UDP.dst_port = {0}, not 4791")]
    UdpPort(u16),
}
