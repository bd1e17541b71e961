//! Seeded randomness for the workloads: the simulator's generator
//! (`rctb_transport::seed::SeededRng`, ChaCha8 seeded by splitmix64 of the
//! seed mixed with an FNV-1a hash of a stable label), so a workload draws
//! the same values from the same seed whichever crate holds it, and adding
//! a consumer does not shift anyone else's draws. `models/tests/rng.rs`
//! pins the two names together.

/// The workloads' generator: [`SeededRng`](rctb_transport::seed::SeededRng).
pub use rctb_transport::seed::SeededRng;
