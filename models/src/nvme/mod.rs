//! A model of an NVMe-oF/RDMA target (the Linux nvmet-rdma target as the
//! host sees it), with in-memory namespaces, generic over
//! [`rctb_core::Transport`].
//!
//! Contract: [`NvmeTarget::new`] checks the configuration (a typed
//! [`TargetError::Config`] naming the field); then the owner calls
//! [`NvmeTarget::run`] with the target node's transport whenever something
//! may have happened there (CM events, completions) and at the latest at
//! the instant `run` returned. `run` never blocks and never waits: it
//! handles what is pending and says when it next needs to run. On the
//! simulator the owner is an actor (`sim.add_actor`), so the target answers
//! while an initiator on the same thread blocks in `wait`; a test loop or a
//! real backend calls `run` itself. Errors of the host's commands are
//! answered on the wire with nvmet's status codes; a local failure (the
//! transport refusing a verb) is kept in [`NvmeTarget::last_error`] and the
//! model keeps running. [`NvmeTarget::crash`], [`NvmeTarget::restart`] and
//! [`NvmeTarget::shutdown`] are the lifecycle faults; `shutdown` releases
//! every verbs object the target made.
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
//! responses (the command still executes), error statuses on I/O, dropping
//! every connection, crash / restart (every connection torn down,
//! controllers forgotten, unflushed writes lost), all counted in commands;
//! and [`RandomFaults`], errors, drops and delays drawn per I/O command from
//! a seed. Counted or seeded, the same commands meet the same faults.
//!
//! Namespaces live in memory behind a volatile write cache (Identify says
//! VWC=1): a Flush makes what was written durable, a crash loses the rest.
//! An owner that keeps namespaces somewhere lasting (a file) gives a
//! [`DurableStore`]: each Flush hands it the blocks it makes durable before
//! the Flush is answered.
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

mod commands;
mod config;
mod queues;

pub use config::{
    NamespaceConfig, RandomFaults, SubsystemConfig, TargetConfig, TargetError, TargetFaults, TargetStats,
};

struct Namespace {
    cfg: NamespaceConfig,
    data: Vec<u8>,
    /// Blocks written since the last flush, with their previous contents:
    /// a crash puts them back (a volatile write cache).
    undo: BTreeMap<u64, Vec<u8>>,
}

/// The label of the random faults' RNG stream.
const RANDOM_FAULTS_LABEL: &str = "nvme-target-faults";

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
    /// What [`RandomFaults`] picked for this command.
    pick: Pick,
}

impl Slot {
    fn new(state: SlotState, cid: u16) -> Slot {
        Slot { state, cid, cmd: None, response: Completion::default(), at: Instant::ZERO, pick: Pick::default() }
    }
}

/// The random faults one I/O command drew.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Pick {
    drop: bool,
    delay: bool,
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

#[inline]
fn wr_id(kind: u64, key: u64, slot: usize) -> u64 {
    kind << 56 | key << 16 | slot as u64
}

/// The NVMe-oF target model. On the simulator, share it and register a
/// closure over it as an actor of its node
/// (`sim.add_actor(node, Box::new(move |t: &mut SimTransport| target.borrow_mut().run(t)))`);
/// elsewhere call [`NvmeTarget::run`] from the owner's loop.
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
    /// A fault asked for a crash; `run` takes nothing more and crashes.
    pub(super) crash_pending: bool,
    /// A fault asked to drop every connection at the end of this pass.
    pub(super) disconnect_pending: bool,
    random: RandomFaults,
    rng: crate::SeededRng,
    store: Option<Box<dyn DurableStore>>,
}

/// Where namespaces keep what must last: the bytes a Flush makes durable
/// (and, at an orderly [`NvmeTarget::shutdown`], everything written) go to
/// [`write`](DurableStore::write) and then [`sync`](DurableStore::sync)
/// before the Flush is answered, as a device with a volatile write cache
/// does. What a crash loses never comes here. A failing store fails the
/// Flush (Internal Error); the blocks stay unflushed.
pub trait DurableStore {
    /// Stores `bytes` at byte `offset` of namespace `nsid` of `nqn`
    /// (consecutive blocks come as one run, in order).
    fn write(&mut self, nqn: &str, nsid: u32, offset: u64, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes what [`DurableStore::write`] stored for that namespace last.
    fn sync(&mut self, nqn: &str, nsid: u32) -> std::io::Result<()>;
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
            crash_pending: false,
            disconnect_pending: false,
            random: RandomFaults::default(),
            rng: crate::SeededRng::child(0, RANDOM_FAULTS_LABEL),
            store: None,
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }
    /// What it counted so far.
    pub fn stats(&self) -> TargetStats {
        self.stats
    }
    /// The counted faults in force.
    pub fn faults(&self) -> TargetFaults {
        self.faults
    }
    /// The counted faults, to set (they apply from the next command on).
    pub fn faults_mut(&mut self) -> &mut TargetFaults {
        &mut self.faults
    }

    /// Sets the seeded random faults (and restarts their draws from the
    /// seed): a typed error when a rate is above a million.
    pub fn set_random_faults(&mut self, random: RandomFaults) -> Result<(), TargetError> {
        random.validate()?;
        self.random = random;
        self.rng = crate::SeededRng::child(random.seed, RANDOM_FAULTS_LABEL);
        Ok(())
    }

    /// The random faults in force.
    pub fn random_faults(&self) -> RandomFaults {
        self.random
    }

    /// Backs the namespaces with `store` (their bytes stay in memory too;
    /// preload them with [`NvmeTarget::namespace_data_mut`]), or with
    /// nothing lasting (`None`, the default).
    pub fn set_store(&mut self, store: Option<Box<dyn DurableStore>>) {
        self.store = store;
    }

    /// Makes the written blocks of subsystem `s`'s namespaces (`nsid`, or
    /// all for `u32::MAX`) durable: handed to the store, if any, then
    /// forgotten by the cache. `Ok(false)` when no namespace matched.
    pub(super) fn make_durable(&mut self, s: usize, nsid: u32) -> Result<bool, TargetError> {
        let sub = &mut self.subsystems[s];
        let mut found = false;
        for ns in sub.namespaces.iter_mut().filter(|n| nsid == u32::MAX || n.cfg.nsid == nsid) {
            found = true;
            if let Some(store) = self.store.as_mut().filter(|_| !ns.undo.is_empty()) {
                let lba = ns.cfg.lba_size as u64;
                let mut blocks = ns.undo.keys().copied().peekable();
                while let Some(first) = blocks.next() {
                    let mut last = first;
                    while blocks.peek() == Some(&(last + 1)) {
                        last = blocks.next().expect("peeked");
                    }
                    let (at, end) = ((first * lba) as usize, ((last + 1) * lba) as usize);
                    store.write(&sub.nqn, ns.cfg.nsid, first * lba, &ns.data[at..end]).map_err(|e| {
                        TargetError::Store(format!("writing namespace {} at {}: {e}", ns.cfg.nsid, first * lba))
                    })?;
                }
                store
                    .sync(&sub.nqn, ns.cfg.nsid)
                    .map_err(|e| TargetError::Store(format!("syncing namespace {}: {e}", ns.cfg.nsid)))?;
            }
            ns.undo.clear();
        }
        Ok(found)
    }

    /// The CQs of the live queues, for an owner that sleeps on them
    /// between runs (`Transport::wait`).
    pub fn cqs(&self) -> impl Iterator<Item = CqId> + '_ {
        self.queues.values().map(|q| q.cq)
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
    /// readable through [`NvmeTarget::namespace_data`]; an orderly stop
    /// writes the volatile cache back (to the [`DurableStore`], if any; a
    /// failure is kept in [`NvmeTarget::last_error`]).
    pub fn shutdown<T: Transport>(&mut self, t: &mut T) {
        self.up = false;
        for s in 0..self.subsystems.len() {
            if let Err(e) = self.make_durable(s, u32::MAX) {
                self.last_error.get_or_insert(e);
            }
        }
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
            if self.crash_pending {
                break;
            }
            self.poll_queue(t, key)?;
        }
        if std::mem::take(&mut self.crash_pending) {
            self.crash(t);
            return Ok(());
        }
        if std::mem::take(&mut self.disconnect_pending) {
            self.stats.dropped_connections += 1;
            for key in self.queues.keys().copied().collect::<Vec<_>>() {
                self.destroy_queue(t, key);
            }
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
}
