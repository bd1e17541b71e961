//! A RoCEv2 packet as the engine takes and gives it.
//!
//! Headers are kept decoded (the RC engine reads them directly); the pcap
//! writer turns a packet into the exact Ethernet/IPv4/UDP/BTH frame a NIC
//! would send, with a correct ICRC.

use std::net::Ipv4Addr;

use rctb_core::wire::roce::{
    AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, Aeth, AtomicAckEth, AtomicEth, BTH_LEN, Bth, DETH_LEN, Deth,
    ExtHeaders, ICRC_LEN, IMMDT_LEN, RETH_LEN, Reth,
};

/// Ethernet (14) + IPv4 (20) + UDP (8).
pub const OUTER_HEADERS_LEN: usize = 14 + 20 + 8;

/// One RoCEv2 packet, its headers decoded (what an endpoint takes and
/// gives; the owner frames it for the wire).
#[derive(Clone, Debug)]
pub struct Packet {
    /// The sender's IPv4 address.
    pub src_ip: Ipv4Addr,
    /// The receiver's IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// The UDP source port (the flow's entropy; the destination is 4791).
    pub udp_src_port: u16,
    /// The base transport header.
    pub bth: Bth,
    /// The RDMA extended header (WRITE and READ requests).
    pub reth: Option<Reth>,
    /// The atomic extended header (compare-and-swap and fetch-and-add requests).
    pub atomic: Option<AtomicEth>,
    /// The ACK extended header (ACKs, NAKs, READ responses, atomic ACKs).
    pub aeth: Option<Aeth>,
    /// The original remote value an atomic acknowledge returns.
    pub atomic_ack: Option<AtomicAckEth>,
    /// Only on the UD packets that carry CM MADs to and from QP1.
    pub deth: Option<Deth>,
    /// The immediate (wire value).
    pub imm: Option<u32>,
    /// The payload, without pad and ICRC.
    pub payload: Vec<u8>,
    /// Damaged on the link: the receiver's ICRC check fails and drops it.
    pub corrupt: bool,
}

impl Packet {
    /// A placeholder packet around `payload` (an ACKNOWLEDGE to QPN 0 at
    /// PSN 0 from and to 0.0.0.0, no extended headers): a slot for
    /// [`Endpoint::poll_transmit_into`](crate::Endpoint::poll_transmit_into)
    /// to fill.
    pub fn empty(payload: Vec<u8>) -> Packet {
        Packet {
            src_ip: Ipv4Addr::UNSPECIFIED,
            dst_ip: Ipv4Addr::UNSPECIFIED,
            udp_src_port: 0,
            bth: Bth::new(rctb_core::wire::roce::Opcode::ACKNOWLEDGE, 0, rctb_core::transport::Psn::wrapping(0)),
            reth: None,
            atomic: None,
            aeth: None,
            atomic_ack: None,
            deth: None,
            imm: None,
            payload,
            corrupt: false,
        }
    }

    /// Bytes on the Ethernet wire (without preamble and FCS).
    #[inline]
    pub fn wire_len(&self) -> usize {
        let pad = (4 - self.payload.len() % 4) % 4;
        OUTER_HEADERS_LEN
            + BTH_LEN
            + self.deth.map_or(0, |_| DETH_LEN)
            + self.reth.map_or(0, |_| RETH_LEN)
            + self.atomic.map_or(0, |_| ATOMIC_ETH_LEN)
            + self.aeth.map_or(0, |_| AETH_LEN)
            + self.atomic_ack.map_or(0, |_| ATOMIC_ACK_ETH_LEN)
            + self.imm.map_or(0, |_| IMMDT_LEN)
            + self.payload.len()
            + pad
            + ICRC_LEN
    }

    /// Its extended headers, as the frame encoder takes them.
    #[inline]
    pub fn ext_headers(&self) -> ExtHeaders {
        ExtHeaders {
            deth: self.deth,
            reth: self.reth,
            atomic: self.atomic,
            aeth: self.aeth,
            atomic_ack: self.atomic_ack,
            imm: self.imm,
            ieth: None,
        }
    }
}

/// The UDP source port of an RC connection, as Linux computes it for RoCEv2
/// when the address has no flow label (rxe, mlx5): a flow label from both
/// QPNs (`rdma_calc_flow_label`), folded into 0xC000..=0xFFFF
/// (`rdma_flow_label_to_udp_sport`). It is symmetric, so both directions of
/// a connection use the same port, as the rxe captures show.
pub fn udp_src_port(qpn: u32, dest_qpn: u32) -> u16 {
    let mut v = qpn as u64 * dest_qpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xF_FFFF) as u32;
    let low = (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14);
    (low | 0xC000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_source_ports_match_the_rxe_capture() {
        // testdata/captures/rxe-send-write.pcap: QPs 0x11<->0x13, 0x12<->0x14, 0x13<->0x15.
        assert_eq!(udp_src_port(0x11, 0x13), 49475);
        assert_eq!(udp_src_port(0x13, 0x11), 49475);
        assert_eq!(udp_src_port(0x12, 0x14), 49512);
        assert_eq!(udp_src_port(0x13, 0x15), 49551);
    }
}
