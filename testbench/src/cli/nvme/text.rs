//! What `rctb nvme` prints: a run's text (`bench`'s summed over its jobs,
//! the `BENCH` line), the discovery log, the identify data and the
//! polling mode.

use std::fmt::Write as _;

use rctb_core::nvmeof::protocol::*;
use rctb_core::time::Duration;
use rctb_core::transport::PollMode;

use super::{Failure, NvmeArgs, NvmeOp, Outcome, Pattern};

/// The text of a run: one job's as it is, or `bench`'s summed over its
/// jobs; the first failure when a job failed (a usage error before any
/// other, then the one that stopped the rest, named by its job).
pub(super) fn render(a: &NvmeArgs, results: Vec<Result<Outcome, Failure>>) -> Result<String, Failure> {
    let many = results.len() > 1;
    let mut runs = Vec::with_capacity(results.len());
    let mut failed: Option<Failure> = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(Outcome::Text(t)) => return Ok(t),
            Ok(Outcome::Bench(b)) => runs.push(b),
            Err(e @ Failure::Usage(_)) => return Err(e),
            Err(Failure::Stopped) if failed.is_some() => {}
            Err(e) if failed.is_none() || matches!(failed, Some(Failure::Stopped)) => {
                failed = Some(match e {
                    Failure::Nvme(e) if many => Failure::Io(format!("job {i}: {e}")),
                    Failure::Io(m) if many => Failure::Io(format!("job {i}: {m}")),
                    e => e,
                });
            }
            Err(_) => {}
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let NvmeOp::Bench { nsid, bs, pattern, qd, ios, .. } = a.op else {
        unreachable!("only bench runs several jobs or returns a bench run")
    };
    let elapsed = runs.iter().map(|r| r.elapsed).max().unwrap_or(Duration::ZERO);
    let iops = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let size = if bs % (1 << 20) == 0 {
        format!("{}MiB", bs >> 20)
    } else if bs % 1024 == 0 {
        format!("{}KiB", bs / 1024)
    } else {
        format!("{bs}B")
    };
    let (kind, words) = match pattern {
        Pattern::Rand => ("randread", "random"),
        Pattern::Seq => ("seqread", "sequential"),
    };
    let mut out = String::new();
    let _ = writeln!(out, "BENCH nvme-{kind}-{size}-qd{qd} rctb {:.0} IOPS", iops(ios, elapsed));
    let first = &runs[0];
    if let [one] = &runs[..] {
        let _ = writeln!(
            out,
            "{ios} {words} {bs}-byte reads of nsid {nsid} at depth {qd} over {} I/O queues ({} polling{}) in {elapsed:?}",
            one.queues,
            poll_name(one.poll),
            one.pinned,
        );
    } else {
        let _ = writeln!(
            out,
            "{ios} {words} {bs}-byte reads of nsid {nsid} at depth {qd} in {} jobs, each its own controller over {} I/O queues ({} polling), in {elapsed:?} (the slowest job's)",
            runs.len(),
            first.queues,
            poll_name(first.poll),
        );
        for (i, r) in runs.iter().enumerate() {
            let _ = writeln!(
                out,
                "job {i}: {} reads at depth {} in {:?}: {:.0} IOPS{}",
                r.ios,
                r.qd,
                r.elapsed,
                iops(r.ios, r.elapsed),
                r.pinned
            );
        }
    }
    Ok(out)
}
/// FNV-1a 64 of the data: a short fingerprint to compare runs.
pub use rctb_core::transport::seed::fnv1a;

/// The discovery log as `nvme discover` prints it.
pub fn discovery_text(log: &DiscoveryLog) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "Discovery Log Number of Records {}, Generation counter {}", log.header.numrec, log.header.genctr);
    for (i, e) in log.entries.iter().enumerate() {
        let _ = writeln!(s, "=====Discovery Log Entry {i}======");
        let _ = writeln!(s, "trtype:  {}", e.trtype_name());
        let _ = writeln!(s, "adrfam:  {}", if e.adrfam == ADRFAM_IPV4 { "ipv4" } else { "other" });
        let _ = writeln!(s, "subtype: {}", e.subtype_name());
        let _ = writeln!(s, "portid:  {}", e.portid);
        let _ = writeln!(s, "trsvcid: {}", e.trsvcid);
        let _ = writeln!(s, "subnqn:  {}", e.subnqn);
        let _ = writeln!(s, "traddr:  {}", e.traddr);
    }
    s
}

/// The controller fields the initiator uses.
pub fn controller_text(i: &ControllerInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "NVME Identify Controller:");
    let _ = writeln!(s, "sn      : {}", i.serial);
    let _ = writeln!(s, "mn      : {}", i.model);
    let _ = writeln!(s, "fr      : {}", i.firmware);
    let _ = writeln!(s, "mdts    : {}", i.mdts);
    let _ = writeln!(s, "cntlid  : {:#x}", i.cntlid);
    let _ = writeln!(s, "ver     : {}", i.version_text());
    let _ = writeln!(s, "kas     : {}", i.kas);
    let _ = writeln!(s, "maxcmd  : {}", i.maxcmd);
    let _ = writeln!(s, "nn      : {}", i.nn);
    let _ = writeln!(s, "sgls    : {:#x}", i.sgls);
    let _ = writeln!(s, "subnqn  : {}", i.subnqn);
    let _ = writeln!(s, "ioccsz  : {}", i.ioccsz);
    let _ = writeln!(s, "iorcsz  : {}", i.iorcsz);
    let _ = writeln!(s, "icdoff  : {}", i.icdoff);
    let _ = writeln!(s, "msdbd   : {}", i.msdbd);
    s
}

pub fn namespace_text(n: &NamespaceInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "NVME Identify Namespace {}:", n.nsid);
    let _ = writeln!(s, "nsze    : {:#x}", n.nsze);
    let _ = writeln!(s, "ncap    : {:#x}", n.ncap);
    let _ = writeln!(s, "nuse    : {:#x}", n.nuse);
    let _ = writeln!(s, "nlbaf   : {}", n.formats.len().saturating_sub(1));
    let _ = writeln!(s, "flbas   : {:#x}", n.flbas);
    for (i, f) in n.formats.iter().enumerate() {
        let used = if i == (n.flbas & 0xF) as usize { " (in use)" } else { "" };
        let _ = writeln!(s, "lbaf {i:2} : ms:{} lbads:{} rp:{:#x}{used}", f.ms, f.lbads, f.rp);
    }
    s
}

/// A polling mode as `--poll` spells it.
fn poll_name(m: PollMode) -> String {
    match m {
        PollMode::Busy => "busy".into(),
        PollMode::Adaptive { spin } => format!("adaptive, spin {spin}"),
        PollMode::Event => "event".into(),
    }
}
