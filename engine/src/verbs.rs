//! The verbs of an [`Endpoint`]: what `rctb_core::Transport` asks of a
//! device, as methods. `SimTransport` and `UdpTransport` are thin adapters
//! over these.
//!
//! Contract: each verb checks its arguments and the handles it is given
//! and fails with the `TransportError` a verbs device gives for the same
//! misuse (`InvalidHandle`, `InvalidArgument` naming the field and the rule,
//! `InvalidState`, `QueueFull`, `Busy`, `Exhausted`); a failed verb changes
//! nothing. None blocks. The verbs that start protocol work (`modify_qp`,
//! `post_send`, `post_recv`, `cm_connect`, `cm_accept`, `cm_disconnect`)
//! take `now`; after them the owner polls the outputs (see [`Endpoint`]).

use std::net::Ipv4Addr;

use rctb_core::time::Instant;
use rctb_core::transport::*;

use crate::cm::{CM_MAX_RETRIES, CM_RESPONSE_TIMEOUT, CmMessage, Conn, ConnState, Connect, QpDriver, mad};
use crate::endpoint::{Cq, Endpoint};
use crate::memory::{Bytes, ExternalMemory, Memory, Region};
use crate::rc::{PostError, RcQp, RoutedCompletion, Srq};

/// Largest region an endpoint registers (it allocates real memory).
pub const MAX_MR_SIZE: u64 = 1 << 32;
/// Largest CQ.
pub const MAX_CQE: u32 = 1 << 20;
/// Largest send or receive queue.
pub const MAX_QP_WR: u32 = 1 << 15;
/// Most scatter/gather entries per work request.
pub const MAX_SGE: u32 = 32;
/// Largest shared receive queue.
pub const MAX_SRQ_WR: u32 = 1 << 15;

fn post_error(verb: Verb, e: PostError) -> TransportError {
    match e {
        PostError::State(state) => TransportError::InvalidState { verb, state, what: "posting work requests" },
        PostError::QueueFull(limit) => TransportError::QueueFull { verb, what: "work requests", limit },
        PostError::TooManySge(limit) => {
            TransportError::invalid(verb, "num_sge", limit as u64 + 1, "exceeds the QP's max SGE count")
        }
        PostError::HasSrq => TransportError::invalid(
            verb,
            "qp",
            0,
            "the QP takes its receives from a shared receive queue: post them with post_srq_recv",
        ),
    }
}

impl Endpoint {
    /// Runs `f` on the QP, then takes its completions and outputs.
    /// `timers`: `f` may start a timer or move one earlier; a post cannot
    /// (a local error that moves the QP to ERR stops them), and then the
    /// timers are not asked about (`after_change` would find nothing to arm).
    #[inline]
    fn with_qp<R>(
        &mut self,
        now: Instant,
        verb: Verb,
        qp: QpId,
        timers: bool,
        f: impl FnOnce(&mut RcQp, &Memory, Ipv4Addr, &mut Vec<RoutedCompletion>) -> R,
    ) -> Result<R> {
        let ip = self.cfg.ip;
        let q = self.qps.get_mut(qp.0).ok_or_else(|| TransportError::handle(verb, qp))?;
        let r = f(q, &self.mem, ip, &mut self.comps);
        // The QP stays in hand for its outputs (no second lookup).
        crate::endpoint::route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
        if timers {
            self.out.after_change(q, now, qp);
        } else {
            self.out.queue_if_ready(q, now, qp);
        }
        Ok(r)
    }

    /// Registers GPU memory: RDMA writes into it become visible only after
    /// [`gpu_flush`](Self::gpu_flush) (local `mr_write` is immediate).
    pub fn reg_gpu_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        let info = self.reg_mr(pd, len, access)?;
        if let Some(r) = self.mem.get_mut(info.id) {
            r.pending = Some(Vec::new());
        }
        Ok(info)
    }

    /// Makes the RDMA writes a GPU region received visible; returns how many.
    pub fn gpu_flush(&mut self, mr: MrId) -> Result<usize> {
        let r = self.mem.get_mut(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let Some(pending) = r.pending.as_mut() else { return Ok(0) };
        let writes = std::mem::take(pending);
        for (offset, data) in &writes {
            r.data.write(*offset as usize, data);
        }
        Ok(writes.len())
    }
    /// What `ibv_query_device` would say: the engine's limits.
    pub fn device(&self) -> Result<DeviceInfo> {
        Ok(DeviceInfo {
            name: self.cfg.name.clone(),
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE,
            max_cqe: MAX_CQE,
            max_mr_size: MAX_MR_SIZE,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
        })
    }

    /// Port 1 (the only one): active, its MTU, its IPv4-mapped RoCE v2 GID.
    pub fn port(&self, port: u8) -> Result<PortInfo> {
        if port != 1 {
            return Err(TransportError::invalid(
                Verb::QueryPort,
                "port",
                port as u64,
                "the simulated device has port 1",
            ));
        }
        let n = self;
        // Like rxe: index 0 the link-local GID, index 1 the IPv4-mapped one.
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[8..11].copy_from_slice(&[n.cfg.mac[0] ^ 0x02, n.cfg.mac[1], n.cfg.mac[2]]);
        ll[11] = 0xff;
        ll[12] = 0xfe;
        ll[13..16].copy_from_slice(&n.cfg.mac[3..6]);
        Ok(PortInfo {
            port: 1,
            state: if n.link_up { PortState::Active } else { PortState::Down },
            active_mtu: n.cfg.mtu,
            max_mtu: Mtu::Mtu4096,
            gids: vec![
                GidEntry { index: 0, gid: Gid(ll), gid_type: GidType::RoceV2 },
                GidEntry { index: 1, gid: Gid::from_ipv4(n.cfg.ip), gid_type: GidType::RoceV2 },
            ],
        })
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> Result<PdId> {
        let n = &mut *self;
        let pd = PdId(n.alloc_id());
        n.pds.insert(pd);
        Ok(pd)
    }

    /// Frees a protection domain (refused while it holds anything).
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        let n = &mut *self;
        if !n.pds.contains(&pd) {
            return Err(TransportError::handle(Verb::DeallocPd, pd));
        }
        let mrs = n.mem.count_in_pd(pd);
        let qps = n.qps.values().filter(|q| q.pd() == pd).count();
        let srqs = n.srqs.values().filter(|s| s.pd == pd).count();
        if mrs + qps + srqs > 0 {
            return Err(TransportError::Busy {
                verb: Verb::DeallocPd,
                what: pd.to_string(),
                by: format!("{mrs} memory regions, {qps} queue pairs, {srqs} shared receive queues"),
            });
        }
        n.pds.remove(&pd);
        Ok(())
    }

    /// Registers `len` bytes of fresh (zeroed) memory with `access`.
    pub fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        check_reg(self, Verb::RegMr, pd, access)?;
        if len > MAX_MR_SIZE {
            return Err(TransportError::invalid(Verb::RegMr, "len", len, "exceeds the device's max_mr_size (4 GiB)"));
        }
        let addr = self.next_addr;
        self.next_addr += len.div_ceil(4096).max(1) * 4096;
        Ok(self.insert_region(pd, addr, len, access, Bytes::Owned(vec![0; len as usize])))
    }

    /// Registers an application's memory: `len` bytes that `memory` reads
    /// and writes, which peers and SGEs address from `iova` (what
    /// `ibv_reg_mr_iova2` takes; `ibv_reg_mr` passes the buffer's own
    /// address). The engine allocates nothing for it.
    pub fn reg_mr_external(
        &mut self,
        pd: PdId,
        iova: u64,
        len: u64,
        access: Access,
        memory: Box<dyn ExternalMemory>,
    ) -> Result<MrInfo> {
        check_reg(self, Verb::RegMr, pd, access)?;
        if iova.checked_add(len).is_none() {
            return Err(TransportError::invalid(Verb::RegMr, "iova+len", iova, "the region must not wrap past 2^64"));
        }
        Ok(self.insert_region(pd, iova, len, access, Bytes::External(memory)))
    }

    fn insert_region(&mut self, pd: PdId, addr: u64, len: u64, access: Access, data: Bytes) -> MrInfo {
        let id = MrId(self.alloc_id());
        let lkey = self.alloc_key();
        let rkey = self.alloc_key();
        let info = MrInfo { id, addr, len, lkey, rkey, access };
        self.mem.insert(Region { info, pd, data, pending: None });
        info
    }

    /// Deregisters a memory region.
    pub fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        let n = &mut *self;
        n.mem.remove(mr).map(|_| ()).ok_or_else(|| TransportError::handle(Verb::DeregMr, mr))
    }

    /// A region's address, length, keys and access.
    pub fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.mem.get(mr).map(|r| r.info).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))
    }

    /// Writes `data` into a region at `offset` (the application's CPU access).
    pub fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.mem.get_mut(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let range = bounds(r.info.len, offset, data.len() as u64)?;
        r.data.write(range.start, data);
        Ok(())
    }

    /// Reads a region at `offset` into `buf`.
    pub fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.mem.get(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let range = bounds(r.info.len, offset, buf.len() as u64)?;
        r.data.view(range, &mut |bytes| buf.copy_from_slice(bytes));
        Ok(())
    }

    /// Hands `f` the region's bytes at `offset` in place, without copying.
    pub fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        let r = self.mem.get(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let range = bounds(r.info.len, offset, len)?;
        r.data.view(range, &mut |bytes| f.visit(bytes));
        Ok(())
    }

    /// Creates a CQ of `depth` entries.
    pub fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        if depth == 0 || depth > MAX_CQE {
            return Err(TransportError::invalid(
                Verb::CreateCq,
                "depth",
                depth as u64,
                "must be 1..=max_cqe (1048576)",
            ));
        }
        let n = &mut *self;
        let cq = CqId(n.alloc_id());
        n.cqs.insert(cq.0, Cq::new(depth));
        Ok(cq)
    }

    /// Destroys a CQ (refused while a QP uses it).
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        let n = &mut *self;
        if !n.cqs.contains_key(cq.0) {
            return Err(TransportError::handle(Verb::DestroyCq, cq));
        }
        let users = n.qps.values().filter(|q| q.init.send_cq == cq || q.init.recv_cq == cq).count();
        if users > 0 {
            return Err(TransportError::Busy {
                verb: Verb::DestroyCq,
                what: cq.to_string(),
                by: format!("{users} queue pairs"),
            });
        }
        n.cqs.remove(cq.0);
        n.armed_cqs.retain(|c| *c != cq);
        Ok(())
    }

    /// Creates an RC QP in RESET.
    pub fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        let n = &mut *self;
        check_qp_init(n, init)?;
        let id = QpId(n.alloc_id());
        let qpn = n.alloc_qpn();
        n.qps.insert(id.0, RcQp::new(id, qpn, *init));
        n.qpn_to_qp.insert(qpn, id);
        n.last_qpn = None;
        Ok(QpInfo { id, qpn, state: QpState::Reset })
    }

    /// Moves a QP to the next state (INIT, RTR, RTS, ERR, RESET).
    pub fn modify_qp(&mut self, now: Instant, qp: QpId, transition: &QpTransition) -> Result<()> {
        if let QpTransition::Rtr(rtr) = transition {
            let port = self.port(1)?;
            if !port.gids.iter().any(|g| g.index == rtr.av.sgid_index) {
                return Err(TransportError::invalid(
                    Verb::ModifyQp,
                    "sgid_index",
                    rtr.av.sgid_index as u64,
                    "no such entry in the port's GID table",
                ));
            }
            if rtr.path_mtu > port.active_mtu {
                return Err(TransportError::invalid(
                    Verb::ModifyQp,
                    "path_mtu",
                    rtr.path_mtu.bytes() as u64,
                    "exceeds the port's active MTU",
                ));
            }
        }
        let r = self.with_qp(now, Verb::ModifyQp, qp, true, |q, _, ip, out| {
            let state = q.state;
            q.modify(transition, ip, out).map_err(|rule| (state, rule))
        })?;
        r.map_err(|(state, rule)| match transition.allowed_from(state) {
            false => TransportError::InvalidState { verb: Verb::ModifyQp, state, what: transition.name() },
            true => TransportError::invalid(Verb::ModifyQp, transition.name(), 0, rule),
        })
    }

    /// A QP's state and attributes.
    pub fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        let q = self.qps.get(qp.0).ok_or_else(|| TransportError::handle(Verb::QueryQp, qp))?;
        Ok(QpInfo { id: qp, qpn: q.qpn, state: q.state })
    }

    /// Destroys a QP (its outstanding work is dropped, not completed).
    pub fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let n = &mut *self;
        let q = n.qps.remove(qp.0).ok_or_else(|| TransportError::handle(Verb::DestroyQp, qp))?;
        n.retire_qp_counters(&q);
        n.qpn_to_qp.remove(&q.qpn);
        n.last_qpn = None;
        for c in n.conns.values_mut() {
            if c.qp == Some(qp) {
                c.qp = None;
            }
        }
        Ok(())
    }

    #[inline]
    /// Posts a send-queue work request (SEND, WRITE, READ, with or without immediate).
    pub fn post_send<'a>(&mut self, now: Instant, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        let len = wr.len();
        if len > u32::MAX as u64 {
            return Err(TransportError::invalid(Verb::PostSend, "length", len, "a message is at most 2^32-1 bytes"));
        }
        if wr.op.is_atomic() {
            if len != ATOMIC_LEN as u64 {
                return Err(TransportError::invalid(
                    Verb::PostSend,
                    "length",
                    len,
                    "an atomic's scatter/gather list holds exactly 8 bytes (the original value)",
                ));
            }
            // rxe's provider refuses it here too (EINVAL); the responder's
            // own check (a NAK invalid request) then sees only other
            // requesters' misaligned atomics.
            let addr = wr.op.remote().map_or(0, |r| r.addr);
            if !addr.is_multiple_of(ATOMIC_LEN as u64) {
                return Err(TransportError::invalid(
                    Verb::PostSend,
                    "remote_addr",
                    addr,
                    "an atomic's remote address is a multiple of 8",
                ));
            }
        }
        self.with_qp(now, Verb::PostSend, qp, false, |q, mem, _, out| q.post_send(wr, len, mem, out))?
            .map_err(|e| post_error(Verb::PostSend, e))
    }

    #[inline]
    /// Posts a receive. It starts no protocol work (`now` is taken as by
    /// the other posts): a receive is consumed only when a message comes,
    /// so the QP's outputs (packets, timers) are left as they are, as
    /// [`post_srq_recv`](Self::post_srq_recv) leaves them.
    pub fn post_recv<'a>(&mut self, _now: Instant, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        let q = self.qps.get_mut(qp.0).ok_or_else(|| TransportError::handle(Verb::PostRecv, qp))?;
        let r = q.post_recv(wr, &self.mem, &mut self.comps);
        // A QP in ERR flushes the receive at once.
        self.route();
        r.map_err(|e| post_error(Verb::PostRecv, e))
    }

    #[inline]
    /// Moves up to `max` completions of `cq` into `out`; how many.
    pub fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let c = self.cqs.get_mut(cq.0).ok_or_else(|| TransportError::handle(Verb::PollCq, cq))?;
        let k = max.min(c.entries.len());
        if k == 0 {
            return Ok(0);
        }
        if k == 1 {
            // One, the usual case: without the loop.
            if let Some(wc) = c.entries.pop_front() {
                out.push(wc.0);
            }
            return Ok(1);
        }
        // Moved one at a time from the front, in order: for the few
        // completions a poll usually takes this is cheaper than a drain.
        out.reserve(k);
        for _ in 0..k {
            out.extend(c.entries.pop_front().map(|wc| wc.0));
        }
        Ok(k)
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId> {
        if !self.pds.contains(&init.pd) {
            return Err(TransportError::handle(Verb::CreateSrq, init.pd));
        }
        for (field, v, max, rule) in [
            ("max_wr", init.max_wr, MAX_SRQ_WR, "must be 1..=max_srq_wr (32768)"),
            ("max_sge", init.max_sge, MAX_SGE, "must be 1..=max_sge (32)"),
        ] {
            if v == 0 || v > max {
                return Err(TransportError::invalid(Verb::CreateSrq, field, v as u64, rule));
            }
        }
        check_srq_limit(Verb::CreateSrq, init.limit, init.max_wr)?;
        let id = SrqId(self.alloc_id());
        self.srqs.insert(id.0, Srq::new(id, init.pd, init.max_wr, init.max_sge, init.limit));
        Ok(id)
    }

    /// Arms (or, with 0, disarms) a shared receive queue's limit.
    pub fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()> {
        let s = self.srqs.get_mut(srq.0).ok_or_else(|| TransportError::handle(Verb::ModifySrq, srq))?;
        check_srq_limit(Verb::ModifySrq, limit, s.max_wr)?;
        s.limit = limit;
        Ok(())
    }

    /// Destroys a shared receive queue (refused while a QP uses it).
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        if !self.srqs.contains_key(srq.0) {
            return Err(TransportError::handle(Verb::DestroySrq, srq));
        }
        let users = self.qps.values().filter(|q| q.init.srq == Some(srq)).count();
        if users > 0 {
            return Err(TransportError::Busy {
                verb: Verb::DestroySrq,
                what: srq.to_string(),
                by: format!("{users} queue pairs"),
            });
        }
        self.srqs.remove(srq.0);
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()> {
        let verb = Verb::PostSrqRecv;
        let s = self.srqs.get_mut(srq.0).ok_or_else(|| TransportError::handle(verb, srq))?;
        if wr.sges.len() as u32 > s.max_sge {
            return Err(post_error(verb, PostError::TooManySge(s.max_sge)));
        }
        if s.len() >= s.max_wr as usize {
            return Err(post_error(verb, PostError::QueueFull(s.max_wr)));
        }
        let bad = self.mem.check_sges(s.pd, wr.sges).is_err();
        s.post(wr, bad);
        Ok(())
    }

    /// Listens for RDMA CM connect requests on `port`.
    pub fn cm_listen(&mut self, port: u16) -> Result<ListenId> {
        let n = &mut *self;
        if n.listeners.contains_key(&port) {
            return Err(TransportError::Busy {
                verb: Verb::CmListen,
                what: format!("port {port}"),
                by: "another listener".into(),
            });
        }
        let id = ListenId(n.alloc_id());
        n.listeners.insert(port, id);
        Ok(id)
    }

    /// Creates a QP from `params.qp`, moves it to INIT and sends a REQ to
    /// `params.remote`. The QP is the caller's to destroy, as one given to
    /// [`cm_connect_qp`](Self::cm_connect_qp) is (see there for what the CM
    /// does to it).
    pub fn cm_connect(&mut self, now: Instant, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        check_private_data(Verb::CmConnect, &params.private_data)?;
        let info = self.create_qp(&params.qp).map_err(|e| rewrap(e, Verb::CmConnect))?;
        let conn = self.start_connect(now, info.id, QpDriver::Cm, params);
        Ok((conn, info.id))
    }

    /// Sends a REQ to `params.remote` for `qp`, an RC QP the caller created
    /// (`rdma_create_qp` then `rdma_connect`); `params.qp` is ignored.
    ///
    /// With [`QpDriver::Cm`] the QP must be in RESET or INIT and the CM
    /// drives it exactly as one [`cm_connect`](Self::cm_connect) creates: to
    /// INIT now if it is in RESET (one in INIT keeps the caller's access
    /// flags), to RTR and RTS when the REP arrives, to ERR on a disconnect
    /// (either side's DREQ). A REJ or a timeout before the REP leaves it in
    /// INIT. With [`QpDriver::Application`] it may be in RESET, INIT, RTR
    /// or RTS and the CM never moves it: the REP arrives as
    /// [`CmEvent::ConnectResponse`], the application applies
    /// [`cm_qp_attr`](Self::cm_qp_attr)'s RTR and RTS and answers with
    /// [`cm_establish`](Self::cm_establish).
    ///
    /// Either way the QP is bound to the connection until
    /// [`cm_destroy`](Self::cm_destroy) (or until the caller destroys the
    /// QP); the CM never destroys it, and `cm_destroy` leaves it in the
    /// state it reached, to be reset and connected again or destroyed.
    ///
    /// Errors (nothing changes): `InvalidArgument` for `private_data` over
    /// [`MAX_REQ_PRIVATE_DATA`] bytes or a `qp` bound to another connection,
    /// `InvalidHandle` for an unknown `qp`, `InvalidState` for a QP in a
    /// state the driver does not take. Every engine QP is an RC QP of the
    /// endpoint's one device, and a connection has no protection domain of
    /// its own, so there is no QP type, device or PD to mismatch.
    pub fn cm_connect_qp(
        &mut self,
        now: Instant,
        qp: QpId,
        driver: QpDriver,
        params: &ConnectParams,
    ) -> Result<ConnId> {
        check_private_data(Verb::CmConnect, &params.private_data)?;
        self.check_cm_qp(Verb::CmConnect, qp, driver)?;
        Ok(self.start_connect(now, qp, driver, params))
    }

    /// The one path of both connects: `qp` exists, in a state `driver` takes.
    fn start_connect(&mut self, now: Instant, qp: QpId, driver: QpDriver, params: &ConnectParams) -> ConnId {
        let (state, qpn) = self.qps.get(qp.0).map_or((QpState::Reset, 0), |q| (q.state, q.qpn));
        if driver == QpDriver::Cm && state == QpState::Reset {
            self.init_qp(qp);
        }
        let conn = ConnId(self.alloc_id());
        let local_psn = self.random_psn();
        let mtu = self.cfg.mtu;
        let mut c = Conn::new(ConnState::ReqSent, *params.remote.ip(), local_psn, mtu);
        c.qp = Some(qp);
        c.driver = driver;
        c.responder_resources = params.responder_resources;
        c.initiator_depth = params.initiator_depth;
        c.retry_count = params.retry_count;
        c.rnr_retry_count = params.rnr_retry_count;
        self.conns.insert(conn, c);
        let msg = CmMessage::Req {
            src_conn: conn,
            // The caller's, or an ephemeral port, as rdma_cm binds an
            // unbound id to one.
            src_port: params.src_port.unwrap_or(0xC000 | (conn.0 as u16 & 0x3FFF)),
            port: params.remote.port(),
            qpn,
            psn: local_psn,
            mtu,
            private_data: params.private_data.clone(),
            responder_resources: params.responder_resources,
            initiator_depth: params.initiator_depth,
            retry_count: params.retry_count,
            rnr_retry_count: params.rnr_retry_count,
            response_timeout: CM_RESPONSE_TIMEOUT,
            max_retries: CM_MAX_RETRIES,
        };
        self.send_reliably(now, conn, msg, CM_MAX_RETRIES);
        conn
    }

    /// Accepts a connect request: creates the QP from `params.qp`, brings
    /// it to RTS and sends the REP. The QP is the caller's to destroy, as
    /// one given to [`cm_accept_qp`](Self::cm_accept_qp) is.
    pub fn cm_accept(&mut self, now: Instant, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        self.check_accept(conn, params)?;
        let info = self.create_qp(&params.qp).map_err(|e| rewrap(e, Verb::CmAccept))?;
        self.finish_accept(now, conn, info.id, QpDriver::Cm, params)?;
        Ok(info.id)
    }

    /// Accepts a connect request on `qp`, an RC QP the caller created
    /// (`rdma_create_qp` then `rdma_accept`); `params.qp` is ignored.
    ///
    /// With [`QpDriver::Cm`] the QP must be in RESET or INIT and the CM
    /// drives it exactly as one [`cm_accept`](Self::cm_accept) creates: to
    /// INIT if it is in RESET (one in INIT keeps the caller's access
    /// flags), then to RTR and RTS before the REP goes out; to ERR when the
    /// active side rejects or times out the REP, or on a disconnect. With
    /// [`QpDriver::Application`] (RESET, INIT, RTR or RTS) the CM never
    /// moves it: the application has applied
    /// [`cm_qp_attr`](Self::cm_qp_attr)'s values before it accepts, and
    /// moves the QP to ERR itself when the connection goes down. Either way
    /// it stays bound to the connection until
    /// [`cm_destroy`](Self::cm_destroy) (or until the caller destroys it);
    /// the CM never destroys it.
    ///
    /// Errors: those of `cm_accept` (unknown `conn`, `Busy` past its
    /// request, `private_data` over [`MAX_REP_PRIVATE_DATA`] bytes), and for
    /// `qp` those of [`cm_connect_qp`](Self::cm_connect_qp). A request the
    /// QP cannot be connected for (a peer QPN out of range) is
    /// `InvalidArgument` naming `qp`, the QP back in RESET if it was there.
    pub fn cm_accept_qp(
        &mut self,
        now: Instant,
        conn: ConnId,
        qp: QpId,
        driver: QpDriver,
        params: &AcceptParams,
    ) -> Result<()> {
        self.check_accept(conn, params)?;
        let state = self.check_cm_qp(Verb::CmAccept, qp, driver)?;
        let r = self.finish_accept(now, conn, qp, driver, params);
        if r.is_err() && state == QpState::Reset {
            let ip = self.cfg.ip;
            if let Some(q) = self.qps.get_mut(qp.0) {
                let _ = q.modify(&QpTransition::Reset, ip, &mut self.comps);
            }
        }
        r
    }

    /// What both accepts check before any QP is touched.
    fn check_accept(&self, conn: ConnId, params: &AcceptParams) -> Result<()> {
        if params.private_data.len() > MAX_REP_PRIVATE_DATA {
            return Err(TransportError::invalid(
                Verb::CmAccept,
                "private_data",
                params.private_data.len() as u64,
                "REP private data is at most 196 bytes",
            ));
        }
        let c = self.conns.get(&conn).ok_or_else(|| TransportError::handle(Verb::CmAccept, conn))?;
        if c.state != ConnState::ReqRcvd {
            return Err(TransportError::Busy {
                verb: Verb::CmAccept,
                what: conn.to_string(),
                by: "a connection past its request".into(),
            });
        }
        Ok(())
    }

    /// The one path of both accepts: `conn` waits for its answer, `qp`
    /// exists in a state `driver` takes.
    fn finish_accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        qp: QpId,
        driver: QpDriver,
        params: &AcceptParams,
    ) -> Result<()> {
        let c = self.conns.get(&conn).ok_or_else(|| TransportError::handle(Verb::CmAccept, conn))?;
        // The initiator depth we may use is bounded by what the peer offered.
        let initiator_depth = params.initiator_depth.min(c.responder_resources);
        let attrs = Connect {
            peer_ip: c.remote_ip,
            mtu: c.mtu,
            dest_qpn: c.remote_qpn,
            // As the kernel's ib_cm: the REP's starting PSN is the one this
            // side receives from, the REQ's the one it sends from.
            rq_psn: c.local_psn,
            sq_psn: c.remote_psn,
            responder_resources: params.responder_resources,
            initiator_depth,
            retry_count: c.retry_count,
            rnr_retry_count: params.rnr_retry_count,
        };
        let (mtu, lpsn, peer) = (c.mtu, c.local_psn, c.peer);
        let (state, qpn) = self.qps.get(qp.0).map_or((QpState::Reset, 0), |q| (q.state, q.qpn));
        if driver == QpDriver::Cm {
            if state == QpState::Reset {
                self.init_qp(qp);
            }
            let res = self.connect_qp(qp, attrs);
            if let Err(rule) = res {
                return Err(TransportError::invalid(Verb::CmAccept, "qp", qpn as u64, rule));
            }
        }
        let c = self.conns.get_mut(&conn).expect("checked above");
        c.qp = Some(qp);
        c.driver = driver;
        c.attrs = Some(attrs);
        c.state = ConnState::RepSent;
        let retries = c.retries_left;
        self.awaiting_rtu.insert(qp, conn);
        if let Some((_, peer_conn)) = peer {
            let msg = CmMessage::Rep {
                dst_conn: peer_conn,
                src_conn: conn,
                qpn,
                psn: lpsn,
                mtu,
                private_data: params.private_data.clone(),
                responder_resources: params.responder_resources,
                initiator_depth,
                rnr_retry_count: params.rnr_retry_count,
            };
            self.send_reliably(now, conn, msg, retries);
        }
        Ok(())
    }

    /// Checks a caller's QP for a CM connect or accept; its state.
    fn check_cm_qp(&self, verb: Verb, qp: QpId, driver: QpDriver) -> Result<QpState> {
        let q = self.qps.get(qp.0).ok_or_else(|| TransportError::handle(verb, qp))?;
        if self.conns.values().any(|c| c.qp == Some(qp)) {
            return Err(TransportError::invalid(
                verb,
                "qp",
                q.qpn as u64,
                "is bound to a connection until that one is destroyed (cm_destroy)",
            ));
        }
        let (ok, what) = match driver {
            QpDriver::Cm => (
                matches!(q.state, QpState::Reset | QpState::Init),
                "a CM connect or accept that drives the QP (it must be in RESET or INIT)",
            ),
            QpDriver::Application => (
                matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr | QpState::Rts),
                "a CM connect or accept on an application-driven QP (it must be in RESET, INIT, RTR or RTS)",
            ),
        };
        if !ok {
            return Err(TransportError::InvalidState { verb, state: q.state, what });
        }
        Ok(q.state)
    }

    /// Completes an application-driven connect after its
    /// [`CmEvent::ConnectResponse`]: sends the RTU (`rdma_establish`). The
    /// application has moved its QP to RTR and RTS with
    /// [`cm_qp_attr`](Self::cm_qp_attr)'s values first (the peer may send
    /// as soon as the RTU arrives); the engine does not check. No event
    /// follows, as librdmacm reports none for `rdma_establish`; a REP that
    /// comes again is answered with the RTU again, as for any connection.
    ///
    /// Errors: `InvalidHandle` for an unknown `conn`; `InvalidArgument`
    /// naming `conn` for one that is not waiting for it (a CM-driven one,
    /// or one whose REP has not come, or already established).
    pub fn cm_establish(&mut self, _now: Instant, conn: ConnId) -> Result<()> {
        let verb = Verb::CmEstablish;
        let c = self.conns.get_mut(&conn).ok_or_else(|| TransportError::handle(verb, conn))?;
        if c.state != ConnState::RepRcvd {
            return Err(TransportError::invalid(
                verb,
                "conn",
                conn.0 as u64,
                "must be an application-driven connect whose REP arrived (CmEvent::ConnectResponse) and \
                 that is not established yet",
            ));
        }
        let Some((peer_ip, peer_conn)) = c.peer else {
            return Err(TransportError::invalid(verb, "conn", conn.0 as u64, "has no peer"));
        };
        c.state = ConnState::Established;
        let rtu = CmMessage::Rtu { dst_conn: peer_conn, src_conn: conn };
        // Kept, not timed: it answers a REP that comes again.
        c.sent = Some(rtu.clone());
        self.send_cm(peer_ip, rtu);
        Ok(())
    }

    /// The attributes the CM moves (or would move) `conn`'s QP to `target`
    /// with, as `rdma_init_qp_attr` gives them: for INIT the port and
    /// access flags; for RTR the peer's QPN, the PSN to receive from, the
    /// path MTU, `max_dest_rd_atomic`, the min RNR timer and the address
    /// vector (the peer's IPv4-mapped GID, source GID index 1); for RTS
    /// the PSN to send from, the ACK timeout, the retry counts and
    /// `max_rd_atomic`. An application that drives its own QP applies
    /// them with `modify_qp`; they are the values the CM applies to a QP
    /// it drives.
    ///
    /// INIT's are known at once. RTR's and RTS's once the peer's QPN and
    /// PSN are: on the passive side from the request (until the accept,
    /// with the read depths and RNR retry count the request asked for, as
    /// the kernel's CM reports them; the accept's replace them), on the
    /// active side from the REP. Before that, and for a `target` other
    /// than INIT, RTR or RTS, `InvalidArgument`; `InvalidHandle` for an
    /// unknown `conn`.
    pub fn cm_qp_attr(&self, conn: ConnId, target: QpState) -> Result<QpTransition> {
        let verb = Verb::CmQpAttr;
        let c = self.conns.get(&conn).ok_or_else(|| TransportError::handle(verb, conn))?;
        let known = |attrs: Option<Connect>| {
            attrs.ok_or_else(|| {
                TransportError::invalid(
                    verb,
                    "conn",
                    conn.0 as u64,
                    "RTR and RTS attributes are known once the peer's QPN and PSN are \
                     (the request on the passive side, the REP on the active side)",
                )
            })
        };
        match target {
            QpState::Init => Ok(crate::cm::init_attr()),
            QpState::Rtr => Ok(QpTransition::Rtr(known(c.attrs)?.rtr())),
            QpState::Rts => Ok(QpTransition::Rts(known(c.attrs)?.rts())),
            other => Err(TransportError::invalid(verb, "target", other as u64, "must be INIT, RTR or RTS")),
        }
    }

    /// Rejects a connect request with `private_data` (REJ, consumer defined).
    pub fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_REJ_PRIVATE_DATA {
            return Err(TransportError::invalid(
                Verb::CmReject,
                "private_data",
                private_data.len() as u64,
                "REJ private data is at most 148 bytes",
            ));
        }
        let c = self.conns.get_mut(&conn).ok_or_else(|| TransportError::handle(Verb::CmReject, conn))?;
        if c.state != ConnState::ReqRcvd {
            return Err(TransportError::Busy {
                verb: Verb::CmReject,
                what: conn.to_string(),
                by: "a connection past its request".into(),
            });
        }
        c.state = ConnState::Closed;
        if let Some((peer_ip, peer_conn)) = c.peer {
            let msg = CmMessage::Rej {
                dst_conn: peer_conn,
                src_conn: conn,
                rejected: crate::cm::Rejected::Req,
                reason: mad::reason::CONSUMER_DEFINED,
                private_data: private_data.to_vec(),
            };
            // Kept: a REQ that comes again gets the same answer.
            c.sent = Some(msg.clone());
            self.send_cm(peer_ip, msg);
        }
        Ok(())
    }

    /// Sends a DREQ; the QP goes to ERR.
    pub fn cm_disconnect(&mut self, now: Instant, conn: ConnId) -> Result<()> {
        if !self.conns.contains_key(&conn) {
            return Err(TransportError::handle(Verb::CmDisconnect, conn));
        }
        self.disconnect_local(now, conn, true);
        Ok(())
    }

    /// Releases a connection id.
    pub fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        self.conns.remove(&conn).map(|_| ()).ok_or_else(|| TransportError::handle(Verb::CmDestroy, conn))
    }

    /// Stops listening.
    pub fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        let port = self.listeners.iter().find(|(_, l)| **l == listener).map(|(p, _)| *p);
        match port {
            Some(p) => {
                self.listeners.remove(&p);
                Ok(())
            }
            None => Err(TransportError::handle(Verb::CmDestroy, listener)),
        }
    }
}

fn bounds(region_len: u64, offset: u64, len: u64) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len => Ok(offset as usize..end as usize),
        _ => {
            Err(TransportError::invalid(Verb::MrAccess, "offset+len", offset.saturating_add(len), "exceeds the region"))
        }
    }
}

/// What every registration checks: the PD, and the access flags' rule.
fn check_reg(n: &Endpoint, verb: Verb, pd: PdId, access: Access) -> Result<()> {
    if !n.pds.contains(&pd) {
        return Err(TransportError::handle(verb, pd));
    }
    // Remote write or atomic access needs local write too (verbs returns EINVAL).
    if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(TransportError::invalid(
            verb,
            "access",
            access.bits() as u64,
            "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
        ));
    }
    Ok(())
}

fn check_qp_init(n: &Endpoint, init: &QpInit) -> Result<()> {
    if !n.pds.contains(&init.pd) {
        return Err(TransportError::handle(Verb::CreateQp, init.pd));
    }
    for cq in [init.send_cq, init.recv_cq] {
        if !n.cqs.contains_key(cq.0) {
            return Err(TransportError::handle(Verb::CreateQp, cq));
        }
    }
    if let Some(srq) = init.srq
        && !n.srqs.contains_key(srq.0)
    {
        return Err(TransportError::handle(Verb::CreateQp, srq));
    }
    let c = &init.caps;
    for (field, v, max) in [
        ("max_send_wr", c.max_send_wr, MAX_QP_WR),
        ("max_recv_wr", c.max_recv_wr, MAX_QP_WR),
        ("max_send_sge", c.max_send_sge, MAX_SGE),
        ("max_recv_sge", c.max_recv_sge, MAX_SGE),
    ] {
        if v > max {
            return Err(TransportError::invalid(Verb::CreateQp, field, v as u64, "exceeds the device limit"));
        }
    }
    Ok(())
}

fn check_srq_limit(verb: Verb, limit: u32, max_wr: u32) -> Result<()> {
    if limit > max_wr {
        return Err(TransportError::invalid(verb, "limit", limit as u64, "exceeds the SRQ's max_wr"));
    }
    Ok(())
}

/// A REQ's private data fits the REQ.
fn check_private_data(verb: Verb, private_data: &[u8]) -> Result<()> {
    if private_data.len() > MAX_REQ_PRIVATE_DATA {
        return Err(TransportError::invalid(
            verb,
            "private_data",
            private_data.len() as u64,
            "REQ private data is at most 56 bytes",
        ));
    }
    Ok(())
}

fn rewrap(e: TransportError, verb: Verb) -> TransportError {
    match e {
        TransportError::InvalidHandle { handle, .. } => TransportError::InvalidHandle { verb, handle },
        TransportError::InvalidArgument { source, .. } => TransportError::InvalidArgument { verb, source },
        other => other,
    }
}
