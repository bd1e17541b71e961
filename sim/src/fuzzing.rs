//! The RC reference model, shared by the proptest (`sim/tests/model.rs`)
//! and the structured fuzz target (`fuzz/fuzz_targets/sim_rc.rs`). Not a
//! stable API.
//!
//! A [`Case`] is a sequence of the seven send opcodes from node `a` to node
//! `b` over a link with faults. [`run`] executes it and compares what
//! happened with an ideal RC channel: every message delivered exactly once,
//! in order, with its data and immediate intact, every WR completed
//! successfully, and every atomic applied exactly once, in order, to one
//! 8-byte counter at `b` (each returning the value a model counter held
//! before it). When the faults exceed the retry budget (a partition that
//! never heals), RC promises less and the model predicts exactly what: the
//! sender sees a prefix of successes, one RETRY_EXC_ERR, then WR_FLUSH_ERR
//! for the rest; the receiver sees an in-order, intact prefix at least as long
//! as what the sender saw succeed.

use rctb_core::Instant;
use rctb_core::time::Duration;
use rctb_core::transport::*;

use crate::{FaultAction, LinkConfig, LinkFaults, NodeConfig, ScheduledFault, Sim, SimTransport};

/// One slot of registered memory per operation.
pub const SLOT: u64 = 64 * 1024;
/// Largest message a case may carry.
pub const MAX_MESSAGE: u32 = SLOT as u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    /// Compare-and-swap on the shared counter. The case's size decides
    /// the operands: an even size compares with what the model counter
    /// holds (the swap happens), an odd one with something else (it
    /// does not).
    CompareSwap,
    /// Fetch-and-add of the case's size plus one on the shared counter.
    FetchAdd,
}

impl Kind {
    pub const ALL: [Kind; 7] =
        [Kind::Send, Kind::SendImm, Kind::Write, Kind::WriteImm, Kind::Read, Kind::CompareSwap, Kind::FetchAdd];

    pub fn consumes_receive(self) -> bool {
        matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, Kind::CompareSwap | Kind::FetchAdd)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub seed: u64,
    pub mtu: Mtu,
    pub faults: LinkFaults,
    /// Cut the link for good at this virtual time (microseconds).
    pub partition_at_us: Option<u64>,
    /// Operations with message sizes up to [`MAX_MESSAGE`].
    pub ops: Vec<(Kind, u32)>,
}

impl Case {
    /// A case from fuzzer bytes (the `sim_rc` target and its corpus replay):
    /// fault probabilities capped at 20% (corruption at 5%), at most 8
    /// operations of at most 8 KiB (small cases keep the fuzzer fast; the
    /// proptest covers 64 KiB), an optional partition in the first 2 ms.
    /// `None` when the bytes describe no operation.
    pub fn from_bytes(data: &[u8]) -> Option<Case> {
        Case::decode(&mut arbitrary::Unstructured::new(data))
    }

    /// [`Case::from_bytes`] on what `u` holds; the bytes past the case
    /// (there are some only after an eighth operation) stay in `u`.
    pub fn decode(u: &mut arbitrary::Unstructured<'_>) -> Option<Case> {
        let seed: u64 = u.arbitrary().ok()?;
        let mtu = Mtu::ALL[u.int_in_range(0..=4usize).ok()?];
        let mut p = |cap: f64| u.int_in_range(0..=255u8).map(|x| x as f64 / 255.0 * cap);
        let (drop, duplicate, reorder, corrupt) = (p(0.2).ok()?, p(0.2).ok()?, p(0.2).ok()?, p(0.05).ok()?);
        let partition_at_us = if u.ratio(1, 4).ok()? { Some(u.int_in_range(0..=2000u64).ok()?) } else { None };
        let mut ops = Vec::new();
        while ops.len() < 8 && !u.is_empty() {
            let kind = Kind::ALL[u.int_in_range(0..=Kind::ALL.len() - 1).ok()?];
            ops.push((kind, u.int_in_range(0..=8192u32).ok()?));
        }
        if ops.is_empty() {
            return None;
        }
        let faults = LinkFaults {
            drop,
            duplicate,
            reorder,
            reorder_window: Duration::from_micros(20),
            corrupt,
            ..LinkFaults::default()
        };
        Some(Case { seed, mtu, faults, partition_at_us, ops })
    }
}

fn pattern(op: usize, len: u32, salt: u8) -> Vec<u8> {
    (0..len as usize).map(|i| ((i * 7 + op * 13) as u8) ^ salt).collect()
}

fn imm_of(op: usize) -> u32 {
    0xA000_0000 | op as u32
}

/// What the shared counter at `b` holds before the first atomic.
const COUNTER_START: u64 = 0x0123_4567_89AB_CDEF;

/// The model of the shared counter: the verb for atomic `i` of `size`, the
/// value it must return, and the counter moved on as the responder must.
fn atomic_op(counter: &mut u64, i: usize, kind: Kind, size: u32, remote: RemoteAddr) -> (SendOp, u64) {
    let orig = *counter;
    match kind {
        Kind::CompareSwap => {
            let compare = if size.is_multiple_of(2) { orig } else { !orig };
            let swap = (i as u64) << 40 | u64::from(size) << 8 | 0xC5;
            if compare == orig {
                *counter = swap;
            }
            (SendOp::CompareSwap { remote, compare, swap }, orig)
        }
        _ => {
            let add = u64::from(size) + 1;
            *counter = orig.wrapping_add(add);
            (SendOp::FetchAdd { remote, add }, orig)
        }
    }
}

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

const ACCESS: Access =
    Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ).union(Access::REMOTE_ATOMIC);

struct End {
    t: SimTransport,
    cq: CqId,
    qp: QpInfo,
    mr: MrInfo,
}

fn end(sim: &Sim, name: &str, ip: &str, mr_len: u64) -> Result<End, String> {
    let node = sim.add_node(NodeConfig::new(name, ip.parse().map_err(|_| "bad ip")?)).map_err(|e| e.to_string())?;
    let mut t = sim.transport(node);
    let e = |x: TransportError| x.to_string();
    let pd = t.alloc_pd().map_err(e)?;
    let cq = t.create_cq(4096).map_err(e)?;
    let mr = t.reg_mr(pd, mr_len, ACCESS).map_err(e)?;
    let caps = QpCaps { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false, srq: None }).map_err(e)?;
    Ok(End { t, cq, qp, mr })
}

fn connect(me: &mut End, mtu: Mtu, peer_qpn: u32, peer_ip: &str, rq_psn: Psn, sq_psn: Psn) -> Result<(), String> {
    let e = |x: TransportError| x.to_string();
    let access = ACCESS;
    me.t.modify_qp(me.qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access })).map_err(e)?;
    let av = AddressVector::new(Gid::from_ipv4(peer_ip.parse().map_err(|_| "bad ip")?), 1);
    let rtr = RtrAttr {
        path_mtu: mtu,
        dest_qpn: peer_qpn,
        rq_psn,
        max_dest_rd_atomic: 16,
        min_rnr_timer: RnrTimer::from_code(1).map_err(|x| x.to_string())?,
        av,
    };
    me.t.modify_qp(me.qp.id, &QpTransition::Rtr(rtr)).map_err(e)?;
    // A local ACK timeout of ~1 ms and 6 retries: the retry budget (7 would
    // retry forever, as rxe does, and a partition would never end a case).
    let rts = RtsAttr { sq_psn, timeout: 8, retry_cnt: 6, rnr_retry: 7, max_rd_atomic: 16 };
    me.t.modify_qp(me.qp.id, &QpTransition::Rts(rts)).map_err(e)
}

fn completions(e: &mut End, n: usize, limit: Duration) -> Result<Vec<Completion>, String> {
    let deadline = e.t.now() + limit;
    let mut out = Vec::new();
    while out.len() < n {
        e.t.poll_cq(e.cq, n - out.len(), &mut out).map_err(|x| x.to_string())?;
        if out.len() < n && e.t.wait(&[e.cq], deadline).map_err(|x| x.to_string())? == Readiness::TimedOut {
            e.t.poll_cq(e.cq, n - out.len(), &mut out).map_err(|x| x.to_string())?;
            break;
        }
    }
    Ok(out)
}

fn read(e: &End, offset: u64, len: u32) -> Result<Vec<u8>, String> {
    let mut buf = vec![0; len as usize];
    e.t.mr_read(e.mr.id, offset, &mut buf).map_err(|x| x.to_string())?;
    Ok(buf)
}

/// Runs `c` and checks it against the ideal RC channel.
pub fn run(c: &Case) -> Result<(), String> {
    check!(!c.ops.is_empty() && c.ops.len() <= 64, "a case has 1..=64 operations");
    check!(c.ops.iter().all(|&(_, l)| l <= MAX_MESSAGE), "messages are at most {MAX_MESSAGE} bytes");
    let sim = Sim::new(c.seed);
    sim.set_default_link(LinkConfig { latency: Duration::from_micros(2), faults: c.faults });
    let mr_len = SLOT * 2 * (c.ops.len() as u64 + 1);
    let mut a = end(&sim, "a", "10.0.0.1", mr_len)?;
    let mut b = end(&sim, "b", "10.0.0.2", mr_len)?;
    let (pa, pb) = (Psn::wrapping(0x00FF_FFF0), Psn::wrapping(0x1234));
    let (qa, qb) = (a.qp.qpn, b.qp.qpn);
    connect(&mut a, c.mtu, qb, "10.0.0.2", pb, pa)?;
    connect(&mut b, c.mtu, qa, "10.0.0.1", pa, pb)?;
    if let Some(us) = c.partition_at_us {
        let action = FaultAction::Partition { a: "a".into(), b: "b".into() };
        sim.schedule(ScheduledFault { at: Instant::from_nanos(us * 1000), action });
    }
    let e = |x: TransportError| x.to_string();
    // Receives for the ops that consume one, in order, each over its op's slot.
    for (i, &(k, _)) in c.ops.iter().enumerate() {
        if k.consumes_receive() {
            let sge = [Sge::new(b.mr.id, i as u64 * SLOT, SLOT as u32)];
            b.t.post_recv(b.qp.id, &RecvWr::new(i as u64, &sge)).map_err(e)?;
        }
    }
    // The atomics' counter lives in b's first unused slot; `counters[j]` is
    // what the model counter holds after `j` atomics.
    let counter_at = c.ops.len() as u64 * SLOT;
    b.t.mr_write(b.mr.id, counter_at, &COUNTER_START.to_le_bytes()).map_err(e)?;
    let mut counters = vec![COUNTER_START];
    let mut origs = vec![None; c.ops.len()];
    for (i, &(k, len)) in c.ops.iter().enumerate() {
        let slot = i as u64 * SLOT;
        let remote = b.mr.remote(slot);
        let op = match k {
            Kind::Send => SendOp::Send,
            Kind::SendImm => SendOp::SendWithImm { imm: imm_of(i) },
            Kind::Write => SendOp::Write { remote },
            Kind::WriteImm => SendOp::WriteWithImm { remote, imm: imm_of(i) },
            Kind::Read => SendOp::Read { remote },
            Kind::CompareSwap | Kind::FetchAdd => {
                let mut counter = *counters.last().expect("starts with one");
                let (op, orig) = atomic_op(&mut counter, i, k, len, b.mr.remote(counter_at));
                counters.push(counter);
                origs[i] = Some(orig);
                op
            }
        };
        if k.is_atomic() {
            // The original value lands in a's slot, over bytes it is not.
            a.t.mr_write(a.mr.id, slot, &[0xEE; ATOMIC_LEN as usize]).map_err(e)?;
            let sge = [Sge::new(a.mr.id, slot, ATOMIC_LEN)];
            a.t.post_send(a.qp.id, &SendWr::new(i as u64, op, &sge)).map_err(e)?;
            continue;
        }
        let local = if k == Kind::Read {
            // Read b's slot into a's second half.
            b.t.mr_write(b.mr.id, slot, &pattern(i, len, 0x55)).map_err(e)?;
            (c.ops.len() as u64 + 1 + i as u64) * SLOT
        } else {
            a.t.mr_write(a.mr.id, slot, &pattern(i, len, 0)).map_err(e)?;
            slot
        };
        let sge = [Sge::new(a.mr.id, local, len)];
        a.t.post_send(a.qp.id, &SendWr::new(i as u64, op, &sge)).map_err(e)?;
    }
    // RCTB_MODEL_PCAP=FILE keeps the case's traffic for tshark.
    let keep_pcap = std::env::var_os("RCTB_MODEL_PCAP");
    if keep_pcap.is_some() {
        sim.enable_pcap();
    }
    let sent = completions(&mut a, c.ops.len(), Duration::from_secs(30))?;
    if let (Some(path), Some(bytes)) = (keep_pcap, sim.take_pcap()) {
        std::fs::write(path, bytes).map_err(|x| x.to_string())?;
    }
    sim.run_until_idle();
    let mut recvd = Vec::new();
    b.t.poll_cq(b.cq, usize::MAX, &mut recvd).map_err(e)?;

    // Sender: every WR completes once, in order; a prefix of successes, then
    // (only if the retry budget ran out) RETRY_EXC_ERR and flushes.
    check!(sent.len() == c.ops.len(), "{} of {} WRs completed: {sent:?}", sent.len(), c.ops.len());
    let ok = sent.iter().take_while(|w| w.status == WcStatus::Success).count();
    for (i, w) in sent.iter().enumerate() {
        check!(w.wr_id == i as u64, "completion {i} is WR {} (post order broken)", w.wr_id);
        let want = match i.cmp(&ok) {
            std::cmp::Ordering::Less => WcStatus::Success,
            std::cmp::Ordering::Equal => WcStatus::RetryExcErr,
            std::cmp::Ordering::Greater => WcStatus::WrFlushErr,
        };
        check!(w.status == want, "WR {i}: {} (expected {want}); all: {sent:?}", w.status);
        if w.status == WcStatus::Success {
            let expect = match c.ops[i].0 {
                Kind::Send | Kind::SendImm => WcOpcode::Send,
                Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
                Kind::Read => WcOpcode::RdmaRead,
                Kind::CompareSwap => WcOpcode::CompSwap,
                Kind::FetchAdd => WcOpcode::FetchAdd,
            };
            check!(w.opcode == expect, "WR {i}: opcode {:?}", w.opcode);
        }
    }
    if ok < c.ops.len() {
        check!(c.partition_at_us.is_some() || !c.faults.is_clean(), "errors on a clean link: {sent:?}");
    }

    // Receiver: an in-order, exactly-once, intact prefix of the consuming ops,
    // covering at least every consuming op the sender saw succeed.
    let consuming: Vec<usize> = (0..c.ops.len()).filter(|&i| c.ops[i].0.consumes_receive()).collect();
    check!(recvd.len() <= consuming.len(), "{} deliveries for {} messages", recvd.len(), consuming.len());
    let acked = consuming.iter().filter(|&&i| i < ok).count();
    check!(recvd.len() >= acked, "{} delivered < {acked} acknowledged", recvd.len());
    for (r, &i) in recvd.iter().zip(&consuming) {
        let (k, len) = c.ops[i];
        check!(r.status == WcStatus::Success, "receive {i}: {}", r.status);
        check!(r.wr_id == i as u64, "receive {} arrived where {i} was due", r.wr_id);
        check!(r.byte_len == len, "receive {i}: byte_len {} (sent {len})", r.byte_len);
        let want_imm = matches!(k, Kind::SendImm | Kind::WriteImm).then(|| imm_of(i));
        check!(r.imm == want_imm, "receive {i}: imm {:?} (sent {want_imm:?})", r.imm);
        let want_op = if k == Kind::WriteImm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
        check!(r.opcode == want_op, "receive {i}: opcode {:?}", r.opcode);
        check!(read(&b, i as u64 * SLOT, len)? == pattern(i, len, 0), "receive {i}: data differs");
    }
    // Completed WRITEs and READs moved their data.
    for (i, &(k, len)) in c.ops.iter().enumerate().take(ok) {
        match k {
            Kind::Write | Kind::WriteImm => {
                check!(read(&b, i as u64 * SLOT, len)? == pattern(i, len, 0), "write {i}: data differs")
            }
            Kind::Read => {
                let dst = (c.ops.len() as u64 + 1 + i as u64) * SLOT;
                check!(read(&a, dst, len)? == pattern(i, len, 0x55), "read {i}: data differs")
            }
            Kind::CompareSwap | Kind::FetchAdd => {
                let got = u64::from_le_bytes(read(&a, i as u64 * SLOT, ATOMIC_LEN)?.try_into().expect("8 bytes"));
                let want = origs[i].expect("set for atomics");
                check!(got == want, "atomic {i}: returned {got:#018x}, the model counter held {want:#018x}");
            }
            _ => {}
        }
    }
    // The counter saw each atomic exactly once, in order: it holds the model
    // after some prefix of them, at least every acknowledged one, and after
    // all of them when every WR succeeded.
    let held = u64::from_le_bytes(read(&b, counter_at, ATOMIC_LEN)?.try_into().expect("8 bytes"));
    let acked = c.ops[..ok].iter().filter(|(k, _)| k.is_atomic()).count();
    let applied = (acked..counters.len()).find(|&j| counters[j] == held);
    check!(
        applied.is_some(),
        "counter {held:#018x} is no state of the model after {acked} or more atomics: {counters:#x?}"
    );
    if ok == c.ops.len() {
        let want = counters[counters.len() - 1];
        check!(held == want, "counter {held:#018x} after every atomic succeeded, the model holds {want:#018x}");
    }
    Ok(())
}

mod program;

pub use program::{MAX_STEPS, Program, Reached, Step, sim_rc};
