//! Why a scenario file was refused: it could not be read, it is not valid
//! TOML for the format (toml reports line and column), or a value breaks a
//! rule (the error names the field and the rule).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{path}: {} problem(s):\n{}", errors.len(), list(errors))]
    Invalid { path: String, errors: Vec<Invalid> },
}

fn list(errors: &[Invalid]) -> String {
    errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n")
}

/// One broken rule. `field` is a path into the file, like
/// `streams."bulk".size` or `fabric.nodes[1].mtu`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Invalid {
    #[error("{field}: unknown node {name:?} (nodes: {known})")]
    UnknownNode { field: String, name: String, known: String },
    #[error("{field}: {name:?} is already used (by {first})")]
    Duplicate { field: String, name: String, first: String },
    #[error("{field} = {value}: must be within {range}")]
    OutOfRange { field: String, value: String, range: &'static str },
    #[error("{field} = {value:?}: must be one of {allowed}")]
    NotOneOf { field: String, value: String, allowed: &'static str },
    #[error("{field}: unknown completion status {name:?} (spell it as ibv_wc_status_str does, e.g. RETRY_EXC_ERR)")]
    UnknownStatus { field: String, name: String },
    #[error("{field}: unknown fabric counter {name:?} (counters: {known})")]
    UnknownCounter { field: String, name: String, known: String },
    #[error("{field}: {rule}")]
    Rule { field: String, rule: String },
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
