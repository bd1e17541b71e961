//! The reactor: a simulator world in external mode, driven by the real
//! clock and real sockets.
//!
//! The RC engine, the nodes' verbs resources, their timers and event queue
//! are the simulator's own (`rctb_sim::Sim`); here its clock is set from
//! `std::time::Instant` before every step, the frames its nodes transmit
//! go out on each endpoint's UDP socket, and frames that arrive are checked
//! and injected. Endpoints made by one reactor share its world and make
//! progress together whenever any of them is called: two endpoints in one
//! thread (a test, the conformance suite) answer each other while the
//! caller waits on either. Nothing spins: an idle reactor blocks in
//! `poll(2)` until a frame arrives or its next timer is due.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddrV4;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{TransportError, Verb};
use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_sim::{NodeConfig, NodeId, Packet, Sim};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;

use crate::config::{Dir, Fate, PathHook, UdpConfig};
use crate::endpoint::Sockets;
use crate::stats::UdpStats;
use crate::wire::{self, HEADERS_LEN, RxDrop};

/// Frames sent before the reactor reads its own sockets again, so two
/// endpoints in one thread do not overrun each other's socket buffers and
/// ACKs never wait behind a long message. The world hands over at most
/// [`rctb_sim::EXTERNAL_BACKLOG`] frames per turn.
const TX_CHUNK: usize = 64;
/// Frames read from one socket per pass.
const RX_BATCH: usize = 64;
/// Largest IPv4 packet read (a 4096-byte MTU frame is about 4.2 KB).
const RX_BUF: usize = 65536;

pub(crate) struct Endpoint {
    pub node: NodeId,
    pub local: SocketAddrV4,
    pub peer_port: u16,
    pub sockets: Sockets,
    pub stats: UdpStats,
    pub hook: Option<PathHook>,
}

/// The real clock of this backend (the only place it is read).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    #[allow(clippy::disallowed_methods)] // the udp backend's clock is real time, by design
    pub fn start() -> Self {
        Clock { epoch: std::time::Instant::now() }
    }

    pub fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

pub(crate) struct Reactor {
    pub sim: Sim,
    pub clock: Clock,
    pub endpoints: Vec<Endpoint>,
    /// Frames the world transmitted that are not on a socket yet.
    outbox: VecDeque<Packet>,
    taken: Vec<Packet>,
    /// Frames read from the sockets, for the world's next turn.
    arrived: Vec<Packet>,
    txbuf: Vec<u8>,
    rxbuf: Vec<u8>,
}

fn os(what: &'static str, e: io::Error) -> TransportError {
    TransportError::Os { verb: Verb::Wait, what, errno: e.raw_os_error().unwrap_or(0), message: e.to_string() }
}

impl Reactor {
    pub fn new(seed: u64) -> Self {
        let sim = Sim::new(seed);
        sim.set_external(true);
        Reactor {
            sim,
            clock: Clock::start(),
            endpoints: Vec::new(),
            outbox: VecDeque::new(),
            taken: Vec::new(),
            arrived: Vec::new(),
            txbuf: Vec::with_capacity(RX_BUF),
            rxbuf: vec![0; RX_BUF],
        }
    }

    pub fn add(&mut self, mut cfg: UdpConfig) -> Result<usize, crate::UdpError> {
        let sockets = Sockets::open(&cfg)?;
        let mut node = NodeConfig::new(cfg.name.clone(), cfg.ip);
        node.mtu = cfg.mtu;
        // The socket paces the frames; the world adds no serialization delay.
        node.bandwidth_bps = 0;
        let node = self.sim.add_node(node)?;
        self.endpoints.push(Endpoint {
            node,
            local: SocketAddrV4::new(cfg.ip, cfg.port),
            peer_port: cfg.peer_port,
            sockets,
            stats: UdpStats { raw_rx: false, ..UdpStats::default() },
            hook: cfg.hook.take(),
        });
        let ep = self.endpoints.len() - 1;
        self.endpoints[ep].stats.raw_rx = self.endpoints[ep].sockets.raw.is_some();
        Ok(ep)
    }

    /// Brings the world's clock to the present (a verb is stamped with
    /// it); what fell due runs at the next [`turn`](Self::turn).
    pub fn advance(&mut self) {
        self.sim.advance_clock(self.clock.now());
    }

    /// Everything that can be done without blocking, repeated until nothing
    /// moves (bounded). Each pass reads the sockets first, then lets the
    /// world take those frames before the timers that fell due meanwhile
    /// (`Sim::external_turn`: a reactor that was busy or descheduled must
    /// not time out on ACKs that wait in its socket, and a late timer fires
    /// once), then sends at most a chunk.
    pub fn turn(&mut self) -> Result<(), TransportError> {
        for _ in 0..256 {
            let received = self.receive()?;
            self.sim.external_turn(self.clock.now(), &mut self.arrived, &mut self.taken);
            self.outbox.extend(self.taken.drain(..));
            let sent = self.flush()?;
            if sent == 0 && received == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Whether frames are waiting to be sent.
    pub fn pending_tx(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Blocks until a frame arrives, the world's next event is due, or
    /// `until`, whichever comes first (returns at once when frames wait to
    /// be sent or the time has passed).
    pub fn block(&mut self, until: Instant) -> Result<(), TransportError> {
        if self.pending_tx() {
            return Ok(());
        }
        let now = self.clock.now();
        let wake = self.sim.next_event_at().map_or(until, |t| t.min(until));
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

    /// Sends up to [`TX_CHUNK`] waiting frames; returns how many.
    fn flush(&mut self) -> Result<usize, TransportError> {
        let mut n = 0;
        while n < TX_CHUNK {
            let Some(pkt) = self.outbox.pop_front() else { break };
            n += 1;
            let r = send_one(&mut self.endpoints, &mut self.txbuf, &pkt);
            self.sim.recycle(pkt.payload);
            r?;
        }
        Ok(n)
    }

    /// Reads what the sockets hold (bounded per socket) into `arrived`;
    /// returns how many frames were read.
    fn receive(&mut self) -> Result<usize, TransportError> {
        let mut total = 0;
        for i in 0..self.endpoints.len() {
            for _ in 0..RX_BATCH {
                let ep = &mut self.endpoints[i];
                let got = match &ep.sockets.raw {
                    Some(raw) => match rustix::net::recv(raw, &mut self.rxbuf[..], rustix::net::RecvFlags::empty()) {
                        Ok((n, _)) => Some(n),
                        Err(Errno::AGAIN) | Err(Errno::INTR) => None,
                        Err(e) => return Err(os("recv (raw)", e.into())),
                    },
                    None => match ep.sockets.udp.recv_from(&mut self.rxbuf[HEADERS_LEN..]) {
                        Ok((n, std::net::SocketAddr::V4(src))) => {
                            let mut hdr = [0u8; HEADERS_LEN];
                            wire::synth_headers(&mut hdr, src, ep.local, n);
                            self.rxbuf[..HEADERS_LEN].copy_from_slice(&hdr);
                            Some(HEADERS_LEN + n)
                        }
                        Ok(_) => Some(0),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                        Err(e) if is_transient(&e) => Some(0),
                        Err(e) => return Err(os("recvfrom", e)),
                    },
                };
                let Some(n) = got else { break };
                total += 1;
                self.handle_rx(i, n);
            }
        }
        Ok(total)
    }

    fn handle_rx(&mut self, i: usize, n: usize) {
        let payload = self.sim.buffer();
        let ep = &mut self.endpoints[i];
        let n = n.min(self.rxbuf.len());
        match wire::decode(&mut self.rxbuf[..n], *ep.local.ip(), ep.local.port(), payload) {
            Ok(pkt) => {
                ep.stats.rx_frames += 1;
                ep.stats.rx_bytes += n.saturating_sub(HEADERS_LEN) as u64;
                if let Some(aeth) = pkt.aeth.filter(|_| pkt.bth.opcode == Opcode::ACKNOWLEDGE) {
                    match aeth.kind() {
                        AckKind::Ack { .. } => ep.stats.rx_acks += 1,
                        AckKind::RnrNak { .. } => ep.stats.rx_naks_rnr += 1,
                        AckKind::Nak(NakCode::PsnSequenceError) => ep.stats.rx_naks_seq += 1,
                        _ => ep.stats.rx_naks_other += 1,
                    }
                }
                let fate = ep.hook.as_mut().map_or(Fate::Pass, |hook| hook(Dir::Rx, &pkt));
                if fate == Fate::Drop {
                    ep.stats.rx_dropped += 1;
                    self.sim.recycle(pkt.payload);
                    return;
                }
                if fate == Fate::Duplicate {
                    ep.stats.rx_duplicated += 1;
                    self.arrived.push(pkt.clone());
                }
                self.arrived.push(pkt);
            }
            Err((why, payload)) => {
                match why {
                    RxDrop::NotForUs => ep.stats.rx_foreign += 1,
                    RxDrop::BadIcrc { .. } => ep.stats.rx_bad_icrc += 1,
                    RxDrop::Malformed(_) => ep.stats.rx_malformed += 1,
                    RxDrop::Unsupported(_) => ep.stats.rx_unsupported += 1,
                }
                self.sim.recycle(payload);
            }
        }
    }
}

fn send_one(endpoints: &mut [Endpoint], buf: &mut Vec<u8>, pkt: &Packet) -> Result<(), TransportError> {
    let Some(ep) = endpoints.iter_mut().find(|e| *e.local.ip() == pkt.src_ip) else {
        return Ok(());
    };
    let fate = ep.hook.as_mut().map_or(Fate::Pass, |hook| hook(Dir::Tx, pkt));
    if fate == Fate::Drop {
        ep.stats.tx_dropped += 1;
        return Ok(());
    }
    let Ok(start) = wire::encode(pkt, ep.local.port(), ep.peer_port, buf) else {
        ep.stats.tx_errors += 1;
        return Ok(());
    };
    let to = SocketAddrV4::new(pkt.dst_ip, ep.peer_port);
    let datagram = &buf[start..];
    let copies = if fate == Fate::Duplicate { 2 } else { 1 };
    ep.stats.tx_duplicated += copies - 1;
    for _ in 0..copies {
        match ep.sockets.udp.send_to(datagram, to) {
            Ok(_) => {
                ep.stats.tx_frames += 1;
                ep.stats.tx_bytes += datagram.len() as u64;
            }
            // A full socket buffer, no route, an ICMP error from an earlier
            // datagram: the frame is lost, and RC recovers as from any loss.
            Err(e) if is_transient(&e) => ep.stats.tx_errors += 1,
            Err(e) => return Err(os("sendto", e)),
        }
    }
    Ok(())
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw_os_error),
        Some(
            Errno::AGAIN | Errno::NOBUFS | Errno::CONNREFUSED | Errno::HOSTUNREACH | Errno::NETUNREACH | Errno::MSGSIZE
        )
    ) || e.kind() == io::ErrorKind::WouldBlock
}
