//! A model of an NVMe-oF/RDMA target (the Linux nvmet-rdma target as the
//! host sees it), with in-memory namespaces.
//!
//! What it does: listens with RDMA CM on its port and validates the NVMe/RDMA
//! private data; serves an admin queue (Fabrics Connect, Property Get/Set of
//! CAP/VS/CC/CSTS with CSTS.RDY a configurable time after CC.EN, Identify
//! controller/namespace/active namespace list, Set/Get Features Number of
//! Queues and Keep Alive Timer, Keep Alive, Get Log Page of the discovery log)
//! and I/O queues (Read, Write, Flush moving data with RDMA READ/WRITE on the
//! host's keyed SGLs, or in-capsule data for writes). Errors answer with the
//! status nvmet uses: LBA out of range, invalid field, invalid opcode,
//! invalid namespace, SGL data length, connect invalid parameters with the
//! offending offset. A discovery subsystem lists every configured subsystem.
//!
//! Faults (for tests): a delay before every response, dropping the next
//! responses (the command still executes), and crash / restart (every
//! connection torn down, controllers forgotten, unflushed writes lost).
//!
//! What it does not model: reservations, multiple controllers per host
//! ordering rules, authentication, asynchronous events (AERs are held and
//! never completed, as nvmet does until something happens), SGL lists.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rctb_core::nvmeof::protocol::Completion;
use rctb_core::nvmeof::protocol::*;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use thiserror::Error;

use crate::actor::Actor;
use crate::transport::SimTransport;

/// One namespace of a subsystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    pub nsid: u32,
    /// 512 or 4096 (any power of two 512..=65536 works).
    pub lba_size: u32,
    pub blocks: u64,
}

/// One NVM subsystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubsystemConfig {
    pub nqn: String,
    pub namespaces: Vec<NamespaceConfig>,
}

/// The target's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetConfig {
    pub port: u16,
    pub subsystems: Vec<SubsystemConfig>,
    /// Serve the discovery subsystem too.
    pub discovery: bool,
    /// MDTS as a power of two of 4 KiB pages (1..=12; the model stages data).
    pub mdts: u8,
    /// CAP.MQES: largest I/O queue, 0's based.
    pub mqes: u16,
    pub maxcmd: u16,
    /// I/O command capsule size in 16-byte units (4 = no in-capsule data).
    pub ioccsz: u32,
    /// CAP.TO in 500 ms units.
    pub cap_to: u8,
    /// Time from CC.EN = 1 to CSTS.RDY = 1.
    pub ready_delay: Duration,
    /// I/O queues a controller may create.
    pub max_io_queues: u16,
    /// Keep-alive granularity reported (KAS, 100 ms units).
    pub kas: u16,
    /// Answer Connect with "authentication required" (AUTHREQ in DW0), as
    /// a target with DH-HMAC-CHAP configured does.
    pub require_auth: bool,
}

impl TargetConfig {
    /// One subsystem `nqn` with a 512-byte and a 4096-byte namespace.
    pub fn new(nqn: &str) -> Self {
        TargetConfig {
            port: NVME_RDMA_PORT,
            subsystems: vec![SubsystemConfig {
                nqn: nqn.into(),
                namespaces: vec![
                    NamespaceConfig { nsid: 1, lba_size: 512, blocks: 8192 },
                    NamespaceConfig { nsid: 2, lba_size: 4096, blocks: 1024 },
                ],
            }],
            discovery: true,
            mdts: 5,
            mqes: 127,
            maxcmd: 128,
            ioccsz: 4 + 4096 / 16,
            cap_to: 15,
            ready_delay: Duration::from_millis(20),
            max_io_queues: 4,
            kas: 10,
            require_auth: false,
        }
    }

    fn validate(&self) -> Result<(), InvalidValue> {
        if !(1..=12).contains(&self.mdts) {
            return Err(InvalidValue::new(
                "mdts",
                self.mdts.into(),
                "the model needs 1..=12 (it stages whole transfers)",
            ));
        }
        if self.mqes == 0 {
            return Err(InvalidValue::new("mqes", 0, "at least 1 (a queue of 2)"));
        }
        if self.ioccsz < 4 {
            return Err(InvalidValue::new("ioccsz", self.ioccsz.into(), "at least 4 (the 64-byte command)"));
        }
        for s in &self.subsystems {
            for ns in &s.namespaces {
                if !ns.lba_size.is_power_of_two() || !(512..=65536).contains(&ns.lba_size) {
                    return Err(InvalidValue::new("lba_size", ns.lba_size.into(), "a power of two, 512..=65536"));
                }
                if ns.nsid == 0 || ns.blocks == 0 {
                    return Err(InvalidValue::new("nsid/blocks", ns.nsid.into(), "nsid and blocks must be non-zero"));
                }
            }
        }
        Ok(())
    }

    fn max_transfer(&self) -> u64 {
        max_transfer(4096, self.mdts)
    }
}

/// Faults the test controls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetFaults {
    /// Every response waits this long after the command finished.
    pub response_delay: Duration,
    /// The next this many responses are not sent (commands still execute).
    pub drop_responses: u32,
    /// The next this many responses name a command id nobody sent.
    pub wrong_cid_responses: u32,
}

/// What the target counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    pub commands: u64,
    pub errors: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub in_capsule_writes: u64,
    pub dropped_responses: u64,
    pub keep_alives: u64,
    pub crashes: u64,
    pub rejected_connects: u64,
    pub connections: u64,
}

/// Local failures of the model (transport misuse, not host errors).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TargetError {
    #[error("target config: {0}")]
    Config(#[from] InvalidValue),
    #[error(transparent)]
    Transport(#[from] TransportError),
}

struct Namespace {
    cfg: NamespaceConfig,
    data: Vec<u8>,
    /// Blocks written since the last flush, with their previous contents:
    /// a crash puts them back (a volatile write cache).
    undo: BTreeMap<u64, Vec<u8>>,
}

struct Subsystem {
    nqn: String,
    namespaces: Vec<Namespace>,
}

struct Controller {
    /// Index into `subsystems`, or `None` for the discovery controller.
    subsystem: Option<usize>,
    cc: u32,
    ready_at: Option<Instant>,
    kato: Duration,
    last_keep_alive: Instant,
    io_queues: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    /// Waiting for the RDMA READ of the command's data.
    Reading,
    /// Waiting for `at` to send the response.
    Delayed,
    /// The response SEND is posted.
    Responding,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    state: SlotState,
    cid: u16,
    cmd: Option<NvmeCommand>,
    response: Completion,
    at: Instant,
}

struct Queue {
    conn: ConnId,
    qp: QpId,
    cq: CqId,
    qid: u16,
    depth: u16,
    cntlid: Option<u16>,
    capsule_len: u64,
    /// Receive buffers (depth x capsule), response buffers (depth x 16),
    /// staging (depth x max transfer).
    recv_mr: MrInfo,
    rsp_mr: MrInfo,
    data_mr: MrInfo,
    slots: Vec<Slot>,
    sq_head: u16,
    established: bool,
}

// wr_id = kind << 56 | queue key << 16 | slot.
const WR_RECV: u64 = 1;
const WR_READ: u64 = 2;
const WR_WRITE: u64 = 3;
const WR_SEND: u64 = 4;

fn wr_id(kind: u64, key: u64, slot: usize) -> u64 {
    kind << 56 | key << 16 | slot as u64
}

/// The NVMe-oF target model. Register it as a simulator actor on its node
/// (`sim.add_actor(node, Box::new(Rc::new(RefCell::new(target))))`), or call
/// [`NvmeTarget::run`] from a test loop.
pub struct NvmeTarget {
    cfg: TargetConfig,
    ip: Ipv4Addr,
    subsystems: Vec<Subsystem>,
    pd: Option<PdId>,
    listener: Option<ListenId>,
    /// Connections accepted, by a key used in wr_ids.
    queues: BTreeMap<u64, Queue>,
    by_conn: BTreeMap<ConnId, u64>,
    next_key: u64,
    controllers: BTreeMap<u16, Controller>,
    next_cntlid: u16,
    faults: TargetFaults,
    stats: TargetStats,
    up: bool,
    scratch: Vec<rctb_core::transport::Completion>,
    /// The first local failure (the model keeps running).
    pub last_error: Option<TargetError>,
}

impl std::fmt::Debug for NvmeTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeTarget")
            .field("ip", &self.ip)
            .field("queues", &self.queues.len())
            .field("controllers", &self.controllers.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl NvmeTarget {
    /// A target at `ip` (its node's address, which the discovery log gives).
    pub fn new(cfg: TargetConfig, ip: Ipv4Addr) -> Result<Self, TargetError> {
        cfg.validate()?;
        let subsystems = cfg
            .subsystems
            .iter()
            .map(|s| Subsystem {
                nqn: s.nqn.clone(),
                namespaces: s
                    .namespaces
                    .iter()
                    .map(|n| Namespace {
                        cfg: n.clone(),
                        data: vec![0; (n.blocks * n.lba_size as u64) as usize],
                        undo: BTreeMap::new(),
                    })
                    .collect(),
            })
            .collect();
        Ok(NvmeTarget {
            cfg,
            ip,
            subsystems,
            pd: None,
            listener: None,
            queues: BTreeMap::new(),
            by_conn: BTreeMap::new(),
            next_key: 1,
            controllers: BTreeMap::new(),
            next_cntlid: 1,
            faults: TargetFaults::default(),
            stats: TargetStats::default(),
            up: true,
            scratch: Vec::new(),
            last_error: None,
        })
    }

    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }
    pub fn stats(&self) -> TargetStats {
        self.stats
    }
    pub fn faults(&self) -> TargetFaults {
        self.faults
    }
    pub fn faults_mut(&mut self) -> &mut TargetFaults {
        &mut self.faults
    }

    /// The bytes of namespace `nsid` of subsystem `nqn`.
    pub fn namespace_data(&self, nqn: &str, nsid: u32) -> Option<&[u8]> {
        let s = self.subsystems.iter().find(|s| s.nqn == nqn)?;
        s.namespaces.iter().find(|n| n.cfg.nsid == nsid).map(|n| &n.data[..])
    }

    /// Mutable bytes of a namespace (to preload known content).
    pub fn namespace_data_mut(&mut self, nqn: &str, nsid: u32) -> Option<&mut [u8]> {
        let s = self.subsystems.iter_mut().find(|s| s.nqn == nqn)?;
        s.namespaces.iter_mut().find(|n| n.cfg.nsid == nsid).map(|n| &mut n.data[..])
    }

    /// Live queues (admin and I/O).
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// Crashes: every connection is torn down, controllers forgotten,
    /// writes not flushed are lost, and nothing listens until [`restart`].
    ///
    /// [`restart`]: NvmeTarget::restart
    pub fn crash<T: Transport>(&mut self, t: &mut T) {
        self.stats.crashes += 1;
        self.up = false;
        for key in self.queues.keys().copied().collect::<Vec<_>>() {
            self.destroy_queue(t, key);
        }
        if let Some(l) = self.listener.take() {
            let _ = t.cm_close_listener(l);
        }
        self.controllers.clear();
        for s in &mut self.subsystems {
            for ns in &mut s.namespaces {
                let lba = ns.cfg.lba_size as usize;
                for (block, old) in std::mem::take(&mut ns.undo) {
                    let at = block as usize * lba;
                    ns.data[at..at + lba].copy_from_slice(&old);
                }
            }
        }
    }

    /// Stops for good: every connection torn down, the listener closed and
    /// the PD released (nothing of the target stays allocated). Data stays
    /// readable through [`NvmeTarget::namespace_data`].
    pub fn shutdown<T: Transport>(&mut self, t: &mut T) {
        self.up = false;
        for key in self.queues.keys().copied().collect::<Vec<_>>() {
            self.destroy_queue(t, key);
        }
        if let Some(l) = self.listener.take() {
            let _ = t.cm_close_listener(l);
        }
        self.controllers.clear();
        if let Some(pd) = self.pd.take() {
            let _ = t.dealloc_pd(pd);
        }
    }

    /// Comes back after a crash and listens again at once (as an actor it
    /// would otherwise only listen on its next run).
    pub fn restart<T: Transport>(&mut self, t: &mut T) {
        self.up = true;
        let _ = self.run(t);
    }

    /// Whether the target is up (not crashed).
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Handles everything pending: CM events, completions, delayed
    /// responses, keep-alive expiry. Returns when it next needs to run.
    pub fn run<T: Transport>(&mut self, t: &mut T) -> Option<Instant> {
        if let Err(e) = self.run_inner(t) {
            self.last_error.get_or_insert(e);
        }
        self.next_wake(t.now())
    }

    fn run_inner<T: Transport>(&mut self, t: &mut T) -> Result<(), TargetError> {
        if !self.up {
            // Drain events of a crashed target: nobody answers.
            while let Some(ev) = t.cm_poll() {
                if let CmEvent::ConnectRequest { conn, .. } = ev {
                    let _ = t.cm_reject(conn, &[]);
                    let _ = t.cm_destroy(conn);
                }
            }
            return Ok(());
        }
        if self.pd.is_none() {
            self.pd = Some(t.alloc_pd()?);
        }
        if self.listener.is_none() {
            self.listener = Some(t.cm_listen(self.cfg.port)?);
        }
        while let Some(ev) = t.cm_poll() {
            self.on_cm(t, ev)?;
        }
        let keys: Vec<u64> = self.queues.keys().copied().collect();
        for key in keys {
            self.poll_queue(t, key)?;
        }
        self.send_due(t)?;
        self.expire_keep_alive(t);
        Ok(())
    }

    fn next_wake(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| {
            if at > now {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        };
        for q in self.queues.values() {
            for s in &q.slots {
                if s.state == SlotState::Delayed {
                    consider(s.at);
                }
            }
        }
        for c in self.controllers.values() {
            if c.kato > Duration::ZERO {
                consider(c.last_keep_alive + c.kato);
            }
        }
        next
    }

    fn on_cm<T: Transport>(&mut self, t: &mut T, ev: CmEvent) -> Result<(), TargetError> {
        match ev {
            CmEvent::ConnectRequest { conn, private_data, .. } => self.on_connect_request(t, conn, &private_data),
            CmEvent::Established { conn, .. } => {
                if let Some(q) = self.by_conn.get(&conn).and_then(|k| self.queues.get_mut(k)) {
                    q.established = true;
                }
                Ok(())
            }
            CmEvent::Disconnected { conn } => {
                if let Some(key) = self.by_conn.get(&conn).copied() {
                    self.destroy_queue(t, key);
                } else {
                    let _ = t.cm_destroy(conn);
                }
                Ok(())
            }
            CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn, .. } => {
                let _ = t.cm_destroy(conn);
                Ok(())
            }
        }
    }

    fn reject<T: Transport>(&mut self, t: &mut T, conn: ConnId, status: RejectStatus) -> Result<(), TargetError> {
        self.stats.rejected_connects += 1;
        t.cm_reject(conn, &CmReject::new(status).encode())?;
        let _ = t.cm_destroy(conn);
        Ok(())
    }

    fn on_connect_request<T: Transport>(
        &mut self,
        t: &mut T,
        conn: ConnId,
        pd_bytes: &[u8],
    ) -> Result<(), TargetError> {
        let req = match CmRequest::decode(pd_bytes) {
            Ok(r) => r,
            Err(ProtocolError::Short { .. }) => return self.reject(t, conn, RejectStatus::InvalidLength),
            Err(_) => return self.reject(t, conn, RejectStatus::InvalidRecfmt),
        };
        let max =
            if req.qid == 0 { ADMIN_QUEUE_DEPTH.max(32) } else { self.cfg.mqes.saturating_add(1).min(MAX_QUEUE_DEPTH) };
        if let Some(status) = req.check(max) {
            return self.reject(t, conn, status);
        }
        let depth = req.hrqsize;
        let pd = self.pd.expect("allocated in run");
        let capsule_len = if req.qid == 0 { COMMAND_LEN as u64 } else { self.cfg.ioccsz as u64 * 16 };
        let slot_data = if req.qid == 0 { 64 * 1024 } else { self.cfg.max_transfer() };
        let cq = t.create_cq(4 * depth as u32 + 8)?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let recv_mr = t.reg_mr(pd, capsule_len * depth as u64, Access::LOCAL_WRITE)?;
        let rsp_mr = t.reg_mr(pd, COMPLETION_LEN as u64 * depth as u64, Access::LOCAL_WRITE)?;
        let data_mr = t.reg_mr(pd, slot_data * depth as u64, access)?;
        let caps = QpCaps {
            max_send_wr: 3 * depth as u32,
            max_recv_wr: depth as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false };
        let accept = CmAccept { recfmt: 0, crqsize: depth };
        let mut params = AcceptParams::new(init, accept.encode().to_vec());
        params.responder_resources = 16;
        params.initiator_depth = 16;
        let qp = match t.cm_accept(conn, &params) {
            Ok(qp) => qp,
            Err(e) => {
                let _ = t.dereg_mr(recv_mr.id);
                let _ = t.dereg_mr(rsp_mr.id);
                let _ = t.dereg_mr(data_mr.id);
                let _ = t.destroy_cq(cq);
                return Err(e.into());
            }
        };
        let key = self.next_key;
        self.next_key += 1;
        let slot =
            Slot { state: SlotState::Free, cid: 0, cmd: None, response: Completion::default(), at: Instant::ZERO };
        let q = Queue {
            conn,
            qp,
            cq,
            qid: req.qid,
            depth,
            cntlid: None,
            capsule_len,
            recv_mr,
            rsp_mr,
            data_mr,
            slots: vec![slot; depth as usize],
            sq_head: 0,
            established: false,
        };
        for i in 0..depth as usize {
            let sge = [Sge::new(recv_mr.id, i as u64 * capsule_len, capsule_len as u32)];
            t.post_recv(qp, &RecvWr::new(wr_id(WR_RECV, key, i), &sge))?;
        }
        self.queues.insert(key, q);
        self.by_conn.insert(conn, key);
        self.stats.connections += 1;
        Ok(())
    }

    fn destroy_queue<T: Transport>(&mut self, t: &mut T, key: u64) {
        let Some(q) = self.queues.remove(&key) else { return };
        self.by_conn.remove(&q.conn);
        let _ = t.cm_disconnect(q.conn);
        let _ = t.modify_qp(q.qp, &QpTransition::Err);
        let _ = t.destroy_qp(q.qp);
        let _ = t.cm_destroy(q.conn);
        let _ = t.destroy_cq(q.cq);
        for mr in [q.recv_mr, q.rsp_mr, q.data_mr] {
            let _ = t.dereg_mr(mr.id);
        }
        // The admin queue going away ends its controller (as nvmet does).
        if q.qid == 0
            && let Some(c) = q.cntlid
        {
            self.controllers.remove(&c);
        }
    }

    fn poll_queue<T: Transport>(&mut self, t: &mut T, key: u64) -> Result<(), TargetError> {
        let Some(cq) = self.queues.get(&key).map(|q| q.cq) else { return Ok(()) };
        let mut comps = std::mem::take(&mut self.scratch);
        comps.clear();
        t.poll_cq(cq, usize::MAX, &mut comps)?;
        for c in &comps {
            if !self.queues.contains_key(&key) {
                break;
            }
            let slot = (c.wr_id & 0xFFFF) as usize;
            if !c.status.is_success() {
                // The connection broke (host gone, flush after ERR): drop it.
                self.destroy_queue(t, key);
                break;
            }
            match c.wr_id >> 56 {
                WR_RECV => self.on_capsule(t, key, slot, c.byte_len)?,
                WR_READ => self.on_data_read(t, key, slot)?,
                WR_SEND => {
                    if let Some(q) = self.queues.get_mut(&key) {
                        q.slots[slot].state = SlotState::Free;
                        q.slots[slot].cmd = None;
                    }
                }
                _ => {}
            }
        }
        self.scratch = comps;
        Ok(())
    }

    /// A command capsule arrived in receive slot `rslot`.
    fn on_capsule<T: Transport>(&mut self, t: &mut T, key: u64, rslot: usize, len: u32) -> Result<(), TargetError> {
        let q = self.queues.get_mut(&key).expect("checked by the caller");
        let mut capsule = vec![0u8; len as usize];
        t.mr_read(q.recv_mr.id, rslot as u64 * q.capsule_len, &mut capsule)?;
        // The receive goes back at once: the capsule is copied out.
        let sge = [Sge::new(q.recv_mr.id, rslot as u64 * q.capsule_len, q.capsule_len as u32)];
        t.post_recv(q.qp, &RecvWr::new(wr_id(WR_RECV, key, rslot), &sge))?;
        q.sq_head = (q.sq_head + 1) % q.depth;
        self.stats.commands += 1;
        if capsule.len() < COMMAND_LEN {
            return Ok(()); // Shorter than a command: nothing to answer.
        }
        let cid = u16::from_le_bytes([capsule[2], capsule[3]]);
        let Some(slot) = q.slots.iter().position(|s| s.state == SlotState::Free) else {
            return Ok(()); // The host overran the queue: nvmet drops it too.
        };
        q.slots[slot] =
            Slot { state: SlotState::Responding, cid, cmd: None, response: Completion::default(), at: Instant::ZERO };
        // nvmet-rdma's SGL check: a data block descriptor must be the
        // offset (in-capsule) subtype; other types are refused.
        let sgl_type = capsule[39];
        if sgl_type >> 4 == 0 && sgl_type & 0xF != 1 {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_FIELD, true), 0);
        }
        let Ok(raw) = Command::decode(&capsule) else {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_TYPE, true), 0);
        };
        let q = self.queues.get_mut(&key).expect("present");
        let kind = if q.qid == 0 { QueueKind::Admin } else { QueueKind::Io };
        let cmd = match NvmeCommand::from_command(&raw, kind) {
            Ok(c) => c,
            Err(ProtocolError::Field { field: "opcode" | "fctype", .. }) => {
                return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_OPCODE, true), 0);
            }
            Err(_) => return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_FIELD, true), 0),
        };
        self.queues.get_mut(&key).expect("present").slots[slot].cmd = Some(cmd);
        // Commands that bring data to the target fetch it first.
        let data_in = match cmd {
            NvmeCommand::Connect { sgl, .. } => Some((sgl, CONNECT_DATA_LEN as u64)),
            // An unknown namespace is answered as such in `execute`.
            NvmeCommand::Write { sgl, nsid, blocks, .. } => {
                self.lba_size(key, nsid).map(|lba| (sgl, blocks as u64 * lba))
            }
            _ => None,
        };
        if let Some((sgl, need)) = data_in {
            if need > self.slot_capacity(key) {
                return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_FIELD, true), 0);
            }
            if sgl.len() as u64 != need {
                return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
            }
            match sgl {
                Sgl::Keyed { addr, len, key: rkey, .. } => {
                    let q = self.queues.get_mut(&key).expect("present");
                    q.slots[slot].state = SlotState::Reading;
                    let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
                    let sge = [Sge::new(q.data_mr.id, stage, len)];
                    let wr = SendWr::new(
                        wr_id(WR_READ, key, slot),
                        SendOp::Read { remote: RemoteAddr { addr, rkey } },
                        &sge,
                    );
                    t.post_send(q.qp, &wr)?;
                    return Ok(());
                }
                Sgl::InCapsule { offset, len } => {
                    let start = COMMAND_LEN as u64 + offset;
                    let end = start + len as u64;
                    if end > capsule.len() as u64 || offset != 0 {
                        return self.respond(
                            t,
                            key,
                            slot,
                            Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true),
                            0,
                        );
                    }
                    if matches!(cmd, NvmeCommand::Write { .. }) {
                        self.stats.in_capsule_writes += 1;
                    }
                    let q = self.queues.get_mut(&key).expect("present");
                    let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
                    t.mr_write(q.data_mr.id, stage, &capsule[start as usize..end as usize])?;
                    return self.on_data_read(t, key, slot);
                }
                Sgl::None => {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
                }
            }
        }
        self.execute(t, key, slot, &[])
    }

    fn slot_capacity(&self, key: u64) -> u64 {
        self.queues.get(&key).map_or(0, |q| q.data_mr.len / q.depth as u64)
    }

    fn lba_size(&self, key: u64, nsid: u32) -> Option<u64> {
        let q = self.queues.get(&key)?;
        let c = self.controllers.get(&q.cntlid?)?;
        let s = &self.subsystems[c.subsystem?];
        s.namespaces.iter().find(|n| n.cfg.nsid == nsid).map(|n| n.cfg.lba_size as u64)
    }

    /// The data of a Connect or Write has arrived in the staging slot.
    fn on_data_read<T: Transport>(&mut self, t: &mut T, key: u64, slot: usize) -> Result<(), TargetError> {
        let Some(q) = self.queues.get(&key) else { return Ok(()) };
        let Some(cmd) = q.slots[slot].cmd else { return Ok(()) };
        let len = match cmd {
            NvmeCommand::Connect { .. } => CONNECT_DATA_LEN as u64,
            NvmeCommand::Write { nsid, blocks, .. } => blocks as u64 * self.lba_size(key, nsid).unwrap_or(0),
            _ => 0,
        };
        let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
        let mut data = vec![0u8; len as usize];
        t.mr_read(q.data_mr.id, stage, &mut data)?;
        self.queues.get_mut(&key).expect("present").slots[slot].state = SlotState::Responding;
        self.execute(t, key, slot, &data)
    }

    /// Executes the command of `slot` (its inbound data in `data`).
    fn execute<T: Transport>(&mut self, t: &mut T, key: u64, slot: usize, data: &[u8]) -> Result<(), TargetError> {
        let (qid, cntlid, cmd) = {
            let q = &self.queues[&key];
            (q.qid, q.cntlid, q.slots[slot].cmd.expect("set before execute"))
        };
        let ok = Status::SUCCESS;
        let invalid_field = Status::new(SCT_GENERIC, SC_INVALID_FIELD, true);
        if let NvmeCommand::Connect { qid: cqid, sqsize, kato_ms, .. } = cmd {
            return self.connect(t, key, slot, cqid, sqsize, kato_ms, data);
        }
        let Some(cntlid) = cntlid else {
            // Nothing but Connect before Connect: command sequence error.
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, 0x0C, true), 0);
        };
        let now = t.now();
        let Some(ctrl) = self.controllers.get_mut(&cntlid) else {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INTERNAL, true), 0);
        };
        // Any command counts as traffic for the keep-alive timer (TBKAS
        // aside, nvmet resets it on every command).
        ctrl.last_keep_alive = now;
        let ready = ctrl.ready_at.is_some_and(|r| now >= r) && ctrl.cc & CC_ENABLE != 0;
        match cmd {
            NvmeCommand::PropertyGet { size, offset } => {
                let value = match (offset, size) {
                    (REG_CAP, PropSize::Eight) => Cap::build(self.cfg.mqes, self.cfg.cap_to, 1 | 1 << 6, 0, 0).0,
                    (REG_VS, PropSize::Four) => 0x0001_0300,
                    (REG_CC, PropSize::Four) => ctrl.cc as u64,
                    (REG_CSTS, PropSize::Four) => {
                        let shst = if ctrl.cc & CC_SHN_NORMAL != 0 { CSTS_SHST_COMPLETE } else { 0 };
                        (ready as u32 | shst) as u64
                    }
                    _ => return self.respond(t, key, slot, invalid_field, 0),
                };
                self.respond(t, key, slot, ok, value)
            }
            NvmeCommand::PropertySet { size: PropSize::Four, offset: REG_CC, value } => {
                let value = value as u32;
                if value & CC_ENABLE != 0 && ctrl.cc & CC_ENABLE == 0 {
                    ctrl.ready_at = Some(now + self.cfg.ready_delay);
                } else if value & CC_ENABLE == 0 {
                    ctrl.ready_at = None;
                }
                ctrl.cc = value;
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::PropertySet { .. } => self.respond(t, key, slot, invalid_field, 0),
            _ if !ready => self.respond(t, key, slot, Status::new(SCT_GENERIC, 0x0C, true), 0),
            NvmeCommand::Identify { cns, nsid, sgl, .. } => {
                let subsystem = ctrl.subsystem;
                let bytes = match (cns, subsystem) {
                    (CNS_CONTROLLER, _) => Some(self.identify_controller(cntlid, subsystem).to_vec()),
                    (CNS_NAMESPACE, Some(s)) => self.subsystems[s]
                        .namespaces
                        .iter()
                        .find(|n| n.cfg.nsid == nsid)
                        .map(|n| identify_namespace(&n.cfg).to_vec()),
                    (CNS_ACTIVE_NAMESPACES, Some(s)) => {
                        let mut list = vec![0u8; IDENTIFY_LEN];
                        let mut ids: Vec<u32> =
                            self.subsystems[s].namespaces.iter().map(|n| n.cfg.nsid).filter(|&id| id > nsid).collect();
                        ids.sort_unstable();
                        for (i, id) in ids.iter().take(1024).enumerate() {
                            list[4 * i..4 * i + 4].copy_from_slice(&id.to_le_bytes());
                        }
                        Some(list)
                    }
                    _ => return self.respond(t, key, slot, invalid_field, 0),
                };
                match bytes {
                    Some(b) => self.respond_with_data(t, key, slot, sgl, &b, 0),
                    None => self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), 0),
                }
            }
            NvmeCommand::SetFeatures { fid: FEAT_NUMBER_OF_QUEUES, value, .. } => {
                let want = (value as u16).max((value >> 16) as u16).saturating_add(1);
                let got = want.min(self.cfg.max_io_queues);
                ctrl.io_queues = got;
                let n = (got - 1) as u64;
                self.respond(t, key, slot, ok, n | n << 16)
            }
            NvmeCommand::SetFeatures { fid: FEAT_KEEP_ALIVE_TIMER, value, .. } => {
                ctrl.kato = Duration::from_millis(value as u64);
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::GetFeatures { fid: FEAT_KEEP_ALIVE_TIMER, .. } => {
                let v = ctrl.kato.as_millis() as u64;
                self.respond(t, key, slot, ok, v)
            }
            NvmeCommand::SetFeatures { .. } | NvmeCommand::GetFeatures { .. } => {
                self.respond(t, key, slot, invalid_field, 0)
            }
            NvmeCommand::KeepAlive => {
                self.stats.keep_alives += 1;
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::AsyncEvent => {
                // Held, as nvmet holds AERs until an event happens.
                Ok(())
            }
            NvmeCommand::GetLogPage { lid: LID_DISCOVERY, len, offset, sgl, .. } if ctrl.subsystem.is_none() => {
                let page = self.discovery_log();
                let start = (offset as usize).min(page.len());
                let mut out = page[start..].to_vec();
                out.resize(len as usize, 0);
                self.respond_with_data(t, key, slot, sgl, &out, 0)
            }
            NvmeCommand::GetLogPage { .. } => self.respond(t, key, slot, invalid_field, 0),
            NvmeCommand::Read { nsid, slba, blocks, sgl } | NvmeCommand::Write { nsid, slba, blocks, sgl } => {
                let write = matches!(cmd, NvmeCommand::Write { .. });
                let Some(s) = ctrl.subsystem else {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_OPCODE, true), 0);
                };
                let _ = qid;
                let max = self.cfg.max_transfer();
                let Some(ns) = self.subsystems[s].namespaces.iter_mut().find(|n| n.cfg.nsid == nsid) else {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), 0);
                };
                let lba = ns.cfg.lba_size as u64;
                if slba.checked_add(blocks as u64).is_none_or(|end| end > ns.cfg.blocks) {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_LBA_OUT_OF_RANGE, true), 0);
                }
                let len = blocks as u64 * lba;
                if len > max {
                    return self.respond(t, key, slot, invalid_field, 0);
                }
                if sgl.len() as u64 != len {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
                }
                let at = (slba * lba) as usize;
                if write {
                    for b in 0..blocks as u64 {
                        let off = at + (b * lba) as usize;
                        ns.undo.entry(slba + b).or_insert_with(|| ns.data[off..off + lba as usize].to_vec());
                    }
                    ns.data[at..at + len as usize].copy_from_slice(&data[..len as usize]);
                    self.stats.writes += 1;
                    self.stats.bytes_written += len;
                    self.respond(t, key, slot, ok, 0)
                } else {
                    let bytes = ns.data[at..at + len as usize].to_vec();
                    self.stats.reads += 1;
                    self.stats.bytes_read += len;
                    self.respond_with_data(t, key, slot, sgl, &bytes, 0)
                }
            }
            NvmeCommand::Flush { nsid } => {
                let Some(s) = ctrl.subsystem else {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_OPCODE, true), 0);
                };
                let all = nsid == u32::MAX;
                let mut found = false;
                for ns in self.subsystems[s].namespaces.iter_mut().filter(|n| all || n.cfg.nsid == nsid) {
                    ns.undo.clear();
                    found = true;
                }
                if !found {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), 0);
                }
                self.stats.flushes += 1;
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::Connect { .. } | NvmeCommand::Disconnect => self.respond(t, key, slot, ok, 0),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn connect<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        slot: usize,
        qid: u16,
        sqsize: u16,
        kato_ms: u32,
        data: &[u8],
    ) -> Result<(), TargetError> {
        let invalid = |offset: u16| {
            (
                Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                InvalidParameter::data_dw0(offset) as u64,
            )
        };
        let q = &self.queues[&key];
        if q.cntlid.is_some() {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, 0x0C, true), 0);
        }
        if qid != q.qid {
            return self.respond(
                t,
                key,
                slot,
                Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                42,
            );
        }
        if sqsize == 0 || sqsize >= q.depth {
            return self.respond(
                t,
                key,
                slot,
                Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                44,
            );
        }
        let d = match ConnectData::decode(data) {
            Ok(d) => d,
            Err(ProtocolError::Field { field: "subnqn", .. }) => {
                let (s, r) = invalid(256);
                return self.respond(t, key, slot, s, r);
            }
            Err(_) => {
                let (s, r) = invalid(512);
                return self.respond(t, key, slot, s, r);
            }
        };
        let subsystem = if d.subnqn.as_str() == DISCOVERY_NQN && self.cfg.discovery {
            None
        } else {
            match self.subsystems.iter().position(|s| s.nqn == d.subnqn.as_str()) {
                Some(i) => Some(i),
                None => {
                    let (s, r) = invalid(256);
                    return self.respond(t, key, slot, s, r);
                }
            }
        };
        let now = t.now();
        let cntlid = if qid == 0 {
            if d.cntlid != CNTLID_DYNAMIC {
                let (s, r) = invalid(16);
                return self.respond(t, key, slot, s, r);
            }
            let c = self.next_cntlid;
            self.next_cntlid = self.next_cntlid % 0xFFEF + 1;
            self.controllers.insert(
                c,
                Controller {
                    subsystem,
                    cc: 0,
                    ready_at: None,
                    kato: Duration::from_millis(kato_ms as u64),
                    last_keep_alive: now,
                    io_queues: 0,
                },
            );
            c
        } else {
            let Some(c) = self.controllers.get(&d.cntlid) else {
                let (s, r) = invalid(16);
                return self.respond(t, key, slot, s, r);
            };
            if c.subsystem != subsystem {
                let (s, r) = invalid(256);
                return self.respond(t, key, slot, s, r);
            }
            if qid > c.io_queues {
                return self.respond(
                    t,
                    key,
                    slot,
                    Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                    42,
                );
            }
            d.cntlid
        };
        self.queues.get_mut(&key).expect("present").cntlid = Some(cntlid);
        let auth = if self.cfg.require_auth { 1u64 << 17 } else { 0 };
        self.respond(t, key, slot, Status::SUCCESS, cntlid as u64 | auth)
    }

    fn identify_controller(&self, cntlid: u16, subsystem: Option<usize>) -> Box<[u8; IDENTIFY_LEN]> {
        let discovery = subsystem.is_none();
        ControllerInfo {
            vid: 0,
            serial: format!("rctbsim{:04x}", cntlid),
            model: "rctb simulated target".into(),
            firmware: "rctb-0.1".into(),
            mdts: if discovery { 0 } else { self.cfg.mdts },
            cntlid,
            version: 0x0001_0300,
            cntrltype: if discovery { CNTRLTYPE_DISCOVERY } else { CNTRLTYPE_IO },
            kas: self.cfg.kas,
            maxcmd: self.cfg.maxcmd,
            nn: subsystem.map_or(0, |s| self.subsystems[s].namespaces.iter().map(|n| n.cfg.nsid).max().unwrap_or(0)),
            sgls: SGLS_SUPPORTED | SGLS_KEYED | SGLS_OFFSET,
            subnqn: subsystem.map_or(DISCOVERY_NQN.to_string(), |s| self.subsystems[s].nqn.clone()),
            ioccsz: if discovery { 0 } else { self.cfg.ioccsz },
            iorcsz: if discovery { 0 } else { 1 },
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
        }
        .encode()
    }

    fn discovery_log(&self) -> Vec<u8> {
        let entry = |subtype, nqn: &str| DiscoveryEntry {
            trtype: TRTYPE_RDMA,
            adrfam: ADRFAM_IPV4,
            subtype,
            treq: 0,
            portid: 1,
            cntlid: CNTLID_DYNAMIC,
            asqsz: ADMIN_QUEUE_DEPTH,
            eflags: 0,
            trsvcid: self.cfg.port.to_string(),
            subnqn: nqn.into(),
            traddr: self.ip.to_string(),
            rdma_qptype: 1,
            rdma_prtype: 1,
            rdma_cms: 1,
            rdma_pkey: 0,
        };
        let mut entries = vec![entry(SUBTYPE_CURRENT_DISCOVERY, DISCOVERY_NQN)];
        entries.extend(self.subsystems.iter().map(|s| entry(SUBTYPE_NVME, &s.nqn)));
        DiscoveryLog { header: DiscoveryLogHeader { genctr: 1, numrec: entries.len() as u64, recfmt: 0 }, entries }
            .encode()
    }

    /// Sends `data` to the host's buffer with an RDMA WRITE, then responds.
    fn respond_with_data<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        slot: usize,
        sgl: Sgl,
        data: &[u8],
        result: u64,
    ) -> Result<(), TargetError> {
        let Sgl::Keyed { addr, len, key: rkey, .. } = sgl else {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_TYPE, true), 0);
        };
        if (len as usize) < data.len().min(len as usize) || len as u64 > self.slot_capacity(key) {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
        }
        let n = data.len().min(len as usize);
        let q = &self.queues[&key];
        let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
        t.mr_write(q.data_mr.id, stage, &data[..n])?;
        let sge = [Sge::new(q.data_mr.id, stage, n as u32)];
        // Unsignalled: RC completes the SEND after it, which frees the slot.
        let wr = SendWr::new(wr_id(WR_WRITE, key, slot), SendOp::Write { remote: RemoteAddr { addr, rkey } }, &sge)
            .unsignaled();
        t.post_send(q.qp, &wr)?;
        self.respond(t, key, slot, Status::SUCCESS, result)
    }

    fn respond<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        slot: usize,
        status: Status,
        result: u64,
    ) -> Result<(), TargetError> {
        let now = t.now();
        let delay = self.faults.response_delay;
        let Some(q) = self.queues.get_mut(&key) else { return Ok(()) };
        if !status.is_success() {
            self.stats.errors += 1;
        }
        let s = &mut q.slots[slot];
        s.response =
            Completion { result, sq_head: q.sq_head, sq_id: q.qid, cid: s.cid, status_field: status.to_field(false) };
        if self.faults.drop_responses > 0 {
            self.faults.drop_responses -= 1;
            self.stats.dropped_responses += 1;
            s.state = SlotState::Free;
            s.cmd = None;
            return Ok(());
        }
        if delay > Duration::ZERO {
            s.state = SlotState::Delayed;
            s.at = now + delay;
            return Ok(());
        }
        self.post_response(t, key, slot)
    }

    fn post_response<T: Transport>(&mut self, t: &mut T, key: u64, slot: usize) -> Result<(), TargetError> {
        let q = self.queues.get_mut(&key).expect("present");
        q.slots[slot].state = SlotState::Responding;
        if self.faults.wrong_cid_responses > 0 {
            self.faults.wrong_cid_responses -= 1;
            q.slots[slot].response.cid ^= 0x8000;
        }
        let at = slot as u64 * COMPLETION_LEN as u64;
        t.mr_write(q.rsp_mr.id, at, &q.slots[slot].response.encode())?;
        let sge = [Sge::new(q.rsp_mr.id, at, COMPLETION_LEN as u32)];
        t.post_send(q.qp, &SendWr::new(wr_id(WR_SEND, key, slot), SendOp::Send, &sge))?;
        Ok(())
    }

    fn send_due<T: Transport>(&mut self, t: &mut T) -> Result<(), TargetError> {
        let now = t.now();
        let due: Vec<(u64, usize)> = self
            .queues
            .iter()
            .flat_map(|(k, q)| {
                q.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.state == SlotState::Delayed && s.at <= now)
                    .map(move |(i, _)| (*k, i))
            })
            .collect();
        for (key, slot) in due {
            self.post_response(t, key, slot)?;
        }
        Ok(())
    }

    /// A controller whose host fell silent for KATO loses its queues.
    fn expire_keep_alive<T: Transport>(&mut self, t: &mut T) {
        let now = t.now();
        let expired: Vec<u16> = self
            .controllers
            .iter()
            .filter(|(_, c)| c.kato > Duration::ZERO && now >= c.last_keep_alive + c.kato)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.controllers.remove(&id);
            let keys: Vec<u64> = self.queues.iter().filter(|(_, q)| q.cntlid == Some(id)).map(|(k, _)| *k).collect();
            for k in keys {
                self.destroy_queue(t, k);
            }
        }
    }
}

fn identify_namespace(n: &NamespaceConfig) -> Box<[u8; IDENTIFY_LEN]> {
    NamespaceInfo {
        nsid: n.nsid,
        nsze: n.blocks,
        ncap: n.blocks,
        nuse: n.blocks,
        nsfeat: 0,
        flbas: 0,
        formats: vec![LbaFormat { ms: 0, lbads: n.lba_size.trailing_zeros() as u8, rp: 0 }],
    }
    .encode()
}

impl Actor for NvmeTarget {
    fn run(&mut self, t: &mut SimTransport) -> Option<Instant> {
        NvmeTarget::run(self, t)
    }
}
