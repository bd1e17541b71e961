//! The scenario file as written: serde types mirroring the TOML, with
//! defaults and no cross-field rules. `validate` turns it into a
//! [`super::Scenario`]. Unknown keys are errors, so a typo never silently
//! falls back to a default.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Deserialize;

use super::units::{CountExpect, DurationStr};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The seed `rctb run` uses without `--seed`.
    #[serde(default)]
    pub seed: u64,
    /// Virtual time after which the run is stopped and fails.
    pub time_limit: Option<DurationStr>,
    pub fabric: FabricFile,
    #[serde(default)]
    pub faults: Vec<FaultFile>,
    /// Fault parameters drawn from the seed.
    pub swarm: Option<SwarmFile>,
    #[serde(default)]
    pub streams: Vec<StreamFile>,
    #[serde(default)]
    pub expect: RunExpectFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricFile {
    /// One-way latency of every link without its own.
    pub latency: Option<DurationStr>,
    /// Steady faults of every link without its own.
    pub faults: Option<FaultsFile>,
    /// Loss and duplication of RDMA CM messages, fabric-wide.
    pub cm_faults: Option<CmFaultsFile>,
    pub nodes: Vec<NodeFile>,
    #[serde(default)]
    pub links: Vec<LinkFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CmFaultsFile {
    #[serde(default)]
    pub drop: f64,
    #[serde(default)]
    pub duplicate: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    pub name: String,
    pub ip: Ipv4Addr,
    pub mtu: Option<u32>,
    pub bandwidth_gbps: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkFile {
    pub between: [String; 2],
    pub latency: Option<DurationStr>,
    pub faults: Option<FaultsFile>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsFile {
    #[serde(default)]
    pub drop: f64,
    #[serde(default)]
    pub duplicate: f64,
    #[serde(default)]
    pub reorder: f64,
    pub reorder_window: Option<DurationStr>,
    #[serde(default)]
    pub corrupt: f64,
    pub jitter: Option<DurationStr>,
}

/// `[swarm]`: maxima of the per-pair fault probabilities each seed draws,
/// random partitions, and when everything heals.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwarmFile {
    #[serde(flatten)]
    pub max: FaultsFile,
    #[serde(default)]
    pub partitions: i64,
    pub max_partition: Option<DurationStr>,
    pub heal_at: DurationStr,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultFile {
    pub at: DurationStr,
    pub action: String,
    pub between: [String; 2],
    /// The new steady faults, for `action = "set_faults"` only.
    pub faults: Option<FaultsFile>,
}

/// A message size: bytes, or `{ min, max }` drawn per message from the seed.
#[derive(Debug)]
pub enum SizeFile {
    Fixed(i64),
    Range { min: i64, max: i64 },
}

impl<'de> Deserialize<'de> for SizeFile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SizeFile;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size in bytes (e.g. 4096) or a range (e.g. { min = 1, max = 4096 })")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeFile, E> {
                Ok(SizeFile::Fixed(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<SizeFile, A::Error> {
                let (mut min, mut max) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "min" => min = Some(map.next_value()?),
                        "max" => max = Some(map.next_value()?),
                        other => return Err(serde::de::Error::unknown_field(other, &["min", "max"])),
                    }
                }
                match (min, max) {
                    (Some(min), Some(max)) => Ok(SizeFile::Range { min, max }),
                    (None, _) => Err(serde::de::Error::missing_field("min")),
                    (_, None) => Err(serde::de::Error::missing_field("max")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamFile {
    pub name: String,
    pub op: String,
    pub from: String,
    pub to: String,
    pub count: i64,
    pub size: SizeFile,
    pub queue_depth: Option<i64>,
    pub recv_depth: Option<i64>,
    pub connect: Option<String>,
    pub start: Option<DurationStr>,
    pub retry_cnt: Option<i64>,
    pub rnr_retry: Option<i64>,
    pub timeout: Option<i64>,
    pub min_rnr_timer: Option<i64>,
    /// `op = "roce"` only: the FPGA's channels (frame i on the (i mod n)-th).
    pub channels: Option<Vec<i64>>,
    /// `op = "roce"` only: the host's receive slot size (default: `size`'s max).
    pub max_payload: Option<i64>,
    /// `op = "roce"` only: the consumer's time per frame (a slow consumer).
    pub consumer_delay: Option<DurationStr>,
    /// `op = "roce"` only: frame i is sent no earlier than i x gap after the start.
    pub gap: Option<DurationStr>,
    /// `op = "rcsession"` only: the session workload's mix and server limits.
    pub session: Option<SessionFile>,
    /// `op = "nvme"` only: the initiator, the target model and its faults.
    pub nvme: Option<super::nvme::NvmeFile>,
    #[serde(default)]
    pub expect: StreamExpectFile,
}

/// `[streams.session]`: what an `op = "rcsession"` stream's clients do and
/// how the session server is configured. Probabilities are per transfer.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionFile {
    pub put: Option<f64>,
    pub cancel: Option<f64>,
    pub slow: Option<f64>,
    pub crash: Option<f64>,
    pub principals: Option<i64>,
    pub max_sessions: Option<i64>,
    pub max_staging_bytes: Option<i64>,
    pub t_prep: Option<DurationStr>,
    pub t_exec: Option<DurationStr>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamExpectFile {
    pub delivered: Option<CountExpect>,
    pub received: Option<CountExpect>,
    #[serde(default)]
    pub errors: BTreeMap<String, CountExpect>,
    pub data_integrity: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunExpectFile {
    pub max_duration: Option<DurationStr>,
    #[serde(default)]
    pub fabric: BTreeMap<String, CountExpect>,
    pub no_leaks: Option<bool>,
}
