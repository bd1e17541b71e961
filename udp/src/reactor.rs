//! The reactor: the endpoints' RC engines (`rctb_engine::Endpoint`, one
//! per bound address) driven by the real clock and real sockets. Its core,
//! [`Driver`], is `Send` and has no handle of its own: [`UdpReactor`]
//! (crate::UdpReactor) shares one in a thread, and a program with threads
//! (the verbs library) keeps one behind a mutex with a thread of its own
//! ([`crate::progress`]).
//!
//! One [`turn`](Driver::turn) is the engine contract's loop, repeated
//! until nothing moves: read every socket (each good frame goes to its
//! endpoint's `handle_packet` at once), run the timers that fell due
//! (`handle_timeout`), then take at most [`TX_CHUNK`] frames from the
//! engines (`poll_transmit`) and send them. Received frames go before due
//! timers, as on a NIC after a busy spell and in rxe (its completer takes
//! the responses queued for a QP before it acts on a retransmit timeout):
//! an ACK that waited in a socket is never beaten by a timer that fell due
//! meanwhile, and a late timer fires once, at the present. Frames the
//! engines have not handed over stay in their QPs (no ACK timer runs for
//! them; a go-back rewinds them rather than queueing a second copy).
//!
//! Endpoints of one reactor make progress together whenever any of them
//! is called: two endpoints in one thread (a test, the conformance suite)
//! answer each other while the caller waits on either. Nothing spins: an
//! idle reactor blocks in `poll(2)` ([`block`](Driver::block)) until a
//! frame arrives or its next timer is due.
//!
//! This file holds the driver, its endpoints and the turn; `rx.rs` reads
//! the sockets and hands frames to the engines, `tx.rs` takes frames from
//! the engines and sends them, `access.rs` holds what the driver's owner
//! reads and sets (engines, counters, hooks, the capture).

mod access;
mod rx;
mod tx;

use std::io;
use std::net::SocketAddrV4;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{TransportError, Verb};
use rctb_engine::{EndpointConfig, Packet};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;

use crate::config::{PathHook, UdpConfig};
use crate::endpoint::Sockets;
use crate::error::UdpError;
use crate::pcap::PcapSink;
use crate::rng::ChildRng;
use crate::stats::{EngineStats, UdpStats};
use tx::send_datagram;

/// Frames sent per pass before the reactor reads its own sockets again, so
/// two endpoints in one thread do not overrun each other's socket buffers
/// and ACKs never wait behind a long message.
const TX_CHUNK: usize = 64;
/// A long turn reads the clock again every this many passes.
const CLOCK_EVERY_PASSES: usize = 16;
/// Frames one endpoint hands over before the next endpoint's turn in a
/// pass (a NIC's transmit pipeline commits short bursts).
const TX_BURST: usize = 16;
/// Frames read from one socket per pass.
const RX_BATCH: usize = 64;
/// Largest IPv4 packet read (a 4096-byte MTU frame is about 4.2 KB).
const RX_BUF: usize = 65536;
/// Payload buffers kept for reuse.
const POOL_MAX: usize = 1024;

/// One bound address: its RC engine and its sockets.
pub(crate) struct Endpoint {
    pub engine: rctb_engine::Endpoint,
    /// Its MAC in the capture (and in its link-local GID).
    pub mac: [u8; 6],
    pub local: SocketAddrV4,
    pub peer_port: u16,
    pub sockets: Sockets,
    pub stats: UdpStats,
    pub hook: Option<PathHook>,
    /// Datagrams encoded and not yet handed to the socket: a flush sends
    /// them with one `sendmmsg` per [`TX_BURST`].
    pub txq: Vec<Pending>,
}

/// One encoded datagram waiting for its `sendmmsg`.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The IPv4 and UDP headers (which the socket writes itself), then the
    /// UDP payload from `start`.
    buf: Vec<u8>,
    start: usize,
    to: SocketAddrV4,
}

/// The real clock of this backend (the only place it is read):
/// `CLOCK_MONOTONIC` for the engines' time, and `CLOCK_MONOTONIC_COARSE`
/// for a busy poller's question "can a timer be due yet?". The coarse clock
/// is the time of the last scheduler tick, read from the vDSO without a
/// system call on every clock source; the fine one traps where the
/// kernel's clock source has no vDSO reader (hpet, a guest under TCG).
#[derive(Debug)]
pub(crate) struct Clock {
    /// `CLOCK_MONOTONIC` at the start, in ns: the engines' time zero.
    epoch: u64,
    /// Readings of the fine clock, ever (reported in [`EngineStats`]).
    reads: std::cell::Cell<u64>,
    /// How far the coarse clock may lag the fine one (its resolution, one
    /// tick), in ns.
    coarse_lag: u64,
}

fn clock_ns(id: rustix::time::ClockId) -> u64 {
    let t = rustix::time::clock_gettime(id);
    (t.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec as u64)
}

impl Clock {
    pub fn start() -> Self {
        let res = rustix::time::clock_getres(rustix::time::ClockId::MonotonicCoarse);
        let coarse_lag = (res.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(res.tv_nsec as u64);
        Clock { epoch: clock_ns(rustix::time::ClockId::Monotonic), reads: std::cell::Cell::new(0), coarse_lag }
    }

    /// The engines' time now (`CLOCK_MONOTONIC` since the start); counted.
    pub fn now(&self) -> Instant {
        self.reads.set(self.reads.get() + 1);
        Instant::from_nanos(clock_ns(rustix::time::ClockId::Monotonic).saturating_sub(self.epoch))
    }

    /// A lower bound of [`now`](Self::now) and how far below it may be:
    /// (`CLOCK_MONOTONIC_COARSE` since the start, its resolution). The two
    /// clocks count from the same origin, and the coarse one is the fine
    /// one as of the last tick.
    pub fn coarse(&self) -> (Instant, Duration) {
        let at = clock_ns(rustix::time::ClockId::MonotonicCoarse).saturating_sub(self.epoch);
        (Instant::from_nanos(at), Duration::from_nanos(self.coarse_lag))
    }
}

/// The loop over a set of endpoints: their engines, sockets, clock,
/// delayed frames and capture. Single-threaded, but `Send`: whoever owns it
/// calls [`turn`](Self::turn) after every verb and whenever
/// [`next_wake`](Self::next_wake) comes or a socket is readable.
pub struct Driver {
    seed: u64,
    pub(crate) clock: Clock,
    /// The engines' time: the clock when last read (never goes back).
    now: Instant,
    /// Turns that read the clock, ever.
    now_reads: u64,
    pub(crate) endpoints: Vec<Endpoint>,
    /// What the engines sent and were given (their own counters apart).
    counters: EngineStats,
    /// The sent frames by kind (`counters` has the rest of the counts).
    sent: rctb_engine::SentCounts,
    pcap: Option<PcapSink>,
    /// Frames a hook delayed ([`Fate::Delay`](crate::config::Fate::Delay)), in the order held.
    delayed: Vec<Delayed>,
    pool: Vec<Vec<u8>>,
    rxbuf: Vec<u8>,
}

/// A frame a hook held back, and where it goes when its time comes.
struct Delayed {
    due: Instant,
    ep: usize,
    held: Held,
}

enum Held {
    /// Encoded, to be sent to `to`.
    Tx { to: SocketAddrV4, datagram: Vec<u8> },
    /// Checked, to be handed to the engine.
    Rx(Packet),
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("endpoints", &self.endpoints.len()).finish_non_exhaustive()
    }
}

fn os(what: &'static str, e: io::Error) -> TransportError {
    TransportError::Os { verb: Verb::Wait, what, errno: e.raw_os_error().unwrap_or(0), message: e.to_string() }
}

impl Driver {
    /// A driver with no endpoints; their keys and CM PSNs come from `seed`.
    pub fn new(seed: u64) -> Self {
        Driver {
            seed,
            clock: Clock::start(),
            now: Instant::ZERO,
            now_reads: 0,
            endpoints: Vec::new(),
            counters: EngineStats::default(),
            sent: rctb_engine::SentCounts::default(),
            pcap: None,
            delayed: Vec::new(),
            pool: Vec::new(),
            rxbuf: vec![0; RX_BUF],
        }
    }

    /// Opens the sockets of `cfg` and makes its engine; returns its index.
    pub fn add(&mut self, mut cfg: UdpConfig) -> Result<usize, UdpError> {
        let sockets = Sockets::open(&cfg)?;
        if self.endpoints.iter().any(|e| e.engine.config().name == cfg.name) {
            return Err(UdpError::InUse { field: "name", value: format!("{:?}", cfg.name) });
        }
        if self.endpoints.iter().any(|e| e.engine.ip() == cfg.ip) {
            return Err(UdpError::InUse { field: "address", value: cfg.ip.to_string() });
        }
        let index = self.endpoints.len();
        // As the simulator numbers its nodes: the same seed and name give
        // the same keys, MAC and addresses.
        let mac = [0x02, 0x00, 0x00, 0x00, (index >> 8) as u8, index as u8];
        let mut engine_cfg = EndpointConfig::new(cfg.name.clone(), cfg.ip);
        engine_cfg.mtu = cfg.mtu;
        engine_cfg.mac = mac;
        engine_cfg.va_base = 0x7f00_0000_0000 + ((index as u64) << 36);
        let rng = ChildRng::child(self.seed, &format!("node/{}", cfg.name));
        let raw_rx = sockets.raw.is_some();
        self.endpoints.push(Endpoint {
            engine: rctb_engine::Endpoint::new(engine_cfg, Box::new(rng)),
            mac,
            local: SocketAddrV4::new(cfg.ip, cfg.port),
            peer_port: cfg.peer_port,
            sockets,
            stats: UdpStats { raw_rx, ..UdpStats::default() },
            hook: cfg.hook.take(),
            txq: Vec::with_capacity(TX_BURST),
        });
        Ok(index)
    }

    /// Reads the clock into the engines' time (a verb is stamped with it);
    /// what fell due by then runs at the next [`turn`](Self::turn).
    pub fn advance(&mut self) -> Instant {
        self.now = self.now.max(self.clock.now());
        self.now
    }

    /// Everything that can be done without blocking, repeated until nothing
    /// moves (bounded): each pass reads the sockets, runs the timers that
    /// fell due, then sends at most a chunk. It reads the clock once, and
    /// again every `CLOCK_EVERY_PASSES` (16) passes of a long turn.
    pub fn turn(&mut self) -> Result<(), TransportError> {
        self.advance();
        self.passes(true)
    }

    /// A [`turn`](Self::turn) for a caller that just read the clock
    /// ([`advance`](Self::advance)) and posted: it reads it again only if a
    /// frame comes in.
    pub fn turn_after_advance(&mut self) -> Result<(), TransportError> {
        self.passes(true)
    }

    /// The receiving half of a busy poller's turn: reads the sockets (one
    /// batch each), releases delayed frames and runs the timers, and sends
    /// nothing. A poll that finds nothing reads the fine clock only when a
    /// timer or a delayed frame may be due: when the coarse clock, plus the
    /// most it can lag, has reached the earliest deadline. So no timer runs
    /// later than with a fine reading on every poll, and a program that
    /// spins while its messages are on the wire (their ACK timers far off)
    /// reads no fine clock at all: where reading it traps (a guest without
    /// a vDSO clock source) it would cost more than the poll. A frame that
    /// comes in is stamped with a fine reading. A poller hands its caller
    /// the completions first, and the ACKs those frames call for leave
    /// with its next call ([`poll_flush`](Self::poll_flush), or any turn).
    /// Returns how many frames came in.
    pub fn poll_receive(&mut self) -> Result<usize, TransportError> {
        let mut fresh = self.deadline_near();
        if fresh {
            self.advance();
            self.now_reads += 1;
        }
        let received = self.receive(&mut fresh)? + self.release_delayed()?;
        self.run_timers();
        Ok(received)
    }

    /// Whether an engine timer or a delayed frame may be due, by the
    /// coarse clock: its reading plus its resolution has reached the
    /// earliest deadline. The engines' time moves up to the coarse reading
    /// (a lower bound of the present) either way.
    fn deadline_near(&mut self) -> bool {
        let timers = self.endpoints.iter().filter_map(|e| e.engine.poll_timeout());
        let Some(next) = timers.chain(self.delayed.iter().map(|d| d.due)).min() else {
            return false;
        };
        let (coarse, lag) = self.clock.coarse();
        self.now = self.now.max(coarse);
        next <= coarse + lag
    }

    /// The sending half of a busy poller's turn: what the
    /// engines have to send, with the clock as last read.
    pub fn poll_flush(&mut self) -> Result<usize, TransportError> {
        self.flush()
    }

    /// The passes of a turn; `fresh`: the clock was read for it.
    fn passes(&mut self, mut fresh: bool) -> Result<(), TransportError> {
        if fresh {
            self.now_reads += 1;
        }
        for pass in 0..256 {
            if pass > 0 && pass % CLOCK_EVERY_PASSES == 0 {
                self.advance();
            }
            let received = self.receive(&mut fresh)? + self.release_delayed()?;
            self.run_timers();
            let sent = self.flush()?;
            if sent == 0 && received == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Blocks until a frame arrives, an engine's next timer is due, or
    /// `until`, whichever comes first (returns at once when an engine has
    /// frames to send or the time has passed).
    pub fn block(&mut self, until: Instant) -> Result<(), TransportError> {
        let now = self.clock.now();
        let wake = self.next_wake().map_or(until, |w| w.min(until));
        if wake <= now {
            return Ok(());
        }
        let timeout = (wake != Instant::FAR_FUTURE).then(|| {
            let d: Duration = wake - now;
            Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ }
        });
        let mut fds: Vec<PollFd<'_>> =
            self.endpoints.iter().map(|e| PollFd::from_borrowed_fd(e.sockets.rx_fd(), PollFlags::IN)).collect();
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(Errno::INTR) => Ok(()),
            Err(e) => Err(os("poll", e.into())),
        }
    }

    /// When [`turn`](Self::turn) has work next without a frame arriving:
    /// now when an engine has frames to hand over, else the earliest engine
    /// timer or delayed frame; `None` when nothing is pending.
    pub fn next_wake(&self) -> Option<Instant> {
        if self.endpoints.iter().any(|e| e.engine.wants_transmit() || e.engine.wants_cm_transmit()) {
            return Some(Instant::ZERO);
        }
        let timers = self.endpoints.iter().filter_map(|e| e.engine.poll_timeout());
        timers.chain(self.delayed.iter().map(|d| d.due)).min()
    }

    /// Sends or delivers the delayed frames whose time has come, in the
    /// order they were held; returns how many were delivered to an engine.
    fn release_delayed(&mut self) -> Result<usize, TransportError> {
        if self.delayed.is_empty() {
            return Ok(0);
        }
        let now = self.now;
        let mut delivered = 0;
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].due > now {
                i += 1;
                continue;
            }
            let d = self.delayed.remove(i);
            match d.held {
                Held::Tx { to, datagram } => {
                    let r = send_datagram(&mut self.endpoints[d.ep], &datagram, to);
                    self.recycle(datagram);
                    r?;
                }
                Held::Rx(pkt) => {
                    self.deliver(d.ep, &pkt);
                    self.recycle(pkt.payload);
                    delivered += 1;
                }
            }
        }
        Ok(delivered)
    }

    /// Runs every engine's timers that are due.
    fn run_timers(&mut self) {
        let now = self.now;
        for e in &mut self.endpoints {
            if e.engine.poll_timeout().is_some_and(|t| t <= now) {
                e.engine.handle_timeout(now);
            }
        }
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX {
            buf.clear();
            self.pool.push(buf);
        }
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw_os_error),
        Some(
            Errno::AGAIN | Errno::NOBUFS | Errno::CONNREFUSED | Errno::HOSTUNREACH | Errno::NETUNREACH | Errno::MSGSIZE
        )
    ) || e.kind() == io::ErrorKind::WouldBlock
}
