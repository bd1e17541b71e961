//! Value types of the [`Transport`](super::Transport) trait: handles, PSNs,
//! GIDs, MTU and RNR timer codes, access flags, device, port and MR facts
//! (queue pair attributes are in `qp`, work requests and completions in
//! `work`).
//!
//! Everything here is plain data with no behaviour beyond validation, so the
//! simulator, the verbs backend and mocks all speak the same vocabulary.

use std::fmt;
use std::net::Ipv4Addr;

use super::error::InvalidValue;
use super::work::RemoteAddr;
use crate::time::Duration;

// The handle's number is public on purpose, unlike the simulator's node
// ids: every backend (the engine, rctb-hw, the C library) mints handles in
// its own crate, so a constructor would be just as open.
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
    /// A shared receive queue.
    SrqId
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

    /// The value, 0..=0xFFFFFF.
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

    /// Whether all 16 bytes are zero, which is how rxe reports an unused GID
    /// table slot.
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
    /// Position in the port's GID table: what `sgid_index` takes. A `u32`, as
    /// tables can have more than 256 entries.
    pub index: u32,
    /// The GID at that position.
    pub gid: Gid,
    /// RoCE v1 or v2 (sysfs `gid_attrs/types/<index>`).
    pub gid_type: GidType,
}

/// IB path MTU codes (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes (code 1).
    Mtu256 = 1,
    /// 512 bytes (code 2).
    Mtu512 = 2,
    /// 1024 bytes (code 3); rxe's active MTU on a 1500-byte netdev.
    Mtu1024 = 3,
    /// 2048 bytes (code 4).
    Mtu2048 = 4,
    /// 4096 bytes (code 5), the largest RoCE MTU.
    Mtu4096 = 5,
}

impl Mtu {
    /// Every MTU, in code order.
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

    /// The `ibv_mtu` code, 1..=5.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The MTU in bytes, 256..=4096.
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

    /// The timer of an IBA table 45 code; `InvalidValue` for codes above 31.
    pub fn from_code(code: u8) -> Result<Self, InvalidValue> {
        if code > 31 {
            return Err(InvalidValue::new("min_rnr_timer", code as u64, "must be an IBA table 45 code 0..=31"));
        }
        Ok(RnrTimer(code))
    }

    /// The 5-bit code, as `ibv_qp_attr.min_rnr_timer` and the RNR NAK's AETH
    /// syndrome carry it.
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
    /// No flags: the HCA may only read the region (as the source of a SEND or
    /// WRITE).
    pub const NONE: Access = Access(0);
    /// `IBV_ACCESS_LOCAL_WRITE`: the HCA may write the region for local work
    /// (receives, READ responses, atomic results). REMOTE_WRITE and
    /// REMOTE_ATOMIC need it too (`reg_mr` says `InvalidArgument` otherwise).
    pub const LOCAL_WRITE: Access = Access(1);
    /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA WRITE into the region with its
    /// rkey; otherwise their WRITE completes with REM_ACCESS_ERR.
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA READ from the region with its
    /// rkey.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomic operations on 8-byte
    /// words of the region with its rkey.
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);

    /// The raw `ibv_access_flags` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from raw bits; `InvalidValue` when a bit beyond these four (0xF)
    /// is set.
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

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of both (also `a | b`).
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
    /// The device name verbs lists (`ibv_get_device_name`, e.g. `rxe0`,
    /// `mlx5_0`); in the simulator, the node's configured name.
    pub name: String,
    /// Most WRs per send or receive queue (`ibv_device_attr.max_qp_wr`).
    pub max_qp_wr: u32,
    /// Most SGEs per work request (`max_sge`).
    pub max_sge: u32,
    /// Most entries per completion queue (`max_cqe`).
    pub max_cqe: u32,
    /// Largest memory region, in bytes (`max_mr_size`).
    pub max_mr_size: u64,
    /// Most RDMA READs and atomics a QP serves for its peer at once
    /// (`max_qp_rd_atom`): the ceiling of `max_dest_rd_atomic` and of CM
    /// `responder_resources`.
    pub max_qp_rd_atom: u8,
    /// Most RDMA READs and atomics a QP may have outstanding as requester
    /// (`max_qp_init_rd_atom`): the ceiling of `max_rd_atomic` and of CM
    /// `initiator_depth`.
    pub max_qp_init_rd_atom: u8,
}

/// Port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`: no link. The verbs backend reports any state it does
    /// not know (`IBV_PORT_NOP`) as this too.
    Down,
    /// `IBV_PORT_INIT`: link up, not configured yet.
    Init,
    /// `IBV_PORT_ARMED`: configured, not active yet.
    Armed,
    /// `IBV_PORT_ACTIVE` (or `IBV_PORT_ACTIVE_DEFER`): carrying traffic.
    Active,
}

/// Facts about a port (`ibv_query_port` plus the GID table from sysfs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The port number, 1-based.
    pub port: u8,
    /// The port's link state.
    pub state: PortState,
    /// The MTU the port runs at now (`active_mtu`): the ceiling of a QP's
    /// `path_mtu`. rxe's follows the netdev (1500 gives 1024).
    pub active_mtu: Mtu,
    /// The largest MTU the port supports (`max_mtu`).
    pub max_mtu: Mtu,
    /// The GID table in index order. Unused (all-zero) slots, and entries
    /// whose type sysfs does not give, may be left out.
    pub gids: Vec<GidEntry>,
}

/// A registered memory region's public facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// The handle SGEs and the other MR calls take.
    pub id: MrId,
    /// Address the remote side uses in RETH (and we use in SGEs).
    pub addr: u64,
    /// Length in bytes, as registered.
    pub len: u64,
    /// Local key (`ibv_mr.lkey`). SGEs name the region by `id`; the backend
    /// puts the lkey in the work request.
    pub lkey: u32,
    /// Remote key (`ibv_mr.rkey`) a peer puts in a RETH or atomic header to
    /// reach this region.
    pub rkey: u32,
    /// The access flags it was registered with.
    pub access: Access,
}

impl MrInfo {
    /// The remote address of byte `offset` of this region.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr { addr: self.addr.wrapping_add(offset), rkey: self.rkey }
    }
}
