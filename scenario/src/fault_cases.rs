//! The targeted RC fault cases, written once for every backend that can
//! put a fault on chosen packets: the RC machinery of both sides must
//! recover exactly (PSN-gap NAK and go-back-N, duplicate requests, a lost
//! ACK and the requester's timeout, a retry count of 7 that never runs out
//! as rxe treats it, a PSN sequence NAK that arrives twice and starts one
//! retry, not two, and atomics that arrive twice or whose
//! acknowledge is lost: the responder answers the repeat from the result it
//! saved and does not execute it again).
//!
//! A backend says where it puts the fault through a [`FaultPath`]: the UDP
//! endpoint's path hook ([`crate::udp_faults`]: against kernel rxe, or
//! between two UDP endpoints), the simulator's packet rules
//! ([`crate::sim_faults`], in `cargo test` with a seed).
//!
//! Call order: [`run`] takes every case whose name contains the filter; for
//! each, it builds the [`Endpoints`] (setup), runs the case (which calls
//! [`FaultPath::install`] once, posts, waits with bounded deadlines and
//! reads [`FaultPath::recovery`] before and after), then
//! [`FaultPath::clear`] and releases every resource. A case's `Err` is
//! why it failed; a path that cannot put the fault anywhere fails the case
//! with its reason.

use rctb_core::time::Duration;
use rctb_core::transport::*;

use rctb_conformance::{CaseResult, Endpoints, Link, QpPair, completions, expect_wc, pattern, pause};

/// A fault on chosen packets between `a` (the requester) and `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketFault {
    /// Request packet number `n` (from 0) from `a` to `b` is lost, once.
    DropRequest(u32),
    /// The first `n` request packets from `a` to `b` are lost (a partition
    /// of one direction that heals after `n` transmissions).
    DropFirstRequests(u32),
    /// Every request packet from `a` to `b` arrives twice.
    DuplicateRequests,
    /// The first ACK from `b` to `a` is lost.
    DropFirstAck,
    /// The first atomic acknowledge from `b` to `a` is lost.
    DropFirstAtomicAck,
    /// Request packet number `n` from `a` to `b` is lost once, and every
    /// PSN sequence NAK from `b` to `a` arrives twice.
    DropRequestDuplicateNaks(u32),
}

/// Recovery counters a backend can see; `None` where it cannot (the side
/// that is not its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// PSN sequence NAKs the requester received.
    pub naks_received: Option<u64>,
    /// PSN sequence NAKs the responder sent.
    pub naks_sent: Option<u64>,
    /// Request packets the requester sent again.
    pub retransmitted: Option<u64>,
    /// The requester's local ACK timeouts.
    pub timeouts: Option<u64>,
    /// RNR NAKs between the two (the simulator counts those sent; udp
    /// those its requester received, or, when the requester is not its
    /// own, those its responder sent).
    pub rnr_naks: Option<u64>,
}

/// Where a backend puts a case's [`PacketFault`].
pub trait FaultPath<T: Transport> {
    /// Puts `fault` on the path between `x.a` and `x.b`; `Err` says why it
    /// cannot.
    fn install(&mut self, x: &Endpoints<'_, T>, fault: PacketFault) -> Result<(), String>;
    /// Packets the installed fault acted on so far.
    fn acted(&self) -> u64;
    /// Takes the fault away (after every case, also a failed one).
    fn clear(&mut self, x: &Endpoints<'_, T>);
    /// The counters now.
    fn recovery(&self, x: &Endpoints<'_, T>) -> Recovery;
}

/// A case's body.
pub type Case<T, P> = fn(&mut Endpoints<'_, T>, &mut P) -> Result<(), String>;

/// Every case, in the order they run.
pub fn cases<T: Transport, P: FaultPath<T>>() -> Vec<(&'static str, Case<T, P>)> {
    vec![
        ("faults/psn_gap_go_back_n", psn_gap as Case<T, P>),
        ("faults/duplicate_requests", duplicates as Case<T, P>),
        ("faults/lost_ack_timeout", lost_ack as Case<T, P>),
        ("faults/retry_cnt_7_never_runs_out", retry_cnt_7 as Case<T, P>),
        ("faults/duplicated_seq_nak_one_retry", duplicated_seq_nak as Case<T, P>),
        ("faults/atomic_ack_lost_replayed_once", atomic_ack_lost as Case<T, P>),
        ("faults/atomic_duplicated_applied_once", atomic_duplicated as Case<T, P>),
        ("faults/rnr_retry_counted", rnr_retry_counted as Case<T, P>),
    ]
}

/// Runs every case whose name contains `filter`, calling `report` as each
/// finishes.
pub fn run<T: Transport, P: FaultPath<T>>(
    a: &mut T,
    b: &mut T,
    path: &mut P,
    filter: &str,
    report: &mut dyn FnMut(&CaseResult),
) -> Vec<CaseResult> {
    let mut results = Vec::new();
    for (name, case) in cases::<T, P>() {
        if !name.contains(filter) {
            continue;
        }
        let failure = match Endpoints::new(&mut *a, &mut *b) {
            Ok(mut ends) => {
                let outcome = case(&mut ends, path);
                path.clear(&ends);
                match (outcome, ends.release()) {
                    (Ok(()), Ok(())) => None,
                    (Err(why), _) => Some(why),
                    (Ok(()), Err(why)) => Some(format!("cleanup: {why}")),
                }
            }
            Err(why) => Some(format!("setup: {why}")),
        };
        let result = CaseResult { name: name.to_string(), failure };
        report(&result);
        results.push(result);
    }
    results
}

fn e(what: &str, err: TransportError) -> String {
    format!("{what}: {err}")
}

/// Whether a counter the path can see moved (`None`: it cannot see it).
fn moved(before: Option<u64>, after: Option<u64>) -> Option<bool> {
    Some(after? != before?)
}

/// A WRITE of 3 MTU + 5 bytes loses its second packet once: the responder
/// NAKs the PSN gap, the requester goes back to it, the data arrives intact.
fn psn_gap<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    let len = 3 * x.path_mtu().bytes() + 5;
    let (before, after) = write_through(x, path, Link::default(), PacketFault::DropRequest(1), len, 71)?;
    if path.acted() == 0 {
        return Err("no request packet went by to lose".into());
    }
    // Where the path sees a side, that side made the recovery.
    if moved(before.naks_received, after.naks_received) == Some(false) {
        return Err(format!("the requester saw no PSN sequence NAK ({after:?})"));
    }
    if moved(before.retransmitted, after.retransmitted) == Some(false) {
        return Err("the requester retransmitted nothing".into());
    }
    if moved(before.naks_sent, after.naks_sent) == Some(false) {
        return Err("the responder sent no PSN sequence NAK".into());
    }
    Ok(())
}

/// Every request packet of a 3 MTU + 5 byte SEND arrives twice: one receive
/// completes, with the right data, and nothing else completes.
fn duplicates<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    let len = 3 * x.path_mtu().bytes() + 5;
    let src = x.mr(true, len as u64, Access::LOCAL_WRITE)?;
    let dst = x.mr(false, 2 * len as u64, Access::LOCAL_WRITE)?;
    let pair = x.connect(Link::default())?;
    let data = pattern(72, len as usize);
    x.a.mr_write(src.id, 0, &data).map_err(|er| e("mr_write", er))?;
    // Two receives posted: a duplicate taken for a new message would use the second.
    for (i, off) in [(1u64, 0u64), (2, len as u64)] {
        let sge = [Sge::new(dst.id, off, len)];
        x.b.post_recv(pair.b.id, &RecvWr::new(i, &sge)).map_err(|er| e("post_recv", er))?;
    }
    path.install(x, PacketFault::DuplicateRequests)?;
    let sge = [Sge::new(src.id, 0, len)];
    x.a.post_send(pair.a.id, &SendWr::new(1, SendOp::Send, &sge)).map_err(|er| e("post_send", er))?;
    let wa = completions(x.a, &x.sa, 1)?;
    expect_wc(wa.first(), "send", WcStatus::Success, Some(WcOpcode::Send), None, None)?;
    let wb = completions(x.b, &x.sb, 1)?;
    expect_wc(wb.first(), "recv", WcStatus::Success, Some(WcOpcode::Recv), Some(len), None)?;
    if wb.first().map(|c| c.wr_id) != Some(1) {
        return Err(format!("the first receive did not take the message: {wb:?}"));
    }
    let mut got = vec![0; len as usize];
    x.b.mr_read(dst.id, 0, &mut got).map_err(|er| e("mr_read", er))?;
    if got != data {
        return Err("the received data differs".into());
    }
    // Duplicates settle: nothing more completes on either side.
    pause(x.a, Duration::from_millis(30))?;
    pause(x.b, Duration::from_millis(30))?;
    let mut extra = Vec::new();
    x.a.poll_cq(x.sa.cq, 8, &mut extra).map_err(|er| e("poll_cq", er))?;
    x.b.poll_cq(x.sb.cq, 8, &mut extra).map_err(|er| e("poll_cq", er))?;
    if !extra.is_empty() {
        return Err(format!("duplicates completed again: {extra:?}"));
    }
    if path.acted() == 0 {
        return Err("no request packet went by to duplicate".into());
    }
    Ok(())
}

/// One WRITE of `len` bytes from `a` to `b` over `link` while `fault` acts: it
/// must complete successfully with its data intact. The recovery counters
/// before the fault and after the WRITE.
fn write_through<T: Transport, P: FaultPath<T>>(
    x: &mut Endpoints<'_, T>,
    path: &mut P,
    link: Link,
    fault: PacketFault,
    len: u32,
    tag: u32,
) -> Result<(Recovery, Recovery), String> {
    let src = x.mr(true, len as u64, Access::LOCAL_WRITE)?;
    let dst = x.mr(false, len as u64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let pair = x.connect(link)?;
    let data = pattern(tag, len as usize);
    x.a.mr_write(src.id, 0, &data).map_err(|er| e("mr_write", er))?;
    let before = path.recovery(x);
    path.install(x, fault)?;
    let sge = [Sge::new(src.id, 0, len)];
    x.a.post_send(pair.a.id, &SendWr::new(1, SendOp::Write { remote: dst.remote(0) }, &sge))
        .map_err(|er| e("post_send", er))?;
    let wcs = completions(x.a, &x.sa, 1)?;
    expect_wc(wcs.first(), "write", WcStatus::Success, Some(WcOpcode::RdmaWrite), None, None)?;
    let mut got = vec![0; len as usize];
    x.b.mr_read(dst.id, 0, &mut got).map_err(|er| e("mr_read", er))?;
    if got != data {
        return Err("the written data differs".into());
    }
    Ok((before, path.recovery(x)))
}

/// The ACK of a one-packet WRITE is lost once: the requester's local ACK
/// timer fires, it sends the WRITE again, the responder re-ACKs the
/// duplicate, the WRITE completes once.
fn lost_ack<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    // Timeout code 12: 4.096 us * 2^12, about 17 ms.
    let link = Link { timeout: 12, ..Link::default() };
    let (before, after) = write_through(x, path, link, PacketFault::DropFirstAck, 64, 73)?;
    if path.acted() == 0 {
        return Err("no ACK went by to lose".into());
    }
    if moved(before.timeouts, after.timeouts) == Some(false) {
        return Err("the requester's ACK timer never fired".into());
    }
    Ok(())
}

/// Request transmissions lost, more than a budget of 7 retries would
/// cover.
const LOST_TRANSMISSIONS: u32 = 12;

/// A retry count of 7 is never spent (rxe's rule, which the engine
/// follows): the first 12 transmissions of a one-packet WRITE are lost,
/// 12 ACK timeouts pass, and the thirteenth transmission completes it.
fn retry_cnt_7<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    // Timeout code 8: 4.096 us * 2^8, about 1 ms (rxe rounds it up to a jiffy).
    let link = Link { timeout: 8, retry_cnt: 7, ..Link::default() };
    let fault = PacketFault::DropFirstRequests(LOST_TRANSMISSIONS);
    let (before, after) = write_through(x, path, link, fault, 64, 77)?;
    if path.acted() != u64::from(LOST_TRANSMISSIONS) {
        return Err(format!("{} transmissions lost (expected {LOST_TRANSMISSIONS})", path.acted()));
    }
    if let (Some(b), Some(a)) = (before.timeouts, after.timeouts)
        && a - b < u64::from(LOST_TRANSMISSIONS)
    {
        return Err(format!("{} ACK timeouts for {LOST_TRANSMISSIONS} lost transmissions", a - b));
    }
    Ok(())
}

/// A SEND to a responder with no receive posted, `rnr_retry` 2: the
/// requester sends it three times (the first, then a retry per RNR NAK
/// while retries are left), is NAKed three times, and fails
/// RNR_RETRY_EXC_ERR. The conformance case `rnr/retry_exhausted` sees only
/// the status; here the counters show that exactly `rnr_retry` retries ran.
fn rnr_retry_counted<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    const RNR_RETRY: u8 = 2;
    let ma = x.mr(true, 4096, Access::LOCAL_WRITE)?;
    let link = Link { rnr_retry: RNR_RETRY, min_rnr_timer: RnrTimer::from_code(1).expect("code 1"), ..Link::default() };
    let qps = x.connect(link)?;
    let before = path.recovery(x);
    let sge = [Sge::new(ma.id, 0, 64)];
    x.a.post_send(qps.a.id, &SendWr::new(1, SendOp::Send, &sge)).map_err(|err| e("post_send", err))?;
    let sc = completions(x.a, &x.sa, 1)?;
    expect_wc(sc.first(), "the SEND", WcStatus::RnrRetryExcErr, None, None, None)?;
    let after = path.recovery(x);
    let want = u64::from(RNR_RETRY);
    if let (Some(b), Some(a)) = (before.rnr_naks, after.rnr_naks)
        && a - b != want + 1
    {
        return Err(format!("{} RNR NAKs for rnr_retry {RNR_RETRY} (expected {})", a - b, want + 1));
    }
    if let (Some(b), Some(a)) = (before.retransmitted, after.retransmitted)
        && a - b != want
    {
        return Err(format!("{} retransmissions for rnr_retry {RNR_RETRY} (expected {want})", a - b));
    }
    if after.rnr_naks.is_none() && after.retransmitted.is_none() {
        return Err("this path counts neither RNR NAKs nor retransmissions".into());
    }
    Ok(())
}

/// A 4-packet WRITE loses its second packet and the responder's PSN
/// sequence NAK arrives twice, with `retry_cnt` 1. The first NAK spends the
/// one retry and starts it; the second finds that retry under way and is
/// ignored (rxe's `started_retry`), so the WRITE completes. A requester
/// that took the second NAK as a new retry would find none left and fail
/// RETRY_EXC_ERR.
fn duplicated_seq_nak<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    let len = 4 * x.path_mtu().bytes();
    // A 67 ms ACK timeout: the NAKs, not the timer, drive the recovery.
    let link = Link { retry_cnt: 1, timeout: 14, ..Link::default() };
    let (before, after) = write_through(x, path, link, PacketFault::DropRequestDuplicateNaks(1), len, 78)?;
    // One packet lost and at least one NAK doubled.
    if path.acted() < 2 {
        return Err(format!("the fault acted on {} packets (expected a loss and a doubled NAK)", path.acted()));
    }
    // (What the requester's socket counted says nothing here: a copy made
    // on its way in is not counted there.)
    if let (Some(b), Some(a)) = (before.timeouts, after.timeouts)
        && a != b
    {
        return Err(format!("{} ACK timeouts: the NAK's retry should have recovered", a - b));
    }
    Ok(())
}

/// A responder word for atomics, set to `initial`, and a local buffer for
/// the original values; the QPs connected with a 17 ms ACK timeout.
fn atomic_setup<T: Transport>(x: &mut Endpoints<'_, T>, initial: u64) -> Result<(MrInfo, MrInfo, QpPair), String> {
    let local = x.mr(true, 4096, Access::LOCAL_WRITE)?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_ATOMIC;
    let remote = x.mr(false, 4096, access)?;
    x.b.mr_write(remote.id, 0, &initial.to_le_bytes()).map_err(|er| e("mr_write", er))?;
    let pair = x.connect(Link { timeout: 12, ..Link::default() })?;
    Ok((local, remote, pair))
}

fn read_word<T: Transport>(t: &T, mr: &MrInfo, offset: u64) -> Result<u64, String> {
    let mut b = [0u8; 8];
    t.mr_read(mr.id, offset, &mut b).map_err(|er| e("mr_read", er))?;
    Ok(u64::from_le_bytes(b))
}

/// The acknowledge of a fetch-and-add is lost: the requester times out and
/// sends the atomic again, the responder answers it from its saved result.
/// The requester gets the value as first found, and the word grew once.
fn atomic_ack_lost<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    let (local, remote, pair) = atomic_setup(x, 5)?;
    let before = path.recovery(x);
    path.install(x, PacketFault::DropFirstAtomicAck)?;
    let sge = [Sge::new(local.id, 0, ATOMIC_LEN)];
    let op = SendOp::FetchAdd { remote: remote.remote(0), add: 3 };
    x.a.post_send(pair.a.id, &SendWr::new(1, op, &sge)).map_err(|er| e("post_send", er))?;
    let wcs = completions(x.a, &x.sa, 1)?;
    expect_wc(wcs.first(), "fetch-and-add", WcStatus::Success, Some(WcOpcode::FetchAdd), None, None)?;
    if path.acted() == 0 {
        return Err("no atomic acknowledge went by to lose".into());
    }
    let (orig, now) = (read_word(x.a, &local, 0)?, read_word(x.b, &remote, 0)?);
    if (orig, now) != (5, 8) {
        return Err(format!("fetched {orig}, word now {now} (expected 5 and 8: applied once)"));
    }
    if moved(before.timeouts, path.recovery(x).timeouts) == Some(false) {
        return Err("the requester's ACK timer never fired".into());
    }
    Ok(())
}

/// Every request packet arrives twice, across a run of fetch-and-adds and
/// compare-and-swaps: each completes once, with the value its first
/// execution found, and the word shows each applied once.
fn atomic_duplicated<T: Transport, P: FaultPath<T>>(x: &mut Endpoints<'_, T>, path: &mut P) -> Result<(), String> {
    let (local, remote, pair) = atomic_setup(x, 1)?;
    path.install(x, PacketFault::DuplicateRequests)?;
    let r = remote.remote(0);
    let ops = [
        SendOp::FetchAdd { remote: r, add: 1 },
        SendOp::CompareSwap { remote: r, compare: 2, swap: 10 },
        SendOp::FetchAdd { remote: r, add: 5 },
        SendOp::CompareSwap { remote: r, compare: 15, swap: 100 },
    ];
    for (i, op) in ops.iter().enumerate() {
        let sge = [Sge::new(local.id, 8 * i as u64, ATOMIC_LEN)];
        x.a.post_send(pair.a.id, &SendWr::new(i as u64, *op, &sge)).map_err(|er| e("post_send", er))?;
    }
    let wcs = completions(x.a, &x.sa, ops.len())?;
    for (i, op) in ops.iter().enumerate() {
        expect_wc(wcs.get(i), op.name(), WcStatus::Success, Some(op.wc_opcode()), None, None)?;
    }
    for (i, want) in [1u64, 2, 10, 15].into_iter().enumerate() {
        let got = read_word(x.a, &local, 8 * i as u64)?;
        if got != want {
            return Err(format!("atomic {i} fetched {got} (expected {want})"));
        }
    }
    let now = read_word(x.b, &remote, 0)?;
    if now != 100 {
        return Err(format!("the word is {now} (expected 100: each atomic applied once)"));
    }
    pause(x.a, Duration::from_millis(30))?;
    let mut extra = Vec::new();
    x.a.poll_cq(x.sa.cq, 8, &mut extra).map_err(|er| e("poll_cq", er))?;
    if !extra.is_empty() {
        return Err(format!("duplicates completed again: {extra:?}"));
    }
    if path.acted() == 0 {
        return Err("no request packet went by to duplicate".into());
    }
    Ok(())
}
