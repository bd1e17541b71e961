//! The worked example of `docs/guide.md` ("Test your RDMA application with
//! rctb"), compiled and run by `cargo test`: a small RC ping-pong in the
//! manner of `ibv_rc_pingpong`, written once against `Transport`, tested on
//! the simulator. The guide walks through it top to bottom.

use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;

use proptest::prelude::*;
use rctb_core::Transport;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_core::wire::roce::Opcode;
use rctb_sim::{NodeConfig, PacketAction, PacketMatch, PacketRule, Sim, SimTransport};

// ---- 1. The application: generic over Transport --------------------------

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
    Corrupt { seq: u64 },
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
                    let init = QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false };
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

/// The bytes of ping `seq`: its number, then a pattern of it.
pub fn ping_bytes(seq: u64) -> Vec<u8> {
    let mut b = seq.to_le_bytes().to_vec();
    b.extend((8..MSG as u64).map(|i| (seq.wrapping_mul(31) ^ i) as u8));
    b
}

impl Pinger {
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
                let init = QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: true };
                let (conn, qp) = t.cm_connect(&ConnectParams::new(self.server, init, Vec::new()))?;
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

// ---- 2. A simulated fabric in a test -------------------------------------

/// A client and an echo server on a fresh fabric of `seed`; the server runs
/// as an actor of its node, so it answers while the client blocks.
fn fabric(seed: u64) -> (Sim, SimTransport, Rc<RefCell<Echo>>, SocketAddrV4) {
    let sim = Sim::new(seed);
    let c = sim.add_node(NodeConfig::new("client", "10.0.0.1".parse().unwrap())).unwrap();
    let s = sim.add_node(NodeConfig::new("server", "10.0.0.2".parse().unwrap())).unwrap();
    let echo = Rc::new(RefCell::new(Echo::default()));
    let actor = echo.clone();
    sim.add_actor(s, Box::new(move |t: &mut SimTransport| actor.borrow_mut().step(t).expect("the echo server")));
    let t = sim.transport(c);
    (sim, t, echo, SocketAddrV4::new("10.0.0.2".parse().unwrap(), PORT))
}

/// Where a failing seed tells how to run it again.
fn replay(seed: u64, test: &str) -> String {
    format!("seed {seed}; replay: cargo test -p rctb-sim --test guide {test}")
}

#[test]
fn a_hundred_pings_come_back_and_a_seed_replays_exactly() {
    let run = |seed| {
        let (sim, mut t, echo, server) = fabric(seed);
        let mut p = Pinger::new(server, 100);
        let rtts =
            p.run(&mut t, Duration::from_secs(1)).unwrap_or_else(|e| panic!("{e:?}; {}", replay(seed, "a_hundred")));
        assert_eq!(echo.borrow().echoed, 100, "{}", replay(seed, "a_hundred"));
        (rtts.to_vec(), sim.now())
    };
    let (first, end) = run(7);
    assert_eq!(first.len(), 100);
    assert!(first.iter().all(|&rtt| rtt > Duration::ZERO && rtt < Duration::from_micros(100)), "{first:?}");
    assert_eq!(run(7), (first, end), "the same seed, the same run: {}", replay(7, "a_hundred"));
}

// ---- 3. Faults: the verbs and the per-packet hook ------------------------

#[test]
fn a_lost_echo_is_resent_by_rc_and_the_pinger_never_sees_it() {
    let (sim, mut t, _echo, server) = fabric(3);
    // The server's 10th SEND (the 10th echo) is lost once; RC resends it
    // after the ACK timeout, so that ping just takes longer.
    let server_node = sim.node("server").unwrap();
    let rule = PacketRule::new(PacketMatch::any().from(server_node).opcode(Opcode::SEND_ONLY), PacketAction::Drop)
        .skip(9)
        .once();
    let id = sim.add_rule(rule).unwrap();
    let mut p = Pinger::new(server, 20);
    let rtts = p.run(&mut t, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e:?}; {}", replay(3, "a_lost_echo")));
    assert_eq!(sim.rule_stats(id).unwrap().applied, 1);
    let slowest = rtts.iter().enumerate().max_by_key(|(_, r)| **r).unwrap();
    assert_eq!(slowest.0, 9, "the 10th ping waited for the resend: {rtts:?}");
    assert!(*slowest.1 > Duration::from_millis(1), "an ACK timeout, not a link delay: {rtts:?}");
}

#[test]
fn a_partition_that_never_heals_ends_in_a_typed_error() {
    let (sim, mut t, _echo, server) = fabric(4);
    let mut p = Pinger::new(server, 1000);
    // Connect and ping a little, then cut the link for good.
    sim.schedule(rctb_sim::ScheduledFault {
        at: Instant::ZERO + Duration::from_micros(500),
        action: rctb_sim::FaultAction::Partition { a: "client".into(), b: "server".into() },
    });
    let e = p.run(&mut t, Duration::from_secs(60)).unwrap_err();
    assert_eq!(e, PingError::Completion(WcStatus::RetryExcErr), "{}", replay(4, "a_partition"));
    assert!(!p.rtts.is_empty(), "some pings came back before the cut");
}

// ---- 4. A property against a model ---------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the seed and the steady loss and duplication, every ping
    /// comes back exactly as sent, in order: the model is "an echo is its
    /// ping", and RC must make the lossy fabric look like that.
    #[test]
    fn every_echo_is_its_ping_under_loss_and_duplication(
        seed in any::<u64>(),
        drop in 0.0f64..0.05,
        duplicate in 0.0f64..0.05,
        count in 1u64..40,
    ) {
        let (sim, mut t, echo, server) = fabric(seed);
        let faults = rctb_sim::LinkFaults { drop, duplicate, ..Default::default() };
        sim.set_default_link(rctb_sim::LinkConfig { faults, ..Default::default() });
        let mut p = Pinger::new(server, count);
        let r = p.run(&mut t, Duration::from_secs(30)).map(<[Duration]>::len);
        prop_assert_eq!(r, Ok(count as usize), "{}", replay(seed, "every_echo"));
        prop_assert_eq!(echo.borrow().echoed, count);
    }
}

// ---- 5. A pcap for Wireshark ---------------------------------------------

#[test]
fn the_run_is_a_pcap_wireshark_reads() {
    let (sim, mut t, _echo, server) = fabric(5);
    sim.enable_pcap();
    Pinger::new(server, 3).run(&mut t, Duration::from_secs(1)).unwrap();
    let pcap = sim.take_pcap().expect("enabled");
    assert_eq!(&pcap[..4], &0xa1b2_3c4du32.to_le_bytes(), "a nanosecond pcap");
    // 3 pings, 3 echoes and their ACKs, besides the CM exchange: every
    // frame a real Ethernet/IPv4/UDP 4791 RoCEv2 frame with its ICRC.
    // Keep it with std::fs::write("pingpong.pcap", &pcap) and open it.
    let frames = pcap_frames(&pcap);
    assert!(frames >= 12, "{frames} frames");
}

/// Frames in a classic pcap: 24-byte file header, then 16-byte record
/// headers each followed by the captured bytes.
fn pcap_frames(pcap: &[u8]) -> usize {
    let (mut at, mut n) = (24, 0);
    while at + 16 <= pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
        n += 1;
    }
    n
}

// ---- The guide quotes this file -------------------------------------------

#[test]
fn every_line_the_guide_quotes_is_in_this_file() {
    let guide = include_str!("../../docs/guide.md");
    let here: Vec<&str> = include_str!("guide.rs").lines().map(str::trim).collect();
    let mut quoted = 0;
    for block in guide.split("```rust\n").skip(1) {
        let code = block.split("```").next().expect("a closed block");
        for line in code.lines().map(str::trim).filter(|l| !l.is_empty()) {
            assert!(here.contains(&line), "docs/guide.md quotes a line sim/tests/guide.rs lacks: {line}");
            quoted += 1;
        }
    }
    assert!(quoted > 20, "the guide quotes the example ({quoted} lines)");
}
