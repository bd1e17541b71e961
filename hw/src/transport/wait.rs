//! `wait`: block on the completion channels of the watched CQs and the
//! RDMA CM event channel until something is ready or the deadline passes.
//!
//! Order per round: poll (CM events, then each CQ); arm each CQ
//! (`ibv_req_notify_cq`); poll again, which closes the race of a completion
//! landing between the first poll and the arming; then `ppoll` the fds with
//! the time left, and drain and acknowledge the channel events that woke
//! us. Completions polled along the way are kept for `poll_cq`.

use rctb_core::time::Instant;
use rctb_core::transport::{CqId, Readiness, Result, Transport, Verb};

use super::VerbsTransport;
use crate::sys::{errno, os_error};

impl VerbsTransport {
    pub(super) fn wait_until(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        for &cq in cqs {
            self.cq_arc(cq, Verb::Wait)?;
        }
        loop {
            if self.ready_now(cqs)? {
                return Ok(Readiness::Ready);
            }
            // (No clock read for a wait without a deadline.)
            if deadline != Instant::FAR_FUTURE && self.now() >= deadline {
                return Ok(Readiness::TimedOut);
            }
            for &cq in cqs {
                self.cqs[&cq].cq.arm()?;
            }
            if self.ready_now(cqs)? {
                return Ok(Readiness::Ready);
            }
            if self.block(cqs, deadline)? {
                return Ok(Readiness::TimedOut);
            }
        }
    }

    /// Sleeps in `ppoll` until a watched channel fd is readable or the
    /// deadline passes, then drains the channels that fired. Returns true
    /// when there is nothing to wait for at all.
    fn block(&mut self, cqs: &[CqId], deadline: Instant) -> Result<bool> {
        let mut fds = std::mem::take(&mut self.scratch.pollfds);
        let r = self.block_on(cqs, deadline, &mut fds);
        self.scratch.pollfds = fds;
        r
    }

    /// `block` with the reused poll set `fds`.
    fn block_on(&mut self, cqs: &[CqId], deadline: Instant, fds: &mut Vec<libc::pollfd>) -> Result<bool> {
        fds.clear();
        fds.extend(cqs.iter().map(|cq| libc::pollfd { fd: self.cqs[cq].cq.fd(), events: libc::POLLIN, revents: 0 }));
        if let Some(ch) = &self.channel {
            fds.push(libc::pollfd { fd: ch.fd(), events: libc::POLLIN, revents: 0 });
        }
        if fds.is_empty() && deadline == Instant::FAR_FUTURE {
            // Nothing watched could ever wake us: give up now rather than
            // sleep forever (what the simulator does too).
            return Ok(true);
        }
        let timeout = (deadline != Instant::FAR_FUTURE).then(|| {
            let left = deadline.saturating_duration_since(self.now());
            libc::timespec {
                tv_sec: left.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: left.subsec_nanos().into(),
            }
        });
        let ts = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds; `ts` is null
        // (wait forever) or points to a live timespec; no signal mask.
        let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ts, std::ptr::null()) };
        if rc < 0 {
            return match errno() {
                libc::EINTR => Ok(false),
                e => Err(os_error(Verb::Wait, "ppoll", e)),
            };
        }
        for (cq, fd) in cqs.iter().zip(fds.iter()) {
            if fd.revents != 0 {
                self.cqs[cq].cq.drain_events()?;
            }
        }
        // CM events are read by the next round's `ready_now`.
        Ok(false)
    }
}
