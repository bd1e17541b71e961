//! The RoCEv2 invariant CRC (IBTA Annex A17.3.3), as rxe computes it.
//!
//! CRC-32 (the Ethernet/zlib one) over: 8 bytes of 0xFF standing in for the
//! LRH, the IPv4 header with TOS, TTL and checksum set to ones, the UDP header
//! with its checksum set to ones, the BTH with byte 4 (FECN/BECN/resv) set to
//! ones, then everything up to the ICRC. The masked fields are the ones
//! routers may rewrite. The result goes on the wire little-endian.
//!
//! The hasher is fed piece by piece, with masked copies of the small headers
//! on the stack, so computing an ICRC never allocates or copies the payload.

use super::error::RoceError;
use super::headers::{BTH_LEN, ICRC_LEN};
use super::ipv4::{IPV4_MAX_HEADER_LEN, IPV4_MIN_HEADER_LEN};
use super::udp::UDP_HEADER_LEN;

/// Accumulates an ICRC over the parts of a packet, masking as it goes.
pub(crate) struct IcrcHasher(crc32fast::Hasher);

impl IcrcHasher {
    pub(crate) fn new() -> Self {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&[0xFF; 8]);
        IcrcHasher(hasher)
    }

    /// An encoded IPv4 header: the first `len` bytes of `header`.
    pub(crate) fn ipv4_header(&mut self, mut header: [u8; IPV4_MAX_HEADER_LEN], len: usize) {
        header[1] = 0xFF;
        header[8] = 0xFF;
        header[10] = 0xFF;
        header[11] = 0xFF;
        self.0.update(header.get(..len).unwrap_or_default());
    }

    pub(crate) fn udp_header(&mut self, mut header: [u8; UDP_HEADER_LEN]) {
        header[6] = 0xFF;
        header[7] = 0xFF;
        self.0.update(&header);
    }

    pub(crate) fn bth(&mut self, mut header: [u8; BTH_LEN]) {
        header[4] = 0xFF;
        self.0.update(&header);
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub(crate) fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// The ICRC of an encoded IPv4 RoCEv2 packet: `packet` runs from the IPv4
/// header to the end of the pad, without the ICRC itself.
///
/// Only the header lengths are checked (enough bytes for IPv4, UDP and BTH);
/// for a fully validated packet decode it and use
/// [`RoceFrame::compute_icrc`](super::RoceFrame::compute_icrc).
pub fn icrc_ipv4(packet: &[u8]) -> Result<u32, RoceError> {
    let ihl = usize::from(packet.first().copied().unwrap_or(0) & 0xF) * 4;
    if ihl < IPV4_MIN_HEADER_LEN {
        return Err(RoceError::BadField {
            header: "IPv4",
            field: "ihl",
            value: (ihl / 4) as u64,
            rule: "must be at least 5 (20 bytes)",
        });
    }
    let Some((ip, rest)) = packet.split_at_checked(ihl) else {
        return Err(RoceError::Truncated { header: "IPv4", need: ihl, have: packet.len() });
    };
    let Some((udp, rest)) = rest.split_first_chunk::<UDP_HEADER_LEN>() else {
        return Err(RoceError::Truncated { header: "UDP", need: UDP_HEADER_LEN, have: rest.len() });
    };
    let Some((bth, rest)) = rest.split_first_chunk::<BTH_LEN>() else {
        return Err(RoceError::Truncated { header: "BTH", need: BTH_LEN, have: rest.len() });
    };
    let mut header = [0u8; IPV4_MAX_HEADER_LEN];
    if let Some(slot) = header.get_mut(..ihl) {
        slot.copy_from_slice(ip);
    }
    let mut hasher = IcrcHasher::new();
    hasher.ipv4_header(header, ihl);
    hasher.udp_header(*udp);
    hasher.bth(*bth);
    hasher.update(rest);
    Ok(hasher.finish())
}

/// Reads the ICRC at the end of an encoded packet (little-endian, as sent).
pub fn icrc_on_wire(packet: &[u8]) -> Option<u32> {
    const _: () = assert!(ICRC_LEN == 4);
    packet.last_chunk::<4>().map(|b| u32::from_le_bytes(*b))
}
