//! Queue pair value types of the [`Transport`](super::Transport) trait:
//! capacities, states, address vectors and the attributes of each state
//! transition, as verbs takes them.

use super::*;

/// Queue pair capacities (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue capacity (`ibv_qp_cap.max_send_wr`): send WRs outstanding at
    /// once; one more is `QueueFull`.
    pub max_send_wr: u32,
    /// Receive queue capacity (`max_recv_wr`): receives posted at once; one
    /// more is `QueueFull`.
    pub max_recv_wr: u32,
    /// Most SGEs per send WR (`max_send_sge`); more is `InvalidArgument`.
    pub max_send_sge: u32,
    /// Most SGEs per receive WR (`max_recv_sge`); more is `InvalidArgument`.
    pub max_recv_sge: u32,
    /// Most bytes a send WR may carry inline (`max_inline_data`). The verbs
    /// backend passes it to `ibv_create_qp`; no `SendWr` is posted inline
    /// and the simulator ignores it.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
    }
}

/// Everything needed to create an RC queue pair.
// Not non_exhaustive, as InitAttr, RtrAttr and RtsAttr below: these mirror
// the verbs attribute structs for RC, every field a choice the caller must
// make; a field verbs adds should break callers, not default silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInit {
    /// The protection domain whose regions this QP's WRs may name.
    pub pd: PdId,
    /// Where the send queue's completions go.
    pub send_cq: CqId,
    /// Where the receive queue's completions go (may be `send_cq`).
    pub recv_cq: CqId,
    /// Queue capacities.
    pub caps: QpCaps,
    /// Generate a completion for every send WR, ignoring `SendWr::signaled`.
    pub sq_sig_all: bool,
    /// Take receives from this shared receive queue (`ibv_qp_init_attr.srq`)
    /// instead of a receive queue of the QP's own: `caps.max_recv_wr` and
    /// `max_recv_sge` are then ignored and `post_recv` on the QP is refused.
    pub srq: Option<SrqId>,
}

/// Everything needed to create a shared receive queue
/// (`struct ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqInit {
    /// The protection domain its receives' regions belong to; the QPs that
    /// use it must be in the same one.
    pub pd: PdId,
    /// Receives posted at once (`max_wr`); one more is `QueueFull`.
    pub max_wr: u32,
    /// Most SGEs per receive (`max_sge`); more is `InvalidArgument`.
    pub max_sge: u32,
    /// The limit armed at creation (`srq_limit`), 0 for none: see
    /// [`Transport::modify_srq`](super::Transport::modify_srq).
    pub limit: u32,
}

impl SrqInit {
    /// A shared receive queue of `max_wr` one-SGE receives, no limit armed.
    pub fn new(pd: PdId, max_wr: u32) -> Self {
        SrqInit { pd, max_wr, max_sge: 1, limit: 0 }
    }
}

/// An asynchronous event (`struct ibv_async_event`): something that
/// happened to a resource outside any work request's completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// `IBV_EVENT_CQ_ERR`: a completion was lost because the CQ was full.
    /// A receive-side completion that does not fit also moves its QP to
    /// ERR (without acknowledging the message), as rxe does; a send-side
    /// one is only lost. Raised once per lost completion.
    CqErr {
        /// The CQ that overflowed.
        cq: CqId,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP went to ERR on its own. Verbs devices
    /// report it; the engine reports the CQ overflow as `CqErr` only.
    QpFatal {
        /// The QP.
        qp: QpId,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer receives than the armed limit
    /// remain; the limit is disarmed until `modify_srq` arms it again.
    SrqLimitReached {
        /// The shared receive queue.
        srq: SrqId,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP attached to a shared receive
    /// queue went to ERR and takes no more of its receives.
    QpLastWqeReached {
        /// The QP.
        qp: QpId,
    },
    /// Any other event a verbs device reported (`enum ibv_event_type` value).
    Other {
        /// The raw event type.
        event_type: u32,
    },
}

/// Queue pair state (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QpState {
    /// RESET: new, or reset; nothing can be posted and nothing is received.
    Reset,
    /// INIT: receives may be posted; arriving packets are still dropped.
    Init,
    /// RTR, Ready To Receive: the responder runs; sends cannot be posted yet.
    Rtr,
    /// RTS, Ready To Send: requester and responder both run.
    Rts,
    /// SQD, Send Queue Drained (`IBV_QPS_SQD`): only a verbs device can report
    /// it; no [`QpTransition`] leads there.
    Sqd,
    /// SQE, Send Queue Error (`IBV_QPS_SQE`): the send-side error state of
    /// unreliable QPs; only a verbs device can report it (RC QPs go to ERR).
    Sqe,
    /// ERR: after a fatal completion error or an explicit move; outstanding and
    /// newly posted work completes with WR_FLUSH_ERR.
    Err,
}

/// Address vector for RoCEv2 (a GRH is always present).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    /// The peer's GID (`ibv_ah_attr.grh.dgid`); over IPv4 RoCEv2 it is
    /// [`Gid::from_ipv4`] of the peer's address.
    pub dest_gid: Gid,
    /// Our source GID's index in the port's GID table (`grh.sgid_index`), a
    /// RoCE v2 entry for RoCEv2. The verbs backend refuses indexes above 255
    /// (`InvalidArgument`) rather than truncate them.
    pub sgid_index: u32,
    /// IP TTL of the packets (`grh.hop_limit`).
    pub hop_limit: u8,
    /// IP DSCP and ECN byte of the packets (`grh.traffic_class`).
    pub traffic_class: u8,
    /// IPv6 flow label, 20 bits (`grh.flow_label`).
    pub flow_label: u32,
    /// Service level, 0..=15 (`ibv_ah_attr.sl`).
    pub sl: u8,
    /// The local port the path leaves from, 1-based (`ibv_ah_attr.port_num`).
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
    /// Index into the port's P_Key table (`ibv_qp_attr.pkey_index`); 0 is the
    /// default partition.
    pub pkey_index: u16,
    /// The port the QP uses, 1-based (`port_num`); the simulator has port 1 only.
    pub port: u8,
    /// What peers may do through this QP (`qp_access_flags`): REMOTE_WRITE,
    /// REMOTE_READ, REMOTE_ATOMIC. The target region must grant the same flag.
    pub access: Access,
}

/// INIT -> RTR attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrAttr {
    /// Payload bytes per packet (`path_mtu`); at most the port's active MTU
    /// (`InvalidArgument` otherwise), and the same on both sides.
    pub path_mtu: Mtu,
    /// The peer's QP number (`dest_qp_num`), 1..=0xFFFFFF.
    pub dest_qpn: Qpn,
    /// The first PSN this QP expects to receive (`rq_psn`): the peer's RTS
    /// `sq_psn`.
    pub rq_psn: Psn,
    /// RDMA READs and atomics this QP serves for the peer at once
    /// (`max_dest_rd_atomic`; at most the device's `max_qp_rd_atom`).
    pub max_dest_rd_atomic: u8,
    /// How long the peer is told to wait (RNR NAK) when a SEND finds no posted
    /// receive (`min_rnr_timer`).
    pub min_rnr_timer: RnrTimer,
    /// The path to the peer (`ah_attr`).
    pub av: AddressVector,
}

/// RTR -> RTS attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsAttr {
    /// The PSN of this QP's first request packet (`sq_psn`): the peer's RTR
    /// `rq_psn`. The simulator applies it on RTR->RTS only, not on RTS->RTS.
    pub sq_psn: Psn,
    /// Local ACK timeout code: 4.096 us * 2^timeout, 0 = infinite.
    pub timeout: u8,
    /// Transport retries before RETRY_EXC_ERR (0..=7).
    pub retry_cnt: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR (0..=6; 7 = forever).
    pub rnr_retry: u8,
    /// RDMA READs and atomics this QP may have outstanding as requester
    /// (`max_rd_atomic`; at most the device's `max_qp_init_rd_atom`).
    pub max_rd_atomic: u8,
}

impl RtsAttr {
    /// Checks `timeout` (0..=31), `retry_cnt` and `rnr_retry` (0..=7) and
    /// names the first one out of range; `modify_qp` runs it.
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
    /// The handle the other QP calls take.
    pub id: QpId,
    /// The 24-bit QP number peers address (BTH destination QP).
    pub qpn: Qpn,
    /// The state when created (RESET) or queried.
    pub state: QpState,
}
