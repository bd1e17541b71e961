//! RDMA CM private data of NVMe/RDMA (NVMe-oF RDMA transport binding §3.x;
//! Linux `struct nvme_rdma_cm_req/rep/rej`).

use super::{MAX_QUEUE_DEPTH, MIN_QUEUE_DEPTH, ProtocolError, need, put_u16, u16_at};

/// Bytes of the connect request private data the host sends.
pub const CM_REQUEST_LEN: usize = 32;
/// Bytes of the accept private data [`CmAccept::encode`] produces.
pub const CM_ACCEPT_LEN: usize = 32;
/// Bytes of the reject private data (RECFMT and STS).
pub const CM_REJECT_LEN: usize = 4;

/// The host's connect request: which queue, and its sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRequest {
    /// Record Format (RECFMT, bytes 0..2); 0 is the only format.
    pub recfmt: u16,
    /// Queue ID (QID, bytes 2..4): 0 for the admin queue.
    pub qid: u16,
    /// Host receive queue size (HRQSIZE, bytes 4..6; = queue depth).
    pub hrqsize: u16,
    /// Host send queue size (HSQSIZE, bytes 6..8), 0's based (= depth - 1).
    pub hsqsize: u16,
    /// Controller ID (CNTLID, bytes 8..10): 0 for the admin queue; the
    /// controller id for an I/O queue.
    pub cntlid: u16,
}

impl CmRequest {
    /// The request for queue `qid` of `depth` entries (2..=256): HRQSIZE =
    /// depth, HSQSIZE = depth - 1. The admin queue always carries controller
    /// id 0, whatever `cntlid` says. Another depth is
    /// [`ProtocolError::Field`] (`CmRequest.depth`).
    pub fn new(qid: u16, depth: u16, cntlid: u16) -> Result<Self, ProtocolError> {
        check_depth("CmRequest", depth)?;
        Ok(CmRequest { recfmt: 0, qid, hrqsize: depth, hsqsize: depth - 1, cntlid: if qid == 0 { 0 } else { cntlid } })
    }

    /// The 32 bytes of private data; bytes 10..32 are reserved (zero).
    pub fn encode(&self) -> [u8; CM_REQUEST_LEN] {
        let mut b = [0u8; CM_REQUEST_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.qid);
        put_u16(&mut b, 4, self.hrqsize);
        put_u16(&mut b, 6, self.hsqsize);
        put_u16(&mut b, 8, self.cntlid);
        b
    }

    /// Decodes (and validates, as a target does) connect request private data.
    /// Only the first 10 bytes are read: fewer is [`ProtocolError::Short`],
    /// a RECFMT other than 0 is [`ProtocolError::Field`]
    /// (`CmRequest.recfmt`). The sizes are checked by [`CmRequest::check`].
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("CmRequest", b, 10)?;
        let r = CmRequest {
            recfmt: u16_at(b, 0),
            qid: u16_at(b, 2),
            hrqsize: u16_at(b, 4),
            hsqsize: u16_at(b, 6),
            cntlid: u16_at(b, 8),
        };
        if r.recfmt != 0 {
            return Err(ProtocolError::field("CmRequest", "recfmt", r.recfmt.into(), "must be 0"));
        }
        Ok(r)
    }

    /// The reject status a target answers this request with, if any, for a
    /// target whose queues hold at most `max_depth` entries: RECFMT must be
    /// 0, HRQSIZE 2..=`max_depth`, HSQSIZE 1..`max_depth`. QID and the
    /// relation of HSQSIZE to HRQSIZE are not checked.
    pub fn check(&self, max_depth: u16) -> Option<RejectStatus> {
        if self.recfmt != 0 {
            return Some(RejectStatus::InvalidRecfmt);
        }
        if self.hrqsize < MIN_QUEUE_DEPTH || self.hrqsize > max_depth {
            return Some(RejectStatus::InvalidHrqsize);
        }
        if self.hsqsize == 0 || self.hsqsize >= max_depth {
            return Some(RejectStatus::InvalidHsqsize);
        }
        None
    }
}

fn check_depth(what: &'static str, depth: u16) -> Result<(), ProtocolError> {
    if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&depth) {
        return Err(ProtocolError::field(what, "depth", depth.into(), "must be 2..=256"));
    }
    Ok(())
}

/// The target's accept private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmAccept {
    /// Record Format (RECFMT, bytes 0..2); must be 0.
    pub recfmt: u16,
    /// Controller receive queue size (CRQSIZE, bytes 2..4): commands the
    /// target can hold.
    pub crqsize: u16,
}

impl CmAccept {
    /// The 32 bytes of private data; bytes 4..32 are zero.
    pub fn encode(&self) -> [u8; CM_ACCEPT_LEN] {
        let mut b = [0u8; CM_ACCEPT_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.crqsize);
        b
    }

    /// Decodes accept private data (Linux sends 8 bytes, padded by the CM).
    /// Fewer than 4 bytes is [`ProtocolError::Short`]; a RECFMT other than 0
    /// or a CRQSIZE of 0 is [`ProtocolError::Field`].
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("CmAccept", b, 4)?;
        let a = CmAccept { recfmt: u16_at(b, 0), crqsize: u16_at(b, 2) };
        if a.recfmt != 0 {
            return Err(ProtocolError::field("CmAccept", "recfmt", a.recfmt.into(), "must be 0"));
        }
        if a.crqsize == 0 {
            return Err(ProtocolError::field("CmAccept", "crqsize", 0, "must be at least 1"));
        }
        Ok(a)
    }
}

/// Why a target rejected a connect request (`enum nvme_rdma_cm_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectStatus {
    /// 1: the private data has an invalid length.
    InvalidLength,
    /// 2: RECFMT is not supported.
    InvalidRecfmt,
    /// 3: QID is invalid.
    InvalidQid,
    /// 4: HSQSIZE is invalid.
    InvalidHsqsize,
    /// 5: HRQSIZE is invalid.
    InvalidHrqsize,
    /// 6: the target has no resources for the queue.
    NoResources,
    /// 7: the inbound RDMA Read queue depth (IRD) of the RDMA CM connect parameters is
    /// invalid.
    InvalidIrd,
    /// 8: the outbound RDMA Read queue depth (ORD) of the RDMA CM connect parameters is
    /// invalid.
    InvalidOrd,
    /// Any other code, kept as received.
    Other(u16),
}

impl RejectStatus {
    /// The 16-bit STS value of the reject private data.
    pub fn code(self) -> u16 {
        match self {
            RejectStatus::InvalidLength => 1,
            RejectStatus::InvalidRecfmt => 2,
            RejectStatus::InvalidQid => 3,
            RejectStatus::InvalidHsqsize => 4,
            RejectStatus::InvalidHrqsize => 5,
            RejectStatus::NoResources => 6,
            RejectStatus::InvalidIrd => 7,
            RejectStatus::InvalidOrd => 8,
            RejectStatus::Other(c) => c,
        }
    }

    /// The status of STS value `c`; unknown values become
    /// [`RejectStatus::Other`].
    pub fn from_code(c: u16) -> Self {
        match c {
            1 => RejectStatus::InvalidLength,
            2 => RejectStatus::InvalidRecfmt,
            3 => RejectStatus::InvalidQid,
            4 => RejectStatus::InvalidHsqsize,
            5 => RejectStatus::InvalidHrqsize,
            6 => RejectStatus::NoResources,
            7 => RejectStatus::InvalidIrd,
            8 => RejectStatus::InvalidOrd,
            c => RejectStatus::Other(c),
        }
    }

    /// What the status means, in words.
    pub fn describe(self) -> &'static str {
        match self {
            RejectStatus::InvalidLength => "invalid private data length",
            RejectStatus::InvalidRecfmt => "invalid record format",
            RejectStatus::InvalidQid => "invalid queue id",
            RejectStatus::InvalidHsqsize => "invalid host send queue size",
            RejectStatus::InvalidHrqsize => "invalid host receive queue size",
            RejectStatus::NoResources => "target out of resources",
            RejectStatus::InvalidIrd => "invalid IRD",
            RejectStatus::InvalidOrd => "invalid ORD",
            RejectStatus::Other(_) => "unknown reason",
        }
    }
}

impl std::fmt::Display for RejectStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.describe(), self.code())
    }
}

/// The target's reject private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmReject {
    /// Record Format (RECFMT, bytes 0..2); not checked when decoding.
    pub recfmt: u16,
    /// Status (STS, bytes 2..4): why the target rejected.
    pub status: RejectStatus,
}

impl CmReject {
    /// A reject of RECFMT 0 with `status`.
    pub fn new(status: RejectStatus) -> Self {
        CmReject { recfmt: 0, status }
    }

    /// The 4 bytes of private data.
    pub fn encode(&self) -> [u8; CM_REJECT_LEN] {
        let mut b = [0u8; CM_REJECT_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.status.code());
        b
    }

    /// Decodes the first 4 bytes; fewer is [`ProtocolError::Short`]. Any STS
    /// value decodes (see [`RejectStatus::from_code`]).
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("CmReject", b, CM_REJECT_LEN)?;
        Ok(CmReject { recfmt: u16_at(b, 0), status: RejectStatus::from_code(u16_at(b, 2)) })
    }
}
