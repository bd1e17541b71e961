//! [`RcService`]: a [`SessionManager`] shared across threads, with the
//! Go binding's lifecycle: `try_enter` admits a call (an [`Admission`]
//! whose drop is Leave), `close` stops admissions, marks every session for
//! reaping, waits for every admitted call to leave, then tears the server
//! down. Idempotent and safe from any thread.
//!
//! Calls through one admission take the manager's mutex per step; a
//! blocking READY holds it only while it polls or waits one short slice,
//! so other requests interleave with a data phase.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use rand_core::RngCore;

use super::manager::SessionManager;
use super::status::RcError;
use super::types::{ReadyReply, ReadyRequest, ReadyStart};
use crate::time::Duration;
use crate::transport::Transport;

/// Longest a blocking READY holds the manager while it waits.
const WAIT_SLICE: Duration = Duration::from_millis(1);

#[derive(Debug, Default)]
struct Gate {
    active: usize,
    closing: bool,
    closed: bool,
}

/// The session server shared across threads (`RCSvc`). `Sync` when the
/// transport and RNG are `Send`.
#[derive(Debug)]
pub struct RcService<T: Transport, R: RngCore> {
    manager: Mutex<SessionManager<T, R>>,
    gate: Mutex<Gate>,
    changed: Condvar,
    closing: AtomicBool,
}

/// An admitted call (TryEnter); dropping it is Leave.
#[derive(Debug)]
#[must_use = "dropping the admission leaves at once"]
pub struct Admission<'a, T: Transport, R: RngCore> {
    svc: &'a RcService<T, R>,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    // A panicking handler must not wedge shutdown: the manager's state is
    // consistent between calls, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Transport, R: RngCore> RcService<T, R> {
    /// Wraps an opened manager; the service admits calls until
    /// [`RcService::close`].
    pub fn new(manager: SessionManager<T, R>) -> Self {
        RcService {
            manager: Mutex::new(manager),
            gate: Mutex::new(Gate::default()),
            changed: Condvar::new(),
            closing: AtomicBool::new(false),
        }
    }

    /// Admits a call, or `None` once `close` has begun.
    pub fn try_enter(&self) -> Option<Admission<'_, T, R>> {
        let mut g = lock(&self.gate);
        if g.closing {
            return None;
        }
        g.active += 1;
        Some(Admission { svc: self })
    }

    /// True once `close` has begun: handlers bind their backend I/O to it
    /// (the service context of the Go binding) and give up early.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Admitted calls that have not left.
    pub fn active(&self) -> usize {
        lock(&self.gate).active
    }

    /// Stops admissions, marks every session for reaping, waits for every
    /// admitted call to leave, then destroys every session and the PD. A
    /// second call (from any thread) waits for the first to finish.
    pub fn close(&self) {
        {
            let mut g = lock(&self.gate);
            if g.closing {
                while !g.closed {
                    g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
                }
                return;
            }
            g.closing = true;
            self.closing.store(true, Ordering::Release);
        }
        lock(&self.manager).cancel_all();
        {
            let mut g = lock(&self.gate);
            while g.active > 0 {
                g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
            }
        }
        lock(&self.manager).shutdown();
        lock(&self.gate).closed = true;
        self.changed.notify_all();
    }

    fn leave(&self) {
        let mut g = lock(&self.gate);
        g.active -= 1;
        if g.active == 0 {
            self.changed.notify_all();
        }
    }

    /// Runs `f` on the manager outside any admission (tests, the reaper
    /// thread, admin listings).
    pub fn with_manager<X>(&self, f: impl FnOnce(&mut SessionManager<T, R>) -> X) -> X {
        f(&mut lock(&self.manager))
    }
}

impl<T: Transport, R: RngCore> Admission<'_, T, R> {
    /// Runs one manager call under the lock.
    pub fn with<X>(&self, f: impl FnOnce(&mut SessionManager<T, R>) -> X) -> X {
        f(&mut lock(&self.svc.manager))
    }

    /// READY, blocking until its data phase ends (HTTP handlers call this).
    pub fn ready(&self, req: &ReadyRequest) -> Result<ReadyReply, RcError> {
        if self.svc.is_closing() {
            return Err(RcError::ShuttingDown);
        }
        let ticket = match self.with(|m| m.ready(req))? {
            ReadyStart::Done => return self.with(|m| m.done_reply(&req.session)),
            ReadyStart::Pending(t) => t,
        };
        loop {
            let mut m = lock(&self.svc.manager);
            m.progress();
            if let Some(r) = m.take_ready(ticket) {
                return r;
            }
            let (cqs, next) = m.wait_set();
            let slice = m.now() + WAIT_SLICE;
            m.transport_mut().wait(&cqs, next.min(slice))?;
        }
    }
}

impl<T: Transport, R: RngCore> Drop for Admission<'_, T, R> {
    fn drop(&mut self) {
        self.svc.leave();
    }
}
