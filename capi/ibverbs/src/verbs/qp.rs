//! Shared receive queues and queue pairs: creation, queries, and the
//! state transitions of `ibv_modify_qp`.

use super::*;

// ---- shared receive queues ----

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_create_srq(pd: *mut sys::ibv_pd, srq_init_attr: *mut sys::ibv_srq_init_attr) -> *mut sys::ibv_srq {
        if pd.is_null() || srq_init_attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live PD; the caller's init attributes.
        let (p, ctx, ia) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context), &mut *srq_init_attr) };
        let init = SrqInit { pd: p.id, max_wr: ia.attr.max_wr, max_sge: ia.attr.max_sge, limit: ia.attr.srq_limit };
        let mut st = ctx.rt.progress.lock();
        let id = match st.driver.engine_mut(0).0.create_srq(&init) {
            Ok(id) => id,
            Err(e) => return fail(errno_of(&e)),
        };
        let srq = Box::new(Srq {
            srq: sys::ibv_srq {
                context: ctx.ibv(),
                srq_context: ia.srq_context,
                pd,
                handle: id.0,
                ..Default::default()
            },
            id,
            max_wr: ia.attr.max_wr,
            max_sge: ia.attr.max_sge,
            limit: ia.attr.srq_limit,
        });
        let ptr = Box::into_raw(srq);
        st.owner.srqs.insert(id, (ptr as usize, ctx.async_tx.clone()));
        ptr as *mut sys::ibv_srq
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_modify_srq(srq: *mut sys::ibv_srq, srq_attr: *mut sys::ibv_srq_attr, srq_attr_mask: c_int) -> c_int {
        if srq.is_null() || srq_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live SRQ; the caller's attributes.
        let (s, ctx, a) = unsafe { (obj::<Srq, _>(srq), Context::from_ibv((*srq).context), &*srq_attr) };
        if srq_attr_mask as u32 & sys::IBV_SRQ_MAX_WR != 0 {
            return libc::EINVAL; // resizing: the device has no SRQ_RESIZE for shrinking either way
        }
        if srq_attr_mask as u32 & sys::IBV_SRQ_LIMIT != 0 {
            let r = ctx.rt.progress.lock().driver.engine_mut(0).0.modify_srq(s.id, a.srq_limit);
            if let Err(e) = r {
                return errno_of(&e);
            }
            // SAFETY: the library's own field of a live SRQ; the program does
            // not share it.
            unsafe { (*(srq as *mut Srq)).limit = a.srq_limit };
        }
        0
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_query_srq(srq: *mut sys::ibv_srq, srq_attr: *mut sys::ibv_srq_attr) -> c_int {
        if srq.is_null() || srq_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live SRQ; the caller's struct.
        let s = unsafe { obj::<Srq, _>(srq) };
        // SAFETY: as above.
        unsafe { *srq_attr = sys::ibv_srq_attr { max_wr: s.max_wr, max_sge: s.max_sge, srq_limit: s.limit } };
        0
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_destroy_srq(srq: *mut sys::ibv_srq) -> c_int {
        if srq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live SRQ.
        let (s, ctx) = unsafe { (obj::<Srq, _>(srq), Context::from_ibv((*srq).context)) };
        let mut st = ctx.rt.progress.lock();
        if let Err(e) = st.driver.engine_mut(0).0.destroy_srq(s.id) {
            return errno_of(&e);
        }
        st.owner.srqs.remove(&s.id);
        drop(st);
        // SAFETY: freed once, after the engine let it go.
        drop(unsafe { Box::from_raw(srq as *mut Srq) });
        0
    }
);

// ---- queue pairs ----

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_create_qp(pd: *mut sys::ibv_pd, qp_init_attr: *mut sys::ibv_qp_init_attr) -> *mut sys::ibv_qp {
        if pd.is_null() || qp_init_attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live PD; the caller's init attributes (read and, for the
        // capabilities granted, written back).
        let (p, ctx, ia) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context), &mut *qp_init_attr) };
        if ia.qp_type != sys::IBV_QPT_RC {
            // UD, UC, XRC, raw packet: the engine speaks RC.
            return fail(libc::EOPNOTSUPP);
        }
        if ia.send_cq.is_null() || ia.recv_cq.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: live CQs (and SRQ, when given) of the program.
        let (scq, rcq) = unsafe { (obj::<Cq, _>(ia.send_cq), obj::<Cq, _>(ia.recv_cq)) };
        let srq = (!ia.srq.is_null()).then(|| {
            // SAFETY: not NULL, so a live SRQ of the program's.
            unsafe { obj::<Srq, _>(ia.srq) }
        });
        let context = ctx.ibv();
        // Every object must belong to the QP's context.
        if scq.cq.context != context || rcq.cq.context != context || srq.is_some_and(|s| s.srq.context != context) {
            return fail(libc::EINVAL);
        }
        if ia.cap.max_inline_data > MAX_INLINE {
            return fail(libc::EINVAL);
        }
        let caps = QpCaps {
            max_send_wr: ia.cap.max_send_wr.max(1),
            max_recv_wr: if srq.is_some() { 0 } else { ia.cap.max_recv_wr.max(1) },
            max_send_sge: ia.cap.max_send_sge.max(1),
            max_recv_sge: ia.cap.max_recv_sge.max(1),
            max_inline_data: ia.cap.max_inline_data,
        };
        let init = QpInit {
            pd: p.id,
            send_cq: scq.id,
            recv_cq: rcq.id,
            caps,
            sq_sig_all: ia.sq_sig_all != 0,
            srq: srq.map(|s| s.id),
        };
        let mut st = ctx.rt.progress.lock();
        let engine = st.driver.engine_mut(0).0;
        let info = match engine.create_qp(&init) {
            Ok(info) => info,
            Err(e) => return fail(errno_of(&e)),
        };
        // Inline sends copy into a bounce region at post time (see Bounce).
        let bounce = if ia.cap.max_inline_data > 0 {
            let slot = ia.cap.max_inline_data;
            let slots = caps.max_send_wr;
            match engine.reg_mr(p.id, slot as u64 * slots as u64, Access::LOCAL_WRITE) {
                Ok(mr) => Some(Bounce { mr: mr.id, slot, slots, next: 0 }),
                Err(e) => {
                    let _ = engine.destroy_qp(info.id);
                    return fail(errno_of(&e));
                }
            }
        } else {
            None
        };
        ia.cap = sys::ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: ia.cap.max_inline_data,
        };
        let qp = Box::new(Qp {
            qp: sys::ibv_qp {
                context,
                qp_context: ia.qp_context,
                pd,
                send_cq: ia.send_cq,
                recv_cq: ia.recv_cq,
                srq: ia.srq,
                handle: info.id.0,
                qp_num: info.qpn,
                state: sys::IBV_QPS_RESET,
                qp_type: sys::IBV_QPT_RC,
                ..Default::default()
            },
            id: info.id,
            attr: Mutex::new(sys::ibv_qp_attr { qp_state: sys::IBV_QPS_RESET, cap: ia.cap, ..Default::default() }),
            init: *ia,
            bounce: Mutex::new(bounce),
        });
        let ptr = Box::into_raw(qp);
        st.owner.qps.insert(info.id, (info.qpn, ptr as usize, ctx.async_tx.clone()));
        ptr as *mut sys::ibv_qp
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_destroy_qp(qp: *mut sys::ibv_qp) -> c_int {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP.
        let (q, ctx) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context)) };
        let mut st = ctx.rt.progress.lock();
        // The ACKs a last poll left for the next call leave first: the
        // peer is owed them even if this QP goes.
        let _ = st.turn();
        let engine = st.driver.engine_mut(0).0;
        if let Err(e) = engine.destroy_qp(q.id) {
            return errno_of(&e);
        }
        if let Some(b) = *q.bounce.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = engine.dereg_mr(b.mr);
        }
        st.owner.qps.remove(&q.id);
        drop(st);
        // SAFETY: freed once, after the engine let it go.
        drop(unsafe { Box::from_raw(qp as *mut Qp) });
        0
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_query_qp(
        qp: *mut sys::ibv_qp,
        attr: *mut sys::ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut sys::ibv_qp_init_attr,
    ) -> c_int {
        if qp.is_null() || attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP; the caller's out structs.
        let (q, ctx) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context)) };
        let state = ctx.rt.progress.lock().driver.engine(0).query_qp(q.id).map(|i| i.state);
        let mut a = *q.attr.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(s) = state {
            a.qp_state = qp_state_code(s);
            a.cur_qp_state = a.qp_state;
        }
        // SAFETY: as above.
        unsafe {
            *attr = a;
            *init_attr = q.init;
        }
        0
    }
);

pub(crate) fn qp_state_code(s: QpState) -> sys::ibv_qp_state {
    match s {
        QpState::Reset => sys::IBV_QPS_RESET,
        QpState::Init => sys::IBV_QPS_INIT,
        QpState::Rtr => sys::IBV_QPS_RTR,
        QpState::Rts => sys::IBV_QPS_RTS,
        QpState::Err => sys::IBV_QPS_ERR,
        #[allow(unreachable_patterns)]
        _ => sys::IBV_QPS_UNKNOWN,
    }
}

/// The engine transition an `ibv_modify_qp` asks for, checked as the
/// kernel checks it: each transition's required attributes must be in the
/// mask (EINVAL otherwise).
fn transition(a: &sys::ibv_qp_attr, mask: c_uint, cur: QpState) -> Result<Option<QpTransition>, c_int> {
    let has = |bits: c_uint| mask & bits == bits;
    if !has(sys::IBV_QP_STATE) {
        // Attributes alone (no state change): kept, and nothing else.
        return Ok(None);
    }
    let mtu = |code: sys::ibv_mtu| Mtu::from_code(code as u8).map_err(|_| libc::EINVAL);
    Ok(Some(match a.qp_state {
        sys::IBV_QPS_RESET => QpTransition::Reset,
        sys::IBV_QPS_ERR => QpTransition::Err,
        sys::IBV_QPS_INIT if cur == QpState::Reset || cur == QpState::Init => {
            if !has(sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS) {
                return Err(libc::EINVAL);
            }
            if cur == QpState::Init {
                return Ok(None);
            }
            let access = access_of(a.qp_access_flags).ok_or(libc::EINVAL)?;
            QpTransition::Init(InitAttr { pkey_index: a.pkey_index, port: a.port_num, access })
        }
        sys::IBV_QPS_RTR => {
            let need = sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER;
            if !has(need) {
                return Err(libc::EINVAL);
            }
            let ah = &a.ah_attr;
            // RoCE needs the GRH: the peer is named by its GID.
            if ah.is_global == 0 || ah.grh.sgid_index != 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: a GID's 16 bytes, whichever view the caller filled.
            let dgid = Gid(unsafe { ah.grh.dgid.raw });
            if dgid.to_ipv4().is_none() {
                return Err(libc::EINVAL);
            }
            let mut av = AddressVector::new(dgid, ENGINE_SGID_INDEX);
            av.hop_limit = ah.grh.hop_limit;
            av.traffic_class = ah.grh.traffic_class;
            av.flow_label = ah.grh.flow_label;
            av.sl = ah.sl;
            QpTransition::Rtr(RtrAttr {
                path_mtu: mtu(a.path_mtu)?,
                dest_qpn: a.dest_qp_num,
                rq_psn: Psn::new(a.rq_psn).map_err(|_| libc::EINVAL)?,
                max_dest_rd_atomic: a.max_dest_rd_atomic,
                min_rnr_timer: RnrTimer::from_code(a.min_rnr_timer).map_err(|_| libc::EINVAL)?,
                av,
            })
        }
        sys::IBV_QPS_RTS if cur == QpState::Rtr => {
            let need = sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC;
            if !has(need) {
                return Err(libc::EINVAL);
            }
            QpTransition::Rts(RtsAttr {
                sq_psn: Psn::new(a.sq_psn).map_err(|_| libc::EINVAL)?,
                timeout: a.timeout,
                retry_cnt: a.retry_cnt,
                rnr_retry: a.rnr_retry,
                max_rd_atomic: a.max_rd_atomic,
            })
        }
        // RTS -> RTS (timeouts, retry counts): kept, the path stays.
        sys::IBV_QPS_RTS if cur == QpState::Rts => return Ok(None),
        _ => return Err(libc::EINVAL),
    }))
}

/// The `ibv_modify_qp` attributes and mask of an engine transition, as
/// `rdma_init_qp_attr` reports them (the inverse of `transition`).
pub(crate) fn attr_of_transition(t: &QpTransition) -> (sys::ibv_qp_attr, c_uint) {
    let mut a = sys::ibv_qp_attr::default();
    let mask = match t {
        QpTransition::Init(i) => {
            a.qp_state = sys::IBV_QPS_INIT;
            a.pkey_index = i.pkey_index;
            a.port_num = i.port;
            for (bit, acc) in [
                (sys::IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
                (sys::IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
                (sys::IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
                (sys::IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
            ] {
                if i.access.contains(acc) {
                    a.qp_access_flags |= bit;
                }
            }
            sys::IBV_QP_STATE | sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS
        }
        QpTransition::Rtr(r) => {
            a.qp_state = sys::IBV_QPS_RTR;
            a.path_mtu = r.path_mtu.code() as sys::ibv_mtu;
            a.dest_qp_num = r.dest_qpn;
            a.rq_psn = r.rq_psn.get();
            a.max_dest_rd_atomic = r.max_dest_rd_atomic;
            a.min_rnr_timer = r.min_rnr_timer.code();
            let ah = &mut a.ah_attr;
            ah.is_global = 1;
            ah.port_num = 1;
            ah.sl = r.av.sl;
            // The port's one GID (index 0 here; the engine numbers it 1).
            ah.grh.sgid_index = 0;
            ah.grh.dgid.raw = r.av.dest_gid.0;
            ah.grh.hop_limit = r.av.hop_limit;
            ah.grh.traffic_class = r.av.traffic_class;
            ah.grh.flow_label = r.av.flow_label;
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER
        }
        QpTransition::Rts(r) => {
            a.qp_state = sys::IBV_QPS_RTS;
            a.sq_psn = r.sq_psn.get();
            a.timeout = r.timeout;
            a.retry_cnt = r.retry_cnt;
            a.rnr_retry = r.rnr_retry;
            a.max_rd_atomic = r.max_rd_atomic;
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC
        }
        QpTransition::Err => {
            a.qp_state = sys::IBV_QPS_ERR;
            sys::IBV_QP_STATE
        }
        _ => {
            a.qp_state = sys::IBV_QPS_RESET;
            sys::IBV_QP_STATE
        }
    };
    (a, mask)
}

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_modify_qp(qp: *mut sys::ibv_qp, attr: *mut sys::ibv_qp_attr, attr_mask: c_int) -> c_int {
        if qp.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP; the caller's attributes.
        let (q, ctx, a) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context), &*attr) };
        let mask = attr_mask as c_uint;
        let mut st = ctx.rt.progress.lock();
        let (engine, now) = st.driver.engine_mut(0);
        let cur = match engine.query_qp(q.id) {
            Ok(i) => i.state,
            Err(e) => return errno_of(&e),
        };
        if mask & sys::IBV_QP_CUR_STATE != 0 && a.cur_qp_state != qp_state_code(cur) {
            return libc::EINVAL;
        }
        let t = match transition(a, mask, cur) {
            Ok(t) => t,
            Err(e) => return e,
        };
        if let Some(t) = t
            && let Err(e) = engine.modify_qp(now, q.id, &t)
        {
            return errno_of(&e);
        }
        let state = engine.query_qp(q.id).map(|i| i.state).unwrap_or(cur);
        let _ = st.turn();
        drop(st);
        ctx.rt.progress.ring();
        remember(q, a, mask);
        // SAFETY: the program reads `state`; only the library writes it.
        unsafe { (*qp).state = qp_state_code(state) };
        0
    }
);

/// Keeps the attributes `ibv_modify_qp` set, for `ibv_query_qp`.
fn remember(q: &Qp, a: &sys::ibv_qp_attr, mask: c_uint) {
    let mut m = q.attr.lock().unwrap_or_else(|e| e.into_inner());
    macro_rules! keep {
        ($($bit:ident => $($field:ident),+;)*) => {
            $( if mask & sys::$bit != 0 { $( m.$field = a.$field; )+ } )*
        };
    }
    keep! {
        IBV_QP_PKEY_INDEX => pkey_index;
        IBV_QP_PORT => port_num;
        IBV_QP_ACCESS_FLAGS => qp_access_flags;
        IBV_QP_AV => ah_attr;
        IBV_QP_PATH_MTU => path_mtu;
        IBV_QP_DEST_QPN => dest_qp_num;
        IBV_QP_RQ_PSN => rq_psn;
        IBV_QP_MAX_DEST_RD_ATOMIC => max_dest_rd_atomic;
        IBV_QP_MIN_RNR_TIMER => min_rnr_timer;
        IBV_QP_TIMEOUT => timeout;
        IBV_QP_RETRY_CNT => retry_cnt;
        IBV_QP_RNR_RETRY => rnr_retry;
        IBV_QP_SQ_PSN => sq_psn;
        IBV_QP_MAX_QP_RD_ATOMIC => max_rd_atomic;
    }
}

export!(
    "IBVERBS_1.6",
    null_mut(),
    fn ibv_qp_to_qp_ex(qp: *mut sys::ibv_qp) -> *mut sys::ibv_qp_ex {
        // Only QPs created through ibv_create_qp_ex have the extended posting
        // interface; this library creates none.
        fail(libc::EOPNOTSUPP)
    }
);
