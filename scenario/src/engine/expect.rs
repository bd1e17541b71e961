//! Turns a run's results into PASS/FAIL checks against the scenario's
//! expectations. Each check says what was expected and what happened, so a
//! failing run explains itself.

use rctb_core::time::Instant;
use rctb_core::transport::WcStatus;
use rctb_sim::{FabricStats, LiveResources};
use serde::Serialize;

use crate::counters::fabric_counters;
use crate::roce::check::FrameCheck;
use crate::runner::{Outcome, describe_leaks};
use crate::scenario::{CountExpect, Scenario, StreamSpec, format_duration};
use crate::traffic::StreamStats;

/// One evaluated expectation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Whether what happened met the expectation (PASS in the report).
    pub passed: bool,
    /// What was expected.
    pub what: String,
    /// What happened.
    pub got: String,
}

fn check(passed: bool, what: impl Into<String>, got: impl Into<String>) -> Check {
    Check { passed, what: what.into(), got: got.into() }
}

fn count(what: String, expect: CountExpect, got: u64) -> Check {
    check(expect.matches(got), format!("{what} {expect}"), got.to_string())
}

/// Every check of a run, in a fixed order: the run, each stream, the fabric.
pub fn evaluate(
    scenario: &Scenario,
    outcome: &Outcome,
    streams: &[StreamStats],
    finished_at: Instant,
    fabric: &FabricStats,
    leaked: &LiveResources,
) -> Vec<Check> {
    let mut out = vec![match outcome {
        Outcome::Completed => check(true, "every stream finished", "yes"),
        Outcome::Stalled { at, waiting } => check(
            false,
            "every stream finished",
            format!("stalled at {at}: nothing pending, waiting: {}", waiting.join(", ")),
        ),
        Outcome::TimeLimit { at, waiting } => check(
            false,
            "every stream finished",
            format!(
                "time limit {} reached at {at}, waiting: {}",
                format_duration(scenario.time_limit),
                waiting.join(", ")
            ),
        ),
        Outcome::Livelock { at, waiting } => check(
            false,
            "every stream finished",
            format!("livelock at {at}: progress without time passing, in: {}", waiting.join(", ")),
        ),
    }];
    // nvme streams have their own checks (crate::nvme_stream::checks).
    for (spec, stats) in scenario.streams.iter().zip(streams).filter(|(spec, _)| spec.nvme.is_none()) {
        stream_checks(spec, stats, &mut out);
    }
    if let Some(max) = scenario.expect.max_duration {
        let elapsed = finished_at - Instant::ZERO;
        out.push(check(
            elapsed <= max,
            format!("virtual duration <= {}", format_duration(max)),
            format!("{}", finished_at),
        ));
    }
    let counters = fabric_counters(fabric);
    for (name, expect) in &scenario.expect.fabric {
        let got = counters.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
        out.push(count(format!("fabric {name}"), *expect, got));
    }
    if scenario.expect.no_leaks {
        out.push(check(*leaked == LiveResources::default(), "no verbs resources left", describe_leaks(leaked)));
    }
    out
}

fn stream_checks(spec: &StreamSpec, s: &StreamStats, out: &mut Vec<Check>) {
    let name = &spec.config.name;
    let e = &spec.expect;
    let all = CountExpect::exactly(spec.config.count);
    let clean = e.errors.is_empty();
    if let Some(why) = &s.connect_error {
        out.push(check(false, format!("{name}: connected"), why.clone()));
    }
    out.push(check(
        s.local_errors.is_empty(),
        format!("{name}: no local verb errors"),
        match s.local_errors.first() {
            None => "none".to_string(),
            Some(first) => format!("{} ({first})", s.local_errors.len()),
        },
    ));
    if let Some(expect) = e.delivered.or(clean.then_some(all)) {
        out.push(count(format!("{name}: delivered"), expect, s.completed));
    }
    if spec.config.op.consumes_recv()
        && let Some(expect) = e.received.or(clean.then_some(all))
    {
        out.push(count(format!("{name}: received"), expect, s.received));
    }
    for (status, expect) in &e.errors {
        let got = s.errors.get(status).copied().unwrap_or(0);
        out.push(count(format!("{name}: {status} completions"), *expect, got));
    }
    let unexpected: Vec<String> = s
        .errors
        .iter()
        .filter(|(status, _)| !e.errors.contains_key(status))
        .map(|(status, n)| format!("{status} x{n}"))
        .collect();
    let what = if clean { "no error completions" } else { "no other error completions" };
    out.push(check(unexpected.is_empty(), format!("{name}: {what}"), list_or_none(&unexpected)));
    let recv_errors: Vec<String> = s.recv_errors.iter().map(|(st, n)| format!("{st} x{n}")).collect();
    out.push(check(recv_errors.is_empty(), format!("{name}: no receive errors"), list_or_none(&recv_errors)));
    let intact = s.mismatches == 0;
    let got = match &s.first_mismatch {
        None => "0 mismatches".to_string(),
        Some(first) => format!("{} mismatches, first: {first}", s.mismatches),
    };
    let what = if e.data_integrity { "data intact" } else { "a data mismatch detected" };
    out.push(check(intact == e.data_integrity, format!("{name}: {what}"), got));
}

/// The receive server's exact counts for each `op = "roce"` stream: frame
/// i went to channel `channels[i mod n]`, so each channel must hold exactly
/// its share of the frames the engine sent successfully.
pub fn roce_checks(scenario: &Scenario, streams: &[StreamStats], rx: &[Option<FrameCheck>]) -> Vec<Check> {
    let mut out = Vec::new();
    for ((spec, s), rxc) in scenario.streams.iter().zip(streams).zip(rx) {
        let (Some(roce), Some(c)) = (&spec.roce, rxc) else { continue };
        let n = roce.channels.len() as u64;
        let mut want: std::collections::BTreeMap<u8, u64> = std::collections::BTreeMap::new();
        for (j, ch) in roce.channels.iter().enumerate() {
            let share = (s.completed + n - 1 - j as u64) / n;
            if share > 0 {
                *want.entry(*ch).or_default() += share;
            }
        }
        let got: std::collections::BTreeMap<u8, u64> = c.channels.iter().map(|(ch, cc)| (*ch, cc.frames)).collect();
        let show = |m: &std::collections::BTreeMap<u8, u64>| {
            let v: Vec<String> = m.iter().map(|(ch, f)| format!("{ch}: {f}")).collect();
            if v.is_empty() { "none".to_string() } else { v.join(", ") }
        };
        out.push(check(
            got == want,
            format!("{}: frames per channel as sent ({})", spec.config.name, show(&want)),
            show(&got),
        ));
    }
    out
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "none".to_string() } else { items.join(", ") }
}

/// The status names of an error map, for reports.
pub fn status_counts(m: &std::collections::BTreeMap<WcStatus, u64>) -> std::collections::BTreeMap<String, u64> {
    m.iter().map(|(s, n)| (s.name().to_string(), *n)).collect()
}
