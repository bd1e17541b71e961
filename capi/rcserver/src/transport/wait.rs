//! `wait`: polls the CQs; if none has a completion, arms them, polls again
//! (a completion may have landed before the arming) and sleeps in `poll(2)`
//! on their completion channels until one fires or the deadline passes.
//! Completions polled along the way are held for `poll_cq`.

use std::ffi::{c_int, c_void};

use rctb_transport::time::Instant;
use rctb_transport::{CqId, Readiness, Result, Transport, TransportError, Verb};

use super::{DlTransport, os};

impl DlTransport {
    pub(super) fn wait_until(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        for cq in cqs {
            if !self.cqs.contains_key(cq) {
                return Err(TransportError::handle(Verb::Wait, cq));
            }
        }
        loop {
            if self.ready_now(cqs)? {
                return Ok(Readiness::Ready);
            }
            let now = self.now();
            if now >= deadline {
                return Ok(Readiness::TimedOut);
            }
            for cq in cqs {
                let entry = self.cqs.get_mut(cq).expect("checked above");
                if !entry.armed {
                    let raw = entry.cq;
                    // SAFETY: a CQ of this context; `req_notify_cq` is set
                    // by every provider (verbs.h's inline call does the same).
                    let rc = unsafe {
                        match (*(*raw).context).ops.req_notify_cq {
                            Some(arm) => arm(raw, 0),
                            None => libc::ENOSYS,
                        }
                    };
                    if rc != 0 {
                        return Err(os(Verb::Wait, "ibv_req_notify_cq", rc));
                    }
                    entry.armed = true;
                }
            }
            if self.ready_now(cqs)? {
                return Ok(Readiness::Ready);
            }
            let mut fds: Vec<libc::pollfd> = cqs
                .iter()
                // SAFETY: a live completion channel; its fd is a plain field.
                .map(|cq| libc::pollfd { fd: unsafe { (*self.cqs[cq].channel).fd }, events: libc::POLLIN, revents: 0 })
                .collect();
            let left = deadline.saturating_duration_since(now);
            let ms = if deadline == Instant::FAR_FUTURE { -1 } else { left.as_millis().clamp(1, 1000) as c_int };
            if fds.is_empty() && ms < 0 {
                return Ok(Readiness::TimedOut);
            }
            // SAFETY: `fds` is a valid array of its length.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if rc < 0 {
                let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
                if e != libc::EINTR {
                    return Err(os(Verb::Wait, "poll", e));
                }
            }
            for (cq, fd) in cqs.iter().zip(&fds) {
                if fd.revents == 0 {
                    continue;
                }
                let entry = self.cqs.get_mut(cq).expect("checked above");
                let (mut ev_cq, mut ctx) = (std::ptr::null_mut(), std::ptr::null_mut::<c_void>());
                // SAFETY: the CQ's channel, readable: the event is there.
                if unsafe { (self.dev.lib.get_cq_event)(entry.channel, &mut ev_cq, &mut ctx) } == 0 {
                    // SAFETY: the CQ whose event was just read.
                    unsafe { (self.dev.lib.ack_cq_events)(ev_cq, 1) };
                    entry.armed = false;
                }
            }
        }
    }
}
