//! What the receiving side checks about a frame stream from an FPGA engine
//! (the simulator's model or `rctb fpga-emu`): the ring positions count up
//! by one (modulo 2^24) with nothing missing, repeated or out of order, and
//! each payload is the PRBS of its (channel, ring position). Counts per
//! channel come along.

use std::collections::BTreeMap;

use rctb_core::roce::prbs_check;
use rctb_core::transport::MAX_24BIT;
use serde::Serialize;

/// Frames and bytes of one channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChannelCount {
    /// Frames received on the channel, whatever their check found.
    pub frames: u64,
    /// Payload bytes of those frames.
    pub bytes: u64,
}

/// The verdict on a frame stream so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameCheck {
    verify_payload: bool,
    next_ring: Option<u32>,
    /// Frames received on all channels, repeated, out-of-order and corrupt
    /// ones included.
    pub frames: u64,
    /// Payload bytes of those frames.
    pub bytes: u64,
    /// Frames and bytes per channel; a channel has an entry once it carried
    /// a frame.
    pub channels: BTreeMap<u8, ChannelCount>,
    /// Ring positions skipped over (frames that never arrived before a later one).
    pub lost: u64,
    /// Frames whose ring position was behind the expected one (a repeat or a
    /// late arrival).
    pub out_of_order: u64,
    /// Frames whose payload was not their PRBS.
    pub corrupt: u64,
    /// What went wrong first, for reports.
    pub first_problem: Option<String>,
}

impl FrameCheck {
    /// `verify_payload`: check every byte against the PRBS (off for
    /// throughput runs whose sender does not generate it).
    pub fn new(verify_payload: bool) -> FrameCheck {
        FrameCheck { verify_payload, ..FrameCheck::default() }
    }

    /// The ring position expected next, if any frame came yet.
    pub fn next_ring(&self) -> Option<u32> {
        self.next_ring
    }

    fn problem(&mut self, what: String) {
        if self.first_problem.is_none() {
            self.first_problem = Some(what);
        }
    }

    /// Checks and counts one frame.
    pub fn frame(&mut self, channel: u8, ring: u32, data: &[u8]) {
        self.frames += 1;
        self.bytes += data.len() as u64;
        let c = self.channels.entry(channel).or_default();
        c.frames += 1;
        c.bytes += data.len() as u64;
        let expected = self.next_ring.unwrap_or(ring);
        // Ahead by less than half the ring: frames in between were lost.
        let ahead = ring.wrapping_sub(expected) & MAX_24BIT;
        if ahead == 0 {
            self.next_ring = Some((ring + 1) & MAX_24BIT);
        } else if ahead < 1 << 23 {
            self.lost += ahead as u64;
            self.problem(format!("ring {ring} arrived when {expected} was expected: {ahead} frames lost"));
            self.next_ring = Some((ring + 1) & MAX_24BIT);
        } else {
            self.out_of_order += 1;
            self.problem(format!(
                "ring {ring} arrived after {}: repeated or out of order",
                expected.wrapping_sub(1) & MAX_24BIT
            ));
        }
        if self.verify_payload
            && let Err(at) = prbs_check(channel, ring, data)
        {
            self.corrupt += 1;
            self.problem(format!("channel {channel} ring {ring}: byte {at} of {} differs from its PRBS", data.len()));
        }
    }

    /// Nothing lost, repeated, reordered or corrupt.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.out_of_order == 0 && self.corrupt == 0
    }

    /// One line: totals and problems.
    pub fn summary(&self) -> String {
        format!(
            "frames {} bytes {} lost {} out_of_order {} corrupt {}",
            self.frames, self.bytes, self.lost, self.out_of_order, self.corrupt
        )
    }
}

#[cfg(test)]
mod tests {
    use rctb_core::roce::prbs;

    use super::*;

    #[test]
    fn in_order_prbs_frames_are_clean_and_counted_per_channel() {
        let mut c = FrameCheck::new(true);
        for ring in 0..8u32 {
            let ch = (ring % 3) as u8;
            c.frame(ch, ring, &prbs(ch, ring, 10 + ring as usize));
        }
        assert!(c.clean(), "{c:?}");
        assert_eq!((c.frames, c.bytes), (8, (10..18).sum::<u64>()));
        assert_eq!(c.channels[&0], ChannelCount { frames: 3, bytes: 10 + 13 + 16 });
        assert_eq!(c.next_ring(), Some(8));
    }

    #[test]
    fn a_gap_counts_lost_frames_and_a_repeat_is_out_of_order() {
        let mut c = FrameCheck::new(false);
        c.frame(0, 5, &[0]);
        c.frame(0, 9, &[0]);
        assert_eq!(c.lost, 3);
        c.frame(0, 9, &[0]);
        assert_eq!(c.out_of_order, 1);
        assert_eq!(c.first_problem.as_deref(), Some("ring 9 arrived when 6 was expected: 3 frames lost"));
        assert!(!c.clean());
    }

    #[test]
    fn ring_positions_wrap_at_24_bits() {
        let mut c = FrameCheck::new(false);
        c.frame(1, MAX_24BIT, &[1]);
        c.frame(1, 0, &[1]);
        assert!(c.clean(), "{c:?}");
    }

    #[test]
    fn a_flipped_byte_is_corrupt() {
        let mut c = FrameCheck::new(true);
        let mut d = prbs(2, 0, 64);
        d[17] ^= 1;
        c.frame(2, 0, &d);
        assert_eq!(c.corrupt, 1);
        assert_eq!(c.first_problem.as_deref(), Some("channel 2 ring 0: byte 17 of 64 differs from its PRBS"));
    }
}
