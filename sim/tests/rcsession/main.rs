//! The RC session server (`rctb_core::rcsession`) on the simulator: the
//! data phase end to end, every status code, the security rules, and a
//! proptest state-machine test of the session state chart.

mod basic;
mod chart;
mod pair;
mod rig;
mod security;
mod workload;
