//! The RC session server (`rctb_core::rcsession`) on the simulator: the
//! data phase end to end, every status code, the security rules, and a
//! proptest state-machine test of the session state chart. (The session
//! workload models are tested in `models/tests/rcsession`.)

mod basic;
mod chart;
mod rig;
mod security;
