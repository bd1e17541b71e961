//! How an application loop waits for completions: spin, sleep, or spin a
//! while and then sleep. One [`Poller`] is the policy every rctb loop uses
//! (`roce-rx`'s receive loop, `fpga-emu`'s send loop, the NVMe initiator),
//! so the three modes mean the same thing everywhere.
//!
//! The policy counts empty polls, never time: the clock is read (through
//! [`Transport::now`], by the caller's deadline closure) only when the
//! poller is about to sleep, never per operation.

use std::fmt;
use std::str::FromStr;

use super::{CqId, InvalidValue, Readiness, Result, Transport};
use crate::time::Instant;

/// Empty polls [`PollMode::Adaptive`] spins through before it sleeps, by
/// default: about what a few microseconds of polling cost on a host CPU,
/// far below one interrupt's worth of latency on a TCG guest.
pub const DEFAULT_SPIN: u32 = 2048;

/// How a loop waits when a poll of its completion queues found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PollMode {
    /// Poll again at once (a whole CPU; what perftest does).
    Busy,
    /// Poll up to `spin` times in a row without finding anything, then arm
    /// the CQs and sleep on their completion channels
    /// ([`Transport::wait`]); back to spinning once something arrives.
    Adaptive {
        /// Consecutive empty polls before sleeping (>= 1).
        spin: u32,
    },
    /// Sleep on the completion channels after every empty poll
    /// ([`Transport::wait`]: arm the CQs, sleep until an event).
    Event,
}

impl Default for PollMode {
    /// [`PollMode::Event`], what the loops did before the modes existed.
    fn default() -> Self {
        PollMode::Event
    }
}

impl PollMode {
    /// The mode a command line names: `busy`, `adaptive` (with `spin`
    /// empty polls before sleeping) or `event`. `spin` must be >= 1
    /// (an [`InvalidValue`] naming `spin` otherwise); it is ignored by the
    /// other modes.
    pub fn from_name(name: PollModeName, spin: u32) -> std::result::Result<Self, InvalidValue> {
        match name {
            PollModeName::Busy => Ok(PollMode::Busy),
            PollModeName::Event => Ok(PollMode::Event),
            PollModeName::Adaptive if spin == 0 => {
                Err(InvalidValue::new("spin", 0, "adaptive polling spins at least one empty poll (>= 1)"))
            }
            PollModeName::Adaptive => Ok(PollMode::Adaptive { spin }),
        }
    }
}

/// A [`PollMode`] without its parameter, as a command line spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PollModeName {
    /// `busy`.
    Busy,
    /// `adaptive`.
    Adaptive,
    /// `event` (the default).
    #[default]
    Event,
}

impl fmt::Display for PollModeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PollModeName::Busy => "busy",
            PollModeName::Adaptive => "adaptive",
            PollModeName::Event => "event",
        })
    }
}

impl FromStr for PollModeName {
    type Err = InvalidValue;
    fn from_str(s: &str) -> std::result::Result<Self, InvalidValue> {
        match s {
            "busy" => Ok(PollModeName::Busy),
            "adaptive" => Ok(PollModeName::Adaptive),
            "event" => Ok(PollModeName::Event),
            // The name is not a number and its length breaks no rule: 0, as
            // `InvalidValue` says for such values; the caller quotes the text.
            _ => Err(InvalidValue::new("poll", 0, "not a polling mode: must be busy, adaptive or event")),
        }
    }
}

/// What [`Poller::idle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    /// Returned at once: poll again.
    Spun,
    /// Slept in [`Transport::wait`], which returned this.
    Slept(Readiness),
}

/// The waiting policy of one loop: call [`progress`](Self::progress) when
/// a poll found work and [`idle`](Self::idle) when it found none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Poller {
    mode: PollMode,
    /// Consecutive empty polls since the last progress or sleep.
    empty: u32,
    /// Times `idle` slept (for reports and tests).
    sleeps: u64,
}

impl Poller {
    /// A poller in `mode`.
    pub fn new(mode: PollMode) -> Self {
        Poller { mode, empty: 0, sleeps: 0 }
    }

    /// The mode.
    pub fn mode(&self) -> PollMode {
        self.mode
    }

    /// How many times [`idle`](Self::idle) slept so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }

    /// A poll found work: an adaptive poller starts spinning afresh.
    #[inline]
    pub fn progress(&mut self) {
        self.empty = 0;
    }

    /// A poll found nothing. Busy: returns at once. Event: sleeps in
    /// `t.wait(cqs, deadline(t))`. Adaptive: returns at once until `spin`
    /// empty polls in a row, then sleeps like event. `deadline` is called
    /// (and so the clock read) only when about to sleep.
    #[inline]
    pub fn idle<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        cqs: &[CqId],
        deadline: impl FnOnce(&T) -> Instant,
    ) -> Result<Idle> {
        match self.mode {
            PollMode::Busy => return Ok(Idle::Spun),
            PollMode::Adaptive { spin } => {
                self.empty += 1;
                if self.empty < spin {
                    return Ok(Idle::Spun);
                }
                self.empty = 0;
            }
            PollMode::Event => {}
        }
        self.sleeps += 1;
        let until = deadline(t);
        t.wait(cqs, until).map(Idle::Slept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MockTransport;

    fn idle_n(p: &mut Poller, t: &mut MockTransport, n: usize) -> Vec<Idle> {
        (0..n).map(|_| p.idle(t, &[CqId(1)], |_| Instant::from_nanos(5)).unwrap()).collect()
    }

    #[test]
    fn busy_never_waits() {
        let mut t = MockTransport::new();
        t.expect_wait().never();
        let mut p = Poller::new(PollMode::Busy);
        assert!(idle_n(&mut p, &mut t, 100).iter().all(|&i| i == Idle::Spun));
        assert_eq!(p.sleeps(), 0);
    }

    #[test]
    fn event_waits_every_time_with_the_deadline() {
        let mut t = MockTransport::new();
        t.expect_wait()
            .withf(|cqs, d| cqs == [CqId(1)] && *d == Instant::from_nanos(5))
            .times(3)
            .returning(|_, _| Ok(Readiness::Ready));
        let mut p = Poller::new(PollMode::Event);
        assert_eq!(idle_n(&mut p, &mut t, 3), vec![Idle::Slept(Readiness::Ready); 3]);
        assert_eq!(p.sleeps(), 3);
    }

    #[test]
    fn adaptive_sleeps_after_spin_empty_polls_and_restarts_on_progress() {
        let mut t = MockTransport::new();
        t.expect_wait().times(2).returning(|_, _| Ok(Readiness::TimedOut));
        let mut p = Poller::new(PollMode::Adaptive { spin: 4 });
        let r = idle_n(&mut p, &mut t, 3);
        assert!(r.iter().all(|&i| i == Idle::Spun));
        p.progress();
        // The count restarted: three more spins, then the fourth sleeps.
        let r = idle_n(&mut p, &mut t, 4);
        assert_eq!(r[..3], [Idle::Spun; 3]);
        assert_eq!(r[3], Idle::Slept(Readiness::TimedOut));
        // After a sleep it spins again before the next one.
        let r = idle_n(&mut p, &mut t, 4);
        assert_eq!(r[3], Idle::Slept(Readiness::TimedOut));
        assert_eq!(p.sleeps(), 2);
    }

    #[test]
    fn the_deadline_closure_runs_only_before_sleeping() {
        let mut t = MockTransport::new();
        t.expect_wait().never();
        let mut p = Poller::new(PollMode::Adaptive { spin: 10 });
        for _ in 0..9 {
            p.idle(&mut t, &[], |_| panic!("read the clock while spinning")).unwrap();
        }
    }

    #[test]
    fn names_parse_and_adaptive_needs_a_spin() {
        assert_eq!("busy".parse::<PollModeName>().unwrap(), PollModeName::Busy);
        assert_eq!("adaptive".parse::<PollModeName>().unwrap(), PollModeName::Adaptive);
        assert_eq!("event".parse::<PollModeName>().unwrap(), PollModeName::Event);
        let e = "spin".parse::<PollModeName>().unwrap_err();
        assert_eq!((e.field, e.value), ("poll", 0), "the field named, no made-up number: {e}");
        assert!(e.rule.contains("busy, adaptive or event"), "{e}");
        assert_eq!("Adaptive".parse::<PollModeName>().unwrap_err(), e, "case counts; the length is no value");
        assert_eq!(PollMode::from_name(PollModeName::Adaptive, 0).unwrap_err().field, "spin");
        assert_eq!(PollMode::from_name(PollModeName::Adaptive, 7).unwrap(), PollMode::Adaptive { spin: 7 });
        assert_eq!(PollMode::from_name(PollModeName::Busy, 0).unwrap(), PollMode::Busy);
        assert_eq!(PollMode::default(), PollMode::Event);
    }
}
