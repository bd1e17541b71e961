//! The namespace as the host of an nvme stream must see it: what the
//! writes, flushes and crashes so far leave in every block, and which
//! blocks nobody can know (a write whose response was lost, dirty blocks
//! when a crash met a flush in flight). [`Model::check`] compares a read
//! with it. Pure data: no I/O, no clock.

use std::collections::BTreeSet;

/// The namespace as the host must see it.
#[derive(Debug)]
pub(super) struct Model {
    lba: usize,
    cur: Vec<u8>,
    cur_known: Vec<bool>,
    dur: Vec<u8>,
    dur_known: Vec<bool>,
    /// Blocks written (or maybe written) since the last successful flush.
    dirty: BTreeSet<u64>,
}

impl Model {
    pub(super) fn new(lba: usize, blocks: u64) -> Self {
        let n = blocks as usize;
        Model {
            lba,
            cur: vec![0; n * lba],
            cur_known: vec![true; n],
            dur: vec![0; n * lba],
            dur_known: vec![true; n],
            dirty: BTreeSet::new(),
        }
    }
    pub(super) fn write(&mut self, slba: u64, data: &[u8]) {
        let at = slba as usize * self.lba;
        self.cur[at..at + data.len()].copy_from_slice(data);
        for b in slba..slba + (data.len() / self.lba) as u64 {
            self.cur_known[b as usize] = true;
            self.dirty.insert(b);
        }
    }
    pub(super) fn forget(&mut self, slba: u64, blocks: u64) {
        for b in slba..slba + blocks {
            self.cur_known[b as usize] = false;
            self.dirty.insert(b);
        }
    }
    pub(super) fn flushed(&mut self, ok: bool) {
        for &b in &self.dirty {
            let (i, at) = (b as usize, b as usize * self.lba);
            if ok {
                self.dur[at..at + self.lba].copy_from_slice(&self.cur[at..at + self.lba]);
                self.dur_known[i] = self.cur_known[i];
            } else {
                // Flushed or not: the durable value is one of two.
                self.dur_known[i] = false;
            }
        }
        if ok {
            self.dirty.clear();
        }
    }
    /// The target crashed; with a flush in flight, the dirty blocks hold
    /// either their flushed value or their current one.
    pub(super) fn crash(&mut self, flush_in_flight: bool) {
        if flush_in_flight {
            for b in std::mem::take(&mut self.dirty) {
                self.cur_known[b as usize] = false;
                self.dur_known[b as usize] = false;
            }
            return;
        }
        for b in std::mem::take(&mut self.dirty) {
            let (i, at) = (b as usize, b as usize * self.lba);
            self.cur[at..at + self.lba].copy_from_slice(&self.dur[at..at + self.lba]);
            self.cur_known[i] = self.dur_known[i];
        }
    }
    /// The first differing known block (its number and first byte offset),
    /// and how many blocks could not be checked.
    pub(super) fn check(&self, slba: u64, data: &[u8]) -> (Option<(u64, usize)>, u64) {
        let mut unknown = 0;
        for (k, got) in data.chunks(self.lba).enumerate() {
            let b = slba as usize + k;
            if !self.cur_known[b] {
                unknown += 1;
                continue;
            }
            let want = &self.cur[b * self.lba..(b + 1) * self.lba];
            if let Some(off) = got.iter().zip(want).position(|(a, b)| a != b) {
                return (Some((b as u64, off)), unknown);
            }
        }
        (None, unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::Model;

    fn block(v: u8) -> Vec<u8> {
        vec![v; 512]
    }

    #[test]
    fn the_model_catches_wrong_data_and_follows_flush_and_crash() {
        let mut m = Model::new(512, 4);
        assert_eq!(m.check(0, &block(0)), (None, 0));
        m.write(1, &block(7));
        assert_eq!(m.check(1, &block(7)), (None, 0));
        assert_eq!(m.check(1, &[block(7), block(1)].concat()), (Some((2, 0)), 0), "block 2 is still zero");
        // A crash before a flush puts the block back.
        m.crash(false);
        assert_eq!(m.check(1, &block(0)), (None, 0));
        m.write(1, &block(8));
        m.flushed(true);
        m.write(1, &block(9));
        m.crash(false);
        assert_eq!(m.check(1, &block(8)), (None, 0), "the flushed value survives");
        // Unknown outcomes are not checked, and not guessed.
        m.forget(3, 1);
        assert_eq!(m.check(3, &block(42)), (None, 1));
        m.flushed(false);
        m.crash(false);
        assert_eq!(m.check(3, &block(43)), (None, 1));
        m.write(3, &block(5));
        assert_eq!(m.check(3, &block(43)), (Some((3, 0)), 0), "a new write makes the block known again");
        // A crash with a flush in flight: flushed or not, nobody knows.
        m.crash(true);
        assert_eq!(m.check(3, &block(1)), (None, 1));
    }
}
