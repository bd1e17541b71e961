//! A RoCEv2 packet in flight through the simulated fabric.
//!
//! Headers are kept decoded (the RC engine reads them directly); the pcap
//! writer turns a packet into the exact Ethernet/IPv4/UDP/BTH frame a NIC
//! would send, with a correct ICRC.

use std::net::Ipv4Addr;

use rctb_core::wire::roce::{AETH_LEN, Aeth, BTH_LEN, Bth, ICRC_LEN, IMMDT_LEN, RETH_LEN, Reth};

/// Ethernet (14) + IPv4 (20) + UDP (8).
pub const OUTER_HEADERS_LEN: usize = 14 + 20 + 8;

#[derive(Clone, Debug)]
pub struct Packet {
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub udp_src_port: u16,
    pub bth: Bth,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub imm: Option<u32>,
    pub payload: Vec<u8>,
    /// Damaged on the link: the receiver's ICRC check fails and drops it.
    pub corrupt: bool,
}

impl Packet {
    /// Bytes on the Ethernet wire (without preamble and FCS).
    pub fn wire_len(&self) -> usize {
        let pad = (4 - self.payload.len() % 4) % 4;
        OUTER_HEADERS_LEN
            + BTH_LEN
            + self.reth.map_or(0, |_| RETH_LEN)
            + self.aeth.map_or(0, |_| AETH_LEN)
            + self.imm.map_or(0, |_| IMMDT_LEN)
            + self.payload.len()
            + pad
            + ICRC_LEN
    }
}

/// The UDP source port rxe uses for a QP: 0xC000 plus a hash of the QPN.
pub fn udp_src_port(qpn: u32) -> u16 {
    0xC000 | ((qpn ^ (qpn >> 14)) & 0x3FFF) as u16
}
