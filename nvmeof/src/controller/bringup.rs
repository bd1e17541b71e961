//! Bring-up as a polled state machine (SPDK's way): every step submits one
//! command or waits for one answer, and [`Controller::service`] moves on as
//! far as the answers that have arrived allow, without blocking.
//!
//! Order (docs/protocols.md §2.7): RDMA CM connect of the admin queue, Fabrics
//! Connect (the controller id), Property Get CAP, Property Set CC.EN,
//! Property Get CSTS every poll interval until CSTS.RDY (bounded by
//! CAP.TO; CSTS.CFS is fatal), Identify Controller, Set Features Number of
//! Queues, then per I/O queue RDMA CM connect and Fabrics Connect. Then the
//! controller is [`ControllerState::Ready`].
//!
//! A failed step leaves the controller [`ControllerState::Failed`]: the
//! queue whose connect failed is released at once, the others stay until
//! [`Controller::close`] (which still shuts a working admin queue down with
//! CC.SHN) or [`Controller::reconnect`] / [`Controller::start_reconnect`]
//! (which tear everything down and start again).

use super::*;

/// Where a controller is (what [`Controller::service`] waits for next).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerState {
    /// RDMA CM connect of the admin queue in progress.
    AdminConnecting,
    /// Fabrics Connect on the admin queue outstanding.
    AdminFabricsConnect,
    /// Property Get of CAP outstanding.
    ReadCap,
    /// Property Set of CC.EN outstanding.
    Enable,
    /// Polling CSTS until RDY (a Property Get outstanding, or the next due).
    WaitReady,
    /// Identify Controller outstanding.
    Identify,
    /// Set Features Number of Queues outstanding.
    SetQueues,
    /// RDMA CM connect of I/O queue `qid` in progress.
    IoConnecting {
        /// The I/O queue being connected (1 for the first).
        qid: u16,
    },
    /// Fabrics Connect on I/O queue `qid` outstanding.
    IoFabricsConnect {
        /// The I/O queue whose Connect is outstanding (1 for the first).
        qid: u16,
    },
    /// Up: I/O may be submitted.
    Ready,
    /// Discovery only: the log page is being read.
    ReadLog,
    /// Shutting down (CC.SHN outstanding).
    ShuttingDown,
    /// Bring-up failed ([`Controller::failure`] says why); `reconnect` or `close`.
    Failed,
    /// Closed: every resource released.
    Closed,
}

/// The admin half of bring-up, shared with discovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AdminPhase {
    Connecting,
    Connect {
        cid: u16,
    },
    ReadCap {
        cid: u16,
    },
    Enable {
        cid: u16,
        cap: Cap,
    },
    /// `cid`: a CSTS read outstanding; otherwise the next is due at `next`.
    Csts {
        cid: Option<u16>,
        cap: Cap,
        start: Instant,
        next: Instant,
    },
}

impl AdminPhase {
    pub(super) fn state(&self) -> ControllerState {
        match self {
            AdminPhase::Connecting => ControllerState::AdminConnecting,
            AdminPhase::Connect { .. } => ControllerState::AdminFabricsConnect,
            AdminPhase::ReadCap { .. } => ControllerState::ReadCap,
            AdminPhase::Enable { .. } => ControllerState::Enable,
            AdminPhase::Csts { .. } => ControllerState::WaitReady,
        }
    }

    /// When the next CSTS read is due (nothing else is timed here).
    pub(super) fn poll_at(&self) -> Option<Instant> {
        match self {
            AdminPhase::Csts { cid: None, next, .. } => Some(*next),
            _ => None,
        }
    }
}

/// The controller's step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Admin(AdminPhase),
    Identify { cid: u16 },
    SetQueues { cid: u16, depth: u16, want: u16, in_capsule: u32 },
    Io { qid: u16, n: u16, depth: u16, in_capsule: u32, cid: Option<u16> },
    Ready,
    ShuttingDown { cid: u16 },
    Failed,
    Closed,
}

impl Phase {
    pub(super) fn state(&self) -> ControllerState {
        match self {
            Phase::Admin(a) => a.state(),
            Phase::Identify { .. } => ControllerState::Identify,
            Phase::SetQueues { .. } => ControllerState::SetQueues,
            Phase::Io { qid, cid: None, .. } => ControllerState::IoConnecting { qid: *qid },
            Phase::Io { qid, cid: Some(_), .. } => ControllerState::IoFabricsConnect { qid: *qid },
            Phase::Ready => ControllerState::Ready,
            Phase::ShuttingDown { .. } => ControllerState::ShuttingDown,
            Phase::Failed => ControllerState::Failed,
            Phase::Closed => ControllerState::Closed,
        }
    }
}

/// What the admin half needs besides its queue.
pub(super) struct AdminCtx<'a> {
    pub scratch: MrInfo,
    pub cfg: &'a ControllerConfig,
    pub subnqn: &'a Nqn,
    pub kato_ms: u32,
    /// Interval of the CSTS reads.
    pub poll: Duration,
}

/// The result of command `cid` once finished, an NVMe error status as an error.
pub(super) fn finished(q: &mut Queue, cid: u16, name: &'static str) -> Option<Result<Completion, NvmeError>> {
    q.take(cid)
        .map(|r| r.and_then(|c| c.check().map(|()| c).map_err(|error| NvmeError::Status { command: name, error })))
}

/// Advances the admin half as far as it can now; `Some(cap)` once CSTS.RDY.
/// A failed CM connect or Fabrics Connect releases the queue.
pub(super) fn advance_admin<T: Transport>(
    t: &mut T,
    q: &mut Queue,
    phase: &mut AdminPhase,
    cntlid: &mut u16,
    ctx: &AdminCtx<'_>,
) -> Result<Option<Cap>, NvmeError> {
    loop {
        match *phase {
            AdminPhase::Connecting => {
                if let Some(e) = q.failure().cloned() {
                    q.close(t);
                    return Err(e);
                }
                if q.is_connecting() {
                    return Ok(None);
                }
                let r = submit_connect(t, q, ctx.scratch, ctx.cfg, ctx.subnqn, CNTLID_DYNAMIC, ctx.kato_ms);
                match r {
                    Ok(cid) => *phase = AdminPhase::Connect { cid },
                    Err(e) => {
                        q.close(t);
                        return Err(e);
                    }
                }
            }
            AdminPhase::Connect { cid } => {
                let Some(r) = finished(q, cid, "Connect") else { return Ok(None) };
                match connect_result(q, r, CNTLID_DYNAMIC) {
                    Ok(id) => *cntlid = id,
                    Err(e) => {
                        q.close(t);
                        return Err(e);
                    }
                }
                let cid = q.submit(t, &NvmeCommand::PropertyGet { size: PropSize::Eight, offset: REG_CAP }, None)?;
                *phase = AdminPhase::ReadCap { cid };
            }
            AdminPhase::ReadCap { cid } => {
                let Some(r) = finished(q, cid, "Property Get") else { return Ok(None) };
                let cap = Cap(r?.result);
                let cc =
                    NvmeCommand::PropertySet { size: PropSize::Four, offset: REG_CC, value: cc_enable(cap) as u64 };
                let cid = q.submit(t, &cc, None)?;
                *phase = AdminPhase::Enable { cid, cap };
            }
            AdminPhase::Enable { cid, cap } => {
                let Some(r) = finished(q, cid, "Property Set") else { return Ok(None) };
                r?;
                let start = t.now();
                *phase = AdminPhase::Csts { cid: None, cap, start, next: start };
            }
            AdminPhase::Csts { cid: None, cap, start, next } => {
                if t.now() < next {
                    return Ok(None);
                }
                let get = NvmeCommand::PropertyGet { size: PropSize::Four, offset: REG_CSTS };
                let cid = q.submit(t, &get, None)?;
                *phase = AdminPhase::Csts { cid: Some(cid), cap, start, next };
            }
            AdminPhase::Csts { cid: Some(cid), cap, start, next } => {
                let Some(r) = finished(q, cid, "Property Get") else { return Ok(None) };
                let csts = r?.dw0();
                if csts & CSTS_FATAL != 0 {
                    return Err(NvmeError::ControllerFatal);
                }
                if csts & CSTS_READY != 0 {
                    return Ok(Some(cap));
                }
                let now = t.now();
                let waited = now - start;
                if waited >= ready_timeout(cap) {
                    return Err(NvmeError::NotReady { waited });
                }
                *phase = AdminPhase::Csts { cid: None, cap, start, next: now.max(next) + ctx.poll };
            }
        }
    }
}

impl<T: Transport> Controller<T> {
    /// Connects and brings the controller up (the order of the module
    /// docs): [`Controller::start`], then [`Controller::service`] and the
    /// transport's wait until [`ControllerState::Ready`]. Blocks in
    /// transport time (each step bounded by the command timeout, CSTS.RDY
    /// by CAP.TO). Everything made is released again on failure, and the
    /// transport handed back in the [`ConnectError`].
    pub fn connect(t: T, cfg: ControllerConfig) -> Result<Self, ConnectError<T>> {
        let mut c = Controller::start(t, cfg)?;
        match c.run_bring_up() {
            Ok(()) => Ok(c),
            Err(e) => {
                c.close();
                Err(ConnectError::new(c.t, e))
            }
        }
    }

    /// Starts bringing a controller up without waiting: allocates the PD
    /// and the admin scratch buffer and sends the admin queue's CM request.
    /// The controller is then [`ControllerState::AdminConnecting`]; call
    /// [`Controller::service`] whenever the transport has something for it
    /// (its [`Controller::wait_set`]) until [`Controller::state`] is
    /// `Ready` or `service` fails. Fails only for local verbs (nothing is
    /// left allocated then; the transport comes back in the
    /// [`ConnectError`]).
    pub fn start(mut t: T, cfg: ControllerConfig) -> Result<Self, ConnectError<T>> {
        let pd = match t.alloc_pd() {
            Ok(pd) => pd,
            Err(e) => return Err(ConnectError::new(t, e.into())),
        };
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let scratch = match t.reg_mr(pd, SCRATCH_LEN, access) {
            Ok(m) => m,
            Err(e) => {
                let _ = t.dealloc_pd(pd);
                return Err(ConnectError::new(t, e.into()));
            }
        };
        let admin = match Queue::start(&mut t, pd, &admin_queue(&cfg)) {
            Ok(q) => q,
            Err(e) => {
                let _ = t.dereg_mr(scratch.id);
                let _ = t.dealloc_pd(pd);
                return Err(ConnectError::new(t, e));
            }
        };
        Ok(Controller {
            t,
            cfg,
            pd,
            scratch,
            admin,
            io: Vec::new(),
            cap: Cap(0),
            info: ControllerInfo::decode(&[0u8; IDENTIFY_LEN]).expect("zeros decode"),
            cntlid: 0,
            max_transfer: 0,
            next_keep_alive: None,
            keep_alive_cid: None,
            next_queue: 0,
            phase: Phase::Admin(AdminPhase::Connecting),
            down: None,
            gpu_flush: None,
            pending: std::collections::BTreeMap::new(),
            finished: Vec::new(),
            next_ticket: 1,
            poller: Poller::new(PollMode::Event),
            wait_cqs: Vec::new(),
            unclocked_turns: 0,
        })
    }

    /// Service and wait until the bring-up is done or fails.
    fn run_bring_up(&mut self) -> Result<(), NvmeError> {
        loop {
            self.service()?;
            if matches!(self.phase, Phase::Ready) {
                return Ok(());
            }
            let (cqs, until) = self.wait_set();
            self.t.wait(&cqs, until)?;
        }
    }

    /// The interval of CSTS reads: each counts as traffic for the
    /// keep-alive timer, so well within KATO (a Keep Alive is not sent
    /// before the controller is up).
    fn csts_poll(&self) -> Duration {
        let mut poll = Duration::from_millis(10);
        if self.cfg.keep_alive > Duration::ZERO {
            poll = poll.min(self.cfg.keep_alive / 4);
        }
        poll
    }

    /// One bring-up pass of `service`: as many steps as the answers allow.
    pub(super) fn advance(&mut self) -> Result<(), NvmeError> {
        loop {
            match self.phase {
                Phase::Admin(mut a) => {
                    let kato_ms = u32::try_from(self.cfg.keep_alive.as_millis()).unwrap_or(u32::MAX);
                    let ctx = AdminCtx {
                        scratch: self.scratch,
                        cfg: &self.cfg,
                        subnqn: &self.cfg.subnqn,
                        kato_ms,
                        poll: self.csts_poll(),
                    };
                    let r = advance_admin(&mut self.t, &mut self.admin, &mut a, &mut self.cntlid, &ctx);
                    self.phase = Phase::Admin(a);
                    let Some(cap) = r? else { return Ok(()) };
                    self.cap = cap;
                    let sgl = Sgl::for_region(&self.scratch, 0, IDENTIFY_LEN as u64).map_err(NvmeError::Build)?;
                    self.keep_alive_tick()?;
                    let cmd = NvmeCommand::Identify { cns: CNS_CONTROLLER, cntid: 0, nsid: 0, sgl };
                    let cid = self.admin.submit(&mut self.t, &cmd, None)?;
                    self.phase = Phase::Identify { cid };
                }
                Phase::Identify { cid } => {
                    let Some(r) = finished(&mut self.admin, cid, "Identify") else { return Ok(()) };
                    r?;
                    let mut b = vec![0u8; IDENTIFY_LEN];
                    self.t.mr_read(self.scratch.id, 0, &mut b)?;
                    let info = ControllerInfo::decode(&b).map_err(NvmeError::Protocol)?;
                    self.phase = self.after_identify(info)?;
                }
                Phase::SetQueues { cid, depth, want, in_capsule } => {
                    let Some(r) = finished(&mut self.admin, cid, "Set Features") else { return Ok(()) };
                    let c = r?;
                    let allowed = (c.dw0() as u16).min((c.dw0() >> 16) as u16).saturating_add(1);
                    let n = want.min(allowed);
                    self.phase = self.next_io_queue(1, n, depth, in_capsule)?;
                }
                Phase::Io { qid, n, depth, in_capsule, cid: None } => {
                    let q = self.io.last_mut().expect("the queue connecting");
                    if let Some(e) = q.failure().cloned() {
                        q.close(&mut self.t);
                        return Err(e);
                    }
                    if q.is_connecting() {
                        return Ok(());
                    }
                    let r = submit_connect(&mut self.t, q, self.scratch, &self.cfg, &self.cfg.subnqn, self.cntlid, 0);
                    match r {
                        Ok(cid) => self.phase = Phase::Io { qid, n, depth, in_capsule, cid: Some(cid) },
                        Err(e) => {
                            q.close(&mut self.t);
                            return Err(e);
                        }
                    }
                }
                Phase::Io { qid, n, depth, in_capsule, cid: Some(cid) } => {
                    let q = self.io.last_mut().expect("the queue connecting");
                    let Some(r) = finished(q, cid, "Connect") else { return Ok(()) };
                    if let Err(e) = connect_result(q, r, self.cntlid) {
                        q.close(&mut self.t);
                        return Err(e);
                    }
                    self.phase = self.next_io_queue(qid + 1, n, depth, in_capsule)?;
                }
                Phase::Ready | Phase::ShuttingDown { .. } | Phase::Failed | Phase::Closed => return Ok(()),
            }
        }
    }

    /// Checks Identify Controller and sends Set Features Number of Queues.
    fn after_identify(&mut self, info: ControllerInfo) -> Result<Phase, NvmeError> {
        if info.cntlid != self.cntlid {
            return Err(NvmeError::Protocol(ProtocolError::field(
                "IdentifyController",
                "cntlid",
                info.cntlid.into(),
                "must match the id Fabrics Connect returned",
            )));
        }
        if !info.keyed_sgl() {
            return Err(NvmeError::Unsupported("the controller lacks keyed SGL data blocks (SGLS bit 2)".into()));
        }
        if info.icdoff != 0 {
            return Err(NvmeError::Unsupported(format!("in-capsule data offset {} (ICDOFF must be 0)", info.icdoff)));
        }
        self.max_transfer = max_transfer(self.cap.page_size(), info.mdts);
        let mut depth = self.cfg.queue_depth.min(self.cap.mqes().saturating_add(1)).min(MAX_QUEUE_DEPTH);
        if info.maxcmd != 0 {
            depth = depth.min(info.maxcmd);
        }
        if depth < MIN_QUEUE_DEPTH {
            return Err(
                InvalidValue::new("queue depth", depth.into(), "the negotiated depth must be at least 2").into()
            );
        }
        let want = self.cfg.io_queues.max(1);
        let value = (want - 1) as u32 | ((want - 1) as u32) << 16;
        let in_capsule = if self.cfg.in_capsule_writes { info.in_capsule_bytes().min(16 * 1024) as u32 } else { 0 };
        self.info = info;
        let cmd = NvmeCommand::SetFeatures { fid: FEAT_NUMBER_OF_QUEUES, nsid: 0, value };
        let cid = self.admin.submit(&mut self.t, &cmd, None)?;
        Ok(Phase::SetQueues { cid, depth, want, in_capsule })
    }

    /// Starts I/O queue `qid` of `n`, or finishes the bring-up after the last.
    fn next_io_queue(&mut self, qid: u16, n: u16, depth: u16, in_capsule: u32) -> Result<Phase, NvmeError> {
        if qid > n {
            if self.cfg.keep_alive > Duration::ZERO {
                self.next_keep_alive = Some(self.t.now() + self.cfg.keep_alive / 2);
            }
            return Ok(Phase::Ready);
        }
        let qcfg =
            QueueConfig { addr: self.cfg.addr, qid, depth, cntlid: self.cntlid, in_capsule, timeout: self.cfg.timeout };
        let mut q = Queue::start(&mut self.t, self.pd, &qcfg)?;
        // I/O commands are stamped lazily in every mode (see `set_poll_mode`).
        q.set_lazy_deadlines(true);
        self.io.push(q);
        Ok(Phase::Io { qid, n, depth, in_capsule, cid: None })
    }

    /// Tears every queue down and brings the controller up again (admin
    /// queue, Fabrics Connect, enable, Identify, I/O queues) on the same PD
    /// and buffers: the recovery after a target crash and restart, a
    /// timed-out command or a dropped connection. The target assigns a new
    /// controller id. Tickets still in flight finish with `Disconnected`;
    /// namespaces and registered buffers stay valid. Blocks in transport
    /// time (bounded by the command timeout): [`Controller::start_reconnect`]
    /// and a `service` / wait loop. On error the controller is left
    /// disconnected, and `reconnect` may be called again.
    pub fn reconnect(&mut self) -> Result<(), NvmeError> {
        self.start_reconnect()?;
        if let Err(e) = self.run_bring_up() {
            self.teardown();
            return Err(e);
        }
        Ok(())
    }

    /// The non-blocking form of [`Controller::reconnect`]: tears every
    /// queue down (tickets in flight finish with `Disconnected`) and sends
    /// the admin queue's CM request; `service` then brings the controller
    /// up as after [`Controller::start`]. Fails with `Disconnected` on a
    /// closed controller, or for a local verb (the controller stays
    /// disconnected).
    pub fn start_reconnect(&mut self) -> Result<(), NvmeError> {
        if matches!(self.phase, Phase::Closed) {
            return Err(NvmeError::Disconnected { qid: 0 });
        }
        for q in &mut self.io {
            q.close(&mut self.t);
        }
        self.admin.close(&mut self.t);
        self.collect_tickets();
        for (_, p) in std::mem::take(&mut self.pending) {
            self.finished.push((p.ticket, Err(NvmeError::Disconnected { qid: 0 })));
        }
        self.io.clear();
        self.next_keep_alive = None;
        self.keep_alive_cid = None;
        self.next_queue = 0;
        self.down = None;
        match Queue::start(&mut self.t, self.pd, &admin_queue(&self.cfg)) {
            Ok(q) => {
                self.admin = q;
                self.admin.set_lazy_deadlines(self.poller.mode() != PollMode::Event);
                self.phase = Phase::Admin(AdminPhase::Connecting);
                Ok(())
            }
            Err(e) => {
                self.phase = Phase::Failed;
                self.down = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Releases every queue of a failed bring-up (no shutdown: the
    /// controller is left disconnected, as after a failed reconnect).
    fn teardown(&mut self) {
        for q in &mut self.io {
            q.close(&mut self.t);
        }
        self.io.clear();
        self.admin.close(&mut self.t);
        self.next_keep_alive = None;
    }
}

/// The admin queue's configuration.
pub(super) fn admin_queue(cfg: &ControllerConfig) -> QueueConfig {
    QueueConfig::new(cfg.addr, ADMIN_QUEUE_DEPTH, cfg.timeout)
}

/// Sends Fabrics Connect on `q` (its data at the end of the scratch region).
pub(super) fn submit_connect<T: Transport>(
    t: &mut T,
    q: &mut Queue,
    scratch: MrInfo,
    cfg: &ControllerConfig,
    subnqn: &Nqn,
    cntlid: u16,
    kato_ms: u32,
) -> Result<u16, NvmeError> {
    let data = ConnectData { host_id: cfg.host_id, cntlid, subnqn: subnqn.clone(), hostnqn: cfg.hostnqn.clone() };
    // Connect data lives past the Identify area of the scratch region.
    let at = SCRATCH_LEN - CONNECT_DATA_LEN as u64;
    t.mr_write(scratch.id, at, &data.encode())?;
    let sgl = Sgl::for_region(&scratch, at, CONNECT_DATA_LEN as u64).map_err(NvmeError::Build)?;
    let cmd = NvmeCommand::connect(q.qid(), q.depth(), kato_ms, sgl).map_err(NvmeError::Build)?;
    q.submit(t, &cmd, None)
}

/// The controller id a Fabrics Connect answered with; its refusals typed.
pub(super) fn connect_result(q: &Queue, r: Result<Completion, NvmeError>, cntlid: u16) -> Result<u16, NvmeError> {
    let c = match r {
        Ok(c) => c,
        Err(NvmeError::Status { error, .. })
            if error.sct() == SCT_COMMAND_SPECIFIC && error.sc() == SC_CONNECT_INVALID_PARAMETERS =>
        {
            return Err(NvmeError::ConnectInvalid {
                parameter: InvalidParameter::from_dw0(error.result as u32),
                error,
            });
        }
        Err(NvmeError::Status { error, .. })
            if error.sct() == SCT_COMMAND_SPECIFIC && error.sc() == SC_AUTH_REQUIRED =>
        {
            return Err(NvmeError::AuthRequired);
        }
        Err(e) => return Err(e),
    };
    let r = ConnectResult::from_dw0(c.dw0());
    if r.auth_required {
        return Err(NvmeError::AuthRequired);
    }
    if q.qid() != 0 && r.cntlid != cntlid {
        return Err(NvmeError::Protocol(ProtocolError::field(
            "ConnectResponse",
            "cntlid",
            r.cntlid.into(),
            "an I/O queue's connect must return the admin queue's controller id",
        )));
    }
    Ok(r.cntlid)
}
