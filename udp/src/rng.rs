//! The endpoints' seeded randomness: memory keys and CM PSNs (given to the
//! engine), and the draws of [`UdpConfig::with_loss`](crate::UdpConfig::with_loss).
//!
//! A child RNG per label, derived from the reactor's seed exactly as
//! `rctb-sim` derives its nodes' (ChaCha8 seeded with splitmix64 of the
//! seed xor the label's FNV-1a hash), so one seed gives an endpoint the
//! same keys as the simulated node of the same name.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

#[derive(Clone, Debug)]
pub(crate) struct ChildRng(ChaCha8Rng);

impl ChildRng {
    /// The RNG of `label` under `seed`, independent of every other label's.
    pub fn child(seed: u64, label: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in label.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        ChildRng(ChaCha8Rng::seed_from_u64(splitmix64(seed ^ h)))
    }

    /// True with probability `p` (no draw when `p` is 0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl RngCore for ChildRng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_differ_by_label_and_repeat_by_seed() {
        let mut a = ChildRng::child(7, "node/a");
        let mut a2 = ChildRng::child(7, "node/a");
        let mut b = ChildRng::child(7, "node/b");
        let (x, x2, y) = (a.next_u64(), a2.next_u64(), b.next_u64());
        assert_eq!(x, x2);
        assert_ne!(x, y);
        assert!(!ChildRng::child(1, "l").chance(0.0));
    }
}
