//! `wait`: block on the completion channels of the watched CQs and the
//! RDMA CM event channel until something is ready or the deadline passes.
//!
//! Order per round: poll each CQ (the CM channel only when the last `ppoll`
//! saw it readable); read the clock once; arm each CQ not armed already
//! (`ibv_req_notify_cq`); poll again, which closes the race of a completion
//! landing between the first poll and the arming; then `ppoll` the CQ
//! channels and the CM channel together, with the time left by that one
//! clock reading, and read the channel events that woke us. Completions
//! polled along the way are kept for `poll_cq`.
//!
//! System calls, which is what a wait costs on a guest whose clock and
//! doorbells trap: none when a CQ already has a completion; otherwise one
//! clock read, one `ibv_req_notify_cq` per CQ whose last event was read
//! (a `write` to the uverbs file on rxe, a doorbell in user space on
//! mlx5), the `ppoll`, and one `read` per channel that fired. A CQ stays
//! armed until its event is read, so it is never armed twice for one
//! event, and each channel holds at most one event. The CM channel costs
//! nothing until its fd is readable: a disconnect wakes the `ppoll` like a
//! completion does. A wait that reaches its deadline without a `ppoll`
//! reads the CM channel once, so a zero-length wait still sees CM events.

use rctb_core::time::Instant;
use rctb_core::transport::{CqId, Readiness, Result, Transport, Verb};

use super::{CmChannelState, VerbsTransport};
use crate::sys::{errno, os_error};

/// What one `ppoll` ended with.
enum Woke {
    /// A channel fired (or a signal interrupted): look again.
    Again,
    /// The time left ran out: the deadline has passed.
    TimedOut,
    /// Nothing watched could ever wake us.
    Nothing,
}

impl VerbsTransport {
    pub(super) fn wait_until(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        for &cq in cqs {
            self.cq_arc(cq, Verb::Wait)?;
        }
        // What an earlier `ppoll` saw of the CM channel is stale now.
        if self.cm_channel == CmChannelState::SeenEmpty {
            self.cm_channel = CmChannelState::Unknown;
        }
        loop {
            if self.ready_now(cqs)? {
                return Ok(Readiness::Ready);
            }
            // One clock read per round, none for a wait without a deadline.
            let now = (deadline != Instant::FAR_FUTURE).then(|| self.now());
            if now.is_some_and(|now| now >= deadline) {
                // No `ppoll` of this round watched the CM channel: look at
                // it here, so that a wait whose deadline has passed (a
                // "look now", as `Driven` makes one every turn of its UDP
                // reactor) still reports a CM event, as it did before the
                // channel was read only when seen readable.
                self.pump_cm();
                return Ok(if self.cm_events.is_empty() { Readiness::TimedOut } else { Readiness::Ready });
            }
            for &cq in cqs {
                let entry = self.cqs.get_mut(&cq).expect("checked above");
                if !entry.armed {
                    entry.cq.arm()?;
                    entry.armed = true;
                }
            }
            if self.ready_now(cqs)? {
                return Ok(Readiness::Ready);
            }
            match self.block(cqs, deadline, now)? {
                Woke::Again => {}
                Woke::TimedOut | Woke::Nothing => return Ok(Readiness::TimedOut),
            }
        }
    }

    /// Sleeps in `ppoll` until a watched channel fd is readable or the
    /// deadline passes (`now`: the clock as read this round), then reads
    /// the CQ events that woke us and notes what it saw of the CM channel.
    fn block(&mut self, cqs: &[CqId], deadline: Instant, now: Option<Instant>) -> Result<Woke> {
        let mut fds = std::mem::take(&mut self.scratch.pollfds);
        let r = self.block_on(cqs, deadline, now, &mut fds);
        self.scratch.pollfds = fds;
        r
    }

    /// `block` with the reused poll set `fds`.
    fn block_on(
        &mut self,
        cqs: &[CqId],
        deadline: Instant,
        now: Option<Instant>,
        fds: &mut Vec<libc::pollfd>,
    ) -> Result<Woke> {
        fds.clear();
        fds.extend(cqs.iter().map(|cq| libc::pollfd { fd: self.cqs[cq].cq.fd(), events: libc::POLLIN, revents: 0 }));
        let cm = self.channel.as_ref().map(|ch| ch.fd());
        if let Some(fd) = cm {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        if fds.is_empty() && deadline == Instant::FAR_FUTURE {
            // Nothing watched could ever wake us: give up now rather than
            // sleep forever (what the simulator does too).
            return Ok(Woke::Nothing);
        }
        // The time left counts from the round's clock reading, taken before
        // the arming: the sleep ends a little after the deadline, never
        // before it (ppoll sleeps at least its timeout, on CLOCK_MONOTONIC,
        // the clock `now` reads).
        let timeout = now.map(|now| {
            let left = deadline.saturating_duration_since(now);
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
                libc::EINTR => Ok(Woke::Again),
                e => Err(os_error(Verb::Wait, "ppoll", e)),
            };
        }
        if rc == 0 {
            // A wait that times out leaves the CM channel to `cm_poll`: a
            // caller's last look, at its deadline, reads it.
            self.cm_channel = CmChannelState::Unknown;
            return Ok(Woke::TimedOut);
        }
        if cm.is_some() {
            let seen = fds.last().expect("the CM channel was pushed last").revents;
            // Read by the next round's `ready_now` (readable), or trusted
            // by the `cm_poll` that follows this wait (empty: a CQ woke it).
            self.cm_channel = if seen != 0 { CmChannelState::Readable } else { CmChannelState::SeenEmpty };
        }
        for (cq, fd) in cqs.iter().zip(fds.iter()) {
            if fd.revents != 0 {
                let entry = self.cqs.get_mut(cq).expect("checked by wait_until");
                if entry.cq.take_event()? {
                    entry.armed = false;
                }
            }
        }
        Ok(Woke::Again)
    }
}
