//! Wire traces: a pcap reduced to the header sequence of each RC
//! connection, so two captures of the same traffic (rxe's and the
//! simulator's) can be compared line by line.
//!
//! What is kept is what RC semantics fix: per connection (an IP pair and the
//! UDP source port, which Linux derives from both QPNs and uses in both
//! directions), in capture order, each frame's direction, opcode, PSN
//! relative to the connection's first request, AckReq, pad count, payload
//! length, RETH length, the AETH's kind and MSN, and an atomic's operands
//! and the original value its acknowledge returns. What is left out varies
//! legitimately between implementations: addresses, QPNs, absolute PSNs,
//! keys and virtual addresses, IP ids, timestamps.

use std::fmt;
use std::net::Ipv4Addr;

use pcap_file::pcap::PcapReader;
use rctb_core::transport::Psn;
use rctb_core::wire::roce::RoceFrame;

/// One frame of a connection, normalized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Sent by the side that sent the connection's first frame.
    pub from_requester: bool,
    /// BTH opcode byte (printed by its name).
    pub opcode: u8,
    /// PSN minus the connection's first request PSN (24-bit, signed).
    pub psn: i32,
    /// BTH AckReq bit.
    pub ack_req: bool,
    /// BTH pad count (0..=3 bytes).
    pub pad: u8,
    /// Payload bytes of the packet, without pad and ICRC.
    pub payload: usize,
    /// RETH DMA length in bytes, when the packet has a RETH.
    pub reth_len: Option<u32>,
    /// Whether the packet carries ImmDt (the value itself is not kept).
    pub imm: bool,
    /// AETH: kind (ACK, RNR NAK with timer, NAK with code) and MSN.
    pub aeth: Option<(String, u32)>,
    /// AtomicETH: the swap or add operand and the compare operand.
    pub atomic: Option<(u64, u64)>,
    /// AtomicAckETH: the original remote value.
    pub atomic_orig: Option<u64>,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = if self.from_requester { "->" } else { "<-" };
        let name = rctb_core::wire::roce::Opcode(self.opcode).name();
        write!(f, "{dir} {name} psn{:+} len {}", self.psn, self.payload)?;
        if self.ack_req {
            f.write_str(" A")?;
        }
        if self.pad > 0 {
            write!(f, " pad {}", self.pad)?;
        }
        if let Some(l) = self.reth_len {
            write!(f, " reth {l}")?;
        }
        if self.imm {
            f.write_str(" imm")?;
        }
        if let Some((swap_add, compare)) = self.atomic {
            write!(f, " swap/add {swap_add:#x} compare {compare:#x}")?;
        }
        if let Some((kind, msn)) = &self.aeth {
            write!(f, " {kind} msn {msn}")?;
        }
        if let Some(orig) = self.atomic_orig {
            write!(f, " orig {orig:#x}")?;
        }
        Ok(())
    }
}

/// All frames of one RC connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// The source address of the connection's first frame.
    pub requester: Ipv4Addr,
    /// The destination address of that frame.
    pub responder: Ipv4Addr,
    /// The UDP source port that, with the address pair in either direction,
    /// identifies the connection.
    pub udp_port: u16,
    /// Its frames, in capture order.
    pub records: Vec<Record>,
}

impl Connection {
    /// One line per record (its [`Display`](fmt::Display) form, e.g.
    /// `-> RC Send Only psn+0 len 64 A`), what [`diff`] compares.
    pub fn lines(&self) -> Vec<String> {
        self.records.iter().map(ToString::to_string).collect()
    }
}

/// Why a capture could not be traced.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The pcap's file header or one of its packet records could not be
    /// read (not a pcap, or cut short).
    #[error("reading the pcap: {0}")]
    Pcap(#[from] pcap_file::PcapError),
}

/// The RC connections of a pcap, in order of first appearance. Frames that
/// are not RoCEv2 RC (ARP, CM MADs on QP1) are skipped.
pub fn connections(pcap: &[u8]) -> Result<Vec<Connection>, TraceError> {
    let mut reader = PcapReader::new(pcap)?;
    let mut conns: Vec<(Connection, Psn)> = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let packet = packet?;
        let Ok(frame) = RoceFrame::decode(&packet.data) else { continue };
        if !frame.bth.opcode.is_rc() {
            continue;
        }
        let (src, dst, port) = (frame.ip.src, frame.ip.dst, frame.udp.src_port);
        let found = conns.iter().position(|(c, _)| {
            c.udp_port == port && ((c.requester, c.responder) == (src, dst) || (c.requester, c.responder) == (dst, src))
        });
        let idx = match found {
            Some(i) => i,
            None => {
                let conn = Connection { requester: src, responder: dst, udp_port: port, records: Vec::new() };
                conns.push((conn, frame.bth.psn));
                conns.len() - 1
            }
        };
        let (conn, first) = &mut conns[idx];
        conn.records.push(Record {
            from_requester: src == conn.requester,
            opcode: frame.bth.opcode.0,
            psn: frame.bth.psn.diff(*first),
            ack_req: frame.bth.ack_req,
            pad: frame.bth.pad,
            payload: frame.payload.len(),
            reth_len: frame.ext.reth.map(|r| r.dma_len),
            imm: frame.ext.imm.is_some(),
            aeth: frame.ext.aeth.map(|a| (a.kind().to_string(), a.msn)),
            atomic: frame.ext.atomic.map(|a| (a.swap_add, a.compare)),
            atomic_orig: frame.ext.atomic_ack.map(|a| a.orig),
        });
    }
    Ok(conns.into_iter().map(|(c, _)| c).collect())
}

/// Line-by-line differences between two connections' traces (empty when
/// they agree).
pub fn diff(expected: &Connection, actual: &Connection) -> Vec<String> {
    let (e, a) = (expected.lines(), actual.lines());
    let mut out = Vec::new();
    for i in 0..e.len().max(a.len()) {
        match (e.get(i), a.get(i)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => out.push(format!(
                "frame {i}: expected `{}`, got `{}`",
                x.map_or("(nothing)", String::as_str),
                y.map_or("(nothing)", String::as_str)
            )),
        }
    }
    out
}
