//! What one stream did: counts, errors by completion status, data checks and
//! timing in transport time.

use std::collections::BTreeMap;

use rctb_core::time::Instant;
use rctb_core::transport::WcStatus;

/// Results of one stream. Requester counts come from send completions,
/// responder counts from receive completions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Send WRs posted.
    pub posted: u64,
    /// Send WRs completed with SUCCESS (the message was delivered and acknowledged).
    pub completed: u64,
    /// Receives completed with SUCCESS on the responder.
    pub received: u64,
    /// Payload bytes of the messages completed with SUCCESS.
    pub bytes: u64,
    /// Requester completions with an error status, by status.
    pub errors: BTreeMap<WcStatus, u64>,
    /// Responder receive completions with an error status before teardown.
    pub recv_errors: BTreeMap<WcStatus, u64>,
    /// Receives still posted at teardown, flushed as expected.
    pub recv_flushed: u64,
    /// Messages whose bytes, length, immediate or completion order were wrong.
    pub mismatches: u64,
    /// What the first mismatch was, for the report.
    pub first_mismatch: Option<String>,
    /// Why the connection was never established, if it was not.
    pub connect_error: Option<String>,
    /// Local verb failures (`TransportError`s), in order.
    pub local_errors: Vec<String>,
    /// When the data phase began (the connection was up).
    pub started_at: Option<Instant>,
    /// When the last message completed (or the stream gave up).
    pub finished_at: Option<Instant>,
}

impl StreamStats {
    /// Time from connection to the last completion.
    pub fn data_time_nanos(&self) -> u64 {
        match (self.started_at, self.finished_at) {
            (Some(s), Some(f)) => (f - s).as_nanos() as u64,
            _ => 0,
        }
    }

    /// Delivered payload bytes per virtual second (0 when no time passed).
    pub fn throughput_bytes_per_sec(&self) -> u64 {
        match self.data_time_nanos() {
            0 => 0,
            ns => (self.bytes as u128 * 1_000_000_000 / ns as u128) as u64,
        }
    }

    /// Requester completions with an error status, all statuses together
    /// (the responder's `recv_errors` not included).
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub(crate) fn mismatch(&mut self, what: String) {
        self.mismatches += 1;
        if self.first_mismatch.is_none() {
            self.first_mismatch = Some(what);
        }
    }
}
