//! Fabric-wide counters.

use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_engine::Packet;

/// What the fabric saw. Every field is a count of packets unless named
/// otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Frames put on the wire (also those a fault then lost).
    pub frames_sent: u64,
    /// Ethernet bytes put on the wire (without preamble and FCS).
    pub bytes_sent: u64,
    /// Frames a node's QP took.
    pub delivered: u64,
    /// ACKs sent.
    pub acks: u64,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks: u64,
    /// Other NAKs sent (invalid request, remote access, remote operation).
    pub other_naks: u64,
    /// READ response packets sent.
    pub read_responses: u64,
    /// Request packets sent again (go-back-N after a NAK, a timeout or RNR).
    pub retransmitted: u64,
    /// Local ACK timeouts that fired with packets outstanding.
    pub timeouts: u64,
    /// Atomic acknowledges sent (each carrying the original value).
    pub atomic_acks: u64,
    /// Duplicate atomics a responder answered from its saved result,
    /// without executing them again.
    pub atomics_replayed: u64,
    /// PSN sequence NAKs a requester ignored because a retry was already
    /// under way (rxe's rule: no second retry before progress).
    pub seq_naks_ignored: u64,
    /// Lost to the links' random loss.
    pub dropped_loss: u64,
    /// Damaged on a link, so dropped by the receiver's ICRC check.
    pub dropped_corrupt: u64,
    /// Cut by a partition (or a crashed node).
    pub dropped_partition: u64,
    /// Addressed to no node of the fabric.
    pub dropped_no_route: u64,
    /// Addressed to a QP number no QP has.
    pub dropped_no_qp: u64,
    /// Delivered twice by the links' random duplication.
    pub duplicated: u64,
    /// Held back by the links' random reordering.
    pub reordered: u64,
    /// Lost to a packet rule's `Drop` (`Sim::add_rule`).
    pub dropped_rule: u64,
    /// Held back by a packet rule's `Delay`.
    pub delayed: u64,
    /// Kept by a hold (`Sim::hold`) on arrival, to be delivered on release.
    pub held: u64,
}

impl FabricStats {
    /// Counts a frame of `wire_len` bytes (`pkt.wire_len()`).
    #[inline]
    pub(crate) fn count_tx(&mut self, pkt: &Packet, wire_len: usize) {
        self.frames_sent += 1;
        self.bytes_sent += wire_len as u64;
        let op = pkt.bth.opcode;
        // The two usual packets first: an ACK, then a request (which has
        // no count of its own).
        if op == Opcode::ACKNOWLEDGE {
            if let Some(aeth) = pkt.aeth {
                match aeth.kind() {
                    AckKind::Ack { .. } => self.acks += 1,
                    AckKind::RnrNak { .. } => self.rnr_naks += 1,
                    AckKind::Nak(NakCode::PsnSequenceError) => self.seq_naks += 1,
                    _ => self.other_naks += 1,
                }
            }
        } else if op.is_response() {
            if op.is_read_response() {
                self.read_responses += 1;
            } else if op == Opcode::ATOMIC_ACKNOWLEDGE {
                self.atomic_acks += 1;
            }
        }
    }
}
