//! The `op = "rcsession"` stream: its `[streams.session]` table and its
//! rules. `queue_depth` is the number of concurrent session clients on
//! `from`, `count` the transfers in all, `size` the object sizes; the
//! session server runs on `to`.

use rctb_core::rcsession::Limits;
use rctb_core::time::Duration;
use rctb_models::rcsession::WorkloadConfig;

use super::Invalid;
use super::file::StreamFile;
use super::validate::Check;
use crate::traffic::StreamConfig;

/// The stream op that selects the session workload.
pub const OP: &str = "rcsession";

pub(super) fn validate(
    c: &mut Check,
    field: &str,
    s: &StreamFile,
    is_session: bool,
    cfg: &StreamConfig,
) -> Option<WorkloadConfig> {
    if !is_session {
        if s.session.is_some() {
            c.push(Invalid::rule(format!("{field}.session"), "is only for op = \"rcsession\""));
        }
        return None;
    }
    for (name, set) in [("connect", s.connect.is_some()), ("recv_depth", s.recv_depth.is_some())] {
        if set {
            c.push(Invalid::rule(
                format!("{field}.{name}"),
                "does not apply to op = \"rcsession\" (the session protocol connects its QPs itself)",
            ));
        }
    }
    if cfg.min_size == 0 {
        c.push(Invalid::rule(format!("{field}.size"), "session objects are 1..=2147483647 bytes"));
    }
    c.int(format!("{field}.queue_depth"), cfg.queue_depth as i64, 1, 256, "1..=256 (concurrent session clients)");
    let defaults = WorkloadConfig::default();
    let file = s.session.as_ref();
    let f = format!("{field}.session");
    let p =
        |c: &mut Check, name: &str, v: Option<f64>, d: f64| v.map_or(d, |v| c.probability(format!("{f}.{name}"), v));
    let put = p(c, "put", file.and_then(|x| x.put), defaults.put);
    let cancel = p(c, "cancel", file.and_then(|x| x.cancel), defaults.cancel);
    let slow = p(c, "slow", file.and_then(|x| x.slow), defaults.slow);
    let crash = p(c, "crash", file.and_then(|x| x.crash), defaults.crash);
    let principals = file
        .and_then(|x| x.principals)
        .map_or(defaults.principals, |v| c.int(format!("{f}.principals"), v, 1, 1000, "1..=1000") as usize);
    let mut limits = Limits::generous();
    if let Some(v) = file.and_then(|x| x.max_sessions) {
        limits.max_sessions = c.int(format!("{f}.max_sessions"), v, 1, 1 << 20, "1..=1048576") as u32;
    }
    if let Some(v) = file.and_then(|x| x.max_staging_bytes) {
        limits.max_staging_bytes = c.int(format!("{f}.max_staging_bytes"), v, 1, 1 << 40, "1..=2^40") as u64;
    }
    if limits.max_staging_bytes < cfg.max_size as u64 {
        c.push(Invalid::rule(format!("{f}.max_staging_bytes"), "is below the largest object: no PREPARE could pass"));
    }
    let t_prep = file.and_then(|x| x.t_prep).map_or(defaults.server.t_prep, |d| d.0);
    let t_exec = file.and_then(|x| x.t_exec).map_or(defaults.server.t_exec, |d| d.0);
    for (name, d) in [("t_prep", t_prep), ("t_exec", t_exec)] {
        if d.is_zero() || d > Duration::from_secs(10) {
            c.push(Invalid::rule(format!("{f}.{name}"), "must be above 0 and at most 10s (simulated sessions expire)"));
        }
    }
    Some({
        let mut workload_config = WorkloadConfig::default();
        workload_config.clients = cfg.queue_depth as usize;
        workload_config.principals = principals;
        workload_config.transfers = cfg.count;
        workload_config.min_size = cfg.min_size as u64;
        workload_config.max_size = cfg.max_size as u64;
        workload_config.put = put;
        workload_config.cancel = cancel;
        workload_config.slow = slow;
        workload_config.crash = crash;
        workload_config.slow_delay = defaults.slow_delay;
        workload_config.server = {
            let mut server_config = defaults.server;
            server_config.limits = limits;
            server_config.t_prep = t_prep;
            server_config.t_exec = t_exec;
            server_config.rnr_retry = cfg.qp.rnr_retry.min(defaults.server.rnr_retry);
            server_config
        };
        workload_config
    })
}
