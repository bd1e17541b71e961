//! A [`Driver`] with a thread of its own, for programs whose threads make
//! no call while the wire works: the target of an RDMA WRITE or READ makes
//! no verbs call at all while the data arrives, and RC timers (ACK
//! timeouts, RNR waits, CM retransmissions) must fire while every
//! application thread blocks elsewhere. This is what a NIC, or rxe in the
//! kernel, does; the verbs library (`rctb-ibverbs`) keeps one per device.
//!
//! # Contract
//!
//! - The driver and the owner's state `X` live behind one mutex
//!   ([`Progress::lock`]). The thread takes it, runs one
//!   [`State::turn`] (frames in, timers, frames out, then
//!   [`Owner::after_turn`]), lets it go, and blocks in `epoll_wait` on the
//!   sockets and a doorbell until a frame arrives, the driver's next
//!   deadline ([`Driver::next_wake`]) or the doorbell.
//! - A caller that made frames to send (a post) or changed a deadline
//!   rings the doorbell ([`Progress::ring`]) after letting the lock go, or
//!   runs [`State::turn`] itself under the lock.
//! - A caller that spins on its CQ turns the driver itself (it must not
//!   wait for the thread) and says so ([`State::note_poller`]): for a short
//!   grace the thread then waits on the doorbell and its deadlines only, not
//!   on the sockets, so the two do not fight over every frame.
//! - Dropping the [`Progress`] stops the thread and joins it.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::TransportError;
use rustix::event::{EventfdFlags, Timespec, epoll, eventfd};
use rustix::io::Errno;
use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, timerfd_create, timerfd_settime};

use crate::Driver;

/// How long after a caller last turned the driver from a poll the thread
/// stays off the sockets: long against a spinning poll (a call every
/// microsecond or so), short against the latency of a program that polls
/// its CQ only now and then (perftest's write latency test spins on the
/// buffer, and only the thread can place the peer's WRITE there).
pub const POLLER_GRACE: Duration = Duration::from_micros(20);

/// What the owner keeps beside the driver, and does after each turn.
pub trait Owner: Send + 'static {
    /// Runs under the lock after every [`State::turn`], by the thread or a
    /// caller: pass on what the engines produced (notifications of CQs,
    /// asynchronous events) to whoever waits for them.
    fn after_turn(&mut self, driver: &mut Driver);
}

/// What the lock guards: the driver and the owner's state.
#[derive(Debug)]
pub struct State<X> {
    /// The engines, sockets and clock.
    pub driver: Driver,
    /// The owner's state.
    pub owner: X,
    stop: bool,
    /// When a caller last turned the driver from a poll.
    poller_at: Option<Instant>,
    /// The first error a turn of the thread met (a socket error that is
    /// not transient); later ones are the same socket failing again.
    pub error: Option<TransportError>,
}

impl<X: Owner> State<X> {
    /// Everything that needs no waiting (see [`Driver::turn`]), then the
    /// owner's [`Owner::after_turn`].
    pub fn turn(&mut self) -> Result<(), TransportError> {
        let r = self.driver.turn();
        self.owner.after_turn(&mut self.driver);
        r
    }

    /// A caller is spinning on a poll and turns the driver itself.
    pub fn note_poller(&mut self) {
        self.poller_at = Some(self.driver.clock_now());
    }
}

struct Shared<X> {
    state: Mutex<State<X>>,
    doorbell: OwnedFd,
}

/// A driver, its owner's state, and the thread that turns them.
pub struct Progress<X: Owner> {
    shared: Arc<Shared<X>>,
    thread: Option<JoinHandle<()>>,
}

impl<X: Owner> std::fmt::Debug for Progress<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress").finish_non_exhaustive()
    }
}

impl<X: Owner> Progress<X> {
    /// Starts the thread (named `name`) over `driver` and `owner`.
    pub fn start(driver: Driver, owner: X, name: &str) -> io::Result<Self> {
        let doorbell = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        // Deadlines to the microsecond: epoll_wait's own timeout counts
        // whole milliseconds (epoll_pwait2 needs Linux 5.11).
        let timer = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC)?;
        // Two interest sets: everything, and the doorbell alone (while a
        // caller polls). A descriptor stays registered until it is closed,
        // which happens only after the thread is joined.
        let all = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let bell = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (i, fd) in driver.rx_fds().into_iter().enumerate() {
            epoll::add(&all, fd, epoll::EventData::new_u64(i as u64 + 1), epoll::EventFlags::IN)?;
        }
        for set in [&all, &bell] {
            epoll::add(set, &doorbell, epoll::EventData::new_u64(0), epoll::EventFlags::IN)?;
            epoll::add(set, &timer, epoll::EventData::new_u64(TIMER), epoll::EventFlags::IN)?;
        }
        let state = State { driver, owner, stop: false, poller_at: None, error: None };
        let shared = Arc::new(Shared { state: Mutex::new(state), doorbell });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || run(&s, &all, &bell, &timer))?;
        Ok(Progress { shared, thread: Some(thread) })
    }

    /// The driver and the owner's state. A thread that panicked while
    /// holding it left it as it was: it is taken as it is.
    pub fn lock(&self) -> MutexGuard<'_, State<X>> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the thread (call it without the lock held, or it will wait for it).
    pub fn ring(&self) {
        ring(&self.shared.doorbell);
    }
}

fn ring(doorbell: &OwnedFd) {
    // A full counter (2^64 - 2 rings unread) already wakes the thread.
    let _ = rustix::io::write(doorbell, &1u64.to_ne_bytes());
}

impl<X: Owner> Drop for Progress<X> {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.ring();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The epoll token of the timer (the doorbell's is 0, the sockets' 1..).
const TIMER: u64 = u64::MAX;

fn run<X: Owner>(shared: &Shared<X>, all: &OwnedFd, bell: &OwnedFd, timer: &OwnedFd) {
    let mut events = Vec::with_capacity(8);
    loop {
        let (wake, now, poller) = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.stop {
                return;
            }
            if let Err(e) = st.turn() {
                st.error.get_or_insert(e);
            }
            let now = st.driver.clock_now();
            let poller = st.poller_at.is_some_and(|t| now < t + POLLER_GRACE);
            (st.driver.next_wake(), now, poller)
        };
        let mut wait = wake.map(|w| w.saturating_duration_since(now));
        let set = if poller {
            wait = Some(wait.map_or(POLLER_GRACE, |w| w.min(POLLER_GRACE)));
            bell
        } else {
            all
        };
        // A deadline now: look once and go round. A later one: the timer
        // (one-shot) wakes the wait. None: only a frame or the doorbell.
        let timeout = match wait {
            Some(d) if d.is_zero() => Some(Timespec { tv_sec: 0, tv_nsec: 0 }),
            Some(d) => {
                let at = Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ };
                let spec = Itimerspec { it_interval: Timespec { tv_sec: 0, tv_nsec: 0 }, it_value: at };
                let _ = timerfd_settime(timer, TimerfdTimerFlags::empty(), &spec);
                None
            }
            None => None,
        };
        events.clear();
        match epoll::wait(set, rustix::buffer::spare_capacity(&mut events), timeout.as_ref()) {
            Ok(_) | Err(Errno::INTR) => {}
            // Not expected with descriptors the driver owns; do not spin on it.
            Err(_) => std::thread::sleep(POLLER_GRACE),
        }
        for e in &events {
            let mut count = [0u8; 8];
            match e.data.u64() {
                0 => _ = rustix::io::read(shared.doorbell.as_fd(), &mut count),
                TIMER => _ = rustix::io::read(timer, &mut count),
                _ => {}
            }
        }
    }
}
