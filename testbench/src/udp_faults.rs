//! Fault cases that need a UDP endpoint on one side: its path hook loses or
//! duplicates chosen packets, and the RC machinery of both sides must
//! recover exactly (PSN-gap NAK and go-back-N, duplicate requests, a lost
//! ACK and the requester's timeout). Against kernel rxe they show that rxe
//! and this RC engine agree on recovery in both roles; between two UDP
//! endpoints they run in `cargo test`.
//!
//! Each case puts the fault where the UDP endpoint can: on its way out when
//! it is the requester (`a`), on its way in when it is the responder (`b`);
//! with UDP on both sides, both.

use std::cell::Cell;
use std::rc::Rc;

use rctb_core::time::Duration;
use rctb_core::transport::*;
use rctb_core::wire::roce::Opcode;
use rctb_udp::mixed::Either;
use rctb_udp::{Dir, Fate, UdpTransport};

use rctb_conformance::{CaseResult, Endpoints, Link, completions, expect_wc, pattern, pause, run_case};

type Ends<'t, O> = Endpoints<'t, Either<UdpTransport, O>>;
type Case<O> = fn(&mut Ends<'_, O>) -> Result<(), String>;

/// Every case, in the order they run.
pub fn cases<O: Transport>() -> Vec<(&'static str, Case<O>)> {
    vec![
        ("faults/psn_gap_go_back_n", psn_gap as Case<O>),
        ("faults/duplicate_requests", duplicates as Case<O>),
        ("faults/lost_ack_timeout", lost_ack as Case<O>),
    ]
}

/// Runs every case whose name contains `filter`.
pub fn run<O: Transport>(
    a: &mut Either<UdpTransport, O>,
    b: &mut Either<UdpTransport, O>,
    filter: &str,
    report: &mut dyn FnMut(&CaseResult),
) -> Vec<CaseResult> {
    let mut results = Vec::new();
    for (name, case) in cases::<O>() {
        if !name.contains(filter) {
            continue;
        }
        let result = run_case(&mut *a, &mut *b, name.to_string(), |ends| {
            let outcome = case(ends);
            clear_hooks(ends);
            outcome
        });
        report(&result);
        results.push(result);
    }
    results
}

fn udp<O>(t: &Either<UdpTransport, O>) -> Option<&UdpTransport> {
    match t {
        Either::A(u) => Some(u),
        Either::B(_) => None,
    }
}

fn clear_hooks<O: Transport>(x: &Ends<'_, O>) {
    for t in [&*x.a, &*x.b] {
        if let Some(u) = udp(t) {
            u.set_hook(None);
        }
    }
}

/// A request packet (not an ACK, not a READ response).
fn is_request(op: Opcode) -> bool {
    op != Opcode::ACKNOWLEDGE && !op.is_read_response()
}

/// Installs `fate` for the request packets of the case: on `a`'s way out,
/// on `b`'s way in. `fate(n)` decides the n-th request packet seen (per side).
fn on_requests<O: Transport>(x: &Ends<'_, O>, fate: impl Fn(u32) -> Fate + Clone + 'static) -> Result<(), String> {
    let mut any = false;
    for (t, dir) in [(&*x.a, Dir::Tx), (&*x.b, Dir::Rx)] {
        if let Some(u) = udp(t) {
            let (n, fate) = (Cell::new(0u32), fate.clone());
            u.set_hook(Some(Box::new(move |d, p| {
                if d != dir || !is_request(p.bth.opcode) {
                    return Fate::Pass;
                }
                n.set(n.get() + 1);
                fate(n.get() - 1)
            })));
            any = true;
        }
    }
    if any { Ok(()) } else { Err("no UDP endpoint to put the fault on".into()) }
}

fn e(what: &str, err: TransportError) -> String {
    format!("{what}: {err}")
}

/// A WRITE of 3 MTU + 5 bytes loses its second packet once: the responder
/// NAKs the PSN gap, the requester goes back to it, the data arrives intact.
fn psn_gap<O: Transport>(x: &mut Ends<'_, O>) -> Result<(), String> {
    let len = 3 * x.path_mtu().bytes() + 5;
    let src = x.mr(true, len as u64, Access::LOCAL_WRITE)?;
    let dst = x.mr(false, len as u64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let pair = x.connect(Link::default())?;
    let data = pattern(71, len as usize);
    x.a.mr_write(src.id, 0, &data).map_err(|er| e("mr_write", er))?;
    let before: Vec<_> =
        [&*x.a, &*x.b].iter().map(|t| udp(t).map(|u| (u.stats(), u.reactor().engine_stats()))).collect();
    on_requests(x, |n| if n == 1 { Fate::Drop } else { Fate::Pass })?;
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
    // Where the UDP endpoint sat, it saw the recovery.
    if let (Some(u), Some(Some((s0, e0)))) = (udp(x.a), before.first()) {
        let (s1, e1) = (u.stats(), u.reactor().engine_stats());
        if s1.rx_naks_seq == s0.rx_naks_seq {
            return Err(format!("the requester saw no PSN sequence NAK ({s1:?})"));
        }
        if e1.retransmitted == e0.retransmitted {
            return Err("the requester retransmitted nothing".into());
        }
    }
    if let (Some(u), Some(Some((_, e0)))) = (udp(x.b), before.get(1)) {
        if u.reactor().engine_stats().seq_naks == e0.seq_naks {
            return Err("the responder sent no PSN sequence NAK".into());
        }
    }
    Ok(())
}

/// Every request packet of a 3 MTU + 5 byte SEND arrives twice: one receive
/// completes, with the right data, and nothing else completes.
fn duplicates<O: Transport>(x: &mut Ends<'_, O>) -> Result<(), String> {
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
    on_requests(x, |_| Fate::Duplicate)?;
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
    Ok(())
}

/// The ACK of a one-packet WRITE is lost once: the requester's local ACK
/// timer fires, it sends the WRITE again, the responder re-ACKs the
/// duplicate, the WRITE completes once.
fn lost_ack<O: Transport>(x: &mut Ends<'_, O>) -> Result<(), String> {
    let len = 64u32;
    let src = x.mr(true, len as u64, Access::LOCAL_WRITE)?;
    let dst = x.mr(false, len as u64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    // Timeout code 12: 4.096 us * 2^12, about 17 ms.
    let pair = x.connect(Link { timeout: 12, ..Link::default() })?;
    let data = pattern(73, len as usize);
    x.a.mr_write(src.id, 0, &data).map_err(|er| e("mr_write", er))?;
    let lost = Rc::new(Cell::new(false));
    let mut hooked = false;
    for (t, dir) in [(&*x.a, Dir::Rx), (&*x.b, Dir::Tx)] {
        if let Some(u) = udp(t) {
            let lost = lost.clone();
            u.set_hook(Some(Box::new(move |d, p| {
                if d == dir && p.bth.opcode == Opcode::ACKNOWLEDGE && !lost.get() {
                    lost.set(true);
                    Fate::Drop
                } else {
                    Fate::Pass
                }
            })));
            hooked = true;
            break;
        }
    }
    if !hooked {
        return Err("no UDP endpoint to put the fault on".into());
    }
    let timeouts_before = udp(x.a).map(|u| u.reactor().engine_stats().timeouts);
    let sge = [Sge::new(src.id, 0, len)];
    x.a.post_send(pair.a.id, &SendWr::new(1, SendOp::Write { remote: dst.remote(0) }, &sge))
        .map_err(|er| e("post_send", er))?;
    let wcs = completions(x.a, &x.sa, 1)?;
    expect_wc(wcs.first(), "write", WcStatus::Success, Some(WcOpcode::RdmaWrite), None, None)?;
    if !lost.get() {
        return Err("no ACK went by to lose".into());
    }
    let mut got = vec![0; len as usize];
    x.b.mr_read(dst.id, 0, &mut got).map_err(|er| e("mr_read", er))?;
    if got != data {
        return Err("the written data differs".into());
    }
    if let (Some(u), Some(t0)) = (udp(x.a), timeouts_before) {
        if u.reactor().engine_stats().timeouts == t0 {
            return Err("the requester's ACK timer never fired".into());
        }
    }
    Ok(())
}
