//! The IP form of RDMA CM: the service id that names a port, and the
//! 36-byte header that leads a REQ's private data.

use super::*;

/// An RDMA IP CM service id (IBA Annex A11): prefix `0x0000_0000_01`, the
/// port space's protocol byte, then the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpServiceId {
    /// Bits 23:16 of the service id: the low byte of the RDMA CM port space
    /// (0x06 for RDMA_PS_TCP 0x0106, 0x11 for RDMA_PS_UDP 0x0111, 0x3F for
    /// RDMA_PS_IB 0x013F).
    pub protocol: u8,
    /// Bits 15:0 of the service id: the destination port the passive side
    /// listens on (4420 for NVMe/RDMA).
    pub port: u16,
}

impl IpServiceId {
    const PREFIX: u64 = 0x01;

    /// The IP form of `service_id`, or `None` when it is not one.
    pub fn from_service_id(service_id: u64) -> Option<IpServiceId> {
        (service_id >> 24 == Self::PREFIX)
            .then_some(IpServiceId { protocol: (service_id >> 16) as u8, port: service_id as u16 })
    }

    /// The 64-bit service id.
    pub fn service_id(&self) -> u64 {
        (Self::PREFIX << 24) | (u64::from(self.protocol) << 16) | u64::from(self.port)
    }
}

/// The CMA header that starts an IP-addressed REQ's private data
/// (`struct cma_hdr` in the kernel's `cma.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpCmHeader {
    /// Byte 0: major (high nibble) and minor version: 0x00.
    pub cma_version: u8,
    /// The high nibble of byte 1: 4 or 6. [`IpCmHeader::split`] returns
    /// [`CmError::BadField`] (`"ip_cm.ip_version"`) for anything else.
    pub ip_version: u8,
    /// Bytes 2..4, network order: the active side's source port.
    pub src_port: u16,
    /// Bytes 4..20: the active side's address; IPv4 sits in the last four
    /// bytes (the first twelve are ignored on split and zero on encode).
    pub src_addr: IpAddr,
    /// Bytes 20..36: the address the active side connected to, laid out as
    /// `src_addr`.
    pub dst_addr: IpAddr,
}

impl IpCmHeader {
    /// Splits an IP-addressed REQ's private data into the header and the
    /// consumer's bytes.
    pub fn split(private_data: &[u8]) -> Result<(IpCmHeader, &[u8]), CmError> {
        let Some(h) = private_data.get(..IP_CM_HEADER_LEN) else {
            return Err(CmError::Truncated { need: IP_CM_HEADER_LEN, have: private_data.len() });
        };
        let ip_version = h[1] >> 4;
        let addr = |off: usize| -> Result<IpAddr, CmError> {
            let b = arr16(h, off);
            match ip_version {
                4 => Ok(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
                6 => Ok(IpAddr::V6(Ipv6Addr::from(b))),
                v => Err(CmError::BadField { field: "ip_cm.ip_version", value: v.into(), rule: "must be 4 or 6" }),
            }
        };
        let header =
            IpCmHeader { cma_version: h[0], ip_version, src_port: be16(h, 2), src_addr: addr(4)?, dst_addr: addr(20)? };
        Ok((header, &private_data[IP_CM_HEADER_LEN..]))
    }

    /// The 36 header bytes.
    pub fn encode(&self) -> [u8; IP_CM_HEADER_LEN] {
        let mut b = [0u8; IP_CM_HEADER_LEN];
        b[0] = self.cma_version;
        b[1] = self.ip_version << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        for (off, addr) in [(4, self.src_addr), (20, self.dst_addr)] {
            match addr {
                IpAddr::V4(a) => b[off + 12..off + 16].copy_from_slice(&a.octets()),
                IpAddr::V6(a) => b[off..off + 16].copy_from_slice(&a.octets()),
            }
        }
        b
    }
}
