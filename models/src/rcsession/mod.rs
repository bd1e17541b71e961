//! A session workload: one RC session server and many clients on one
//! fabric, each client running GETs and PUTs of random sizes through the
//! in-process control plane ([`rctb_core::rcsession::inproc`]), some of them
//! cancelling, some slow (late receives: RNR, then BUSY and a retry), some
//! crashing mid-transfer. Everything is drawn from one seed.
//!
//! Generic over [`Transport`]: the server and every client each get a
//! transport (nodes of one simulated fabric, or endpoints of a real
//! backend); several clients may share one.
//!
//! Call order: [`SessionWorkload::new`], then either the owner's own loop of
//! [`SessionWorkload::step`] (never blocks: the server progresses, then every
//! client acts on what has arrived) with [`SessionWorkload::next_wake`] to
//! know when to step again (the scenario runner does this), or
//! [`SessionWorkload::run`], a loop over a [`Fabric`] that moves time. After
//! a heal, [`SessionWorkload::settle`] lets every deadline pass and
//! [`SessionWorkload::check`] states the invariants: every session terminal
//! (reaped), staging bytes, QPs and MRs back to zero, no client ever saw
//! bytes other than its own object, limits never exceeded. Errors of the
//! clients and the server are counted in [`WorkloadStats`] (`errors` are
//! bugs), never raised; `new` fails only when a transport refuses to build
//! the server or a client.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::Transport;
use rctb_core::rcsession::inproc::{complete_get, complete_put, prepare_get, prepare_put};
use rctb_core::rcsession::*;
use rctb_core::time::{Duration, Instant};

use crate::SeededRng;

mod pair;

pub use pair::SessionPair;

/// What moves time for [`SessionWorkload::run`] and
/// [`SessionWorkload::settle`], the loops that drive a whole fabric: the
/// simulator (its next event, then its events up to an instant) or a real
/// backend's clock (no known next event; waiting until the instant).
pub trait Fabric {
    /// The fabric's time.
    fn now(&self) -> Instant;
    /// When the fabric next has something due without outside input (the
    /// simulator's next event); `None` when nothing is, or it cannot tell.
    fn next_event_at(&self) -> Option<Instant>;
    /// Lets the fabric run until `t` (never beyond it).
    fn run_until(&mut self, t: Instant);
}

/// What a workload runs.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct WorkloadConfig {
    /// Session clients.
    pub clients: usize,
    /// Principals the clients are spread over (client i is principal i % n).
    pub principals: usize,
    /// Transfers in all, spread over the clients.
    pub transfers: u64,
    /// Smallest object, bytes.
    pub min_size: u64,
    /// Largest object, bytes.
    pub max_size: u64,
    /// Probabilities per transfer: a PUT (else a GET)...
    pub put: f64,
    /// ... cancelled after PREPARE ...
    pub cancel: f64,
    /// ... a slow GET client (posts its receive late) ...
    pub slow: f64,
    /// ... a client that crashes mid-transfer.
    pub crash: f64,
    /// How long a slow GET client waits before posting its receive.
    pub slow_delay: Duration,
    /// The session server's limits and timers.
    pub server: ServerConfig,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            clients: 8,
            principals: 3,
            transfers: 80,
            min_size: 1,
            max_size: 64 * 1024,
            put: 0.5,
            cancel: 0.05,
            slow: 0.1,
            crash: 0.03,
            slow_delay: Duration::from_millis(3),
            server: {
                let mut server_config = ServerConfig::default();
                server_config.t_prep = Duration::from_millis(20);
                server_config.t_exec = Duration::from_millis(20);
                server_config.rnr_retry = 3;
                server_config.timeout = 12;
                server_config.retry_cnt = 4;
                server_config
            },
        }
    }
}

/// Counters of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadStats {
    /// Transfers that completed with every byte right.
    pub transfers_ok: u64,
    /// Of them, GETs.
    pub gets_ok: u64,
    /// Of them, PUTs.
    pub puts_ok: u64,
    /// Their bytes.
    pub bytes_ok: u64,
    /// Transfers cancelled after PREPARE.
    pub cancelled: u64,
    /// Clients that crashed mid-transfer.
    pub crashed: u64,
    /// READYs answered BUSY (tried again).
    pub busy: u64,
    /// Transfers failed on the wire (an RC error completion).
    pub wire: u64,
    /// PREPAREs refused by a server limit (tried again later).
    pub refused: u64,
    /// Bytes a client or the server received that were not the object of
    /// that very transfer: must stay 0.
    pub foreign_bytes: u64,
    /// The first such transfer, described.
    pub first_foreign: Option<String>,
    /// Errors that are bugs (unexpected statuses), with their text.
    pub errors: BTreeMap<String, u64>,
    /// The most sessions the server held at once.
    pub max_sessions_seen: u32,
    /// The most staging bytes the server held at once.
    pub max_staging_seen: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    Normal,
    Cancel,
    Slow,
    Crash,
}

#[derive(Debug)]
enum Phase {
    /// Waiting until `wake` to start the next transfer.
    Idle,
    /// READY in flight on the server.
    Ready(ReadyTicket),
    /// The server finished; waiting for the client's own completion.
    ClientCompletion,
    /// BUSY: READY again at `wake`.
    Backoff,
    Finished,
}

#[derive(Debug)]
struct Actor<T: Transport> {
    client: RcClient<T>,
    principal: PrincipalId,
    left: u64,
    index: u64,
    phase: Phase,
    wake: Instant,
    xfer: Option<ClientTransfer>,
    ready: Option<ReadyRequest>,
    object: Vec<u8>,
    behaviour: Behaviour,
}

/// The workload: one session server, many clients.
#[derive(Debug)]
pub struct SessionWorkload<T: Transport> {
    seed: u64,
    server: SessionManager<T, ChaCha8Rng>,
    actors: Vec<Actor<T>>,
    rng: SeededRng,
    cfg: WorkloadConfig,
    /// What the run counted so far.
    pub stats: WorkloadStats,
    /// READYs of crashed clients: their results are still taken (and counted).
    orphans: Vec<ReadyTicket>,
}

/// The object of transfer `index` of client `client`: distinct per transfer.
pub fn object(seed: u64, client: usize, index: u64, len: usize) -> Vec<u8> {
    let mut r = SeededRng::child(seed, &format!("rcsession/object/{client}/{index}"));
    let mut v = vec![0u8; len];
    for chunk in v.chunks_mut(8) {
        let x = r.next_u64().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
    v
}

impl<T: Transport> SessionWorkload<T> {
    /// The workload drawn from `seed`: the server on `server`, client `i`
    /// (of `cfg.clients`, at least one) on `client(i)`'s transport (several
    /// clients may share a node: each has its own QP, CQ and region). On
    /// the simulator the scenario runner gives the clients' node round-robin.
    pub fn new(seed: u64, cfg: WorkloadConfig, server: T, mut client: impl FnMut(usize) -> T) -> Result<Self, String> {
        let server = SessionManager::new(server, ChaCha8Rng::seed_from_u64(seed ^ 0x5e55), cfg.server)
            .map_err(|e| e.to_string())?;
        let mut actors = Vec::new();
        let clients = cfg.clients.max(1);
        for i in 0..clients {
            let ccfg = {
                let mut client_config = ClientConfig::default();
                client_config.capacity = cfg.max_size.max(1);
                client_config.timeout = 12;
                client_config.retry_cnt = 4;
                client_config
            };
            let client = RcClient::new(client(i), ccfg).map_err(|e| e.to_string())?;
            let p = i % cfg.principals.max(1);
            let share = cfg.transfers / clients as u64 + u64::from((i as u64) < cfg.transfers % clients as u64);
            actors.push(Actor {
                client,
                principal: PrincipalId::from_credentials(&format!("user{p}"), "secret"),
                left: share,
                index: 0,
                phase: if share == 0 { Phase::Finished } else { Phase::Idle },
                wake: Instant::ZERO,
                xfer: None,
                ready: None,
                object: Vec::new(),
                behaviour: Behaviour::Normal,
            });
        }
        Ok(SessionWorkload {
            seed,
            server,
            actors,
            rng: SeededRng::child(seed, "rcsession/workload"),
            cfg,
            stats: WorkloadStats::default(),
            orphans: Vec::new(),
        })
    }

    /// The present on the workload's clock (the server's transport).
    pub fn now(&self) -> Instant {
        self.server.transport().now()
    }

    /// The next instant a client acts on its own (a start, a backoff, a
    /// late receive; possibly already past), or one tick after the
    /// server's next deadline.
    pub fn next_wake(&self) -> Option<Instant> {
        let pending = |a: &Actor<T>| match a.phase {
            Phase::Idle | Phase::Backoff => true,
            Phase::Ready(_) => {
                a.behaviour == Behaviour::Slow && a.xfer.as_ref().is_some_and(|x| !a.client.recv_posted(x))
            }
            _ => false,
        };
        let wake = self.actors.iter().filter(|a| pending(a)).map(|a| a.wake).min();
        let (_, server_next) = self.server.wait_set();
        let server_next = (server_next != Instant::FAR_FUTURE).then(|| server_next + Duration::from_nanos(1));
        [wake, server_next].into_iter().flatten().min()
    }

    /// Destroys every client's verbs objects (after `settle`).
    pub fn close_clients(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for a in self.actors.drain(..) {
            if let Err(e) = a.client.close() {
                errors.push(e.to_string());
            }
        }
        errors
    }

    /// The server, for reports and checks.
    pub fn server(&self) -> &SessionManager<T, ChaCha8Rng> {
        &self.server
    }

    /// Transfers started so far (each accepted PREPARE counts once).
    pub fn started(&self) -> u64 {
        self.actors.iter().map(|a| a.index).sum()
    }

    fn error(&mut self, what: String) {
        *self.stats.errors.entry(what).or_default() += 1;
    }

    /// Runs until every client finished or `deadline` (on the fabric's
    /// clock), stepping at each instant something is due.
    pub fn run(&mut self, fabric: &mut impl Fabric, deadline: Instant) {
        loop {
            self.step();
            let now = fabric.now();
            if self.finished() || now >= deadline {
                return;
            }
            let wake = self
                .actors
                .iter()
                .filter(|a| matches!(a.phase, Phase::Idle | Phase::Backoff | Phase::Ready(_)))
                .map(|a| a.wake)
                .filter(|w| *w > now)
                .min();
            // A deadline is passed strictly after it: look one tick later.
            let (_, server_next) = self.server.wait_set();
            let server_next =
                (server_next != Instant::FAR_FUTURE).then(|| server_next.max(now) + Duration::from_nanos(1));
            let next = [fabric.next_event_at(), wake, server_next].into_iter().flatten().min();
            match next {
                Some(t) => fabric.run_until(t.max(now).min(deadline)),
                None => return,
            }
        }
    }

    /// Whether every client is done.
    pub fn finished(&self) -> bool {
        self.actors.iter().all(|a| matches!(a.phase, Phase::Finished))
    }

    /// One pass: the server progresses, then every client acts.
    pub fn step(&mut self) {
        self.server.progress();
        let mut orphans = std::mem::take(&mut self.orphans);
        orphans.retain(|t| match self.server.take_ready(*t) {
            None => true,
            Some(Ok(r)) => {
                self.stats.busy += u64::from(r.outcome == ReadyOutcome::Busy);
                false
            }
            Some(Err(_)) => {
                self.stats.wire += 1;
                false
            }
        });
        self.orphans = orphans;
        let u = self.server.usage();
        self.stats.max_sessions_seen = self.stats.max_sessions_seen.max(u.sessions);
        self.stats.max_staging_seen = self.stats.max_staging_seen.max(u.staging_bytes);
        for i in 0..self.actors.len() {
            self.act(i);
        }
    }

    fn act(&mut self, i: usize) {
        let now = self.now();
        match self.actors[i].phase {
            Phase::Finished => {}
            Phase::Idle if now >= self.actors[i].wake => self.start(i),
            Phase::Idle => {}
            Phase::Backoff if now >= self.actors[i].wake => self.send_ready(i),
            Phase::Backoff => {}
            Phase::Ready(ticket) => {
                let a = &mut self.actors[i];
                if a.behaviour == Behaviour::Slow && now >= a.wake {
                    // A slow GET client posts its receive late (RNR until then).
                    let x = a.xfer.as_mut().expect("a transfer");
                    if !a.client.recv_posted(x)
                        && let Err(e) = a.client.post_get_recv(x)
                    {
                        self.error(format!("post_get_recv: {e}"));
                    }
                }
                if let Some(r) = self.server.take_ready(ticket) {
                    self.ready_done(i, r);
                }
            }
            Phase::ClientCompletion => self.poll_client(i),
        }
    }

    fn next_transfer(&mut self, i: usize, wait: Duration) {
        let a = &mut self.actors[i];
        a.xfer = None;
        a.ready = None;
        a.phase = if a.left == 0 { Phase::Finished } else { Phase::Idle };
        a.wake = self.server.transport().now() + wait;
    }

    fn start(&mut self, i: usize) {
        let seed = self.seed;
        let cfg = self.cfg.clone();
        let r = &mut self.rng;
        let op = if r.chance(cfg.put) { Op::Put } else { Op::Get };
        let size = cfg.min_size.max(1) + r.below(cfg.max_size.saturating_sub(cfg.min_size.max(1)) + 1);
        let behaviour = if r.chance(cfg.cancel) {
            Behaviour::Cancel
        } else if r.chance(cfg.crash) {
            Behaviour::Crash
        } else if op == Op::Get && r.chance(cfg.slow) {
            Behaviour::Slow
        } else {
            Behaviour::Normal
        };
        let (psn, cookie) = (r.next_u32(), r.next_u32() | 1);
        let a = &mut self.actors[i];
        a.left -= 1;
        a.index += 1;
        a.behaviour = behaviour;
        a.object = object(seed, i, a.index, size as usize);
        let (mut x, req) =
            match a.client.begin(a.principal, op, &format!("/bucket/c{i}/o{}", a.index), size, psn, cookie) {
                Ok(v) => v,
                Err(e) => return self.error(format!("begin: {e}")),
            };
        if op == Op::Put
            && let Err(e) = a.client.write_payload(&a.object)
        {
            return self.error(format!("write_payload: {e}"));
        }
        let prepared = match op {
            Op::Get => prepare_get(&mut self.server, &req, &self.actors[i].object, "etag"),
            Op::Put => prepare_put(&mut self.server, &req),
        };
        let reply = match prepared {
            Ok(reply) => reply,
            Err(RcError::Limit(_)) => {
                // Refused: try this transfer again a little later.
                self.stats.refused += 1;
                self.actors[i].left += 1;
                self.actors[i].index -= 1;
                return self.next_transfer(i, Duration::from_micros(200));
            }
            Err(e) => {
                self.error(format!("PREPARE: {e}"));
                return self.next_transfer(i, Duration::ZERO);
            }
        };
        if behaviour == Behaviour::Cancel {
            match self.server.cancel(&reply.session, &self.actors[i].principal) {
                Ok(_) => self.stats.cancelled += 1,
                Err(e) => self.error(format!("CANCEL: {e}")),
            }
            return self.next_transfer(i, Duration::ZERO);
        }
        let a = &mut self.actors[i];
        let post_recv = behaviour != Behaviour::Slow;
        match a.client.connect(&mut x, &reply, post_recv) {
            Ok(ready) => a.ready = Some(ready),
            Err(e) => {
                self.error(format!("connect: {e}"));
                return self.next_transfer(i, Duration::ZERO);
            }
        }
        a.xfer = Some(x);
        self.send_ready(i);
    }

    fn send_ready(&mut self, i: usize) {
        let req = self.actors[i].ready.clone().expect("a READY request");
        match self.server.ready(&req) {
            Ok(ReadyStart::Pending(t)) => {
                let now = self.now();
                let slow_delay = self.cfg.slow_delay;
                let a = &mut self.actors[i];
                let x = a.xfer.as_mut().expect("a transfer");
                match (x.op, a.behaviour) {
                    (Op::Put, Behaviour::Crash) => {}
                    (Op::Put, _) => {
                        if let Err(e) = a.client.start_put(x) {
                            self.error(format!("start_put: {e}"));
                        }
                    }
                    (Op::Get, _) => a.client.ready_sent(x),
                }
                let a = &mut self.actors[i];
                if a.behaviour == Behaviour::Crash {
                    // The client dies: its QP stops answering, and it never
                    // comes back for this session.
                    let x = a.xfer.as_mut().expect("a transfer");
                    let _ = a.client.abandon(x);
                    self.stats.crashed += 1;
                    self.orphans.push(t);
                    return self.next_transfer(i, Duration::ZERO);
                }
                if a.behaviour == Behaviour::Slow && !a.client.recv_posted(a.xfer.as_ref().expect("a transfer")) {
                    a.wake = now + slow_delay;
                }
                a.phase = Phase::Ready(t);
            }
            Ok(ReadyStart::Done) => self.error("READY without a data phase".into()),
            Err(RcError::Limit(_)) => {
                self.stats.refused += 1;
                let a = &mut self.actors[i];
                a.wake = self.server.transport().now() + Duration::from_micros(200);
                a.phase = Phase::Backoff;
            }
            Err(e) => {
                self.error(format!("READY: {e}"));
                self.next_transfer(i, Duration::ZERO);
            }
        }
    }

    fn ready_done(&mut self, i: usize, r: Result<ReadyReply, RcError>) {
        let id = self.actors[i].ready.as_ref().expect("a READY request").session;
        let op = self.actors[i].xfer.as_ref().expect("a transfer").op;
        match r {
            Ok(reply) if reply.outcome == ReadyOutcome::Ok => {
                match op {
                    Op::Get => {
                        if let Err(e) = complete_get(&mut self.server, &id) {
                            self.error(format!("finish_final: {e}"));
                        }
                    }
                    Op::Put => match complete_put(&mut self.server, &id) {
                        Ok(data) => {
                            if data != self.actors[i].object {
                                self.stats.foreign_bytes += data.len() as u64;
                                let what = self.describe(i, &data);
                                self.stats.first_foreign.get_or_insert(what);
                            }
                        }
                        Err(e) => self.error(format!("PUT completion: {e}")),
                    },
                }
                if op == Op::Put {
                    // READY's OK is the PUT's completion: the server has the
                    // bytes. The client's own WRITE completion may never come
                    // (the reaper can destroy the server QP before its ACK
                    // leaves); the next transfer resets the client's QP.
                    let size = self.actors[i].object.len() as u64;
                    self.stats.puts_ok += 1;
                    self.stats.transfers_ok += 1;
                    self.stats.bytes_ok += size;
                    return self.next_transfer(i, Duration::ZERO);
                }
                self.actors[i].phase = Phase::ClientCompletion;
                self.poll_client(i);
            }
            Ok(_busy) => {
                self.stats.busy += 1;
                let a = &mut self.actors[i];
                let x = a.xfer.as_mut().expect("a transfer");
                match a.client.on_busy(x) {
                    Ok(ready) => {
                        a.wake = x.retry_at;
                        a.ready = Some(ready);
                        a.phase = Phase::Backoff;
                    }
                    Err(_) => {
                        // Out of retries: give up; the session expires.
                        let _ = a.client.abandon(x);
                        let _ = self.server.cancel(&id, &self.actors[i].principal);
                        self.next_transfer(i, Duration::ZERO);
                    }
                }
            }
            Err(RcError::Wire { .. }) => {
                self.stats.wire += 1;
                let a = &mut self.actors[i];
                let _ = a.client.abandon(a.xfer.as_mut().expect("a transfer"));
                self.next_transfer(i, Duration::ZERO);
            }
            Err(e) => {
                self.error(format!("READY result: {e}"));
                self.next_transfer(i, Duration::ZERO);
            }
        }
    }

    fn poll_client(&mut self, i: usize) {
        let a = &mut self.actors[i];
        let x = a.xfer.as_mut().expect("a transfer");
        match a.client.poll(x) {
            Ok(None) => {}
            Ok(Some(())) => {
                let size = x.size;
                let mut got = vec![0u8; size as usize];
                if a.client.read_payload(&mut got).is_ok() && got != a.object {
                    self.stats.foreign_bytes += size;
                    let what = self.describe(i, &got);
                    self.stats.first_foreign.get_or_insert(what);
                }
                self.stats.gets_ok += 1;
                self.stats.transfers_ok += 1;
                self.stats.bytes_ok += size;
                self.next_transfer(i, Duration::ZERO);
            }
            Err(e) => {
                // The server said OK, so the client's side must agree.
                let _ = a.client.abandon(x);
                self.error(format!("client completion: {e}"));
                self.next_transfer(i, Duration::ZERO);
            }
        }
    }

    fn describe(&self, i: usize, got: &[u8]) -> String {
        let a = &self.actors[i];
        let x = a.xfer.as_ref();
        let first = got.iter().zip(&a.object).position(|(g, o)| g != o);
        format!(
            "client {i} transfer {} {:?} {:?} of {} bytes at {}, busy retries {:?}: first difference at byte {first:?}",
            a.index,
            x.map(|x| x.op),
            a.behaviour,
            a.object.len(),
            self.now(),
            x.map(|x| x.busy_retries)
        )
    }

    /// Lets every deadline pass and the reaper run (after the fabric healed).
    pub fn settle(&mut self, fabric: &mut impl Fabric) {
        let horizon = self.cfg.server.t_prep.max(self.cfg.server.t_exec) * 2 + Duration::from_millis(1);
        let until = fabric.now() + horizon;
        while fabric.now() < until {
            self.server.progress();
            let next = fabric.next_event_at().unwrap_or(until).min(until);
            fabric.run_until(next.max(fabric.now() + Duration::from_micros(100)).min(until));
        }
        self.server.progress();
        self.server.reap();
    }

    /// The invariants; each broken one is a line of the result.
    pub fn check(&self) -> Vec<String> {
        let mut bad = Vec::new();
        let u = self.server.usage();
        if !self.server.sessions().is_empty() {
            bad.push(format!("{} sessions not terminal: {:?}", u.sessions, self.server.sessions()));
        }
        if (u.sessions, u.staging_bytes, u.qps) != (0, 0, 0) || !u.per_user.is_empty() {
            bad.push(format!("resources held after reaping: {u:?}"));
        }
        if u.leaked_mrs + u.leaked_qps > 0 {
            bad.push(format!("leaked: {} MRs, {} QPs", u.leaked_mrs, u.leaked_qps));
        }
        let l = self.cfg.server.limits;
        if self.stats.max_sessions_seen > l.max_sessions || self.stats.max_staging_seen > l.max_staging_bytes {
            bad.push(format!(
                "limits exceeded: {} sessions, {} staging bytes",
                self.stats.max_sessions_seen, self.stats.max_staging_seen
            ));
        }
        if self.stats.foreign_bytes > 0 {
            bad.push(format!("{} bytes of another transfer's data seen", self.stats.foreign_bytes));
        }
        if !self.stats.errors.is_empty() {
            bad.push(format!("unexpected errors: {:?}", self.stats.errors));
        }
        if !self.finished() {
            bad.push("not every client finished".into());
        }
        bad
    }
}
