//! SGL descriptors of a command's data pointer (NVMe base spec §4.1.8;
//! NVMe/RDMA uses keyed data blocks, and offset data blocks for in-capsule
//! data).

use super::{ProtocolError, put_u32, put_u64, u32_at, u64_at};
use crate::transport::MrInfo;

/// Largest Length of one keyed SGL data block: the field is 24 bits
/// (descriptor bytes 10:8), so 2^24 - 1 bytes.
pub const MAX_KEYED_SGL_LENGTH: u32 = 0x00FF_FFFF;
/// SGL Identifier byte (descriptor byte 15) of a Keyed SGL Data Block
/// (type 4h, bits 7:4) with subtype Address (0h, bits 3:0).
pub const SGL_KEYED_DATA_BLOCK: u8 = 0x40;
/// SGL Identifier byte of a Keyed SGL Data Block with subtype Invalidate
/// Key (Fh): the target invalidates the key when it responds.
pub const SGL_KEYED_INVALIDATE: u8 = 0x4F;
/// SGL Identifier byte of an SGL Data Block (type 0h) with subtype Offset
/// (1h): the data is in the command capsule.
pub const SGL_IN_CAPSULE: u8 = 0x01;
/// Bytes of one SGL descriptor; SGL1 of a command is bytes 24..40.
pub const SGL_LEN: usize = 16;

/// SGL Entry 1 of a command (bytes 24..40 of the submission queue entry),
/// the command's data pointer on NVMe/RDMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Sgl {
    /// No data: a keyed data block of length 0, as Linux sends it
    /// (`nvme_rdma_set_sg_null`). nvmet-rdma refuses an all-zero descriptor
    /// (data block, address subtype) with "invalid field".
    #[default]
    None,
    /// Remote memory of the host: `len` bytes at `addr` under `key`.
    Keyed {
        /// Address (bytes 7:0): where in the host's region the target's RDMA
        /// READ or WRITE starts.
        addr: u64,
        /// Length in bytes (bytes 10:8, 24 bits; at most
        /// [`MAX_KEYED_SGL_LENGTH`]); [`Sgl::encode`] writes only the low
        /// 24 bits.
        len: u32,
        /// Key (bytes 14:11): the rkey of the host's memory region.
        key: u32,
        /// Subtype Invalidate Key ([`SGL_KEYED_INVALIDATE`]) instead of
        /// Address ([`SGL_KEYED_DATA_BLOCK`]).
        invalidate: bool,
    },
    /// `len` bytes of in-capsule data at `offset` past the 64-byte command.
    InCapsule {
        /// Address field (bytes 7:0) used as the offset of the data from the
        /// start of the capsule's data area, in bytes.
        offset: u64,
        /// Length in bytes (bytes 11:8, 32 bits).
        len: u32,
    },
}

impl Sgl {
    /// A keyed data block (subtype Address) of `len` bytes at `addr` under
    /// rkey `key`; a `len` above [`MAX_KEYED_SGL_LENGTH`] is
    /// [`ProtocolError::Field`] (`Sgl.length`).
    pub fn keyed(addr: u64, len: u64, key: u32) -> Result<Self, ProtocolError> {
        if len > MAX_KEYED_SGL_LENGTH as u64 {
            return Err(ProtocolError::field("Sgl", "length", len, "a keyed SGL carries at most 2^24-1 bytes"));
        }
        Ok(Sgl::Keyed { addr, len: len as u32, key, invalidate: false })
    }

    /// A keyed data block over `len` bytes at byte `offset` of the
    /// registered region `mr`, using its address and rkey. A range past the
    /// region's end is [`ProtocolError::Field`] (`Sgl.offset+length`), a
    /// length above [`MAX_KEYED_SGL_LENGTH`] as in [`Sgl::keyed`].
    pub fn for_region(mr: &MrInfo, offset: u64, len: u64) -> Result<Self, ProtocolError> {
        match offset.checked_add(len) {
            Some(end) if end <= mr.len => {}
            _ => {
                return Err(ProtocolError::field(
                    "Sgl",
                    "offset+length",
                    offset.saturating_add(len),
                    "exceeds the registered region",
                ));
            }
        }
        Sgl::keyed(mr.addr.wrapping_add(offset), len, mr.rkey)
    }

    /// Bytes of data the descriptor names (0 for [`Sgl::None`]).
    pub fn len(&self) -> u32 {
        match *self {
            Sgl::None => 0,
            Sgl::Keyed { len, .. } | Sgl::InCapsule { len, .. } => len,
        }
    }

    /// Whether the descriptor names no data (length 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The 16 descriptor bytes; [`Sgl::None`] becomes a keyed data block
    /// with address, length and key all zero.
    pub fn encode(&self) -> [u8; SGL_LEN] {
        let mut b = [0u8; SGL_LEN];
        match *self {
            Sgl::None => b[15] = SGL_KEYED_DATA_BLOCK,
            Sgl::Keyed { addr, len, key, invalidate } => {
                put_u64(&mut b, 0, addr);
                b[8..11].copy_from_slice(&len.to_le_bytes()[..3]);
                put_u32(&mut b, 11, key);
                b[15] = if invalidate { SGL_KEYED_INVALIDATE } else { SGL_KEYED_DATA_BLOCK };
            }
            Sgl::InCapsule { offset, len } => {
                put_u64(&mut b, 0, offset);
                put_u32(&mut b, 8, len);
                b[15] = SGL_IN_CAPSULE;
            }
        }
        b
    }

    /// Decodes a descriptor: keyed data blocks (address subtype, with or
    /// without invalidate; all-zero fields mean no data), offset data
    /// blocks, or all-zero bytes for none. Fewer than 16 bytes is
    /// [`ProtocolError::Short`]; any other SGL Identifier is
    /// [`ProtocolError::Field`] (`Sgl.type`).
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        super::need("Sgl", b, SGL_LEN)?;
        let kind = b[15];
        match kind {
            SGL_KEYED_DATA_BLOCK if b[..15].iter().all(|&x| x == 0) => Ok(Sgl::None),
            SGL_KEYED_DATA_BLOCK | SGL_KEYED_INVALIDATE => Ok(Sgl::Keyed {
                addr: u64_at(b, 0),
                len: u32::from_le_bytes([b[8], b[9], b[10], 0]),
                key: u32_at(b, 11),
                invalidate: kind == SGL_KEYED_INVALIDATE,
            }),
            SGL_IN_CAPSULE => Ok(Sgl::InCapsule { offset: u64_at(b, 0), len: u32_at(b, 8) }),
            0 if b[..SGL_LEN].iter().all(|&x| x == 0) => Ok(Sgl::None),
            _ => Err(ProtocolError::field(
                "Sgl",
                "type",
                kind.into(),
                "only keyed (0x40, 0x4F) and in-capsule (0x01) descriptors",
            )),
        }
    }
}
