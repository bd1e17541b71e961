//! The discovery client (as `nvme discover`): the admin half of bring-up
//! against the discovery controller, then its log page.
//!
//! Contract: [`Discovery::start`] allocates a PD and a scratch buffer and
//! sends the CM request without blocking; [`Discovery::service`] advances
//! through the same admin states as a controller (CM connect, Fabrics
//! Connect with no keep-alive, CAP, CC.EN, CSTS.RDY) and then
//! [`ControllerState::ReadLog`] (the header, then every record), and
//! returns the log once read; [`Discovery::close`] releases everything.
//! A driver waits on [`Discovery::wait_set`] between `service` calls.
//! [`discover`] is exactly that loop and blocks in the transport's time.
//! Errors are those of bring-up (see the parent module), and
//! `Unsupported` for a log of more records than the scratch buffer holds.

use super::bringup::{AdminCtx, admin_queue, advance_admin};
use super::*;

/// A discovery in progress over a borrowed transport.
#[derive(Debug)]
pub struct Discovery {
    cfg: ControllerConfig,
    pd: PdId,
    scratch: MrInfo,
    admin: Queue,
    step: Step,
    cntlid: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Admin(AdminPhase),
    Header { cid: u16 },
    Log { cid: u16, numrec: u64 },
    Failed,
    Closed,
}

impl Discovery {
    /// Starts discovering the controller at `addr`: PD, scratch buffer and
    /// the admin queue's CM request. Fails only for local verbs (nothing
    /// stays allocated then).
    pub fn start<T: Transport>(
        t: &mut T,
        addr: SocketAddrV4,
        host_id: [u8; 16],
        timeout: Duration,
    ) -> Result<Self, NvmeError> {
        let subnqn = Nqn::new(DISCOVERY_NQN).map_err(NvmeError::Build)?;
        let mut cfg = ControllerConfig::new(addr, subnqn, host_id);
        cfg.timeout = timeout;
        let pd = t.alloc_pd()?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let scratch = match t.reg_mr(pd, SCRATCH_LEN, access) {
            Ok(m) => m,
            Err(e) => {
                let _ = t.dealloc_pd(pd);
                return Err(e.into());
            }
        };
        let admin = match Queue::start(t, pd, &admin_queue(&cfg)) {
            Ok(q) => q,
            Err(e) => {
                let _ = t.dereg_mr(scratch.id);
                let _ = t.dealloc_pd(pd);
                return Err(e);
            }
        };
        Ok(Discovery { cfg, pd, scratch, admin, step: Step::Admin(AdminPhase::Connecting), cntlid: 0 })
    }

    /// Where the discovery is.
    pub fn state(&self) -> ControllerState {
        match self.step {
            Step::Admin(a) => a.state(),
            Step::Header { .. } | Step::Log { .. } => ControllerState::ReadLog,
            Step::Failed => ControllerState::Failed,
            Step::Closed => ControllerState::Closed,
        }
    }

    /// The CQ to wait on and the time `service` is next due without one.
    pub fn wait_set(&self) -> (Vec<CqId>, Instant) {
        let q = &self.admin;
        if q.failure().is_some() || q.is_closed() {
            return (Vec::new(), Instant::FAR_FUTURE);
        }
        let mut until = q.next_deadline().unwrap_or(Instant::FAR_FUTURE);
        if let Step::Admin(a) = self.step
            && let Some(at) = a.poll_at().or(q.connect_deadline())
        {
            until = until.min(at);
        }
        (vec![q.cq()], until)
    }

    /// Does what is due without blocking; the log once it has been read.
    /// CM events of other connections on `t` are dropped. After an error
    /// the discovery is `Failed` (each later call repeats `Disconnected`);
    /// `close` it.
    pub fn service<T: Transport>(&mut self, t: &mut T) -> Result<Option<DiscoveryLog>, NvmeError> {
        match self.step {
            Step::Failed | Step::Closed => return Err(NvmeError::Disconnected { qid: 0 }),
            _ => {}
        }
        while let Some(ev) = t.cm_poll() {
            self.admin.handle_cm(t, &ev);
        }
        self.admin.poll(t)?;
        self.advance(t).inspect_err(|_| self.step = Step::Failed)
    }

    fn advance<T: Transport>(&mut self, t: &mut T) -> Result<Option<DiscoveryLog>, NvmeError> {
        loop {
            match self.step {
                Step::Admin(mut a) => {
                    let ctx = AdminCtx {
                        scratch: self.scratch,
                        cfg: &self.cfg,
                        subnqn: &self.cfg.subnqn,
                        kato_ms: 0,
                        poll: Duration::from_millis(10),
                    };
                    let r = advance_admin(t, &mut self.admin, &mut a, &mut self.cntlid, &ctx);
                    self.step = Step::Admin(a);
                    if r?.is_none() {
                        return Ok(None);
                    }
                    let cid = self.get_log(t, DISCOVERY_HEADER_LEN as u64)?;
                    self.step = Step::Header { cid };
                }
                Step::Header { cid } => {
                    let Some(b) = self.log_read(t, cid, DISCOVERY_HEADER_LEN as u64)? else { return Ok(None) };
                    let header = DiscoveryLogHeader::decode(&b).map_err(NvmeError::Protocol)?;
                    let max = (SCRATCH_LEN - CONNECT_DATA_LEN as u64 - DISCOVERY_HEADER_LEN as u64)
                        / DISCOVERY_ENTRY_LEN as u64;
                    if header.numrec > max {
                        return Err(NvmeError::Unsupported(format!(
                            "{} discovery records (at most {max})",
                            header.numrec
                        )));
                    }
                    let cid = self.get_log(t, DiscoveryLog::len_for(header.numrec))?;
                    self.step = Step::Log { cid, numrec: header.numrec };
                }
                Step::Log { cid, numrec } => {
                    let Some(page) = self.log_read(t, cid, DiscoveryLog::len_for(numrec))? else { return Ok(None) };
                    return DiscoveryLog::decode(&page).map(Some).map_err(NvmeError::Protocol);
                }
                Step::Failed | Step::Closed => return Ok(None),
            }
        }
    }

    /// Sends Get Log Page of the first `len` bytes of the discovery log.
    fn get_log<T: Transport>(&mut self, t: &mut T, len: u64) -> Result<u16, NvmeError> {
        let sgl = Sgl::for_region(&self.scratch, 0, len).map_err(NvmeError::Build)?;
        let cmd = NvmeCommand::get_log_page(LID_DISCOVERY, len as u32, 0, sgl).map_err(NvmeError::Build)?;
        self.admin.submit(t, &cmd, None)
    }

    /// The bytes a Get Log Page brought, once it finished.
    fn log_read<T: Transport>(&mut self, t: &mut T, cid: u16, len: u64) -> Result<Option<Vec<u8>>, NvmeError> {
        let Some(r) = finished(&mut self.admin, cid, "Get Log Page") else { return Ok(None) };
        r?;
        let mut b = vec![0u8; len as usize];
        t.mr_read(self.scratch.id, 0, &mut b)?;
        Ok(Some(b))
    }

    /// Disconnects and releases the queue, the buffer and the PD. Idempotent.
    pub fn close<T: Transport>(&mut self, t: &mut T) {
        if self.step == Step::Closed {
            return;
        }
        self.step = Step::Closed;
        self.admin.close(t);
        let _ = t.dereg_mr(self.scratch.id);
        let _ = t.dealloc_pd(self.pd);
    }
}

/// Connects to the discovery controller at `addr` and reads its log page
/// (as `nvme discover` does): [`Discovery::start`], then `service` and the
/// transport's wait until the log is read, then `close`. Blocks in
/// transport time.
pub fn discover<T: Transport>(
    t: &mut T,
    addr: SocketAddrV4,
    host_id: [u8; 16],
    timeout: Duration,
) -> Result<DiscoveryLog, NvmeError> {
    let mut d = Discovery::start(t, addr, host_id, timeout)?;
    let r = loop {
        match d.service(t) {
            Ok(Some(log)) => break Ok(log),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        let (cqs, until) = d.wait_set();
        if let Err(e) = t.wait(&cqs, until) {
            break Err(e.into());
        }
    };
    d.close(t);
    r
}
