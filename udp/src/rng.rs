//! The endpoints' seeded randomness: memory keys and CM PSNs (given to the
//! engine), and the draws of [`UdpConfig::with_loss`](crate::UdpConfig::with_loss).
//!
//! A child RNG per label, derived from the reactor's seed by the same
//! function as `rctb-sim` derives its nodes' (`rctb_transport::seed`:
//! ChaCha8 seeded with splitmix64 of the seed xor the label's FNV-1a
//! hash), so one seed gives an endpoint the same keys as the simulated
//! node of the same name.

/// A reactor's generator: the simulator's, `rctb_transport::seed::SeededRng`
/// (its docs say how a child is derived).
pub(crate) use rctb_transport::seed::SeededRng as ChildRng;

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
