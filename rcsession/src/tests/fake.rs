//! A hand-driven fake transport for the manager's unit tests: a clock the
//! test sets, CQs the test fills, calls it records, and verbs it can make
//! fail, so every branch of the manager can be reached without a simulator.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::time::Instant;
use crate::transport::*;

/// What the manager did, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    AllocPd(PdId),
    DeallocPd(PdId),
    RegMr(PdId, u64, Access),
    DeregMr(MrId),
    CreateCq(u32),
    DestroyCq(CqId),
    CreateQp(QpInit),
    Modify(QpId, QpTransition),
    DestroyQp(QpId),
    PostSend(QpId, u64, SendOp, Vec<Sge>, bool),
    PostRecv(QpId, u64, Vec<Sge>),
}

#[derive(Debug)]
pub struct Fake {
    pub now: Instant,
    pub calls: Vec<Call>,
    /// Verbs that fail while named here: "alloc_pd", "create_cq",
    /// "create_qp", "reg_mr", "dereg_mr", "destroy_cq", "destroy_qp",
    /// "dealloc_pd", "post_send", "post_recv", "poll_cq", "mr_write",
    /// "mr_read", "mr_view", and "modify_qp:<Init|Rtr|Rts|Err|Reset>".
    pub fail: BTreeSet<&'static str>,
    pub mrs: BTreeMap<MrId, (MrInfo, Vec<u8>)>,
    pub cqs: BTreeMap<CqId, VecDeque<Completion>>,
    pub qp_cq: BTreeMap<QpId, CqId>,
    /// When set, a posted WRITE_WITH_IMM completes at once with this status.
    pub auto_send: Option<WcStatus>,
    pub port_gids: Vec<GidEntry>,
    /// A copy of `calls` that outlives the fake (a client's `close`
    /// consumes it).
    pub shared: Option<std::sync::Arc<std::sync::Mutex<Vec<Call>>>>,
    /// The deadline of each `wait`.
    pub waits: Vec<Instant>,
    pub next: u32,
}

pub fn err(verb: Verb) -> TransportError {
    TransportError::InvalidHandle { verb, handle: "fake".into() }
}

impl Default for Fake {
    fn default() -> Self {
        Fake {
            now: Instant::from_nanos(1_000_000_000),
            calls: Vec::new(),
            fail: BTreeSet::new(),
            mrs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qp_cq: BTreeMap::new(),
            auto_send: None,
            port_gids: vec![
                GidEntry { index: 0, gid: Gid::from_ipv4("10.9.9.9".parse().unwrap()), gid_type: GidType::RoceV1 },
                GidEntry { index: 1, gid: Gid::from_ipv4("10.0.0.1".parse().unwrap()), gid_type: GidType::RoceV2 },
            ],
            shared: None,
            waits: Vec::new(),
            next: 100,
        }
    }
}

impl Fake {
    fn id(&mut self) -> u32 {
        self.next += 1;
        self.next
    }

    fn check(&self, what: &'static str, verb: Verb) -> Result<()> {
        if self.fail.contains(what) { Err(err(verb)) } else { Ok(()) }
    }

    fn record(&mut self, c: Call) {
        if let Some(shared) = &self.shared {
            shared.lock().unwrap().push(c.clone());
        }
        self.calls.push(c);
    }

    /// Queues a completion on `cq`.
    pub fn complete(&mut self, cq: CqId, wc: Completion) {
        self.cqs.entry(cq).or_default().push_back(wc);
    }

    /// The transitions the manager asked of `qp`, in order.
    pub fn transitions(&self, qp: QpId) -> Vec<QpTransition> {
        self.calls
            .iter()
            .filter_map(|c| if let Call::Modify(q, t) = c { (*q == qp).then_some(*t) } else { None })
            .collect()
    }

    pub fn count(&self, f: impl Fn(&Call) -> bool) -> usize {
        self.calls.iter().filter(|c| f(c)).count()
    }
}

pub fn wc(wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32, imm: Option<u32>) -> Completion {
    Completion { wr_id, status, opcode, byte_len, imm, qp: QpId(0), vendor_err: 0 }
}

impl Transport for Fake {
    fn device(&self) -> Result<DeviceInfo> {
        Err(err(Verb::QueryDevice)) // the manager does not call it
    }
    fn port(&self, port: u8) -> Result<PortInfo> {
        Ok(PortInfo {
            port,
            state: PortState::Active,
            active_mtu: Mtu::Mtu1024,
            max_mtu: Mtu::Mtu4096,
            gids: self.port_gids.clone(),
        })
    }
    fn alloc_pd(&mut self) -> Result<PdId> {
        self.check("alloc_pd", Verb::AllocPd)?;
        let pd = PdId(self.id());
        self.record(Call::AllocPd(pd));
        Ok(pd)
    }
    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        self.check("dealloc_pd", Verb::DeallocPd)?;
        self.record(Call::DeallocPd(pd));
        Ok(())
    }
    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        self.check("reg_mr", Verb::RegMr)?;
        let id = MrId(self.id());
        let info = MrInfo { id, addr: 0x10_0000 * u64::from(id.0), len, lkey: id.0, rkey: 0x5000 + id.0, access };
        // Large regions (the size bound's tests) get no bytes behind them.
        self.mrs.insert(id, (info, vec![0; len.min(1 << 20) as usize]));
        self.record(Call::RegMr(pd, len, access));
        Ok(info)
    }
    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        self.check("dereg_mr", Verb::DeregMr)?;
        self.mrs.remove(&mr);
        self.record(Call::DeregMr(mr));
        Ok(())
    }
    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.mrs.get(&mr).map(|m| m.0).ok_or(err(Verb::MrAccess))
    }
    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        self.check("mr_write", Verb::MrAccess)?;
        let m = &mut self.mrs.get_mut(&mr).ok_or(err(Verb::MrAccess))?.1;
        let end = offset as usize + data.len();
        m.get_mut(offset as usize..end).ok_or(err(Verb::MrAccess))?.copy_from_slice(data);
        Ok(())
    }
    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check("mr_read", Verb::MrAccess)?;
        let m = &self.mrs.get(&mr).ok_or(err(Verb::MrAccess))?.1;
        buf.copy_from_slice(m.get(offset as usize..offset as usize + buf.len()).ok_or(err(Verb::MrAccess))?);
        Ok(())
    }
    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        self.check("mr_view", Verb::MrAccess)?;
        let m = &self.mrs.get(&mr).ok_or(err(Verb::MrAccess))?.1;
        f.visit(m.get(offset as usize..(offset + len) as usize).ok_or(err(Verb::MrAccess))?);
        Ok(())
    }
    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        self.check("create_cq", Verb::CreateCq)?;
        let cq = CqId(self.id());
        self.cqs.insert(cq, VecDeque::new());
        self.record(Call::CreateCq(depth));
        Ok(cq)
    }
    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        self.check("destroy_cq", Verb::DestroyCq)?;
        self.record(Call::DestroyCq(cq));
        Ok(())
    }
    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        self.check("create_qp", Verb::CreateQp)?;
        let id = QpId(self.id());
        self.qp_cq.insert(id, init.send_cq);
        self.record(Call::CreateQp(*init));
        Ok(QpInfo { id, qpn: 0x1000 + id.0, state: QpState::Reset })
    }
    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        let key = match transition {
            QpTransition::Init(_) => "modify_qp:Init",
            QpTransition::Rtr(_) => "modify_qp:Rtr",
            QpTransition::Rts(_) => "modify_qp:Rts",
            QpTransition::Err => "modify_qp:Err",
            QpTransition::Reset => "modify_qp:Reset",
        };
        self.check(key, Verb::ModifyQp)?;
        self.record(Call::Modify(qp, *transition));
        Ok(())
    }
    fn query_qp(&self, _qp: QpId) -> Result<QpInfo> {
        Err(err(Verb::QueryQp)) // the manager does not call it
    }
    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        self.check("destroy_qp", Verb::DestroyQp)?;
        self.record(Call::DestroyQp(qp));
        Ok(())
    }
    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        self.check("post_send", Verb::PostSend)?;
        self.record(Call::PostSend(qp, wr.wr_id, wr.op, wr.sges.to_vec(), wr.signaled));
        if let Some(status) = self.auto_send {
            let cq = self.qp_cq[&qp];
            let len = wr.sges.iter().map(|s| s.len).sum();
            self.complete(cq, wc(wr.wr_id, status, WcOpcode::RdmaWrite, len, None));
        }
        Ok(())
    }
    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        self.check("post_recv", Verb::PostRecv)?;
        self.record(Call::PostRecv(qp, wr.wr_id, wr.sges.to_vec()));
        Ok(())
    }
    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        self.check("poll_cq", Verb::PollCq)?;
        let q = self.cqs.entry(cq).or_default();
        let n = q.len().min(max);
        out.extend(q.drain(..n));
        Ok(n)
    }
    fn create_srq(&mut self, _init: &SrqInit) -> Result<SrqId> {
        Err(err(Verb::CreateSrq)) // the manager does not call it
    }
    fn modify_srq(&mut self, _srq: SrqId, _limit: u32) -> Result<()> {
        Err(err(Verb::ModifySrq)) // the manager does not call it
    }
    fn destroy_srq(&mut self, _srq: SrqId) -> Result<()> {
        Err(err(Verb::DestroySrq)) // the manager does not call it
    }
    fn post_srq_recv<'a>(&mut self, _srq: SrqId, _wr: &RecvWr<'a>) -> Result<()> {
        Err(err(Verb::PostSrqRecv)) // the manager does not call it
    }
    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        Ok(None)
    }
    fn cm_listen(&mut self, _port: u16) -> Result<ListenId> {
        Err(err(Verb::CmListen)) // the manager does not call it
    }
    fn cm_connect(&mut self, _params: &ConnectParams) -> Result<(ConnId, QpId)> {
        Err(err(Verb::CmConnect)) // the manager does not call it
    }
    fn cm_accept(&mut self, _conn: ConnId, _params: &AcceptParams) -> Result<QpId> {
        Err(err(Verb::CmAccept)) // the manager does not call it
    }
    fn cm_reject(&mut self, _conn: ConnId, _private_data: &[u8]) -> Result<()> {
        Err(err(Verb::CmReject)) // the manager does not call it
    }
    fn cm_disconnect(&mut self, _conn: ConnId) -> Result<()> {
        Err(err(Verb::CmDisconnect)) // the manager does not call it
    }
    fn cm_destroy(&mut self, _conn: ConnId) -> Result<()> {
        Err(err(Verb::CmDestroy)) // the manager does not call it
    }
    fn cm_close_listener(&mut self, _listener: ListenId) -> Result<()> {
        Err(err(Verb::CmListen)) // the manager does not call it
    }
    fn cm_poll(&mut self) -> Option<CmEvent> {
        None
    }
    fn now(&self) -> Instant {
        self.now
    }
    /// Virtual time: ready when a watched CQ has a completion, else the
    /// clock jumps to the deadline.
    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        self.waits.push(deadline);
        if cqs.iter().any(|cq| self.cqs.get(cq).is_some_and(|q| !q.is_empty())) {
            return Ok(Readiness::Ready);
        }
        self.now = self.now.max(deadline);
        Ok(Readiness::TimedOut)
    }
}
