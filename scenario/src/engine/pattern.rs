//! Seeded message content: the sizes, bytes and immediates of every message
//! of a stream, derived from (run seed, stream name, message index) alone.
//!
//! The receiver recomputes what the sender sent without any shared state, and
//! a replay of the same seed produces the same bytes. Keying by the stream's
//! name (not its position) means adding a stream to a scenario does not change
//! what the other streams send.
//!
//! The keys come from the shared derivation functions
//! (`rctb_core::transport::seed`), in an order of their own: a stream's key
//! is `splitmix64(seed ^ splitmix64(fnv1a(stream)))`, not `derive`'s
//! `splitmix64(seed ^ fnv1a(stream))`. It stays so because it decides every
//! scenario's payload bytes (and so the reports and pcaps).

pub use rctb_core::transport::seed::splitmix64;

/// FNV-1a of a label: stable across runs and platforms (unlike `Hash`).
pub fn label_hash(label: &str) -> u64 {
    rctb_core::transport::seed::fnv1a(label.as_bytes())
}

/// What a key is used for, so sizes, immediates and payloads of one message
/// are independent draws.
#[derive(Clone, Copy)]
enum Purpose {
    Size = 1,
    Imm = 2,
    Payload = 3,
}

/// The content generator of one stream in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamPattern {
    key: u64,
}

impl StreamPattern {
    /// The generator of the stream named `stream` in the run with seed
    /// `run_seed`: equal inputs give equal content on every platform.
    pub fn new(run_seed: u64, stream: &str) -> Self {
        StreamPattern { key: splitmix64(run_seed ^ splitmix64(label_hash(stream))) }
    }

    fn message_key(&self, index: u64, purpose: Purpose) -> u64 {
        splitmix64(self.key ^ splitmix64(index.wrapping_mul(8).wrapping_add(purpose as u64)))
    }

    /// A value for a stream-wide draw named `label` (PSNs, ports, nonces).
    pub fn draw(&self, label: &str) -> u64 {
        splitmix64(self.key ^ label_hash(label))
    }

    /// The size of message `index`, uniform in `min..=max`.
    pub fn size(&self, index: u64, min: u32, max: u32) -> u32 {
        if min >= max {
            return min;
        }
        let span = (max - min) as u64 + 1;
        min + (self.message_key(index, Purpose::Size) % span) as u32
    }

    /// The immediate of message `index`.
    pub fn imm(&self, index: u64) -> u32 {
        (self.message_key(index, Purpose::Imm) >> 32) as u32
    }

    /// Fills `buf` with the payload of message `index` (a xorshift64* PRBS).
    pub fn fill(&self, index: u64, buf: &mut [u8]) {
        let mut prbs = Prbs::new(self.message_key(index, Purpose::Payload));
        for chunk in buf.chunks_mut(8) {
            let word = prbs.next().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }

    /// The offset of the first byte of `data` that differs from the payload
    /// of message `index`, if any.
    pub fn first_mismatch(&self, index: u64, data: &[u8]) -> Option<usize> {
        let mut prbs = Prbs::new(self.message_key(index, Purpose::Payload));
        for (k, chunk) in data.chunks(8).enumerate() {
            let word = prbs.next().to_le_bytes();
            if chunk != &word[..chunk.len()] {
                let at = chunk.iter().zip(word).position(|(a, b)| *a != b).unwrap_or(0);
                return Some(k * 8 + at);
            }
        }
        None
    }
}

/// xorshift64*: fast, full-period over non-zero states, plenty for patterns.
struct Prbs(u64);

impl Prbs {
    fn new(key: u64) -> Self {
        Prbs(key | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn streams_and_messages_differ() {
        let (a, b) = (StreamPattern::new(1, "a"), StreamPattern::new(1, "b"));
        let mut x = [0u8; 64];
        let mut y = [0u8; 64];
        a.fill(0, &mut x);
        b.fill(0, &mut y);
        assert_ne!(x, y, "same index, different streams");
        a.fill(1, &mut y);
        assert_ne!(x, y, "same stream, different messages");
        assert_ne!(StreamPattern::new(2, "a"), a, "different seeds");
    }

    #[test]
    fn finds_the_first_differing_byte() {
        let p = StreamPattern::new(7, "s");
        let mut buf = vec![0u8; 100];
        p.fill(3, &mut buf);
        assert_eq!(p.first_mismatch(3, &buf), None);
        buf[42] ^= 1;
        assert_eq!(p.first_mismatch(3, &buf), Some(42));
        assert_eq!(p.first_mismatch(3, &buf[..41]), None, "a prefix of the payload is the payload");
    }

    proptest! {
        #[test]
        fn sizes_stay_in_range(seed: u64, index: u64, min in 0u32..5000, extra in 0u32..5000) {
            let p = StreamPattern::new(seed, "s");
            let s = p.size(index, min, min + extra);
            prop_assert!(s >= min && s <= min + extra);
        }

        #[test]
        fn fill_is_a_pure_function(seed: u64, index: u64, len in 0usize..300) {
            let p = StreamPattern::new(seed, "s");
            let mut a = vec![0u8; len];
            let mut b = vec![0xAAu8; len];
            p.fill(index, &mut a);
            p.fill(index, &mut b);
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(p.first_mismatch(index, &a), None);
        }
    }
}
