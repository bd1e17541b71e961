//! The rules a scenario must follow beyond its syntax: names that resolve,
//! values in range, settings that make sense for the operation. Every broken
//! rule is collected (not just the first) so one edit fixes them all.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rctb_core::time::Duration;
use rctb_core::transport::{Mtu, WcStatus};
use rctb_sim::{CmFaults, FaultAction, LinkConfig, LinkFaults, NodeConfig, ScheduledFault};

use super::file::{FaultsFile, ScenarioFile, SizeFile, StreamFile};
use super::units::DurationStr;
use super::{
    CM_BASE_PORT, DEFAULT_TIME_LIMIT, Invalid, LinkSpec, RoceSpec, RunExpect, Scenario, StreamExpect, StreamSpec,
};
use crate::counters::counter_names;
use crate::traffic::{ConnectMode, Op, QpSettings, StreamConfig};

/// Largest message: big enough for multi-packet tests, small enough that a
/// sweep's memory stays modest.
const MAX_MESSAGE: i64 = 16 << 20;
/// Largest region one stream end may register.
const MAX_REGION: u64 = 1 << 30;
const MAX_DEPTH: i64 = 4096;
const MAX_COUNT: i64 = 10_000_000;

/// Collects broken rules while building the scenario.
#[derive(Default)]
pub(super) struct Check {
    errors: Vec<Invalid>,
}

impl Check {
    pub(super) fn push(&mut self, e: Invalid) {
        self.errors.push(e);
    }

    /// `value` within `lo..=hi`, else an error; returns the value clamped so
    /// validation can go on.
    pub(super) fn int(&mut self, field: String, value: i64, lo: i64, hi: i64, range: &'static str) -> i64 {
        if value < lo || value > hi {
            self.push(Invalid::OutOfRange { field, value: value.to_string(), range });
        }
        value.clamp(lo, hi)
    }

    pub(super) fn probability(&mut self, field: String, p: f64) -> f64 {
        if !(0.0..=1.0).contains(&p) {
            self.push(Invalid::OutOfRange { field, value: p.to_string(), range: "0..=1 (a probability)" });
            return 0.0;
        }
        p
    }

    fn node(&mut self, field: String, name: &str, nodes: &[NodeConfig]) {
        if !nodes.iter().any(|n| n.name == name) {
            let known = nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ");
            self.push(Invalid::UnknownNode { field, name: name.to_string(), known });
        }
    }

    fn pair(&mut self, field: String, pair: &[String; 2], nodes: &[NodeConfig]) {
        self.node(format!("{field}[0]"), &pair[0], nodes);
        self.node(format!("{field}[1]"), &pair[1], nodes);
        if pair[0] == pair[1] {
            self.push(Invalid::rule(field, "names the same node twice; a link joins two different nodes"));
        }
    }

    fn faults(&mut self, field: &str, f: &FaultsFile) -> LinkFaults {
        let window = f.reorder_window.unwrap_or_default().0;
        if f.reorder > 0.0 && window.is_zero() {
            self.push(Invalid::rule(
                format!("{field}.reorder_window"),
                "must be set (e.g. \"10us\") when reorder > 0: it bounds how long a packet is held back",
            ));
        }
        {
            let mut link_faults = LinkFaults::default();
            link_faults.drop = self.probability(format!("{field}.drop"), f.drop);
            link_faults.duplicate = self.probability(format!("{field}.duplicate"), f.duplicate);
            link_faults.reorder = self.probability(format!("{field}.reorder"), f.reorder);
            link_faults.reorder_window = window;
            link_faults.corrupt = self.probability(format!("{field}.corrupt"), f.corrupt);
            link_faults.jitter = f.jitter.unwrap_or_default().0;
            link_faults
        }
    }
}

pub(super) fn validate(file: ScenarioFile) -> Result<Scenario, Vec<Invalid>> {
    let mut c = Check::default();
    if file.name.trim().is_empty() {
        c.push(Invalid::rule("name", "must not be empty"));
    }
    let time_limit = file.time_limit.map_or(DEFAULT_TIME_LIMIT, |d| d.0);
    if time_limit.is_zero() {
        c.push(Invalid::rule("time_limit", "must be longer than 0"));
    }

    let nodes = nodes(&mut c, &file);
    let mut default_link = LinkConfig::default();
    default_link.latency = file.fabric.latency.map_or(LinkConfig::default().latency, |d| d.0);
    default_link.faults = file.fabric.faults.as_ref().map(|f| c.faults("fabric.faults", f)).unwrap_or_default();
    let cm_faults = file.fabric.cm_faults.as_ref().map_or(CmFaults::default(), |f| {
        let mut cm_faults = CmFaults::default();
        cm_faults.drop = c.probability("fabric.cm_faults.drop".into(), f.drop);
        cm_faults.duplicate = c.probability("fabric.cm_faults.duplicate".into(), f.duplicate);
        cm_faults
    });
    let mut links: Vec<LinkSpec> = Vec::new();
    for (i, l) in file.fabric.links.iter().enumerate() {
        let field = format!("fabric.links[{i}]");
        c.pair(format!("{field}.between"), &l.between, &nodes);
        let [a, b] = l.between.clone();
        if let Some(j) = links.iter().position(|x| (x.a == a && x.b == b) || (x.a == b && x.b == a)) {
            c.push(Invalid::Duplicate {
                field: format!("{field}.between"),
                name: format!("{a}-{b}"),
                first: format!("fabric.links[{j}]"),
            });
        }
        let mut config = LinkConfig::default();
        config.latency = l.latency.map_or(default_link.latency, |d| d.0);
        config.faults =
            l.faults.as_ref().map(|f| c.faults(&format!("{field}.faults"), f)).unwrap_or(default_link.faults);
        links.push(LinkSpec { a, b, config });
    }

    let faults = schedule(&mut c, &file, &nodes);
    let swarm = file.swarm.as_ref().map(|s| swarm(&mut c, s));
    let streams = streams(&mut c, &file.streams, &nodes);
    let expect = run_expect(&mut c, &file);

    if !c.errors.is_empty() {
        return Err(c.errors);
    }
    Ok(Scenario {
        name: file.name,
        description: file.description,
        default_seed: file.seed,
        time_limit,
        nodes,
        default_link,
        cm_faults,
        links,
        faults,
        swarm,
        streams,
        expect,
    })
}

fn swarm(c: &mut Check, s: &super::file::SwarmFile) -> super::Swarm {
    let max = c.faults("swarm", &s.max);
    let heal_at = s.heal_at.0;
    if heal_at.is_zero() {
        c.push(Invalid::rule("swarm.heal_at", "must be later than 0: faults are lifted then"));
    }
    let partitions = c.int("swarm.partitions".into(), s.partitions, 0, 1000, "0..=1000") as u32;
    let max_partition = s.max_partition.map(|d| d.0);
    if partitions > 0 && max_partition.is_none_or(|d| d.is_zero()) {
        c.push(Invalid::rule("swarm.max_partition", "must be set (e.g. \"5ms\") when partitions > 0"));
    }
    super::Swarm { max, partitions, max_partition: max_partition.unwrap_or_default(), heal_at }
}

fn nodes(c: &mut Check, file: &ScenarioFile) -> Vec<NodeConfig> {
    let mut nodes: Vec<NodeConfig> = Vec::new();
    if file.fabric.nodes.len() < 2 {
        c.push(Invalid::rule("fabric.nodes", "needs at least two nodes"));
    }
    let mut ips: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
    for (i, n) in file.fabric.nodes.iter().enumerate() {
        let field = format!("fabric.nodes[{i}]");
        if n.name.trim().is_empty() {
            c.push(Invalid::rule(format!("{field}.name"), "must not be empty"));
        }
        if let Some(j) = nodes.iter().position(|x| x.name == n.name) {
            c.push(Invalid::Duplicate {
                field: format!("{field}.name"),
                name: n.name.clone(),
                first: format!("fabric.nodes[{j}]"),
            });
        }
        if let Some(j) = ips.insert(n.ip, i) {
            c.push(Invalid::Duplicate {
                field: format!("{field}.ip"),
                name: n.ip.to_string(),
                first: format!("fabric.nodes[{j}]"),
            });
        }
        let mut cfg = NodeConfig::new(n.name.clone(), n.ip);
        if let Some(mtu) = n.mtu {
            match Mtu::from_bytes(mtu) {
                Ok(m) => cfg.mtu = m,
                Err(_) => c.push(Invalid::NotOneOf {
                    field: format!("{field}.mtu"),
                    value: mtu.to_string(),
                    allowed: "256, 512, 1024, 2048, 4096",
                }),
            }
        }
        if let Some(gbps) = n.bandwidth_gbps {
            if !(0.0..=10_000.0).contains(&gbps) {
                c.push(Invalid::OutOfRange {
                    field: format!("{field}.bandwidth_gbps"),
                    value: gbps.to_string(),
                    range: "0..=10000 (0 = unlimited)",
                });
            } else {
                cfg.bandwidth_bps = (gbps * 1e9).round() as u64;
            }
        }
        nodes.push(cfg);
    }
    nodes
}

fn schedule(c: &mut Check, file: &ScenarioFile, nodes: &[NodeConfig]) -> Vec<ScheduledFault> {
    let mut out = Vec::new();
    for (i, f) in file.faults.iter().enumerate() {
        let field = format!("faults[{i}]");
        c.pair(format!("{field}.between"), &f.between, nodes);
        let [a, b] = f.between.clone();
        let action = match (f.action.as_str(), &f.faults) {
            ("partition", None) => FaultAction::Partition { a, b },
            ("heal", None) => FaultAction::Heal { a, b },
            ("set_faults", Some(faults)) => {
                FaultAction::SetFaults { a, b, faults: c.faults(&format!("{field}.faults"), faults) }
            }
            ("set_faults", None) => {
                c.push(Invalid::rule(format!("{field}.faults"), "is required with action = \"set_faults\""));
                continue;
            }
            ("partition" | "heal", Some(_)) => {
                c.push(Invalid::rule(format!("{field}.faults"), "is only for action = \"set_faults\""));
                continue;
            }
            (other, _) => {
                c.push(Invalid::NotOneOf {
                    field: format!("{field}.action"),
                    value: other.to_string(),
                    allowed: "partition, heal, set_faults",
                });
                continue;
            }
        };
        out.push(ScheduledFault { at: rctb_core::Instant::ZERO + f.at.0, action });
    }
    out
}

fn streams(c: &mut Check, files: &[StreamFile], nodes: &[NodeConfig]) -> Vec<StreamSpec> {
    if files.is_empty() {
        c.push(Invalid::rule("streams", "needs at least one stream"));
    }
    let mut out: Vec<StreamSpec> = Vec::new();
    for (i, s) in files.iter().enumerate() {
        let field = format!("streams.{:?}", s.name);
        if s.name.trim().is_empty() {
            c.push(Invalid::rule(format!("streams[{i}].name"), "must not be empty"));
        }
        if out.iter().any(|x| x.config.name == s.name) {
            c.push(Invalid::Duplicate {
                field: format!("streams[{i}].name"),
                name: s.name.clone(),
                first: field.clone(),
            });
        }
        out.push(stream(c, &field, i, s, nodes));
    }
    super::nvme::exclusive_nodes(c, &out);
    out
}

fn stream(c: &mut Check, field: &str, index: usize, s: &StreamFile, nodes: &[NodeConfig]) -> StreamSpec {
    let is_roce = s.op == "roce";
    let is_session = s.op == super::session::OP;
    let is_nvme = s.op == super::nvme::OP;
    let op = if is_nvme {
        // Command capsules and responses are SENDs.
        Op::Send
    } else if is_roce {
        // The FPGA engine's frames are SEND_WITH_IMM.
        Op::SendImm
    } else if is_session {
        // The data phase is one RDMA WRITE with immediate per transfer.
        Op::WriteImm
    } else {
        Op::from_key(&s.op).unwrap_or_else(|| {
            c.push(Invalid::NotOneOf {
                field: format!("{field}.op"),
                value: s.op.clone(),
                allowed: "send, send_imm, write, write_imm, read, roce, rcsession, nvme",
            });
            Op::Send
        })
    };
    c.node(format!("{field}.from"), &s.from, nodes);
    c.node(format!("{field}.to"), &s.to, nodes);
    if s.from == s.to {
        c.push(Invalid::rule(format!("{field}.to"), "must differ from `from` (loopback streams are not modelled)"));
    }
    let count = c.int(format!("{field}.count"), s.count, 1, MAX_COUNT, "1..=10000000") as u64;
    let (min, max) = match s.size {
        SizeFile::Fixed(n) => (n, n),
        SizeFile::Range { min, max } => (min, max),
    };
    let size_field = match s.size {
        SizeFile::Fixed(_) => format!("{field}.size"),
        SizeFile::Range { .. } => format!("{field}.size.min"),
    };
    let min = c.int(size_field, min, 0, MAX_MESSAGE, "0..=16777216 bytes") as u32;
    let max = c.int(format!("{field}.size.max"), max, 0, MAX_MESSAGE, "0..=16777216 bytes") as u32;
    if min > max {
        c.push(Invalid::rule(format!("{field}.size"), format!("min = {min} is above max = {max}")));
    }
    let queue_depth =
        c.int(format!("{field}.queue_depth"), s.queue_depth.unwrap_or(8), 1, MAX_DEPTH, "1..=4096") as u32;
    let recv_depth = match s.recv_depth {
        Some(_) if !op.consumes_recv() => {
            c.push(Invalid::rule(
                format!("{field}.recv_depth"),
                format!("has no effect on {} (only send, send_imm and write_imm consume receives)", op.key()),
            ));
            queue_depth
        }
        Some(d) => c.int(format!("{field}.recv_depth"), d, 1, MAX_DEPTH, "1..=4096") as u32,
        None => queue_depth,
    };
    let connect = match s.connect.as_deref() {
        None | Some("cm") => ConnectMode::Cm,
        Some("manual") => ConnectMode::Manual,
        Some(other) => {
            c.push(Invalid::NotOneOf { field: format!("{field}.connect"), value: other.into(), allowed: "cm, manual" });
            ConnectMode::Cm
        }
    };
    let defaults = QpSettings::default();
    let mut qp = defaults;
    qp.retry_cnt =
        s.retry_cnt.map_or(defaults.retry_cnt, |v| c.int(format!("{field}.retry_cnt"), v, 0, 7, "0..=7") as u8);
    qp.rnr_retry = s
        .rnr_retry
        .map_or(defaults.rnr_retry, |v| c.int(format!("{field}.rnr_retry"), v, 0, 7, "0..=7 (7 = forever)") as u8);
    for (name, value, slot) in
        [("timeout", s.timeout, &mut qp.timeout), ("min_rnr_timer", s.min_rnr_timer, &mut qp.min_rnr_timer)]
    {
        let Some(v) = value else { continue };
        if is_roce && name == "timeout" {
            c.push(Invalid::rule(
                format!("{field}.timeout"),
                "does not apply to op = \"roce\" (the engine's setup fixes it: 14)",
            ));
        } else if connect == ConnectMode::Cm && !is_roce {
            c.push(Invalid::rule(
                format!("{field}.{name}"),
                "can only be set with connect = \"manual\" (RDMA CM chooses it: timeout 14, min_rnr_timer 12)",
            ));
        }
        *slot = c.int(format!("{field}.{name}"), v, 0, 31, "0..=31 (an IBA code)") as u8;
    }
    let slot = (max as u64).max(1);
    let slots = queue_depth.max(recv_depth) as u64;
    if slot * slots > MAX_REGION {
        c.push(Invalid::rule(
            format!("{field}.size"),
            format!("{slots} slots of {slot} bytes exceed the 1 GiB a stream end may register; lower size or depth"),
        ));
    }
    let config = StreamConfig {
        name: s.name.clone(),
        op,
        count,
        min_size: min,
        max_size: max,
        queue_depth,
        recv_depth,
        connect,
        start: s.start.unwrap_or(DurationStr(Duration::ZERO)).0,
        cm_port: CM_BASE_PORT.wrapping_add(index as u16),
        qp,
    };
    let mut expect = stream_expect(c, field, s, op, is_nvme);
    let roce = roce(c, field, s, is_roce, &config);
    let session = super::session::validate(c, field, s, is_session, &config);
    let nvme = super::nvme::validate(c, field, s, is_nvme, &config);
    if is_nvme {
        expect.received = None;
    }
    StreamSpec { config, from: s.from.clone(), to: s.to.clone(), expect, roce, session, nvme }
}

/// The `op = "roce"` settings, and the rule that other streams have none.
fn roce(c: &mut Check, field: &str, s: &StreamFile, is_roce: bool, cfg: &StreamConfig) -> Option<RoceSpec> {
    let only = [
        ("channels", s.channels.is_some()),
        ("max_payload", s.max_payload.is_some()),
        ("consumer_delay", s.consumer_delay.is_some()),
        ("gap", s.gap.is_some()),
    ];
    if !is_roce {
        for (name, set) in only {
            if set {
                c.push(Invalid::rule(format!("{field}.{name}"), "is only for op = \"roce\""));
            }
        }
        return None;
    }
    if s.connect.is_some() {
        c.push(Invalid::rule(
            format!("{field}.connect"),
            "does not apply to op = \"roce\": the FPGA engine is set up through its registers",
        ));
    }
    if cfg.min_size == 0 {
        c.push(Invalid::rule(
            format!("{field}.size"),
            "frames of op = \"roce\" must be at least 1 byte (the server drops zero-length frames)",
        ));
    }
    c.int(format!("{field}.queue_depth"), cfg.queue_depth as i64, 1, 32, "1..=32 (the engine QP's max_send_wr)");
    let channels: Vec<u8> = match &s.channels {
        None => vec![0],
        Some(list) if list.is_empty() => {
            c.push(Invalid::rule(format!("{field}.channels"), "needs at least one channel"));
            vec![0]
        }
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, &ch)| c.int(format!("{field}.channels[{i}]"), ch, 0, 255, "0..=255") as u8)
            .collect(),
    };
    let max_payload = match s.max_payload {
        None => cfg.max_size.max(1),
        Some(v) => {
            let v = c.int(format!("{field}.max_payload"), v, 1, MAX_MESSAGE, "1..=16777216 bytes") as u32;
            if v < cfg.max_size {
                c.push(Invalid::rule(
                    format!("{field}.max_payload"),
                    format!("{v} is below the largest frame ({}): the server would drop it", cfg.max_size),
                ));
            }
            v
        }
    };
    if cfg.recv_depth as u64 * max_payload as u64 > MAX_REGION {
        c.push(Invalid::rule(
            format!("{field}.max_payload"),
            "recv_depth x max_payload exceeds the 1 GiB the receive slab may take",
        ));
    }
    Some(RoceSpec {
        channels,
        max_payload,
        consumer_delay: s.consumer_delay.map_or(Duration::ZERO, |d| d.0),
        gap: s.gap.map_or(Duration::ZERO, |d| d.0),
    })
}

fn stream_expect(c: &mut Check, field: &str, s: &StreamFile, op: Op, is_nvme: bool) -> StreamExpect {
    let mut errors = BTreeMap::new();
    // An nvme stream's `errors` name NVMe error kinds (its own validation).
    for (name, count) in s.expect.errors.iter().filter(|_| !is_nvme) {
        match WcStatus::from_name(name) {
            Some(WcStatus::Success) => c.push(Invalid::rule(
                format!("{field}.expect.errors.{name}"),
                "SUCCESS is not an error; use `delivered` for successful completions",
            )),
            Some(status) => {
                errors.insert(status, *count);
            }
            None => c.push(Invalid::UnknownStatus { field: format!("{field}.expect.errors"), name: name.clone() }),
        }
    }
    if s.expect.received.is_some() && !op.consumes_recv() && !is_nvme {
        c.push(Invalid::rule(
            format!("{field}.expect.received"),
            format!("{} consumes no receives; expect `delivered` instead", op.key()),
        ));
    }
    StreamExpect {
        delivered: s.expect.delivered,
        received: s.expect.received,
        errors,
        data_integrity: s.expect.data_integrity.unwrap_or(true),
    }
}

fn run_expect(c: &mut Check, file: &ScenarioFile) -> RunExpect {
    let known = counter_names();
    for name in file.expect.fabric.keys() {
        if !known.contains(&name.as_str()) {
            c.push(Invalid::UnknownCounter {
                field: "expect.fabric".into(),
                name: name.clone(),
                known: known.join(", "),
            });
        }
    }
    if file.expect.max_duration.is_some_and(|d| d.0.is_zero()) {
        c.push(Invalid::rule("expect.max_duration", "must be longer than 0"));
    }
    RunExpect {
        max_duration: file.expect.max_duration.map(|d| d.0),
        fabric: file.expect.fabric.clone(),
        no_leaks: file.expect.no_leaks.unwrap_or(true),
    }
}
