//! The frame payload contract between an FPGA engine (the simulator's model,
//! `rctb fpga-emu`) and whoever checks what arrived (`rctb roce-rx`, the
//! scenario runner): a 32-bit Fibonacci LFSR (x^32 + x^22 + x^2 + x + 1)
//! seeded from the channel and the frame's sequence number, so any frame can
//! be generated or verified without state.
//!
//! The generator produces eight LFSR steps per byte through a 1 KiB table
//! (the two newest bits feed back within a byte, the rest come from the
//! state), bit-exact with the one-bit-at-a-time definition kept in the
//! tests.

/// The LFSR state for frame `seq` on `channel` (never zero).
fn seed(channel: u8, seq: u32) -> u32 {
    (seq.wrapping_mul(0x9E37_79B9) ^ ((channel as u32) << 24) ^ 0xA5A5_5A5A) | 1
}

/// `TABLE[x | s1 << 9 | s0 << 8]`: the byte eight steps produce, where bit
/// `j` of `x` is `s[24 + j] ^ s[14 + j]` (the far taps of step `7 - j`) and
/// `s1`, `s0` are the state's two low bits (the near taps of the first steps).
const TABLE: [u8; 1024] = {
    let mut t = [0u8; 1024];
    let mut idx = 0;
    while idx < 1024 {
        let x = idx & 0xFF;
        // b[k + 2] is the k-th new bit; b[0] = s1, b[1] = s0.
        let mut b = [0u8; 10];
        b[0] = ((idx >> 9) & 1) as u8;
        b[1] = ((idx >> 8) & 1) as u8;
        let mut out = 0u8;
        let mut k = 0;
        while k < 8 {
            let far = ((x >> (7 - k)) & 1) as u8;
            b[k + 2] = far ^ b[k + 1] ^ b[k];
            out |= b[k + 2] << (7 - k);
            k += 1;
        }
        t[idx] = out;
        idx += 1;
    }
    t
};

#[inline]
fn next_byte(s: &mut u32) -> u8 {
    let x = ((*s >> 24) ^ (*s >> 14)) & 0xFF;
    let out = TABLE[(x | (*s & 3) << 8) as usize];
    *s = (*s << 8) | out as u32;
    out
}

/// Fills `buf` with the payload of frame `seq` on `channel`.
pub fn prbs_fill(channel: u8, seq: u32, buf: &mut [u8]) {
    let mut s = seed(channel, seq);
    for b in buf {
        *b = next_byte(&mut s);
    }
}

/// The payload of frame `seq` on `channel`, `len` bytes long.
pub fn prbs(channel: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    prbs_fill(channel, seq, &mut out);
    out
}

/// Checks `data` against the payload of frame `seq` on `channel`; the error
/// is the offset of the first wrong byte.
pub fn prbs_check(channel: u8, seq: u32, data: &[u8]) -> Result<(), usize> {
    let mut s = seed(channel, seq);
    match data.iter().position(|&b| b != next_byte(&mut s)) {
        None => Ok(()),
        Some(i) => Err(i),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The definition: one LFSR step at a time, the state's low byte after
    /// every eighth step.
    fn reference(channel: u8, seq: u32, len: usize) -> Vec<u8> {
        let mut s = seed(channel, seq);
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            for _ in 0..8 {
                let bit = (s >> 31) ^ (s >> 21) ^ (s >> 1) ^ s;
                s = (s << 1) | (bit & 1);
            }
            out.push(s as u8);
        }
        out
    }

    #[test]
    fn known_prefix() {
        // Pinned so a change of the payload contract is a visible decision.
        // (Computed independently, in Python, from the bit-serial definition.)
        assert_eq!(prbs(0, 0, 8), [0x40, 0xbd, 0x9f, 0x17, 0x9e, 0x6c, 0xb7, 0x3e]);
        assert_eq!(prbs(3, 17, 4), [0x65, 0x9e, 0xd8, 0xdc]);
        assert!(prbs(0, 0, 0).is_empty());
    }

    proptest! {
        #[test]
        fn table_generator_matches_the_bit_serial_definition(channel: u8, seq: u32, len in 0usize..600) {
            let got = prbs(channel, seq, len);
            prop_assert_eq!(&got, &reference(channel, seq, len));
            prop_assert_eq!(prbs_check(channel, seq, &got), Ok(()));
        }

        #[test]
        fn check_reports_the_first_wrong_byte(channel: u8, seq: u32, len in 1usize..300, at in 0usize..300, flip in 1u8..=255) {
            let at = at % len;
            let mut data = prbs(channel, seq, len);
            data[at] ^= flip;
            prop_assert_eq!(prbs_check(channel, seq, &data), Err(at));
        }
    }
}
