//! Shared receive queues and CQ overflow: several QPs taking receives from
//! one SRQ, the SRQ limit event, RNR while the SRQ is dry, and what a full
//! CQ does to the completions that do not fit (verbs' `IBV_EVENT_CQ_ERR`;
//! on the receive side rxe also moves the QP to ERR without acknowledging
//! the message, on the send side the completion is only lost).
//!
//! Sizes are chosen so that verbs devices, which round queue sizes up,
//! agree with the simulator's exact ones: rxe gives a CQ or SRQ of `n`
//! entries `2^k - 1 >= n` slots, so the cases ask for 3 and 15.

use rctb_core::time::Duration;
use rctb_core::transport::*;

use crate::CaseFn;
use crate::harness::{Endpoints, Link, async_event, completions, expect_wc, pattern, pause};

/// Every case, in the order they run.
pub(crate) fn cases<T: Transport>() -> Vec<(String, CaseFn<T>)> {
    let v: [(&str, CaseFn<T>); 8] = [
        ("srq/shared_by_two_qps", shared_by_two_qps),
        ("srq/post_recv_on_srq_qp_refused", post_recv_refused),
        ("srq/limit_event", limit_event),
        ("srq/rnr_when_dry", rnr_when_dry),
        ("srq/rnr_retry_exhausted_when_dry", rnr_retry_exhausted_when_dry),
        ("srq/destroy_busy_while_attached", destroy_busy),
        ("cq/overflow_recv_moves_qp_to_err", overflow_recv),
        ("cq/overflow_send_completion_lost", overflow_send),
    ];
    v.into_iter().map(|(n, f)| (n.to_string(), f)).collect()
}

const MSG: u32 = 100;
const SLOT: u64 = 256;
const ACCESS: Access = Access::LOCAL_WRITE;

fn e(what: &str, err: TransportError) -> String {
    format!("{what}: {err}")
}

/// Posts `n` receives of one slot each to `srq`, wr_ids `first..first+n`,
/// slot `i` at `i * SLOT` of `mr`.
fn post_srq<T: Transport>(t: &mut T, srq: SrqId, mr: &MrInfo, first: u64, n: u64) -> Result<(), String> {
    for id in first..first + n {
        let sge = [Sge::new(mr.id, id * SLOT, SLOT as u32)];
        t.post_srq_recv(srq, &RecvWr::new(id, &sge)).map_err(|x| e("post_srq_recv", x))?;
    }
    Ok(())
}

/// Sends message `tag` (MSG bytes of `pattern(tag)`) on `qp` from slot
/// `tag` of `ma`, signalled with wr_id `tag`.
fn send<T: Transport>(t: &mut T, qp: QpId, ma: &MrInfo, tag: u32) -> Result<(), String> {
    let off = tag as u64 * SLOT;
    t.mr_write(ma.id, off, &pattern(tag, MSG as usize)).map_err(|x| e("mr_write", x))?;
    let sge = [Sge::new(ma.id, off, MSG)];
    t.post_send(qp, &SendWr::new(tag as u64, SendOp::Send, &sge)).map_err(|x| e("post_send", x))
}

/// Sends message `tag` and waits for its requester completion.
fn send_acked<T: Transport>(x: &mut Endpoints<'_, T>, qp: QpId, ma: &MrInfo, tag: u32) -> Result<(), String> {
    send(x.a, qp, ma, tag)?;
    let wc = completions(x.a, &x.sa, 1)?;
    expect_wc(wc.first(), &format!("SEND {tag}"), WcStatus::Success, Some(WcOpcode::Send), None, None)
}

/// A QP pair whose responder takes its receives from `srq`.
fn srq_link(link: Link, srq: SrqId) -> (Link, impl FnOnce(&mut QpInit, &mut QpInit)) {
    (link, move |_: &mut QpInit, b: &mut QpInit| b.srq = Some(srq))
}

/// No asynchronous event waits on `t` now.
fn no_event<T: Transport>(t: &mut T, when: &str) -> Result<(), String> {
    match t.poll_async_event().map_err(|x| e("poll_async_event", x))? {
        None => Ok(()),
        Some(ev) => Err(format!("{when}: unexpected asynchronous event {ev:?}")),
    }
}

/// Two QPs on b share one SRQ: messages sent alternately on the two
/// connections take its receives in order, each completing on the QP that
/// took it, with the data in that receive's buffer.
fn shared_by_two_qps<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ACCESS)?;
    let mb = x.mr(false, 4096, ACCESS)?;
    let srq = x.srq(false, 15, 0)?;
    post_srq(x.b, srq, &mb, 0, 4)?;
    let (link, edit) = srq_link(Link::default(), srq);
    let p1 = x.connect_with(link, edit)?;
    let (link, edit) = srq_link(Link::default(), srq);
    let p2 = x.connect_with(link, edit)?;
    let order = [p1, p2, p1, p2];
    for (tag, p) in order.iter().enumerate() {
        send_acked(x, p.a.id, &ma, tag as u32)?;
    }
    let rc = completions(x.b, &x.sb, 4)?;
    for (i, p) in order.iter().enumerate() {
        let what = format!("receive {i}");
        expect_wc(rc.get(i), &what, WcStatus::Success, Some(WcOpcode::Recv), Some(MSG), Some(None))?;
        if rc[i].wr_id != i as u64 || rc[i].qp != p.b.id {
            return Err(format!(
                "{what}: wr_id {} on {} (expected wr_id {i} on {}, the SRQ's receives in order)",
                rc[i].wr_id, rc[i].qp, p.b.id
            ));
        }
        let mut got = vec![0u8; MSG as usize];
        x.b.mr_read(mb.id, i as u64 * SLOT, &mut got).map_err(|x| e("mr_read", x))?;
        if got != pattern(i as u32, MSG as usize) {
            return Err(format!("{what}: the data in its buffer is not message {i}'s"));
        }
    }
    Ok(())
}

/// A QP attached to an SRQ has no receive queue of its own: `post_recv` on
/// it is refused (rxe: EINVAL).
fn post_recv_refused<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let mb = x.mr(false, 4096, ACCESS)?;
    let srq = x.srq(false, 15, 0)?;
    let (link, edit) = srq_link(Link::default(), srq);
    let p = x.connect_with(link, edit)?;
    let sge = [Sge::new(mb.id, 0, 64)];
    match x.b.post_recv(p.b.id, &RecvWr::new(1, &sge)) {
        Err(TransportError::InvalidArgument { .. }) => Ok(()),
        other => Err(format!("post_recv on a QP with an SRQ: {other:?} (expected InvalidArgument)")),
    }
}

/// The limit fires once, when a receive taken leaves fewer than it posted,
/// and then disarms; a limit above `max_wr` is refused.
fn limit_event<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ACCESS)?;
    let mb = x.mr(false, 4096, ACCESS)?;
    let srq = x.srq(false, 15, 0)?;
    match x.b.modify_srq(srq, 16) {
        Err(TransportError::InvalidArgument { .. }) => {}
        other => return Err(format!("modify_srq limit 16 on a 15-entry SRQ: {other:?} (expected InvalidArgument)")),
    }
    post_srq(x.b, srq, &mb, 0, 4)?;
    x.b.modify_srq(srq, 3).map_err(|x| e("modify_srq 3", x))?;
    let (link, edit) = srq_link(Link::default(), srq);
    let p = x.connect_with(link, edit)?;
    // 4 posted, limit 3: the first receive taken leaves 3 (not fewer).
    send_acked(x, p.a.id, &ma, 0)?;
    no_event(x.b, "3 receives left, limit 3")?;
    // The second leaves 2: the event, once.
    send_acked(x, p.a.id, &ma, 1)?;
    match async_event(x.b)? {
        AsyncEvent::SrqLimitReached { srq: s } if s == srq => {}
        ev => return Err(format!("after the second receive: {ev:?} (expected SrqLimitReached for {srq})")),
    }
    send_acked(x, p.a.id, &ma, 2)?;
    no_event(x.b, "the limit disarmed after it fired")?;
    let rc = completions(x.b, &x.sb, 3)?;
    if rc.len() != 3 || rc.iter().any(|w| w.status != WcStatus::Success) {
        return Err(format!("responder completions: {rc:?} (expected 3 successful receives)"));
    }
    Ok(())
}

/// A SEND on a QP whose SRQ is empty gets RNR NAKs until a receive is
/// posted to the SRQ, then completes.
fn rnr_when_dry<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ACCESS)?;
    let mb = x.mr(false, 4096, ACCESS)?;
    let srq = x.srq(false, 15, 0)?;
    let link = Link { min_rnr_timer: RnrTimer::from_code(12).expect("code 12"), ..Link::default() };
    let (link, edit) = srq_link(link, srq);
    let p = x.connect_with(link, edit)?;
    send(x.a, p.a.id, &ma, 7)?;
    pause(x.a, Duration::from_millis(3))?;
    let mut early = Vec::new();
    x.a.poll_cq(x.sa.cq, 4, &mut early).map_err(|x| e("poll_cq", x))?;
    if !early.is_empty() {
        return Err(format!("completed while the SRQ was empty: {early:?}"));
    }
    post_srq(x.b, srq, &mb, 7, 1)?;
    let rc = completions(x.b, &x.sb, 1)?;
    expect_wc(rc.first(), "responder", WcStatus::Success, Some(WcOpcode::Recv), Some(MSG), Some(None))?;
    let sc = completions(x.a, &x.sa, 1)?;
    expect_wc(sc.first(), "requester", WcStatus::Success, Some(WcOpcode::Send), None, None)
}

/// With `rnr_retry` 1 and the SRQ empty, the SEND fails RNR_RETRY_EXC_ERR.
fn rnr_retry_exhausted_when_dry<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ACCESS)?;
    let srq = x.srq(false, 15, 0)?;
    let (link, edit) = srq_link(Link { rnr_retry: 1, ..Link::default() }, srq);
    let p = x.connect_with(link, edit)?;
    send(x.a, p.a.id, &ma, 1)?;
    let sc = completions(x.a, &x.sa, 1)?;
    expect_wc(sc.first(), "requester", WcStatus::RnrRetryExcErr, None, None, None)
}

/// `destroy_srq` is refused while a QP uses the SRQ (EBUSY), and works
/// once the QP is gone.
fn destroy_busy<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let pd = x.sb.pd;
    let srq = x.b.create_srq(&SrqInit::new(pd, 15)).map_err(|x| e("create_srq", x))?;
    let init =
        QpInit { pd, send_cq: x.sb.cq, recv_cq: x.sb.cq, caps: QpCaps::default(), sq_sig_all: false, srq: Some(srq) };
    let qp = match x.b.create_qp(&init) {
        Ok(q) => q,
        Err(err) => {
            let _ = x.b.destroy_srq(srq);
            return Err(e("create_qp with an SRQ", err));
        }
    };
    let busy = x.b.destroy_srq(srq);
    let gone = x.b.destroy_qp(qp.id).map_err(|x| e("destroy_qp", x));
    let freed = x.b.destroy_srq(srq).map_err(|x| e("destroy_srq after destroy_qp", x));
    match busy {
        Err(TransportError::Busy { .. }) => {}
        other => return Err(format!("destroy_srq with a QP attached: {other:?} (expected Busy)")),
    }
    gone.and(freed)
}

/// b's receive CQ holds 3: the fourth message's receive completion does not
/// fit. b gets CQ_ERR for that CQ and its QP goes to ERR without
/// acknowledging the message, so a's fourth SEND fails RETRY_EXC_ERR; the
/// three completions that fit stay on the CQ.
fn overflow_recv<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ACCESS)?;
    let mb = x.mr(false, 4096, ACCESS)?;
    let small = x.cq(false, 3)?;
    // One retry of a 268 ms ACK timeout: the lost fourth ACK fails within a
    // second, and a slow ACK (rxe under TCG) is still not mistaken for one.
    let link = Link { retry_cnt: 1, timeout: 16, ..Link::default() };
    let p = x.connect_with(link, |_, b| b.recv_cq = small)?;
    for id in 0..6u64 {
        let sge = [Sge::new(mb.id, id * SLOT, SLOT as u32)];
        x.b.post_recv(p.b.id, &RecvWr::new(id, &sge)).map_err(|x| e("post_recv", x))?;
    }
    for tag in 0..3 {
        send_acked(x, p.a.id, &ma, tag)?;
    }
    no_event(x.b, "three receive completions in a CQ of 3")?;
    send(x.a, p.a.id, &ma, 3)?;
    let sc = completions(x.a, &x.sa, 1)?;
    expect_wc(sc.first(), "the fourth SEND", WcStatus::RetryExcErr, None, None, None)?;
    match async_event(x.b)? {
        AsyncEvent::CqErr { cq } if cq == small => {}
        ev => return Err(format!("responder: {ev:?} (expected CqErr for {small})")),
    }
    let state = x.b.query_qp(p.b.id).map_err(|x| e("query_qp", x))?.state;
    if state != QpState::Err {
        return Err(format!("responder QP after its CQ overflowed: {state:?} (expected Err)"));
    }
    let mut rc = Vec::new();
    x.b.poll_cq(small, 8, &mut rc).map_err(|x| e("poll_cq", x))?;
    if rc.len() != 3 || rc.iter().enumerate().any(|(i, w)| w.status != WcStatus::Success || w.wr_id != i as u64) {
        return Err(format!("the small CQ: {rc:?} (expected receives 0, 1, 2, successful)"));
    }
    Ok(())
}

/// a's send CQ holds 3 and a does not poll: of 5 signalled SENDs, the last
/// two completions are lost with CQ_ERR, every message still arrives, and
/// a's QP stays in RTS and keeps working once the CQ is drained.
fn overflow_send<T: Transport>(x: &mut Endpoints<'_, T>) -> Result<(), String> {
    let ma = x.mr(true, 4096, ACCESS)?;
    let mb = x.mr(false, 4096, ACCESS)?;
    let small = x.cq(true, 3)?;
    let p = x.connect_with(Link::default(), |a, _| a.send_cq = small)?;
    for id in 0..6u64 {
        let sge = [Sge::new(mb.id, id * SLOT, SLOT as u32)];
        x.b.post_recv(p.b.id, &RecvWr::new(id, &sge)).map_err(|x| e("post_recv", x))?;
    }
    for tag in 0..5 {
        send(x.a, p.a.id, &ma, tag)?;
    }
    let rc = completions(x.b, &x.sb, 5)?;
    if rc.len() != 5 || rc.iter().any(|w| w.status != WcStatus::Success) {
        return Err(format!("responder: {rc:?} (expected 5 successful receives)"));
    }
    for lost in 0..2 {
        match async_event(x.a)? {
            AsyncEvent::CqErr { cq } if cq == small => {}
            ev => return Err(format!("requester, lost completion {lost}: {ev:?} (expected CqErr for {small})")),
        }
    }
    let state = x.a.query_qp(p.a.id).map_err(|x| e("query_qp", x))?.state;
    if state != QpState::Rts {
        return Err(format!("requester QP after its send CQ overflowed: {state:?} (expected Rts)"));
    }
    let mut sc = Vec::new();
    x.a.poll_cq(small, 8, &mut sc).map_err(|x| e("poll_cq", x))?;
    if sc.len() != 3 || sc.iter().enumerate().any(|(i, w)| w.status != WcStatus::Success || w.wr_id != i as u64) {
        return Err(format!("the small CQ: {sc:?} (expected SENDs 0, 1, 2, successful)"));
    }
    send(x.a, p.a.id, &ma, 5)?;
    let mut after = Vec::new();
    let deadline = x.a.now() + crate::WAIT_LIMIT;
    while after.is_empty() && x.a.now() < deadline {
        x.a.poll_cq(small, 1, &mut after).map_err(|x| e("poll_cq", x))?;
        if after.is_empty() {
            x.a.wait(&[small], deadline).map_err(|x| e("wait", x))?;
        }
    }
    expect_wc(after.first(), "a SEND after the CQ was drained", WcStatus::Success, Some(WcOpcode::Send), None, None)
}
