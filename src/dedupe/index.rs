//! The hash index of [`super::store::Objects`]: positions of entries, found by the hash of their
//! uid.
//!
//! A general-purpose table (hashbrown) sizes itself in powers of two and fills at most 7/8 of
//! them, so it holds between 1.14 and 2.3 buckets per key, and doubles at once: at a million
//! objects it is 2^21 buckets, half empty. This one is open addressing with linear probing over
//! any number of slots: 5 bytes a slot (a tag byte, 0 for empty, and a 4-byte position), filled
//! to at most [`MAX_LOAD_PERCENT`], grown by [`GROWTH_PERCENT`], and sized exactly when the
//! number of keys is known ahead ([`Index::reserve`]: a list says how many items it has). A
//! lookup scans tag bytes from the key's home slot (one cache line, usually), and compares an
//! entry only where the tag matches; a removal shifts the rest of its run back (no tombstones,
//! so lookups never slow down as objects come and go).

/// Slots filled at most, in percent.
const MAX_LOAD_PERCENT: usize = 85;
/// A full index grows by this much, in percent.
const GROWTH_PERCENT: usize = 130;
/// Slots of the smallest non-empty index.
const MIN_SLOTS: usize = 16;

#[derive(Debug, Default)]
pub(super) struct Index {
    /// Per slot: 0 when empty, else a byte of the key's hash.
    tags: Vec<u8>,
    /// Per slot: the position it holds (where the tag is not 0).
    slots: Vec<u32>,
    len: usize,
}

/// A slot of the index, as [`Index::find`] returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot(usize);

fn tag(hash: u64) -> u8 {
    // Bits the home slot (from the high bits) barely uses; 0 means empty.
    ((hash >> 8) as u8).max(1)
}

impl Index {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.tags.len()
    }

    fn home(&self, hash: u64) -> usize {
        // The high bits of the hash scaled to the slot count (no power of two needed).
        ((u128::from(hash) * self.tags.len() as u128) >> 64) as usize
    }

    fn next(&self, slot: usize) -> usize {
        if slot + 1 == self.tags.len() {
            0
        } else {
            slot + 1
        }
    }

    /// The slot holding a position for which `eq` holds, among those with this hash.
    pub(super) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<Slot> {
        if self.len == 0 {
            return None;
        }
        let tag = tag(hash);
        let mut slot = self.home(hash);
        loop {
            match self.tags[slot] {
                0 => return None,
                t if t == tag && eq(self.slots[slot]) => return Some(Slot(slot)),
                _ => slot = self.next(slot),
            }
        }
    }

    pub(super) fn get(&self, slot: Slot) -> u32 {
        self.slots[slot.0]
    }

    pub(super) fn set(&mut self, slot: Slot, position: u32) {
        self.slots[slot.0] = position;
    }

    /// Adds a position not yet present; `hash_of` gives the hash of a stored position (to move
    /// them when the index grows).
    pub(super) fn insert(&mut self, hash: u64, position: u32, hash_of: impl Fn(u32) -> u64) {
        if (self.len + 1) * 100 > self.tags.len() * MAX_LOAD_PERCENT {
            let grown = (self.tags.len() * GROWTH_PERCENT / 100).max(MIN_SLOTS);
            self.resize(grown.max(slots_for(self.len + 1)), hash_of);
        }
        self.put(hash, position);
        self.len += 1;
    }

    /// Room for `additional` more positions without growing.
    pub(super) fn reserve(&mut self, additional: usize, hash_of: impl Fn(u32) -> u64) {
        let want = slots_for(self.len + additional);
        if want > self.tags.len() {
            self.resize(want, hash_of);
        }
    }

    /// Gives back room once the index is mostly empty (a quarter full or less).
    pub(super) fn shrink(&mut self, hash_of: impl Fn(u32) -> u64) {
        if self.tags.len() > 1024 && self.len * 4 < self.tags.len() {
            self.resize(slots_for(self.len * GROWTH_PERCENT / 100), hash_of);
        }
    }

    /// Removes the position at `slot`: the positions after it in its run move back, each as far
    /// toward its home slot as the hole allows.
    pub(super) fn remove(&mut self, slot: Slot, hash_of: impl Fn(u32) -> u64) {
        let slots = self.tags.len();
        let distance = |from: usize, to: usize| (to + slots - from) % slots;
        let mut hole = slot.0;
        let mut at = self.next(hole);
        while self.tags[at] != 0 {
            let home = self.home(hash_of(self.slots[at]));
            if distance(home, at) >= distance(hole, at) {
                self.tags[hole] = self.tags[at];
                self.slots[hole] = self.slots[at];
                hole = at;
            }
            at = self.next(at);
        }
        self.tags[hole] = 0;
        self.len -= 1;
    }

    fn put(&mut self, hash: u64, position: u32) {
        let mut slot = self.home(hash);
        while self.tags[slot] != 0 {
            slot = self.next(slot);
        }
        self.tags[slot] = tag(hash);
        self.slots[slot] = position;
    }

    fn resize(&mut self, slots: usize, hash_of: impl Fn(u32) -> u64) {
        let old = std::mem::replace(
            self,
            Index {
                tags: vec![0; slots],
                slots: vec![0; slots],
                len: self.len,
            },
        );
        if slots == 0 {
            *self = Index::default();
            return;
        }
        for (&tag, &position) in old.tags.iter().zip(&old.slots) {
            if tag != 0 {
                self.put(hash_of(position), position);
            }
        }
    }
}

/// Slots for `len` positions at the highest load (at least one slot stays empty).
fn slots_for(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len * 100)
            .div_ceil(MAX_LOAD_PERCENT)
            .max(MIN_SLOTS)
            .max(len + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes chosen to collide: every key's home is one of a few slots, so runs wrap around
    /// the end and removals shift positions back across it.
    fn clustered(position: u32) -> u64 {
        let home = [0, u64::MAX / 2, u64::MAX - (1 << 20)][(position % 3) as usize];
        home | u64::from(position % 5) << 8
    }

    #[test]
    fn positions_are_found_after_inserts_and_removals_in_any_order() {
        for hash in [clustered as fn(u32) -> u64, |p| rustc_hash_of(p)] {
            let mut index = Index::default();
            let mut present: Vec<u32> = Vec::new();
            for p in 0..2_000u32 {
                index.insert(hash(p), p, hash);
                present.push(p);
                if p % 3 == 0 {
                    // Remove an earlier one, chosen by a stride.
                    let victim = present.swap_remove((p as usize * 7) % present.len());
                    let slot = index.find(hash(victim), |q| q == victim).unwrap();
                    index.remove(slot, hash);
                }
                if p % 97 == 0 {
                    index.shrink(hash);
                }
            }
            assert_eq!(index.len(), present.len());
            for &p in &present {
                let slot = index.find(hash(p), |q| q == p).unwrap();
                assert_eq!(index.get(slot), p);
            }
            for p in 2_000..2_100u32 {
                assert_eq!(index.find(hash(p), |q| q == p), None);
            }
            assert!(index.len() * 100 <= index.capacity() * MAX_LOAD_PERCENT);
        }
    }

    fn rustc_hash_of(p: u32) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(p)
    }

    #[test]
    fn a_reserved_index_does_not_grow_and_holds_few_spare_slots() {
        let mut index = Index::default();
        index.reserve(100_000, rustc_hash_of);
        let slots = index.capacity();
        for p in 0..100_000u32 {
            index.insert(rustc_hash_of(p), p, rustc_hash_of);
        }
        assert_eq!(index.capacity(), slots);
        assert!(slots < 100_000 * 120 / 100, "{slots} slots");
    }

    #[test]
    fn removing_everything_leaves_an_empty_index_that_finds_nothing() {
        let mut index = Index::default();
        for p in 0..5_000u32 {
            index.insert(clustered(p), p, clustered);
        }
        for p in 0..5_000u32 {
            let slot = index.find(clustered(p), |q| q == p).unwrap();
            index.remove(slot, clustered);
            index.shrink(clustered);
        }
        assert_eq!(index.len(), 0);
        assert_eq!(index.find(clustered(1), |_| true), None);
        assert!(index.capacity() <= 1024);
    }
}
