//! `rctb decode`: what crossed the wire, frame by frame.
//!
//! Every frame of a pcap is reported: RoCEv2 frames with their BTH, RETH,
//! AETH, ImmDt and whether the ICRC is right; frames cut short by the
//! capture's snap length and frames that are not RoCEv2 (ARP, other UDP) as
//! such, never as a fatal error. The JSON form has one object per frame,
//! with absent headers omitted and numbers as JSON integers.
//!
//! CM MADs (UD SENDs to QP 1) are decoded too: message, communication ids,
//! service id and port, QPN and starting PSN, reject reason. The decoder
//! remembers which QPs connected to port 4420 (NVMe/RDMA): their CM private
//! data is decoded as NVMe/RDMA's, the SENDs to the target's QP as command
//! capsules and the SENDs to the host's QP as completions, with the parsers
//! of `rctb_core::nvmeof::protocol`.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use pcap_file::pcap::PcapReader;
use rctb_core::nvmeof::protocol::{
    CmAccept, CmReject, CmRequest, Command, Completion, OPC_FABRICS, OPC_READ, OPC_WRITE,
};
use rctb_core::wire::cm::{CmMad, CmMessage, IpCmHeader, IpServiceId};
use rctb_core::wire::roce::{Opcode, RoceError, RoceFrame};
use serde::Serialize;

/// One frame of a capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// 1-based, as Wireshark numbers frames.
    pub frame: u64,
    /// "rocev2", "truncated", "not_rocev2" or "malformed".
    pub kind: &'static str,
    /// IPv4 source address (RoCEv2 frames only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<Ipv4Addr>,
    /// IPv4 destination address (RoCEv2 frames only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<Ipv4Addr>,
    /// BTH opcode byte, e.g. 0x04 for RC SEND Only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode: Option<u8>,
    /// The opcode's name, e.g. "RC Send Only" (as Wireshark spells it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode_name: Option<&'static str>,
    /// BTH destination QP number (24 bits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest_qp: Option<u32>,
    /// BTH packet sequence number (24 bits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psn: Option<u32>,
    /// BTH AckReq bit: the sender asks for an acknowledge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_req: Option<bool>,
    /// BTH solicited-event bit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub se: Option<bool>,
    /// BTH pad count: bytes (0..=3) padding the payload to a multiple of 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pad: Option<u8>,
    /// RETH virtual address (RDMA WRITE First/Only, READ Request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth_va: Option<u64>,
    /// RETH remote key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth_rkey: Option<u32>,
    /// RETH DMA length in bytes: the whole message, not this packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth_len: Option<u32>,
    /// AETH syndrome byte as on the wire (ACK 0x00..=0x1F, RNR NAK 0x20..=0x3F, NAK 0x60..=0x7F).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_syndrome: Option<u8>,
    /// AETH message sequence number (24 bits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_msn: Option<u32>,
    /// "ACK", "RNR NAK timer N" or "NAK CODE".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_kind: Option<String>,
    /// ImmDt: the immediate value (opcodes "with Immediate").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
    /// Payload bytes of this packet, without pad and ICRC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_len: Option<usize>,
    /// Whether the ICRC at the end of the frame matches the one computed over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icrc_ok: Option<bool>,
    /// A CM MAD this frame carries.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub cm: Option<CmInfo>,
    /// NVMe/RDMA: CM private data, a command capsule or a completion.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub nvme: Option<NvmeInfo>,
    /// Why a frame is not (fully) decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The fields of a CM MAD `rctb decode` reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CmInfo {
    /// "REQ", "REP", "RTU", "REJ", "MRA", "DREQ" or "DREP".
    pub cm_message: &'static str,
    /// The sender's local communication id.
    pub cm_local_comm_id: u32,
    /// The peer's communication id, as the sender knows it (every message but REQ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_remote_comm_id: Option<u32>,
    /// The service id the REQ asks for (for RDMA CM, the port space and port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_service_id: Option<u64>,
    /// The destination port of an IP-based service id (REQ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_port: Option<u16>,
    /// The sender's QPN (REQ, REP) or the peer's (DREQ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_qpn: Option<u32>,
    /// The sender's starting PSN (REQ, REP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_psn: Option<u32>,
    /// The REJ's reason code (IBA CM REJ reasons, e.g. 28 for a consumer reject).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_reject_reason: Option<u16>,
}

impl CmInfo {
    fn new(mad: &CmMad) -> CmInfo {
        let mut info = CmInfo {
            cm_message: mad.message.name(),
            cm_local_comm_id: mad.message.local_comm_id(),
            ..CmInfo::default()
        };
        match &mad.message {
            CmMessage::Req(m) => {
                info.cm_service_id = Some(m.service_id);
                info.cm_port = IpServiceId::from_service_id(m.service_id).map(|id| id.port);
                info.cm_qpn = Some(m.local_qpn);
                info.cm_psn = Some(m.starting_psn);
            }
            CmMessage::Rep(m) => {
                info.cm_remote_comm_id = Some(m.remote_comm_id);
                info.cm_qpn = Some(m.local_qpn);
                info.cm_psn = Some(m.starting_psn);
            }
            CmMessage::Rej(m) => {
                info.cm_remote_comm_id = Some(m.remote_comm_id);
                info.cm_reject_reason = Some(m.reason);
            }
            CmMessage::Mra(m) => info.cm_remote_comm_id = Some(m.remote_comm_id),
            CmMessage::Rtu(m) | CmMessage::Drep(m) => info.cm_remote_comm_id = Some(m.remote_comm_id),
            CmMessage::Dreq(m) => {
                info.cm_remote_comm_id = Some(m.remote_comm_id);
                info.cm_qpn = Some(m.remote_qpn);
            }
        }
        info
    }

    fn line(&self) -> String {
        let mut s = format!(" CM {} lcid={:#010x}", self.cm_message, self.cm_local_comm_id);
        if let Some(r) = self.cm_remote_comm_id {
            s.push_str(&format!(" rcid={r:#010x}"));
        }
        if let Some(id) = self.cm_service_id {
            s.push_str(&format!(" sid={id:#018x}"));
        }
        if let Some(port) = self.cm_port {
            s.push_str(&format!(" port={port}"));
        }
        if let Some(qpn) = self.cm_qpn {
            s.push_str(&format!(" qpn={qpn:#08x}"));
        }
        if let Some(psn) = self.cm_psn {
            s.push_str(&format!(" psn={psn:#08x}"));
        }
        if let Some(reason) = self.cm_reject_reason {
            s.push_str(&format!(" reason={reason}"));
        }
        s
    }
}

impl Frame {
    fn bare(frame: u64, kind: &'static str, note: Option<String>) -> Frame {
        Frame {
            frame,
            kind,
            src: None,
            dst: None,
            opcode: None,
            opcode_name: None,
            dest_qp: None,
            psn: None,
            ack_req: None,
            se: None,
            pad: None,
            reth_va: None,
            reth_rkey: None,
            reth_len: None,
            aeth_syndrome: None,
            aeth_msn: None,
            aeth_kind: None,
            imm: None,
            payload_len: None,
            icrc_ok: None,
            cm: None,
            nvme: None,
            note,
        }
    }

    /// One human-readable line.
    pub fn line(&self) -> String {
        let Some(name) = self.opcode_name else {
            return format!(
                "{:5} {}{}",
                self.frame,
                self.kind,
                self.note.as_ref().map(|n| format!(": {n}")).unwrap_or_default()
            );
        };
        let mut s = format!(
            "{:5} {} -> {} {name} QP={:#08x} PSN={}",
            self.frame,
            self.src.map_or("?".into(), |a| a.to_string()),
            self.dst.map_or("?".into(), |a| a.to_string()),
            self.dest_qp.unwrap_or(0),
            self.psn.unwrap_or(0)
        );
        if self.ack_req == Some(true) {
            s.push_str(" A");
        }
        if self.se == Some(true) {
            s.push_str(" SE");
        }
        if let Some(p) = self.pad.filter(|&p| p > 0) {
            s.push_str(&format!(" pad={p}"));
        }
        if let (Some(va), Some(rkey), Some(len)) = (self.reth_va, self.reth_rkey, self.reth_len) {
            s.push_str(&format!(" RETH va={va:#x} rkey={rkey:#x} len={len}"));
        }
        if let (Some(kind), Some(msn)) = (&self.aeth_kind, self.aeth_msn) {
            s.push_str(&format!(" AETH {kind} msn={msn}"));
        }
        if let Some(imm) = self.imm {
            s.push_str(&format!(" imm={imm:#010x}"));
        }
        if let Some(len) = self.payload_len {
            s.push_str(&format!(" payload={len}"));
        }
        if let Some(cm) = &self.cm {
            s.push_str(&cm.line());
        }
        if let Some(nvme) = &self.nvme {
            s.push_str(&nvme.line());
        }
        s.push_str(if self.icrc_ok == Some(true) { " ICRC ok" } else { " ICRC BAD" });
        s
    }
}

/// NVMe/RDMA fields `rctb decode` reports: connect private data, command
/// capsule or completion (numbers as on the wire; NLB is 0's based).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NvmeInfo {
    /// The queue this frame belongs to (from the CM request's private data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_qid: Option<u16>,
    /// REQ private data: the host receive queue size (HRQSIZE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_pd_hrqsize: Option<u16>,
    /// REQ private data: the host send queue size (HSQSIZE), 0's based.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_pd_hsqsize: Option<u16>,
    /// REQ private data: the controller id (CNTLID; 0 for the admin queue).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_pd_cntlid: Option<u16>,
    /// REP private data: the controller receive queue size (CRQSIZE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_pd_crqsize: Option<u16>,
    /// REJ private data: the NVMe/RDMA reject status (STS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_pd_reject: Option<u16>,
    /// Command capsule: the opcode (0x7f a Fabrics command).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_opcode: Option<u8>,
    /// Command capsule: the command identifier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_cid: Option<u16>,
    /// Command capsule: the namespace id (not for Fabrics commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_nsid: Option<u32>,
    /// Command capsule: the Fabrics command type (Fabrics commands only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_fctype: Option<u8>,
    /// Command capsule: the starting LBA of a Read or Write on an I/O queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_slba: Option<u64>,
    /// Command capsule: the number of logical blocks of a Read or Write on an I/O queue, 0's based.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_nlb: Option<u16>,
    /// Command capsule: the SGL descriptor type (high nibble of byte 15; 0x4 keyed data block).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgl_type: Option<u8>,
    /// Command capsule: the SGL descriptor subtype (low nibble of byte 15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgl_subtype: Option<u8>,
    /// Command capsule: the SGL descriptor's address (bytes 0..8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgl_addr: Option<u64>,
    /// Command capsule: the SGL descriptor's length in bytes (24 bits in a keyed descriptor, else 32).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgl_len: Option<u32>,
    /// Command capsule: the remote key of a keyed SGL descriptor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sgl_key: Option<u32>,
    /// Completion: the identifier of the command it completes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cqe_cid: Option<u16>,
    /// Completion: the submission queue head pointer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cqe_sqhd: Option<u16>,
    /// Completion: the submission queue id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cqe_sqid: Option<u16>,
    /// Completion: the status code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cqe_sc: Option<u8>,
    /// Completion: the status code type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cqe_sct: Option<u8>,
    /// Completion: the Do Not Retry bit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cqe_dnr: Option<bool>,
    /// Why NVMe bytes did not parse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_error: Option<String>,
}

impl NvmeInfo {
    fn capsule(qid: u16, payload: &[u8]) -> NvmeInfo {
        let mut info = NvmeInfo { nvme_qid: Some(qid), ..NvmeInfo::default() };
        let c = match Command::decode(payload) {
            Ok(c) => c,
            Err(e) => return NvmeInfo { nvme_error: Some(e.to_string()), ..info },
        };
        info.nvme_opcode = Some(c.opcode);
        info.nvme_cid = Some(c.cid);
        if c.opcode == OPC_FABRICS {
            info.nvme_fctype = Some(c.fctype());
        } else {
            info.nvme_nsid = Some(c.nsid);
        }
        if qid != 0 && matches!(c.opcode, OPC_READ | OPC_WRITE) {
            info.nvme_slba = Some(u64::from(c.cdw[0]) | (u64::from(c.cdw[1]) << 32));
            info.nvme_nlb = Some(c.cdw[2] as u16);
        }
        // The descriptor as the wire has it (the typed SGL re-encodes to
        // exactly these bytes): type in the high nibble of byte 15.
        let raw = c.sgl.encode();
        info.sgl_type = Some(raw[15] >> 4);
        info.sgl_subtype = Some(raw[15] & 0x0F);
        info.sgl_addr = Some(u64::from_le_bytes(raw[..8].try_into().unwrap_or_default()));
        if raw[15] >> 4 == 0x4 {
            info.sgl_len = Some(u32::from_le_bytes([raw[8], raw[9], raw[10], 0]));
            info.sgl_key = Some(u32::from_le_bytes([raw[11], raw[12], raw[13], raw[14]]));
        } else {
            info.sgl_len = Some(u32::from_le_bytes([raw[8], raw[9], raw[10], raw[11]]));
        }
        info
    }

    fn completion(qid: u16, payload: &[u8]) -> NvmeInfo {
        let info = NvmeInfo { nvme_qid: Some(qid), ..NvmeInfo::default() };
        match Completion::decode(payload) {
            Ok(c) => {
                let status = c.status();
                NvmeInfo {
                    cqe_cid: Some(c.cid),
                    cqe_sqhd: Some(c.sq_head),
                    cqe_sqid: Some(c.sq_id),
                    cqe_sc: Some(status.sc),
                    cqe_sct: Some(status.sct),
                    cqe_dnr: Some(status.dnr),
                    ..info
                }
            }
            Err(e) => NvmeInfo { nvme_error: Some(e.to_string()), ..info },
        }
    }

    fn line(&self) -> String {
        let mut s = String::new();
        let mut put = |name: &str, v: Option<String>| {
            if let Some(v) = v {
                s.push_str(&format!(" {name}={v}"));
            }
        };
        put("qid", self.nvme_qid.map(|v| v.to_string()));
        put("hrqsize", self.nvme_pd_hrqsize.map(|v| v.to_string()));
        put("hsqsize", self.nvme_pd_hsqsize.map(|v| v.to_string()));
        put("cntlid", self.nvme_pd_cntlid.map(|v| format!("{v:#06x}")));
        put("crqsize", self.nvme_pd_crqsize.map(|v| v.to_string()));
        put("reject", self.nvme_pd_reject.map(|v| v.to_string()));
        put("opc", self.nvme_opcode.map(|v| format!("{v:#04x}")));
        put("fctype", self.nvme_fctype.map(|v| format!("{v:#04x}")));
        put("cid", self.nvme_cid.map(|v| format!("{v:#06x}")));
        put("nsid", self.nvme_nsid.map(|v| v.to_string()));
        put("slba", self.nvme_slba.map(|v| v.to_string()));
        put("nlb", self.nvme_nlb.map(|v| v.to_string()));
        put("sgl", self.sgl_type.zip(self.sgl_subtype).map(|(t, st)| format!("{t:x}/{st:x}")));
        put("addr", self.sgl_addr.map(|v| format!("{v:#x}")));
        put("len", self.sgl_len.map(|v| v.to_string()));
        put("key", self.sgl_key.map(|v| format!("{v:#x}")));
        put("cqe.cid", self.cqe_cid.map(|v| format!("{v:#06x}")));
        put("sqhd", self.cqe_sqhd.map(|v| v.to_string()));
        put("sqid", self.cqe_sqid.map(|v| v.to_string()));
        put("sct", self.cqe_sct.map(|v| v.to_string()));
        put("sc", self.cqe_sc.map(|v| format!("{v:#04x}")));
        put("error", self.nvme_error.clone());
        let dnr = self.cqe_dnr == Some(true);
        if dnr {
            s.push_str(" DNR");
        }
        if s.is_empty() { s } else { format!(" NVMe{s}") }
    }
}

/// Which side of an NVMe/RDMA queue a QP is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// SENDs to it are completions.
    Host,
    /// SENDs to it are command capsules.
    Target,
}

/// The connection state `rctb decode` keeps across frames: which QPs (by
/// address and QPN) belong to NVMe/RDMA queues, learnt from their CM
/// REQ and REP.
#[derive(Debug, Default)]
pub struct Decoder {
    /// REQs to port 4420 waiting for their REP, by the host's comm id.
    pending: BTreeMap<u32, u16>,
    queues: BTreeMap<(Ipv4Addr, u32), (Side, u16)>,
}

/// The NVMe/RDMA service port.
pub const NVME_RDMA_PORT: u16 = 4420;

impl Decoder {
    /// A decoder that knows no NVMe/RDMA queue yet (one per capture).
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes the next frame of a capture.
    pub fn frame(&mut self, number: u64, data: &[u8], orig_len: u32) -> Frame {
        let mut out = frame(number, data, orig_len);
        let Ok(f) = RoceFrame::decode(data) else { return out };
        if let Some(cm) = f.ext.deth.and_then(|_| CmMad::decode(f.payload).ok()) {
            out.nvme = self.cm(&cm, f.ip.src);
        } else if matches!(
            f.bth.opcode,
            Opcode::SEND_ONLY | Opcode::SEND_FIRST | Opcode::SEND_ONLY_IMM | Opcode::SEND_ONLY_INV
        ) && let Some(&(side, qid)) = self.queues.get(&(f.ip.dst, f.bth.dest_qp))
        {
            out.nvme = Some(match side {
                Side::Target => NvmeInfo::capsule(qid, f.payload),
                Side::Host => NvmeInfo::completion(qid, f.payload),
            });
        }
        out
    }

    fn cm(&mut self, mad: &CmMad, src: Ipv4Addr) -> Option<NvmeInfo> {
        let error =
            |e: &dyn std::fmt::Display| Some(NvmeInfo { nvme_error: Some(e.to_string()), ..NvmeInfo::default() });
        match &mad.message {
            CmMessage::Req(req) => {
                if IpServiceId::from_service_id(req.service_id).map(|id| id.port) != Some(NVME_RDMA_PORT) {
                    return None;
                }
                let consumer = match IpCmHeader::split(&req.private_data) {
                    Ok((_, consumer)) => consumer,
                    Err(e) => return error(&e),
                };
                match CmRequest::decode(consumer) {
                    Ok(pd) => {
                        self.pending.insert(req.local_comm_id, pd.qid);
                        self.queues.insert((src, req.local_qpn), (Side::Host, pd.qid));
                        Some(NvmeInfo {
                            nvme_qid: Some(pd.qid),
                            nvme_pd_hrqsize: Some(pd.hrqsize),
                            nvme_pd_hsqsize: Some(pd.hsqsize),
                            nvme_pd_cntlid: Some(pd.cntlid),
                            ..NvmeInfo::default()
                        })
                    }
                    Err(e) => error(&e),
                }
            }
            CmMessage::Rep(rep) => {
                let qid = self.pending.remove(&rep.remote_comm_id)?;
                self.queues.insert((src, rep.local_qpn), (Side::Target, qid));
                match CmAccept::decode(&rep.private_data) {
                    Ok(pd) => {
                        Some(NvmeInfo { nvme_qid: Some(qid), nvme_pd_crqsize: Some(pd.crqsize), ..NvmeInfo::default() })
                    }
                    Err(e) => error(&e),
                }
            }
            CmMessage::Rej(rej) => {
                let qid = self.pending.remove(&rej.remote_comm_id)?;
                match CmReject::decode(&rej.private_data) {
                    Ok(pd) => Some(NvmeInfo {
                        nvme_qid: Some(qid),
                        nvme_pd_reject: Some(pd.status.code()),
                        ..NvmeInfo::default()
                    }),
                    Err(e) => error(&e),
                }
            }
            _ => None,
        }
    }
}

/// Decodes one captured frame on its own (no connection state: CM MADs
/// decode, NVMe capsules need [`Decoder`]); `orig_len` is its length on the wire.
pub fn frame(number: u64, data: &[u8], orig_len: u32) -> Frame {
    match RoceFrame::decode(data) {
        Ok(f) => Frame {
            src: Some(f.ip.src),
            dst: Some(f.ip.dst),
            opcode: Some(f.bth.opcode.0),
            opcode_name: Some(f.bth.opcode.name()),
            dest_qp: Some(f.bth.dest_qp),
            psn: Some(f.bth.psn.get()),
            ack_req: Some(f.bth.ack_req),
            se: Some(f.bth.se),
            pad: Some(f.bth.pad),
            reth_va: f.ext.reth.map(|r| r.va),
            reth_rkey: f.ext.reth.map(|r| r.rkey),
            reth_len: f.ext.reth.map(|r| r.dma_len),
            aeth_syndrome: f.ext.aeth.map(|a| a.syndrome),
            aeth_msn: f.ext.aeth.map(|a| a.msn),
            aeth_kind: f.ext.aeth.map(|a| a.kind().to_string()),
            imm: f.ext.imm,
            payload_len: Some(f.payload.len()),
            icrc_ok: Some(f.icrc_ok()),
            cm: (f.bth.dest_qp == 1 && f.ext.deth.is_some())
                .then(|| CmMad::decode(f.payload).ok())
                .flatten()
                .map(|mad| CmInfo::new(&mad)),
            ..Frame::bare(number, "rocev2", None)
        },
        Err(e) if (data.len() as u64) < orig_len as u64 => Frame::bare(
            number,
            "truncated",
            Some(format!("captured {} of {orig_len} bytes (snap length): {e}", data.len())),
        ),
        Err(e) if e.is_not_roce() => Frame::bare(number, "not_rocev2", Some(e.to_string())),
        Err(e @ RoceError::UnknownOpcode(_)) => Frame::bare(number, "not_rocev2", Some(e.to_string())),
        Err(e) => Frame::bare(number, "malformed", Some(e.to_string())),
    }
}

/// Why a pcap could not be read at all.
#[derive(Debug, thiserror::Error)]
#[error("reading the pcap: {0}")]
pub struct DecodeError(#[from] pcap_file::PcapError);

/// Decodes every frame of a pcap.
pub fn pcap(bytes: &[u8]) -> Result<Vec<Frame>, DecodeError> {
    let mut reader = PcapReader::new(bytes)?;
    let mut out = Vec::new();
    let mut decoder = Decoder::new();
    let mut number = 0;
    while let Some(packet) = reader.next_packet() {
        let packet = packet?;
        number += 1;
        out.push(decoder.frame(number, &packet.data, packet.orig_len));
    }
    Ok(out)
}
