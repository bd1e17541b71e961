//! Errors of the protocol codecs.

use thiserror::Error;

/// A structure that could not be decoded or built. Names the structure, the
/// field and the rule it broke.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The input buffer is shorter than the structure's fixed length.
    #[error("{what}: {len} bytes, need at least {need}")]
    Short {
        /// The structure being decoded (e.g. `"Completion"`).
        what: &'static str,
        /// Bytes the caller supplied.
        len: usize,
        /// Bytes the structure needs.
        need: usize,
    },
    /// A numeric field holds a value outside its valid range, or an
    /// argument of a builder does.
    #[error("{what}.{field} = {value}: {rule}")]
    Field {
        /// The structure or command (e.g. `"Connect"`, `"Sgl"`).
        what: &'static str,
        /// The field or argument at fault (e.g. `"depth"`, `"recfmt"`).
        field: &'static str,
        /// The offending value, widened to `u64`.
        value: u64,
        /// The rule it broke, in words (e.g. `"must be 2..=256"`).
        rule: &'static str,
    },
    /// A text field (such as an NQN) has content that is not allowed.
    #[error("{what}.{field}: {rule}")]
    Text {
        /// The structure the text belongs to (e.g. `"Nqn"`).
        what: &'static str,
        /// The field at fault.
        field: &'static str,
        /// The rule it broke, in words.
        rule: &'static str,
    },
}

impl ProtocolError {
    pub(crate) fn field(what: &'static str, field: &'static str, value: u64, rule: &'static str) -> Self {
        ProtocolError::Field { what, field, value, rule }
    }
}
