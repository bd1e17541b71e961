//! The 16-byte completion queue entry and NVMe status.

use std::fmt;

use thiserror::Error;

use super::{COMPLETION_LEN, ProtocolError, need, put_u16, put_u64, u16_at, u64_at};

/// Status code types.
pub const SCT_GENERIC: u8 = 0;
pub const SCT_COMMAND_SPECIFIC: u8 = 1;
pub const SCT_MEDIA: u8 = 2;
pub const SCT_PATH: u8 = 3;

/// Generic status codes (SCT 0).
pub const SC_SUCCESS: u8 = 0x00;
pub const SC_INVALID_OPCODE: u8 = 0x01;
pub const SC_INVALID_FIELD: u8 = 0x02;
pub const SC_DATA_TRANSFER_ERROR: u8 = 0x04;
pub const SC_INTERNAL: u8 = 0x06;
pub const SC_SGL_INVALID_DATA_LENGTH: u8 = 0x0F;
pub const SC_SGL_INVALID_TYPE: u8 = 0x11;
pub const SC_INVALID_NAMESPACE: u8 = 0x0B;
pub const SC_LBA_OUT_OF_RANGE: u8 = 0x80;
pub const SC_CAPACITY_EXCEEDED: u8 = 0x81;
pub const SC_NS_NOT_READY: u8 = 0x82;

/// Command-specific status codes (SCT 1) of Fabrics commands.
pub const SC_INVALID_QUEUE_SIZE: u8 = 0x02;
pub const SC_CONNECT_INCOMPATIBLE_FORMAT: u8 = 0x80;
pub const SC_CONNECT_CONTROLLER_BUSY: u8 = 0x81;
pub const SC_CONNECT_INVALID_PARAMETERS: u8 = 0x82;
pub const SC_CONNECT_RESTART_DISCOVERY: u8 = 0x83;
pub const SC_CONNECT_INVALID_HOST: u8 = 0x84;
pub const SC_AUTH_REQUIRED: u8 = 0x91;

/// A decoded status field (phase bit dropped).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    pub sc: u8,
    pub sct: u8,
    /// Command retry delay (bits 12:11).
    pub crd: u8,
    pub more: bool,
    pub dnr: bool,
}

impl Status {
    pub const SUCCESS: Status = Status { sc: 0, sct: 0, crd: 0, more: false, dnr: false };

    /// From the 16-bit field as received (bit 0 is the phase tag).
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

    /// A status (not retryable when `dnr`) of type `sct`, code `sc`.
    pub fn new(sct: u8, sc: u8, dnr: bool) -> Status {
        Status { sc, sct: sct & 7, crd: 0, more: false, dnr }
    }

    /// The 16-bit field with phase tag `phase`.
    pub fn to_field(self, phase: bool) -> u16 {
        let s = self.sc as u16
            | ((self.sct & 7) as u16) << 8
            | ((self.crd & 3) as u16) << 11
            | (self.more as u16) << 13
            | (self.dnr as u16) << 14;
        s << 1 | phase as u16
    }

    pub fn is_success(self) -> bool {
        self.sc == 0 && self.sct == 0
    }

    /// What the status means, in words.
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

/// A completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Completion {
    /// DW0 (low 32 bits) and DW1.
    pub result: u64,
    pub sq_head: u16,
    pub sq_id: u16,
    pub cid: u16,
    /// The status field exactly as received, phase bit included.
    pub status_field: u16,
}

impl Completion {
    pub fn new(cid: u16, status: Status, result: u64) -> Self {
        Completion { result, sq_head: 0, sq_id: 0, cid, status_field: status.to_field(false) }
    }

    pub fn status(&self) -> Status {
        Status::from_field(self.status_field)
    }

    pub fn dw0(&self) -> u32 {
        self.result as u32
    }

    pub fn encode(&self) -> [u8; COMPLETION_LEN] {
        let mut b = [0u8; COMPLETION_LEN];
        put_u64(&mut b, 0, self.result);
        put_u16(&mut b, 8, self.sq_head);
        put_u16(&mut b, 10, self.sq_id);
        put_u16(&mut b, 12, self.cid);
        put_u16(&mut b, 14, self.status_field);
        b
    }

    /// Decodes the first 16 bytes (a response may be longer: IORCSZ).
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

    /// `Ok` when the command succeeded, else the status as an error.
    pub fn check(&self) -> Result<(), StatusError> {
        let status = self.status();
        if status.is_success() { Ok(()) } else { Err(StatusError { status, result: self.result }) }
    }
}

/// A command that completed with a non-zero NVMe status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("NVMe status: {status}")]
pub struct StatusError {
    pub status: Status,
    /// DW0/DW1 of the completion (e.g. the invalid parameter of a Connect).
    pub result: u64,
}

impl StatusError {
    pub fn sc(&self) -> u8 {
        self.status.sc
    }
    pub fn sct(&self) -> u8 {
        self.status.sct
    }
    pub fn dnr(&self) -> bool {
        self.status.dnr
    }
}
