//! The 16-byte completion queue entry and NVMe status.

use std::fmt;

use thiserror::Error;

use super::{COMPLETION_LEN, ProtocolError, need, put_u16, put_u64, u16_at, u64_at};

/// Status Code Type (SCT) 0h: Generic Command Status.
pub const SCT_GENERIC: u8 = 0;
/// Status Code Type 1h: Command Specific Status.
pub const SCT_COMMAND_SPECIFIC: u8 = 1;
/// Status Code Type 2h: Media and Data Integrity Errors.
pub const SCT_MEDIA: u8 = 2;
/// Status Code Type 3h: Path Related Status.
pub const SCT_PATH: u8 = 3;

/// Generic status (SCT 0) 00h: Successful Completion.
pub const SC_SUCCESS: u8 = 0x00;
/// Generic status 01h: Invalid Command Opcode.
pub const SC_INVALID_OPCODE: u8 = 0x01;
/// Generic status 02h: Invalid Field in Command.
pub const SC_INVALID_FIELD: u8 = 0x02;
/// Generic status 04h: Data Transfer Error.
pub const SC_DATA_TRANSFER_ERROR: u8 = 0x04;
/// Generic status 06h: Internal Error.
pub const SC_INTERNAL: u8 = 0x06;
/// Generic status 0Fh: Data SGL Length Invalid (the SGL names fewer or
/// more bytes than the command moves).
pub const SC_SGL_INVALID_DATA_LENGTH: u8 = 0x0F;
/// Generic status 11h: SGL Descriptor Type Invalid.
pub const SC_SGL_INVALID_TYPE: u8 = 0x11;
/// Generic status 0Bh: Invalid Namespace or Format.
pub const SC_INVALID_NAMESPACE: u8 = 0x0B;
/// Generic status 80h of the NVM command set: LBA Out of Range.
pub const SC_LBA_OUT_OF_RANGE: u8 = 0x80;
/// Generic status 81h of the NVM command set: Capacity Exceeded.
pub const SC_CAPACITY_EXCEEDED: u8 = 0x81;
/// Generic status 82h of the NVM command set: Namespace Not Ready.
pub const SC_NS_NOT_READY: u8 = 0x82;

/// Command specific status (SCT 1) 02h: Invalid Queue Size (the queue size
/// asked for is not supported).
pub const SC_INVALID_QUEUE_SIZE: u8 = 0x02;
/// Command specific status 80h of Connect: Connect Incompatible Format
/// (RECFMT not supported).
pub const SC_CONNECT_INCOMPATIBLE_FORMAT: u8 = 0x80;
/// Command specific status 81h of Connect: Connect Controller Busy.
pub const SC_CONNECT_CONTROLLER_BUSY: u8 = 0x81;
/// Command specific status 82h of Connect: Connect Invalid Parameters; DW0
/// says which one (see [`InvalidParameter`](super::InvalidParameter)).
pub const SC_CONNECT_INVALID_PARAMETERS: u8 = 0x82;
/// Command specific status 83h of Connect: Connect Restart Discovery.
pub const SC_CONNECT_RESTART_DISCOVERY: u8 = 0x83;
/// Command specific status 84h of Connect: Connect Invalid Host (the host
/// NQN is not allowed on the subsystem).
pub const SC_CONNECT_INVALID_HOST: u8 = 0x84;
/// Command specific status 91h: Authentication Required.
pub const SC_AUTH_REQUIRED: u8 = 0x91;

/// A decoded status field (phase bit dropped). Bit positions below count
/// in the status without the phase tag, i.e. bit n is bit n + 1 of the
/// 16-bit field in the completion.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Status Code (SC, bits 7:0), read according to `sct`.
    pub sc: u8,
    /// Status Code Type (SCT, bits 10:8), one of the `SCT_*` constants.
    pub sct: u8,
    /// Command retry delay (bits 12:11).
    pub crd: u8,
    /// More (M, bit 13): the controller has more status in a log page.
    pub more: bool,
    /// Do Not Retry (DNR, bit 14): the same command would fail again.
    pub dnr: bool,
}

impl Status {
    /// Successful Completion: SCT 0, SC 0, no flags.
    pub const SUCCESS: Status = Status { sc: 0, sct: 0, crd: 0, more: false, dnr: false };

    /// From the 16-bit field as received (bit 0 is the phase tag, which is
    /// dropped).
    pub fn from_field(field: u16) -> Status {
        let s = field >> 1;
        Status {
            sc: s as u8,
            sct: ((s >> 8) & 0x7) as u8,
            crd: ((s >> 11) & 0x3) as u8,
            more: s & (1 << 13) != 0,
            dnr: s & (1 << 14) != 0,
        }
    }

    /// A status (not retryable when `dnr`) of type `sct` (low 3 bits kept),
    /// code `sc`, CRD 0 and More clear.
    pub fn new(sct: u8, sc: u8, dnr: bool) -> Status {
        Status { sc, sct: sct & 7, crd: 0, more: false, dnr }
    }

    /// The 16-bit field (completion bytes 14..16) with phase tag `phase` in
    /// bit 0; SCT and CRD are masked to their widths.
    pub fn to_field(self, phase: bool) -> u16 {
        let s = self.sc as u16
            | ((self.sct & 7) as u16) << 8
            | ((self.crd & 3) as u16) << 11
            | (self.more as u16) << 13
            | (self.dnr as u16) << 14;
        s << 1 | phase as u16
    }

    /// Whether the command succeeded: SC and SCT both zero (CRD, More and
    /// DNR are not looked at).
    pub fn is_success(self) -> bool {
        self.sc == 0 && self.sct == 0
    }

    /// What the status means, in words; codes this module has no constant
    /// for read `"unknown status"` (SCT 2 and 3 are named by type only).
    pub fn describe(self) -> &'static str {
        match (self.sct, self.sc) {
            (0, SC_SUCCESS) => "success",
            (0, SC_INVALID_OPCODE) => "invalid command opcode",
            (0, SC_INVALID_FIELD) => "invalid field in command",
            (0, SC_DATA_TRANSFER_ERROR) => "data transfer error",
            (0, SC_INTERNAL) => "internal error",
            (0, SC_INVALID_NAMESPACE) => "invalid namespace or format",
            (0, SC_SGL_INVALID_DATA_LENGTH) => "SGL data block length invalid",
            (0, SC_SGL_INVALID_TYPE) => "SGL descriptor type invalid",
            (0, SC_LBA_OUT_OF_RANGE) => "LBA out of range",
            (0, SC_CAPACITY_EXCEEDED) => "capacity exceeded",
            (0, SC_NS_NOT_READY) => "namespace not ready",
            (1, SC_INVALID_QUEUE_SIZE) => "invalid queue size",
            (1, SC_CONNECT_INCOMPATIBLE_FORMAT) => "connect: incompatible format",
            (1, SC_CONNECT_CONTROLLER_BUSY) => "connect: controller busy",
            (1, SC_CONNECT_INVALID_PARAMETERS) => "connect: invalid parameters",
            (1, SC_CONNECT_RESTART_DISCOVERY) => "connect: restart discovery",
            (1, SC_CONNECT_INVALID_HOST) => "connect: invalid host",
            (1, SC_AUTH_REQUIRED) => "authentication required",
            (2, _) => "media or data integrity error",
            (3, _) => "path error",
            _ => "unknown status",
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Status {
    /// `invalid field in command (SCT 0x0, SC 0x02, DNR)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SCT {:#x}, SC {:#04x}", self.describe(), self.sct, self.sc)?;
        if self.dnr {
            f.write_str(", DNR")?;
        }
        if self.more {
            f.write_str(", More")?;
        }
        f.write_str(")")
    }
}

/// A completion queue entry (the 16 bytes of an NVMe/RDMA response
/// capsule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Completion {
    /// DW0 (low 32 bits) and DW1, bytes 0..8: the command-specific result
    /// (e.g. a Property Get value, or the controller id of a Connect).
    pub result: u64,
    /// SQ Head Pointer (SQHD, bytes 8..10, DW2 bits 15:0).
    pub sq_head: u16,
    /// SQ Identifier (SQID, bytes 10..12, DW2 bits 31:16).
    pub sq_id: u16,
    /// Command Identifier (CID, bytes 12..14, DW3 bits 15:0) of the command
    /// this completes.
    pub cid: u16,
    /// The status field exactly as received, phase bit included (bytes
    /// 14..16, DW3 bits 31:16: Phase Tag in bit 0, status in bits 15:1).
    pub status_field: u16,
}

impl Completion {
    /// A completion of command `cid` with `status` and `result`, SQ head
    /// and SQ id 0, and phase tag 0.
    pub fn new(cid: u16, status: Status, result: u64) -> Self {
        Completion { result, sq_head: 0, sq_id: 0, cid, status_field: status.to_field(false) }
    }

    /// The decoded status (phase tag dropped).
    pub fn status(&self) -> Status {
        Status::from_field(self.status_field)
    }

    /// DW0, the low 32 bits of [`Completion::result`].
    pub fn dw0(&self) -> u32 {
        self.result as u32
    }

    /// The 16 bytes of the entry, every field little-endian.
    pub fn encode(&self) -> [u8; COMPLETION_LEN] {
        let mut b = [0u8; COMPLETION_LEN];
        put_u64(&mut b, 0, self.result);
        put_u16(&mut b, 8, self.sq_head);
        put_u16(&mut b, 10, self.sq_id);
        put_u16(&mut b, 12, self.cid);
        put_u16(&mut b, 14, self.status_field);
        b
    }

    /// Decodes the first 16 bytes (a response may be longer: IORCSZ);
    /// fewer is [`ProtocolError::Short`].
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("Completion", b, COMPLETION_LEN)?;
        Ok(Completion {
            result: u64_at(b, 0),
            sq_head: u16_at(b, 8),
            sq_id: u16_at(b, 10),
            cid: u16_at(b, 12),
            status_field: u16_at(b, 14),
        })
    }

    /// `Ok` when the command succeeded ([`Status::is_success`]), else the
    /// status and result as a [`StatusError`].
    pub fn check(&self) -> Result<(), StatusError> {
        let status = self.status();
        if status.is_success() { Ok(()) } else { Err(StatusError { status, result: self.result }) }
    }
}

/// A command that completed with a non-zero NVMe status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("NVMe status: {status}")]
pub struct StatusError {
    /// The status the completion carried.
    pub status: Status,
    /// DW0/DW1 of the completion (e.g. the invalid parameter of a Connect).
    pub result: u64,
}

impl StatusError {
    /// The Status Code (SC).
    pub fn sc(&self) -> u8 {
        self.status.sc
    }
    /// The Status Code Type (SCT).
    pub fn sct(&self) -> u8 {
        self.status.sct
    }
    /// Whether Do Not Retry was set.
    pub fn dnr(&self) -> bool {
        self.status.dnr
    }
}
