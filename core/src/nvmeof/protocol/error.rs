//! Errors of the protocol codecs.

use thiserror::Error;

/// A structure that could not be decoded or built. Names the structure, the
/// field and the rule it broke.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error("{what}: {len} bytes, need at least {need}")]
    Short { what: &'static str, len: usize, need: usize },
    #[error("{what}.{field} = {value}: {rule}")]
    Field { what: &'static str, field: &'static str, value: u64, rule: &'static str },
    #[error("{what}.{field}: {rule}")]
    Text { what: &'static str, field: &'static str, rule: &'static str },
}

impl ProtocolError {
    pub(crate) fn field(what: &'static str, field: &'static str, value: u64, rule: &'static str) -> Self {
        ProtocolError::Field { what, field, value, rule }
    }
}
