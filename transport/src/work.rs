//! Work requests and completions of the [`Transport`](super::Transport)
//! trait: SGEs, send operations, send and receive WRs, completion statuses
//! and opcodes, and what `wait` returns.

use std::fmt;

use super::*;

/// A remote memory location: the (address, rkey) pair of RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// The virtual address in the peer's region (RETH VA): its `MrInfo::addr`
    /// plus an offset.
    pub addr: u64,
    /// The peer region's rkey (RETH R_Key).
    pub rkey: u32,
}

/// A scatter/gather element: `len` bytes at `offset` of local region `mr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    /// The local region; it must belong to the QP's PD.
    pub mr: MrId,
    /// Byte offset in the region.
    pub offset: u64,
    /// Byte count; `offset + len` must lie inside the region.
    pub len: u32,
}

impl Sge {
    /// `len` bytes at `offset` of `mr`.
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
    /// SEND (`IBV_WR_SEND`): the data lands in the peer's next posted
    /// receive, which completes as RECV.
    Send,
    /// SEND with immediate (`IBV_WR_SEND_WITH_IMM`): as `Send`, and the
    /// peer's RECV completion carries `imm`.
    SendWithImm {
        /// The immediate, as on the wire (see above).
        imm: u32,
    },
    /// RDMA WRITE (`IBV_WR_RDMA_WRITE`): the data goes to `remote`; the peer
    /// posts nothing and sees no completion.
    Write {
        /// Where the data goes; its region must grant REMOTE_WRITE (else
        /// REM_ACCESS_ERR).
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate (`IBV_WR_RDMA_WRITE_WITH_IMM`): as `Write`,
    /// and it also consumes a posted receive at the peer, which completes as
    /// RECV_RDMA_WITH_IMM carrying `imm` and the written length.
    WriteWithImm {
        /// Where the data goes; its region must grant REMOTE_WRITE.
        remote: RemoteAddr,
        /// The immediate, as on the wire (see above).
        imm: u32,
    },
    /// RDMA READ (`IBV_WR_RDMA_READ`): the bytes at `remote` are fetched into
    /// the WR's SGEs.
    Read {
        /// Where the data comes from; its region must grant REMOTE_READ.
        remote: RemoteAddr,
    },
    /// Atomic compare-and-swap (`IBV_WR_ATOMIC_CMP_AND_SWP`): if the 8 bytes
    /// at `remote` equal `compare`, they become `swap`. Either way the WR's
    /// one 8-byte SGE receives the original value. `remote.addr` must be
    /// 8-byte aligned (the responder NAKs an invalid request otherwise) and
    /// its region must grant [`Access::REMOTE_ATOMIC`].
    CompareSwap {
        /// The 8-byte target; its region must grant REMOTE_ATOMIC.
        remote: RemoteAddr,
        /// The value the target must hold for the swap to happen.
        compare: u64,
        /// The value written when it does.
        swap: u64,
    },
    /// Atomic fetch-and-add (`IBV_WR_ATOMIC_FETCH_AND_ADD`): the 8 bytes at
    /// `remote` grow by `add` (wrapping), and the WR's one 8-byte SGE
    /// receives the original value. Alignment and access as for
    /// [`SendOp::CompareSwap`].
    FetchAdd {
        /// The 8-byte target; its region must grant REMOTE_ATOMIC.
        remote: RemoteAddr,
        /// Added to the target, modulo 2^64.
        add: u64,
    },
}

/// The length of an atomic operand: an atomic WR's scatter/gather list
/// describes exactly this many bytes, and its remote address is a multiple
/// of it. Values are in the host's byte order in memory (little-endian on
/// every host rctb models) and big-endian on the wire.
pub const ATOMIC_LEN: u32 = 8;

impl SendOp {
    /// The verbs name without the `IBV_WR_` prefix, e.g. `RDMA_WRITE_WITH_IMM`.
    pub fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendWithImm { .. } => "SEND_WITH_IMM",
            SendOp::Write { .. } => "RDMA_WRITE",
            SendOp::WriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::Read { .. } => "RDMA_READ",
            SendOp::CompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        }
    }

    /// The completion opcode a successful WR of this kind reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } => WcOpcode::Send,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    /// The immediate of `SendWithImm` or `WriteWithImm`.
    pub fn imm(&self) -> Option<u32> {
        match *self {
            SendOp::SendWithImm { imm } | SendOp::WriteWithImm { imm, .. } => Some(imm),
            _ => None,
        }
    }

    /// The remote address of a WRITE, READ or atomic.
    pub fn remote(&self) -> Option<RemoteAddr> {
        match *self {
            SendOp::Write { remote }
            | SendOp::WriteWithImm { remote, .. }
            | SendOp::Read { remote }
            | SendOp::CompareSwap { remote, .. }
            | SendOp::FetchAdd { remote, .. } => Some(remote),
            _ => None,
        }
    }

    /// Compare-and-swap or fetch-and-add.
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }

    /// A READ or an atomic: the responder answers with data, so the WR
    /// uses one of the responder's `max_dest_rd_atomic` resources and one of
    /// the requester's `max_rd_atomic` slots while it is outstanding.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(self, SendOp::Read { .. }) || self.is_atomic()
    }
}

/// A send work request. `sges` is borrowed: the transport copies what it
/// needs when the WR is posted, as verbs does.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the WR's completion, to match the two (`ibv_send_wr.wr_id`).
    pub wr_id: u64,
    /// The operation and its remote side.
    pub op: SendOp,
    /// The local data: the source of a SEND or WRITE, the destination of a READ
    /// or atomic. Empty for a zero-length message.
    pub sges: &'a [Sge],
    /// Whether success produces a completion (`IBV_SEND_SIGNALED`); a failure
    /// always does, and [`QpInit::sq_sig_all`] makes every WR signaled.
    pub signaled: bool,
    /// Sets the solicited-event bit on the message's last packet
    /// (`IBV_SEND_SOLICITED`), for a peer that waits for solicited events only.
    pub solicited: bool,
}

impl<'a> SendWr<'a> {
    /// A signalled WR with no solicited event.
    pub fn new(wr_id: u64, op: SendOp, sges: &'a [Sge]) -> Self {
        SendWr { wr_id, op, sges, signaled: true, solicited: false }
    }

    /// The same WR with no completion on success.
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }

    /// Total bytes described by the scatter/gather list.
    #[inline]
    pub fn len(&self) -> u64 {
        match self.sges {
            // One SGE, the usual case: its length, without the loop.
            [s] => s.len as u64,
            sges => sges.iter().map(|s| s.len as u64).sum(),
        }
    }

    /// Whether the scatter/gather list describes no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the receive's completion (`ibv_recv_wr.wr_id`).
    pub wr_id: u64,
    /// Where an incoming SEND's data goes, in order. A longer message fails
    /// the receive (LOC_LEN_ERR per IBA, LOC_QP_OP_ERR on rxe and the
    /// simulator). A WRITE with immediate writes no data here.
    pub sges: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive of `sges`, completed with `wr_id`.
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        RecvWr { wr_id, sges }
    }
}

/// Completion status (`enum ibv_wc_status`), same order and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// The work completed.
    Success = 0,
    /// Local length error: a receive too small for the incoming message (IBA,
    /// mlx5; rxe and the simulator say LOC_QP_OP_ERR), an SGE outside its
    /// region, or READ or atomic data that does not fit the WR's SGEs.
    LocLenErr,
    /// Local QP operation error: the WR was inconsistent with the QP. rxe and
    /// the simulator also fail a receive too small for its SEND this way.
    LocQpOpErr,
    /// Local EE context operation error (RD only; not seen with RC).
    LocEecOpErr,
    /// Local protection error: an SGE names no region valid for the operation
    /// (unknown, another PD, or without LOCAL_WRITE where the HCA writes).
    LocProtErr,
    /// Flushed: the WR was outstanding, or posted, while the QP was in ERR.
    /// Not a failure of the WR itself.
    WrFlushErr,
    /// Memory window bind error (rctb binds no windows).
    MwBindErr,
    /// Bad response: the responder answered with an unexpected opcode.
    BadRespErr,
    /// Local access error: a protection error on a local buffer while taking
    /// an incoming RDMA WRITE with immediate.
    LocAccessErr,
    /// Remote invalid request: the responder NAKed the request (an operation
    /// its QP does not allow, an oversized or misaligned request, no READ
    /// resources).
    RemInvReqErr,
    /// Remote access error: the peer refused an RDMA READ, WRITE or atomic
    /// (bad rkey, out of the region's bounds, or a missing access flag).
    RemAccessErr,
    /// Remote operation error: the responder could not complete the request;
    /// rxe and the simulator report a peer receive too small for the SEND so.
    RemOpErr,
    /// Transport retry counter exceeded: no ACK or NAK came back within
    /// `retry_cnt` retries of the local ACK timeout (peer gone or path down).
    RetryExcErr,
    /// RNR retry counter exceeded: the peer kept answering RNR NAK (no receive
    /// posted) for `rnr_retry` retries.
    RnrRetryExcErr,
    /// Local RDD violation (RD only; not seen with RC).
    LocRddViolErr,
    /// Remote invalid RD request (RD only; not seen with RC).
    RemInvRdReqErr,
    /// Remote aborted error: the responder aborted the operation.
    RemAbortErr,
    /// Invalid EE context number (RD only; not seen with RC).
    InvEecnErr,
    /// Invalid EE context state (RD only; not seen with RC).
    InvEecStateErr,
    /// Fatal error of the device or its driver.
    FatalErr,
    /// Response timeout.
    RespTimeoutErr,
    /// Any other error.
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

    /// Whether the status is SUCCESS.
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
    /// A SEND, with or without immediate (`IBV_WC_SEND`).
    Send,
    /// An RDMA WRITE, with or without immediate (`IBV_WC_RDMA_WRITE`).
    RdmaWrite,
    /// An RDMA READ; its data is in the WR's SGEs (`IBV_WC_RDMA_READ`).
    RdmaRead,
    /// A compare-and-swap completed (`IBV_WC_COMP_SWAP`).
    CompSwap,
    /// A fetch-and-add completed (`IBV_WC_FETCH_ADD`).
    FetchAdd,
    /// A receive took an incoming SEND (`IBV_WC_RECV`); `imm` is set when the
    /// SEND carried one.
    Recv,
    /// A receive was consumed by an incoming RDMA WRITE with immediate
    /// (`IBV_WC_RECV_RDMA_WITH_IMM`); `imm` carries it.
    RecvRdmaWithImm,
}

impl WcOpcode {
    /// The verbs name without the `IBV_WC_` prefix, e.g. `RECV_RDMA_WITH_IMM`.
    pub fn name(self) -> &'static str {
        match self {
            WcOpcode::Send => "SEND",
            WcOpcode::RdmaWrite => "RDMA_WRITE",
            WcOpcode::RdmaRead => "RDMA_READ",
            WcOpcode::CompSwap => "COMP_SWAP",
            WcOpcode::FetchAdd => "FETCH_ADD",
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
    /// The `wr_id` of the WR that completed.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What completed (see above for errors).
    pub opcode: WcOpcode,
    /// Bytes transferred, immediate not counted: for a receive, the incoming
    /// message's (or WRITE's) length; for a READ or atomic, the bytes fetched.
    /// Verbs leaves it undefined for SEND and WRITE completions.
    pub byte_len: u32,
    /// The immediate (wire value, network order) when the message carried one.
    pub imm: Option<u32>,
    /// The QP the WR was posted to (a CQ may serve several).
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
