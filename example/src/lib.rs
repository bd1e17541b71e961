//! rc-pingpong: an RC round-trip latency tool in the manner of
//! `ibv_rc_pingpong`, written once against [`rctb_core::Transport`], so it
//! runs on rctb's simulator in `cargo test`, on a UDP socket as a real
//! RoCEv2 peer, and on rxe or a ConnectX through verbs. It is the worked
//! example of rctb's guide (`docs/guide.md`), which reads this file top
//! to bottom.
//!
//! Two roles: [`Echo`], a server that sends every message it receives
//! straight back, and [`Pinger`], a client that sends pings one at a time
//! and times each echo. Each has a non-blocking step ([`Echo::step`],
//! [`Pinger::step`]); [`Pinger::run`] is the blocking helper on top.
//!
//! ```
//! use rc_pingpong::{Echo, Pinger, PORT};
//! use rctb_core::time::Duration;
//! use rctb_sim::{NodeConfig, Sim, SimTransport};
//!
//! let sim = Sim::new(1);
//! let client = sim.add_node(NodeConfig::new("client", "10.0.0.1".parse().unwrap())).unwrap();
//! let server = sim.add_node(NodeConfig::new("server", "10.0.0.2".parse().unwrap())).unwrap();
//! let mut echo = Echo::default();
//! sim.add_actor(server, Box::new(move |t: &mut SimTransport| echo.step(t).expect("echo")));
//! let mut pinger = Pinger::new(std::net::SocketAddrV4::new("10.0.0.2".parse().unwrap(), PORT), 10);
//! let rtts = pinger.run(&mut sim.transport(client), Duration::from_secs(1)).unwrap();
//! assert_eq!(rtts.len(), 10);
//! ```

#![warn(missing_docs)]

use std::net::SocketAddrV4;

use rctb_core::Transport;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;

/// The echo server's CM port.
pub const PORT: u16 = 7471;
/// Bytes per ping.
pub const MSG: u32 = 64;
/// Receives the server keeps posted.
const DEPTH: u32 = 4;
/// wr_id of a SEND (the low bits: the buffer slot).
const SEND: u64 = 1 << 32;

/// What can go wrong, typed: the caller decides what to do about it.
#[derive(Debug, PartialEq, Eq)]
pub enum PingError {
    /// A verb refused (local misuse, or resources).
    Transport(TransportError),
    /// A work request completed in error (the peer, or the fabric).
    Completion(WcStatus),
    /// The server said no.
    Rejected,
    /// Nothing answered the connect.
    Unreachable(UnreachableReason),
    /// The connection went away mid-run.
    Disconnected,
    /// An echo came back different from its ping.
    Corrupt {
        /// The ping's number (0-based).
        seq: u64,
    },
    /// The blocking helper ran out of time.
    Timeout,
}

impl From<TransportError> for PingError {
    fn from(e: TransportError) -> Self {
        PingError::Transport(e)
    }
}

/// The echo server: accepts one client at a time and sends every message
/// it receives straight back from the buffer it landed in.
/// [`Echo::step`] never blocks; run it whenever something may have happened.
#[derive(Debug, Default)]
pub struct Echo {
    res: Option<(PdId, CqId, MrInfo, ListenId)>,
    conn: Option<(ConnId, QpId)>,
    wcs: Vec<Completion>,
    /// Messages sent back.
    pub echoed: u64,
}

impl Echo {
    /// The CQ to wait on between steps, once there is one.
    pub fn cq(&self) -> Option<CqId> {
        self.res.map(|(_, cq, _, _)| cq)
    }

    /// Handles CM events and completions; says when it next wants to run
    /// (never by itself: only when something happens).
    pub fn step<T: Transport>(&mut self, t: &mut T) -> Result<Option<Instant>, PingError> {
        let (pd, cq, mr, _) = match self.res {
            Some(r) => r,
            None => {
                let pd = t.alloc_pd()?;
                let cq = t.create_cq(2 * DEPTH)?;
                let mr = t.reg_mr(pd, (DEPTH * MSG) as u64, Access::LOCAL_WRITE)?;
                let listener = t.cm_listen(PORT)?;
                *self.res.insert((pd, cq, mr, listener))
            }
        };
        while let Some(event) = t.cm_poll() {
            match event {
                CmEvent::ConnectRequest { conn, .. } if self.conn.is_some() => t.cm_reject(conn, b"busy")?,
                CmEvent::ConnectRequest { conn, .. } => {
                    let init =
                        QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false, srq: None };
                    let qp = t.cm_accept(conn, &AcceptParams::new(init, Vec::new()))?;
                    for slot in 0..DEPTH as u64 {
                        post_slot(t, qp, mr, slot)?;
                    }
                    self.conn = Some((conn, qp));
                }
                CmEvent::Disconnected { conn } if self.conn.is_some_and(|(c, _)| c == conn) => {
                    let (_, qp) = self.conn.take().expect("checked");
                    t.destroy_qp(qp)?;
                    t.cm_destroy(conn)?;
                }
                _ => {}
            }
        }
        self.wcs.clear();
        t.poll_cq(cq, 16, &mut self.wcs)?;
        for wc in std::mem::take(&mut self.wcs) {
            let Some((_, qp)) = self.conn.filter(|&(_, qp)| qp == wc.qp) else { continue };
            if wc.status != WcStatus::Success {
                continue; // Flushed at a disconnect: the CM event cleans up.
            }
            let slot = wc.wr_id & (SEND - 1);
            if wc.wr_id & SEND == 0 {
                let sge = [Sge::new(mr.id, slot * MSG as u64, wc.byte_len)];
                t.post_send(qp, &SendWr::new(SEND | slot, SendOp::Send, &sge))?;
                self.echoed += 1;
            } else {
                post_slot(t, qp, mr, slot)?; // The echo left: the slot takes the next ping.
            }
        }
        Ok(None)
    }
}

fn post_slot<T: Transport>(t: &mut T, qp: QpId, mr: MrInfo, slot: u64) -> Result<(), PingError> {
    let sge = [Sge::new(mr.id, slot * MSG as u64, MSG)];
    Ok(t.post_recv(qp, &RecvWr::new(slot, &sge))?)
}

/// The client: connects, then sends `count` pings one at a time and
/// checks each echo. [`Pinger::step`] is the non-blocking step;
/// [`Pinger::run`] the blocking helper on top of it.
#[derive(Debug)]
pub struct Pinger {
    server: SocketAddrV4,
    count: u64,
    state: State,
    wcs: Vec<Completion>,
    /// The round trip of each ping, in the transport's time.
    pub rtts: Vec<Duration>,
}

#[derive(Debug)]
enum State {
    Start,
    Connecting { res: Resources },
    Pinging { res: Resources, seq: u64, sent_at: Instant, got_send: bool, got_echo: bool },
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Resources {
    pd: PdId,
    cq: CqId,
    mr: MrInfo,
    conn: ConnId,
    qp: QpId,
}

/// The bytes of ping `seq`: a tag, its number, then a pattern of it.
///
/// The tag comes first so that no SEND payload begins like an IPoIB
/// header (an EtherType and two zero bytes): Wireshark's InfiniBand
/// dissector would decode such a payload as that EtherType's protocol, and
/// a small number first (ping 6: `06 00 00 00`) reads as XNS IDP.
pub fn ping_bytes(seq: u64) -> Vec<u8> {
    let mut b = b"rcpp".to_vec();
    b.extend(seq.to_le_bytes());
    b.extend((12..MSG as u64).map(|i| (seq.wrapping_mul(31) ^ i) as u8));
    b
}

impl Pinger {
    /// A client for the echo server at `server` that will send `count` pings.
    pub fn new(server: SocketAddrV4, count: u64) -> Pinger {
        Pinger { server, count, state: State::Start, wcs: Vec::new(), rtts: Vec::new() }
    }

    /// The CQ to wait on between steps, once there is one.
    pub fn cq(&self) -> Option<CqId> {
        match &self.state {
            State::Connecting { res } | State::Pinging { res, .. } => Some(res.cq),
            State::Start | State::Done => None,
        }
    }

    /// Does what can be done now; `Ok(true)` once every ping came back.
    pub fn step<T: Transport>(&mut self, t: &mut T) -> Result<bool, PingError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Start => {
                let pd = t.alloc_pd()?;
                let cq = t.create_cq(8)?;
                // One buffer for the ping, one for its echo.
                let mr = t.reg_mr(pd, 2 * MSG as u64, Access::LOCAL_WRITE)?;
                let init =
                    QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: true, srq: None };
                // Six transport retries, not rdma_cm's usual 7: rxe never spends
                // a retry count of 7, and a dead peer must end the run with
                // RETRY_EXC_ERR rather than keep it retrying forever.
                let mut params = ConnectParams::new(self.server, init, Vec::new());
                params.retry_count = 6;
                let (conn, qp) = t.cm_connect(&params)?;
                self.state = State::Connecting { res: Resources { pd, cq, mr, conn, qp } };
                self.step(t)
            }
            State::Connecting { res } => match t.cm_poll() {
                Some(CmEvent::Established { .. }) => self.send(t, res, 0),
                Some(CmEvent::Rejected { .. }) => Err(PingError::Rejected),
                Some(CmEvent::Unreachable { reason, .. }) => Err(PingError::Unreachable(reason)),
                Some(_) => Err(PingError::Disconnected),
                None => {
                    self.state = State::Connecting { res };
                    Ok(false)
                }
            },
            State::Pinging { res, seq, sent_at, mut got_send, mut got_echo } => {
                if let Some(CmEvent::Disconnected { .. }) = t.cm_poll() {
                    return Err(PingError::Disconnected);
                }
                self.wcs.clear();
                t.poll_cq(res.cq, 4, &mut self.wcs)?;
                for wc in &self.wcs {
                    if wc.status != WcStatus::Success {
                        return Err(PingError::Completion(wc.status));
                    }
                    got_send |= wc.opcode == WcOpcode::Send;
                    got_echo |= wc.opcode == WcOpcode::Recv;
                }
                if !(got_send && got_echo) {
                    self.state = State::Pinging { res, seq, sent_at, got_send, got_echo };
                    return Ok(false);
                }
                let mut echo = vec![0u8; MSG as usize];
                t.mr_read(res.mr.id, MSG as u64, &mut echo)?;
                if echo != ping_bytes(seq) {
                    return Err(PingError::Corrupt { seq });
                }
                self.rtts.push(t.now() - sent_at);
                if seq + 1 == self.count {
                    t.cm_disconnect(res.conn)?;
                    self.release(t, res);
                    return Ok(true);
                }
                self.send(t, res, seq + 1)
            }
            State::Done => Ok(true),
        }
    }

    /// Posts the echo's receive, then ping `seq`.
    fn send<T: Transport>(&mut self, t: &mut T, res: Resources, seq: u64) -> Result<bool, PingError> {
        t.mr_write(res.mr.id, 0, &ping_bytes(seq))?;
        t.post_recv(res.qp, &RecvWr::new(seq, &[Sge::new(res.mr.id, MSG as u64, MSG)]))?;
        t.post_send(res.qp, &SendWr::new(seq, SendOp::Send, &[Sge::new(res.mr.id, 0, MSG)]))?;
        self.state = State::Pinging { res, seq, sent_at: t.now(), got_send: false, got_echo: false };
        Ok(false)
    }

    fn release<T: Transport>(&mut self, t: &mut T, res: Resources) {
        let _ = t.destroy_qp(res.qp);
        let _ = t.cm_destroy(res.conn);
        let _ = t.dereg_mr(res.mr.id);
        let _ = t.destroy_cq(res.cq);
        let _ = t.dealloc_pd(res.pd);
    }

    /// The blocking helper: steps, and between steps sleeps in
    /// `Transport::wait` (virtual time on the simulator, the completion
    /// channel on verbs), until done or `timeout` passes.
    pub fn run<T: Transport>(&mut self, t: &mut T, timeout: Duration) -> Result<&[Duration], PingError> {
        let deadline = t.now() + timeout;
        while !self.step(t)? {
            if t.now() >= deadline {
                return Err(PingError::Timeout);
            }
            let cqs: Vec<CqId> = self.cq().into_iter().collect();
            t.wait(&cqs, deadline)?;
        }
        Ok(&self.rtts)
    }
}
