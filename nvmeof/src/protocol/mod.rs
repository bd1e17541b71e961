//! NVMe, NVMe-oF and NVMe/RDMA wire layouts (docs/protocols.md §2; Linux
//! `nvme.h`/`nvme-rdma.h`, SPDK `nvmf_spec.h`).
//!
//! Every structure is a plain value with `decode(&[u8]) -> Result<Self, _>`
//! and `encode` (to a fixed-size array or a caller's buffer), so fuzz targets
//! and the packet decoder can call them directly. Decoders never panic; bad
//! input is a [`ProtocolError`] naming the structure, the field and the rule.
//! This module owns no queue and no transport: see `nvmeof::queue` for that.

mod cm;
mod command;
mod completion;
mod connect;
mod discovery;
mod error;
mod identify;
mod registers;
mod sgl;

pub use cm::*;
pub use command::*;
pub use completion::*;
pub use connect::*;
pub use discovery::*;
pub use error::*;
pub use identify::*;
pub use registers::*;
pub use sgl::*;

#[cfg(test)]
mod tests;

/// IANA-assigned service port of NVMe over Fabrics on RDMA: the port a
/// target's RDMA CM listener normally binds.
pub const NVME_RDMA_PORT: u16 = 4420;
/// Depth (entries) of the admin queue the initiator asks for: 32, sent as
/// HRQSIZE 32 / HSQSIZE 31 in [`CmRequest`] and SQSIZE 31 in Connect.
pub const ADMIN_QUEUE_DEPTH: u16 = 32;
/// Smallest queue depth (entries) a queue may have; with at most depth-1
/// commands outstanding, command ids run 0..=depth-2.
pub const MIN_QUEUE_DEPTH: u16 = 2;
/// Largest queue depth (entries) this initiator supports; builders such as
/// [`CmRequest::new`] and [`NvmeCommand::connect`] reject larger depths with
/// [`ProtocolError::Field`].
pub const MAX_QUEUE_DEPTH: u16 = 256;
/// Bytes of a submission queue entry, i.e. of a command capsule without
/// in-capsule data (see [`Command`]).
pub const COMMAND_LEN: usize = 64;
/// Bytes of a completion queue entry, the minimum response capsule (see
/// [`Completion`]).
pub const COMPLETION_LEN: usize = 16;
/// Bytes of an Identify data structure (Identify Controller and Identify
/// Namespace alike).
pub const IDENTIFY_LEN: usize = 4096;
/// Bytes of the Fabrics Connect data a Connect command's SGL points to (see
/// [`ConnectData`]).
pub const CONNECT_DATA_LEN: usize = 1024;
/// The well-known NQN of a discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Largest number of bytes one command may move: `min(2^24 - 1, page_size
/// << mdts)`, where `mdts` is Identify Controller MDTS (a power of two of
/// the memory page size) and `page_size` is in bytes. MDTS 0 means no limit
/// beyond the keyed SGL's 24-bit length, and so does a shift that overflows
/// `u64`.
pub fn max_transfer(page_size: u64, mdts: u8) -> u64 {
    let sgl = MAX_KEYED_SGL_LENGTH as u64;
    if mdts == 0 {
        return sgl;
    }
    page_size.checked_shl(mdts as u32).filter(|v| *v >> mdts == page_size).map_or(sgl, |v| v.min(sgl))
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A fixed-width ASCII field (space- or NUL-padded), trimmed.
pub(crate) fn text_at(b: &[u8], range: std::ops::Range<usize>) -> String {
    let raw = &b[range];
    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    // Only the valid UTF-8 prefix: a lossy conversion would grow invalid
    // bytes into 3-byte replacement characters that no longer fit the field,
    // so what we parse would not survive being written back.
    let text = match std::str::from_utf8(&raw[..end]) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&raw[..e.valid_up_to()]).unwrap_or_default(),
    };
    text.trim_end().to_string()
}

/// Writes `s` into a fixed-width field padded with `pad`, truncating.
pub(crate) fn put_text(b: &mut [u8], range: std::ops::Range<usize>, s: &str, pad: u8) {
    let field = &mut b[range];
    field.fill(pad);
    let n = s.len().min(field.len());
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Checks that `bytes` holds at least `need` bytes of `what`.
pub(crate) fn need(what: &'static str, bytes: &[u8], need: usize) -> Result<(), ProtocolError> {
    if bytes.len() < need { Err(ProtocolError::Short { what, len: bytes.len(), need }) } else { Ok(()) }
}
