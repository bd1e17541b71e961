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

/// ConnectRequest (attribute 0x0010).
///
/// Sent by the active side to open a connection. Byte offsets below count
/// from the start of the CM data (MAD byte 24); multi-byte fields are in
/// network order. A field too wide for its bits makes [`CmMad::encode`]
/// return [`CmError::BadField`] named `"REQ.<field>"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Req {
    /// Local Communication ID, bytes 0..4: the sender's handle for this
    /// connection, echoed by the passive side as its Remote Communication ID.
    pub local_comm_id: u32,
    /// Service ID, bytes 8..16: what the REQ connects to; RDMA CM encodes an
    /// IP port space and port in it (see [`IpServiceId`]).
    pub service_id: u64,
    /// Local CA GUID, bytes 16..24: the sender's channel adapter (on RoCE
    /// usually the EUI-64 built from the port's MAC address).
    pub local_ca_guid: u64,
    /// Local Q_Key, bytes 28..32; only RD uses it.
    pub local_qkey: u32,
    /// Local QPN, 24 bits at bytes 32..35: the sender's QP number.
    pub local_qpn: u32,
    /// Responder Resources, byte 35: how many incoming RDMA Read and atomic
    /// requests the sender will have outstanding as a responder.
    pub responder_resources: u8,
    /// Local EECN, 24 bits at bytes 36..39: the sender's EE context (RD
    /// only; 0 for RC).
    pub local_eecn: u32,
    /// Initiator Depth, byte 39: how many RDMA Read and atomic requests the
    /// sender will have outstanding as an initiator.
    pub initiator_depth: u8,
    /// Remote EECN, 24 bits at bytes 40..43 (RD only; 0 for RC).
    pub remote_eecn: u32,
    /// Remote CM Response Timeout, 5 bits (top of byte 43): how long the
    /// sender waits for the passive side's answer, 4.096 µs × 2^value.
    pub remote_cm_response_timeout: u8,
    /// Transport Service Type, 2 bits (bits 2:1 of byte 43): 0 = RC, 1 = UC,
    /// 2 = RD, 3 = see `extended_transport_type`.
    pub transport_service_type: u8,
    /// End-to-End Flow Control, bit 0 of byte 43: the sender's receive queue
    /// generates end-to-end credits.
    pub end_to_end_flow_control: bool,
    /// Starting PSN, 24 bits at bytes 44..47: the first PSN the sender's QP
    /// transmits, i.e. the passive side's expected receive PSN.
    pub starting_psn: u32,
    /// Local CM Response Timeout, 5 bits (top of byte 47): how long the
    /// sender's CM may take to answer, 4.096 µs × 2^value.
    pub local_cm_response_timeout: u8,
    /// Retry Count, 3 bits (low bits of byte 47): how many times a QP resends
    /// after a transport timeout before it gives up.
    pub retry_count: u8,
    /// Partition Key, bytes 48..50 (0xFFFF, the default partition, on RoCE).
    pub partition_key: u16,
    /// Path Packet Payload MTU, 4 bits (top of byte 50), IBA MTU code
    /// (1 = 256 … 5 = 4096). Encode checks only that it fits 4 bits.
    pub path_mtu: u8,
    /// RDC Exists, bit 3 of byte 50 (RD only).
    pub rdc_exists: bool,
    /// RNR Retry Count, 3 bits (low bits of byte 50): how many times a QP
    /// retries after an RNR NAK; 7 means without limit.
    pub rnr_retry_count: u8,
    /// Max CM Retries, 4 bits (top of byte 51): how many times the sender's
    /// CM resends this REQ when no answer comes.
    pub max_cm_retries: u8,
    /// SRQ, bit 3 of byte 51: the sender's QP receives through a shared
    /// receive queue.
    pub srq: bool,
    /// Extended Transport Type, 3 bits (low bits of byte 51); meaningful only
    /// when `transport_service_type` is 3.
    pub extended_transport_type: u8,
    /// The primary path, bytes 52..96.
    pub primary_path: CmPath,
    /// The alternate path, bytes 96..140; all zero when there is none.
    pub alternate_path: CmPath,
    /// Private Data, bytes 140..232: always [`REQ_PRIVATE_LEN`] bytes on the
    /// wire (zero padded); decode returns all 92. Longer makes encode return
    /// [`CmError::PrivateDataTooLong`].
    pub private_data: Vec<u8>,
}

/// ConnectReply (attribute 0x0013).
///
/// The passive side's acceptance of a [`Req`]. Byte offsets count from the
/// start of the CM data; a field too wide for its bits makes
/// [`CmMad::encode`] return [`CmError::BadField`] named `"REP.<field>"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rep {
    /// Local Communication ID, bytes 0..4: the replier's handle for the
    /// connection.
    pub local_comm_id: u32,
    /// Remote Communication ID, bytes 4..8: the REQ's Local Communication ID.
    pub remote_comm_id: u32,
    /// Local Q_Key, bytes 8..12; only RD uses it.
    pub local_qkey: u32,
    /// Local QPN, 24 bits at bytes 12..15: the replier's QP number.
    pub local_qpn: u32,
    /// Local EECN, 24 bits at bytes 16..19 (RD only; 0 for RC).
    pub local_eecn: u32,
    /// Starting PSN, 24 bits at bytes 20..23: the first PSN the replier's QP
    /// transmits, i.e. the active side's expected receive PSN.
    pub starting_psn: u32,
    /// Responder Resources, byte 24: incoming RDMA Read and atomic requests
    /// the replier accepts outstanding.
    pub responder_resources: u8,
    /// Initiator Depth, byte 25: RDMA Read and atomic requests the replier
    /// will have outstanding as an initiator.
    pub initiator_depth: u8,
    /// Target ACK Delay, 5 bits (top of byte 26): the longest the replier
    /// takes to acknowledge, 4.096 µs × 2^value.
    pub target_ack_delay: u8,
    /// Failover Accepted, 2 bits (bits 2:1 of byte 26): the answer to the
    /// REQ's alternate path (0 = accepted, 1 = not supported, 2 = rejected).
    pub failover_accepted: u8,
    /// End-to-End Flow Control, bit 0 of byte 26.
    pub end_to_end_flow_control: bool,
    /// RNR Retry Count, 3 bits (top of byte 27): retries after an RNR NAK the
    /// active side's QP should use; 7 means without limit.
    pub rnr_retry_count: u8,
    /// SRQ, bit 4 of byte 27: the replier's QP receives through a shared
    /// receive queue.
    pub srq: bool,
    /// Local CA GUID, bytes 28..36: the replier's channel adapter.
    pub local_ca_guid: u64,
    /// Private Data, bytes 36..232: [`REP_PRIVATE_LEN`] bytes on the wire,
    /// zero padded on encode; longer is [`CmError::PrivateDataTooLong`].
    pub private_data: Vec<u8>,
}

/// ConnectReject (attribute 0x0012).
///
/// Refuses a REQ or a REP. Byte offsets count from the start of the CM data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rej {
    /// Local Communication ID, bytes 0..4: the rejecting side's id.
    pub local_comm_id: u32,
    /// Remote Communication ID, bytes 4..8: the rejected side's id.
    pub remote_comm_id: u32,
    /// Message REJected, 2 bits (top of byte 8): 0 REQ, 1 REP, 2 no message.
    /// Encode refuses wider values with [`CmError::BadField`]
    /// (`"REJ.message_rejected"`).
    pub message_rejected: u8,
    /// Reject Info Length, 7 bits (bits 7:1 of byte 9): how many bytes of
    /// `additional_reject_info` are meaningful. Encode refuses wider values
    /// (`"REJ.reject_info_length"`); the length is not checked against 72.
    pub reject_info_length: u8,
    /// Reason, bytes 10..12: IBA table 112; 28 = consumer reject (the private
    /// data says why).
    pub reason: u16,
    /// Additional Reject Information (ARI), bytes 12..84; its meaning depends
    /// on `reason`.
    pub additional_reject_info: [u8; 72],
    /// Private Data, bytes 84..232: [`REJ_PRIVATE_LEN`] bytes on the wire,
    /// zero padded on encode; longer is [`CmError::PrivateDataTooLong`].
    pub private_data: Vec<u8>,
}

/// MessageReceiptAcknowledgement (attribute 0x0011).
///
/// Tells the peer a message arrived and its answer will take longer than the
/// peer's timeout. Byte offsets count from the start of the CM data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mra {
    /// Local Communication ID, bytes 0..4: the sender's id.
    pub local_comm_id: u32,
    /// Remote Communication ID, bytes 4..8: the receiver's id, taken from
    /// the message being acknowledged.
    pub remote_comm_id: u32,
    /// Message MRAed, 2 bits (top of byte 8): 0 REQ, 1 REP, 2 LAP. Encode
    /// refuses wider values with [`CmError::BadField`] (`"MRA.message_mraed"`).
    pub message_mraed: u8,
    /// Service Timeout, 5 bits (top of byte 9): the extra time the sender
    /// needs, 4.096 µs × 2^value. Encode refuses wider values
    /// (`"MRA.service_timeout"`).
    pub service_timeout: u8,
    /// Private Data, bytes 10..232: [`MRA_PRIVATE_LEN`] bytes on the wire,
    /// zero padded on encode; longer is [`CmError::PrivateDataTooLong`].
    pub private_data: Vec<u8>,
}

/// ReadyToUse (0x0014) and DisconnectReply (0x0016) share a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommIds {
    /// Local Communication ID, CM data bytes 0..4: the sender's id.
    pub local_comm_id: u32,
    /// Remote Communication ID, CM data bytes 4..8: the receiver's id.
    pub remote_comm_id: u32,
    /// Private Data, CM data bytes 8..232: [`RTU_PRIVATE_LEN`] (=
    /// [`DREP_PRIVATE_LEN`]) bytes on the wire, zero padded on encode;
    /// longer is [`CmError::PrivateDataTooLong`].
    pub private_data: Vec<u8>,
}

/// DisconnectRequest (attribute 0x0015).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dreq {
    /// Local Communication ID, CM data bytes 0..4: the sender's id.
    pub local_comm_id: u32,
    /// Remote Communication ID, CM data bytes 4..8: the receiver's id.
    pub remote_comm_id: u32,
    /// Remote QPN/EECN, 24 bits at CM data bytes 8..11: the receiver's QP
    /// number. Wider values make encode return [`CmError::BadField`]
    /// (`"DREQ.remote_qpn"`).
    pub remote_qpn: u32,
    /// Private Data, CM data bytes 12..232: [`DREQ_PRIVATE_LEN`] bytes on the
    /// wire, zero padded on encode; longer is [`CmError::PrivateDataTooLong`].
    pub private_data: Vec<u8>,
}

/// A CM message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMessage {
    /// ConnectRequest, attribute [`CmMessage::REQ`].
    Req(Req),
    /// MessageReceiptAcknowledgement, attribute [`CmMessage::MRA`].
    Mra(Mra),
    /// ConnectReject, attribute [`CmMessage::REJ`].
    Rej(Rej),
    /// ConnectReply, attribute [`CmMessage::REP`].
    Rep(Rep),
    /// ReadyToUse, attribute [`CmMessage::RTU`]: the active side's last
    /// step of the connect handshake.
    Rtu(CommIds),
    /// DisconnectRequest, attribute [`CmMessage::DREQ`].
    Dreq(Dreq),
    /// DisconnectReply, attribute [`CmMessage::DREP`].
    Drep(CommIds),
}

impl CmMessage {
    /// Attribute ID of ConnectRequest (REQ).
    pub const REQ: u16 = 0x0010;
    /// Attribute ID of MessageReceiptAcknowledgement (MRA).
    pub const MRA: u16 = 0x0011;
    /// Attribute ID of ConnectReject (REJ).
    pub const REJ: u16 = 0x0012;
    /// Attribute ID of ConnectReply (REP).
    pub const REP: u16 = 0x0013;
    /// Attribute ID of ReadyToUse (RTU).
    pub const RTU: u16 = 0x0014;
    /// Attribute ID of DisconnectRequest (DREQ).
    pub const DREQ: u16 = 0x0015;
    /// Attribute ID of DisconnectReply (DREP).
    pub const DREP: u16 = 0x0016;

    /// The MAD attribute id.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => Self::REQ,
            CmMessage::Mra(_) => Self::MRA,
            CmMessage::Rej(_) => Self::REJ,
            CmMessage::Rep(_) => Self::REP,
            CmMessage::Rtu(_) => Self::RTU,
            CmMessage::Dreq(_) => Self::DREQ,
            CmMessage::Drep(_) => Self::DREP,
        }
    }

    /// "REQ", "REP", …
    pub fn name(&self) -> &'static str {
        match self {
            CmMessage::Req(_) => "REQ",
            CmMessage::Mra(_) => "MRA",
            CmMessage::Rej(_) => "REJ",
            CmMessage::Rep(_) => "REP",
            CmMessage::Rtu(_) => "RTU",
            CmMessage::Dreq(_) => "DREQ",
            CmMessage::Drep(_) => "DREP",
        }
    }

    /// The private data as carried (fixed length, zero padded).
    pub fn private_data(&self) -> &[u8] {
        match self {
            CmMessage::Req(m) => &m.private_data,
            CmMessage::Mra(m) => &m.private_data,
            CmMessage::Rej(m) => &m.private_data,
            CmMessage::Rep(m) => &m.private_data,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => &m.private_data,
            CmMessage::Dreq(m) => &m.private_data,
        }
    }

    /// The sender's communication id.
    pub fn local_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
        }
    }
}

/// A CM MAD: header and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMad {
    /// The 24-byte common MAD header (bytes 0..24).
    pub header: MadHeader,
    /// The CM message in the remaining 232 bytes, chosen by the header's
    /// Attribute ID.
    pub message: CmMessage,
}

impl CmMad {
    /// Decodes a 256-byte CM MAD (longer input: the rest is ignored, as a
    /// UD payload may be padded).
    pub fn decode(bytes: &[u8]) -> Result<CmMad, CmError> {
        let Some(mad) = bytes.get(..MAD_LEN) else {
            return Err(CmError::Truncated { need: MAD_LEN, have: bytes.len() });
        };
        let header = MadHeader::decode(mad[..MAD_HEADER_LEN].try_into().unwrap_or(&[0; MAD_HEADER_LEN]));
        if header.base_version != 1 {
            return Err(CmError::BadField {
                field: "base_version",
                value: header.base_version.into(),
                rule: "must be 1",
            });
        }
        if header.mgmt_class != MGMT_CLASS_CM {
            return Err(CmError::BadField {
                field: "mgmt_class",
                value: header.mgmt_class.into(),
                rule: "must be 0x07 (Communication Manager)",
            });
        }
        let d = &mad[MAD_HEADER_LEN..];
        let ids = |off: usize| CommIds {
            local_comm_id: be32(d, 0),
            remote_comm_id: be32(d, 4),
            private_data: d[off..].to_vec(),
        };
        let message = match header.attribute_id {
            CmMessage::REQ => CmMessage::Req(Req {
                local_comm_id: be32(d, 0),
                service_id: be64(d, 8),
                local_ca_guid: be64(d, 16),
                local_qkey: be32(d, 28),
                local_qpn: be24(d, 32),
                responder_resources: d[35],
                local_eecn: be24(d, 36),
                initiator_depth: d[39],
                remote_eecn: be24(d, 40),
                remote_cm_response_timeout: d[43] >> 3,
                transport_service_type: (d[43] >> 1) & 0x3,
                end_to_end_flow_control: d[43] & 1 != 0,
                starting_psn: be24(d, 44),
                local_cm_response_timeout: d[47] >> 3,
                retry_count: d[47] & 0x7,
                partition_key: be16(d, 48),
                path_mtu: d[50] >> 4,
                rdc_exists: d[50] & 0x08 != 0,
                rnr_retry_count: d[50] & 0x7,
                max_cm_retries: d[51] >> 4,
                srq: d[51] & 0x08 != 0,
                extended_transport_type: d[51] & 0x7,
                primary_path: CmPath::decode(&d[52..52 + CmPath::LEN]),
                alternate_path: CmPath::decode(&d[96..96 + CmPath::LEN]),
                private_data: d[140..].to_vec(),
            }),
            CmMessage::MRA => CmMessage::Mra(Mra {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                message_mraed: d[8] >> 6,
                service_timeout: d[9] >> 3,
                private_data: d[10..].to_vec(),
            }),
            CmMessage::REJ => CmMessage::Rej(Rej {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                message_rejected: d[8] >> 6,
                reject_info_length: d[9] >> 1,
                reason: be16(d, 10),
                additional_reject_info: d[12..84].try_into().unwrap_or([0; 72]),
                private_data: d[84..].to_vec(),
            }),
            CmMessage::REP => CmMessage::Rep(Rep {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                local_qkey: be32(d, 8),
                local_qpn: be24(d, 12),
                local_eecn: be24(d, 16),
                starting_psn: be24(d, 20),
                responder_resources: d[24],
                initiator_depth: d[25],
                target_ack_delay: d[26] >> 3,
                failover_accepted: (d[26] >> 1) & 0x3,
                end_to_end_flow_control: d[26] & 1 != 0,
                rnr_retry_count: d[27] >> 5,
                srq: d[27] & 0x10 != 0,
                local_ca_guid: be64(d, 28),
                private_data: d[36..].to_vec(),
            }),
            CmMessage::RTU => CmMessage::Rtu(ids(8)),
            CmMessage::DREQ => CmMessage::Dreq(Dreq {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                remote_qpn: be24(d, 8),
                private_data: d[12..].to_vec(),
            }),
            CmMessage::DREP => CmMessage::Drep(ids(8)),
            other => return Err(CmError::UnknownAttribute(other)),
        };
        Ok(CmMad { header, message })
    }

    /// Encodes the MAD (256 bytes; short private data is zero padded).
    /// The header's attribute id is taken from the message.
    pub fn encode(&self) -> Result<[u8; MAD_LEN], CmError> {
        let mut out = [0u8; MAD_LEN];
        let mut header = self.header;
        header.attribute_id = self.message.attribute_id();
        let (h, d) = out.split_at_mut(MAD_HEADER_LEN);
        header.encode(h.try_into().map_err(|_| CmError::Truncated { need: MAD_HEADER_LEN, have: 0 })?);
        let private = |d: &mut [u8], off: usize, data: &[u8], message: &'static str| {
            let room = CM_DATA_LEN - off;
            if data.len() > room {
                return Err(CmError::PrivateDataTooLong { message, len: data.len(), max: room });
            }
            d[off..off + data.len()].copy_from_slice(data);
            Ok(())
        };
        match &self.message {
            CmMessage::Req(m) => {
                check_bits("REQ.local_qpn", m.local_qpn.into(), 24)?;
                check_bits("REQ.local_eecn", m.local_eecn.into(), 24)?;
                check_bits("REQ.remote_eecn", m.remote_eecn.into(), 24)?;
                check_bits("REQ.starting_psn", m.starting_psn.into(), 24)?;
                check_bits("REQ.remote_cm_response_timeout", m.remote_cm_response_timeout.into(), 5)?;
                check_bits("REQ.local_cm_response_timeout", m.local_cm_response_timeout.into(), 5)?;
                check_bits("REQ.transport_service_type", m.transport_service_type.into(), 2)?;
                check_bits("REQ.retry_count", m.retry_count.into(), 3)?;
                check_bits("REQ.rnr_retry_count", m.rnr_retry_count.into(), 3)?;
                check_bits("REQ.path_mtu", m.path_mtu.into(), 4)?;
                check_bits("REQ.max_cm_retries", m.max_cm_retries.into(), 4)?;
                check_bits("REQ.extended_transport_type", m.extended_transport_type.into(), 3)?;
                m.primary_path.validate()?;
                m.alternate_path.validate()?;
                put32(d, 0, m.local_comm_id);
                put64(d, 8, m.service_id);
                put64(d, 16, m.local_ca_guid);
                put32(d, 28, m.local_qkey);
                put24(d, 32, m.local_qpn);
                d[35] = m.responder_resources;
                put24(d, 36, m.local_eecn);
                d[39] = m.initiator_depth;
                put24(d, 40, m.remote_eecn);
                d[43] = (m.remote_cm_response_timeout << 3)
                    | (m.transport_service_type << 1)
                    | u8::from(m.end_to_end_flow_control);
                put24(d, 44, m.starting_psn);
                d[47] = (m.local_cm_response_timeout << 3) | m.retry_count;
                d[48..50].copy_from_slice(&m.partition_key.to_be_bytes());
                d[50] = (m.path_mtu << 4) | (u8::from(m.rdc_exists) << 3) | m.rnr_retry_count;
                d[51] = (m.max_cm_retries << 4) | (u8::from(m.srq) << 3) | m.extended_transport_type;
                m.primary_path.encode(&mut d[52..52 + CmPath::LEN]);
                m.alternate_path.encode(&mut d[96..96 + CmPath::LEN]);
                private(d, 140, &m.private_data, "REQ")?;
            }
            CmMessage::Mra(m) => {
                check_bits("MRA.message_mraed", m.message_mraed.into(), 2)?;
                check_bits("MRA.service_timeout", m.service_timeout.into(), 5)?;
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                d[8] = m.message_mraed << 6;
                d[9] = m.service_timeout << 3;
                private(d, 10, &m.private_data, "MRA")?;
            }
            CmMessage::Rej(m) => {
                check_bits("REJ.message_rejected", m.message_rejected.into(), 2)?;
                check_bits("REJ.reject_info_length", m.reject_info_length.into(), 7)?;
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                d[8] = m.message_rejected << 6;
                d[9] = m.reject_info_length << 1;
                d[10..12].copy_from_slice(&m.reason.to_be_bytes());
                d[12..84].copy_from_slice(&m.additional_reject_info);
                private(d, 84, &m.private_data, "REJ")?;
            }
            CmMessage::Rep(m) => {
                check_bits("REP.local_qpn", m.local_qpn.into(), 24)?;
                check_bits("REP.local_eecn", m.local_eecn.into(), 24)?;
                check_bits("REP.starting_psn", m.starting_psn.into(), 24)?;
                check_bits("REP.target_ack_delay", m.target_ack_delay.into(), 5)?;
                check_bits("REP.failover_accepted", m.failover_accepted.into(), 2)?;
                check_bits("REP.rnr_retry_count", m.rnr_retry_count.into(), 3)?;
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                put32(d, 8, m.local_qkey);
                put24(d, 12, m.local_qpn);
                put24(d, 16, m.local_eecn);
                put24(d, 20, m.starting_psn);
                d[24] = m.responder_resources;
                d[25] = m.initiator_depth;
                d[26] = (m.target_ack_delay << 3) | (m.failover_accepted << 1) | u8::from(m.end_to_end_flow_control);
                d[27] = (m.rnr_retry_count << 5) | (u8::from(m.srq) << 4);
                put64(d, 28, m.local_ca_guid);
                private(d, 36, &m.private_data, "REP")?;
            }
            CmMessage::Rtu(m) | CmMessage::Drep(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                private(d, 8, &m.private_data, self.message.name())?;
            }
            CmMessage::Dreq(m) => {
                check_bits("DREQ.remote_qpn", m.remote_qpn.into(), 24)?;
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                put24(d, 8, m.remote_qpn);
                private(d, 12, &m.private_data, "DREQ")?;
            }
        }
        Ok(out)
    }
}

/// An RDMA IP CM service id (IBA Annex A11): prefix `0x0000_0000_01`, the
/// port space's protocol byte, then the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpServiceId {
    /// Bits 23:16 of the service id: the low byte of the RDMA CM port space
    /// (0x06 for RDMA_PS_TCP 0x0106, 0x11 for RDMA_PS_UDP 0x0111, 0x3F for
    /// RDMA_PS_IB 0x013F).
    pub protocol: u8,
    /// Bits 15:0 of the service id: the destination port the passive side
    /// listens on (4420 for NVMe/RDMA).
    pub port: u16,
}

impl IpServiceId {
    const PREFIX: u64 = 0x01;

    /// The IP form of `service_id`, or `None` when it is not one.
    pub fn from_service_id(service_id: u64) -> Option<IpServiceId> {
        (service_id >> 24 == Self::PREFIX)
            .then_some(IpServiceId { protocol: (service_id >> 16) as u8, port: service_id as u16 })
    }

    /// The 64-bit service id.
    pub fn service_id(&self) -> u64 {
        (Self::PREFIX << 24) | (u64::from(self.protocol) << 16) | u64::from(self.port)
    }
}

/// The CMA header that starts an IP-addressed REQ's private data
/// (`struct cma_hdr` in the kernel's `cma.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpCmHeader {
    /// Byte 0: major (high nibble) and minor version: 0x00.
    pub cma_version: u8,
    /// The high nibble of byte 1: 4 or 6. [`IpCmHeader::split`] returns
    /// [`CmError::BadField`] (`"ip_cm.ip_version"`) for anything else.
    pub ip_version: u8,
    /// Bytes 2..4, network order: the active side's source port.
    pub src_port: u16,
    /// Bytes 4..20: the active side's address; IPv4 sits in the last four
    /// bytes (the first twelve are ignored on split and zero on encode).
    pub src_addr: IpAddr,
    /// Bytes 20..36: the address the active side connected to, laid out as
    /// `src_addr`.
    pub dst_addr: IpAddr,
}

impl IpCmHeader {
    /// Splits an IP-addressed REQ's private data into the header and the
    /// consumer's bytes.
    pub fn split(private_data: &[u8]) -> Result<(IpCmHeader, &[u8]), CmError> {
        let Some(h) = private_data.get(..IP_CM_HEADER_LEN) else {
            return Err(CmError::Truncated { need: IP_CM_HEADER_LEN, have: private_data.len() });
        };
        let ip_version = h[1] >> 4;
        let addr = |off: usize| -> Result<IpAddr, CmError> {
            let b = arr16(h, off);
            match ip_version {
                4 => Ok(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
                6 => Ok(IpAddr::V6(Ipv6Addr::from(b))),
                v => Err(CmError::BadField { field: "ip_cm.ip_version", value: v.into(), rule: "must be 4 or 6" }),
            }
        };
        let header =
            IpCmHeader { cma_version: h[0], ip_version, src_port: be16(h, 2), src_addr: addr(4)?, dst_addr: addr(20)? };
        Ok((header, &private_data[IP_CM_HEADER_LEN..]))
    }

    /// The 36 header bytes.
    pub fn encode(&self) -> [u8; IP_CM_HEADER_LEN] {
        let mut b = [0u8; IP_CM_HEADER_LEN];
        b[0] = self.cma_version;
        b[1] = self.ip_version << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        for (off, addr) in [(4, self.src_addr), (20, self.dst_addr)] {
            match addr {
                IpAddr::V4(a) => b[off + 12..off + 16].copy_from_slice(&a.octets()),
                IpAddr::V6(a) => b[off..off + 16].copy_from_slice(&a.octets()),
            }
        }
        b
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 1 of `testdata/captures/nvme-rdma.pcap` (the kernel NVMe host's
    /// REQ to nvmet), MAD bytes only, with the fields tshark shows.
    fn capture_req() -> Vec<u8> {
        let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/nvme-rdma.pcap"))
            .expect("capture");
        let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).expect("pcap");
        let pkt = reader.next_packet().expect("frame 1").expect("frame 1 reads");
        let frame = crate::roce::RoceFrame::decode(&pkt.data).expect("frame 1 is RoCEv2");
        frame.payload.to_vec()
    }

    #[test]
    fn capture_req_matches_tshark() {
        let mad = CmMad::decode(&capture_req()).expect("REQ decodes");
        assert_eq!(mad.header.transaction_id, 0x0000_0004_e77a_fc92);
        let CmMessage::Req(req) = &mad.message else { panic!("not a REQ: {mad:?}") };
        assert_eq!(req.local_comm_id, 0x92fc_7ae7);
        assert_eq!(
            IpServiceId::from_service_id(req.service_id),
            Some(IpServiceId { protocol: RDMA_PS_TCP, port: 4420 })
        );
        assert_eq!(req.local_ca_guid, 0x0496_f1ff_fe99_8ae0);
        assert_eq!(req.local_qpn, 0x16);
        assert_eq!(req.responder_resources, 0x80);
        assert_eq!(req.initiator_depth, 0);
        assert_eq!(req.remote_cm_response_timeout, 0x14);
        assert!(req.end_to_end_flow_control);
        assert_eq!(req.starting_psn, 0xeade26);
        assert_eq!((req.retry_count, req.rnr_retry_count, req.max_cm_retries), (7, 7, 15));
        assert_eq!(req.partition_key, 0xffff);
        assert_eq!(req.path_mtu, 3);
        let p = &req.primary_path;
        assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
        assert_eq!(p.local_gid[12..], [10, 10, 0, 2]);
        assert_eq!(p.remote_gid[12..], [10, 10, 0, 1]);
        // tshark 4.0 shows this word (93 9c 20 00) as flow label 0x00939 and
        // packet rate 0x13; IBA table 100 puts the flow label in its top 20
        // bits and the packet rate in its low 6, as the kernel writes them.
        assert_eq!((p.flow_label, p.packet_rate, p.hop_limit, p.local_ack_timeout), (0x939c2, 0, 0x40, 0x13));
        let (ip, consumer) = IpCmHeader::split(&req.private_data).expect("CMA header");
        assert_eq!(ip.ip_version, 4);
        assert_eq!(ip.src_port, 0xcfc2);
        assert_eq!(ip.src_addr, IpAddr::V4(Ipv4Addr::new(10, 10, 0, 2)));
        assert_eq!(ip.dst_addr, IpAddr::V4(Ipv4Addr::new(10, 10, 0, 1)));
        assert_eq!(consumer.len(), REQ_PRIVATE_LEN - IP_CM_HEADER_LEN);
        assert_eq!(consumer[..8], [0, 0, 0, 0, 0x20, 0, 0x1f, 0]);
        assert_eq!(IpCmHeader::split(&ip.encode()).map(|(h, _)| h), Ok(ip));
    }

    #[test]
    fn every_capture_mad_reencodes_byte_for_byte() {
        // The kernel leaves every reserved bit zero, so nothing is lost.
        let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/captures/nvme-rdma.pcap"))
            .expect("capture");
        let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).expect("pcap");
        let mut names = Vec::new();
        while let Some(pkt) = reader.next_packet() {
            let pkt = pkt.expect("packet");
            let Ok(frame) = crate::roce::RoceFrame::decode(&pkt.data) else { continue };
            if frame.bth.dest_qp != 1 {
                continue;
            }
            let mad = CmMad::decode(frame.payload).expect("every QP1 frame is a CM MAD");
            assert_eq!(mad.encode().expect("encodes")[..], frame.payload[..MAD_LEN], "{mad:?}");
            names.push(mad.message.name());
        }
        // Four connections (nvme discover's admin queue, then nvme connect's
        // admin and I/O queues, …) and one disconnect, as tshark lists them.
        let count = |name: &str| names.iter().filter(|n| **n == name).count();
        assert_eq!([count("REQ"), count("REP"), count("RTU"), count("DREQ"), count("DREP")], [4, 4, 4, 1, 1]);
    }

    #[test]
    fn every_message_round_trips() {
        let ids = CommIds { local_comm_id: 1, remote_comm_id: 2, private_data: vec![9; 8] };
        let messages = [
            CmMessage::Rtu(ids.clone()),
            CmMessage::Drep(ids),
            CmMessage::Dreq(Dreq { local_comm_id: 3, remote_comm_id: 4, remote_qpn: 0xabcdef, private_data: vec![] }),
            CmMessage::Mra(Mra {
                local_comm_id: 5,
                remote_comm_id: 6,
                message_mraed: 1,
                service_timeout: 31,
                private_data: vec![1, 2, 3],
            }),
            CmMessage::Rej(Rej {
                local_comm_id: 7,
                remote_comm_id: 8,
                message_rejected: 0,
                reject_info_length: 0,
                reason: 28,
                additional_reject_info: [0; 72],
                private_data: vec![0, 0, 6, 0],
            }),
            CmMessage::Rep(Rep {
                local_comm_id: 9,
                remote_comm_id: 10,
                local_qkey: 0,
                local_qpn: 0x18,
                local_eecn: 0,
                starting_psn: 0xffffff,
                responder_resources: 0,
                initiator_depth: 16,
                target_ack_delay: 15,
                failover_accepted: 0,
                end_to_end_flow_control: true,
                rnr_retry_count: 7,
                srq: false,
                local_ca_guid: 0x1122_3344_5566_7788,
                private_data: vec![0, 0, 32, 0],
            }),
        ];
        for message in messages {
            let mad = CmMad { header: MadHeader::cm(message.attribute_id(), 42), message };
            let bytes = mad.encode().expect("encodes");
            let back = CmMad::decode(&bytes).expect("decodes");
            assert_eq!(back.header, mad.header);
            // Private data comes back zero padded to its fixed length.
            let sent = mad.message.private_data();
            assert_eq!(&back.message.private_data()[..sent.len()], sent);
            assert!(back.message.private_data()[sent.len()..].iter().all(|&b| b == 0));
            assert_eq!(CmMad::decode(&back.encode().expect("re-encodes")), Ok(back));
        }
    }

    #[test]
    fn bad_input_names_the_field() {
        let mut bytes = capture_req();
        assert_eq!(CmMad::decode(&bytes[..255]), Err(CmError::Truncated { need: 256, have: 255 }));
        bytes[17] = 0x20;
        assert_eq!(CmMad::decode(&bytes), Err(CmError::UnknownAttribute(0x0020)));
        bytes[1] = 0x81;
        assert!(matches!(CmMad::decode(&bytes), Err(CmError::BadField { field: "mgmt_class", .. })));
        let rtu = CmMad {
            header: MadHeader::cm(CmMessage::RTU, 1),
            message: CmMessage::Rtu(CommIds { local_comm_id: 1, remote_comm_id: 2, private_data: vec![0; 225] }),
        };
        assert_eq!(rtu.encode(), Err(CmError::PrivateDataTooLong { message: "RTU", len: 225, max: 224 }));
        let dreq = CmMad {
            header: MadHeader::cm(CmMessage::DREQ, 1),
            message: CmMessage::Dreq(Dreq {
                local_comm_id: 1,
                remote_comm_id: 2,
                remote_qpn: 1 << 24,
                private_data: vec![],
            }),
        };
        assert!(matches!(dreq.encode(), Err(CmError::BadField { field: "DREQ.remote_qpn", .. })));
        assert!(IpCmHeader::split(&[0; 35]).is_err());
        let mut v5 = [0u8; 36];
        v5[1] = 0x50;
        assert!(matches!(IpCmHeader::split(&v5), Err(CmError::BadField { field: "ip_cm.ip_version", .. })));
    }

    #[test]
    fn ip_service_ids() {
        let id = IpServiceId { protocol: RDMA_PS_TCP, port: 4420 };
        assert_eq!(id.service_id(), 0x0000_0000_0106_1144);
        assert_eq!(IpServiceId::from_service_id(id.service_id()), Some(id));
        assert_eq!(IpServiceId::from_service_id(0x1000_0000_0106_1144), None);
    }
}
