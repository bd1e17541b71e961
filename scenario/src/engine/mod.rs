//! The scenario engine: a scenario file in, a report out. Nothing here
//! parses a command line or prints; the `rctb` binary's `run` and `sweep`
//! (and the python package) call it. Each module is re-exported at the
//! crate root (`rctb_scenario::runner`, `rctb_scenario::scenario`, ...), its public path.

pub mod counters;
pub mod expect;
pub mod nvme_stream;
pub mod pattern;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod session_stream;
pub mod sweep;
pub mod traffic;
pub mod udp_run;
