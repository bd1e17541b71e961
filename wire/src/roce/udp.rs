//! UDP header, all four fields kept as read.

use super::codec::{array_at, fixed_header};

/// Length of the UDP header: source port, destination port, length and
/// checksum, two bytes each.
pub const UDP_HEADER_LEN: usize = 8;

/// UDP header. RoCEv2 senders (rxe, mlx5) leave the checksum 0; it is kept
/// as read because the ICRC masks it anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpHeader {
    /// Source port (bytes 0..2); RoCEv2 senders vary it per flow for ECMP.
    pub src_port: u16,
    /// Destination port (bytes 2..4); anything but [`ROCEV2_UDP_PORT`](super::ROCEV2_UDP_PORT)
    /// makes frame decoding return [`NotRoce::UdpPort`](super::NotRoce::UdpPort).
    pub dst_port: u16,
    /// Header plus payload, in bytes.
    pub len: u16,
    /// Checksum (bytes 6..8), kept as read and never verified.
    pub checksum: u16,
}

impl UdpHeader {
    /// Reads the 8 header bytes; never fails.
    pub fn from_bytes(b: &[u8; UDP_HEADER_LEN]) -> UdpHeader {
        UdpHeader {
            src_port: u16::from_be_bytes(array_at(b, 0)),
            dst_port: u16::from_be_bytes(array_at(b, 2)),
            len: u16::from_be_bytes(array_at(b, 4)),
            checksum: u16::from_be_bytes(array_at(b, 6)),
        }
    }

    /// The 8 wire bytes.
    pub fn to_bytes(&self) -> [u8; UDP_HEADER_LEN] {
        let [s0, s1] = self.src_port.to_be_bytes();
        let [d0, d1] = self.dst_port.to_be_bytes();
        let [l0, l1] = self.len.to_be_bytes();
        let [c0, c1] = self.checksum.to_be_bytes();
        [s0, s1, d0, d1, l0, l1, c0, c1]
    }
}

fixed_header!(UdpHeader, UDP_HEADER_LEN, "UDP");
