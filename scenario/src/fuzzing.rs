//! Checks the fuzz targets run, kept here so `cargo test` replays every
//! committed corpus file through the same code
//! (`scenario/tests/fuzz_corpus.rs`). Not a stable API.

use crate::scenario::{Scenario, ScenarioError};

/// Any bytes as a scenario file: parsing never panics, and what it says is
/// either a valid scenario or errors that each name a field or a place.
pub fn scenario_toml(bytes: &[u8]) -> Result<(), String> {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(()) };
    match Scenario::from_toml(text, "fuzz.toml") {
        Ok(s) => {
            if s.streams.is_empty() || s.nodes.is_empty() {
                return Err("a valid scenario without nodes or streams".into());
            }
            let mut names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
            names.sort_unstable();
            if names.windows(2).any(|w| w[0] == w[1]) {
                return Err("a valid scenario with two nodes of one name".into());
            }
            Ok(())
        }
        Err(ScenarioError::Invalid { errors, .. }) if errors.is_empty() => Err("invalid with no reason".into()),
        Err(ScenarioError::Invalid { errors, .. }) => match errors.iter().find(|e| e.field().is_empty()) {
            Some(e) => Err(format!("a rule violation that names no field: {e}")),
            None => Ok(()),
        },
        Err(_) => Ok(()),
    }
}
