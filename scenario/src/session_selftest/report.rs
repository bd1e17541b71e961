//! What a selftest run counted ([`SelftestReport`]), the expectations it
//! is held to ([`SelftestReport::failures`]) and the counter lines
//! `rctb rc-session selftest` prints ([`SelftestReport::text`]).

use std::fmt::Write as _;

use rctb_core::rcsession::Usage;
use rctb_core::time::Duration;

use super::SelftestConfig;

/// The counters of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelftestReport {
    /// GETs that completed (READY answered OK and the final step done),
    /// intact or not.
    pub gets: u64,
    /// PUTs that completed (READY answered OK and the object committed),
    /// intact or not.
    pub puts: u64,
    /// Object bytes moved by completed transfers.
    pub bytes: u64,
    /// Bytes of the smallest transfer completed (`None` when none did).
    pub smallest: Option<u64>,
    /// Bytes of the largest transfer completed (0 when none did).
    pub largest: u64,
    /// Bytes of the largest GET completed (0 when none did).
    pub largest_get: u64,
    /// Bytes of the largest PUT completed (0 when none did).
    pub largest_put: u64,
    /// Bytes of the smallest GET completed (`None` when none did).
    pub smallest_get: Option<u64>,
    /// Bytes of the smallest PUT completed (`None` when none did).
    pub smallest_put: Option<u64>,
    /// READYs answered BUSY (each retried).
    pub busy: u64,
    /// Transfers whose data differed from the object.
    pub mismatches: u64,
    /// Failures (each a transfer that did not complete), described.
    pub errors: Vec<String>,
    /// Transport time from the first PREPARE to the last completion.
    pub elapsed: Duration,
    /// The server's usage after the run (everything reaped).
    pub usage_after: Usage,
    /// Live sessions after the run (must be 0).
    pub sessions_after: usize,
    /// Where the time went (summed over sessions; with `depth` > 1 the
    /// data phases overlap the rest).
    pub time: PhaseTimes,
}

/// Transport time spent in each step of the sessions, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Making the objects (the PRBS).
    pub pattern: Duration,
    /// Server PREPARE: PD, CQ, QP, staging region; a GET's object copied in.
    pub prepare: Duration,
    /// Client: a fresh QP, connecting it (RESET, INIT, RTR, RTS), a GET's
    /// receive; a PUT's object copied into its region.
    pub client: Duration,
    /// Server READY: its QP to RTR and RTS, the WRITE or receive posted.
    pub ready: Duration,
    /// From READY to the server's result and the client's completion.
    pub data: Duration,
    /// Final step or PUT commit, the data checked, the session reaped.
    pub finish: Duration,
}

impl SelftestReport {
    /// Transfers completed: [`gets`](Self::gets) plus [`puts`](Self::puts).
    pub fn transfers(&self) -> u64 {
        self.gets + self.puts
    }

    /// Whether everything completed intact and nothing is held.
    pub fn passed(&self, cfg: &SelftestConfig) -> bool {
        self.failures(cfg).is_empty()
    }

    /// Each broken expectation, as a line.
    pub fn failures(&self, cfg: &SelftestConfig) -> Vec<String> {
        let mut f = Vec::new();
        if self.transfers() != cfg.transfers {
            f.push(format!("{} of {} transfers completed", self.transfers(), cfg.transfers));
        }
        if self.mismatches > 0 {
            f.push(format!("{} transfers with data that differs from the object", self.mismatches));
        }
        if !self.errors.is_empty() {
            f.push(format!("{} errors, the first: {}", self.errors.len(), self.errors[0]));
        }
        let u = &self.usage_after;
        if self.sessions_after > 0 || u.sessions > 0 || u.staging_bytes > 0 || u.qps > 0 || !u.per_user.is_empty() {
            f.push(format!("held after the run: {} sessions, usage {u:?}", self.sessions_after));
        }
        if u.leaked_mrs + u.leaked_qps > 0 {
            f.push(format!("leaked {} MRs and {} QPs", u.leaked_mrs, u.leaked_qps));
        }
        f
    }

    /// Sessions per second of transport time.
    pub fn sessions_per_sec(&self) -> f64 {
        self.transfers() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Object bytes per second of transport time, in MiB (perftest's "MB").
    pub fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / 1_048_576.0 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The counter lines `rctb rc-session selftest` prints.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "transfers: {} ({} GET, {} PUT), {} bytes in {:.3} ms, {:.1} sessions/s, {:.2} MB/s",
            self.transfers(),
            self.gets,
            self.puts,
            self.bytes,
            self.elapsed.as_secs_f64() * 1e3,
            self.sessions_per_sec(),
            self.mib_per_sec()
        );
        let _ = writeln!(
            s,
            "sizes: GET {}..{} bytes, PUT {}..{} bytes",
            self.smallest_get.unwrap_or(0),
            self.largest_get,
            self.smallest_put.unwrap_or(0),
            self.largest_put
        );
        let _ = writeln!(s, "busy: {}  mismatches: {}  errors: {}", self.busy, self.mismatches, self.errors.len());
        let t = &self.time;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let _ = writeln!(
            s,
            "time (ms, summed): pattern {:.1}, prepare {:.1}, client {:.1}, ready {:.1}, data {:.1}, finish {:.1}",
            ms(t.pattern),
            ms(t.prepare),
            ms(t.client),
            ms(t.ready),
            ms(t.data),
            ms(t.finish)
        );
        for e in self.errors.iter().take(10) {
            let _ = writeln!(s, "  error: {e}");
        }
        let u = &self.usage_after;
        let _ = writeln!(
            s,
            "after: {} sessions, {} staging bytes, {} QPs, {} leaked MRs, {} leaked QPs",
            self.sessions_after, u.staging_bytes, u.qps, u.leaked_mrs, u.leaked_qps
        );
        s
    }
}
