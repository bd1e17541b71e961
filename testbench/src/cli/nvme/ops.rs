//! What each `rctb nvme` subcommand does on a connected controller:
//! connect, identify, read, write, bench and flush.

use std::fmt::Write as _;

use rctb_core::Transport;
use rctb_core::nvmeof::{Buffer, Controller, NvmeError};
use rctb_core::time::Duration;

use super::text::{controller_text, fnv1a, namespace_text};
use super::{BenchRun, Failure, NvmeOp, Outcome, Pattern};
use crate::cli::jobs::{self, Job};

pub(super) fn op<T: Transport>(
    ctrl: &mut Controller<T>,
    op: &NvmeOp,
    job: &mut Job<'_>,
    pin: bool,
) -> Result<Outcome, Failure> {
    let mut out = String::new();
    match op {
        NvmeOp::Discover => unreachable!("handled before connecting"),
        NvmeOp::Connect => {
            let i = ctrl.info();
            let _ = writeln!(
                out,
                "connected: {} cntlid {} ({} {}, fw {})",
                i.subnqn,
                ctrl.cntlid(),
                i.model,
                i.serial,
                i.firmware
            );
            let queues = ctrl.io_queues();
            let _ = writeln!(
                out,
                "io queues: {} x depth {}; max transfer {} bytes; in-capsule {} bytes",
                queues.len(),
                queues.first().map_or(0, |q| q.depth()),
                ctrl.max_transfer(),
                queues.first().map_or(0, |q| q.in_capsule())
            );
        }
        NvmeOp::Identify { nsid } => {
            out.push_str(&controller_text(ctrl.info()));
            let ids = match nsid {
                Some(n) => vec![*n],
                None => ctrl.active_namespaces()?,
            };
            for id in ids {
                let ns = ctrl.namespace(id)?;
                out.push_str(&namespace_text(&ns.info));
            }
        }
        NvmeOp::Read { io, output } => {
            let ns = ctrl.namespace(io.nsid)?;
            let len = io.length.unwrap_or(ns.lba_size());
            let mr = ctrl.alloc(len.max(1))?;
            let start = ctrl.transport().now();
            let r = ctrl.read(&ns, io.slba, Buffer::slice(mr, 0, len));
            let elapsed = ctrl.transport().now() - start;
            let mut data = vec![0u8; len as usize];
            let copied = ctrl.transport().mr_read(mr.id, 0, &mut data);
            let _ = ctrl.free(mr);
            r?;
            copied.map_err(NvmeError::from)?;
            if let Some(p) = output {
                std::fs::write(p, &data).map_err(|e| Failure::Io(format!("writing {}: {e}", p.display())))?;
            }
            let _ = writeln!(
                out,
                "read {len} bytes from nsid {} block {}: fnv1a {:016x}{}",
                io.nsid,
                io.slba,
                fnv1a(&data),
                rate(len, elapsed)
            );
        }
        NvmeOp::Write { io, data, flush } => {
            let ns = ctrl.namespace(io.nsid)?;
            let bytes = match data {
                Some(p) => std::fs::read(p).map_err(|e| Failure::Io(format!("reading {}: {e}", p.display())))?,
                None => {
                    let len = io.length.unwrap_or(ns.lba_size());
                    (0..len).map(|i| (i as u8).wrapping_mul(167) ^ (i >> 12) as u8).collect()
                }
            };
            let len = io.length.unwrap_or(bytes.len() as u64);
            if len > bytes.len() as u64 {
                return Err(Failure::Usage(format!("--length {len} exceeds the {} bytes of data", bytes.len())));
            }
            let mr = ctrl.alloc(len.max(1))?;
            let r = ctrl.transport_mut().mr_write(mr.id, 0, &bytes[..len as usize]).map_err(NvmeError::from);
            let start = ctrl.transport().now();
            let r = r.and_then(|_| ctrl.write(&ns, io.slba, Buffer::slice(mr, 0, len)));
            let elapsed = ctrl.transport().now() - start;
            let _ = ctrl.free(mr);
            r?;
            if *flush {
                ctrl.flush(&ns)?;
            }
            let _ = writeln!(
                out,
                "wrote {len} bytes to nsid {} block {}: fnv1a {:016x}{}{}",
                io.nsid,
                io.slba,
                fnv1a(&bytes[..len as usize]),
                rate(len, elapsed),
                if *flush { "; flushed" } else { "" }
            );
        }
        NvmeOp::Bench { nsid, bs, pattern, qd, ios, .. } => {
            let ns = ctrl.namespace(*nsid)?;
            let lba = ns.lba_size();
            if *qd == 0 {
                return Err(Failure::Usage("--qd 0: at least one read in flight".into()));
            }
            if *bs == 0 || bs % lba != 0 || *ios == 0 {
                return Err(Failure::Usage(format!("--bs {bs} must be a multiple of the block size {lba}; --ios > 0")));
            }
            let per = bs / lba;
            let slots = ns.blocks() / per;
            if slots == 0 {
                return Err(Failure::Usage(format!(
                    "--bs {bs}: larger than nsid {nsid} ({} blocks of {lba} bytes)",
                    ns.blocks()
                )));
            }
            // This job's part of the run (all of it for one job).
            let (n, i) = (job.count, job.index);
            let my_ios = jobs::share(*ios, n, i);
            let my_qd = jobs::share(*qd as u64, n, i) as usize;
            // Each read has its own slice of one buffer, so nothing is reused in flight.
            let total = bs
                .checked_mul(my_ios)
                .ok_or_else(|| Failure::Usage(format!("--bs {bs} x --ios {ios}: too many bytes")))?;
            let mr = ctrl.alloc(total)?;
            // Jobs draw from their own generators, and read sequentially from
            // their own stretch of the namespace.
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ *nsid as u64 ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
            let first = slots * i as u64 / n as u64;
            let reqs: Vec<(u64, Buffer)> = (0..my_ios)
                .map(|k| {
                    let slba = match pattern {
                        Pattern::Rand => {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                            (x >> 33) % slots * per
                        }
                        Pattern::Seq => (first + k) % slots * per,
                    };
                    (slba, Buffer::slice(mr, k * bs, *bs))
                })
                .collect();
            if !job.start() {
                let _ = ctrl.free(mr);
                return Err(Failure::Stopped);
            }
            let start = ctrl.transport().now();
            let r = ctrl.read_many(&ns, &reqs, my_qd);
            let elapsed = ctrl.transport().now() - start;
            let _ = ctrl.free(mr);
            r?;
            return Ok(Outcome::Bench(BenchRun {
                ios: my_ios,
                qd: my_qd,
                elapsed,
                queues: ctrl.io_queues().len(),
                poll: ctrl.poll_mode(),
                pinned: jobs::pinned(pin),
            }));
        }
        NvmeOp::Flush { nsid } => {
            let ns = ctrl.namespace(*nsid)?;
            ctrl.flush(&ns)?;
            let _ = writeln!(out, "flushed nsid {nsid}");
        }
        NvmeOp::Target(_) => unreachable!("served before connecting (main)"),
    }
    Ok(Outcome::Text(out))
}

fn rate(len: u64, elapsed: Duration) -> String {
    if elapsed.is_zero() {
        return String::new();
    }
    format!(" ({:.1} MB/s)", len as f64 / elapsed.as_secs_f64() / 1e6)
}
