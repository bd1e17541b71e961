//! Counters of one endpoint's UDP path.

/// What one endpoint's sockets did. Frames are RoCEv2 packets; bytes are
/// UDP payload bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Frames are read from a raw socket (the ICRC is checked over the
    /// sender's real IPv4 header) rather than rebuilt around UDP payloads.
    pub raw_rx: bool,
    /// Frames handed to the socket.
    pub tx_frames: u64,
    /// Their UDP payload bytes.
    pub tx_bytes: u64,
    /// Frames the socket refused (full buffer, no route, ICMP error); RC
    /// recovers from these as from loss.
    pub tx_errors: u64,
    /// Frames the hook lost on the way out.
    pub tx_dropped: u64,
    /// Frames the hook sent twice.
    pub tx_duplicated: u64,
    /// Frames the hook held back before sending.
    pub tx_delayed: u64,
    /// Frames that passed every check and went to the RC engine.
    pub rx_frames: u64,
    /// Their UDP payload bytes.
    pub rx_bytes: u64,
    /// Dropped: the ICRC did not match (as rxe drops them: silently).
    pub rx_bad_icrc: u64,
    /// Dropped: not a well-formed RoCEv2 packet.
    pub rx_malformed: u64,
    /// Dropped: RoCEv2 this engine does not handle (UD/CM, atomics).
    pub rx_unsupported: u64,
    /// Frames the hook lost on the way in.
    pub rx_dropped: u64,
    /// Frames the hook handed to the engine twice.
    pub rx_duplicated: u64,
    /// Frames the hook held back before handing them to the engine.
    pub rx_delayed: u64,
    /// Of `rx_frames`: ACKs, and NAKs by kind (what the peer's responder said).
    pub rx_acks: u64,
    /// PSN sequence error NAKs.
    pub rx_naks_seq: u64,
    /// RNR NAKs.
    pub rx_naks_rnr: u64,
    /// Other NAKs (invalid request, remote access, remote operation).
    pub rx_naks_other: u64,
    /// UDP packets to this address for another port (raw socket only).
    pub rx_foreign: u64,
}

/// What the RC engines of a reactor's endpoints did, summed over them
/// (the names are those of the simulator's `FabricStats`, for what a real
/// network leaves this backend to count). Frames are RoCEv2 packets. The
/// sent frames are classified and counted by `rctb_engine::SentCounts`, as
/// the simulator counts them: CM MADs are in `cm_sent` only, not in
/// `frames_sent` and `bytes_sent` (the capture shows both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// RC frames the engines transmitted (also those a hook then lost or
    /// a socket refused); CM MADs are counted in `cm_sent`.
    pub frames_sent: u64,
    /// Their Ethernet bytes (without preamble and FCS), as the capture
    /// shows them.
    pub bytes_sent: u64,
    /// Frames handed to an engine that a queue pair took.
    pub delivered: u64,
    /// Of `frames_sent`: ACKs, NAKs by kind, READ responses.
    pub acks: u64,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks: u64,
    /// Other NAKs sent.
    pub other_naks: u64,
    /// READ response packets sent.
    pub read_responses: u64,
    /// Request packets sent again (go-back-N after NAK, timeout or RNR).
    pub retransmitted: u64,
    /// Local ACK timeouts that fired with packets outstanding.
    pub timeouts: u64,
    /// Atomic acknowledges sent.
    pub atomic_acks: u64,
    /// Duplicate atomics answered from a saved result, not executed again.
    pub atomics_replayed: u64,
    /// PSN sequence NAKs ignored because a retry was already under way.
    pub seq_naks_ignored: u64,
    /// Frames handed to an engine for a QPN it does not have.
    pub dropped_no_qp: u64,
    /// QP1 frames whose MAD was not CM (the engine counts the rest of CM).
    pub dropped_bad_mad: u64,
    /// CM MADs sent (QP1 UD frames), retransmissions included.
    pub cm_sent: u64,
    /// Readings of the fine clock (`CLOCK_MONOTONIC`). Where the kernel's
    /// clock source has no vDSO reader (hpet: a guest under TCG), each is
    /// a trapping system call.
    pub clock_reads: u64,
}

impl EngineStats {
    /// These stats with the sent-frame counts `c` (kept apart, in the
    /// classification the simulator shares).
    pub(crate) fn with_sent(mut self, c: &rctb_engine::SentCounts) -> Self {
        let rctb_engine::SentCounts {
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
