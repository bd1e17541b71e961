//! What a traffic stream does: its operation, message sizes, depth and the
//! QP settings it connects with. Plain data; the scenario parser builds it and
//! [`super::Stream`] runs it.

use rctb_core::time::Duration;
use serde::Serialize;

/// The verbs operation a stream issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Send, Op::SendImm, Op::Write, Op::WriteImm, Op::Read];

    /// The scenario-file spelling.
    pub fn key(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::SendImm => "send_imm",
            Op::Write => "write",
            Op::WriteImm => "write_imm",
            Op::Read => "read",
        }
    }

    /// The verbs spelling, as reports print it.
    pub fn verb_name(self) -> &'static str {
        match self {
            Op::Send => "SEND",
            Op::SendImm => "SEND_WITH_IMM",
            Op::Write => "RDMA_WRITE",
            Op::WriteImm => "RDMA_WRITE_WITH_IMM",
            Op::Read => "RDMA_READ",
        }
    }

    pub fn from_key(key: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.key() == key)
    }

    /// Whether each message consumes a receive on the responder.
    pub fn consumes_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::WriteImm)
    }

    pub fn carries_imm(self) -> bool {
        matches!(self, Op::SendImm | Op::WriteImm)
    }

    /// Whether the requester targets the responder's registered region.
    pub fn is_rdma(self) -> bool {
        matches!(self, Op::Write | Op::WriteImm | Op::Read)
    }
}

impl Serialize for Op {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.verb_name())
    }
}

/// How the two QPs of a stream get connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConnectMode {
    /// RDMA CM: listen, connect with private data, accept, Established.
    #[default]
    Cm,
    /// Explicit RESET->INIT->RTR->RTS with QPNs and PSNs exchanged out of
    /// band, the way an FPGA peer is brought up.
    Manual,
}

impl ConnectMode {
    pub fn key(self) -> &'static str {
        match self {
            ConnectMode::Cm => "cm",
            ConnectMode::Manual => "manual",
        }
    }
}

/// QP settings; `timeout` and `min_rnr_timer` apply to manual connects only
/// (RDMA CM picks them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSettings {
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub timeout: u8,
    pub min_rnr_timer: u8,
}

impl Default for QpSettings {
    /// The values librdmacm ends up with on RoCE (timeout 14 = 67 ms).
    fn default() -> Self {
        QpSettings { retry_cnt: 7, rnr_retry: 7, timeout: 14, min_rnr_timer: 12 }
    }
}

/// One stream of messages from a requester to a responder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    pub name: String,
    pub op: Op,
    /// Messages to send.
    pub count: u64,
    /// Message sizes are drawn uniformly from `min_size..=max_size` per message.
    pub min_size: u32,
    pub max_size: u32,
    /// Outstanding send WRs at most.
    pub queue_depth: u32,
    /// Receives the responder keeps posted (for ops that consume one).
    pub recv_depth: u32,
    pub connect: ConnectMode,
    /// Virtual time at which the stream starts.
    pub start: Duration,
    /// The responder's RDMA CM port (CM connects only).
    pub cm_port: u16,
    pub qp: QpSettings,
}

impl StreamConfig {
    /// A stream with the defaults: 8 deep, CM, fixed size.
    pub fn new(name: impl Into<String>, op: Op, count: u64, size: u32) -> Self {
        StreamConfig {
            name: name.into(),
            op,
            count,
            min_size: size,
            max_size: size,
            queue_depth: 8,
            recv_depth: 8,
            connect: ConnectMode::Cm,
            start: Duration::ZERO,
            cm_port: 18515,
            qp: QpSettings::default(),
        }
    }

    /// Bytes of one buffer slot: the largest message, at least one byte so
    /// every region is non-empty.
    pub fn slot_len(&self) -> u64 {
        (self.max_size as u64).max(1)
    }
}
