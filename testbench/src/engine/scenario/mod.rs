//! Scenario files: a fabric (nodes, links, steady faults), a fault schedule,
//! traffic streams and expectations, in TOML.
//!
//! [`Scenario::from_toml`] parses (serde; errors carry line and column) and
//! then validates (errors name the field and the rule). The result is plain
//! data ready for the runner; it is `Send`, so a sweep can hand it to worker
//! threads. The format is documented in README.md.

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
    pub name: String,
    pub description: String,
    /// The seed `rctb run` uses when none is given.
    pub default_seed: u64,
    /// Virtual time after which a run is stopped as failed.
    pub time_limit: Duration,
    pub nodes: Vec<NodeConfig>,
    pub default_link: LinkConfig,
    /// Loss and duplication of CM messages (`fabric.cm_faults`).
    pub cm_faults: CmFaults,
    pub links: Vec<LinkSpec>,
    pub faults: Vec<ScheduledFault>,
    /// Faults drawn from the seed, on top of `faults`.
    pub swarm: Option<Swarm>,
    pub streams: Vec<StreamSpec>,
    pub expect: RunExpect,
}

/// A link between two named nodes (both directions).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    pub a: String,
    pub b: String,
    pub config: LinkConfig,
}

/// A stream between two named nodes and what it must achieve.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    pub config: StreamConfig,
    /// The requester's node.
    pub from: String,
    /// The responder's node.
    pub to: String,
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
    pub channels: Vec<u8>,
    pub max_payload: u32,
    pub consumer_delay: Duration,
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
    pub fn from_toml(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let file: file::ScenarioFile =
            toml::from_str(text).map_err(|e| ScenarioError::Parse { path: origin.to_string(), source: Box::new(e) })?;
        validate::validate(file).map_err(|errors| ScenarioError::Invalid { path: origin.to_string(), errors })
    }

    /// Reads, parses and validates the scenario at `path`.
    pub fn load(path: &str) -> Result<Scenario, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ScenarioError::Read { path: path.to_string(), source: e })?;
        Scenario::from_toml(&text, path)
    }
}
