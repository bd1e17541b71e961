//! Seeded randomness. One u64 seed decides a whole run; every consumer
//! (each node, each link direction, the fault rules, the CM faults) gets a
//! child generator derived from the seed and a stable label, so adding a
//! consumer does not shift anyone else's draws. The derivation and the
//! generator live in `rctb_transport::seed` (its docs say how a child is
//! derived); this module only names the generator as the simulator always
//! has.

/// The simulator's generator: [`SeededRng`](rctb_transport::seed::SeededRng)
/// (ChaCha8), which the endpoint of a node also draws its keys and CM PSNs
/// from.
pub use rctb_transport::seed::SeededRng as SimRng;
