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
//! remembers which QPs connected to port 4420 (NVMe/RDMA).

use std::net::Ipv4Addr;

use pcap_file::pcap::PcapReader;
use rctb_core::wire::cm::{CmMad, CmMessage, IpServiceId};
use rctb_core::wire::roce::{RoceError, RoceFrame};
use serde::Serialize;

/// One frame of a capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// 1-based, as Wireshark numbers frames.
    pub frame: u64,
    /// "rocev2", "truncated", "not_rocev2" or "malformed".
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest_qp: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psn: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_req: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub se: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pad: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth_va: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth_rkey: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth_len: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_syndrome: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_msn: Option<u32>,
    /// "ACK", "RNR NAK timer N" or "NAK <code>".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_len: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icrc_ok: Option<bool>,
    /// A CM MAD this frame carries.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub cm: Option<CmInfo>,
    /// Why a frame is not (fully) decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The fields of a CM MAD `rctb decode` reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CmInfo {
    /// "REQ", "REP", "RTU", "REJ", "MRA", "DREQ" or "DREP".
    pub cm_message: &'static str,
    pub cm_local_comm_id: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_remote_comm_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_service_id: Option<u64>,
    /// The destination port of an IP-based service id (REQ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_port: Option<u16>,
    /// The sender's QPN (REQ, REP) or the peer's (DREQ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_qpn: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm_psn: Option<u32>,
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
        s.push_str(if self.icrc_ok == Some(true) { " ICRC ok" } else { " ICRC BAD" });
        s
    }
}

/// Decodes one captured frame; `orig_len` is its length on the wire.
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
    let mut number = 0;
    while let Some(packet) = reader.next_packet() {
        let packet = packet?;
        number += 1;
        out.push(frame(number, &packet.data, packet.orig_len));
    }
    Ok(out)
}
