//! Verbs programs for the `sim_rc` fuzz target: shared receive queues and
//! CQ pressure on a fresh two-node simulator, each verb's answer checked
//! against the rules it may refuse by, each receive completed at most once,
//! every CQ overflow explained by a QP in ERR, and every resource released.
//! Not a stable API.

use rctb_core::time::Duration;
use rctb_core::transport::*;

use super::{ACCESS, Case, run};
use crate::{LinkConfig, LinkFaults, NodeConfig, Sim, SimTransport};
use rctb_engine::fuzzing::WrLedger;

/// Most steps a [`Program`] runs.
pub const MAX_STEPS: usize = 64;
/// Receive buffers of a program: this many slots of [`PROGRAM_SLOT`] bytes.
const PROGRAM_SLOTS: u64 = 64;
const PROGRAM_SLOT: u64 = 1024;
/// Where WRITE with immediate lands at `b` (past the receive slots).
const WRITE_AREA: u64 = PROGRAM_SLOTS * PROGRAM_SLOT;
/// The receiver's own receive queues are this deep (so they fill).
const PROGRAM_RQ: u32 = 4;
/// The sender's send queues.
const PROGRAM_SQ: u32 = 16;

/// One step of a [`Program`], decoded from a 3-byte record `[tag, x, y]`
/// (`tag % 14` picks the step; new steps are appended). Indexes pick, modulo
/// the count, among every SRQ, CQ or pair the program created, destroyed
/// ones included (their verbs must fail with `InvalidHandle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `create_srq` at `b`. `max_wr` 0 and `limit > max_wr` are refused.
    CreateSrq { max_wr: u32, limit: u32 },
    /// `post_srq_recv` of `len` bytes; `bad` puts the SGE outside the region.
    PostSrqRecv { srq: u8, len: u32, bad: bool },
    /// `modify_srq`; a limit above `max_wr` must be `InvalidArgument`.
    ModifySrq { srq: u8, limit: u32 },
    /// `destroy_srq`; `Busy` while a live QP uses it.
    DestroySrq { srq: u8 },
    /// A CQ at `b` of 1..=8 entries: completions overflow it.
    CreateCq { depth: u32 },
    /// A QP at `b` on `recv_cq`, on an SRQ or with a receive queue of its
    /// own, connected to a new QP at `a`.
    CreatePair { recv_cq: u8, srq: Option<u8> },
    /// `post_recv` on the pair's `b` QP (`InvalidArgument` when it has an SRQ).
    PostRecv { pair: u8, len: u32 },
    /// `a` posts to its QP of the pair: SEND, SEND with immediate or WRITE
    /// with immediate (`kind` 0, 1, 2), each taking a receive at `b`.
    Send { pair: u8, kind: u8, len: u32 },
    /// `poll_cq` on one of `b`'s CQs (or, with `sender`, `a`'s).
    PollCq { cq: u8, max: u8, sender: bool },
    /// `poll_async_event` on both nodes until neither has one.
    PollAsync,
    /// Lets virtual time pass.
    Run { us: u64 },
    /// Moves the pair's `b` QP to ERR.
    ErrorQp { pair: u8 },
    /// Destroys both QPs of the pair.
    DestroyPair { pair: u8 },
    /// `destroy_cq` at `b`; `Busy` while a live QP uses it.
    DestroyCq { cq: u8 },
}

impl Step {
    /// The step of one record.
    pub fn from_record(r: [u8; 3]) -> Step {
        let [tag, x, y] = r;
        match tag % 14 {
            0 => Step::CreateSrq {
                max_wr: u32::from(x % 9),
                limit: if y & 0x80 == 0 { 0 } else { u32::from(y & 0x7F) % 11 },
            },
            1 => Step::PostSrqRecv { srq: x & 0x7F, len: u32::from(y) * 4 + 1, bad: x & 0x80 != 0 },
            2 => Step::ModifySrq { srq: x, limit: u32::from(y % 12) },
            3 => Step::DestroySrq { srq: x },
            4 => Step::CreateCq { depth: 1 + u32::from(x % 8) },
            5 => Step::CreatePair { recv_cq: x, srq: (y & 0x80 != 0).then_some(y & 0x7F) },
            6 => Step::PostRecv { pair: x, len: u32::from(y) * 4 + 1 },
            7 => Step::Send { pair: x, kind: y % 3, len: u32::from(y / 3) * 13 },
            8 => Step::PollCq { cq: x & 0x7F, max: 1 + y % 8, sender: x & 0x80 != 0 },
            9 => Step::PollAsync,
            10 => Step::Run { us: u64::from(x) * 16 + u64::from(y) },
            11 => Step::ErrorQp { pair: x },
            12 => Step::DestroyPair { pair: x },
            _ => Step::DestroyCq { cq: x },
        }
    }
}

/// A verbs program between two simulated nodes: `a` sends on RC QPs, `b`
/// receives them through shared receive queues or its QPs' own, on CQs
/// small enough to overflow. The `sim_rc` target runs one on the bytes past
/// a [`Case`]'s eighth operation ([`sim_rc`]).
///
/// [`Program::run`] checks: every verb's error is one the call allows (an
/// out-of-range SRQ limit is `InvalidArgument`, an SRQ or CQ in use is
/// `Busy`, a destroyed handle `InvalidHandle`, a full queue `QueueFull` only
/// when it can be full); every receive completes at most once, on its QP's
/// receive CQ, with a `wr_id` posted to that QP's SRQ (or to the QP); a
/// `CqErr` names a CQ of its node, and on `b` (where every completion is a
/// receive's) one of the QPs receiving on it is in ERR or gone; each armed
/// SRQ limit fires at most once; and at the end everything destroys in
/// order, the PDs deallocate and no resource is left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The simulator's seed.
    pub seed: u64,
    /// Entries of `a`'s one CQ (1..=8 when its send completions overflow it).
    pub send_cq_depth: u32,
    /// RNR retries of `a`'s QPs (7: forever).
    pub rnr_retry: u8,
    /// The link drops packets (2%).
    pub lossy: bool,
    /// At most [`MAX_STEPS`].
    pub steps: Vec<Step>,
}

impl Program {
    /// A header byte (`a`'s CQ depth, RNR retries, loss) then 3-byte steps;
    /// `None` without a step.
    pub fn from_bytes(seed: u64, data: &[u8]) -> Option<Program> {
        let (&h, rest) = data.split_first()?;
        let steps: Vec<Step> =
            rest.chunks_exact(3).take(MAX_STEPS).map(|r| Step::from_record([r[0], r[1], r[2]])).collect();
        if steps.is_empty() {
            return None;
        }
        let send_cq_depth = if h & 0x80 != 0 { 1 + u32::from(h & 7) } else { 256 };
        Some(Program { seed, send_cq_depth, rnr_retry: (h >> 3) & 7, lossy: h & 0x40 != 0, steps })
    }

    /// Runs the program and checks it (see [`Program`]).
    pub fn run(&self) -> Result<(), String> {
        self.run_reached().map(|_| ())
    }

    /// [`Program::run`], saying how far the program got.
    pub fn run_reached(&self) -> Result<Reached, String> {
        let mut b = Bench::new(self)?;
        for (i, &step) in self.steps.iter().enumerate() {
            b.step(step).map_err(|why| format!("step {i} {step:?}: {why}"))?;
        }
        b.finish()
    }
}

/// What a [`Program`] got to (for the seeds' test).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Receives completed from an SRQ.
    pub srq_completions: usize,
    /// `CqErr` events at the receiver and at the sender.
    pub cq_errs: (usize, usize),
    /// `SrqLimitReached` events.
    pub limits: usize,
    /// Verbs refused as the rules say (`InvalidArgument`, `Busy`,
    /// `QueueFull`, `InvalidHandle`).
    pub refused: usize,
}

/// The `sim_rc` target's check: `data` is a [`Case`] ([`Case::decode`]),
/// run against the reference model, and what is left past it a
/// [`Program`], run on a fresh simulator.
pub fn sim_rc(data: &[u8]) -> Result<(), String> {
    let mut u = arbitrary::Unstructured::new(data);
    let Some(case) = Case::decode(&mut u) else { return Ok(()) };
    run(&case).map_err(|why| format!("{why}\ncase: {case:?}"))?;
    if let Some(p) = Program::from_bytes(case.seed, u.take_rest()) {
        p.run().map_err(|why| format!("{why}\nprogram: {p:?}"))?;
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Srq(usize),
    Rq(usize),
    Sq(usize),
}

#[derive(Debug)]
struct SrqSlot {
    id: SrqId,
    max_wr: u32,
    live: bool,
    /// Posted and not seen completed: at least what the SRQ holds.
    outstanding: usize,
    arms: u32,
    fired: u32,
}

#[derive(Debug)]
struct CqSlot {
    id: CqId,
    live: bool,
}

#[derive(Debug)]
struct Pair {
    a: QpInfo,
    b: QpInfo,
    srq: Option<usize>,
    recv_cq: usize,
    live: bool,
    /// Posted to the QP's own receive queue and not seen completed.
    outstanding: usize,
}

struct Bench {
    sim: Sim,
    a: SimTransport,
    b: SimTransport,
    a_pd: PdId,
    b_pd: PdId,
    a_mr: MrInfo,
    b_mr: MrInfo,
    a_cq: CqId,
    rnr_retry: u8,
    srqs: Vec<SrqSlot>,
    cqs: Vec<CqSlot>,
    pairs: Vec<Pair>,
    ledger: WrLedger<Owner>,
    reached: Reached,
}

fn pick<T>(v: &[T], i: u8) -> Option<usize> {
    (!v.is_empty()).then(|| usize::from(i) % v.len())
}

fn is_handle(r: &Result<(), TransportError>) -> bool {
    matches!(r, Err(TransportError::InvalidHandle { .. }))
}

const A_IP: &str = "10.0.0.1";
const B_IP: &str = "10.0.0.2";

impl Bench {
    fn new(p: &Program) -> Result<Bench, String> {
        let e = |x: TransportError| x.to_string();
        let sim = Sim::new(p.seed);
        let faults = if p.lossy { LinkFaults { drop: 0.02, ..LinkFaults::default() } } else { LinkFaults::default() };
        sim.set_default_link(LinkConfig { latency: Duration::from_micros(2), faults });
        let node = |name: &str, ip: &str| {
            sim.add_node(NodeConfig::new(name, ip.parse().map_err(|_| "bad ip")?)).map_err(|e| e.to_string())
        };
        let (na, nb) = (node("a", A_IP)?, node("b", B_IP)?);
        let (mut a, mut b) = (sim.transport(na), sim.transport(nb));
        let a_pd = a.alloc_pd().map_err(e)?;
        let b_pd = b.alloc_pd().map_err(e)?;
        let a_mr = a.reg_mr(a_pd, 4096, ACCESS).map_err(e)?;
        let b_mr = b.reg_mr(b_pd, WRITE_AREA + 4096, ACCESS).map_err(e)?;
        let a_cq = a.create_cq(p.send_cq_depth).map_err(e)?;
        // `b`'s first CQ is roomy; the program adds small ones.
        let first = b.create_cq(64).map_err(e)?;
        Ok(Bench {
            sim,
            a,
            b,
            a_pd,
            b_pd,
            a_mr,
            b_mr,
            a_cq,
            rnr_retry: p.rnr_retry,
            srqs: Vec::new(),
            cqs: vec![CqSlot { id: first, live: true }],
            pairs: Vec::new(),
            ledger: WrLedger::default(),
            reached: Reached::default(),
        })
    }

    /// Counts a verb's refusal (one the checks after it let pass).
    fn note<T>(&mut self, r: &Result<T, TransportError>) {
        self.reached.refused += usize::from(r.is_err());
    }

    fn step(&mut self, step: Step) -> Result<(), String> {
        match step {
            Step::CreateSrq { max_wr, limit } => {
                let r = self.b.create_srq(&SrqInit { pd: self.b_pd, max_wr, max_sge: 1, limit });
                self.note(&r);
                match r {
                    Ok(id) => {
                        check!(max_wr > 0 && limit <= max_wr, "created with max_wr {max_wr}, limit {limit}");
                        let arms = u32::from(limit > 0);
                        self.srqs.push(SrqSlot { id, max_wr, live: true, outstanding: 0, arms, fired: 0 });
                    }
                    Err(TransportError::InvalidArgument { .. }) => {
                        check!(max_wr == 0 || limit > max_wr, "refused max_wr {max_wr}, limit {limit}: {r:?}")
                    }
                    Err(e) => return Err(format!("create_srq: {e}")),
                }
            }
            Step::PostSrqRecv { srq, len, bad } => {
                let Some(s) = pick(&self.srqs, srq) else { return Ok(()) };
                let slot = self.ledger.next_id() % PROGRAM_SLOTS * PROGRAM_SLOT;
                let offset = if bad { self.b_mr.len } else { slot };
                let sge = [Sge::new(self.b_mr.id, offset, len.min(PROGRAM_SLOT as u32))];
                let id = self.ledger.next_id();
                let r = self.b.post_srq_recv(self.srqs[s].id, &RecvWr::new(id, &sge));
                self.note(&r);
                let slot = &self.srqs[s];
                match r {
                    Ok(()) => {
                        check!(slot.live, "posted to a destroyed SRQ");
                        self.ledger.post(Owner::Srq(s), sge[0].len);
                        self.srqs[s].outstanding += 1;
                    }
                    Err(TransportError::QueueFull { .. }) => check!(
                        slot.live && slot.outstanding >= slot.max_wr as usize,
                        "QueueFull with {} of {} outstanding",
                        slot.outstanding,
                        slot.max_wr
                    ),
                    Err(TransportError::InvalidHandle { .. }) => check!(!slot.live, "a live SRQ is unknown"),
                    Err(e) => return Err(format!("post_srq_recv: {e}")),
                }
            }
            Step::ModifySrq { srq, limit } => {
                let Some(s) = pick(&self.srqs, srq) else { return Ok(()) };
                let r = self.b.modify_srq(self.srqs[s].id, limit);
                self.note(&r);
                let slot = &mut self.srqs[s];
                match r {
                    Ok(()) => {
                        check!(slot.live && limit <= slot.max_wr, "limit {limit} of {} taken", slot.max_wr);
                        slot.arms += u32::from(limit > 0);
                    }
                    Err(TransportError::InvalidArgument { .. }) => {
                        check!(slot.live && limit > slot.max_wr, "limit {limit} of {} refused", slot.max_wr)
                    }
                    Err(TransportError::InvalidHandle { .. }) => check!(!slot.live, "a live SRQ is unknown"),
                    Err(e) => return Err(format!("modify_srq: {e}")),
                }
            }
            Step::DestroySrq { srq } => {
                let Some(s) = pick(&self.srqs, srq) else { return Ok(()) };
                let users = self.pairs.iter().filter(|p| p.live && p.srq == Some(s)).count();
                let r = self.b.destroy_srq(self.srqs[s].id);
                self.note(&r);
                let live = self.srqs[s].live;
                match r {
                    Ok(()) => {
                        check!(live && users == 0, "destroyed (live {live}, {users} QPs on it)");
                        self.srqs[s].live = false;
                    }
                    Err(TransportError::Busy { .. }) => check!(live && users > 0, "Busy without a QP on it"),
                    Err(TransportError::InvalidHandle { .. }) => check!(!live, "a live SRQ is unknown"),
                    Err(e) => return Err(format!("destroy_srq: {e}")),
                }
            }
            Step::CreateCq { depth } => {
                let id = self.b.create_cq(depth).map_err(|e| format!("create_cq({depth}): {e}"))?;
                self.cqs.push(CqSlot { id, live: true });
            }
            Step::CreatePair { recv_cq, srq } => self.create_pair(recv_cq, srq)?,
            Step::PostRecv { pair, len } => {
                let Some(p) = pick(&self.pairs, pair) else { return Ok(()) };
                let slot = self.ledger.next_id() % PROGRAM_SLOTS * PROGRAM_SLOT;
                let sge = [Sge::new(self.b_mr.id, slot, len.min(PROGRAM_SLOT as u32))];
                let r = self.b.post_recv(self.pairs[p].b.id, &RecvWr::new(self.ledger.next_id(), &sge));
                self.note(&r);
                let pr = &self.pairs[p];
                match r {
                    Ok(()) => {
                        check!(pr.live && pr.srq.is_none(), "post_recv taken (live {}, srq {:?})", pr.live, pr.srq);
                        self.ledger.post(Owner::Rq(p), sge[0].len);
                        self.pairs[p].outstanding += 1;
                    }
                    Err(TransportError::InvalidArgument { .. }) => {
                        check!(pr.live && pr.srq.is_some(), "post_recv refused on a QP without an SRQ: {r:?}")
                    }
                    Err(TransportError::QueueFull { .. }) => check!(
                        pr.live && pr.srq.is_none() && pr.outstanding >= PROGRAM_RQ as usize,
                        "QueueFull with {} outstanding",
                        pr.outstanding
                    ),
                    Err(TransportError::InvalidHandle { .. }) => check!(!pr.live, "a live QP is unknown"),
                    Err(e) => return Err(format!("post_recv: {e}")),
                }
            }
            Step::Send { pair, kind, len } => {
                let Some(p) = pick(&self.pairs, pair) else { return Ok(()) };
                let op = match kind {
                    0 => SendOp::Send,
                    1 => SendOp::SendWithImm { imm: 0x5000_0000 | self.ledger.next_id() as u32 },
                    _ => {
                        SendOp::WriteWithImm { remote: self.b_mr.remote(WRITE_AREA), imm: self.ledger.next_id() as u32 }
                    }
                };
                let sge = [Sge::new(self.a_mr.id, 0, len.min(4096))];
                let r = self.a.post_send(self.pairs[p].a.id, &SendWr::new(self.ledger.next_id(), op, &sge));
                self.note(&r);
                let live = self.pairs[p].live;
                match r {
                    Ok(()) => {
                        check!(live, "posted to a destroyed QP");
                        self.ledger.post(Owner::Sq(p), len);
                    }
                    Err(TransportError::InvalidHandle { .. }) => check!(!live, "a live QP is unknown"),
                    // The send queue is full, or the QP went to ERR.
                    Err(TransportError::QueueFull { .. } | TransportError::InvalidState { .. }) => {
                        check!(live, "{r:?} from a destroyed QP")
                    }
                    Err(e) => return Err(format!("post_send: {e}")),
                }
            }
            Step::PollCq { cq, max, sender } => {
                if sender {
                    let mut out = Vec::new();
                    self.a.poll_cq(self.a_cq, usize::from(max), &mut out).map_err(|e| format!("poll_cq at a: {e}"))?;
                    for w in &out {
                        self.check_send(w)?;
                    }
                } else if let Some(c) = pick(&self.cqs, cq) {
                    self.poll_b(c, usize::from(max))?;
                }
            }
            Step::PollAsync => self.poll_async()?,
            Step::Run { us } => self.sim.run_until(self.sim.now() + Duration::from_micros(us)),
            Step::ErrorQp { pair } => {
                let Some(p) = pick(&self.pairs, pair) else { return Ok(()) };
                let r = self.b.modify_qp(self.pairs[p].b.id, &QpTransition::Err);
                self.note(&r);
                let live = self.pairs[p].live;
                check!(if live { r.is_ok() } else { is_handle(&r) }, "modify_qp(ERR) (live {live}): {r:?}");
            }
            Step::DestroyPair { pair } => {
                let Some(p) = pick(&self.pairs, pair) else { return Ok(()) };
                let (ra, rb) = (self.a.destroy_qp(self.pairs[p].a.id), self.b.destroy_qp(self.pairs[p].b.id));
                self.note(&rb);
                let live = self.pairs[p].live;
                check!(
                    if live { ra.is_ok() && rb.is_ok() } else { is_handle(&ra) && is_handle(&rb) },
                    "destroy_qp (live {live}): {ra:?} {rb:?}"
                );
                self.pairs[p].live = false;
            }
            Step::DestroyCq { cq } => {
                let Some(c) = pick(&self.cqs, cq) else { return Ok(()) };
                let users = self.pairs.iter().filter(|p| p.live && p.recv_cq == c).count();
                let r = self.b.destroy_cq(self.cqs[c].id);
                self.note(&r);
                let live = self.cqs[c].live;
                match r {
                    Ok(()) => {
                        check!(live && users == 0, "destroyed (live {live}, {users} QPs on it)");
                        self.cqs[c].live = false;
                    }
                    Err(TransportError::Busy { .. }) => check!(live && users > 0, "Busy without a QP on it"),
                    Err(TransportError::InvalidHandle { .. }) => check!(!live, "a live CQ is unknown"),
                    Err(e) => return Err(format!("destroy_cq: {e}")),
                }
            }
        }
        Ok(())
    }

    fn create_pair(&mut self, recv_cq: u8, srq: Option<u8>) -> Result<(), String> {
        let e = |x: TransportError| x.to_string();
        let Some(c) = pick(&self.cqs, recv_cq) else { return Ok(()) };
        let s = match srq {
            Some(i) => match pick(&self.srqs, i) {
                Some(s) => Some(s),
                None => return Ok(()),
            },
            None => None,
        };
        let caps = QpCaps {
            max_send_wr: PROGRAM_SQ,
            max_recv_wr: PROGRAM_RQ,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let cq = self.cqs[c].id;
        let init = QpInit {
            pd: self.b_pd,
            send_cq: cq,
            recv_cq: cq,
            caps,
            sq_sig_all: false,
            srq: s.map(|s| self.srqs[s].id),
        };
        let r = self.b.create_qp(&init);
        self.note(&r);
        let usable = self.cqs[c].live && s.is_none_or(|s| self.srqs[s].live);
        let bq = match r {
            Ok(q) => {
                check!(usable, "a QP on a destroyed CQ or SRQ");
                q
            }
            Err(TransportError::InvalidHandle { .. }) => {
                check!(!usable, "create_qp refused live handles");
                return Ok(());
            }
            Err(x) => return Err(format!("create_qp at b: {x}")),
        };
        let init = QpInit { pd: self.a_pd, send_cq: self.a_cq, recv_cq: self.a_cq, caps, sq_sig_all: false, srq: None };
        let aq = self.a.create_qp(&init).map_err(e)?;
        let (pa, pb) = (Psn::wrapping(0x00FF_FFFE), Psn::wrapping(0x77));
        ready(&mut self.b, bq.id, aq.qpn, A_IP, pa, pb, 7).map_err(|x| format!("b's QP to RTS: {x}"))?;
        ready(&mut self.a, aq.id, bq.qpn, B_IP, pb, pa, self.rnr_retry).map_err(|x| format!("a's QP to RTS: {x}"))?;
        self.pairs.push(Pair { a: aq, b: bq, srq: s, recv_cq: c, live: true, outstanding: 0 });
        Ok(())
    }

    fn poll_b(&mut self, c: usize, max: usize) -> Result<(), String> {
        let mut out = Vec::new();
        let r = self.b.poll_cq(self.cqs[c].id, max, &mut out);
        self.note(&r);
        match r {
            Ok(n) => check!(self.cqs[c].live && n == out.len() && n <= max, "poll_cq: {n} of {max}, {out:?}"),
            Err(TransportError::InvalidHandle { .. }) => check!(!self.cqs[c].live, "a live CQ is unknown"),
            Err(e) => return Err(format!("poll_cq at b: {e}")),
        }
        for w in &out {
            self.check_recv(c, w)?;
        }
        Ok(())
    }

    /// A completion at `b`: a receive, at most once, of its QP's SRQ or RQ.
    fn check_recv(&mut self, c: usize, w: &Completion) -> Result<(), String> {
        let Some(p) = self.pairs.iter().position(|p| p.b.id == w.qp) else {
            return Err(format!("a completion for no QP of b: {w:?}"));
        };
        check!(self.pairs[p].recv_cq == c, "{w:?} on CQ {c}, its QP receives on {}", self.pairs[p].recv_cq);
        let want = match self.pairs[p].srq {
            Some(s) => Owner::Srq(s),
            None => Owner::Rq(p),
        };
        self.ledger.complete_recv(want, w)?;
        match want {
            Owner::Srq(s) => {
                self.srqs[s].outstanding -= 1;
                self.reached.srq_completions += 1;
            }
            _ => self.pairs[p].outstanding -= 1,
        }
        Ok(())
    }

    /// A completion at `a`: a send of the QP's, at most once.
    fn check_send(&mut self, w: &Completion) -> Result<(), String> {
        let Some(p) = self.pairs.iter().position(|p| p.a.id == w.qp) else {
            return Err(format!("a completion for no QP of a: {w:?}"));
        };
        self.ledger.complete(Owner::Sq(p), w).map(|_| ())
    }

    fn poll_async(&mut self) -> Result<(), String> {
        loop {
            let (ea, eb) = (self.a.poll_async_event(), self.b.poll_async_event());
            let (ea, eb) = (ea.map_err(|e| e.to_string())?, eb.map_err(|e| e.to_string())?);
            if ea.is_none() && eb.is_none() {
                return Ok(());
            }
            match ea {
                None => {}
                Some(AsyncEvent::CqErr { cq }) => {
                    check!(cq == self.a_cq, "CqErr at a names {cq}");
                    self.reached.cq_errs.1 += 1;
                }
                Some(AsyncEvent::QpFatal { qp } | AsyncEvent::QpLastWqeReached { qp }) => {
                    check!(self.pairs.iter().any(|p| p.a.id == qp), "{ea:?} names no QP of a")
                }
                Some(ev) => return Err(format!("{ev:?} at a, which has no SRQ")),
            }
            match eb {
                None => {}
                Some(AsyncEvent::CqErr { cq }) => {
                    let Some(c) = self.cqs.iter().position(|s| s.id == cq) else {
                        return Err(format!("CqErr at b names {cq}, never a CQ of b"));
                    };
                    // Every completion at `b` is a receive's: one that did not
                    // fit moved its QP to ERR (or it was flushed from one).
                    let mut users = 0;
                    let mut in_err = false;
                    for p in self.pairs.iter().filter(|p| p.recv_cq == c) {
                        users += 1;
                        in_err |= !p.live
                            || self.b.query_qp(p.b.id).map_err(|e| format!("query_qp: {e}"))?.state == QpState::Err;
                    }
                    check!(users > 0, "CqErr on CQ {c}, on which no QP receives");
                    check!(in_err, "CqErr on CQ {c}, yet none of its {users} QPs is in ERR");
                    self.reached.cq_errs.0 += 1;
                }
                Some(AsyncEvent::SrqLimitReached { srq }) => {
                    let Some(s) = self.srqs.iter_mut().find(|s| s.id == srq) else {
                        return Err(format!("SrqLimitReached names {srq}, never an SRQ of b"));
                    };
                    s.fired += 1;
                    check!(s.fired <= s.arms, "limit of {srq} fired {} times, armed {}", s.fired, s.arms);
                    self.reached.limits += 1;
                }
                Some(AsyncEvent::QpFatal { qp } | AsyncEvent::QpLastWqeReached { qp }) => {
                    check!(self.pairs.iter().any(|p| p.b.id == qp), "{eb:?} names no QP of b")
                }
                Some(ev) => return Err(format!("{ev:?} at b")),
            }
        }
    }

    /// Lets the traffic end, takes what is left, destroys everything in
    /// order: each must succeed, and nothing may be left.
    fn finish(mut self) -> Result<Reached, String> {
        self.sim.run_until(self.sim.now() + Duration::from_millis(100));
        self.poll_async()?;
        for c in 0..self.cqs.len() {
            if self.cqs[c].live {
                self.poll_b(c, usize::MAX)?;
            }
        }
        let mut out = Vec::new();
        self.a.poll_cq(self.a_cq, usize::MAX, &mut out).map_err(|e| format!("poll_cq at a: {e}"))?;
        for w in &out {
            self.check_send(w)?;
        }
        let e = |what: &str, x: TransportError| format!("teardown: {what}: {x}");
        for p in self.pairs.iter().filter(|p| p.live) {
            self.b.destroy_qp(p.b.id).map_err(|x| e("destroy_qp at b", x))?;
            self.a.destroy_qp(p.a.id).map_err(|x| e("destroy_qp at a", x))?;
        }
        for s in self.srqs.iter().filter(|s| s.live) {
            self.b.destroy_srq(s.id).map_err(|x| e("destroy_srq", x))?;
        }
        for c in self.cqs.iter().filter(|c| c.live) {
            self.b.destroy_cq(c.id).map_err(|x| e("destroy_cq at b", x))?;
        }
        self.a.destroy_cq(self.a_cq).map_err(|x| e("destroy_cq at a", x))?;
        self.a.dereg_mr(self.a_mr.id).map_err(|x| e("dereg_mr at a", x))?;
        self.b.dereg_mr(self.b_mr.id).map_err(|x| e("dereg_mr at b", x))?;
        self.a.dealloc_pd(self.a_pd).map_err(|x| e("dealloc_pd at a", x))?;
        self.b.dealloc_pd(self.b_pd).map_err(|x| e("dealloc_pd at b", x))?;
        let left = self.sim.live_resources();
        check!(left == crate::LiveResources::default(), "left after teardown: {left:?}");
        Ok(self.reached)
    }
}

/// RESET to RTS, with a ~1 ms ACK timeout, 3 retries and a 0.32 ms RNR timer.
fn ready(
    t: &mut SimTransport,
    qp: QpId,
    peer_qpn: u32,
    peer_ip: &str,
    rq_psn: Psn,
    sq_psn: Psn,
    rnr_retry: u8,
) -> Result<(), TransportError> {
    t.modify_qp(qp, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: ACCESS }))?;
    let ip = peer_ip.parse().map_err(|_| TransportError::invalid(Verb::ModifyQp, "peer_ip", 0, "an IPv4 address"))?;
    let rtr = RtrAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: peer_qpn,
        rq_psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: RnrTimer::from_code(10)
            .map_err(|_| TransportError::invalid(Verb::ModifyQp, "min_rnr_timer", 10, "a timer code"))?,
        av: AddressVector::new(Gid::from_ipv4(ip), 1),
    };
    t.modify_qp(qp, &QpTransition::Rtr(rtr))?;
    t.modify_qp(qp, &QpTransition::Rts(RtsAttr { sq_psn, timeout: 8, retry_cnt: 3, rnr_retry, max_rd_atomic: 1 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed `sim_rc` corpus through the whole target check (the
    /// integration test replays only its cases).
    #[test]
    fn corpus_passes_the_whole_sim_rc_check() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        match rctb_core::fuzzing::replay(&repo, "sim_rc", sim_rc) {
            Ok(n) => assert!(n > 0),
            Err(failures) => panic!("corpus failures:\n{failures}"),
        }
    }

    fn seed(name: &str) -> Reached {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/sim_rc").join(name);
        let data = std::fs::read(path).expect("seed");
        let mut u = arbitrary::Unstructured::new(&data);
        let case = Case::decode(&mut u).expect("a case");
        run(&case).expect("the case passes");
        let p = Program::from_bytes(case.seed, u.take_rest()).expect("a program past the case");
        p.run_reached().unwrap_or_else(|why| panic!("{why}\n{p:?}"))
    }

    /// The hand-made seeds reach SRQ receives, both kinds of CQ overflow,
    /// the SRQ limit and the refusals, so the fuzzer starts there.
    #[test]
    fn program_seeds_reach_srqs_and_overflows() {
        let r = seed("srq-overflow");
        assert!(r.srq_completions >= 3 && r.limits >= 1 && r.cq_errs.0 >= 1 && r.cq_errs.1 >= 1, "{r:?}");
        assert!(r.refused >= 5, "{r:?}");
        let r = seed("srq-rnr-late");
        assert!(r.srq_completions >= 1 && r.cq_errs.0 >= 1 && r.refused >= 4, "{r:?}");
    }
}
