//! Seeds and their derivation: the one place rctb turns a run's seed into
//! the seeds of its parts. It owns the derivation (FNV-1a and splitmix64)
//! and, with the `rng` feature, the generator a derived seed starts
//! ([`SeededRng`], ChaCha8). It draws nothing by itself and reads no clock
//! or ambient randomness.
//!
//! # The convention
//!
//! Randomness is passed as a `u64` seed. One seed decides a whole run
//! (`Sim::new(seed)`, `UdpReactor::new(Some(seed))`, a scenario's `seed`);
//! a component that owns part of the run takes the seed it is given and
//! hands each of its parts the seed [`derive()`]`(seed, label)`, named by a
//! stable label (`"node/a"`, `"rules"`, `"rcsession/workload"`), never a
//! seed made by other arithmetic. Adding a part, or drawing more in one,
//! therefore shifts no other part's draws. A part that needs a stream of
//! random values starts one from its seed, [`SeededRng::new`] (or
//! [`SeededRng::child`]`(seed, label)`, both steps at once). Only the
//! leaves that draw, the RC engine's `Endpoint`, the session manager and
//! the object store, take the generator itself (`Box<dyn RngCore>` or
//! `R: RngCore`), so that their tests can put a counter in its place; their
//! owner starts it from a derived seed.
//!
//! # The derivation
//!
//! `derive(seed, label)` is `splitmix64(seed ^ fnv1a(label))`: FNV-1a 64
//! hashes the label the same on every platform and run (unlike `Hash`),
//! and splitmix64, whose every input bit reaches every output bit, mixes
//! it with the seed. [`SeededRng::new`] seeds ChaCha8 with the value
//! (`ChaCha8Rng::seed_from_u64`). The simulator's nodes, links, fault rules
//! and CM faults, the UDP backend's endpoints and loss, and the models'
//! workloads and NVMe target faults all derive this way, so one seed gives
//! a UDP endpoint the same memory keys as the simulated node of the same
//! name. Changing any step changes every seeded output (reports, pcaps):
//! `sim/tests/determinism.rs` and the testbench's snapshots hold it.
//!
//! Two older derivations are kept as they are, because they decide seeded
//! outputs: the testbench's message patterns (`StreamPattern`) key a
//! stream with the same two functions in another order,
//! `splitmix64(seed ^ splitmix64(fnv1a(stream)))`; and a few session
//! servers are seeded with their run's seed xor a constant (see the
//! repository's docs/guide.md, "Seeds and replay lines").

/// The FNV-1a 64-bit offset basis: the hash of no bytes.
pub const FNV1A_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

const FNV1A_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a 64 of `bytes`: stable across runs and platforms.
#[inline]
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV1A_OFFSET, bytes)
}

/// Continues an FNV-1a 64 hash `h` over `bytes` (start from
/// [`FNV1A_OFFSET`], or from another basis for a second, independent hash).
#[inline]
pub fn fnv1a_extend(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV1A_PRIME))
}

/// splitmix64's output function: a bijection of `u64` in which every input
/// bit reaches every output bit.
#[inline]
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The seed of the part named `label` of a run (or part) seeded `seed`:
/// `splitmix64(seed ^ fnv1a(label))`, independent of every other label's.
#[inline]
pub fn derive(seed: u64, label: &str) -> u64 {
    splitmix64(seed ^ fnv1a(label.as_bytes()))
}

#[cfg(feature = "rng")]
mod rng {
    use super::derive;
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};

    /// A deterministic generator (ChaCha8 seeded with a `u64` seed)
    /// with the few draws the simulator, the UDP backend and the models
    /// need. It is an [`RngCore`], so the RC engine can draw its keys and
    /// CM PSNs from it.
    #[derive(Clone, Debug)]
    pub struct SeededRng(ChaCha8Rng);

    impl SeededRng {
        /// ChaCha8 seeded with `seed` (`ChaCha8Rng::seed_from_u64`).
        #[inline]
        pub fn new(seed: u64) -> Self {
            SeededRng(ChaCha8Rng::seed_from_u64(seed))
        }

        /// The generator of the part `label` of the run (or part) seeded
        /// `seed`: `SeededRng::new(derive(seed, label))`.
        #[inline]
        pub fn child(seed: u64, label: &str) -> Self {
            SeededRng::new(derive(seed, label))
        }

        /// The next 32 random bits.
        #[inline]
        pub fn next_u32(&mut self) -> u32 {
            self.0.next_u32()
        }

        /// The next 64 random bits.
        #[inline]
        pub fn next_u64(&mut self) -> u64 {
            self.0.next_u64()
        }

        /// Uniform in [0, 1).
        #[inline]
        pub fn unit(&mut self) -> f64 {
            (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
        }

        /// True with probability `p` (no draw when `p` is 0, so fault-free
        /// runs consume no randomness on the data path).
        #[inline]
        pub fn chance(&mut self, p: f64) -> bool {
            p > 0.0 && self.unit() < p
        }

        /// Uniform in [0, n); 0 when n is 0.
        #[inline]
        pub fn below(&mut self, n: u64) -> u64 {
            if n == 0 { 0 } else { self.0.next_u64() % n }
        }
    }

    impl RngCore for SeededRng {
        #[inline]
        fn next_u32(&mut self) -> u32 {
            self.0.next_u32()
        }

        #[inline]
        fn next_u64(&mut self) -> u64 {
            self.0.next_u64()
        }

        #[inline]
        fn fill_bytes(&mut self, dst: &mut [u8]) {
            self.0.fill_bytes(dst)
        }
    }
}

#[cfg(feature = "rng")]
pub use rng::SeededRng;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_and_splitmix64_match_their_references() {
        // FNV-1a 64 test vectors (the empty string and "a").
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_extend(fnv1a(b"ab"), b"c"), fnv1a(b"abc"));
        // splitmix64's first output from state 0.
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn children_differ_by_label_and_repeat_by_seed() {
        assert_eq!(derive(7, "node/a"), derive(7, "node/a"));
        assert_ne!(derive(7, "node/a"), derive(7, "node/b"));
        assert_ne!(derive(7, "node/a"), derive(8, "node/a"));
        assert_eq!(derive(7, "x"), splitmix64(7 ^ fnv1a(b"x")));
    }
}
