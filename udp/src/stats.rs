//! Counters of one endpoint's UDP path.

/// What one endpoint's sockets did. Frames are RoCEv2 packets; bytes are
/// UDP payload bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Frames are read from a raw socket (the ICRC is checked over the
    /// sender's real IPv4 header) rather than rebuilt around UDP payloads.
    pub raw_rx: bool,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames the socket refused (full buffer, no route, ICMP error); RC
    /// recovers from these as from loss.
    pub tx_errors: u64,
    /// Frames the hook lost on the way out.
    pub tx_dropped: u64,
    /// Frames the hook sent twice.
    pub tx_duplicated: u64,
    /// Frames that passed every check and went to the RC engine.
    pub rx_frames: u64,
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
    /// Of `rx_frames`: ACKs, and NAKs by kind (what the peer's responder said).
    pub rx_acks: u64,
    pub rx_naks_seq: u64,
    pub rx_naks_rnr: u64,
    pub rx_naks_other: u64,
    /// UDP packets to this address for another port (raw socket only).
    pub rx_foreign: u64,
}
