//! [`FrameBuilder`]: builds RoCEv2 frames from scratch the way rxe sends them
//! (DF set, UDP checksum 0, zero pad, correct lengths, checksum and ICRC).

use std::net::Ipv4Addr;

use super::error::RoceError;
use super::eth::{ETHERTYPE_IPV4, EthHeader, MacAddr, VlanTag};
use super::ext::ExtHeaders;
use super::frame::RoceFrame;
use super::headers::{Bth, ROCEV2_UDP_PORT};
use super::ipv4::{IP_PROTO_UDP, IPV4_DF, Ipv4Header, Ipv4Options};
use super::udp::UdpHeader;

/// The per-path part of a RoCEv2 frame: addresses, ports and IP fields that
/// stay the same from packet to packet of a QP (change `ip_id` per packet if
/// you care about it; rxe does not rely on it since DF is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameBuilder {
    /// Ethernet source MAC.
    pub src_mac: MacAddr,
    /// Ethernet destination MAC.
    pub dst_mac: MacAddr,
    /// VLAN tag to insert after the source MAC (none by default).
    pub vlan: Option<VlanTag>,
    /// IPv4 source address.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination address.
    pub dst_ip: Ipv4Addr,
    /// rxe derives it from the QPN to spread flows over ECMP paths.
    pub udp_src_port: u16,
    /// IPv4 time to live (64 by default).
    pub ttl: u8,
    /// IPv4 TOS byte, DSCP and ECN (0 by default).
    pub tos: u8,
    /// IPv4 identification (0 by default).
    pub ip_id: u16,
    /// Whether to set DF in the IPv4 flags (set by default).
    pub dont_fragment: bool,
}

impl FrameBuilder {
    /// A builder with rxe's defaults: TTL 64, TOS 0, DF, id 0, source port 0xC000.
    pub fn new(src_mac: MacAddr, dst_mac: MacAddr, src_ip: Ipv4Addr, dst_ip: Ipv4Addr) -> Self {
        FrameBuilder {
            src_mac,
            dst_mac,
            vlan: None,
            src_ip,
            dst_ip,
            udp_src_port: 0xC000,
            ttl: 64,
            tos: 0,
            ip_id: 0,
            dont_fragment: true,
        }
    }

    /// A sealed frame over `payload`: `bth.pad` and all lengths, the IPv4
    /// checksum and the ICRC are filled in. `ext` must match the opcode.
    pub fn frame<'p>(&self, bth: Bth, ext: ExtHeaders, payload: &'p [u8]) -> Result<RoceFrame<'p>, RoceError> {
        let mut frame = RoceFrame {
            eth: Some(EthHeader { dst: self.dst_mac, src: self.src_mac, vlan: self.vlan, ethertype: ETHERTYPE_IPV4 }),
            ip: Ipv4Header {
                tos: self.tos,
                total_len: 0,
                id: self.ip_id,
                flags_frag: if self.dont_fragment { IPV4_DF } else { 0 },
                ttl: self.ttl,
                protocol: IP_PROTO_UDP,
                checksum: 0,
                src: self.src_ip,
                dst: self.dst_ip,
                options: Ipv4Options::EMPTY,
            },
            udp: UdpHeader { src_port: self.udp_src_port, dst_port: ROCEV2_UDP_PORT, len: 0, checksum: 0 },
            bth,
            ext,
            payload,
            pad_bytes: &[],
            icrc: 0,
            trailer: &[],
        };
        frame.seal()?;
        Ok(frame)
    }

    /// Appends a whole Ethernet frame to `out`; returns its length.
    pub fn build(&self, bth: Bth, ext: ExtHeaders, payload: &[u8], out: &mut Vec<u8>) -> Result<usize, RoceError> {
        let frame = self.frame(bth, ext, payload)?;
        frame.encode(out);
        Ok(frame.encoded_len())
    }

    /// Appends the IP packet only (no Ethernet header), for raw IP sockets;
    /// returns its length.
    pub fn build_ip(&self, bth: Bth, ext: ExtHeaders, payload: &[u8], out: &mut Vec<u8>) -> Result<usize, RoceError> {
        let mut frame = self.frame(bth, ext, payload)?;
        frame.eth = None;
        frame.encode(out);
        Ok(frame.encoded_len())
    }
}
