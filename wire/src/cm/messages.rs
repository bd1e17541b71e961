//! The CM messages: REQ, REP, REJ, MRA, RTU, DREQ and DREP, each a
//! struct of its fields, and `CmMessage`, the one of them a MAD carries.

use super::*;

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
