//! Why a scenario file was refused: it could not be read, it is not valid
//! TOML for the format (toml reports line and column), or a value breaks a
//! rule (the error names the field and the rule).

use thiserror::Error;

/// Why [`Scenario::load`](super::Scenario::load) or
/// [`Scenario::from_toml`](super::Scenario::from_toml) refused a scenario;
/// `rctb run` and `rctb sweep` print it and exit with status 2.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{path}: {source}")]
    Read {
        /// The path given to `load`.
        path: String,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a scenario file: bad TOML syntax, a value of the wrong
    /// type, a missing or unknown key, or a malformed duration or count.
    #[error("{path}: {source}")]
    Parse {
        /// The file's path, or the `origin` given to `from_toml`.
        path: String,
        /// toml's error, which carries the line and column.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// The file parsed but breaks one or more rules; all of them are listed,
    /// not just the first.
    #[error("{path}: {} problem(s):\n{}", errors.len(), list(errors))]
    Invalid {
        /// The file's path, or the `origin` given to `from_toml`.
        path: String,
        /// Every broken rule, in the order validation met them (never empty).
        errors: Vec<Invalid>,
    },
}

fn list(errors: &[Invalid]) -> String {
    errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n")
}

/// One broken rule. `field` is a path into the file, like
/// `streams."bulk".size` or `fabric.nodes[1].mtu`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Invalid {
    /// A stream's `from` or `to`, or a link's or fault's `between`, names a
    /// node that `[[fabric.nodes]]` does not define.
    #[error("{field}: unknown node {name:?} (nodes: {known})")]
    UnknownNode {
        /// Where the name appears, e.g. `streams."bulk".to` or
        /// `faults[0].between[1]`.
        field: String,
        /// The name as written.
        name: String,
        /// The defined node names, comma-separated.
        known: String,
    },
    /// A value that must be unique is repeated: a node's name or IP, a
    /// stream's name, or a pair of nodes in a second `[[fabric.links]]` entry.
    #[error("{field}: {name:?} is already used (by {first})")]
    Duplicate {
        /// The later, refused occurrence, e.g. `fabric.nodes[2].ip`.
        field: String,
        /// The repeated value (a pair as `a-b`).
        name: String,
        /// Where it was used first, e.g. `fabric.nodes[0]`.
        first: String,
    },
    /// A number outside its allowed range, e.g. `retry_cnt = 9` or a
    /// probability above 1.
    #[error("{field} = {value}: must be within {range}")]
    OutOfRange {
        /// The offending field.
        field: String,
        /// The value as given.
        value: String,
        /// The allowed range, with its unit or meaning, e.g. `0..=7`.
        range: &'static str,
    },
    /// A value that must come from a fixed list does not: `op`, `connect`,
    /// `mtu`, a fault's `action`, `[streams.nvme].lba_size`, or an error kind
    /// of an nvme stream's `expect.errors`.
    #[error("{field} = {value:?}: must be one of {allowed}")]
    NotOneOf {
        /// The offending field.
        field: String,
        /// The value as given.
        value: String,
        /// The accepted values, comma-separated.
        allowed: &'static str,
    },
    /// A key of a stream's `expect.errors` is not a completion status name.
    #[error("{field}: unknown completion status {name:?} (spell it as ibv_wc_status_str does, e.g. RETRY_EXC_ERR)")]
    UnknownStatus {
        /// `streams."<name>".expect.errors`.
        field: String,
        /// The key as written.
        name: String,
    },
    /// A key of `[expect].fabric` is not a fabric counter of the report.
    #[error("{field}: unknown fabric counter {name:?} (counters: {known})")]
    UnknownCounter {
        /// `expect.fabric`.
        field: String,
        /// The key as written.
        name: String,
        /// Every counter name, comma-separated.
        known: String,
    },
    /// Any other rule, stated in words: a setting that does not apply to the
    /// stream's op, a missing companion field, a size that does not fit, and
    /// the like.
    #[error("{field}: {rule}")]
    Rule {
        /// The offending field.
        field: String,
        /// The rule it breaks, e.g. `must not be empty`.
        rule: String,
    },
}

impl Invalid {
    /// The path of the offending field.
    pub fn field(&self) -> &str {
        match self {
            Invalid::UnknownNode { field, .. }
            | Invalid::Duplicate { field, .. }
            | Invalid::OutOfRange { field, .. }
            | Invalid::NotOneOf { field, .. }
            | Invalid::UnknownStatus { field, .. }
            | Invalid::UnknownCounter { field, .. }
            | Invalid::Rule { field, .. } => field,
        }
    }

    pub(crate) fn rule(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Invalid::Rule { field: field.into(), rule: rule.into() }
    }
}
