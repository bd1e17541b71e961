//! The `op = "nvme"` stream: its `[streams.nvme]` table and its rules.
//! `from` runs the NVMe-oF initiator (`rctb_core::nvmeof`), `to` the target
//! model (`rctb_models::nvme`) with one namespace; `count` is the
//! number of I/O commands (reads, writes and flushes, drawn from the seed),
//! `size` the bytes of each read or write, `queue_depth` the commands in
//! flight. `expect.errors` names NVMe error kinds (see [`ERROR_KINDS`]).

use std::collections::BTreeMap;

use rctb_core::time::Duration;
use serde::Deserialize;

use super::file::StreamFile;
use super::units::{CountExpect, DurationStr};
use super::validate::Check;
use super::{Invalid, StreamSpec};
use crate::traffic::StreamConfig;

/// The stream op that selects the NVMe workload.
pub const OP: &str = "nvme";

/// What `expect.errors` of an nvme stream may name: how a command failed.
pub const ERROR_KINDS: &[&str] = &[
    "timeout",
    "disconnected",
    "completion",
    "status",
    "rejected",
    "unreachable",
    "protocol",
    "queue_full",
    "controller",
    "local",
];
const ERROR_KINDS_TEXT: &str =
    "timeout, disconnected, completion, status, rejected, unreachable, protocol, queue_full, controller, local";

/// `[streams.nvme]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeFile {
    pub lba_size: Option<i64>,
    pub blocks: Option<i64>,
    pub read: Option<f64>,
    pub flush: Option<f64>,
    pub io_queues: Option<i64>,
    pub mdts: Option<i64>,
    pub in_capsule: Option<i64>,
    pub timeout: Option<DurationStr>,
    pub keep_alive: Option<DurationStr>,
    pub response_delay: Option<DurationStr>,
    pub ready_delay: Option<DurationStr>,
    pub reconnect: Option<bool>,
    pub reconnect_delay: Option<DurationStr>,
    pub reconnect_attempts: Option<i64>,
    #[serde(default)]
    pub faults: Vec<NvmeFaultFile>,
    pub reconnects: Option<CountExpect>,
}

/// One entry of `[streams.nvme].faults`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeFaultFile {
    pub at: DurationStr,
    pub action: String,
    pub delay: Option<DurationStr>,
    pub count: Option<i64>,
}

/// A fault of the target model, at a virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmeFaultAction {
    /// Every response from now on waits this long (0: none); `delay` is
    /// required.
    Delay(Duration),
    /// The next `n` responses are not sent (the commands still execute);
    /// `count`, 1..=1000000, default 1.
    Drop(u32),
    /// Every connection torn down, unflushed writes lost, nothing listens;
    /// refused while the target is already down.
    Crash,
    /// Listening again after a crash; refused without an earlier crash.
    Restart,
}

/// One entry of `[streams.nvme].faults`: what happens to the target model,
/// and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmeFault {
    /// Virtual time from the start of the run.
    pub at: Duration,
    /// `action` (`delay`, `drop`, `crash` or `restart`) with its `delay` or
    /// `count`.
    pub action: NvmeFaultAction,
}

/// A validated `op = "nvme"` stream.
#[derive(Clone, Debug, PartialEq)]
pub struct NvmeSpec {
    /// Bytes per logical block of namespace 1: 512 (the default) or 4096;
    /// every read and write is a whole number of blocks.
    pub lba_size: u32,
    /// Namespace 1's size in blocks, 1..=1048576 (default 8192), with
    /// `blocks` x `lba_size` at most 256 MiB (the model keeps it in memory).
    pub blocks: u64,
    /// Share of commands that are reads, 0..=1 (default 0.5); `flush` of
    /// flushes; the rest writes.
    pub read: f64,
    /// Share of commands that are flushes, 0..=1 (default 0.05); the sum
    /// `read + flush` is at most 1.
    pub flush: f64,
    /// I/O queues the initiator opens and the target allows, 1..=4 (default
    /// 1).
    pub io_queues: u16,
    /// The target's MDTS (a power of two of 4 KiB pages), 1..=8 (default 5);
    /// see [`NvmeSpec::max_transfer`].
    pub mdts: u8,
    /// The target's in-capsule data bytes per I/O command (0: none),
    /// 0..=16384 in multiples of 16 (default 4096).
    pub in_capsule: u32,
    /// The initiator's per-command timeout (default 1s, above 0).
    pub timeout: Duration,
    /// KATO (0: no keep-alive, the default); otherwise at least 1ms.
    pub keep_alive: Duration,
    /// How long the target waits before sending each response (default 0),
    /// until a `delay` fault changes it.
    pub response_delay: Duration,
    /// How long the target takes from CC.EN = 1 to CSTS.RDY = 1 (default 0).
    pub ready_delay: Duration,
    /// Whether the initiator reconnects once its controller has failed and
    /// the commands in flight have drained (default false: the stream ends
    /// there).
    pub reconnect: bool,
    /// Wait before each reconnect attempt (default 1ms, above 0).
    pub reconnect_delay: Duration,
    /// Failed reconnect attempts in a row after which the stream gives up
    /// with a local error, 1..=100000 (default 100).
    pub reconnect_attempts: u32,
    /// Sorted by time.
    pub faults: Vec<NvmeFault>,
    /// Expected command failures by kind (kinds not listed must not occur).
    pub errors: BTreeMap<String, CountExpect>,
    /// Expected number of successful reconnects (`None`: not checked).
    pub reconnects: Option<CountExpect>,
}

impl NvmeSpec {
    /// Largest transfer of one command: 4 KiB pages << MDTS.
    pub fn max_transfer(&self) -> u64 {
        4096u64 << self.mdts
    }
}

pub(super) fn validate(
    c: &mut Check,
    field: &str,
    s: &StreamFile,
    is_nvme: bool,
    cfg: &StreamConfig,
) -> Option<NvmeSpec> {
    if !is_nvme {
        if s.nvme.is_some() {
            c.push(Invalid::rule(format!("{field}.nvme"), "is only for op = \"nvme\""));
        }
        return None;
    }
    for (name, set) in [
        ("connect", s.connect.is_some()),
        ("recv_depth", s.recv_depth.is_some()),
        ("retry_cnt", s.retry_cnt.is_some()),
        ("rnr_retry", s.rnr_retry.is_some()),
        ("timeout", s.timeout.is_some()),
        ("min_rnr_timer", s.min_rnr_timer.is_some()),
        ("expect.received", s.expect.received.is_some()),
    ] {
        if set {
            c.push(Invalid::rule(
                format!("{field}.{name}"),
                "does not apply to op = \"nvme\" (the initiator sets up its queues; see [streams.nvme])",
            ));
        }
    }
    let file = s.nvme.as_ref();
    let f = format!("{field}.nvme");
    let get = |x: fn(&NvmeFile) -> Option<i64>| file.and_then(x);
    let lba_size = match get(|x| x.lba_size) {
        None | Some(512) => 512u32,
        Some(4096) => 4096,
        Some(v) => {
            c.push(Invalid::NotOneOf { field: format!("{f}.lba_size"), value: v.to_string(), allowed: "512, 4096" });
            512
        }
    };
    let blocks = c.int(format!("{f}.blocks"), get(|x| x.blocks).unwrap_or(8192), 1, 1 << 20, "1..=1048576") as u64;
    if blocks * lba_size as u64 > 256 << 20 {
        c.push(Invalid::rule(format!("{f}.blocks"), "blocks x lba_size above 256 MiB (the model keeps it in memory)"));
    }
    let read = file.and_then(|x| x.read).map_or(0.5, |p| c.probability(format!("{f}.read"), p));
    let flush = file.and_then(|x| x.flush).map_or(0.05, |p| c.probability(format!("{f}.flush"), p));
    if read + flush > 1.0 {
        c.push(Invalid::rule(format!("{f}.flush"), format!("read + flush = {} is above 1", read + flush)));
    }
    let io_queues = c.int(format!("{f}.io_queues"), get(|x| x.io_queues).unwrap_or(1), 1, 4, "1..=4") as u16;
    let mdts =
        c.int(format!("{f}.mdts"), get(|x| x.mdts).unwrap_or(5), 1, 8, "1..=8 (4 KiB << mdts per command)") as u8;
    let in_capsule =
        c.int(format!("{f}.in_capsule"), get(|x| x.in_capsule).unwrap_or(4096), 0, 16384, "0..=16384 bytes") as u32;
    if !in_capsule.is_multiple_of(16) {
        c.push(Invalid::rule(format!("{f}.in_capsule"), "must be a multiple of 16 (IOCCSZ counts 16-byte units)"));
    }
    let dur = |x: Option<DurationStr>, d: Duration| x.map_or(d, |v| v.0);
    let timeout = dur(file.and_then(|x| x.timeout), Duration::from_secs(1));
    if timeout.is_zero() {
        c.push(Invalid::rule(format!("{f}.timeout"), "must be above 0"));
    }
    let keep_alive = dur(file.and_then(|x| x.keep_alive), Duration::ZERO);
    if !keep_alive.is_zero() && keep_alive < Duration::from_millis(1) {
        c.push(Invalid::rule(format!("{f}.keep_alive"), "0 (off) or at least 1ms (KATO is in milliseconds)"));
    }
    let reconnect = file.and_then(|x| x.reconnect).unwrap_or(false);
    let reconnect_delay = dur(file.and_then(|x| x.reconnect_delay), Duration::from_millis(1));
    if reconnect_delay.is_zero() {
        c.push(Invalid::rule(format!("{f}.reconnect_delay"), "must be above 0"));
    }
    let reconnect_attempts = c.int(
        format!("{f}.reconnect_attempts"),
        get(|x| x.reconnect_attempts).unwrap_or(100),
        1,
        100_000,
        "1..=100000",
    ) as u32;
    if !reconnect {
        for (name, set) in [
            ("reconnect_delay", file.is_some_and(|x| x.reconnect_delay.is_some())),
            ("reconnect_attempts", file.is_some_and(|x| x.reconnect_attempts.is_some())),
        ] {
            if set {
                c.push(Invalid::rule(format!("{f}.{name}"), "has no effect without reconnect = true"));
            }
        }
    }
    let mut faults = Vec::new();
    let mut crashed = false;
    let mut listed: Vec<(usize, &NvmeFaultFile)> = file.map_or(Vec::new(), |x| x.faults.iter().enumerate().collect());
    listed.sort_by_key(|(_, x)| x.at.0);
    for (i, x) in listed {
        let ff = format!("{f}.faults[{i}]");
        let action = match x.action.as_str() {
            "delay" => match x.delay {
                Some(d) => NvmeFaultAction::Delay(d.0),
                None => {
                    c.push(Invalid::rule(format!("{ff}.delay"), "is required with action = \"delay\""));
                    continue;
                }
            },
            "drop" => {
                NvmeFaultAction::Drop(
                    c.int(format!("{ff}.count"), x.count.unwrap_or(1), 1, 1_000_000, "1..=1000000") as u32
                )
            }
            "crash" if crashed => {
                c.push(Invalid::rule(format!("{ff}.action"), "crash while the target is already down"));
                continue;
            }
            "crash" => {
                crashed = true;
                NvmeFaultAction::Crash
            }
            "restart" if !crashed => {
                c.push(Invalid::rule(format!("{ff}.action"), "restart without an earlier crash"));
                continue;
            }
            "restart" => {
                crashed = false;
                NvmeFaultAction::Restart
            }
            other => {
                c.push(Invalid::NotOneOf {
                    field: format!("{ff}.action"),
                    value: other.to_string(),
                    allowed: "delay, drop, crash, restart",
                });
                continue;
            }
        };
        if x.delay.is_some() && x.action != "delay" {
            c.push(Invalid::rule(format!("{ff}.delay"), "is only for action = \"delay\""));
        }
        if x.count.is_some() && x.action != "drop" {
            c.push(Invalid::rule(format!("{ff}.count"), "is only for action = \"drop\""));
        }
        faults.push(NvmeFault { at: x.at.0, action });
    }
    // Sizes: whole blocks, within one command and the namespace.
    let max_transfer = 4096u64 << mdts;
    let lba = lba_size as u64;
    if cfg.min_size == 0 || !(cfg.min_size as u64).is_multiple_of(lba) || !(cfg.max_size as u64).is_multiple_of(lba) {
        c.push(Invalid::rule(
            format!("{field}.size"),
            format!("reads and writes are whole blocks: multiples of lba_size = {lba_size}, at least one"),
        ));
    }
    if cfg.max_size as u64 > max_transfer {
        c.push(Invalid::rule(
            format!("{field}.size.max"),
            format!("{} is above one command's {max_transfer} bytes (4 KiB << mdts)", cfg.max_size),
        ));
    }
    if cfg.max_size as u64 > blocks * lba {
        c.push(Invalid::rule(format!("{field}.size.max"), "is larger than the namespace (blocks x lba_size)"));
    }
    c.int(format!("{field}.queue_depth"), cfg.queue_depth as i64, 1, 127, "1..=127 (commands in flight)");
    let mut errors = BTreeMap::new();
    for (name, count) in &s.expect.errors {
        if ERROR_KINDS.contains(&name.as_str()) {
            errors.insert(name.clone(), *count);
        } else {
            c.push(Invalid::NotOneOf {
                field: format!("{field}.expect.errors.{name}"),
                value: name.clone(),
                allowed: ERROR_KINDS_TEXT,
            });
        }
    }
    Some(NvmeSpec {
        lba_size,
        blocks,
        read,
        flush,
        io_queues,
        mdts,
        in_capsule,
        timeout,
        keep_alive,
        response_delay: dur(file.and_then(|x| x.response_delay), Duration::ZERO),
        ready_delay: dur(file.and_then(|x| x.ready_delay), Duration::ZERO),
        reconnect,
        reconnect_delay,
        reconnect_attempts,
        faults,
        errors,
        reconnects: file.and_then(|x| x.reconnects),
    })
}

/// The nodes of an nvme stream poll their own RDMA CM events (the target
/// model as an actor, the initiator in its controller): no other stream
/// may use them.
pub(super) fn exclusive_nodes(c: &mut Check, streams: &[StreamSpec]) {
    for (i, s) in streams.iter().enumerate() {
        if s.nvme.is_none() {
            continue;
        }
        for (j, o) in streams.iter().enumerate() {
            if i == j {
                continue;
            }
            for (end, node) in [("from", &s.from), ("to", &s.to)] {
                if o.from == *node || o.to == *node {
                    c.push(Invalid::rule(
                        format!("streams.{:?}.{end}", s.config.name),
                        format!(
                            "node {node:?} is also used by stream {:?}: an nvme stream's nodes must be its own \
                             (the initiator and the target model poll their node's CM events)",
                            o.config.name
                        ),
                    ));
                }
            }
        }
    }
}
