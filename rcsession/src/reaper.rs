//! Expiry and teardown. A session is destroyed only when it is marked for
//! reaping and every handle and reference has drained; its QP and CQ go
//! first (so the NIC stops), then its staging region. A region whose
//! deregistration failed, or whose QP survived, is leaked on purpose:
//! freeing memory the NIC may still touch would be a use-after-free.

use rand_core::RngCore;

use super::manager::{Session, SessionManager};
use super::status::ReadyOutcome;
use super::types::Ended;
use crate::hipobj::SessionId;
use crate::transport::Transport;

impl<T: Transport, R: RngCore> SessionManager<T, R> {
    /// The reaper's pass: marks sessions past their prepare or exec
    /// deadline (strictly after it, from the transport's clock), then
    /// destroys every marked session that has drained. Returns how many it
    /// destroyed.
    pub fn reap(&mut self) -> usize {
        let now = self.t.now();
        for s in self.sessions.values_mut() {
            let expired = |d: Option<crate::time::Instant>| d.is_some_and(|d| now > d);
            if !s.reap_pending && (expired(s.prep_deadline) || expired(s.exec_deadline)) {
                s.reap_pending = true;
            }
        }
        let doomed: Vec<SessionId> = self
            .sessions
            .values()
            .filter(|s| s.reap_pending && s.drained() && s.transfer.is_none())
            .map(|s| s.id)
            .collect();
        for id in &doomed {
            let s = self.sessions.remove(id).expect("listed above");
            self.destroy(s);
        }
        doomed.len()
    }

    fn destroy(&mut self, s: Session) {
        self.in_flight.remove(&s.id);
        self.rollback(s.pd, Some(s.qp), Some(s.cq), Some(s.staging));
        self.release_limits(&s.principal, s.size);
        if let Some(ended) = self.ended.as_mut() {
            let bytes = if s.last_outcome == Some(ReadyOutcome::Ok) { s.size } else { 0 };
            ended.push(Ended { session: s.id, outcome: s.last_outcome, bytes });
        }
    }

    /// Shutdown after every admitted call has left: marks every session,
    /// revokes handles nobody can return any more, ends data phases, and
    /// destroys everything.
    pub fn shutdown(&mut self) {
        for s in self.sessions.values_mut() {
            s.reap_pending = true;
            s.staging_lease = None;
            s.put_view = None;
            s.active_ref = 0;
            s.put_ref = 0;
            s.transfer = None;
        }
        self.in_flight.clear();
        self.reap();
    }
}
