//! [`DlTransport`]: rctb's [`Transport`] over the libibverbs that
//! `rc_server_init` loaded, as much of it as the session server uses (PDs,
//! registered host memory, CQs with completion channels, RC QPs and their
//! transitions, posts and polls). SRQs and RDMA CM answer `Unsupported`:
//! the session server exchanges QP numbers in its tokens.

use std::alloc::Layout;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_int;
use std::sync::Arc;

use rctb_transport::time::Instant;
use rctb_transport::{
    AcceptParams, Access, AsyncEvent, CmEvent, Completion, ConnId, ConnectParams, CqId, DeviceInfo, Gid, GidEntry,
    GidType, ListenId, MrId, MrInfo, MrVisitor, Mtu, PdId, PortInfo, PortState, QpId, QpInfo, QpInit, QpState,
    QpTransition, Readiness, RecvWr, Result, SendOp, SendWr, Sge, SrqId, SrqInit, Transport, TransportError, Verb,
    WcOpcode, WcStatus,
};

use crate::sys::*;
use crate::verbs::Device;

mod wait;

/// Registered memory: its pages (freed only once deregistered) and the MR.
struct Mr {
    mr: *mut ibv_mr,
    buf: *mut u8,
    layout: Layout,
    info: MrInfo,
}

struct Cq {
    cq: *mut ibv_cq,
    channel: *mut ibv_comp_channel,
    /// Requested a notification whose event was not read yet.
    armed: bool,
    /// Completions a `wait` polled, kept for `poll_cq`.
    held: VecDeque<Completion>,
}

struct Qp {
    qp: *mut ibv_qp,
    info: QpInfo,
    /// Work requests outstanding (wr_id, what completes), oldest first: an
    /// error completion's opcode is not defined by verbs, so it is taken
    /// from here.
    posted: VecDeque<(u64, WcOpcode)>,
}

/// The session server's transport on one opened device.
pub(crate) struct DlTransport {
    dev: Arc<Device>,
    next: u32,
    pds: BTreeMap<PdId, *mut ibv_pd>,
    mrs: BTreeMap<MrId, Mr>,
    cqs: BTreeMap<CqId, Cq>,
    qps: BTreeMap<QpId, Qp>,
    /// QP numbers to handles: a completion names its QP by number.
    by_qpn: BTreeMap<u32, QpId>,
}

// SAFETY: every pointer is a verbs object of `dev`'s context, owned by this
// transport alone; libibverbs objects may be used from any thread, one
// caller at a time, which `&mut self` (and RcService's mutex) gives.
unsafe impl Send for DlTransport {}

fn os(verb: Verb, what: &'static str, rc: c_int) -> TransportError {
    let errno = match rc {
        -1 => std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO),
        rc if rc < 0 => -rc,
        0 => std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO),
        rc => rc,
    };
    TransportError::Os { verb, what, errno, message: std::io::Error::from_raw_os_error(errno).to_string() }
}

fn opcode_of(raw: ibv_wc_opcode) -> Option<WcOpcode> {
    Some(match raw {
        IBV_WC_SEND => WcOpcode::Send,
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_COMP_SWAP => WcOpcode::CompSwap,
        IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        IBV_WC_RECV => WcOpcode::Recv,
        IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        _ => return None,
    })
}

impl DlTransport {
    pub(crate) fn new(dev: Device) -> Self {
        DlTransport {
            dev: Arc::new(dev),
            next: 1,
            pds: BTreeMap::new(),
            mrs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            by_qpn: BTreeMap::new(),
        }
    }

    /// The device's name (for the log).
    pub(crate) fn device_name(&self) -> &str {
        &self.dev.name
    }

    fn id(&mut self) -> u32 {
        let id = self.next;
        self.next += 1;
        id
    }

    fn sges(&self, verb: Verb, sges: &[Sge]) -> Result<Vec<ibv_sge>> {
        sges.iter()
            .map(|s| {
                let mr = self.mrs.get(&s.mr).ok_or_else(|| TransportError::handle(verb, s.mr))?;
                if s.offset.checked_add(u64::from(s.len)).is_none_or(|end| end > mr.info.len) {
                    return Err(TransportError::invalid(verb, "sge", s.offset, "must lie inside its region"));
                }
                Ok(ibv_sge { addr: mr.info.addr + s.offset, length: s.len, lkey: mr.info.lkey })
            })
            .collect()
    }

    /// Polls the CQ's completions into `held`.
    fn drain(&mut self, cq: CqId) -> Result<()> {
        let entry = self.cqs.get(&cq).ok_or_else(|| TransportError::handle(Verb::PollCq, cq))?;
        let raw = entry.cq;
        let mut wcs = [ibv_wc::default(); 16];
        loop {
            // SAFETY: a live CQ of this context; `poll_cq` is set by every
            // provider (verbs.h's inline ibv_poll_cq calls it the same way).
            let n = unsafe {
                let poll =
                    (*(*raw).context).ops.poll_cq.ok_or_else(|| os(Verb::PollCq, "ibv_poll_cq", libc::ENOSYS))?;
                poll(raw, wcs.len() as c_int, wcs.as_mut_ptr())
            };
            if n < 0 {
                return Err(os(Verb::PollCq, "ibv_poll_cq", n));
            }
            for wc in &wcs[..n as usize] {
                let done = self.completion(wc);
                self.cqs.get_mut(&cq).expect("looked up above").held.push_back(done);
            }
            if (n as usize) < wcs.len() {
                return Ok(());
            }
        }
    }

    fn completion(&mut self, wc: &ibv_wc) -> Completion {
        let id = self.by_qpn.get(&wc.qp_num).copied();
        let (qp_id, posted) = match id.and_then(|id| self.qps.get_mut(&id).map(|q| (id, q))) {
            Some((id, q)) => {
                let at = q.posted.iter().position(|&(wr, _)| wr == wc.wr_id);
                (id, at.and_then(|i| q.posted.remove(i)).map(|(_, op)| op))
            }
            None => (QpId(0), None),
        };
        let status = WcStatus::from_raw(wc.status).unwrap_or(WcStatus::GeneralErr);
        let opcode = if status == WcStatus::Success { opcode_of(wc.opcode) } else { None };
        let imm = (wc.wc_flags & IBV_WC_WITH_IMM != 0)
            // SAFETY: a union of two u32 views; WITH_IMM says it is the immediate.
            .then(|| u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data }));
        Completion {
            wr_id: wc.wr_id,
            status,
            opcode: opcode.or(posted).unwrap_or(WcOpcode::Send),
            byte_len: wc.byte_len,
            imm,
            qp: qp_id,
            vendor_err: wc.vendor_err,
        }
    }

    fn ready_now(&mut self, cqs: &[CqId]) -> Result<bool> {
        for &cq in cqs {
            self.drain(cq)?;
        }
        Ok(cqs.iter().any(|cq| !self.cqs[cq].held.is_empty()))
    }
}

impl Transport for DlTransport {
    fn device(&self) -> Result<DeviceInfo> {
        Ok(DeviceInfo {
            name: self.dev.name.clone(),
            max_qp_wr: 16,
            max_sge: 1,
            max_cqe: 16,
            max_mr_size: 1 << 31,
            max_qp_rd_atom: 1,
            max_qp_init_rd_atom: 1,
        })
    }

    fn port(&self, port: u8) -> Result<PortInfo> {
        let lib = self.dev.lib;
        let mut attr = ibv_port_attr::default();
        // SAFETY: an opened context and a zeroed attribute struct.
        let rc = unsafe { (lib.query_port)(self.dev.ctx, port, &mut attr) };
        if rc != 0 {
            return Err(os(Verb::QueryPort, "ibv_query_port", rc));
        }
        let mtu = |m: ibv_mtu| Mtu::from_code(m as u8).unwrap_or(Mtu::Mtu1024);
        let gids = (0..attr.gid_tbl_len.max(0) as u32)
            .filter_map(|index| {
                let mut gid = ibv_gid::default();
                // SAFETY: an opened context; an index inside the port's table.
                let rc = unsafe { (lib.query_gid)(self.dev.ctx, port, index as c_int, &mut gid) };
                // SAFETY: a GID's 16 bytes, whichever view.
                let raw = unsafe { gid.raw };
                (rc == 0 && raw != [0; 16]).then_some(GidEntry { index, gid: Gid(raw), gid_type: GidType::RoceV2 })
            })
            .collect();
        Ok(PortInfo {
            port,
            state: match attr.state {
                IBV_PORT_ACTIVE => PortState::Active,
                3 => PortState::Armed,
                2 => PortState::Init,
                _ => PortState::Down,
            },
            active_mtu: mtu(attr.active_mtu),
            max_mtu: mtu(attr.max_mtu),
            gids,
        })
    }

    fn alloc_pd(&mut self) -> Result<PdId> {
        // SAFETY: an opened context.
        let pd = unsafe { (self.dev.lib.alloc_pd)(self.dev.ctx) };
        if pd.is_null() {
            return Err(os(Verb::AllocPd, "ibv_alloc_pd", 0));
        }
        let id = PdId(self.id());
        self.pds.insert(id, pd);
        Ok(id)
    }

    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        let raw = *self.pds.get(&pd).ok_or_else(|| TransportError::handle(Verb::DeallocPd, pd))?;
        // SAFETY: a PD of this context; a failure (EBUSY) leaves it allocated.
        let rc = unsafe { (self.dev.lib.dealloc_pd)(raw) };
        if rc != 0 {
            return Err(os(Verb::DeallocPd, "ibv_dealloc_pd", rc));
        }
        self.pds.remove(&pd);
        Ok(())
    }

    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        let raw_pd = *self.pds.get(&pd).ok_or_else(|| TransportError::handle(Verb::RegMr, pd))?;
        let size = usize::try_from(len).map_err(|_| TransportError::invalid(Verb::RegMr, "len", len, "too large"))?;
        let layout = Layout::from_size_align(size.max(1), 4096)
            .map_err(|_| TransportError::invalid(Verb::RegMr, "len", len, "too large"))?;
        // SAFETY: a non-zero size (max(1)) with a valid alignment.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        if buf.is_null() {
            return Err(TransportError::Exhausted { verb: Verb::RegMr, what: "memory" });
        }
        // SAFETY: a PD of this context; `buf` holds `size` bytes that stay
        // allocated until the MR is deregistered.
        let mr = unsafe { (self.dev.lib.reg_mr)(raw_pd, buf.cast(), size, access.bits() as c_int) };
        if mr.is_null() {
            let err = os(Verb::RegMr, "ibv_reg_mr", 0);
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(buf, layout) };
            return Err(err);
        }
        let id = MrId(self.id());
        // SAFETY: a registered MR; its keys are plain fields.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        let info = MrInfo { id, addr: buf as u64, len, lkey, rkey, access };
        self.mrs.insert(id, Mr { mr, buf, layout, info });
        Ok(info)
    }

    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        let entry = self.mrs.get(&mr).ok_or_else(|| TransportError::handle(Verb::DeregMr, mr))?;
        // SAFETY: a registered MR of this context.
        let rc = unsafe { (self.dev.lib.dereg_mr)(entry.mr) };
        if rc != 0 {
            // Still registered: the memory stays, as the MR does.
            return Err(os(Verb::DeregMr, "ibv_dereg_mr", rc));
        }
        let entry = self.mrs.remove(&mr).expect("looked up above");
        // SAFETY: allocated by reg_mr with this layout; no longer registered.
        unsafe { std::alloc::dealloc(entry.buf, entry.layout) };
        Ok(())
    }

    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.mrs.get(&mr).map(|m| m.info).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))
    }

    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        let m = self.mrs.get(&mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= m.info.len);
        if end.is_none() {
            return Err(TransportError::invalid(Verb::MrAccess, "offset", offset, "the write must fit the region"));
        }
        // SAFETY: inside the region's allocation (checked above); `data` is
        // the caller's, not inside a region this call can reach mutably.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), m.buf.add(offset as usize), data.len()) };
        Ok(())
    }

    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let m = self.mrs.get(&mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= m.info.len);
        if end.is_none() {
            return Err(TransportError::invalid(Verb::MrAccess, "offset", offset, "the read must fit the region"));
        }
        // SAFETY: inside the region's allocation (checked above).
        unsafe { std::ptr::copy_nonoverlapping(m.buf.add(offset as usize), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        let m = self.mrs.get(&mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let end = offset.checked_add(len).filter(|&e| e <= m.info.len);
        if end.is_none() {
            return Err(TransportError::invalid(Verb::MrAccess, "offset", offset, "the view must fit the region"));
        }
        // SAFETY: inside the region's allocation (checked above), which
        // lives while `self` is borrowed.
        f.visit(unsafe { std::slice::from_raw_parts(m.buf.add(offset as usize), len as usize) });
        Ok(())
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        let lib = self.dev.lib;
        // SAFETY: an opened context.
        let channel = unsafe { (lib.create_comp_channel)(self.dev.ctx) };
        if channel.is_null() {
            return Err(os(Verb::CreateCq, "ibv_create_comp_channel", 0));
        }
        // SAFETY: an opened context and its channel.
        let cq = unsafe { (lib.create_cq)(self.dev.ctx, depth as c_int, std::ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            let err = os(Verb::CreateCq, "ibv_create_cq", 0);
            // SAFETY: made above, used by nothing.
            unsafe { (lib.destroy_comp_channel)(channel) };
            return Err(err);
        }
        let id = CqId(self.id());
        self.cqs.insert(id, Cq { cq, channel, armed: false, held: VecDeque::new() });
        Ok(id)
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        let entry = self.cqs.get(&cq).ok_or_else(|| TransportError::handle(Verb::DestroyCq, cq))?;
        let lib = self.dev.lib;
        // SAFETY: a CQ of this context (its events are all acknowledged:
        // `wait` acknowledges each one it reads).
        let rc = unsafe { (lib.destroy_cq)(entry.cq) };
        if rc != 0 {
            return Err(os(Verb::DestroyCq, "ibv_destroy_cq", rc));
        }
        // SAFETY: the channel of the CQ just destroyed; nothing else uses it.
        unsafe { (lib.destroy_comp_channel)(entry.channel) };
        self.cqs.remove(&cq);
        Ok(())
    }

    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        if init.srq.is_some() {
            return Err(TransportError::Unsupported { verb: Verb::CreateQp, what: "shared receive queues" });
        }
        let pd = *self.pds.get(&init.pd).ok_or_else(|| TransportError::handle(Verb::CreateQp, init.pd))?;
        let send_cq =
            self.cqs.get(&init.send_cq).ok_or_else(|| TransportError::handle(Verb::CreateQp, init.send_cq))?.cq;
        let recv_cq =
            self.cqs.get(&init.recv_cq).ok_or_else(|| TransportError::handle(Verb::CreateQp, init.recv_cq))?.cq;
        let mut attr = ibv_qp_init_attr {
            send_cq,
            recv_cq,
            cap: ibv_qp_cap {
                max_send_wr: init.caps.max_send_wr,
                max_recv_wr: init.caps.max_recv_wr,
                max_send_sge: init.caps.max_send_sge,
                max_recv_sge: init.caps.max_recv_sge,
                max_inline_data: init.caps.max_inline_data,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: c_int::from(init.sq_sig_all),
            ..Default::default()
        };
        // SAFETY: a PD and CQs of this context; `attr` is a filled init attribute.
        let qp = unsafe { (self.dev.lib.create_qp)(pd, &mut attr) };
        if qp.is_null() {
            return Err(os(Verb::CreateQp, "ibv_create_qp", 0));
        }
        let id = QpId(self.id());
        // SAFETY: a created QP; its number is a plain field.
        let qpn = unsafe { (*qp).qp_num };
        let info = QpInfo { id, qpn, state: QpState::Reset };
        self.qps.insert(id, Qp { qp, info, posted: VecDeque::new() });
        self.by_qpn.insert(qpn, id);
        Ok(info)
    }

    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        let entry = self.qps.get_mut(&qp).ok_or_else(|| TransportError::handle(Verb::ModifyQp, qp))?;
        let mut a = ibv_qp_attr::default();
        let mask = match transition {
            QpTransition::Init(i) => {
                a.qp_state = IBV_QPS_INIT;
                a.pkey_index = i.pkey_index;
                a.port_num = i.port;
                a.qp_access_flags = i.access.bits();
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
            }
            QpTransition::Rtr(r) => {
                a.qp_state = IBV_QPS_RTR;
                a.path_mtu = ibv_mtu::from(r.path_mtu.code());
                a.dest_qp_num = r.dest_qpn;
                a.rq_psn = r.rq_psn.get();
                a.max_dest_rd_atomic = r.max_dest_rd_atomic;
                a.min_rnr_timer = r.min_rnr_timer.code();
                a.ah_attr.is_global = 1;
                a.ah_attr.port_num = r.av.port;
                a.ah_attr.sl = r.av.sl;
                a.ah_attr.grh.dgid.raw = r.av.dest_gid.0;
                a.ah_attr.grh.sgid_index = r.av.sgid_index as u8;
                a.ah_attr.grh.hop_limit = r.av.hop_limit;
                a.ah_attr.grh.traffic_class = r.av.traffic_class;
                a.ah_attr.grh.flow_label = r.av.flow_label;
                IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER
            }
            QpTransition::Rts(r) => {
                a.qp_state = IBV_QPS_RTS;
                a.sq_psn = r.sq_psn.get();
                a.timeout = r.timeout;
                a.retry_cnt = r.retry_cnt;
                a.rnr_retry = r.rnr_retry;
                a.max_rd_atomic = r.max_rd_atomic;
                IBV_QP_STATE
                    | IBV_QP_SQ_PSN
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_MAX_QP_RD_ATOMIC
            }
            QpTransition::Err => {
                a.qp_state = IBV_QPS_ERR;
                IBV_QP_STATE
            }
            QpTransition::Reset => {
                a.qp_state = IBV_QPS_RESET;
                IBV_QP_STATE
            }
        };
        // SAFETY: a QP of this context; `a` holds every attribute `mask` names.
        let rc = unsafe { (self.dev.lib.modify_qp)(entry.qp, &mut a, mask as c_int) };
        if rc != 0 {
            return Err(os(Verb::ModifyQp, "ibv_modify_qp", rc));
        }
        entry.info.state = transition.target();
        if matches!(transition, QpTransition::Reset) {
            entry.posted.clear();
        }
        Ok(())
    }

    fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        self.qps.get(&qp).map(|q| q.info).ok_or_else(|| TransportError::handle(Verb::QueryQp, qp))
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let entry = self.qps.get(&qp).ok_or_else(|| TransportError::handle(Verb::DestroyQp, qp))?;
        // SAFETY: a QP of this context.
        let rc = unsafe { (self.dev.lib.destroy_qp)(entry.qp) };
        if rc != 0 {
            return Err(os(Verb::DestroyQp, "ibv_destroy_qp", rc));
        }
        if let Some(q) = self.qps.remove(&qp) {
            self.by_qpn.remove(&q.info.qpn);
        }
        Ok(())
    }

    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        let mut sges = self.sges(Verb::PostSend, wr.sges)?;
        let entry = self.qps.get_mut(&qp).ok_or_else(|| TransportError::handle(Verb::PostSend, qp))?;
        let mut w = ibv_send_wr {
            wr_id: wr.wr_id,
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as c_int,
            send_flags: if wr.signaled { IBV_SEND_SIGNALED } else { 0 }
                | if wr.solicited { IBV_SEND_SOLICITED } else { 0 },
            ..Default::default()
        };
        w.opcode = match wr.op {
            SendOp::Send => IBV_WR_SEND,
            SendOp::SendWithImm { .. } => IBV_WR_SEND_WITH_IMM,
            SendOp::Write { .. } => IBV_WR_RDMA_WRITE,
            SendOp::WriteWithImm { .. } => IBV_WR_RDMA_WRITE_WITH_IMM,
            SendOp::Read { .. } => IBV_WR_RDMA_READ,
            _ => return Err(TransportError::Unsupported { verb: Verb::PostSend, what: "atomics" }),
        };
        if let Some(imm) = wr.op.imm() {
            w.__bindgen_anon_1.imm_data = imm.to_be();
        }
        if let Some(remote) = wr.op.remote() {
            w.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: remote.addr, rkey: remote.rkey };
        }
        let raw = entry.qp;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a QP of this context; `w` and its SGE list live across the
        // call; `post_send` is set by every provider (verbs.h's inline
        // ibv_post_send calls it the same way).
        let rc = unsafe {
            match (*(*raw).context).ops.post_send {
                Some(post) => post(raw, &mut w, &mut bad),
                None => libc::ENOSYS,
            }
        };
        if rc != 0 {
            return Err(os(Verb::PostSend, "ibv_post_send", rc));
        }
        entry.posted.push_back((wr.wr_id, wr.op.wc_opcode()));
        Ok(())
    }

    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        let mut sges = self.sges(Verb::PostRecv, wr.sges)?;
        let entry = self.qps.get_mut(&qp).ok_or_else(|| TransportError::handle(Verb::PostRecv, qp))?;
        let mut w = ibv_recv_wr {
            wr_id: wr.wr_id,
            next: std::ptr::null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as c_int,
        };
        let raw = entry.qp;
        let mut bad = std::ptr::null_mut();
        // SAFETY: as in post_send, for the receive queue.
        let rc = unsafe {
            match (*(*raw).context).ops.post_recv {
                Some(post) => post(raw, &mut w, &mut bad),
                None => libc::ENOSYS,
            }
        };
        if rc != 0 {
            return Err(os(Verb::PostRecv, "ibv_post_recv", rc));
        }
        entry.posted.push_back((wr.wr_id, WcOpcode::Recv));
        Ok(())
    }

    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        if self.cqs.get(&cq).is_some_and(|c| c.held.len() < max) {
            self.drain(cq)?;
        }
        let held = &mut self.cqs.get_mut(&cq).ok_or_else(|| TransportError::handle(Verb::PollCq, cq))?.held;
        let n = held.len().min(max);
        out.extend(held.drain(..n));
        Ok(n)
    }

    fn create_srq(&mut self, _init: &SrqInit) -> Result<SrqId> {
        Err(TransportError::Unsupported { verb: Verb::CreateSrq, what: "shared receive queues" })
    }

    fn modify_srq(&mut self, _srq: SrqId, _limit: u32) -> Result<()> {
        Err(TransportError::Unsupported { verb: Verb::ModifySrq, what: "shared receive queues" })
    }

    fn destroy_srq(&mut self, _srq: SrqId) -> Result<()> {
        Err(TransportError::Unsupported { verb: Verb::DestroySrq, what: "shared receive queues" })
    }

    fn post_srq_recv<'a>(&mut self, _srq: SrqId, _wr: &RecvWr<'a>) -> Result<()> {
        Err(TransportError::Unsupported { verb: Verb::PostSrqRecv, what: "shared receive queues" })
    }

    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        Ok(None)
    }

    fn cm_listen(&mut self, _port: u16) -> Result<ListenId> {
        Err(TransportError::Unsupported { verb: Verb::CmListen, what: "RDMA CM (sessions exchange tokens)" })
    }

    fn cm_connect(&mut self, _params: &ConnectParams) -> Result<(ConnId, QpId)> {
        Err(TransportError::Unsupported { verb: Verb::CmConnect, what: "RDMA CM (sessions exchange tokens)" })
    }

    fn cm_accept(&mut self, _conn: ConnId, _params: &AcceptParams) -> Result<QpId> {
        Err(TransportError::Unsupported { verb: Verb::CmAccept, what: "RDMA CM (sessions exchange tokens)" })
    }

    fn cm_reject(&mut self, _conn: ConnId, _private_data: &[u8]) -> Result<()> {
        Err(TransportError::Unsupported { verb: Verb::CmReject, what: "RDMA CM (sessions exchange tokens)" })
    }

    fn cm_disconnect(&mut self, _conn: ConnId) -> Result<()> {
        Err(TransportError::Unsupported { verb: Verb::CmDisconnect, what: "RDMA CM (sessions exchange tokens)" })
    }

    fn cm_destroy(&mut self, _conn: ConnId) -> Result<()> {
        Err(TransportError::Unsupported { verb: Verb::CmDestroy, what: "RDMA CM (sessions exchange tokens)" })
    }

    fn cm_close_listener(&mut self, _listener: ListenId) -> Result<()> {
        Err(TransportError::Unsupported { verb: Verb::CmListen, what: "RDMA CM (sessions exchange tokens)" })
    }

    fn cm_poll(&mut self) -> Option<CmEvent> {
        None
    }

    fn now(&self) -> Instant {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Instant::from_nanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    /// Polls the CQs; if none has a completion, arms them, polls again
    /// (a completion may have landed before the arming) and sleeps in
    /// `poll(2)` on their channels until one fires or the deadline passes.
    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        self.wait_until(cqs, deadline)
    }
}

impl Drop for DlTransport {
    /// Tears down what the manager left (after a failed teardown it kept):
    /// QPs, then CQs, then regions (freed only once deregistered), then
    /// PDs. What fails to go stays: memory a NIC may touch is never freed.
    fn drop(&mut self) {
        for id in self.qps.keys().copied().collect::<Vec<_>>() {
            let _ = self.destroy_qp(id);
        }
        for id in self.cqs.keys().copied().collect::<Vec<_>>() {
            let _ = self.destroy_cq(id);
        }
        for id in self.mrs.keys().copied().collect::<Vec<_>>() {
            let _ = self.dereg_mr(id);
        }
        for id in self.pds.keys().copied().collect::<Vec<_>>() {
            let _ = self.dealloc_pd(id);
        }
        if !(self.qps.is_empty() && self.cqs.is_empty() && self.mrs.is_empty() && self.pds.is_empty()) {
            // Something is still in use: keep the device open for good.
            std::mem::forget(Arc::clone(&self.dev));
        }
    }
}
