//! Seeds and their derivation: the one place rctb turns a run's seed into
//! the seeds of its parts. It owns the derivation (FNV-1a and splitmix64)
//! and, with the `rng` feature, the generator a derived seed starts
//! ([`SeededRng`], ChaCha8). It draws nothing by itself and reads no clock
//! or ambient randomness.
//!
//! # The convention
//!
//! Randomness is passed as a [`Seed`]. One seed decides a whole run; a
//! component that owns part of the run takes the `Seed` it is given and
//! hands each of its parts a child, `seed.derive(label)`, named by a stable
//! label (`"node/a"`, `"rules"`, `"rcsession/workload"`). Adding a part, or
//! drawing more in one, therefore shifts no other part's draws. Where a
//! part needs a stream of random values it starts one from its seed,
//! [`Seed::rng`]; only at the leaves, the RC engine's `Endpoint`, the
//! session manager and the object store, does a caller hand over that
//! generator itself (`Box<dyn RngCore>` or `R: RngCore`), so that their
//! tests can put a counter in its place.
//!
//! # The derivation
//!
//! `seed.derive(label)` is `splitmix64(seed ^ fnv1a(label))`: FNV-1a 64
//! hashes the label the same on every platform and run (unlike `Hash`),
//! and splitmix64, whose every input bit reaches every output bit, mixes
//! it with the seed. [`Seed::rng`] seeds ChaCha8 with the value
//! (`ChaCha8Rng::seed_from_u64`). The simulator's nodes, links, fault rules
//! and CM faults, the UDP backend's endpoints and loss, and the models'
//! workloads all derive this way, so one seed gives a UDP endpoint the same
//! memory keys as the simulated node of the same name. Changing any step
//! changes every seeded output (reports, pcaps): the tests in
//! `sim/tests/determinism.rs` and the testbench's snapshots hold it.
//!
//! The testbench's message patterns (`StreamPattern`) key their streams
//! with the same two functions in another order,
//! `splitmix64(seed ^ splitmix64(fnv1a(stream)))`; that key is kept as it
//! is, because it decides every scenario's payload bytes.

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

/// The seed of a run or of one part of it (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seed(u64);

impl Seed {
    /// The seed whose value is `value` (a run's seed, as the user gives it).
    #[inline]
    pub const fn new(value: u64) -> Self {
        Seed(value)
    }

    /// The seed's value.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The seed of the part named `label`: `splitmix64(seed ^ fnv1a(label))`,
    /// independent of every other label's.
    #[inline]
    pub fn derive(self, label: &str) -> Seed {
        Seed(splitmix64(self.0 ^ fnv1a(label.as_bytes())))
    }

    /// A generator started from this seed (ChaCha8).
    #[cfg(feature = "rng")]
    pub fn rng(self) -> SeededRng {
        SeededRng::new(self)
    }
}

impl From<u64> for Seed {
    fn from(value: u64) -> Self {
        Seed(value)
    }
}

#[cfg(feature = "rng")]
mod rng {
    use super::Seed;
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};

    /// A deterministic generator (ChaCha8 seeded with a [`Seed`]'s value)
    /// with the few draws the simulator, the UDP backend and the models
    /// need. It is an [`RngCore`], so the RC engine can draw its keys and
    /// CM PSNs from it.
    #[derive(Clone, Debug)]
    pub struct SeededRng(ChaCha8Rng);

    impl SeededRng {
        /// ChaCha8 seeded with `seed`'s value.
        #[inline]
        pub fn new(seed: Seed) -> Self {
            SeededRng(ChaCha8Rng::seed_from_u64(seed.get()))
        }

        /// The generator of the part `label` of the run seeded `seed`:
        /// `Seed::new(seed).derive(label).rng()`.
        #[inline]
        pub fn child(seed: u64, label: &str) -> Self {
            Seed::new(seed).derive(label).rng()
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
        let s = Seed::new(7);
        assert_eq!(s.derive("node/a"), s.derive("node/a"));
        assert_ne!(s.derive("node/a"), s.derive("node/b"));
        assert_ne!(s.derive("node/a"), Seed::new(8).derive("node/a"));
        assert_eq!(s.derive("x").get(), splitmix64(7 ^ fnv1a(b"x")));
    }
}
