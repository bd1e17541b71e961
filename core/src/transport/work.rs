//! Work requests and completions of the [`Transport`](super::Transport)
//! trait: SGEs, send operations, send and receive WRs, completion statuses
//! and opcodes, and what `wait` returns.

use std::fmt;

use super::*;

/// A remote memory location: the (address, rkey) pair of RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    pub addr: u64,
    pub rkey: u32,
}

/// A scatter/gather element: `len` bytes at `offset` of local region `mr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    pub mr: MrId,
    pub offset: u64,
    pub len: u32,
}

impl Sge {
    pub fn new(mr: MrId, offset: u64, len: u32) -> Self {
        Sge { mr, offset, len }
    }
}

/// The operation of a send work request.
///
/// Immediates are the 32-bit value as carried on the wire in network order:
/// the verbs backend converts with `to_be`/`from_be` at the boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendOp {
    Send,
    SendWithImm { imm: u32 },
    Write { remote: RemoteAddr },
    WriteWithImm { remote: RemoteAddr, imm: u32 },
    Read { remote: RemoteAddr },
}

impl SendOp {
    pub fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendWithImm { .. } => "SEND_WITH_IMM",
            SendOp::Write { .. } => "RDMA_WRITE",
            SendOp::WriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::Read { .. } => "RDMA_READ",
        }
    }

    /// The completion opcode a successful WR of this kind reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } => WcOpcode::Send,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
        }
    }

    pub fn imm(&self) -> Option<u32> {
        match *self {
            SendOp::SendWithImm { imm } | SendOp::WriteWithImm { imm, .. } => Some(imm),
            _ => None,
        }
    }

    pub fn remote(&self) -> Option<RemoteAddr> {
        match *self {
            SendOp::Write { remote } | SendOp::WriteWithImm { remote, .. } | SendOp::Read { remote } => Some(remote),
            _ => None,
        }
    }
}

/// A send work request. `sges` is borrowed: the transport copies what it
/// needs when the WR is posted, as verbs does.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: SendOp,
    pub sges: &'a [Sge],
    pub signaled: bool,
    pub solicited: bool,
}

impl<'a> SendWr<'a> {
    /// A signalled WR with no solicited event.
    pub fn new(wr_id: u64, op: SendOp, sges: &'a [Sge]) -> Self {
        SendWr { wr_id, op, sges, signaled: true, solicited: false }
    }

    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }

    /// Total bytes described by the scatter/gather list.
    pub fn len(&self) -> u64 {
        self.sges.iter().map(|s| s.len as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sges: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        RecvWr { wr_id, sges }
    }
}

/// Completion status (`enum ibv_wc_status`), same order and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum WcStatus {
    Success = 0,
    LocLenErr,
    LocQpOpErr,
    LocEecOpErr,
    LocProtErr,
    WrFlushErr,
    MwBindErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    LocRddViolErr,
    RemInvRdReqErr,
    RemAbortErr,
    InvEecnErr,
    InvEecStateErr,
    FatalErr,
    RespTimeoutErr,
    GeneralErr,
}

impl WcStatus {
    const ALL: [WcStatus; 22] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
    ];

    /// The status for a raw `ibv_wc_status` value.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Self::ALL.get(raw as usize).copied()
    }

    /// The name `ibv_wc_status_str` style, upper case with underscores.
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "SUCCESS",
            WcStatus::LocLenErr => "LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
            WcStatus::LocEecOpErr => "LOC_EEC_OP_ERR",
            WcStatus::LocProtErr => "LOC_PROT_ERR",
            WcStatus::WrFlushErr => "WR_FLUSH_ERR",
            WcStatus::MwBindErr => "MW_BIND_ERR",
            WcStatus::BadRespErr => "BAD_RESP_ERR",
            WcStatus::LocAccessErr => "LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "REM_ACCESS_ERR",
            WcStatus::RemOpErr => "REM_OP_ERR",
            WcStatus::RetryExcErr => "RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
            WcStatus::LocRddViolErr => "LOC_RDD_VIOL_ERR",
            WcStatus::RemInvRdReqErr => "REM_INV_RD_REQ_ERR",
            WcStatus::RemAbortErr => "REM_ABORT_ERR",
            WcStatus::InvEecnErr => "INV_EECN_ERR",
            WcStatus::InvEecStateErr => "INV_EEC_STATE_ERR",
            WcStatus::FatalErr => "FATAL_ERR",
            WcStatus::RespTimeoutErr => "RESP_TIMEOUT_ERR",
            WcStatus::GeneralErr => "GENERAL_ERR",
        }
    }

    /// Parses the name printed by [`WcStatus::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.name().eq_ignore_ascii_case(name))
    }

    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Completion opcode (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    Recv,
    RecvRdmaWithImm,
}

impl WcOpcode {
    pub fn name(self) -> &'static str {
        match self {
            WcOpcode::Send => "SEND",
            WcOpcode::RdmaWrite => "RDMA_WRITE",
            WcOpcode::RdmaRead => "RDMA_READ",
            WcOpcode::Recv => "RECV",
            WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
        }
    }
}

/// A work completion.
///
/// As in verbs, `opcode` and `byte_len` are meaningful only when `status` is
/// SUCCESS; for errors the opcode is the one of the WR when it is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    /// The immediate (wire value, network order) when the message carried one.
    pub imm: Option<u32>,
    pub qp: QpId,
    /// Vendor error syndrome; 0 in the simulator.
    pub vendor_err: u32,
}

/// What `Transport::wait` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// At least one of the watched CQs has a completion, or a CM event is pending.
    Ready,
    /// The deadline passed first.
    TimedOut,
}
