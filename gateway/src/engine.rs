//! The session engine: one thread owns the [`RcService`] (its transport
//! need not be `Send`: the simulator's is not), the object store and what
//! the gateway remembers per session (object path, checksum). HTTP
//! handlers send it jobs and await the answer.
//!
//! Jobs run one at a time, so a READY's data phase holds the engine until
//! it ends (its deadline is `t_exec`); a job that arrives after `close`
//! is answered 503, and `close` itself runs after the jobs queued before it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;

use rand_core::RngCore;
use rctb_core::rcsession::{
    Op, PrepareReply, PrepareRequest, RcError, RcService, ReadyOutcome, ReadyReply, ReadyRequest, SessionId,
    SessionManager, SessionSummary, Usage, inproc,
};
use rctb_core::transport::Transport;
use rctb_core::wire::hipobj::{Crc64Nvme, PrincipalId};
use tokio::sync::oneshot;

use crate::store::{ObjectPath, ObjectStore, StoreError};

/// Why a job failed: the session API's error, or the backend's.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Rc(#[from] RcError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the session engine has stopped")]
    Stopped,
}

/// What the gateway keeps per session beside the manager.
#[derive(Clone, Debug)]
struct SessionMeta {
    op: Op,
    path: ObjectPath,
    checksum: Option<Crc64Nvme>,
}

/// The operations HTTP handlers run on the engine thread.
pub trait Sessions {
    fn prepare(
        &mut self,
        req: &PrepareRequest,
        path: ObjectPath,
        checksum: Option<Crc64Nvme>,
    ) -> Result<PrepareReply, EngineError>;
    fn ready(&mut self, req: &ReadyRequest) -> Result<ReadyReply, EngineError>;
    fn cancel(&mut self, id: &SessionId, who: &PrincipalId) -> Result<(), EngineError>;
    fn list(&mut self) -> Vec<SessionSummary>;
    fn usage(&mut self) -> Usage;
    fn close(&mut self);
    fn is_closing(&self) -> bool;
}

struct Core<T: Transport, R: RngCore> {
    svc: RcService<T, R>,
    store: Arc<dyn ObjectStore>,
    meta: BTreeMap<SessionId, SessionMeta>,
}

impl<T: Transport, R: RngCore> Sessions for Core<T, R> {
    fn prepare(
        &mut self,
        req: &PrepareRequest,
        path: ObjectPath,
        checksum: Option<Crc64Nvme>,
    ) -> Result<PrepareReply, EngineError> {
        let adm = self.svc.try_enter().ok_or(RcError::ShuttingDown)?;
        let reply = match req.op {
            Op::Get => {
                if path.part.is_some() {
                    return Err(StoreError::BadPart("a GET cannot name a part").into());
                }
                // Check the range before reading (and before a session
                // exists), so a bad GET costs nothing.
                let head = self.store.head(&path)?;
                if req.offset.checked_add(req.size).is_none_or(|end| end > head.size) {
                    return Err(StoreError::Range { offset: req.offset, size: req.size, len: head.size }.into());
                }
                if req.size > rctb_core::wire::hipobj::MAX_OFFSET_PLUS_SIZE {
                    return Err(RcError::Arg { field: "size", rule: "must be 1..=2147483647" }.into());
                }
                let mut buf = vec![0u8; req.size as usize];
                let meta = self.store.read_range(&path, req.offset, &mut buf)?;
                adm.with(|m| inproc::prepare_get_versioned(m, req, &buf, &meta.etag, &meta.version_id))?
            }
            Op::Put => adm.with(|m| rctb_core::rcsession::inproc::prepare_put(m, req))?,
        };
        self.meta.insert(reply.session, SessionMeta { op: req.op, path, checksum });
        Ok(reply)
    }

    fn ready(&mut self, req: &ReadyRequest) -> Result<ReadyReply, EngineError> {
        let adm = self.svc.try_enter().ok_or(RcError::ShuttingDown)?;
        adm.with(|m| m.session_info(&req.session, &req.principal))?;
        let mut reply = adm.ready(req)?;
        if reply.outcome != ReadyOutcome::Ok {
            return Ok(reply);
        }
        let meta = self.meta.remove(&req.session);
        match meta {
            Some(SessionMeta { op: Op::Put, path, checksum }) => {
                let view = adm.with(|m| m.get_put_data(&req.session))?;
                let mut data = vec![0u8; view.len as usize];
                if let Err(e) = adm.with(|m| m.read_put_data(&view, 0, &mut data)) {
                    let _ = adm.with(|m| m.finish_put(view, false, "", ""));
                    return Err(e.into());
                }
                if let Some(want) = checksum {
                    let got = Crc64Nvme::of(&data);
                    if got != want {
                        let _ = adm.with(|m| m.finish_put(view, false, "", ""));
                        return Err(RcError::Wire {
                            outcome: ReadyOutcome::VerifyFail,
                            detail: format!("CRC64NVME {:016x} received, {:016x} declared", got.0, want.0),
                        }
                        .into());
                    }
                }
                let stored = match self.store.put(&path, &data) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = adm.with(|m| m.finish_put(view, false, "", ""));
                        return Err(e.into());
                    }
                };
                adm.with(|m| m.finish_put(view, true, &stored.etag, &stored.version_id))?;
                reply.etag = stored.etag;
                reply.version_id = stored.version_id;
            }
            _ => adm.with(|m| m.finish_final(&req.session))?,
        }
        Ok(reply)
    }

    fn cancel(&mut self, id: &SessionId, who: &PrincipalId) -> Result<(), EngineError> {
        let adm = self.svc.try_enter().ok_or(RcError::ShuttingDown)?;
        adm.with(|m| m.cancel(id, who))?;
        if adm.with(|m| m.sessions().iter().all(|s| s.session != *id)) {
            self.meta.remove(id);
        }
        Ok(())
    }

    fn list(&mut self) -> Vec<SessionSummary> {
        self.svc.with_manager(|m| m.sessions())
    }

    fn usage(&mut self) -> Usage {
        self.svc.with_manager(|m| m.usage())
    }

    fn close(&mut self) {
        self.svc.close();
        self.meta.clear();
    }

    fn is_closing(&self) -> bool {
        self.svc.is_closing()
    }
}

type Job = Box<dyn FnOnce(&mut dyn Sessions) + Send>;

/// A handle to the engine thread (cheap to clone).
#[derive(Clone, Debug)]
pub struct Engine {
    tx: mpsc::Sender<Job>,
}

impl Engine {
    /// Starts the engine thread; `make` builds the session manager there
    /// (so its transport never crosses threads).
    pub fn spawn<T, R, F>(make: F, store: Arc<dyn ObjectStore>) -> std::io::Result<Engine>
    where
        T: Transport + 'static,
        R: RngCore + 'static,
        F: FnOnce() -> Result<SessionManager<T, R>, RcError> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::Builder::new().name("rc-engine".into()).spawn(move || {
            let manager = match make() {
                Ok(m) => {
                    let _ = ready_tx.send(Ok(()));
                    m
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let mut core = Core { svc: RcService::new(manager), store, meta: BTreeMap::new() };
            while let Ok(job) = rx.recv() {
                job(&mut core);
            }
            core.close();
        })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Engine { tx }),
            Ok(Err(e)) => Err(std::io::Error::other(format!("session manager: {e}"))),
            Err(_) => Err(std::io::Error::other("the session engine died while starting")),
        }
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
