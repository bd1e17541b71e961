//! A bounded load test of the control plane: `clients` concurrent HTTP
//! clients (one kept-alive connection each) run `prepares` PREPARE (PUT,
//! no token) + READY with client QPN 0 (the control-plane-only test mode:
//! no data moves, nothing is committed; the gateway must run in it,
//! `GatewayOptions::control_plane_only`), and report the latency of each
//! PREPARE and READY (p50, p99, max) and the errors by status and code.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rctb_core::rcsession::{Op, ReadyRequest};
use rctb_core::wire::hipobj::{PrepareHeaders, PrincipalId};

use crate::client::{ControlPlane, ObjectError, ReadyAnswer};

/// What to run.
// Not non_exhaustive: the load's four numbers, all the caller's choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Concurrent clients.
    pub clients: usize,
    /// PREPARE + READY pairs in all.
    pub prepares: usize,
    /// The PREPARE size (staging the server allocates per session).
    pub size: u64,
    /// The bucket the PREPAREs name.
    pub bucket: String,
}

/// Latency percentiles of one request kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Requests measured.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

impl Latency {
    fn of(mut v: Vec<Duration>) -> Self {
        if v.is_empty() {
            return Latency::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Latency { count: v.len(), p50: at(0.50), p99: at(0.99), max: v[v.len() - 1] }
    }
}

/// The outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// PREPARE + READY pairs that both answered 200.
    pub ok: usize,
    /// PREPARE latencies.
    pub prepare: Latency,
    /// READY latencies.
    pub ready: Latency,
    /// Errors by `"<route> <status> <code>"` (or the transport error).
    pub errors: BTreeMap<String, usize>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl LoadReport {
    /// Errors of every kind.
    pub fn error_count(&self) -> usize {
        self.errors.values().sum()
    }

    /// One line per figure (what `rctb object load` prints).
    pub fn lines(&self) -> Vec<String> {
        let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1e3);
        let mut out = vec![
            format!(
                "ok {} errors {} in {:.2} s ({:.0} PREPARE+READY/s)",
                self.ok,
                self.error_count(),
                self.elapsed.as_secs_f64(),
                self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
            ),
            format!(
                "PREPARE n={} p50 {} p99 {} max {}",
                self.prepare.count,
                ms(self.prepare.p50),
                ms(self.prepare.p99),
                ms(self.prepare.max)
            ),
            format!(
                "READY   n={} p50 {} p99 {} max {}",
                self.ready.count,
                ms(self.ready.p50),
                ms(self.ready.p99),
                ms(self.ready.max)
            ),
        ];
        for (what, n) in &self.errors {
            out.push(format!("error {what}: {n}"));
        }
        out
    }
}

fn error_key(route: &str, e: &ObjectError) -> String {
    match e {
        ObjectError::Http { status, code, .. } => format!("{route} {status} {code}"),
        other => format!("{route} {other}"),
    }
}

/// The wall clock, for latencies only.
#[allow(clippy::disallowed_methods)] // latency figures are wall time by definition
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

/// Runs the load; `connect(i)` makes client `i`'s control plane.
pub async fn run(opts: &LoadOptions, connect: impl Fn(usize) -> ControlPlane) -> LoadReport {
    let next = Arc::new(AtomicUsize::new(0));
    let start = now();
    let mut tasks = Vec::new();
    for i in 0..opts.clients.max(1) {
        let cp = connect(i);
        let next = next.clone();
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            let principal: PrincipalId = cp.credentials().principal();
            let (mut prep, mut ready, mut errors, mut ok) = (Vec::new(), Vec::new(), BTreeMap::new(), 0usize);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= opts.prepares {
                    break;
                }
                let cookie = (n as u32).wrapping_mul(2_654_435_761).max(1);
                let h = PrepareHeaders {
                    op: Op::Put,
                    target: format!("/{}/c{i}-{n}", opts.bucket),
                    size: opts.size,
                    offset: 0,
                    psn: (n as u32 % 0xFF_FFFF) + 1,
                    cookie,
                    token: None,
                    checksum: None,
                };
                let t = now();
                let reply = cp.prepare(&h).await;
                prep.push(t.elapsed());
                let reply = match reply {
                    Ok(r) => r,
                    Err(e) => {
                        *errors.entry(error_key("PREPARE", &e)).or_insert(0) += 1;
                        continue;
                    }
                };
                let r = ReadyRequest {
                    principal,
                    session: reply.session,
                    cookie,
                    client_qpn: 0,
                    client_mr_addr: 0,
                    client_mr_rkey: 0,
                };
                let t = now();
                let answer = cp.ready(&r).await;
                ready.push(t.elapsed());
                match answer {
                    Ok(ReadyAnswer::Ok { bytes, .. }) if bytes == opts.size => ok += 1,
                    Ok(other) => *errors.entry(format!("READY {other:?}")).or_insert(0) += 1,
                    Err(e) => *errors.entry(error_key("READY", &e)).or_insert(0) += 1,
                }
            }
            (prep, ready, errors, ok)
        }));
    }
    let mut report = LoadReport::default();
    let (mut prep, mut ready) = (Vec::new(), Vec::new());
    for t in tasks {
        match t.await {
            Ok((p, r, e, ok)) => {
                prep.extend(p);
                ready.extend(r);
                for (k, v) in e {
                    *report.errors.entry(k).or_insert(0) += v;
                }
                report.ok += ok;
            }
            Err(e) => *report.errors.entry(format!("client task: {e}")).or_insert(0) += 1,
        }
    }
    report.elapsed = start.elapsed();
    report.prepare = Latency::of(prep);
    report.ready = Latency::of(ready);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let l = Latency::of(v);
        assert_eq!(
            (l.count, l.p50, l.p99, l.max),
            (100, Duration::from_millis(50), Duration::from_millis(99), Duration::from_millis(100))
        );
        assert_eq!(Latency::of(vec![Duration::from_millis(7)]).p99, Duration::from_millis(7));
        assert_eq!(Latency::of(Vec::new()), Latency::default());
    }
}
