//! Value types of the [`Transport`](super::Transport) trait: handles, port and
//! GID facts, access flags, QP attributes, work requests and completions.
//!
//! Everything here is plain data with no behaviour beyond validation, so the
//! simulator, the verbs backend and mocks all speak the same vocabulary.

use std::fmt;
use std::net::Ipv4Addr;

use super::error::InvalidValue;
use crate::time::Duration;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}#{}", stringify!($name), self.0)
            }
        }
    };
}

handle!(
    /// A protection domain.
    PdId
);
handle!(
    /// A registered memory region.
    MrId
);
handle!(
    /// A completion queue.
    CqId
);
handle!(
    /// A queue pair (RC).
    QpId
);
handle!(
    /// An RDMA CM listener.
    ListenId
);
handle!(
    /// An RDMA CM connection identifier (one per connection attempt).
    ConnId
);

/// A 24-bit queue pair number as carried in the BTH.
pub type Qpn = u32;

/// Largest valid QPN / PSN (both are 24-bit on the wire).
pub const MAX_24BIT: u32 = 0x00FF_FFFF;

/// A 24-bit packet sequence number with modular arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Builds a PSN, rejecting values that do not fit 24 bits.
    pub fn new(value: u32) -> Result<Self, InvalidValue> {
        if value > MAX_24BIT {
            return Err(InvalidValue::new("psn", value as u64, "must fit 24 bits (0..=0xFFFFFF)"));
        }
        Ok(Psn(value))
    }

    /// Builds a PSN from the low 24 bits of `value`.
    pub const fn wrapping(value: u32) -> Self {
        Psn(value & MAX_24BIT)
    }

    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Self {
        Psn(self.0.wrapping_add(n) & MAX_24BIT)
    }

    /// Signed distance `self - other` in the 24-bit circular space, in
    /// `-2^23 .. 2^23`. Positive means `self` is ahead of `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & MAX_24BIT;
        ((d << 8) as i32) >> 8
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06X}", self.0)
    }
}

/// A 128-bit GID in network byte order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID `::ffff:a.b.c.d` that RoCEv2 uses for IPv4 peers.
    pub fn from_ipv4(ip: Ipv4Addr) -> Self {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip.octets());
        Gid(g)
    }

    /// The IPv4 address when this GID is IPv4-mapped.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        let g = &self.0;
        if g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff {
            Some(Ipv4Addr::new(g[12], g[13], g[14], g[15]))
        } else {
            None
        }
    }

    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }
}

impl fmt::Display for Gid {
    /// Eight groups of four lowercase hex digits, as rogue and sysfs print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The RoCE version of a GID table entry (sysfs `gid_attrs/types/<i>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// "IB/RoCE v1"
    RoceV1,
    /// "RoCE v2"
    RoceV2,
}

/// One entry of a port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Gid,
    pub gid_type: GidType,
}

/// IB path MTU codes (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    pub const ALL: [Mtu; 5] = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];

    /// The MTU for an `ibv_mtu` code (1..=5).
    pub fn from_code(code: u8) -> Result<Self, InvalidValue> {
        Mtu::ALL
            .get((code as usize).wrapping_sub(1))
            .copied()
            .ok_or_else(|| InvalidValue::new("pmtu", code as u64, "must be an IB MTU code 1..=5 (256..4096 bytes)"))
    }

    /// The MTU for a byte count (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: u32) -> Result<Self, InvalidValue> {
        Mtu::ALL
            .iter()
            .copied()
            .find(|m| m.bytes() == bytes)
            .ok_or_else(|| InvalidValue::new("mtu", bytes as u64, "must be 256, 512, 1024, 2048 or 4096"))
    }

    pub const fn code(self) -> u8 {
        self as u8
    }

    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// Minimum RNR NAK timer codes (IBA Vol 1 table 45).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RnrTimer(u8);

impl RnrTimer {
    /// Duration of each code in nanoseconds, index = code.
    const NANOS: [u64; 32] = [
        655_360_000,
        10_000,
        20_000,
        30_000,
        40_000,
        60_000,
        80_000,
        120_000,
        160_000,
        240_000,
        320_000,
        480_000,
        640_000,
        960_000,
        1_280_000,
        1_920_000,
        2_560_000,
        3_840_000,
        5_120_000,
        7_680_000,
        10_240_000,
        15_360_000,
        20_480_000,
        30_720_000,
        40_960_000,
        61_440_000,
        81_920_000,
        122_880_000,
        163_840_000,
        245_760_000,
        327_680_000,
        491_520_000,
    ];

    pub fn from_code(code: u8) -> Result<Self, InvalidValue> {
        if code > 31 {
            return Err(InvalidValue::new("min_rnr_timer", code as u64, "must be an IBA table 45 code 0..=31"));
        }
        Ok(RnrTimer(code))
    }

    pub const fn code(self) -> u8 {
        self.0
    }

    /// The wait this code stands for (code 0 is the longest, 655.36 ms).
    pub const fn duration(self) -> Duration {
        Duration::from_nanos(Self::NANOS[self.0 as usize])
    }
}

impl Default for RnrTimer {
    /// Code 12 (0.64 ms), rogue's and the session server's default.
    fn default() -> Self {
        RnrTimer(12)
    }
}

/// Local ACK timeout for a QP's `timeout` code: 4.096 us * 2^code; code 0 means
/// wait forever (`None`).
pub fn local_ack_timeout(code: u8) -> Option<Duration> {
    match code {
        0 => None,
        c => Some(Duration::from_nanos(4096u64 << c.min(31))),
    }
}

/// Memory region and QP access flags (`enum ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    pub const NONE: Access = Access(0);
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    pub const REMOTE_READ: Access = Access(1 << 2);
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);

    pub const fn bits(self) -> u32 {
        self.0
    }

    pub fn from_bits(bits: u32) -> Result<Self, InvalidValue> {
        if bits & !0xF != 0 {
            return Err(InvalidValue::new(
                "access",
                bits as u64,
                "only LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC (0xF) are supported",
            ));
        }
        Ok(Access(bits))
    }

    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        let set: Vec<&str> = names.iter().filter(|(a, _)| self.contains(*a)).map(|(_, n)| *n).collect();
        if set.is_empty() { f.write_str("Access(NONE)") } else { write!(f, "Access({})", set.join("|")) }
    }
}

/// Facts about a device (what `ibv_query_device` gives that rctb uses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_mr_size: u64,
    pub max_qp_rd_atom: u8,
    pub max_qp_init_rd_atom: u8,
}

/// Port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    Down,
    Init,
    Armed,
    Active,
}

/// Facts about a port (`ibv_query_port` plus the GID table from sysfs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub port: u8,
    pub state: PortState,
    pub active_mtu: Mtu,
    pub max_mtu: Mtu,
    pub gids: Vec<GidEntry>,
}

/// A registered memory region's public facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    pub id: MrId,
    /// Address the remote side uses in RETH (and we use in SGEs).
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub access: Access,
}

impl MrInfo {
    /// The remote address of byte `offset` of this region.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr { addr: self.addr.wrapping_add(offset), rkey: self.rkey }
    }
}

/// Queue pair capacities (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
    }
}

/// Everything needed to create an RC queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInit {
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub caps: QpCaps,
    /// Generate a completion for every send WR, ignoring `SendWr::signaled`.
    pub sq_sig_all: bool,
}

/// Queue pair state (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
}

/// Address vector for RoCEv2 (a GRH is always present).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    pub dest_gid: Gid,
    pub sgid_index: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub sl: u8,
    pub port: u8,
}

impl AddressVector {
    /// An address vector with the usual defaults (hop limit 64, SL 0, port 1).
    pub fn new(dest_gid: Gid, sgid_index: u32) -> Self {
        AddressVector { dest_gid, sgid_index, hop_limit: 64, traffic_class: 0, flow_label: 0, sl: 0, port: 1 }
    }
}

/// RESET -> INIT attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitAttr {
    pub pkey_index: u16,
    pub port: u8,
    pub access: Access,
}

/// INIT -> RTR attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrAttr {
    pub path_mtu: Mtu,
    pub dest_qpn: Qpn,
    pub rq_psn: Psn,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: RnrTimer,
    pub av: AddressVector,
}

/// RTR -> RTS attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsAttr {
    pub sq_psn: Psn,
    /// Local ACK timeout code: 4.096 us * 2^timeout, 0 = infinite.
    pub timeout: u8,
    /// Transport retries before RETRY_EXC_ERR (0..=7).
    pub retry_cnt: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR (0..=6; 7 = forever).
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
}

impl RtsAttr {
    pub fn validate(&self) -> Result<(), InvalidValue> {
        if self.timeout > 31 {
            return Err(InvalidValue::new("timeout", self.timeout as u64, "must be 0..=31"));
        }
        if self.retry_cnt > 7 {
            return Err(InvalidValue::new("retry_cnt", self.retry_cnt as u64, "must be 0..=7"));
        }
        if self.rnr_retry > 7 {
            return Err(InvalidValue::new("rnr_retry", self.rnr_retry as u64, "must be 0..=7 (7 = forever)"));
        }
        Ok(())
    }
}

/// A QP state transition with the attributes verbs takes for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpTransition {
    /// RESET -> INIT.
    Init(InitAttr),
    /// INIT -> RTR.
    Rtr(RtrAttr),
    /// RTR -> RTS.
    Rts(RtsAttr),
    /// Any state -> ERR: outstanding work completes with WR_FLUSH_ERR.
    Err,
    /// Any state -> RESET: queues are emptied without completions.
    Reset,
}

impl QpTransition {
    /// The state this transition leads to.
    pub fn target(&self) -> QpState {
        match self {
            QpTransition::Init(_) => QpState::Init,
            QpTransition::Rtr(_) => QpState::Rtr,
            QpTransition::Rts(_) => QpState::Rts,
            QpTransition::Err => QpState::Err,
            QpTransition::Reset => QpState::Reset,
        }
    }

    /// The transition as people write it, e.g. "INIT->RTR".
    pub fn name(&self) -> &'static str {
        match self {
            QpTransition::Init(_) => "RESET->INIT",
            QpTransition::Rtr(_) => "INIT->RTR",
            QpTransition::Rts(_) => "RTR->RTS",
            QpTransition::Err => "->ERR",
            QpTransition::Reset => "->RESET",
        }
    }

    /// Whether verbs allows this transition from `from` (IBA QP state diagram,
    /// restricted to what RC applications use).
    pub fn allowed_from(&self, from: QpState) -> bool {
        match self {
            QpTransition::Init(_) => matches!(from, QpState::Reset | QpState::Init),
            QpTransition::Rtr(_) => from == QpState::Init,
            QpTransition::Rts(_) => matches!(from, QpState::Rtr | QpState::Rts),
            QpTransition::Err | QpTransition::Reset => true,
        }
    }
}

/// Queried QP facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    pub id: QpId,
    pub qpn: Qpn,
    pub state: QpState,
}

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
