//! RC queue pairs: creation, the state transitions with exactly the verbs
//! attribute masks, posting, and the state checks that turn provider
//! `EINVAL`s into the trait's `InvalidState`.

use std::ptr::NonNull;
use std::sync::Arc;

use rctb_core::transport::{
    ATOMIC_LEN, ConnId, QpCaps, QpId, QpInit, QpState, QpTransition, RecvWr, Result, SendOp, SendWr, TransportError,
    Verb,
};
use rdma_sys::{
    atomic_t, ibv_create_qp, ibv_destroy_qp, ibv_gid, ibv_modify_qp, ibv_post_recv, ibv_post_send, ibv_qp, ibv_qp_attr,
    ibv_qp_attr_mask, ibv_qp_cap, ibv_qp_init_attr, ibv_qp_state, ibv_qp_type, ibv_query_qp, ibv_recv_wr,
    ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode, imm_data_invalidated_rkey_union_t, rdma_t, wr_t,
};

use crate::cq::Cq;
use crate::pd::Pd;
use crate::srq::Srq;
use crate::sys::{check_rc, last_os_error, os_error, rc_errno};
use crate::wc::WrTracker;

/// The parents of a QP, held so they outlive it.
#[derive(Debug)]
pub(crate) struct QpParents {
    pub(crate) pd: Arc<Pd>,
    pub(crate) send_cq: Arc<Cq>,
    pub(crate) recv_cq: Arc<Cq>,
    /// The shared receive queue the QP takes its receives from
    /// (`QpInit::srq`).
    pub(crate) srq: Option<Arc<Srq>>,
}

/// An `ibv_qp` (RC).
#[derive(Debug)]
pub(crate) struct QueuePair {
    qp: Option<NonNull<ibv_qp>>,
    pub(crate) id: QpId,
    pub(crate) qpn: u32,
    /// The capacities the provider granted (at least what was asked).
    pub(crate) caps: QpCaps,
    /// Last known state: what our own transitions (and the CM's) left it
    /// in. The device may move it to ERR/SQE on its own; both still allow
    /// posting, so the pre-post checks stay right.
    pub(crate) state: QpState,
    pub(crate) tracker: WrTracker,
    /// The CM connection whose `rdma_cm_id` this QP hangs off, while that
    /// id exists.
    pub(crate) cm: Option<ConnId>,
    pub(crate) parents: QpParents,
}

/// The `ibv_qp_init_attr` for `ibv_create_qp` and `rdma_create_qp`. With
/// an SRQ the QP has no receive queue of its own: its receive capacities
/// are passed as 0 (verbs ignores them then; some providers check them).
pub(crate) fn init_attr(init: &QpInit, parents: &QpParents) -> ibv_qp_init_attr {
    let own_rq = parents.srq.is_none();
    ibv_qp_init_attr {
        qp_context: std::ptr::null_mut(),
        send_cq: parents.send_cq.as_ptr(),
        recv_cq: parents.recv_cq.as_ptr(),
        srq: parents.srq.as_ref().map_or(std::ptr::null_mut(), |s| s.as_ptr()),
        cap: ibv_qp_cap {
            max_send_wr: init.caps.max_send_wr,
            max_recv_wr: if own_rq { init.caps.max_recv_wr } else { 0 },
            max_send_sge: init.caps.max_send_sge,
            max_recv_sge: if own_rq { init.caps.max_recv_sge } else { 0 },
            max_inline_data: init.caps.max_inline_data,
        },
        qp_type: ibv_qp_type::IBV_QPT_RC,
        sq_sig_all: i32::from(init.sq_sig_all),
    }
}

fn caps_of(cap: &ibv_qp_cap) -> QpCaps {
    QpCaps {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    }
}

pub(crate) fn state_from_raw(raw: u32) -> QpState {
    match raw {
        ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
        ibv_qp_state::IBV_QPS_INIT => QpState::Init,
        ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
        ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
        ibv_qp_state::IBV_QPS_SQD => QpState::Sqd,
        ibv_qp_state::IBV_QPS_SQE => QpState::Sqe,
        _ => QpState::Err,
    }
}

/// Whether verbs lets a QP in `state` post sends / receives.
pub(crate) fn can_post(state: QpState, send: bool) -> bool {
    if send {
        matches!(state, QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err)
    } else {
        state != QpState::Reset
    }
}

/// The `ibv_qp_attr` and attribute mask for a transition: exactly the
/// attributes the IBA requires for it, nothing optional.
pub(crate) fn modify_attr(t: &QpTransition) -> Result<(ibv_qp_attr, ibv_qp_attr_mask)> {
    type M = ibv_qp_attr_mask;
    let invalid = |field, value: u64, rule| TransportError::invalid(Verb::ModifyQp, field, value, rule);
    // SAFETY: ibv_qp_attr is plain data (integers and a GID union); all-zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mask = match t {
        QpTransition::Init(init) => {
            a.qp_state = ibv_qp_state::IBV_QPS_INIT;
            a.pkey_index = init.pkey_index;
            a.port_num = init.port;
            a.qp_access_flags = init.access.bits();
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS
        }
        QpTransition::Rtr(rtr) => {
            let av = &rtr.av;
            // ibv_global_route.sgid_index is 8 bits: refuse, never truncate.
            let sgid_index = u8::try_from(av.sgid_index)
                .map_err(|_| invalid("sgid_index", av.sgid_index.into(), "verbs takes GID indexes 0..=255 here"))?;
            if av.flow_label > 0xF_FFFF {
                return Err(invalid("flow_label", av.flow_label.into(), "must fit 20 bits"));
            }
            if av.sl > 15 {
                return Err(invalid("sl", av.sl.into(), "must be 0..=15"));
            }
            if rtr.dest_qpn > rctb_core::transport::MAX_24BIT {
                return Err(invalid("dest_qpn", rtr.dest_qpn.into(), "must fit 24 bits"));
            }
            a.qp_state = ibv_qp_state::IBV_QPS_RTR;
            a.path_mtu = u32::from(rtr.path_mtu.code());
            a.dest_qp_num = rtr.dest_qpn;
            a.rq_psn = rtr.rq_psn.get();
            a.max_dest_rd_atomic = rtr.max_dest_rd_atomic;
            a.min_rnr_timer = rtr.min_rnr_timer.code();
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: av.dest_gid.0 };
            a.ah_attr.grh.sgid_index = sgid_index;
            a.ah_attr.grh.hop_limit = av.hop_limit;
            a.ah_attr.grh.traffic_class = av.traffic_class;
            a.ah_attr.grh.flow_label = av.flow_label;
            a.ah_attr.sl = av.sl;
            a.ah_attr.port_num = av.port;
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER
        }
        QpTransition::Rts(rts) => {
            rts.validate().map_err(|source| TransportError::InvalidArgument { verb: Verb::ModifyQp, source })?;
            a.qp_state = ibv_qp_state::IBV_QPS_RTS;
            a.timeout = rts.timeout;
            a.retry_cnt = rts.retry_cnt;
            a.rnr_retry = rts.rnr_retry;
            a.sq_psn = rts.sq_psn.get();
            a.max_rd_atomic = rts.max_rd_atomic;
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC
        }
        QpTransition::Err => {
            a.qp_state = ibv_qp_state::IBV_QPS_ERR;
            M::IBV_QP_STATE
        }
        QpTransition::Reset => {
            a.qp_state = ibv_qp_state::IBV_QPS_RESET;
            M::IBV_QP_STATE
        }
    };
    Ok((a, mask))
}

impl QueuePair {
    /// `ibv_create_qp`: an RC QP in RESET.
    pub(crate) fn create(id: QpId, init: &QpInit, parents: QpParents) -> Result<Self> {
        let mut attr = init_attr(init, &parents);
        // SAFETY: the PD, CQs and SRQ (if any) are alive (held by
        // `parents`, which the QP keeps); `attr` is a valid init attr.
        let qp = unsafe { ibv_create_qp(parents.pd.as_ptr(), &mut attr) };
        let qp = NonNull::new(qp).ok_or_else(|| last_os_error(Verb::CreateQp, "ibv_create_qp"))?;
        // SAFETY: ibv_create_qp wrote the granted capacities back into `attr`.
        let caps = caps_of(&attr.cap);
        Ok(Self::adopt(id, qp, caps, QpState::Reset, parents))
    }

    /// Takes ownership of a QP created elsewhere (`rdma_create_qp`).
    pub(crate) fn adopt(id: QpId, qp: NonNull<ibv_qp>, caps: QpCaps, state: QpState, parents: QpParents) -> Self {
        // SAFETY: `qp` is a live QP handed over to us.
        let qpn = unsafe { (*qp.as_ptr()).qp_num };
        let mut tracker = WrTracker::new(caps.max_send_wr, caps.max_recv_wr);
        if parents.srq.is_some() {
            tracker.set_shared_recv();
        }
        QueuePair { qp: Some(qp), id, qpn, caps, state, tracker, cm: None, parents }
    }

    pub(crate) fn caps_from(attr: &ibv_qp_init_attr) -> QpCaps {
        caps_of(&attr.cap)
    }

    /// The raw QP; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut ibv_qp {
        self.qp.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    /// The state the device reports (`ibv_query_qp`).
    pub(crate) fn device_state(&self, verb: Verb) -> Result<QpState> {
        // SAFETY: both are plain data; all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the QP is live; the out-structs are writable.
        let rc = unsafe { ibv_query_qp(self.as_ptr(), &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32, &mut init) };
        check_rc(rc, verb, "ibv_query_qp")?;
        Ok(state_from_raw(attr.qp_state))
    }

    /// [`device_state`](Self::device_state), refreshing the cached state.
    pub(crate) fn query_state(&mut self, verb: Verb) -> Result<QpState> {
        self.state = self.device_state(verb)?;
        Ok(self.state)
    }

    pub(crate) fn modify(&mut self, t: &QpTransition) -> Result<()> {
        let current = self.query_state(Verb::ModifyQp)?;
        if !t.allowed_from(current) {
            return Err(TransportError::InvalidState { verb: Verb::ModifyQp, state: current, what: t.name() });
        }
        let (mut attr, mask) = modify_attr(t)?;
        // SAFETY: the QP is live; `attr` holds every attribute `mask` names.
        let rc = unsafe { ibv_modify_qp(self.as_ptr(), &mut attr, mask.0 as i32) };
        check_rc(rc, Verb::ModifyQp, "ibv_modify_qp")?;
        self.state = t.target();
        if self.state == QpState::Reset {
            self.tracker.clear();
        }
        Ok(())
    }

    /// The error for a failed post: `InvalidState` when the QP's state does
    /// not allow it, `QueueFull` for ENOMEM, else the OS error.
    fn post_error(&mut self, verb: Verb, what: &'static str, errno: i32, send: bool) -> TransportError {
        if let Ok(state) = self.query_state(verb)
            && !can_post(state, send)
        {
            return TransportError::InvalidState { verb, state, what: "posting work requests" };
        }
        match errno {
            libc::ENOMEM => TransportError::QueueFull {
                verb,
                what: "work requests",
                limit: if send { self.caps.max_send_wr } else { self.caps.max_recv_wr },
            },
            e => os_error(verb, what, e),
        }
    }

    fn check_post(&mut self, verb: Verb, n_sge: usize, send: bool) -> Result<()> {
        // The cache can only lag behind transitions the CM or the device
        // made; ask the device before refusing.
        if !can_post(self.state, send) && !can_post(self.query_state(verb)?, send) {
            return Err(TransportError::InvalidState { verb, state: self.state, what: "posting work requests" });
        }
        let max = if send { self.caps.max_send_sge } else { self.caps.max_recv_sge };
        if n_sge > max as usize {
            return Err(TransportError::invalid(verb, "num_sge", n_sge as u64, "exceeds the QP's max SGE count"));
        }
        Ok(())
    }

    /// `ibv_post_send` of one WR whose SGEs were already resolved.
    pub(crate) fn post_send(&mut self, wr: &SendWr<'_>, sges: &mut [ibv_sge]) -> Result<()> {
        self.check_post(Verb::PostSend, sges.len(), true)?;
        if wr.op.is_atomic() && wr.len() != ATOMIC_LEN as u64 {
            // Refused here with the rule, as on every backend; providers
            // would say only EINVAL.
            return Err(TransportError::invalid(
                Verb::PostSend,
                "length",
                wr.len(),
                "an atomic's scatter/gather list holds exactly 8 bytes (the original value)",
            ));
        }
        // SAFETY: ibv_send_wr is plain data (integers, pointers, unions of
        // those); all-zero is valid: no next WR, no SGEs, no flags.
        let mut swr: ibv_send_wr = unsafe { std::mem::zeroed() };
        swr.wr_id = wr.wr_id;
        swr.sg_list = if sges.is_empty() { std::ptr::null_mut() } else { sges.as_mut_ptr() };
        swr.num_sge = sges.len() as i32; // <= max_send_sge (a u32 the provider accepted)
        let mut flags = ibv_send_flags(0);
        if wr.signaled {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED;
        }
        if wr.solicited {
            flags |= ibv_send_flags::IBV_SEND_SOLICITED;
        }
        swr.send_flags = flags.0;
        swr.opcode = match wr.op {
            SendOp::Send => ibv_wr_opcode::IBV_WR_SEND,
            SendOp::SendWithImm { .. } => ibv_wr_opcode::IBV_WR_SEND_WITH_IMM,
            SendOp::Write { .. } => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            SendOp::WriteWithImm { .. } => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
            SendOp::Read { .. } => ibv_wr_opcode::IBV_WR_RDMA_READ,
            SendOp::CompareSwap { .. } => ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP,
            SendOp::FetchAdd { .. } => ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD,
        };
        if let Some(imm) = wr.op.imm() {
            // The trait's immediate is the wire value; verbs wants it in
            // network byte order in memory.
            swr.imm_data_invalidated_rkey_union = imm_data_invalidated_rkey_union_t { imm_data: imm.to_be() };
        }
        // Atomic operands are host-order integers here; the provider puts
        // them on the wire in network order.
        swr.wr = match wr.op {
            SendOp::CompareSwap { remote, compare, swap } => {
                wr_t { atomic: atomic_t { remote_addr: remote.addr, compare_add: compare, swap, rkey: remote.rkey } }
            }
            SendOp::FetchAdd { remote, add } => {
                wr_t { atomic: atomic_t { remote_addr: remote.addr, compare_add: add, swap: 0, rkey: remote.rkey } }
            }
            op => match op.remote() {
                Some(remote) => wr_t { rdma: rdma_t { remote_addr: remote.addr, rkey: remote.rkey } },
                None => swr.wr,
            },
        };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // `ibv_post_send` is static inline in verbs.h (the provider's
        // `ops.post_send`); rdma-sys 0.3 reimplements it the same way.
        // SAFETY: the QP is live; `swr` and the SGE array it points to live
        // across the call (the provider copies them before returning).
        let rc = unsafe { ibv_post_send(self.as_ptr(), &mut swr, &mut bad) };
        if rc != 0 {
            return Err(self.post_error(Verb::PostSend, "ibv_post_send", rc_errno(rc), true));
        }
        self.tracker.posted_send(wr.wr_id, wr.op.wc_opcode());
        Ok(())
    }

    /// `ibv_post_recv` of one WR whose SGEs were already resolved.
    /// Refused on a QP with an SRQ (providers say only EINVAL or ENOMEM).
    pub(crate) fn post_recv(&mut self, wr: &RecvWr<'_>, sges: &mut [ibv_sge]) -> Result<()> {
        if self.parents.srq.is_some() {
            return Err(TransportError::invalid(
                Verb::PostRecv,
                "qp",
                0,
                "the QP takes its receives from a shared receive queue: post them with post_srq_recv",
            ));
        }
        self.check_post(Verb::PostRecv, sges.len(), false)?;
        let mut rwr = ibv_recv_wr {
            wr_id: wr.wr_id,
            next: std::ptr::null_mut(),
            sg_list: if sges.is_empty() { std::ptr::null_mut() } else { sges.as_mut_ptr() },
            num_sge: sges.len() as i32, // <= max_recv_sge
        };
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // Static inline in C, through the ops table (as post_send).
        // SAFETY: as in `post_send`.
        let rc = unsafe { ibv_post_recv(self.as_ptr(), &mut rwr, &mut bad) };
        if rc != 0 {
            return Err(self.post_error(Verb::PostRecv, "ibv_post_recv", rc_errno(rc), false));
        }
        self.tracker.posted_recv(wr.wr_id);
        Ok(())
    }

    /// One `ibv_post_recv` of every WR of `wrs` chained, whose SGEs were
    /// already resolved into `sges` (in order, `wrs[i].sges.len()` each).
    /// `chain` is reused scratch (no allocation once it has grown). Every WR
    /// is checked before any is posted; on a provider failure the WRs before
    /// `bad_wr` were posted (and are tracked).
    pub(crate) fn post_recv_chain(
        &mut self,
        wrs: &[RecvWr<'_>],
        sges: &mut [ibv_sge],
        chain: &mut Vec<ibv_recv_wr>,
    ) -> Result<()> {
        if wrs.is_empty() {
            return Ok(());
        }
        if self.parents.srq.is_some() {
            return Err(TransportError::invalid(
                Verb::PostRecv,
                "qp",
                0,
                "the QP takes its receives from a shared receive queue: post them with post_srq_recv",
            ));
        }
        for wr in wrs {
            self.check_post(Verb::PostRecv, wr.sges.len(), false)?;
        }
        debug_assert_eq!(sges.len(), wrs.iter().map(|w| w.sges.len()).sum::<usize>());
        chain.clear();
        // One pointer into `sges` for the whole chain: re-borrowing the slice
        // per WR would invalidate the pointers saved for the earlier WRs.
        // `at + n <= sges.len()` by the assertion above, so no offset leaves
        // the slice.
        let sge_base = sges.as_mut_ptr();
        let mut at = 0;
        for wr in wrs {
            let n = wr.sges.len();
            let sg_list = if n == 0 { std::ptr::null_mut() } else { sge_base.wrapping_add(at) };
            chain.push(ibv_recv_wr { wr_id: wr.wr_id, next: std::ptr::null_mut(), sg_list, num_sge: n as i32 });
            at += n;
        }
        let base = chain.as_mut_ptr();
        for i in 1..chain.len() {
            // SAFETY: `i` < chain.len(): both `base.add(i - 1)` and
            // `base.add(i)` are elements of the vector, written only through
            // `base` from here on.
            unsafe { (*base.add(i - 1)).next = base.add(i) };
        }
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; `chain` is a valid linked list of
        // `chain.len()` WRs (the last one's `next` is null) whose SGE
        // pointers point into `sges`, which outlives the call; the provider
        // copies the WRs and SGEs before returning.
        let rc = unsafe { ibv_post_recv(self.as_ptr(), base, &mut bad) };
        let posted = if rc == 0 {
            wrs.len()
        } else {
            // `bad` points at the first WR not posted (or is null).
            (0..chain.len()).find(|&i| std::ptr::eq(base.wrapping_add(i), bad)).unwrap_or(0)
        };
        chain.clear();
        for wr in &wrs[..posted] {
            self.tracker.posted_recv(wr.wr_id);
        }
        if rc != 0 {
            return Err(self.post_error(Verb::PostRecv, "ibv_post_recv", rc_errno(rc), false));
        }
        Ok(())
    }

    /// Destroys the QP now, reporting failure (the QP then stays).
    pub(crate) fn destroy(&mut self) -> Result<()> {
        let Some(qp) = self.qp else { return Ok(()) };
        // SAFETY: our live QP; callers drop `self` right after success.
        let rc = unsafe { ibv_destroy_qp(qp.as_ptr()) };
        if rc != 0 {
            return Err(os_error(Verb::DestroyQp, "ibv_destroy_qp", rc_errno(rc)));
        }
        self.qp = None;
        Ok(())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            // SAFETY: our live QP, destroyed exactly once.
            let rc = unsafe { ibv_destroy_qp(qp.as_ptr()) };
            if rc != 0 {
                tracing::warn!(errno = rc_errno(rc), qp = %self.id, "ibv_destroy_qp failed during drop");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctb_core::transport::{Access, AddressVector, Gid, InitAttr, Mtu, Psn, RnrTimer, RtrAttr, RtsAttr};
    use std::net::Ipv4Addr;

    type M = ibv_qp_attr_mask;

    fn rtr(sgid_index: u32) -> QpTransition {
        QpTransition::Rtr(RtrAttr {
            path_mtu: Mtu::Mtu1024,
            dest_qpn: 0x12_3456,
            rq_psn: Psn::new(0xAB_CDEF).unwrap(),
            max_dest_rd_atomic: 16,
            min_rnr_timer: RnrTimer::from_code(12).unwrap(),
            av: AddressVector {
                flow_label: 7,
                traffic_class: 3,
                ..AddressVector::new(Gid::from_ipv4(Ipv4Addr::new(10, 10, 0, 1)), sgid_index)
            },
        })
    }

    #[test]
    fn init_mask_and_attrs() {
        let t = QpTransition::Init(InitAttr {
            pkey_index: 0,
            port: 1,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        });
        let (a, m) = modify_attr(&t).unwrap();
        assert_eq!(m.0, (M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS).0);
        assert_eq!((a.qp_state, a.port_num, a.qp_access_flags), (ibv_qp_state::IBV_QPS_INIT, 1, 0b111));
    }

    #[test]
    fn rtr_mask_and_grh() {
        let (a, m) = modify_attr(&rtr(1)).unwrap();
        assert_eq!(
            m.0,
            (M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER)
                .0
        );
        assert_eq!((a.path_mtu, a.dest_qp_num, a.rq_psn), (3, 0x12_3456, 0xAB_CDEF));
        assert_eq!((a.max_dest_rd_atomic, a.min_rnr_timer), (16, 12));
        let ah = a.ah_attr;
        assert_eq!((ah.is_global, ah.port_num, ah.sl), (1, 1, 0));
        assert_eq!((ah.grh.sgid_index, ah.grh.hop_limit, ah.grh.traffic_class, ah.grh.flow_label), (1, 64, 3, 7));
        // SAFETY: the union was written through `raw`.
        assert_eq!(unsafe { ah.grh.dgid.raw }, Gid::from_ipv4(Ipv4Addr::new(10, 10, 0, 1)).0);
    }

    #[test]
    fn gid_index_above_255_is_refused_not_truncated() {
        let Err(e) = modify_attr(&rtr(300)) else { panic!("accepted GID index 300") };
        let TransportError::InvalidArgument { verb: Verb::ModifyQp, source } = e else { panic!("{e:?}") };
        assert_eq!((source.field, source.value), ("sgid_index", 300));
    }

    #[test]
    fn rts_mask_and_validation() {
        let rts = RtsAttr { sq_psn: Psn::new(5).unwrap(), timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 16 };
        let (a, m) = modify_attr(&QpTransition::Rts(rts)).unwrap();
        assert_eq!(
            m.0,
            (M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC)
                .0
        );
        assert_eq!((a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic), (5, 14, 7, 7, 16));
        match modify_attr(&QpTransition::Rts(RtsAttr { retry_cnt: 8, ..rts })) {
            Err(e) => assert!(e.to_string().contains("retry_cnt"), "{e}"),
            Ok(_) => panic!("retry_cnt 8 accepted"),
        }
    }

    #[test]
    fn err_and_reset_set_only_the_state() {
        for (t, s) in
            [(QpTransition::Err, ibv_qp_state::IBV_QPS_ERR), (QpTransition::Reset, ibv_qp_state::IBV_QPS_RESET)]
        {
            let (a, m) = modify_attr(&t).unwrap();
            assert_eq!((a.qp_state, m.0), (s, M::IBV_QP_STATE.0));
        }
    }

    #[test]
    fn posting_rules() {
        assert!(!can_post(QpState::Reset, false));
        assert!(can_post(QpState::Init, false));
        assert!(!can_post(QpState::Rtr, true));
        assert!(can_post(QpState::Rts, true));
        assert!(can_post(QpState::Err, true));
    }
}
