//! The atomic cases: compare-and-swap and fetch-and-add on a remote 8-byte
//! word, their completions and original values, the resources they share
//! with READ, and the errors verbs and rxe give for a region or QP without
//! remote atomic access, a misaligned address and a wrong local length.
//!
//! Remote words hold their value in the host's byte order (little-endian:
//! x86 and Arm Linux, and the simulator), as the verbs backend sees it.

use rctb_core::transport::*;

use crate::CaseFn;
use crate::harness::{Endpoints, Link, QP_ACCESS_ALL, QpPair, completions, expect_wc};

/// Every case, in the order they run.
pub(crate) fn cases<T: Transport>() -> Vec<(String, CaseFn<T>)> {
    let v: [(&str, CaseFn<T>); 7] = [
        ("atomic/fetch_add", fetch_add),
        ("atomic/compare_swap", compare_swap),
        ("atomic/shares_rd_atomic_with_read", shares_rd_atomic_with_read),
        ("atomic/rem_access_err/without_remote_atomic", without_remote_atomic),
        ("atomic/qp_without_remote_atomic", qp_without_remote_atomic),
        ("atomic/misaligned", misaligned),
        ("atomic/local_length_not_8", local_length_not_8),
    ];
    v.into_iter().map(|(n, f)| (n.to_string(), f)).collect()
}

const WORD: u32 = ATOMIC_LEN;

/// A region on each side for atomics: `a`'s receives the original values,
/// `b`'s holds the word, set to `initial` at `offset`.
struct Words {
    local: MrInfo,
    remote: MrInfo,
}

fn words<T: Transport>(x: &mut Endpoints<'_, T>, remote_access: Access, initial: u64) -> Result<Words, String> {
    let local = x.mr(true, 4096, Access::LOCAL_WRITE)?;
    let remote = x.mr(false, 4096, remote_access)?;
    if remote.addr % WORD as u64 != 0 {
        return Err(format!("the responder's region starts at {:#x}, not 8-byte aligned", remote.addr));
    }
    x.b.mr_write(remote.id, 64, &initial.to_le_bytes()).map_err(|e| format!("mr_write: {e}"))?;
    Ok(Words { local, remote })
}

fn word<T: Transport>(t: &T, mr: &MrInfo, offset: u64) -> Result<u64, String> {
    let mut b = [0u8; 8];
    t.mr_read(mr.id, offset, &mut b).map_err(|e| format!("mr_read: {e}"))?;
    Ok(u64::from_le_bytes(b))
}

/// Posts `op` on `a` with the 8 bytes at `local_off` of `w.local`, waits for
/// its completion and checks it; returns the original value it fetched.
fn atomic<T: Transport>(
    x: &mut Endpoints<'_, T>,
    qps: QpPair,
    w: &Words,
    wr_id: u64,
    op: SendOp,
) -> Result<u64, String> {
    let local_off = 8 * wr_id;
    let sge = [Sge::new(w.local.id, local_off, WORD)];
    x.a.post_send(qps.a.id, &SendWr::new(wr_id, op, &sge)).map_err(|e| format!("post_send {}: {e}", op.name()))?;
    let wc = completions(x.a, &x.sa, 1)?;
    expect_wc(wc.first(), op.name(), WcStatus::Success, Some(op.wc_opcode()), Some(WORD), None)?;
    if wc[0].wr_id != wr_id {
        return Err(format!("{}: wr_id {} (expected {wr_id})", op.name(), wc[0].wr_id));
    }
    word(x.a, &w.local, local_off)
}

fn expect_eq(what: &str, got: u64, want: u64) -> Result<(), String> {
    if got == want { Ok(()) } else { Err(format!("{what}: {got:#x} (expected {want:#x})")) }
}

/// FetchAdd returns the old value and adds, wrapping at 2^64.
fn fetch_add<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let initial = 0x0102_0304_0506_0708;
    let w = words(x, QP_ACCESS_ALL, initial)?;
    let qps = x.connect(Link::default())?;
    let remote = w.remote.remote(64);
    let got = atomic(x, qps, &w, 1, SendOp::FetchAdd { remote, add: 5 })?;
    expect_eq("first fetch-and-add's original value", got, initial)?;
    // Adding 2^64 - 1 subtracts one.
    let got = atomic(x, qps, &w, 2, SendOp::FetchAdd { remote, add: u64::MAX })?;
    expect_eq("second fetch-and-add's original value", got, initial + 5)?;
    expect_eq("the remote word", word(x.b, &w.remote, 64)?, initial + 4)?;
    // The bytes around the word are untouched.
    expect_eq("the word after it", word(x.b, &w.remote, 72)?, 0)
}

/// CompareSwap swaps when the word equals `compare`, and leaves it when it
/// does not; both return the word as found.
fn compare_swap<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let initial = 0xDEAD_BEEF_0000_0001;
    let w = words(x, QP_ACCESS_ALL, initial)?;
    let qps = x.connect(Link::default())?;
    let remote = w.remote.remote(64);
    let got = atomic(x, qps, &w, 1, SendOp::CompareSwap { remote, compare: initial, swap: 42 })?;
    expect_eq("matching compare-and-swap's original value", got, initial)?;
    expect_eq("the word after a matching compare", word(x.b, &w.remote, 64)?, 42)?;
    let got = atomic(x, qps, &w, 2, SendOp::CompareSwap { remote, compare: initial, swap: 7 })?;
    expect_eq("failing compare-and-swap's original value", got, 42)?;
    expect_eq("the word after a failing compare", word(x.b, &w.remote, 64)?, 42)
}

/// READs and atomics posted together with one outstanding at a time
/// (`max_rd_atomic` 1, `max_dest_rd_atomic` 1): each waits for the one before
/// it, and all complete in order with the right values.
fn shares_rd_atomic_with_read<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let w = words(x, QP_ACCESS_ALL, 100)?;
    let qps = x.connect(Link { max_rd_atomic: 1, max_dest_rd_atomic: 1, ..Link::default() })?;
    let remote = w.remote.remote(64);
    let ops = [
        SendOp::FetchAdd { remote, add: 1 },
        SendOp::Read { remote },
        SendOp::CompareSwap { remote, compare: 101, swap: 500 },
        SendOp::Read { remote },
        SendOp::FetchAdd { remote, add: 10 },
    ];
    for (i, op) in ops.iter().enumerate() {
        let sge = [Sge::new(w.local.id, 8 * i as u64, WORD)];
        x.a.post_send(qps.a.id, &SendWr::new(i as u64, *op, &sge)).map_err(|e| format!("post_send {i}: {e}"))?;
    }
    let wcs = completions(x.a, &x.sa, ops.len())?;
    for (i, op) in ops.iter().enumerate() {
        expect_wc(wcs.get(i), &format!("WR {i} ({})", op.name()), WcStatus::Success, Some(op.wc_opcode()), None, None)?;
        if wcs[i].wr_id != i as u64 {
            return Err(format!("completion {i} is WR {} (out of order)", wcs[i].wr_id));
        }
    }
    // What each fetched, in order: 100, then 101 read, 101 swapped for 500, 500 read, 500 + 10.
    for (i, want) in [100u64, 101, 101, 500, 500].into_iter().enumerate() {
        expect_eq(&format!("WR {i}'s value"), word(x.a, &w.local, 8 * i as u64)?, want)?;
    }
    expect_eq("the remote word", word(x.b, &w.remote, 64)?, 510)
}

/// Expects the requester's one WR to fail with `status` and its QP in ERR,
/// the remote word unchanged.
fn expect_failure<T: Transport>(
    x: &mut Endpoints<'_, T>,
    qps: QpPair,
    w: &Words,
    status: WcStatus,
) -> Result<(), String> {
    let wc = completions(x.a, &x.sa, 1)?;
    expect_wc(wc.first(), "requester", status, None, None, None)?;
    let state = x.a.query_qp(qps.a.id).map_err(|e| format!("query_qp: {e}"))?.state;
    if state != QpState::Err {
        return Err(format!("requester QP in {state:?} after {status} (expected Err)"));
    }
    expect_eq("the remote word", word(x.b, &w.remote, 64)?, 9)
}

/// The region lacks REMOTE_ATOMIC: the rkey check fails, NAK remote access
/// error, REM_ACCESS_ERR.
fn without_remote_atomic<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let w = words(x, access, 9)?;
    let qps = x.connect(Link::default())?;
    let sge = [Sge::new(w.local.id, 0, WORD)];
    let op = SendOp::FetchAdd { remote: w.remote.remote(64), add: 1 };
    x.a.post_send(qps.a.id, &SendWr::new(1, op, &sge)).map_err(|e| format!("post_send: {e}"))?;
    expect_failure(x, qps, &w, WcStatus::RemAccessErr)
}

/// The responder's QP does not grant REMOTE_ATOMIC (its region does): rxe
/// refuses the opcode, NAK invalid request, REM_INV_REQ_ERR.
fn qp_without_remote_atomic<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let w = words(x, QP_ACCESS_ALL, 9)?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let qps = x.connect(Link { responder_access: access, ..Link::default() })?;
    let sge = [Sge::new(w.local.id, 0, WORD)];
    let op = SendOp::CompareSwap { remote: w.remote.remote(64), compare: 9, swap: 1 };
    x.a.post_send(qps.a.id, &SendWr::new(1, op, &sge)).map_err(|e| format!("post_send: {e}"))?;
    expect_failure(x, qps, &w, WcStatus::RemInvReqErr)
}

/// A remote address 4 bytes off alignment. Two answers are right: the
/// requester refuses the WR at post time as invalid (rxe's provider, and
/// the simulator and udp, which follow it), or it sends the atomic and the
/// responder NAKs an invalid request, so the WR completes with
/// REM_INV_REQ_ERR (IBA's responder rule, which the engine's own tests
/// exercise with a hand-made packet).
fn misaligned<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let w = words(x, QP_ACCESS_ALL, 9)?;
    let qps = x.connect(Link::default())?;
    let sge = [Sge::new(w.local.id, 0, WORD)];
    let op = SendOp::FetchAdd { remote: w.remote.remote(60), add: 1 };
    match x.a.post_send(qps.a.id, &SendWr::new(1, op, &sge)) {
        Ok(()) => expect_failure(x, qps, &w, WcStatus::RemInvReqErr),
        Err(TransportError::InvalidArgument { .. }) => Ok(()),
        Err(TransportError::Os { errno: 22, .. }) => Ok(()), // EINVAL from the provider
        Err(e) => Err(format!("post_send refused it, but not as an invalid argument: {e}")),
    }
}

/// An atomic whose local buffer is not 8 bytes is refused at post time,
/// naming the length, and nothing reaches the wire.
fn local_length_not_8<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let w = words(x, QP_ACCESS_ALL, 9)?;
    let qps = x.connect(Link::default())?;
    for len in [4u32, 16] {
        let sge = [Sge::new(w.local.id, 0, len)];
        let op = SendOp::FetchAdd { remote: w.remote.remote(64), add: 1 };
        match x.a.post_send(qps.a.id, &SendWr::new(1, op, &sge)) {
            Err(TransportError::InvalidArgument { source, .. }) if source.field == "length" => {}
            other => return Err(format!("a {len}-byte atomic: {other:?} (expected an invalid length)")),
        }
    }
    // The QP is still usable.
    expect_eq(
        "a good atomic after",
        atomic(x, qps, &w, 1, SendOp::FetchAdd { remote: w.remote.remote(64), add: 1 })?,
        9,
    )?;
    expect_eq("the remote word", word(x.b, &w.remote, 64)?, 10)
}
