//! The run report: plain text for people, JSON for tools. Both come from the
//! same [`Report`] value, whose field order (and BTreeMap keys) make the JSON
//! byte-stable: the same seed gives the same report.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use rctb_core::time::Instant;
use rctb_sim::{FabricStats, LiveResources};
use serde::Serialize;
use serde::ser::SerializeMap;

use crate::counters::fabric_counters;
use crate::expect::{Check, status_counts};
use crate::roce::check::{ChannelCount, FrameCheck};
use crate::runner::{Outcome, describe_leaks};
use crate::scenario::Scenario;
use crate::traffic::{Op, StreamStats};

/// The result of one run of a scenario with one seed: what `rctb run` prints
/// (as text, or as JSON with `--json`) and what a sweep reduces to a verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The scenario's `name`.
    pub scenario: String,
    /// The seed the run used.
    pub seed: u64,
    /// Whether every entry of `checks` passed; `rctb run` exits 0 when it
    /// did, 1 when not.
    pub passed: bool,
    /// "completed", "stalled", "time_limit" or "livelock".
    ///
    /// "completed": every stream finished; "stalled": nothing was left to
    /// happen while streams waited; "time_limit": the scenario's
    /// `time_limit` passed first; "livelock": streams kept reporting progress
    /// without virtual time moving (see [`Outcome`]).
    pub outcome: &'static str,
    /// Virtual time when the run ended, in nanoseconds.
    pub virtual_time_ns: u64,
    /// One entry per `[[streams]]`, in file order.
    pub streams: Vec<StreamReport>,
    /// The fabric's counters at the end of the run; their names are the ones
    /// `[expect].fabric` may bound.
    pub fabric: Counters,
    /// Verbs resources still alive once every stream was torn down (all 0
    /// when nothing leaked).
    pub leaked: Leaks,
    /// Things worth knowing that are not failures by themselves.
    pub notes: Vec<String>,
    /// Every expectation evaluated, in the order the text report lists them
    /// (whether every stream finished comes first).
    pub checks: Vec<Check>,
}

/// What one stream did. For `op = "nvme"`, `"rcsession"` and `"roce"`
/// streams the message counters count I/O commands, transfers and frames.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StreamReport {
    /// The stream's `name`.
    pub name: String,
    /// The verbs operation, spelled as verbs does (`RDMA_WRITE`, ...): SEND
    /// for nvme streams, SEND_WITH_IMM for roce, RDMA_WRITE_WITH_IMM for
    /// rcsession.
    pub op: Op,
    /// The requester's node.
    pub from: String,
    /// The responder's node.
    pub to: String,
    /// How the QPs were connected: "cm", "manual", "rcsession" (by the session
    /// protocol) or "surf" (the FPGA engine's registers, roce streams).
    pub connect: &'static str,
    /// Messages the stream was to send (`count`).
    pub count: u64,
    /// Smallest message size in bytes (`size`, or `size.min`).
    pub min_size: u32,
    /// Largest message size in bytes (equal to `min_size` for a fixed size).
    pub max_size: u32,
    /// The stream's `queue_depth` (default 8).
    pub queue_depth: u32,
    /// Send work requests the requester posted.
    pub posted: u64,
    /// Requester completions with SUCCESS: what `expect.delivered` bounds.
    pub completed: u64,
    /// Receive completions with SUCCESS on the responder: what
    /// `expect.received` bounds.
    pub received: u64,
    /// Payload bytes of the messages that completed with SUCCESS.
    pub bytes: u64,
    /// Requester completions with an error status, by status name
    /// (`RETRY_EXC_ERR`, ...).
    pub errors: BTreeMap<String, u64>,
    /// The responder's receive completions with an error status before
    /// teardown, by status name.
    pub recv_errors: BTreeMap<String, u64>,
    /// Receives still posted at teardown and flushed there, as expected (not
    /// errors).
    pub recv_flushed: u64,
    /// Messages whose bytes, length, immediate or completion order were
    /// wrong (roce streams: frames lost, out of order or corrupt).
    pub mismatches: u64,
    /// What the first mismatch was.
    pub first_mismatch: Option<String>,
    /// Why the connection never came up, if it did not.
    pub connect_error: Option<String>,
    /// Local failures (verbs calls that returned an error, a stream that gave
    /// up), in order.
    pub local_errors: Vec<String>,
    /// Virtual time in nanoseconds when the data phase began (the connection
    /// was up); `None` if it never did.
    pub started_ns: Option<u64>,
    /// Virtual time in nanoseconds of the last completion, or of when the
    /// stream gave up; `None` if it never finished.
    pub finished_ns: Option<u64>,
    /// `finished_ns - started_ns`, or 0 when either is missing.
    pub data_time_ns: u64,
    /// `bytes` per virtual second over `data_time_ns` (0 when no time
    /// passed).
    pub throughput_bytes_per_sec: u64,
    /// `op = "roce"` streams: what the receive server got, per channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roce: Option<RoceReport>,
}

/// The receive server's view of a `op = "roce"` stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoceReport {
    /// Frames and bytes the server received, by channel.
    pub channels: BTreeMap<u8, ChannelCount>,
    /// The size of each receive slot in bytes (`max_payload`).
    pub max_payload: u32,
    /// The server's receive slots (the stream's `recv_depth`).
    pub rx_queue_depth: u32,
    /// The time the consumer held each frame, in nanoseconds
    /// (`consumer_delay`).
    pub consumer_delay_ns: u64,
    /// Ring positions skipped over: frames that had not arrived when a later
    /// one did.
    pub lost: u64,
    /// Frames whose ring position was behind the one expected (a repeat or a
    /// late arrival).
    pub out_of_order: u64,
    /// Frames whose payload was not their PRBS.
    pub corrupt: u64,
}

/// Fabric counters in the simulator's order (a JSON object, not sorted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters(pub Vec<(&'static str, u64)>);

impl Serialize for Counters {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Verbs objects still alive across the fabric at the end of a run;
/// `[expect].no_leaks` (on by default) requires all of them to be 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Leaks {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues (left out of the JSON while 0: no scenario
    /// application makes one).
    #[serde(skip_serializing_if = "is_zero")]
    pub srqs: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Report {
    /// Assembles the report of one run of `scenario` with `seed`: `streams`
    /// holds each stream's statistics in scenario order, `finished_at` is when
    /// the run ended, `fabric` and `leaked` are read after teardown, and
    /// `passed` is true when every entry of `checks` passed. The roce parts
    /// come later, from [`Report::add_roce`].
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        scenario: &Scenario,
        seed: u64,
        outcome: &Outcome,
        finished_at: Instant,
        streams: &[StreamStats],
        fabric: &FabricStats,
        leaked: &LiveResources,
        notes: Vec<String>,
        checks: Vec<Check>,
    ) -> Report {
        let streams = scenario
            .streams
            .iter()
            .zip(streams)
            .map(|(spec, s)| StreamReport {
                name: spec.config.name.clone(),
                op: spec.config.op,
                from: spec.from.clone(),
                to: spec.to.clone(),
                // A session stream's QPs are connected by the session protocol.
                connect: if spec.session.is_some() { "rcsession" } else { spec.config.connect.key() },
                count: spec.config.count,
                min_size: spec.config.min_size,
                max_size: spec.config.max_size,
                queue_depth: spec.config.queue_depth,
                posted: s.posted,
                completed: s.completed,
                received: s.received,
                bytes: s.bytes,
                errors: status_counts(&s.errors),
                recv_errors: status_counts(&s.recv_errors),
                recv_flushed: s.recv_flushed,
                mismatches: s.mismatches,
                first_mismatch: s.first_mismatch.clone(),
                connect_error: s.connect_error.clone(),
                local_errors: s.local_errors.clone(),
                started_ns: s.started_at.map(Instant::as_nanos),
                finished_ns: s.finished_at.map(Instant::as_nanos),
                data_time_ns: s.data_time_nanos(),
                throughput_bytes_per_sec: s.throughput_bytes_per_sec(),
                roce: None,
            })
            .collect();
        Report {
            scenario: scenario.name.clone(),
            seed,
            passed: checks.iter().all(|c| c.passed),
            outcome: match outcome {
                Outcome::Completed => "completed",
                Outcome::Stalled { .. } => "stalled",
                Outcome::TimeLimit { .. } => "time_limit",
                Outcome::Livelock { .. } => "livelock",
            },
            virtual_time_ns: finished_at.as_nanos(),
            streams,
            fabric: Counters(fabric_counters(fabric)),
            leaked: Leaks { pds: leaked.pds, mrs: leaked.mrs, cqs: leaked.cqs, qps: leaked.qps, srqs: leaked.srqs },
            notes,
            checks,
        }
    }

    /// Adds the receive server's view to each `op = "roce"` stream.
    pub fn add_roce(&mut self, scenario: &Scenario, checks: &[Option<FrameCheck>]) {
        for ((report, spec), check) in self.streams.iter_mut().zip(&scenario.streams).zip(checks) {
            let (Some(r), Some(c)) = (&spec.roce, check) else { continue };
            report.connect = "surf";
            report.roce = Some(RoceReport {
                channels: c.channels.clone(),
                max_payload: r.max_payload,
                rx_queue_depth: spec.config.recv_depth,
                consumer_delay_ns: r.consumer_delay.as_nanos() as u64,
                lost: c.lost,
                out_of_order: c.out_of_order,
                corrupt: c.corrupt,
            });
        }
    }

    /// The failed checks, one line each.
    pub fn failures(&self) -> Vec<String> {
        self.checks.iter().filter(|c| !c.passed).map(|c| format!("expected {}, got {}", c.what, c.got)).collect()
    }

    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a report always serializes");
        s.push('\n');
        s
    }

    /// The human report.
    pub fn to_text(&self) -> String {
        self.to_string()
    }
}

/// Seconds with nanosecond precision, as `Instant` prints them.
fn secs(ns: u64) -> String {
    format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// Bytes per second as MB/s with one decimal, in integers so it is exact.
fn mb_per_sec(bps: u64) -> String {
    format!("{}.{} MB/s", bps / 1_000_000, (bps / 100_000) % 10)
}

fn counts(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".to_string();
    }
    m.iter().map(|(k, v)| format!("{k} x{v}")).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scenario {} (seed {})", self.scenario, self.seed)?;
        writeln!(f, "outcome  {} at {} virtual", self.outcome, secs(self.virtual_time_ns))?;
        for s in &self.streams {
            let size = if s.min_size == s.max_size {
                format!("{} B", s.min_size)
            } else {
                format!("{}..={} B", s.min_size, s.max_size)
            };
            writeln!(f)?;
            writeln!(
                f,
                "stream {}: {} {} -> {} ({}), {} x {size}, depth {}",
                s.name,
                s.op.verb_name(),
                s.from,
                s.to,
                s.connect,
                s.count,
                s.queue_depth
            )?;
            let mut line = format!("  delivered {}/{} (posted {})", s.completed, s.count, s.posted);
            if s.op.consumes_recv() {
                let _ = write!(line, ", received {}", s.received);
            }
            writeln!(f, "{line}")?;
            writeln!(
                f,
                "  errors: {}; receive errors: {}; receives flushed at teardown: {}",
                counts(&s.errors),
                counts(&s.recv_errors),
                s.recv_flushed
            )?;
            writeln!(
                f,
                "  data: {} mismatches; {} bytes in {} = {}",
                s.mismatches,
                s.bytes,
                secs(s.data_time_ns),
                mb_per_sec(s.throughput_bytes_per_sec)
            )?;
            if let Some(r) = &s.roce {
                let chans: Vec<String> =
                    r.channels.iter().map(|(ch, c)| format!("{ch}: {} x {} B", c.frames, c.bytes)).collect();
                writeln!(
                    f,
                    "  roce: {} slots of {} B, consumer {} per frame; lost {}, out of order {}, corrupt {}",
                    r.rx_queue_depth,
                    r.max_payload,
                    crate::scenario::format_duration(rctb_core::time::Duration::from_nanos(r.consumer_delay_ns)),
                    r.lost,
                    r.out_of_order,
                    r.corrupt
                )?;
                writeln!(f, "  roce channels: {}", if chans.is_empty() { "none".into() } else { chans.join(", ") })?;
            }
            if let Some(m) = &s.first_mismatch {
                writeln!(f, "  first mismatch: {m}")?;
            }
            if let Some(e) = &s.connect_error {
                writeln!(f, "  connect error: {e}")?;
            }
            for e in &s.local_errors {
                writeln!(f, "  local error: {e}")?;
            }
        }
        writeln!(f)?;
        writeln!(f, "fabric")?;
        for (name, v) in &self.fabric.0 {
            writeln!(f, "  {name:<18} {v}")?;
        }
        let l = self.leaked;
        let leaks = describe_leaks(&LiveResources { pds: l.pds, mrs: l.mrs, cqs: l.cqs, qps: l.qps, srqs: l.srqs });
        writeln!(f, "resources left: {leaks}")?;
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        writeln!(f)?;
        writeln!(f, "expectations")?;
        for c in &self.checks {
            writeln!(f, "  {}  {} (got {})", if c.passed { "PASS" } else { "FAIL" }, c.what, c.got)?;
        }
        let failed = self.checks.iter().filter(|c| !c.passed).count();
        match failed {
            0 => writeln!(f, "result: PASS ({} checks)", self.checks.len()),
            n => writeln!(f, "result: FAIL ({n} of {} checks failed)", self.checks.len()),
        }
    }
}
