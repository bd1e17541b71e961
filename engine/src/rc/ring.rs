//! The FIFO a QP keeps its work queue entries in (and the endpoint its
//! CQs' completions and its transmit-ready QPs).
//!
//! A `VecDeque` would do, but its `push_back` stays out of line (the entry
//! is built, then copied into the call) and its `pop_front` moves the entry
//! out to drop it. A work queue is pushed at its back and retired at its
//! front, and its entries are read in place, so this ring keeps them where
//! they are: every slot holds a value (`T::default()` until first used), a
//! pushed entry is written straight into its slot, and a retired one stays
//! in its slot (dropped when a later push overwrites it, or with the ring).
//! The number of slots is a power of two, so a slot is an add and a mask.

use std::ops::{Index, IndexMut};

/// A FIFO of `T` in a ring of slots.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    /// The slots: a power of two of them, or none.
    buf: Vec<T>,
    /// The slot of the front entry.
    head: usize,
    /// Live entries, from `head` on (wrapping).
    len: usize,
}

impl<T> Default for Ring<T> {
    fn default() -> Self {
        Ring { buf: Vec::new(), head: 0, len: 0 }
    }
}

impl<T> Ring<T> {
    /// How many entries it holds.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn slot(&self, i: usize) -> usize {
        // Masked by the slot count less one: the compiler then knows the
        // slot is in bounds.
        (self.head + i) & self.buf.len().wrapping_sub(1)
    }

    /// The entry `i` places from the front.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i < self.len { self.buf.get(self.slot(i)) } else { None }
    }

    /// The entry `i` places from the front, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i < self.len {
            let s = self.slot(i);
            self.buf.get_mut(s)
        } else {
            None
        }
    }

    /// The oldest entry.
    #[inline]
    pub(crate) fn front(&self) -> Option<&T> {
        // `head` is its slot: no add and mask.
        if self.len > 0 { self.buf.get(self.head) } else { None }
    }

    /// The oldest entry, to change.
    #[inline]
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        if self.len > 0 { self.buf.get_mut(self.head) } else { None }
    }

    /// The newest entry, to change.
    #[inline]
    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        self.len.checked_sub(1).and_then(|i| self.get_mut(i))
    }

    /// Appends `value`, written straight into its slot. (Always inlined:
    /// its caller builds the value in place of the slot, not on the stack
    /// for a call.)
    #[inline(always)]
    pub(crate) fn push_back(&mut self, value: T)
    where
        T: Default,
    {
        if self.len == self.buf.len() {
            self.grow();
        }
        let s = self.slot(self.len);
        if let Some(slot) = self.buf.get_mut(s) {
            // The new entry is stored before the old one is dropped: no
            // drop call stands between building it and storing it.
            drop(std::mem::replace(slot, value));
        }
        self.len += 1;
    }

    /// Retires the oldest entry; it is returned as it lies in its slot.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        let s = self.head;
        self.head = self.slot(1);
        self.len -= 1;
        self.buf.get(s)
    }

    /// Doubles the slots of a full ring (an empty one gets four).
    #[cold]
    fn grow(&mut self)
    where
        T: Default,
    {
        // Full: every slot is live, so putting the front first orders them.
        self.buf.rotate_left(self.head);
        self.head = 0;
        let slots = (self.buf.len() * 2).max(4);
        self.buf.resize_with(slots, T::default);
    }

    /// The live entries as two runs, front first.
    fn as_slices(&self) -> (&[T], &[T]) {
        let end = self.head + self.len;
        if end <= self.buf.len() {
            (&self.buf[self.head..end], &[])
        } else {
            let (a, b) = self.buf.split_at(self.head);
            (b, &a[..end - self.buf.len()])
        }
    }

    fn as_mut_slices(&mut self) -> (&mut [T], &mut [T]) {
        let end = self.head + self.len;
        if end <= self.buf.len() {
            (&mut self.buf[self.head..end], &mut [])
        } else {
            let wrapped = end - self.buf.len();
            let (a, b) = self.buf.split_at_mut(self.head);
            (b, &mut a[..wrapped])
        }
    }

    /// The entries, front first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        let (a, b) = self.as_slices();
        a.iter().chain(b)
    }

    /// The entries, front first, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let (a, b) = self.as_mut_slices();
        a.iter_mut().chain(b)
    }

    /// Takes every entry out, front first, leaving it empty (no slots).
    pub(crate) fn take_all(&mut self) -> Vec<T> {
        let mut buf = std::mem::take(&mut self.buf);
        // The live entries follow `head` (wrapping): turned to the front,
        // they are the first `len`.
        buf.rotate_left(self.head);
        buf.truncate(self.len);
        self.head = 0;
        self.len = 0;
        buf
    }
}

impl<T> Index<usize> for Ring<T> {
    type Output = T;

    #[inline]
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("ring index out of range")
    }
}

impl<T> IndexMut<usize> for Ring<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("ring index out of range")
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    fn contents(r: &Ring<u32>) -> Vec<u32> {
        r.iter().copied().collect()
    }

    #[test]
    fn keeps_fifo_order_across_wraps_and_growth() {
        let mut r = Ring::default();
        let mut model = std::collections::VecDeque::new();
        let mut next = 0u32;
        // Pushes and pops in an uneven pattern, so the front wraps at every
        // capacity the ring grows through.
        for round in 0..200u32 {
            for _ in 0..(round % 5) + 1 {
                r.push_back(next);
                model.push_back(next);
                next += 1;
            }
            for _ in 0..(round % 3) + (round % 7 == 0) as u32 {
                assert_eq!(r.pop_front().copied(), model.pop_front());
            }
            assert_eq!(r.len(), model.len());
            assert_eq!(contents(&r), model.iter().copied().collect::<Vec<_>>());
            assert_eq!(r.front().copied(), model.front().copied());
            for (i, v) in model.iter().enumerate() {
                assert_eq!(r[i], *v);
            }
            assert_eq!(r.get(model.len()), None);
        }
        for v in r.iter_mut() {
            *v += 1;
        }
        if let Some(b) = r.back_mut() {
            *b = 0;
        }
        let mut expected: Vec<u32> = model.iter().map(|v| v + 1).collect();
        if let Some(b) = expected.last_mut() {
            *b = 0;
        }
        assert_eq!(r.take_all(), expected);
        assert!(r.is_empty());
        assert_eq!(r.pop_front(), None);
        r.push_back(7);
        assert_eq!(contents(&r), vec![7]);
    }

    #[test]
    fn no_entry_past_the_last_is_handed_out_even_where_a_slot_exists() {
        // One entry in four slots: slot 1 holds a placeholder (or a retired
        // entry), which must not be handed out as the entry after the last.
        let mut r = Ring::default();
        r.push_back(5u32);
        r.push_back(6);
        assert_eq!(r.pop_front(), Some(&5));
        assert_eq!(r.get(1), None);
        assert_eq!(r.get_mut(1), None);
        assert_eq!(r.get_mut(0).copied(), Some(6));
        assert_eq!(r.back_mut().copied(), Some(6));
    }

    #[test]
    fn the_front_can_be_changed_in_place_and_an_empty_ring_has_none() {
        let mut r = Ring::default();
        assert_eq!(r.front_mut(), None);
        r.push_back(1u32);
        r.push_back(2);
        if let Some(f) = r.front_mut() {
            *f = 10;
        }
        assert_eq!(contents(&r), vec![10, 2]);
        assert_eq!(r.pop_front(), Some(&10));
        assert_eq!(r.pop_front(), Some(&2));
        assert_eq!(r.front_mut(), None);
    }

    #[test]
    fn iter_mut_reaches_every_entry_of_a_wrapped_ring_once() {
        // Four slots, front at slot 3: the entries lie in slots 3, 0, 1.
        let mut r = Ring::default();
        for v in 0..4u32 {
            r.push_back(v);
        }
        for _ in 0..3 {
            r.pop_front();
        }
        r.push_back(4);
        r.push_back(5);
        assert_eq!(contents(&r), vec![3, 4, 5]);
        for v in r.iter_mut() {
            *v += 100;
        }
        assert_eq!(contents(&r), vec![103, 104, 105]);
        assert_eq!(r.iter_mut().count(), 3);
    }
}
