//! `IdMap`: a map from a node's sequential ids to objects, as a vector.
//!
//! Ids are allocated in increasing order and never reused, so lookups index
//! a vector instead of walking a tree (the simulator looks up a QP, a CQ and
//! a region per packet). Iteration is in id order, like the `BTreeMap` it
//! replaces, so traces stay deterministic. Boxing keeps an empty slot at one
//! pointer, so a million churned sessions cost 8 MB, not a million QPs.

#[derive(Debug)]
pub(crate) struct IdMap<T> {
    slots: Vec<Option<Box<T>>>,
    len: usize,
    /// No live slot below this index: iteration starts here, so a node
    /// that churned through a million sessions does not walk a million
    /// empty slots per `values()` (the session server's reaper destroys a
    /// CQ and a PD per session, and each destroy scans the QPs).
    first: usize,
}

impl<T> Default for IdMap<T> {
    fn default() -> Self {
        IdMap { slots: Vec::new(), len: 0, first: 0 }
    }
}

impl<T> IdMap<T> {
    pub fn insert(&mut self, id: u32, value: T) {
        let i = id as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(Box::new(value)).is_none() {
            self.len += 1;
            self.first = if self.len == 1 { i } else { self.first.min(i) };
        }
    }

    pub fn get(&self, id: u32) -> Option<&T> {
        self.slots.get(id as usize).and_then(|s| s.as_deref())
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.slots.get_mut(id as usize).and_then(|s| s.as_deref_mut())
    }

    pub fn remove(&mut self, id: u32) -> Option<T> {
        let v = self.slots.get_mut(id as usize).and_then(Option::take).map(|b| *b);
        if v.is_some() {
            self.len -= 1;
            if id as usize == self.first {
                // Every slot is passed over at most once per time it is freed.
                while self.first < self.slots.len() && self.slots[self.first].is_none() {
                    self.first += 1;
                }
            }
        }
        v
    }

    pub fn contains_key(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots[self.first.min(self.slots.len())..].iter().filter_map(|s| s.as_deref())
    }
}
