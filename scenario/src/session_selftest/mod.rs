//! The RC session selftest (`rctb rc-session selftest`; its front end is
//! the `rctb` binary's `cli::rc_session`): the RC session server
//! ([`rctb_core::rcsession`]) and its client in one process, on two
//! endpoints of one backend: two simulated nodes (`--backend sim`), or two
//! RDMA devices (`--backend verbs --device rxe1 --peer rxe0`: the client on
//! the device, the server on the peer). The control plane is in-process
//! ([`rctb_core::rcsession::inproc`], what the HTTP gateway does around the
//! manager); the data phase is real RC between the two endpoints.
//!
//! Transfer `i` of a run is a GET or a PUT of a size drawn from (seed, i):
//! log-uniform in `min..=max`, with the edges first (GET and PUT of the
//! minimum, then of the maximum). Each object is a PRBS of (seed, i); GETs
//! are checked in the client's region, PUTs in what the server's staging
//! region received, byte for byte. Up to `depth` sessions run at once, each
//! on its own client (QP, CQ and region). At the end every session must be
//! reaped and nothing held: sessions, staging bytes, QPs, leaks.
//!
//! The same code runs on every backend; `cargo test` runs it on the
//! simulator, `ci/vm/checks.d/rcsession.sh` on rxe.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::Transport;
use rctb_core::rcsession::inproc::{complete_get, complete_put, prepare_get, prepare_put};
use rctb_core::rcsession::{
    ClientConfig, ClientTransfer, PrincipalId, RcClient, RcError, ReadyOutcome, ReadyRequest, ReadyStart, ReadyTicket,
    ServerConfig, SessionManager,
};
use rctb_core::time::{Duration, Instant};
use rctb_core::wire::hipobj::Op;

use crate::pattern::StreamPattern;

mod report;

pub use report::{PhaseTimes, SelftestReport};

/// Which operations a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpMix {
    /// GET and PUT, drawn per transfer (the edges: both).
    Mixed,
    /// Only GETs (the edges: the smallest, then the largest).
    Get,
    /// Only PUTs (the edges: the smallest, then the largest).
    Put,
}

/// What a selftest run does.
#[derive(Clone, Debug, PartialEq)]
pub struct SelftestConfig {
    /// Transfers in all, at least 1 (default 1000); each is one session.
    pub transfers: u64,
    /// The smallest object in bytes (default 1; 0 is taken as 1).
    pub min_size: u64,
    /// The largest object in bytes (default 8 MiB; taken as `min_size` when
    /// below it).
    pub max_size: u64,
    /// Every transfer this size (a benchmark) instead of drawn sizes.
    pub fixed_size: Option<u64>,
    /// The largest drawn size, when below `max_size` (the edges are still
    /// `min_size` and `max_size`): fewer big objects on a slow link.
    pub draw_max: Option<u64>,
    /// Which operations run (default [`OpMix::Mixed`]).
    pub ops: OpMix,
    /// Draws each transfer's operation, size, object and PSN and seeds the
    /// server's random numbers (and, in [`run_sim`], the simulator); default
    /// 0, where the CLI's `--seed` defaults to 1.
    pub seed: u64,
    /// Sessions in flight at once (one client each).
    pub depth: usize,
    /// Check every byte (a benchmark may skip it; the objects are then all
    /// the same PRBS).
    pub verify: bool,
    /// Spin on the CQs instead of sleeping in `wait` (verbs).
    pub busy_poll: bool,
    /// Give up after this much transport time.
    pub time_limit: Duration,
    /// The session server's port, GID index, limits, deadlines and retry
    /// settings.
    pub server: ServerConfig,
    /// The GID index the clients source from (default 1, the IPv4 GID on rxe
    /// and the simulator).
    pub client_gid_index: u32,
}

impl Default for SelftestConfig {
    fn default() -> Self {
        SelftestConfig {
            transfers: 1000,
            min_size: 1,
            max_size: 8 << 20,
            fixed_size: None,
            draw_max: None,
            ops: OpMix::Mixed,
            seed: 0,
            depth: 1,
            verify: true,
            busy_poll: false,
            time_limit: Duration::from_secs(600),
            server: ServerConfig::default(),
            client_gid_index: 1,
        }
    }
}

/// Transfer `i`'s operation and size in bytes: the edges first (`min_size`,
/// then `max_size`; with [`OpMix::Mixed`] a GET and a PUT of each), then
/// sizes drawn log-uniform in `min_size..=draw_max` (or `max_size`) from
/// `pattern` and `i`; `fixed_size`, when set, is every transfer's size.
pub fn transfer_shape(cfg: &SelftestConfig, pattern: &StreamPattern, i: u64) -> (Op, u64) {
    let draw = |what: &str| pattern.draw(&format!("{what}/{i}"));
    let op = match cfg.ops {
        OpMix::Get => Op::Get,
        OpMix::Put => Op::Put,
        OpMix::Mixed if i < 4 => [Op::Get, Op::Put][i as usize % 2],
        OpMix::Mixed => [Op::Get, Op::Put][(draw("op") & 1) as usize],
    };
    let (min, max) = (cfg.min_size.max(1), cfg.max_size.max(cfg.min_size.max(1)));
    let edges = if cfg.ops == OpMix::Mixed { 4 } else { 2 };
    let size = match cfg.fixed_size {
        Some(s) => s,
        None if i < edges => {
            if i < edges / 2 {
                min
            } else {
                max
            }
        }
        None => {
            // log-uniform: as many transfers per doubling of the size
            let top = cfg.draw_max.map_or(max, |d| d.clamp(min, max));
            let unit = (draw("size") >> 11) as f64 / (1u64 << 53) as f64;
            let (lo, hi) = ((min as f64).ln(), ((top + 1) as f64).ln());
            ((lo + unit * (hi - lo)).exp() as u64).clamp(min, top)
        }
    };
    (op, size)
}

enum Phase {
    Idle,
    /// READY in flight: the server's result and (GET) the client's
    /// completion are awaited.
    Moving {
        ticket: ReadyTicket,
        result: Option<Result<ReadyOutcome, RcError>>,
        client_done: bool,
        since: Instant,
    },
    /// BUSY: READY again at the client's `retry_at`.
    Backoff,
}

struct Slot<C: Transport> {
    client: RcClient<C>,
    phase: Phase,
    index: u64,
    op: Op,
    size: u64,
    xfer: Option<ClientTransfer>,
    ready: Option<ReadyRequest>,
    /// A failure of the client side of this transfer (reported when the
    /// server's result is in).
    client_error: Option<String>,
}

/// Runs a selftest: the server on `server_t`, `cfg.depth` clients made by
/// `make_client` (each on its own endpoint of the other device).
///
/// Failed transfers, mismatches and the time limit land in the report
/// (see [`SelftestReport::failures`]); `Err` means the run could not start
/// or its transport failed: `transfers` or `depth` is 0, the server or a
/// client cannot be created, `make_client` fails, or waiting in a
/// transport fails.
pub fn run<S: Transport, C: Transport>(
    server_t: S,
    mut make_client: impl FnMut() -> Result<C, String>,
    cfg: &SelftestConfig,
) -> Result<SelftestReport, String> {
    let max = cfg.fixed_size.unwrap_or(cfg.max_size).max(cfg.min_size).max(1);
    if cfg.transfers == 0 || cfg.depth == 0 {
        return Err("--transfers and --depth must be at least 1".into());
    }
    let mut server = SessionManager::new(server_t, ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5e55_1075), cfg.server)
        .map_err(|e| format!("server: {e}"))?;
    let mut ccfg = ClientConfig::default();
    ccfg.capacity = max;
    ccfg.gid_index = cfg.client_gid_index;
    let mut slots = Vec::new();
    for _ in 0..cfg.depth.min(cfg.transfers as usize) {
        let t = make_client()?;
        let client = RcClient::new(t, ccfg).map_err(|e| format!("client: {e}"))?;
        slots.push(Slot {
            client,
            phase: Phase::Idle,
            index: 0,
            op: Op::Get,
            size: 0,
            xfer: None,
            ready: None,
            client_error: None,
        });
    }
    let mut run = Run {
        cfg,
        pattern: StreamPattern::new(cfg.seed, "rc-session-selftest"),
        principal: PrincipalId::from_credentials("selftest", "secret"),
        report: SelftestReport::default(),
        // Without verification every object is transfer 0's PRBS.
        object: vec![0u8; max as usize],
        object_of: None,
        scratch: vec![0u8; max as usize],
    };
    let start = server.now();
    let give_up = start + cfg.time_limit;
    let mut next = 0u64;
    loop {
        server.progress();
        let mut moved = false;
        for slot in &mut slots {
            moved |= run.step(&mut server, slot, &mut next);
        }
        let busy = slots.iter().any(|s| !matches!(s.phase, Phase::Idle));
        if !busy && next >= cfg.transfers {
            break;
        }
        let now = server.now();
        if now >= give_up {
            run.report.errors.push(format!(
                "time limit: {} of {} transfers started after {:?}",
                next, cfg.transfers, cfg.time_limit
            ));
            for s in &mut slots {
                if let Some(x) = s.xfer.as_mut() {
                    let _ = s.client.abandon(x);
                }
                if let Some(r) = &s.ready {
                    let _ = server.cancel(&r.session, &run.principal);
                }
            }
            break;
        }
        if !moved && !cfg.busy_poll {
            idle(&mut server, &mut slots, now)?;
        }
    }
    run.report.elapsed = server.now().saturating_duration_since(start);
    // Let the reaper finish what the last transfers left (it runs inside
    // the manager's calls; a session whose QP is still draining goes on a
    // later pass).
    let settle = server.now() + Duration::from_secs(5);
    while !server.sessions().is_empty() && server.now() < settle {
        server.progress();
        server.reap();
        if server.sessions().is_empty() {
            break;
        }
        let now = server.now();
        let _ = server.transport_mut().wait(&[], now + Duration::from_millis(1));
    }
    let mut report = run.report;
    report.usage_after = server.usage();
    report.sessions_after = server.sessions().len();
    for s in slots {
        if let Err(e) = s.client.close() {
            report.errors.push(format!("closing a client: {e}"));
        }
    }
    Ok(report)
}

/// Nothing moved: sleep in the transport until a data phase's CQ fires, a
/// backoff ends, or a short slice passes.
fn idle<S: Transport, C: Transport>(
    server: &mut SessionManager<S, ChaCha8Rng>,
    slots: &mut [Slot<C>],
    now: Instant,
) -> Result<(), String> {
    let slice = now + Duration::from_millis(1);
    let backoff = slots
        .iter()
        .filter(|s| matches!(s.phase, Phase::Backoff))
        .filter_map(|s| s.xfer.as_ref().map(|x| x.retry_at))
        .min()
        .unwrap_or(Instant::FAR_FUTURE);
    let (cqs, next) = server.wait_set();
    let until = slice.min(next).min(backoff);
    if !cqs.is_empty() {
        server.transport_mut().wait(&cqs, until).map_err(|e| format!("server wait: {e}"))?;
        return Ok(());
    }
    // The server has no data phase in flight: a GET client still waiting
    // for its receive, or a backoff.
    if let Some(s) = slots.iter_mut().find(|s| matches!(s.phase, Phase::Moving { client_done: false, .. })) {
        let cq = s.client.cq();
        s.client.transport_mut().wait(&[cq], until).map_err(|e| format!("client wait: {e}"))?;
    } else {
        server.transport_mut().wait(&[], until).map_err(|e| format!("server wait: {e}"))?;
    }
    Ok(())
}

struct Run<'a> {
    cfg: &'a SelftestConfig,
    pattern: StreamPattern,
    principal: PrincipalId,
    report: SelftestReport,
    object: Vec<u8>,
    /// Which transfer's object `object` holds (its first `len` bytes).
    object_of: Option<(u64, usize)>,
    scratch: Vec<u8>,
}

impl Run<'_> {
    /// One step of one slot; true when something happened.
    fn step<S: Transport, C: Transport>(
        &mut self,
        server: &mut SessionManager<S, ChaCha8Rng>,
        slot: &mut Slot<C>,
        next: &mut u64,
    ) -> bool {
        match slot.phase {
            Phase::Idle if *next < self.cfg.transfers => {
                let i = *next;
                *next += 1;
                self.start(server, slot, i);
                true
            }
            Phase::Idle => false,
            Phase::Backoff => {
                let at = slot.xfer.as_ref().map_or(Instant::ZERO, |x| x.retry_at);
                if slot.client.transport().now() < at {
                    return false;
                }
                self.send_ready(server, slot);
                true
            }
            Phase::Moving { ticket, ref mut result, ref mut client_done, since } => {
                let mut moved = false;
                if result.is_none()
                    && let Some(r) = server.take_ready(ticket)
                {
                    *result = Some(r.map(|reply| reply.outcome));
                    moved = true;
                }
                if !*client_done {
                    let x = slot.xfer.as_mut().expect("a transfer in flight");
                    match slot.client.poll(x) {
                        Ok(None) => {}
                        Ok(Some(())) => {
                            *client_done = true;
                            moved = true;
                        }
                        Err(e) => {
                            slot.client_error = Some(format!("client completion: {e}"));
                            let _ = slot.client.abandon(x);
                            *client_done = true;
                            moved = true;
                        }
                    }
                }
                let finished = result.is_some() && (*client_done || slot.op == Op::Put);
                if finished {
                    let r = result.take().expect("checked");
                    let t = server.now();
                    self.report.time.data += t.saturating_duration_since(since);
                    self.finish(server, slot, r);
                    self.report.time.finish += server.now().saturating_duration_since(t);
                }
                moved
            }
        }
    }

    fn object_for(&mut self, i: u64, size: usize) {
        let key = if self.cfg.verify { i } else { 0 };
        if self.object_of.is_some_and(|(k, len)| k == key && len >= size) {
            return;
        }
        let len = if self.cfg.verify { size } else { self.object.len() };
        self.pattern.fill(key, &mut self.object[..len]);
        self.object_of = Some((key, len));
    }

    fn fail(&mut self, slot: &mut Slot<impl Transport>, what: String) {
        self.report.errors.push(format!("transfer {} ({:?}, {} bytes): {what}", slot.index, slot.op, slot.size));
        if let Some(x) = slot.xfer.as_mut() {
            let _ = slot.client.abandon(x);
        }
        slot.phase = Phase::Idle;
        slot.xfer = None;
        slot.ready = None;
        slot.client_error = None;
    }

    fn start<S: Transport, C: Transport>(
        &mut self,
        server: &mut SessionManager<S, ChaCha8Rng>,
        slot: &mut Slot<C>,
        i: u64,
    ) {
        let (op, size) = transfer_shape(self.cfg, &self.pattern, i);
        slot.index = i;
        slot.op = op;
        slot.size = size;
        let t0 = server.now();
        self.object_for(i, size as usize);
        let t1 = server.now();
        self.report.time.pattern += t1.saturating_duration_since(t0);
        let psn = self.pattern.draw(&format!("psn/{i}")) as u32;
        let cookie = self.pattern.imm(i) | 1;
        let (mut x, req) = match slot.client.begin(self.principal, op, &format!("/selftest/o{i}"), size, psn, cookie) {
            Ok(v) => v,
            Err(e) => return self.fail(slot, format!("begin: {e}")),
        };
        if op == Op::Put
            && let Err(e) = slot.client.write_payload(&self.object[..size as usize])
        {
            return self.fail(slot, format!("write_payload: {e}"));
        }
        let t2 = server.now();
        let prepared = match op {
            Op::Get => prepare_get(server, &req, &self.object[..size as usize], "selftest"),
            Op::Put => prepare_put(server, &req),
        };
        let t3 = server.now();
        self.report.time.client += t2.saturating_duration_since(t1);
        self.report.time.prepare += t3.saturating_duration_since(t2);
        let reply = match prepared {
            Ok(r) => r,
            Err(e) => return self.fail(slot, format!("PREPARE: {e}")),
        };
        match slot.client.connect(&mut x, &reply, true) {
            Ok(ready) => slot.ready = Some(ready),
            Err(e) => {
                let _ = server.cancel(&reply.session, &self.principal);
                return self.fail(slot, format!("connect: {e}"));
            }
        }
        slot.xfer = Some(x);
        self.report.time.client += server.now().saturating_duration_since(t3);
        self.send_ready(server, slot);
    }

    fn send_ready<S: Transport, C: Transport>(
        &mut self,
        server: &mut SessionManager<S, ChaCha8Rng>,
        slot: &mut Slot<C>,
    ) {
        let req = slot.ready.clone().expect("a READY request");
        let t0 = server.now();
        let started = server.ready(&req);
        self.report.time.ready += server.now().saturating_duration_since(t0);
        match started {
            Ok(ReadyStart::Pending(ticket)) => {
                let x = slot.xfer.as_mut().expect("a transfer");
                if slot.op == Op::Put {
                    if let Err(e) = slot.client.start_put(x) {
                        // The server's data phase times out or fails: its
                        // result is still taken before the slot moves on.
                        slot.client_error = Some(format!("start_put: {e}"));
                    }
                } else {
                    slot.client.ready_sent(x);
                }
                slot.phase = Phase::Moving { ticket, result: None, client_done: false, since: server.now() };
            }
            Ok(ReadyStart::Done) => self.fail(slot, "READY moved no data".into()),
            Err(e) => {
                let _ = server.cancel(&req.session, &self.principal);
                self.fail(slot, format!("READY: {e}"))
            }
        }
    }

    fn finish<S: Transport, C: Transport>(
        &mut self,
        server: &mut SessionManager<S, ChaCha8Rng>,
        slot: &mut Slot<C>,
        result: Result<ReadyOutcome, RcError>,
    ) {
        let id = slot.ready.as_ref().expect("a READY request").session;
        match result {
            Ok(ReadyOutcome::Busy) => {
                self.report.busy += 1;
                let x = slot.xfer.as_mut().expect("a transfer");
                slot.client_error = None;
                match slot.client.on_busy(x) {
                    Ok(ready) => {
                        slot.ready = Some(ready);
                        slot.phase = Phase::Backoff;
                    }
                    Err(e) => {
                        let _ = server.cancel(&id, &self.principal);
                        self.fail(slot, format!("after BUSY: {e}"));
                    }
                }
                return;
            }
            Ok(ReadyOutcome::Ok) => {}
            Ok(other) => {
                let _ = server.cancel(&id, &self.principal);
                return self.fail(slot, format!("READY answered {other:?}"));
            }
            Err(e) => return self.fail(slot, format!("READY: {e}")),
        }
        if let Some(e) = slot.client_error.take() {
            let _ = complete_get(server, &id);
            return self.fail(slot, e);
        }
        let size = slot.size as usize;
        let intact = match slot.op {
            Op::Get => {
                if let Err(e) = complete_get(server, &id) {
                    return self.fail(slot, format!("finish_final: {e}"));
                }
                if self.cfg.verify {
                    match slot.client.read_payload(&mut self.scratch[..size]) {
                        Ok(()) => self.pattern.first_mismatch(slot.index, &self.scratch[..size]).is_none(),
                        Err(e) => return self.fail(slot, format!("reading the client's region: {e}")),
                    }
                } else {
                    true
                }
            }
            Op::Put => match complete_put(server, &id) {
                Ok(data) => {
                    !self.cfg.verify || (data.len() == size && self.pattern.first_mismatch(slot.index, &data).is_none())
                }
                Err(e) => return self.fail(slot, format!("PUT completion: {e}")),
            },
        };
        if !intact {
            self.report.mismatches += 1;
            self.report.errors.push(format!(
                "transfer {} ({:?}, {size} bytes): the data differs from the object",
                slot.index, slot.op
            ));
        }
        let r = &mut self.report;
        let sz = slot.size;
        match slot.op {
            Op::Get => {
                r.gets += 1;
                r.largest_get = r.largest_get.max(sz);
                r.smallest_get = Some(r.smallest_get.map_or(sz, |s| s.min(sz)));
            }
            Op::Put => {
                r.puts += 1;
                r.largest_put = r.largest_put.max(sz);
                r.smallest_put = Some(r.smallest_put.map_or(sz, |s| s.min(sz)));
            }
        }
        r.bytes += sz;
        r.largest = r.largest.max(sz);
        r.smallest = Some(r.smallest.map_or(sz, |s| s.min(sz)));
        slot.phase = Phase::Idle;
        slot.xfer = None;
        slot.ready = None;
    }
}

/// `123`, `4K`/`4KiB`, `8M`/`8MiB`, `1G`/`1GiB` (binary units), a `B` suffix allowed.
/// The error names the text and says why: it does not start with a
/// number, the unit is unknown, or the size is above 2^64-1 bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("{text:?}: a size is a number with an optional unit, e.g. 8MiB"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        u => return Err(format!("{text:?}: unknown unit {u:?} (B, KiB, MiB, GiB)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{text:?}: too large"))
}

/// Runs one selftest on the simulator: server node `sim0` (10.10.0.1),
/// client node `sim1` (10.10.0.2), MTU 1024 as rxe on a 1500-byte link.
/// `busy_poll` is ignored (simulated time moves only inside `wait`).
pub fn run_sim(cfg: &SelftestConfig) -> Result<SelftestReport, String> {
    use rctb_sim::{NodeConfig, Sim};
    let sim = Sim::new(cfg.seed);
    let mtu = rctb_core::transport::Mtu::Mtu1024;
    let node = |name: &str, ip: [u8; 4]| {
        sim.add_node({
            let mut node_config = NodeConfig::new(name, std::net::Ipv4Addr::from(ip));
            node_config.mtu = mtu;
            node_config
        })
        .map_err(|e| format!("building the fabric: {e}"))
    };
    let server = node("sim0", [10, 10, 0, 1])?;
    let client = node("sim1", [10, 10, 0, 2])?;
    // Simulated time moves only inside `wait`: never spin.
    let cfg = SelftestConfig { busy_poll: false, ..cfg.clone() };
    run(sim.transport(server), || Ok(sim.transport(client)), &cfg)
}
