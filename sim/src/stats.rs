//! Fabric-wide counters. The counts of sent packets by kind are
//! `rctb_engine::SentCounts`, which the udp backend keeps the same way (its
//! docs say how CM messages are counted).

use rctb_engine::SentCounts;

/// What the fabric saw. Every field is a count of packets unless named
/// otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// RC frames put on the wire (also those a fault then lost). CM
    /// messages are not frames here: they are counted in `cm_sent`.
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
    /// CM messages the endpoints sent, retransmissions included (also
    /// those a partition or a CM fault then lost).
    pub cm_sent: u64,
}

impl FabricStats {
    /// These stats with the sent-packet counts `c` (kept apart, in the
    /// classification the udp backend shares).
    #[inline]
    pub(crate) fn with_sent(mut self, c: &SentCounts) -> Self {
        let SentCounts {
            frames_sent,
            bytes_sent,
            acks,
            rnr_naks,
            seq_naks,
            other_naks,
            read_responses,
            atomic_acks,
            cm_sent,
        } = *c;
        self.frames_sent = frames_sent;
        self.bytes_sent = bytes_sent;
        self.acks = acks;
        self.rnr_naks = rnr_naks;
        self.seq_naks = seq_naks;
        self.other_naks = other_naks;
        self.read_responses = read_responses;
        self.atomic_acks = atomic_acks;
        self.cm_sent = cm_sent;
        self
    }
}
