//! The session engine: one thread owns the [`SessionManager`] (its
//! transport need not be `Send`: the simulator's is not) and what the
//! gateway remembers per session (object path, checksum). HTTP handlers
//! send it short jobs and await the answer.
//!
//! Data phases run concurrently: a READY job starts its data phase and
//! returns at once with a receiver; between jobs the engine drives every
//! data phase in flight (`progress`), hands finished ones their result, and
//! waits on their CQs in short slices so new jobs are picked up. Backend
//! I/O (reading an object to stage it, writing a PUT) never runs on the
//! engine thread: the HTTP layer does it between jobs, so one slow disk
//! write does not stall the other sessions.
//!
//! After [`Sessions::close`] every job answers 503 (`ShuttingDown`).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration as StdDuration;

use rand_core::RngCore;
use rctb_core::rcsession::{
    Op, PrepareReply, PrepareRequest, PutView, RcError, ReadyReply, ReadyRequest, ReadyStart, ReadyTicket, SessionId,
    SessionManager, SessionSummary, Usage, inproc,
};
use rctb_core::time::Duration;
use rctb_core::transport::{Readiness, Transport};
use rctb_core::wire::hipobj::{Crc64Nvme, PrincipalId};
use tokio::sync::oneshot;

use crate::store::{ObjectMeta, ObjectPath, StoreError};

/// Why a job failed: the session API's error, or the backend's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The session server refused or failed.
    #[error(transparent)]
    Rc(#[from] RcError),
    /// The object store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine thread is gone.
    #[error("the session engine has stopped")]
    Stopped,
}

/// What the gateway keeps per session beside the manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionMeta {
    /// GET or PUT.
    pub op: Op,
    /// The object.
    pub path: ObjectPath,
    /// A PUT's expected CRC64-NVMe, if the client sent one.
    pub checksum: Option<Crc64Nvme>,
}

/// The result of a data phase, delivered when it ends.
pub type ReadyResult = Result<ReadyReply, RcError>;

/// How a READY started.
#[derive(Debug)]
pub enum ReadyWait {
    /// Control-plane-only (client QPN 0): no data moved, the reply is final.
    Done(ReadyReply),
    /// The data phase runs; its result arrives here.
    Pending(oneshot::Receiver<ReadyResult>),
}

/// A PUT's received data, borrowed from its staging region.
#[derive(Debug)]
pub struct PutData {
    /// The session's view of its staging region (returned by `finish_put`).
    pub view: PutView,
    /// The bytes received.
    pub data: Vec<u8>,
}

/// The operations HTTP handlers run on the engine thread. Each is short:
/// none waits for a data phase or touches the object store.
pub trait Sessions {
    /// PREPARE of a GET with the object's bytes (read by the caller).
    fn prepare_get(
        &mut self,
        req: &PrepareRequest,
        path: ObjectPath,
        object: &[u8],
        meta: &ObjectMeta,
    ) -> Result<PrepareReply, EngineError>;
    /// PREPARE of a PUT, published at once.
    fn prepare_put(
        &mut self,
        req: &PrepareRequest,
        path: ObjectPath,
        checksum: Option<Crc64Nvme>,
    ) -> Result<PrepareReply, EngineError>;
    /// READY: checks and starts the data phase. Returns the session's meta
    /// (what to do once the data moved).
    fn ready(&mut self, req: &ReadyRequest) -> Result<(ReadyWait, SessionMeta), EngineError>;
    /// After a PUT's data phase: copies the data out of staging.
    fn take_put(&mut self, id: &SessionId) -> Result<PutData, EngineError>;
    /// Returns a PUT view (committed with the stored etag and version id,
    /// or not); the session is reaped.
    fn finish_put(&mut self, view: PutView, committed: bool, etag: &str, version_id: &str) -> Result<(), EngineError>;
    /// The final answer of a GET (or a control-plane-only READY) is out:
    /// the session is reaped.
    fn finish_final(&mut self, id: &SessionId) -> Result<(), EngineError>;
    /// CANCEL by `who` (its own sessions only).
    fn cancel(&mut self, id: &SessionId, who: &PrincipalId) -> Result<(), EngineError>;
    /// Every session (the admin listing).
    fn list(&mut self) -> Vec<SessionSummary>;
    /// Sessions and staging bytes held now.
    fn usage(&mut self) -> Usage;
    /// Data phases running now.
    fn in_flight(&self) -> usize;
    /// Stops admissions (every later job answers `ShuttingDown`), ends the
    /// data phases in flight, and tears every session down.
    fn close(&mut self);
    /// Whether `close` has begun.
    fn is_closing(&self) -> bool;
}

struct Pending {
    reply: oneshot::Sender<ReadyResult>,
}

struct Core<T: Transport, R: RngCore> {
    m: SessionManager<T, R>,
    meta: BTreeMap<SessionId, SessionMeta>,
    pending: BTreeMap<ReadyTicket, Pending>,
    closing: bool,
}

impl<T: Transport, R: RngCore> Core<T, R> {
    fn admit(&self) -> Result<(), EngineError> {
        if self.closing { Err(RcError::ShuttingDown.into()) } else { Ok(()) }
    }

    /// Drives the data phases in flight and hands finished ones their
    /// result (an answer nobody waits for any more is dropped: the HTTP
    /// task that started it always finishes the session itself).
    fn drive(&mut self) {
        self.m.progress();
        let done: Vec<(ReadyTicket, ReadyResult)> =
            self.pending.keys().filter_map(|t| self.m.take_ready(*t).map(|r| (*t, r))).collect();
        for (ticket, result) in done {
            if let Some(p) = self.pending.remove(&ticket) {
                let _ = p.reply.send(result);
            }
        }
    }
}

impl<T: Transport, R: RngCore> Sessions for Core<T, R> {
    fn prepare_get(
        &mut self,
        req: &PrepareRequest,
        path: ObjectPath,
        object: &[u8],
        meta: &ObjectMeta,
    ) -> Result<PrepareReply, EngineError> {
        self.admit()?;
        let reply = inproc::prepare_get_versioned(&mut self.m, req, object, &meta.etag, &meta.version_id)?;
        self.meta.insert(reply.session, SessionMeta { op: Op::Get, path, checksum: None });
        Ok(reply)
    }

    fn prepare_put(
        &mut self,
        req: &PrepareRequest,
        path: ObjectPath,
        checksum: Option<Crc64Nvme>,
    ) -> Result<PrepareReply, EngineError> {
        self.admit()?;
        let reply = inproc::prepare_put(&mut self.m, req)?;
        self.meta.insert(reply.session, SessionMeta { op: Op::Put, path, checksum });
        Ok(reply)
    }

    fn ready(&mut self, req: &ReadyRequest) -> Result<(ReadyWait, SessionMeta), EngineError> {
        self.admit()?;
        self.m.session_info(&req.session, &req.principal)?;
        let meta = self.meta.get(&req.session).cloned().ok_or(RcError::NoSession)?;
        match self.m.ready(req)? {
            ReadyStart::Done => Ok((ReadyWait::Done(self.m.done_reply(&req.session)?), meta)),
            ReadyStart::Pending(ticket) => {
                let (tx, rx) = oneshot::channel();
                self.pending.insert(ticket, Pending { reply: tx });
                Ok((ReadyWait::Pending(rx), meta))
            }
        }
    }

    fn take_put(&mut self, id: &SessionId) -> Result<PutData, EngineError> {
        let view = self.m.get_put_data(id)?;
        let mut data = vec![0u8; view.len as usize];
        if let Err(e) = self.m.read_put_data(&view, 0, &mut data) {
            let _ = self.m.finish_put(view, false, "", "");
            self.meta.remove(id);
            return Err(e.into());
        }
        Ok(PutData { view, data })
    }

    fn finish_put(&mut self, view: PutView, committed: bool, etag: &str, version_id: &str) -> Result<(), EngineError> {
        let r = self.m.finish_put(view, committed, etag, version_id);
        self.forget_reaped();
        Ok(r?)
    }

    fn finish_final(&mut self, id: &SessionId) -> Result<(), EngineError> {
        let r = self.m.finish_final(id);
        self.meta.remove(id);
        Ok(r?)
    }

    fn cancel(&mut self, id: &SessionId, who: &PrincipalId) -> Result<(), EngineError> {
        self.admit()?;
        self.m.cancel(id, who)?;
        self.forget_reaped();
        Ok(())
    }

    fn list(&mut self) -> Vec<SessionSummary> {
        self.m.sessions()
    }

    fn usage(&mut self) -> Usage {
        self.m.usage()
    }

    fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn close(&mut self) {
        if self.closing {
            return;
        }
        self.closing = true;
        // Ends the data phases in flight (as WIRE "cancelled"), answers
        // their READYs, then destroys everything.
        self.m.cancel_all();
        self.drive();
        for (_, p) in std::mem::take(&mut self.pending) {
            let _ = p.reply.send(Err(RcError::ShuttingDown));
        }
        self.m.shutdown();
        self.meta.clear();
    }

    fn is_closing(&self) -> bool {
        self.closing
    }
}

impl<T: Transport, R: RngCore> Core<T, R> {
    /// Drops the meta of sessions the manager no longer has.
    fn forget_reaped(&mut self) {
        if self.meta.len() > 64 || self.meta.len() != self.m.usage().sessions as usize {
            let live: std::collections::BTreeSet<SessionId> = self.m.sessions().iter().map(|s| s.session).collect();
            self.meta.retain(|id, _| live.contains(id));
        }
    }
}

type Job = Box<dyn FnOnce(&mut dyn Sessions) + Send>;

/// How the engine waits while data phases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// Longest one wait on the transport's CQs (transport time) before
    /// new jobs are looked at.
    pub slice: Duration,
    /// After a wait that timed out, also wait this long (wall time) for a
    /// job. The simulator's wait returns at once when nothing is due (it
    /// jumps its clock), so without this pause an idle data phase would
    /// race through virtual time and hit its deadline while its client is
    /// still sending READY; 1 ms keeps virtual time close to wall time.
    /// Zero for real transports, whose wait really waits.
    pub idle_pause: StdDuration,
    /// With no data phase in flight: how often the reaper runs.
    pub reap_every: StdDuration,
}

impl Pacing {
    /// For verbs (and other real-time transports).
    pub const REAL: Pacing = Pacing {
        slice: Duration::from_millis(1),
        idle_pause: StdDuration::ZERO,
        reap_every: StdDuration::from_millis(200),
    };
    /// For the simulator.
    pub const SIM: Pacing = Pacing {
        slice: Duration::from_millis(1),
        idle_pause: StdDuration::from_millis(1),
        reap_every: StdDuration::from_millis(200),
    };
}

/// A handle to the engine thread (cheap to clone).
#[derive(Clone, Debug)]
pub struct Engine {
    tx: mpsc::Sender<Job>,
}

impl Engine {
    /// Starts the engine thread; `make` builds the session manager there
    /// (so its transport never crosses threads). Simulator pacing.
    pub fn spawn<T, R, F>(make: F) -> std::io::Result<Engine>
    where
        T: Transport + 'static,
        R: RngCore + 'static,
        F: FnOnce() -> Result<SessionManager<T, R>, RcError> + Send + 'static,
    {
        Self::spawn_paced(make, Pacing::SIM)
    }

    /// [`Engine::spawn`] with the given pacing.
    pub fn spawn_paced<T, R, F>(make: F, pacing: Pacing) -> std::io::Result<Engine>
    where
        T: Transport + 'static,
        R: RngCore + 'static,
        F: FnOnce() -> Result<SessionManager<T, R>, RcError> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::Builder::new().name("rc-engine".into()).spawn(move || {
            let m = match make() {
                Ok(m) => {
                    let _ = ready_tx.send(Ok(()));
                    m
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let mut core = Core { m, meta: BTreeMap::new(), pending: BTreeMap::new(), closing: false };
            run(&mut core, &rx, pacing);
            core.close();
        })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Engine { tx }),
            Ok(Err(e)) => Err(std::io::Error::other(format!("session manager: {e}"))),
            Err(_) => Err(std::io::Error::other("the session engine died while starting")),
        }
    }

    /// Queues `f` on the engine thread without waiting for it (tests run
    /// simulated clients there, in the server's fabric).
    pub fn submit(&self, f: impl FnOnce(&mut dyn Sessions) + Send + 'static) -> Result<(), EngineError> {
        self.tx.send(Box::new(f)).map_err(|_| EngineError::Stopped)
    }

    /// Runs `f` on the engine thread and returns its result.
    pub async fn call<X: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Sessions) -> X + Send + 'static,
    ) -> Result<X, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Box::new(move |s: &mut dyn Sessions| {
                let _ = tx.send(f(s));
            }))
            .map_err(|_| EngineError::Stopped)?;
        rx.await.map_err(|_| EngineError::Stopped)
    }
}

/// The engine loop: jobs, then the data phases, then a bounded wait.
fn run<T: Transport, R: RngCore>(core: &mut Core<T, R>, rx: &mpsc::Receiver<Job>, pacing: Pacing) {
    loop {
        loop {
            match rx.try_recv() {
                Ok(job) => job(core),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        }
        core.drive();
        if core.pending.is_empty() {
            match rx.recv_timeout(pacing.reap_every) {
                Ok(job) => job(core),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    core.m.reap();
                    core.forget_reaped();
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            continue;
        }
        let (cqs, next) = core.m.wait_set();
        let until = next.min(core.m.now() + pacing.slice);
        let waited = core.m.transport_mut().wait(&cqs, until);
        if matches!(waited, Ok(Readiness::TimedOut)) && !pacing.idle_pause.is_zero() {
            match rx.recv_timeout(pacing.idle_pause) {
                Ok(job) => job(core),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}
