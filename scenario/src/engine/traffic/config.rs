//! What a traffic stream does: its operation, message sizes, depth and the
//! QP settings it connects with. Plain data; the scenario parser builds it and
//! [`super::Stream`] runs it.

use rctb_core::time::Duration;
use serde::Serialize;

/// The verbs operation a stream issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// SEND (`op = "send"`): the payload lands in a receive the responder
    /// posted.
    Send,
    /// SEND_WITH_IMM (`"send_imm"`): a SEND that also carries a 32-bit
    /// immediate to the receive completion.
    SendImm,
    /// RDMA_WRITE (`"write"`): the payload goes into the responder's
    /// registered region; no receive is consumed.
    Write,
    /// RDMA_WRITE_WITH_IMM (`"write_imm"`): a WRITE whose immediate consumes
    /// a receive on the responder.
    WriteImm,
    /// RDMA_READ (`"read"`): the requester reads the payload out of the
    /// responder's region.
    Read,
}

impl Op {
    /// Every operation, in the order the scenario format lists them.
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

    /// The operation spelled `key` in a scenario file (`"send"`,
    /// `"write_imm"`, ...); `None` for any other text, including `roce`,
    /// `rcsession` and `nvme`, which are not verbs operations.
    pub fn from_key(key: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.key() == key)
    }

    /// Whether each message consumes a receive on the responder.
    pub fn consumes_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::WriteImm)
    }

    /// Whether each message carries an immediate (SEND_WITH_IMM and
    /// RDMA_WRITE_WITH_IMM).
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
    /// The scenario-file spelling (`connect = "cm"` or `"manual"`).
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
    /// How often the requester resends after an ACK timeout before the WR
    /// fails with `RETRY_EXC_ERR`, 0..=7 (default 7).
    pub retry_cnt: u8,
    /// How often the requester retries after an RNR NAK, 0..=7, 7 meaning
    /// forever (default 7).
    pub rnr_retry: u8,
    /// The local ACK timeout as an IBA code, 4.096 us x 2^code, 0..=31
    /// (default 14, about 67 ms).
    pub timeout: u8,
    /// The RNR timer the responder asks for in its RNR NAKs, an IBA table 45
    /// code 0..=31 (default 12).
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
    /// The stream's name, unique in its scenario: it names the stream in the
    /// report and keys its seeded content ([`crate::pattern::StreamPattern`]).
    pub name: String,
    /// The verbs operation every message uses.
    pub op: Op,
    /// Messages to send.
    pub count: u64,
    /// Message sizes are drawn uniformly from `min_size..=max_size` per message.
    pub min_size: u32,
    /// The largest message in bytes (equal to `min_size` for a fixed size);
    /// each buffer slot is this long.
    pub max_size: u32,
    /// Outstanding send WRs at most.
    pub queue_depth: u32,
    /// Receives the responder keeps posted (for ops that consume one).
    pub recv_depth: u32,
    /// How the two QPs are connected (default RDMA CM).
    pub connect: ConnectMode,
    /// Virtual time at which the stream starts.
    pub start: Duration,
    /// The responder's RDMA CM port (CM connects only).
    pub cm_port: u16,
    /// The QPs' retry counts and timers.
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
