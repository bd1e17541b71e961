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
//! - A caller that spins on its CQ turns the driver itself
//!   ([`State::poll_receive`]: it must not wait for the thread) and counts its
//!   polls ([`State::note_poller`]). The thread then leaves the sockets,
//!   the deadlines and the lock to the poller, so the two do not fight over
//!   every frame: it only looks at the count, with no lock and no turn,
//!   and takes the sockets back once the count stood still for a whole
//!   look, or the doorbell rang. It looks after [`POLLER_GRACE`] at first,
//!   and, from the second look in a row that finds the count moved, twice
//!   as late each time, up to [`POLLER_WATCH_MAX`], so a spinning program is not interrupted 50,000
//!   times a second (on a guest whose timers trap, that alone halves its
//!   throughput). Woken by a frame, the thread first looks at the count:
//!   if it moved since the last look, the frame is the caller's, and the
//!   thread watches. A poller never waits for the thread: while the thread
//!   holds the lock, a poll reports an empty CQ ([`Progress::try_lock`]).
//!   Posts count too ([`State::note_poller`]): they turn the driver.
//! - A caller about to block (`ibv_req_notify_cq`) rings the doorbell if
//!   the thread is watching ([`Progress::stop_watching`]), so the sockets
//!   are not left alone for a watch interval.
//! - Dropping the [`Progress`] stops the thread and joins it.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;

use rctb_core::time::Duration;
use rctb_core::transport::TransportError;
use rustix::event::{EventfdFlags, Timespec, epoll, eventfd};
use rustix::io::Errno;
use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, timerfd_create, timerfd_settime};

use crate::Driver;

/// The thread's first look at a poller's count of polls after it starts
/// watching: long against a spinning poll (a call every microsecond or so),
/// short against the latency of a program that polls its CQ only now and
/// then (perftest's write latency test spins on the buffer, and only the
/// thread can place the peer's WRITE there).
pub const POLLER_GRACE: Duration = Duration::from_micros(20);

/// The longest the thread waits between two looks at a caller that spins
/// on its CQ.
pub const POLLER_WATCH_MAX: Duration = Duration::from_millis(1);

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
    /// Polls that turned the driver, ever; the thread reads it without the
    /// lock.
    polls: Arc<AtomicU64>,
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

    /// A [`Driver::turn_after_advance`], then the owner's
    /// [`Owner::after_turn`]: for a post that read the clock before it.
    pub fn turn_after_advance(&mut self) -> Result<(), TransportError> {
        let r = self.driver.turn_after_advance();
        self.owner.after_turn(&mut self.driver);
        r
    }

    /// [`Driver::poll_receive`], then the owner's [`Owner::after_turn`],
    /// and the poll counted.
    pub fn poll_receive(&mut self) -> Result<usize, TransportError> {
        let r = self.driver.poll_receive();
        self.owner.after_turn(&mut self.driver);
        self.note_poller();
        r
    }

    /// [`Driver::poll_flush`].
    pub fn poll_flush(&mut self) -> Result<usize, TransportError> {
        self.driver.poll_flush()
    }

    /// A caller is spinning on a poll and turns the driver itself.
    pub fn note_poller(&mut self) {
        self.polls.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the thread did, counted (for a stats report: how a program and
/// the thread share the driver).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadCounts {
    /// Turns the thread made (each under the lock).
    pub turns: u64,
    /// Times it started watching a poller.
    pub watches: u64,
    /// Watches that ended with the count of polls standing still.
    pub watch_ends_still: u64,
    /// Watches that ended with the doorbell.
    pub watch_ends_bell: u64,
    /// Frames that woke it after the caller polled or posted (it watched).
    pub frames_left_to_poller: u64,
    /// Polls that found the lock taken and reported nothing.
    pub polls_lock_taken: u64,
}

#[derive(Debug, Default)]
struct Counters {
    turns: AtomicU64,
    watches: AtomicU64,
    watch_ends_still: AtomicU64,
    watch_ends_bell: AtomicU64,
    frames_left_to_poller: AtomicU64,
    polls_lock_taken: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Shared<X> {
    counts: Counters,
    state: Mutex<State<X>>,
    doorbell: OwnedFd,
    /// The same count as [`State::polls`].
    polls: Arc<AtomicU64>,
    /// Whether the thread watches a poller rather than the sockets.
    watching: AtomicBool,
    /// The deadline (nanoseconds of the driver's clock) a thread that
    /// waits on the sockets wakes for by itself; `u64::MAX` when it waits
    /// only for a frame or the doorbell.
    armed: AtomicU64,
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
        let polls = Arc::new(AtomicU64::new(0));
        let state = State { driver, owner, stop: false, polls: polls.clone(), error: None };
        let shared = Arc::new(Shared {
            counts: Counters::default(),
            state: Mutex::new(state),
            doorbell,
            polls,
            watching: AtomicBool::new(false),
            armed: AtomicU64::new(u64::MAX),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || run(&s, &all, &bell, &timer))?;
        Ok(Progress { shared, thread: Some(thread) })
    }

    /// The driver and the owner's state. A thread that panicked while
    /// holding it left it as it was: it is taken as it is.
    pub fn lock(&self) -> MutexGuard<'_, State<X>> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The driver and the owner's state if no other thread holds them
    /// now; `None` if one does (the thread, turning the driver: a busy
    /// poller may then report an empty poll rather than wait for it).
    pub fn try_lock(&self) -> Option<MutexGuard<'_, State<X>>> {
        match self.shared.state.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Counts a poll that found the lock taken ([`State::note_poller`]
    /// without the lock).
    pub fn note_poll_lock_taken(&self) {
        self.shared.polls.fetch_add(1, Ordering::Relaxed);
        bump(&self.shared.counts.polls_lock_taken);
    }

    /// What the thread did so far.
    pub fn thread_counts(&self) -> ThreadCounts {
        let c = &self.shared.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ThreadCounts {
            turns: get(&c.turns),
            watches: get(&c.watches),
            watch_ends_still: get(&c.watch_ends_still),
            watch_ends_bell: get(&c.watch_ends_bell),
            frames_left_to_poller: get(&c.frames_left_to_poller),
            polls_lock_taken: get(&c.polls_lock_taken),
        }
    }

    /// Wakes the thread (call it without the lock held, or it will wait for it).
    pub fn ring(&self) {
        ring(&self.shared.doorbell);
    }

    /// A caller left frames to send and may make no call soon: if the
    /// thread is not watching it (and so may sleep until its next
    /// deadline), ring it (without the lock held). A watching thread sends
    /// them at its first look that finds the caller quiet.
    pub fn nudge(&self) {
        if !self.shared.watching.load(Ordering::Relaxed) {
            self.ring();
        }
    }

    /// A caller turned the driver, and its next deadline is now `next`
    /// ([`Driver::next_wake`], read under the lock): if that is sooner
    /// than the thread, waiting on the sockets, would wake by itself, ring
    /// it (without the lock held). A post that armed an ACK timeout, or a
    /// CM call that armed a retransmission, must not wait for a frame that
    /// may never come: the program may block in a completion channel and
    /// make no call at all. A watching thread turns the driver at its next
    /// look.
    pub fn wake_for(&self, next: Option<rctb_core::time::Instant>) {
        let Some(next) = next else { return };
        if next.as_nanos() < self.shared.armed.load(Ordering::Relaxed) && !self.shared.watching.load(Ordering::Relaxed)
        {
            self.ring();
        }
    }

    /// A caller that polled is about to block: if the thread watches it,
    /// send the thread back to the sockets now (without the lock held).
    pub fn stop_watching(&self) {
        if self.shared.watching.load(Ordering::Relaxed) {
            self.ring();
        }
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
    let mut seen = shared.polls.load(Ordering::Relaxed);
    loop {
        let (wake, now) = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.stop {
                return;
            }
            if let Err(e) = st.turn() {
                st.error.get_or_insert(e);
            }
            bump(&shared.counts.turns);
            let wake = st.driver.next_wake();
            // Published under the lock: a caller that arms a sooner
            // deadline after this turn reads it after its own turn, and
            // rings (`wake_for`); one before this turn is in `wake`.
            shared.armed.store(wake.map_or(u64::MAX, |w| w.as_nanos()), Ordering::Relaxed);
            (wake, st.driver.last_now())
        };
        let polls = shared.polls.load(Ordering::Relaxed);
        if polls != seen {
            // A caller polls and turns the driver itself: watch until it stops.
            seen = watch_poller(shared, bell, timer, &mut events, polls);
            continue;
        }
        // A deadline now: look once and go round. A later one: the timer
        // (one-shot) wakes the wait. None: only a frame or the doorbell.
        // Callers that arm a sooner deadline ring (`wake_for`).
        let timeout = match wake.map(|w| w.saturating_duration_since(now)) {
            Some(d) if d.is_zero() => Some(Timespec { tv_sec: 0, tv_nsec: 0 }),
            Some(d) => {
                arm(timer, d);
                None
            }
            None => None,
        };
        let woke = wait(shared, all, timer, &mut events, timeout.as_ref());
        let polls = shared.polls.load(Ordering::Relaxed);
        // A frame, and a caller that polled or posted since the last look:
        // the frame is the caller's; watch it rather than take the lock
        // from it. (Taking the lock whenever it is free costs, on a guest
        // whose system calls trap, a turn of the thread and a context
        // switch of the caller per operation: the caller is between two
        // calls more often than in one.) A caller that now spins on its
        // memory (the target of a WRITE) stops the count, and the first
        // look hands the frame to the thread.
        if woke == Woke::Frame && polls != seen {
            bump(&shared.counts.frames_left_to_poller);
            seen = watch_poller(shared, bell, timer, &mut events, polls);
        }
    }
}

/// While a caller polls: looks at its count of polls, with no lock, and
/// returns the count once it stood still for a whole look, or the doorbell
/// rang (a post left frames, a caller is about to block, or the stop). The
/// first looks come after [`POLLER_GRACE`]; from the second in a row that
/// saw the count move, each comes twice as late, up to
/// [`POLLER_WATCH_MAX`].
fn watch_poller<X: Owner>(
    shared: &Shared<X>,
    bell: &OwnedFd,
    timer: &OwnedFd,
    events: &mut Vec<epoll::Event>,
    mut seen: u64,
) -> u64 {
    shared.watching.store(true, Ordering::Relaxed);
    bump(&shared.counts.watches);
    let mut every = POLLER_GRACE;
    let mut moved = 0;
    loop {
        arm(timer, every);
        if wait(shared, bell, timer, events, None) == Woke::Doorbell {
            bump(&shared.counts.watch_ends_bell);
            break;
        }
        let now = shared.polls.load(Ordering::Relaxed);
        if now == seen {
            bump(&shared.counts.watch_ends_still);
            break;
        }
        seen = now;
        // A program that polls in bursts (a CQ poll, then a spin on its
        // buffer) moves the count in one look and not the next: it keeps
        // looks of one grace. One that spins on its CQ moves it in every
        // look, and is looked at less and less.
        moved += 1;
        if moved >= 2 {
            every = (every * 2).min(POLLER_WATCH_MAX);
        }
    }
    shared.watching.store(false, Ordering::Relaxed);
    arm(timer, Duration::ZERO);
    seen
}

/// Sets the timer to fire once after `after` (zero: never).
fn arm(timer: &OwnedFd, after: Duration) {
    let ts = |d: Duration| Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ };
    let spec = Itimerspec { it_interval: ts(Duration::ZERO), it_value: ts(after) };
    let _ = timerfd_settime(timer, TimerfdTimerFlags::empty(), &spec);
}

/// What ended a [`wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Woke {
    /// The doorbell rang.
    Doorbell,
    /// A socket is readable (and the doorbell did not ring).
    Frame,
    /// The timer, a zero timeout, or an interruption.
    Other,
}

/// One wait on `set`; drains the doorbell and the timer.
fn wait<X: Owner>(
    shared: &Shared<X>,
    set: &OwnedFd,
    timer: &OwnedFd,
    events: &mut Vec<epoll::Event>,
    timeout: Option<&Timespec>,
) -> Woke {
    events.clear();
    match epoll::wait(set, rustix::buffer::spare_capacity(events), timeout) {
        Ok(_) | Err(Errno::INTR) => {}
        // Not expected with descriptors the driver owns; do not spin on it.
        Err(_) => std::thread::sleep(POLLER_GRACE),
    }
    let mut woke = Woke::Other;
    for e in events.iter() {
        let mut count = [0u8; 8];
        match e.data.u64() {
            0 => {
                woke = Woke::Doorbell;
                _ = rustix::io::read(shared.doorbell.as_fd(), &mut count);
            }
            TIMER => _ = rustix::io::read(timer, &mut count),
            _ if woke == Woke::Other => woke = Woke::Frame,
            _ => {}
        }
    }
    woke
}
