//! Scenario files: a fabric (nodes, links, steady faults), a fault schedule,
//! traffic streams and expectations, in TOML.
//!
//! [`Scenario::from_toml`] parses (serde; errors carry line and column) and
//! then validates (errors name the field and the rule). The result is plain
//! data ready for the runner; it is `Send`, so a sweep can hand it to worker
//! threads. The format is documented in docs/scenarios.md.

mod error;
mod file;
mod nvme;
mod session;
mod swarm;
mod units;
mod validate;

use std::collections::BTreeMap;

use rctb_core::time::Duration;
use rctb_core::transport::WcStatus;
use rctb_sim::{CmFaults, LinkConfig, NodeConfig, ScheduledFault};

pub use error::{Invalid, ScenarioError};
pub use nvme::{ERROR_KINDS as NVME_ERROR_KINDS, NvmeFault, NvmeFaultAction, NvmeSpec};
pub use swarm::{Swarm, describe as describe_swarm};
pub use units::{CountExpect, format_duration, parse_duration};

use crate::traffic::StreamConfig;

/// A validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// `name`: what the report and each sweep record call the scenario
    /// (`rctb sweep merge` refuses shards of another name); required, not
    /// blank.
    pub name: String,
    /// `description`: free text for people (empty when the file has none).
    pub description: String,
    /// The seed `rctb run` uses when none is given (`seed`, default 0).
    pub default_seed: u64,
    /// Virtual time after which a run is stopped as failed (`time_limit`,
    /// default [`DEFAULT_TIME_LIMIT`]; never 0).
    pub time_limit: Duration,
    /// `[[fabric.nodes]]` in file order (at least two, names and IPs unique):
    /// MTU 4096 and 100 Gb/s unless the node sets `mtu` or `bandwidth_gbps`
    /// (0 = unlimited).
    pub nodes: Vec<NodeConfig>,
    /// The link of every pair without a `[[fabric.links]]` entry:
    /// `fabric.latency` (default 1us one way) and `fabric.faults` (default
    /// none).
    pub default_link: LinkConfig,
    /// Loss and duplication of CM messages (`fabric.cm_faults`).
    pub cm_faults: CmFaults,
    /// `[[fabric.links]]`: pairs with their own latency or steady faults, at
    /// most one entry per pair.
    pub links: Vec<LinkSpec>,
    /// The `[[faults]]` schedule (partition, heal, set_faults between two
    /// nodes), in file order, at virtual times from the start of the run.
    pub faults: Vec<ScheduledFault>,
    /// Faults drawn from the seed, on top of `faults`. The draws set every
    /// pair's steady faults at time 0 (in place of `fabric.faults` and the
    /// links' own) and clear them at `heal_at`.
    pub swarm: Option<Swarm>,
    /// `[[streams]]` in file order (at least one, names unique); stream `i`
    /// listens on RDMA CM port [`CM_BASE_PORT`] + `i`.
    pub streams: Vec<StreamSpec>,
    /// `[expect]`: the checks on the whole run.
    pub expect: RunExpect,
}

/// A link between two named nodes (both directions).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// The first node of `between`.
    pub a: String,
    /// The second node of `between`.
    pub b: String,
    /// The pair's latency and steady faults, applied in both directions; what
    /// the entry leaves out comes from [`Scenario::default_link`].
    pub config: LinkConfig,
}

/// A stream between two named nodes and what it must achieve.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    /// The settings every stream has, defaults filled in: `name`, the verbs
    /// op (SEND for `nvme`, SEND_WITH_IMM for `roce`, RDMA WRITE with
    /// immediate for `rcsession`), `count`, `size` as `min_size..=max_size`,
    /// `queue_depth` (default 8), `recv_depth` (default `queue_depth`),
    /// `connect` (default CM), `start` (default 0), the CM port and the QP
    /// settings (`retry_cnt` and `rnr_retry` default 7).
    pub config: StreamConfig,
    /// The requester's node.
    pub from: String,
    /// The responder's node.
    pub to: String,
    /// `[streams.expect]`: what the stream must achieve.
    pub expect: StreamExpect,
    /// `op = "roce"`: `from` is an FPGA engine (the surf model) streaming
    /// SEND_WITH_IMM frames into a receive server on `to`; `config.op` is
    /// then `SendImm`, `queue_depth` the engine's window, `recv_depth` the
    /// server's slots.
    pub roce: Option<RoceSpec>,
    /// `op = "rcsession"`: `queue_depth` session clients on `from` run
    /// `count` GET/PUT transfers of `size` against an RC session server on
    /// `to` (the `rctb_models::rcsession` workload).
    pub session: Option<rctb_models::rcsession::WorkloadConfig>,
    /// `op = "nvme"`: the NVMe-oF initiator on `from` runs `count` I/O
    /// commands against the target model on `to` (`crate::nvme_stream`).
    pub nvme: Option<NvmeSpec>,
}

/// What a RoCEv2 receive-server stream adds to a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoceSpec {
    /// `channels`: frame `i` goes on `channels[i mod n]`; each 0..=255, at
    /// least one, default `[0]`.
    pub channels: Vec<u8>,
    /// `max_payload`: the size of each receive slot in bytes, 1..=16 MiB and
    /// at least the largest frame (default: the largest frame).
    pub max_payload: u32,
    /// `consumer_delay`: how long the consumer holds each frame before it
    /// releases the slot (default 0); a long one makes RNR NAKs happen.
    pub consumer_delay: Duration,
    /// `gap`: frame `i` is posted no earlier than `i` x `gap` after the
    /// engine starts streaming (default 0: as fast as the window allows).
    pub gap: Duration,
}

/// Expectations on one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamExpect {
    /// Requester completions with SUCCESS. `None`: all `count` when no error
    /// is expected, unchecked otherwise.
    pub delivered: Option<CountExpect>,
    /// Responder receive completions with SUCCESS (same default).
    pub received: Option<CountExpect>,
    /// Requester error completions by status; statuses not listed must not occur.
    pub errors: BTreeMap<WcStatus, CountExpect>,
    /// Whether every message must check out (false: a mismatch is expected).
    pub data_integrity: bool,
}

/// Expectations on the whole run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunExpect {
    /// Every stream finished by this virtual time.
    pub max_duration: Option<Duration>,
    /// Bounds on fabric counters (`FabricStats` field names).
    pub fabric: BTreeMap<String, CountExpect>,
    /// Every verbs resource was released at the end.
    pub no_leaks: bool,
}

/// Virtual-time limit when the file sets none.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(10);

/// The first RDMA CM port streams listen on (perftest's default port); stream
/// `i` uses this plus `i`.
pub const CM_BASE_PORT: u16 = 18515;

impl Scenario {
    /// Parses and validates a scenario; `origin` names it in errors.
    ///
    /// # Errors
    ///
    /// [`ScenarioError::Parse`] when `text` is not a scenario file as TOML (a
    /// syntax error, a wrong type, a missing or unknown key, a malformed
    /// duration or count), with line and column; otherwise
    /// [`ScenarioError::Invalid`] listing every broken rule.
    pub fn from_toml(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let file: file::ScenarioFile =
            toml::from_str(text).map_err(|e| ScenarioError::Parse { path: origin.to_string(), source: Box::new(e) })?;
        validate::validate(file).map_err(|errors| ScenarioError::Invalid { path: origin.to_string(), errors })
    }

    /// Reads, parses and validates the scenario at `path`.
    ///
    /// # Errors
    ///
    /// [`ScenarioError::Read`] when the file cannot be read as UTF-8 text;
    /// then the errors of [`Scenario::from_toml`], with `path` as origin.
    pub fn load(path: &str) -> Result<Scenario, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ScenarioError::Read { path: path.to_string(), source: e })?;
        Scenario::from_toml(&text, path)
    }
}
