//! A whole CM MAD: the common header and a message, to and from its 256
//! bytes.

use super::*;

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
