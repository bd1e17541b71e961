//! The responder's atomic rules, reached with hand-made packets where no
//! requester of ours would send them: a misaligned address (the engine,
//! like rxe's provider, refuses it at post time), an atomic acknowledge for
//! a PSN that is no atomic, and a duplicate whose saved result a newer
//! READ or atomic recycled.

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_engine::Packet;

const NOW: Instant = Instant::ZERO;

mod common;

use common::Side;

const ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_ATOMIC).union(Access::REMOTE_READ);

fn connected() -> (Side, Side) {
    common::connected(4096, ACCESS, 2)
}

fn transmitted(s: &mut Side) -> Vec<Packet> {
    let (mut out, mut buf) = (Vec::new(), Vec::new());
    while let Some(tx) = s.ep.poll_transmit(NOW, &mut buf) {
        out.push(tx.packet);
    }
    out
}

fn completions(s: &mut Side) -> Vec<Completion> {
    let mut out = Vec::new();
    s.ep.poll_cq(s.cq, 16, &mut out).unwrap();
    out
}

fn word(s: &Side, offset: u64) -> u64 {
    let mut b = [0u8; 8];
    s.ep.mr_read(s.mr.id, offset, &mut b).unwrap();
    u64::from_le_bytes(b)
}

/// a posts a fetch-and-add of `add` to b's word at `offset`; its request packet.
fn fetch_add(a: &mut Side, b: &Side, wr_id: u64, offset: u64, add: u64) -> Packet {
    let op = SendOp::FetchAdd { remote: b.mr.remote(offset), add };
    a.ep.post_send(NOW, a.qp.id, &SendWr::new(wr_id, op, &[Sge::new(a.mr.id, 8 * wr_id, 8)])).unwrap();
    let mut sent = transmitted(a);
    assert_eq!(sent.len(), 1, "{sent:?}");
    sent.remove(0)
}

#[test]
fn a_misaligned_atomic_is_refused_at_post_and_naked_as_an_invalid_request() {
    let (mut a, mut b) = connected();
    // Our requester refuses it, naming the field.
    let op = SendOp::CompareSwap { remote: b.mr.remote(4), compare: 0, swap: 1 };
    let err = a.ep.post_send(NOW, a.qp.id, &SendWr::new(9, op, &[Sge::new(a.mr.id, 0, 8)])).unwrap_err();
    assert!(matches!(&err, TransportError::InvalidArgument { source, .. } if source.field == "remote_addr"), "{err}");
    // A requester that sends one anyway: the responder NAKs an invalid request.
    let mut req = fetch_add(&mut a, &b, 1, 0, 1);
    req.atomic.as_mut().unwrap().va += 4;
    b.ep.handle_packet(NOW, &req).unwrap();
    let nak = transmitted(&mut b);
    assert_eq!(nak.len(), 1, "{nak:?}");
    assert_eq!(nak[0].bth.opcode, Opcode::ACKNOWLEDGE);
    assert_eq!(nak[0].aeth.map(|x| x.kind()), Some(AckKind::Nak(NakCode::InvalidRequest)));
    a.ep.handle_packet(NOW, &nak[0]).unwrap();
    let wc = completions(&mut a);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::RemInvReqErr), "{wc:?}");
    // Class C: the responder's QP is in ERR too, and nothing was added.
    assert_eq!(b.ep.query_qp(b.qp.id).unwrap().state, QpState::Err);
    assert_eq!(word(&b, 0), 0);
    assert_eq!(word(&b, 8), 0);
}

#[test]
fn a_duplicate_is_answered_from_its_resource_until_newer_ones_recycle_it() {
    let (mut a, mut b) = connected();
    b.ep.mr_write(b.mr.id, 0, &40u64.to_le_bytes()).unwrap();
    let first = fetch_add(&mut a, &b, 1, 0, 2);
    b.ep.handle_packet(NOW, &first).unwrap();
    let ack = transmitted(&mut b);
    assert_eq!(ack[0].bth.opcode, Opcode::ATOMIC_ACKNOWLEDGE);
    assert_eq!(ack[0].atomic_ack.map(|x| x.orig), Some(40));
    // The same request again (its ACK was lost): the saved answer, not a second add.
    b.ep.handle_packet(NOW, &first).unwrap();
    let replay = transmitted(&mut b);
    assert_eq!(replay.len(), 1, "{replay:?}");
    assert_eq!((replay[0].bth.psn, replay[0].atomic_ack.map(|x| x.orig)), (first.bth.psn, Some(40)));
    assert_eq!(word(&b, 0), 42);
    assert_eq!(b.ep.counters().atomics_replayed, 1);
    // The requester takes the first answer and ignores the repeat.
    a.ep.handle_packet(NOW, &ack[0]).unwrap();
    a.ep.handle_packet(NOW, &replay[0]).unwrap();
    let wc = completions(&mut a);
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!((wc[0].status, wc[0].opcode, wc[0].byte_len), (WcStatus::Success, WcOpcode::FetchAdd, 8));
    assert_eq!(word(&a, 8), 40);
    // Two newer atomics take both resources (max_dest_rd_atomic 2): the
    // first one's saved answer is gone, and its duplicate is dropped, not
    // executed again.
    for (wr_id, add) in [(2, 100), (3, 1000)] {
        let req = fetch_add(&mut a, &b, wr_id, 0, add);
        b.ep.handle_packet(NOW, &req).unwrap();
        for p in transmitted(&mut b) {
            a.ep.handle_packet(NOW, &p).unwrap();
        }
    }
    assert_eq!(word(&b, 0), 1142);
    assert_eq!(common::dropped(&b), 0);
    b.ep.handle_packet(NOW, &first).unwrap();
    assert!(transmitted(&mut b).is_empty());
    assert_eq!(word(&b, 0), 1142);
    assert_eq!(b.ep.counters().atomics_replayed, 1);
    assert_eq!(common::dropped(&b), 1, "the duplicate with no saved answer is counted as dropped");
    // The endpoint's counts outlive the QP that made them.
    b.ep.destroy_qp(b.qp.id).unwrap();
    assert_eq!(b.ep.counters().atomics_replayed, 1);
    assert_eq!(common::dropped(&b), 1);
}

#[test]
fn an_atomic_acknowledge_for_a_send_is_a_bad_response() {
    let (mut a, mut b) = connected();
    let first = fetch_add(&mut a, &b, 1, 0, 2);
    b.ep.handle_packet(NOW, &first).unwrap();
    let mut ack = transmitted(&mut b).remove(0);
    // A SEND takes the next PSN; an atomic ACK arrives for it.
    a.ep.post_send(NOW, a.qp.id, &SendWr::new(2, SendOp::Send, &[Sge::new(a.mr.id, 0, 16)])).unwrap();
    assert_eq!(transmitted(&mut a).len(), 1);
    a.ep.handle_packet(NOW, &ack).unwrap();
    ack.bth.psn = ack.bth.psn.add(1);
    a.ep.handle_packet(NOW, &ack).unwrap();
    let wc = completions(&mut a);
    assert_eq!(
        wc.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::BadRespErr)]
    );
}
