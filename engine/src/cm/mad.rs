//! The engine's CM messages as the MADs RDMA CM puts on the wire, and the
//! QP1 packets that carry them on RoCEv2.
//!
//! [`to_mad`] writes what the kernel's `ib_cm` and `rdma_cm` read: an IP
//! service id in the TCP port space, the CMA header (addresses and source
//! port) in front of a REQ's private data, RoCE's permissive LIDs and
//! IPv4-mapped GIDs in the primary path, the CA GUID made from the MAC.
//! [`from_mad`] reads what they write, and sorts out what a passive side
//! must refuse ([`MadDrop::Reject`], answered with a REJ of the right
//! reason) from what it must only count ([`MadDrop::Malformed`]).
//!
//! What a MAD carries that the engine's values do not is fixed here: the
//! fields RoCE leaves unused (Q_Key, EECNs, LIDs), the REP's target ACK
//! delay, and the transaction id (the sender's communication id: `ib_cm`
//! keys CM messages by their communication ids, never by the TID, as CM
//! messages are all `Send()`s).

use std::net::{IpAddr, Ipv4Addr};

use rctb_core::transport::{ConnId, Gid, Mtu, Psn};
use rctb_core::wire::cm::{
    self as wire, CmError, CmMad, CmPath, CommIds, GSI_QKEY, IpCmHeader, IpServiceId, MAD_LEN, MadHeader, RDMA_PS_TCP,
};
use rctb_core::wire::roce::{Bth, Deth, Opcode};

use super::{CmMessage, Rejected};
use crate::packet::Packet;

/// IBA REJ reasons (table 112) the engine sends or tells apart.
pub mod reason {
    /// The REQ (or REP) waited for an answer past its retries.
    pub const TIMEOUT: u16 = 4;
    /// Nobody listens on the REQ's service id.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// The REQ asks for a transport other than RC.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// The REQ's path MTU is not an IBA MTU code.
    pub const INVALID_MTU: u16 = 26;
    /// The consumer refused (`rdma_reject`); its private data says why. The
    /// kernel's rdma_cm also sends it for a REQ it cannot parse.
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// The QP every CM MAD goes to and comes from (the GSI).
pub const GSI_QPN: u32 = 1;
/// What `ib_cm` sends as a REP's target ACK delay on rxe (it has none to report).
const TARGET_ACK_DELAY: u8 = 15;
/// RoCE has no LIDs: paths carry the permissive LID.
const PERMISSIVE_LID: u16 = 0xFFFF;
/// IBA "MessageRejected" / "MessageMRAed": the REQ, or no message.
const MSG_REQ: u8 = 0;
const MSG_REP: u8 = 1;
const MSG_NONE: u8 = 2;

/// Why a received MAD did not become a CM message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MadDrop {
    /// Not a CM MAD, or one that does not decode: counted and dropped.
    Malformed(CmError),
    /// A REQ the passive side must refuse: answer it with a REJ of
    /// `reason` to the sender's communication id `to`.
    Reject {
        /// The sender's communication id.
        to: ConnId,
        /// The IBA REJ reason code.
        reason: u16,
    },
}

/// The CA GUID of a port with this MAC (EUI-64, as rxe makes it).
pub fn ca_guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]])
}

fn gid(ip: Ipv4Addr) -> [u8; 16] {
    Gid::from_ipv4(ip).0
}

/// The MAD for `msg` from the endpoint at `src` (CA GUID `guid`) to `dst`.
pub fn to_mad(msg: &CmMessage, src: Ipv4Addr, dst: Ipv4Addr, guid: u64) -> Result<[u8; MAD_LEN], CmError> {
    let message = match msg {
        CmMessage::Req {
            src_conn,
            src_port,
            port,
            qpn,
            psn,
            mtu,
            private_data,
            responder_resources,
            initiator_depth,
            retry_count,
            rnr_retry_count,
            response_timeout,
            max_retries,
        } => {
            let cma = IpCmHeader {
                cma_version: 0,
                ip_version: 4,
                src_port: *src_port,
                src_addr: IpAddr::V4(src),
                dst_addr: IpAddr::V4(dst),
            };
            let mut private = cma.encode().to_vec();
            private.extend_from_slice(private_data);
            wire::CmMessage::Req(wire::Req {
                local_comm_id: src_conn.0,
                service_id: IpServiceId { protocol: RDMA_PS_TCP, port: *port }.service_id(),
                local_ca_guid: guid,
                local_qkey: 0,
                local_qpn: *qpn,
                responder_resources: *responder_resources,
                local_eecn: 0,
                initiator_depth: *initiator_depth,
                remote_eecn: 0,
                remote_cm_response_timeout: *response_timeout,
                transport_service_type: 0,
                end_to_end_flow_control: true,
                starting_psn: psn.get(),
                local_cm_response_timeout: *response_timeout,
                retry_count: (*retry_count).min(7),
                partition_key: 0xFFFF,
                path_mtu: mtu.code(),
                rdc_exists: false,
                rnr_retry_count: (*rnr_retry_count).min(7),
                max_cm_retries: (*max_retries).min(15),
                srq: false,
                extended_transport_type: 0,
                primary_path: CmPath {
                    local_lid: PERMISSIVE_LID,
                    remote_lid: PERMISSIVE_LID,
                    local_gid: gid(src),
                    remote_gid: gid(dst),
                    hop_limit: 64,
                    subnet_local: true,
                    local_ack_timeout: super::CM_QP_TIMEOUT,
                    ..CmPath::default()
                },
                alternate_path: CmPath::default(),
                private_data: private,
            })
        }
        CmMessage::Mra { dst_conn, src_conn, service_timeout } => wire::CmMessage::Mra(wire::Mra {
            local_comm_id: src_conn.0,
            remote_comm_id: dst_conn.0,
            message_mraed: MSG_REQ,
            service_timeout: *service_timeout,
            private_data: Vec::new(),
        }),
        CmMessage::Rep {
            dst_conn,
            src_conn,
            qpn,
            psn,
            mtu: _,
            private_data,
            responder_resources,
            initiator_depth,
            rnr_retry_count,
        } => wire::CmMessage::Rep(wire::Rep {
            local_comm_id: src_conn.0,
            remote_comm_id: dst_conn.0,
            local_qkey: 0,
            local_qpn: *qpn,
            local_eecn: 0,
            starting_psn: psn.get(),
            responder_resources: *responder_resources,
            initiator_depth: *initiator_depth,
            target_ack_delay: TARGET_ACK_DELAY,
            failover_accepted: 0,
            end_to_end_flow_control: true,
            rnr_retry_count: (*rnr_retry_count).min(7),
            srq: false,
            local_ca_guid: guid,
            private_data: private_data.clone(),
        }),
        CmMessage::Rtu { dst_conn, src_conn } => wire::CmMessage::Rtu(ids(*src_conn, *dst_conn)),
        CmMessage::Rej { dst_conn, src_conn, rejected, reason, private_data } => {
            // A timeout REJ may name no connection of the receiver's: its
            // additional information carries the sender's CA GUID, which
            // with the sender's id is how the kernel's CM finds the
            // connection it is about.
            let (reject_info_length, additional_reject_info) = if *reason == reason::TIMEOUT {
                let mut ari = [0; 72];
                ari[..8].copy_from_slice(&guid.to_be_bytes());
                (8, ari)
            } else {
                (0, [0; 72])
            };
            wire::CmMessage::Rej(wire::Rej {
                local_comm_id: src_conn.0,
                remote_comm_id: dst_conn.0,
                message_rejected: match rejected {
                    Rejected::Req => MSG_REQ,
                    Rejected::Rep => MSG_REP,
                    Rejected::Other => MSG_NONE,
                },
                reject_info_length,
                reason: *reason,
                additional_reject_info,
                private_data: private_data.clone(),
            })
        }
        CmMessage::Dreq { dst_conn, src_conn, remote_qpn } => wire::CmMessage::Dreq(wire::Dreq {
            local_comm_id: src_conn.0,
            remote_comm_id: dst_conn.0,
            remote_qpn: *remote_qpn,
            private_data: Vec::new(),
        }),
        CmMessage::Drep { dst_conn, src_conn } => wire::CmMessage::Drep(ids(*src_conn, *dst_conn)),
    };
    let header = MadHeader::cm(message.attribute_id(), u64::from(message.local_comm_id()));
    CmMad { header, message }.encode()
}

fn ids(local: ConnId, remote: ConnId) -> CommIds {
    CommIds { local_comm_id: local.0, remote_comm_id: remote.0, private_data: Vec::new() }
}

/// The CM message a received MAD carries.
pub fn from_mad(bytes: &[u8]) -> Result<CmMessage, MadDrop> {
    let mad = CmMad::decode(bytes).map_err(MadDrop::Malformed)?;
    // (sender's id, receiver's id)
    let src = |m: &CommIds| (ConnId(m.local_comm_id), ConnId(m.remote_comm_id));
    Ok(match mad.message {
        wire::CmMessage::Req(req) => return from_req(req),
        wire::CmMessage::Mra(m) => CmMessage::Mra {
            dst_conn: ConnId(m.remote_comm_id),
            src_conn: ConnId(m.local_comm_id),
            service_timeout: m.service_timeout,
        },
        wire::CmMessage::Rep(m) => CmMessage::Rep {
            dst_conn: ConnId(m.remote_comm_id),
            src_conn: ConnId(m.local_comm_id),
            qpn: m.local_qpn,
            psn: Psn::wrapping(m.starting_psn),
            // A REP carries no MTU: each side uses its path's; the largest
            // here leaves the active side's own in place.
            mtu: Mtu::Mtu4096,
            private_data: m.private_data,
            responder_resources: m.responder_resources,
            initiator_depth: m.initiator_depth,
            rnr_retry_count: m.rnr_retry_count,
        },
        wire::CmMessage::Rtu(m) => {
            let (src_conn, dst_conn) = src(&m);
            CmMessage::Rtu { dst_conn, src_conn }
        }
        wire::CmMessage::Rej(m) => CmMessage::Rej {
            dst_conn: ConnId(m.remote_comm_id),
            src_conn: ConnId(m.local_comm_id),
            rejected: match m.message_rejected {
                MSG_REQ => Rejected::Req,
                MSG_REP => Rejected::Rep,
                _ => Rejected::Other,
            },
            reason: m.reason,
            private_data: m.private_data,
        },
        wire::CmMessage::Dreq(m) => CmMessage::Dreq {
            dst_conn: ConnId(m.remote_comm_id),
            src_conn: ConnId(m.local_comm_id),
            remote_qpn: m.remote_qpn,
        },
        wire::CmMessage::Drep(m) => {
            let (src_conn, dst_conn) = src(&m);
            CmMessage::Drep { dst_conn, src_conn }
        }
    })
}

/// A REQ, checked as a passive RC side checks it.
fn from_req(req: wire::Req) -> Result<CmMessage, MadDrop> {
    let reject = |reason| Err(MadDrop::Reject { to: ConnId(req.local_comm_id), reason });
    let Some(service) = IpServiceId::from_service_id(req.service_id).filter(|s| s.protocol == RDMA_PS_TCP) else {
        return reject(reason::INVALID_SERVICE_ID);
    };
    if req.transport_service_type != 0 {
        return reject(reason::INVALID_TRANSPORT_TYPE);
    }
    let Ok(mtu) = Mtu::from_code(req.path_mtu) else { return reject(reason::INVALID_MTU) };
    let (src_port, consumer) = match IpCmHeader::split(&req.private_data) {
        Ok((h, consumer)) if h.cma_version == 0 && h.ip_version == 4 => (h.src_port, consumer.to_vec()),
        _ => return reject(reason::CONSUMER_DEFINED),
    };
    Ok(CmMessage::Req {
        src_conn: ConnId(req.local_comm_id),
        src_port,
        port: service.port,
        qpn: req.local_qpn,
        psn: Psn::wrapping(req.starting_psn),
        mtu,
        private_data: consumer,
        responder_resources: req.responder_resources,
        initiator_depth: req.initiator_depth,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        response_timeout: req.local_cm_response_timeout,
        max_retries: req.max_cm_retries,
    })
}

/// The QP1 packet that carries `mad` from `src` to `dst` (a UD SEND with
/// the GSI's Q_Key; `psn` is the sender's GSI sequence number).
pub fn gsi_packet(src: Ipv4Addr, dst: Ipv4Addr, psn: Psn, mad: &[u8], mut payload: Vec<u8>) -> Packet {
    payload.clear();
    payload.extend_from_slice(mad);
    Packet {
        src_ip: src,
        dst_ip: dst,
        udp_src_port: crate::packet::udp_src_port(GSI_QPN, GSI_QPN),
        bth: Bth::new(Opcode::UD_SEND_ONLY, GSI_QPN, psn),
        reth: None,
        aeth: None,
        atomic: None,
        atomic_ack: None,
        deth: Some(Deth { qkey: GSI_QKEY, resv8: 0, src_qp: GSI_QPN }),
        imm: None,
        payload,
        corrupt: false,
    }
}

/// Whether `pkt` is a MAD for the GSI (UD SEND to QP1 with its Q_Key).
pub fn is_gsi(pkt: &Packet) -> bool {
    pkt.bth.dest_qp == GSI_QPN && pkt.bth.opcode == Opcode::UD_SEND_ONLY && pkt.deth.is_some_and(|d| d.qkey == GSI_QKEY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::CM_QP_TIMEOUT;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    /// The CM message starts after the 24-byte MAD header; the offsets
    /// below are the IBA's (12.6), counted from there.
    const D: usize = 24;

    fn req() -> CmMessage {
        CmMessage::Req {
            src_conn: ConnId(0x0102_0304),
            src_port: 0xC000,
            port: 4420,
            qpn: 0x11,
            psn: Psn::wrapping(0x42),
            mtu: Mtu::Mtu1024,
            private_data: Vec::new(),
            responder_resources: 4,
            initiator_depth: 4,
            retry_count: 7,
            rnr_retry_count: 7,
            response_timeout: 12,
            max_retries: 5,
        }
    }

    fn rej(reason: u16) -> CmMessage {
        let rejected = if reason == reason::TIMEOUT { Rejected::Other } else { Rejected::Req };
        CmMessage::Rej { dst_conn: ConnId(7), src_conn: ConnId(9), rejected, reason, private_data: Vec::new() }
    }

    #[test]
    fn a_ca_guid_is_the_macs_eui64_with_the_universal_local_bit_flipped() {
        // EUI-48 to EUI-64: FF FE between the OUI and the rest, bit 1 of
        // the first octet inverted (rxe makes its node GUID this way). A
        // universal MAC gets the bit set, a local one cleared, and the
        // other bits of the first octet stay as they are.
        assert_eq!(ca_guid([0x00, 0x1B, 0x21, 0xAA, 0xBB, 0xCC]), 0x021B_21FF_FEAA_BBCC);
        assert_eq!(ca_guid([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]), 0x5054_00FF_FE12_3456);
    }

    #[test]
    fn a_req_carries_the_ca_guid_at_byte_16_and_a_rep_at_byte_28() {
        let guid = 0x0496_F1FF_FE99_8AE0;
        let bytes = to_mad(&req(), A, B, guid).unwrap();
        assert_eq!(bytes[D + 16..D + 24], guid.to_be_bytes());
        let rep = CmMessage::Rep {
            dst_conn: ConnId(1),
            src_conn: ConnId(2),
            qpn: 0x12,
            psn: Psn::wrapping(0),
            mtu: Mtu::Mtu1024,
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
        };
        let bytes = to_mad(&rep, A, B, guid).unwrap();
        assert_eq!(bytes[D + 28..D + 36], guid.to_be_bytes());
    }

    #[test]
    fn a_reqs_primary_path_is_a_roce_one_with_the_engines_ack_timeout() {
        let bytes = to_mad(&req(), A, B, 0).unwrap();
        let path = &bytes[D + 52..D + 96];
        // Permissive LIDs (RoCE has none), the IPv4-mapped GIDs, hop limit 64.
        assert_eq!(path[0..4], [0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(path[4..20], Gid::from_ipv4(A).0);
        assert_eq!(path[20..36], Gid::from_ipv4(B).0);
        assert_eq!(path[41], 64);
        // Byte 94: SL (bits 7..4) 0, SubnetLocal (bit 3) set. The kernel
        // sets SubnetLocal from hop limit <= 1, so its REQ in
        // nvme-rdma.pcap has it clear: pinned here so a change is a choice.
        assert_eq!(path[42], 0x08);
        // Byte 95, bits 7..3: the local ACK timeout, the code the engine's
        // own QPs use, so that a passive side that takes its QP's timeout
        // from the REQ (as the kernel's does) times out as the active one.
        assert_eq!(path[43] >> 3, CM_QP_TIMEOUT);
        assert_eq!(path[43] & 0x07, 0);
    }

    #[test]
    fn a_timeout_rej_names_no_message_and_any_other_rej_names_the_req() {
        // Byte 8, bits 7..6: Message REJected (0 REQ, 1 REP, 2 other).
        // Bytes 10..12: the reason.
        // A timeout answers no message: the active side's REQ got nothing
        // back, or the passive side's REP got no RTU.
        for (why, msg_rejected) in
            [(reason::TIMEOUT, 2), (reason::CONSUMER_DEFINED, 0), (reason::INVALID_SERVICE_ID, 0)]
        {
            let bytes = to_mad(&rej(why), A, B, 0).unwrap();
            assert_eq!(bytes[D + 8] >> 6, msg_rejected, "reason {why}");
            assert_eq!(bytes[D + 10..D + 12], why.to_be_bytes());
        }
    }

    #[test]
    fn a_rej_names_the_message_it_refuses_and_decodes_back_to_it() {
        // Byte 8, bits 7..6: Message REJected, 0 REQ, 1 REP, 2 other: an
        // active side that cannot take a REP refuses the REP (the kernel
        // looks the connection up by it).
        for (rejected, code) in [(Rejected::Req, 0), (Rejected::Rep, 1), (Rejected::Other, 2)] {
            let msg = CmMessage::Rej {
                dst_conn: ConnId(7),
                src_conn: ConnId(9),
                rejected,
                reason: reason::CONSUMER_DEFINED,
                private_data: Vec::new(),
            };
            let bytes = to_mad(&msg, A, B, 0).unwrap();
            assert_eq!(bytes[D + 8] >> 6, code, "{rejected:?}");
            // (The wire pads the private data: compare the field itself.)
            let Ok(CmMessage::Rej { rejected: back, .. }) = from_mad(&bytes) else { panic!("not a REJ") };
            assert_eq!(back, rejected);
        }
    }

    #[test]
    fn a_timeout_rej_carries_the_senders_ca_guid_and_no_other_rej_does() {
        // Byte 9, bits 7..1: the ARI's length; bytes 12..84: the ARI.
        let guid = 0x0496_F1FF_FE99_8AE0;
        let bytes = to_mad(&rej(reason::TIMEOUT), A, B, guid).unwrap();
        assert_eq!(bytes[D + 9] >> 1, 8);
        assert_eq!(bytes[D + 12..D + 20], guid.to_be_bytes());
        let bytes = to_mad(&rej(reason::CONSUMER_DEFINED), A, B, guid).unwrap();
        assert_eq!(bytes[D + 9] >> 1, 0);
        assert_eq!(bytes[D + 12..D + 20], [0; 8]);
    }

    #[test]
    fn only_a_ud_send_to_qp1_with_the_gsi_qkey_is_a_mad() {
        let mad = gsi_packet(A, B, Psn::wrapping(0), &[0; MAD_LEN], Vec::new());
        assert!(is_gsi(&mad));
        // Each of the three conditions alone makes a packet something else.
        let mut other_qp = mad.clone();
        other_qp.bth.dest_qp = 2;
        assert!(!is_gsi(&other_qp));
        let mut rc_send = mad.clone();
        rc_send.bth.opcode = Opcode::SEND_ONLY;
        assert!(!is_gsi(&rc_send));
        let mut other_qkey = mad.clone();
        other_qkey.deth = Some(Deth { qkey: 0x1234, resv8: 0, src_qp: GSI_QPN });
        assert!(!is_gsi(&other_qkey));
        let mut no_deth = mad;
        no_deth.deth = None;
        assert!(!is_gsi(&no_deth));
    }
}
