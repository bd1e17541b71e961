//! Queue pair value types of the [`Transport`](super::Transport) trait:
//! capacities, states, address vectors and the attributes of each state
//! transition, as verbs takes them.

use super::*;

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
