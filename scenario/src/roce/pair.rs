//! A receive server and an FPGA engine model driven together without
//! blocking: what a `op = "roce"` scenario stream and `--backend sim` of
//! `rctb roce-rx` / `rctb fpga-emu` run.
//!
//! [`RocePair::step`] does what can be done now (set up through the
//! hand-off codec, pump the engine, poll the server, let the consumer finish
//! frames) and says when it next needs time to pass, like
//! [`crate::traffic::Stream::step`]. The consumer takes `delay` of transport
//! time per frame, one frame after the other, holding each frame's slot
//! until it is done: a slow consumer leaves the receive queue empty and the
//! host answers RNR NAKs.

use std::collections::{BTreeMap, VecDeque};

use rctb_core::Transport;
use rctb_core::roce::{Frame, HostParams, RoceServer, ServerConfig, TransportConfig};
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{Gid, WcStatus};
use rctb_models::fpga::{FpgaEngine, FpgaParams, StreamConfig as EngineStream, setup_connection, teardown_connection};

use super::check::FrameCheck;
use super::handoff::{FpgaMsg, HostMsg, Message};
use crate::traffic::{Progress, StreamStats};

/// Everything a pair needs besides its two transports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairConfig {
    /// The receive server's configuration: the FPGA's IP (which also gives
    /// the FPGA's GID in the hand-off), max payload, receive queue depth.
    pub server: ServerConfig,
    /// The host's transport settings (pmtu, min RNR timer) and the FPGA's
    /// retries.
    pub tc: TransportConfig,
    /// What the engine streams: channels, frame sizes, frame count, gap,
    /// window, payload; the engine's staging region is the largest size
    /// times the window.
    pub stream: EngineStream,
    /// Consumer time per frame.
    pub consumer_delay: Duration,
    /// Check every payload byte against its PRBS.
    pub verify: bool,
    /// The FPGA engine's GID index on its node (1 on a simulator node).
    pub fpga_sgid_index: u32,
    /// When the pair sets up (transport time).
    pub start: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Waiting,
    Running,
    Done,
}

/// The server, the engine and the checks of what arrives.
pub struct RocePair<T: Transport> {
    cfg: PairConfig,
    host_t: Option<T>,
    /// The host node's address, which the engine sends to.
    host_ip: std::net::Ipv4Addr,
    engine: FpgaEngine<T>,
    server: Option<RoceServer<T>>,
    fpga: Option<FpgaParams>,
    psn: u64,
    phase: Phase,
    check: FrameCheck,
    /// Frames the consumer holds, with when it is done with each.
    held: VecDeque<(Frame, Instant)>,
    busy_until: Instant,
    scratch: Vec<Frame>,
    stats: StreamStats,
    /// The hand-off lines, as `rctb roce-rx` and `rctb fpga-emu` exchange them.
    pub handoff: Vec<String>,
}

impl<T: Transport> std::fmt::Debug for RocePair<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocePair").field("phase", &self.phase).field("check", &self.check).finish_non_exhaustive()
    }
}

impl<T: Transport> RocePair<T> {
    /// `host_ip` is the host node's address (the engine sends to it); `seed`
    /// draws the PSNs and the engine's keys.
    pub fn new(cfg: PairConfig, host: T, fpga: T, host_ip: std::net::Ipv4Addr, seed: u64) -> Self {
        let engine = FpgaEngine::new(fpga, host_ip, cfg.fpga_sgid_index);
        let check = FrameCheck::new(cfg.verify);
        RocePair {
            host_ip,
            host_t: Some(host),
            engine,
            server: None,
            fpga: None,
            psn: seed | 1,
            phase: Phase::Waiting,
            check,
            held: VecDeque::new(),
            busy_until: Instant::ZERO,
            scratch: Vec::new(),
            stats: StreamStats::default(),
            handoff: Vec::new(),
            cfg,
        }
    }

    /// What the host received so far: counts, losses, repeats, corruption.
    pub fn check(&self) -> &FrameCheck {
        &self.check
    }
    /// The stream statistics for the report; complete only once the pair is
    /// done (sends, completions and the host's counters are filled in then).
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }
    /// The receive server, from setup until the pair is done (`None`
    /// before and after).
    pub fn server(&self) -> Option<&RoceServer<T>> {
        self.server.as_ref()
    }
    /// Whether the pair has finished: the stream completed (or failed),
    /// setup failed, or [`abort`](RocePair::abort) was called.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }
    /// The host's IP the engine was pointed at.
    pub fn host_ip(&self) -> std::net::Ipv4Addr {
        self.host_ip
    }

    fn now(&self) -> Instant {
        self.engine.transport().now()
    }

    fn fail(&mut self, what: &str, e: impl std::fmt::Display) {
        self.stats.local_errors.push(format!("{what}: {e}"));
        self.finish();
    }

    /// Does what can be done now.
    pub fn step(&mut self) -> Progress {
        match self.phase {
            Phase::Waiting => {
                if self.now() < self.cfg.start {
                    return Progress::Idle { wake_at: Some(self.cfg.start) };
                }
                if let Err(e) = self.setup() {
                    self.stats.connect_error = Some(e);
                    self.finish();
                }
                Progress::Busy
            }
            Phase::Running => self.run(),
            Phase::Done => Progress::Done,
        }
    }

    /// Server, hand-off (through the text codec both front ends use), engine
    /// setup, connection, stream start.
    fn setup(&mut self) -> Result<(), String> {
        let host_t = self.host_t.take().expect("setup runs once");
        // xorshift64*, deterministic from the seed: PSNs and engine keys.
        let mut rng = {
            let mut s = self.psn;
            move || {
                s ^= s >> 12;
                s ^= s << 25;
                s ^= s >> 27;
                (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
            }
        };
        let server = RoceServer::create(host_t, self.cfg.server.clone(), &mut rng).map_err(|e| format!("host: {e}"))?;
        let server = self.server.insert(server);
        let host = Message::Host(HostMsg {
            params: server.host_params(),
            gid: server.status().host_gid,
            pmtu: server.path_mtu(&self.cfg.tc),
            max_payload: server.config().max_payload(),
        })
        .to_string();
        let Ok(Message::Host(h)) = Message::parse(&host, 1) else {
            return Err(format!("hand-off: {host:?} does not parse"));
        };
        self.handoff.push(host);
        let host_params: HostParams = h.params;
        let tc = TransportConfig::new(
            h.pmtu,
            self.cfg.tc.min_rnr_timer(),
            self.cfg.tc.rnr_retry(),
            self.cfg.tc.retry_count(),
        )
        .map_err(|e| e.to_string())?;
        let max = *self.cfg.stream.sizes.iter().max().unwrap_or(&1);
        let staging = (max as u64 * self.cfg.stream.window as u64).clamp(1, u32::MAX as u64) as u32;
        let p = setup_connection(&mut self.engine, &host_params, &tc, staging, &mut rng)
            .map_err(|e| format!("FPGA setup: {e}"))?;
        self.fpga = Some(p);
        let fpga_gid = Gid::from_ipv4(self.cfg.server.fpga_ip());
        let fpga = Message::Fpga(FpgaMsg { qpn: p.qpn, lkey: p.lkey, gid: fpga_gid }).to_string();
        let Ok(Message::Fpga(f)) = Message::parse(&fpga, 1) else {
            return Err(format!("hand-off: {fpga:?} does not parse"));
        };
        self.handoff.push(fpga);
        let server = self.server.as_mut().expect("made above");
        server.complete_connection(f.qpn, &self.cfg.tc, f.lkey).map_err(|e| format!("host: {e}"))?;
        self.handoff.push(Message::Ready.to_string());
        self.engine.start_stream(self.cfg.stream.clone()).map_err(|e| format!("FPGA stream: {e}"))?;
        self.stats.started_at = Some(self.now());
        self.phase = Phase::Running;
        Ok(())
    }

    fn run(&mut self) -> Progress {
        let before = self.engine.stream_stats().cloned().unwrap_or_default();
        let due = match self.engine.pump() {
            Ok(d) => d,
            Err(e) => {
                self.fail("FPGA engine", e);
                return Progress::Busy;
            }
        };
        let after = self.engine.stream_stats().cloned().unwrap_or_default();
        let mut busy = after.posted != before.posted || after.completed != before.completed;
        let server = self.server.as_mut().expect("running has a server");
        let mut frames = std::mem::take(&mut self.scratch);
        if let Err(e) = server.poll(&mut frames) {
            self.scratch = frames;
            self.fail("host poll", e);
            return Progress::Busy;
        }
        let now = self.engine.transport().now();
        for f in frames.drain(..) {
            busy = true;
            let (ch, ring) = (f.channel(), f.ring_position());
            let check = &mut self.check;
            let r = server.with_frame_data(&f, &mut |b: &[u8]| check.frame(ch, ring, b));
            if let Err(e) = r {
                self.stats.local_errors.push(format!("host frame data: {e}"));
            }
            self.busy_until = self.busy_until.max(now) + self.cfg.consumer_delay;
            self.held.push_back((f, self.busy_until));
        }
        self.scratch = frames;
        while self.held.front().is_some_and(|(_, at)| *at <= now) {
            let (f, _) = self.held.pop_front().expect("checked");
            busy = true;
            if let Err(e) = server.release(f) {
                self.fail("host release", e);
                return Progress::Busy;
            }
        }
        let finished =
            after.posted == after.completed && (after.completed == self.cfg.stream.count || !after.errors.is_empty());
        if finished && self.held.is_empty() && !busy {
            self.finish();
            return Progress::Busy;
        }
        if busy {
            return Progress::Busy;
        }
        let release = self.held.front().map(|(_, at)| *at);
        let wake_at = match (due, release) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Progress::Idle { wake_at }
    }

    /// Stops both sides and fills in the stream statistics.
    fn finish(&mut self) {
        if self.phase == Phase::Done {
            return;
        }
        self.phase = Phase::Done;
        // Before teardown, which forgets the stream.
        if let Some(st) = self.engine.stream_stats().cloned() {
            self.record_engine(&st);
        }
        let now = self.now();
        if self.stats.started_at.is_some() {
            self.stats.finished_at = Some(now);
        }
        if let Some(server) = self.server.as_mut() {
            for (f, _) in self.held.drain(..) {
                let _ = server.release(f);
            }
            if let Err(e) = server.stop() {
                self.stats.local_errors.push(format!("host stop: {e}"));
            }
            let c = server.counters();
            self.stats.received = c.frames;
            self.stats.recv_flushed = c.flushed;
            for (what, n) in [
                ("receive completions with an error status", c.errors),
                ("completions that were not SEND with immediate", c.wrong_opcode),
                ("frames of length 0 or above max_payload", c.bad_length),
                ("completions with an unknown wr_id", c.bad_wr_id),
            ] {
                if n > 0 {
                    self.stats.local_errors.push(format!("host: {n} {what}"));
                }
            }
        }
        self.server = None;
        if let Some(p) = self.fpga.take()
            && let Err(e) = teardown_connection(&mut self.engine, &p)
        {
            self.stats.local_errors.push(format!("FPGA teardown: {e}"));
        }
        self.engine.soft_reset();
        self.stats.bytes = self.check.bytes;
        if !self.check.clean() {
            self.stats.mismatches = self.check.lost + self.check.out_of_order + self.check.corrupt;
            self.stats.first_mismatch = self.check.first_problem.clone();
        }
    }

    fn record_engine(&mut self, st: &rctb_models::fpga::StreamStats) {
        self.stats.posted = st.posted;
        let mut errors: BTreeMap<WcStatus, u64> = BTreeMap::new();
        for s in &st.errors {
            *errors.entry(*s).or_default() += 1;
        }
        self.stats.completed = st.completed - st.errors.len() as u64;
        self.stats.errors = errors;
    }

    /// Gives up now: stops both sides (results as they are).
    pub fn abort(&mut self) {
        if self.phase == Phase::Waiting {
            self.phase = Phase::Done;
            return;
        }
        self.finish();
    }
}
