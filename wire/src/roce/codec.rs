//! Byte layouts of the fixed-size transport headers (BTH, RETH, AETH, DETH,
//! ImmDt, IETH), in network order.
//!
//! Each header gets `from_bytes`/`to_bytes` (infallible, on exact arrays) and,
//! through [`fixed_header!`], `decode`/`split`/`encode` on slices. Reserved
//! bits travel through untouched so decode -> encode is byte-identical; fields
//! wider than their wire slot are masked on encode rather than rejected,
//! because the types document their widths and masking is what hardware does.

use super::error::RoceError;
use super::headers::{AETH_LEN, Aeth, BTH_LEN, Bth, DETH_LEN, Deth, IMMDT_LEN, Opcode, RETH_LEN, Reth};
use crate::transport::Psn;

/// Length of the IETH (the rkey to invalidate) of SEND with Invalidate.
pub const IETH_LEN: usize = 4;

/// Adds the slice-level codec methods to a header type that has
/// `from_bytes(&[u8; LEN]) -> Self` and `to_bytes(&self) -> [u8; LEN]`.
macro_rules! fixed_header {
    ($ty:ty, $len:expr, $name:literal) => {
        impl $ty {
            /// The header's name in errors and Wireshark.
            pub const NAME: &'static str = $name;
            /// Encoded length in bytes.
            pub const LEN: usize = $len;

            /// Decodes the header at the start of `bytes`; bytes after it are ignored.
            pub fn decode(bytes: &[u8]) -> Result<Self, $crate::roce::RoceError> {
                Self::split(bytes).map(|(header, _)| header)
            }

            /// Decodes the header at the start of `bytes` and returns the bytes after it.
            pub fn split(bytes: &[u8]) -> Result<(Self, &[u8]), $crate::roce::RoceError> {
                match bytes.split_first_chunk::<{ $len }>() {
                    Some((head, rest)) => Ok((Self::from_bytes(head), rest)),
                    None => Err($crate::roce::RoceError::Truncated { header: $name, need: $len, have: bytes.len() }),
                }
            }

            /// Appends the encoded header to `out`.
            pub fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_bytes());
            }
        }
    };
}
pub(crate) use fixed_header;

fixed_header!(Bth, BTH_LEN, "BTH");
fixed_header!(Reth, RETH_LEN, "RETH");
fixed_header!(Aeth, AETH_LEN, "AETH");
fixed_header!(Deth, DETH_LEN, "DETH");

const fn u24(b0: u8, b1: u8, b2: u8) -> u32 {
    u32::from_be_bytes([0, b0, b1, b2])
}

const fn u24_bytes(v: u32) -> [u8; 3] {
    let [_, b0, b1, b2] = v.to_be_bytes();
    [b0, b1, b2]
}

impl Bth {
    /// Reads the 12 BTH bytes; never fails, and keeps the reserved bits.
    pub fn from_bytes(b: &[u8; BTH_LEN]) -> Bth {
        let [opcode, flags, pk0, pk1, resv8a, q0, q1, q2, ack, p0, p1, p2] = *b;
        Bth {
            opcode: Opcode(opcode),
            se: flags & 0x80 != 0,
            mig_req: flags & 0x40 != 0,
            pad: (flags >> 4) & 0x3,
            tver: flags & 0xF,
            pkey: u16::from_be_bytes([pk0, pk1]),
            resv8a,
            dest_qp: u24(q0, q1, q2),
            ack_req: ack & 0x80 != 0,
            resv7: ack & 0x7F,
            psn: Psn::wrapping(u24(p0, p1, p2)),
        }
    }

    /// The 12 wire bytes; `pad`, `tver`, `resv7` and the 24-bit `dest_qp` are
    /// masked to their widths.
    pub fn to_bytes(&self) -> [u8; BTH_LEN] {
        let flags =
            (u8::from(self.se) << 7) | (u8::from(self.mig_req) << 6) | ((self.pad & 0x3) << 4) | (self.tver & 0xF);
        let [pk0, pk1] = self.pkey.to_be_bytes();
        let [q0, q1, q2] = u24_bytes(self.dest_qp);
        let ack = (u8::from(self.ack_req) << 7) | (self.resv7 & 0x7F);
        let [p0, p1, p2] = u24_bytes(self.psn.get());
        [self.opcode.0, flags, pk0, pk1, self.resv8a, q0, q1, q2, ack, p0, p1, p2]
    }
}

impl Reth {
    /// Reads the 16 RETH bytes; never fails.
    pub fn from_bytes(b: &[u8; RETH_LEN]) -> Reth {
        let [v0, v1, v2, v3, v4, v5, v6, v7, k0, k1, k2, k3, l0, l1, l2, l3] = *b;
        Reth {
            va: u64::from_be_bytes([v0, v1, v2, v3, v4, v5, v6, v7]),
            rkey: u32::from_be_bytes([k0, k1, k2, k3]),
            dma_len: u32::from_be_bytes([l0, l1, l2, l3]),
        }
    }

    /// The 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; RETH_LEN] {
        let [v0, v1, v2, v3, v4, v5, v6, v7] = self.va.to_be_bytes();
        let [k0, k1, k2, k3] = self.rkey.to_be_bytes();
        let [l0, l1, l2, l3] = self.dma_len.to_be_bytes();
        [v0, v1, v2, v3, v4, v5, v6, v7, k0, k1, k2, k3, l0, l1, l2, l3]
    }
}

impl Aeth {
    /// Reads the 4 AETH bytes; never fails.
    pub fn from_bytes(b: &[u8; AETH_LEN]) -> Aeth {
        let [syndrome, m0, m1, m2] = *b;
        Aeth { syndrome, msn: u24(m0, m1, m2) }
    }

    /// The 4 wire bytes; `msn` is masked to 24 bits.
    pub fn to_bytes(&self) -> [u8; AETH_LEN] {
        let [m0, m1, m2] = u24_bytes(self.msn);
        [self.syndrome, m0, m1, m2]
    }
}

impl Deth {
    /// Reads the 8 DETH bytes; never fails, and keeps the reserved byte.
    pub fn from_bytes(b: &[u8; DETH_LEN]) -> Deth {
        let [k0, k1, k2, k3, resv8, s0, s1, s2] = *b;
        Deth { qkey: u32::from_be_bytes([k0, k1, k2, k3]), resv8, src_qp: u24(s0, s1, s2) }
    }

    /// The 8 wire bytes; `src_qp` is masked to 24 bits.
    pub fn to_bytes(&self) -> [u8; DETH_LEN] {
        let [k0, k1, k2, k3] = self.qkey.to_be_bytes();
        let [s0, s1, s2] = u24_bytes(self.src_qp);
        [k0, k1, k2, k3, self.resv8, s0, s1, s2]
    }
}

/// Decodes a 4-byte big-endian word at the start of `bytes`, naming `header`
/// when it is short.
fn decode_u32<'a>(header: &'static str, bytes: &'a [u8]) -> Result<(u32, &'a [u8]), RoceError> {
    match bytes.split_first_chunk::<4>() {
        Some((head, rest)) => Ok((u32::from_be_bytes(*head), rest)),
        None => Err(RoceError::Truncated { header, need: 4, have: bytes.len() }),
    }
}

/// Decodes an ImmDt (the immediate as a network-order u32) and returns the
/// bytes after it.
pub fn split_immdt(bytes: &[u8]) -> Result<(u32, &[u8]), RoceError> {
    const _: () = assert!(IMMDT_LEN == 4);
    decode_u32("ImmDt", bytes)
}

/// Decodes an IETH (the rkey to invalidate) and returns the bytes after it.
pub fn split_ieth(bytes: &[u8]) -> Result<(u32, &[u8]), RoceError> {
    decode_u32("IETH", bytes)
}

/// The `N` bytes of `b` at `at`. Callers pass constant offsets inside
/// fixed-size arrays, so the zero fallback is unreachable; it exists so that
/// no input can make the codec panic.
pub(crate) fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b.get(at..).and_then(|s| s.first_chunk::<N>()).copied().unwrap_or([0; N])
}

/// Writes `src` into `dst` at `at`; out-of-range writes are dropped (see [`array_at`]).
pub(crate) fn put_at(dst: &mut [u8], at: usize, src: &[u8]) {
    if let Some(slot) = dst.get_mut(at..).and_then(|s| s.get_mut(..src.len())) {
        slot.copy_from_slice(src);
    }
}
