//! The compact storage behind [`super::Dedupe`]: at a million objects per watch, the layout of
//! the state is most of kube2nats' memory.
//!
//! - [`Objects`]: the objects with a UUID uid, as 32-byte [`Entry`]s packed densely in fixed-size
//!   chunks, found through an [`Index`] of 4-byte positions. A hash table of whole entries keeps
//!   up to half its buckets empty (and doubles at once, old and new table alive together); here
//!   an empty slot costs 5 bytes, the index holds at most 1.5 slots per object (1.18 when sized
//!   ahead for a list), and the entries grow a chunk at a time. A removal moves the last entry
//!   into the hole, so the entries stay dense.
//! - [`Names`]: every name, length-prefixed, back to back in fixed-size pages.
//!
//! Chunks and pages are shared (`Arc`) with a [`super::Frozen`] view while a checkpoint encodes
//! it; a chunk changed meanwhile is copied first (copy on write), so the view stays the state
//! as it was, and a checkpoint costs no copy of the state that does not change under it.

use std::hash::BuildHasher;
use std::sync::Arc;

use rustc_hash::FxBuildHasher;

use super::index::Index;

/// Entries per chunk of [`Chunked`]: 4096 × 32 bytes = 128 KiB (tests use tiny chunks, so that
/// a few objects span many).
const CHUNK: usize = if cfg!(test) { 8 } else { 4096 };

/// The chunks of a [`Chunked`], shared with it.
pub(super) type Shared<T> = Vec<Arc<Vec<T>>>;

/// A vector of `Copy` values in chunks of [`CHUNK`] (the first grows from small; the others are
/// allocated whole), each shared copy-on-write.
#[derive(Debug, Clone)]
pub(super) struct Chunked<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Copy> Chunked<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    pub(super) fn get_mut(&mut self, i: usize) -> &mut T {
        &mut unique(&mut self.chunks[i / CHUNK])[i % CHUNK]
    }

    pub(super) fn push(&mut self, value: T) {
        if self.len.is_multiple_of(CHUNK) {
            // The first chunk grows by doubling (a small watch stays small); later ones are
            // allocated whole, so no chunk is ever copied to grow.
            let chunk = if self.chunks.is_empty() {
                Vec::new()
            } else {
                Vec::with_capacity(CHUNK)
            };
            self.chunks.push(Arc::new(chunk));
        }
        if let Some(last) = self.chunks.last_mut() {
            unique(last).push(value);
        }
        self.len += 1;
    }

    /// Removes the value at `i`, moving the last one into its place.
    pub(super) fn swap_remove(&mut self, i: usize) -> T {
        let removed = *self.get(i);
        let last = self.len - 1;
        let moved = {
            let chunk = unique(&mut self.chunks[last / CHUNK]);
            let moved = chunk.pop();
            if chunk.is_empty() {
                self.chunks.pop();
            }
            moved
        };
        self.len -= 1;
        if let (true, Some(moved)) = (i != last, moved) {
            *self.get_mut(i) = moved;
        }
        removed
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// The chunks, shared: what a [`super::Frozen`] view holds.
    pub(super) fn share(&self) -> Shared<T> {
        self.chunks.clone()
    }

    /// `len` zeros (or defaults).
    pub(super) fn filled(len: usize, value: T) -> Chunked<T> {
        let mut chunked = Chunked::default();
        for _ in 0..len {
            chunked.push(value);
        }
        chunked
    }
}

/// The chunk, for writing: copied first if a [`super::Frozen`] view shares it.
fn unique<T: Copy>(chunk: &mut Arc<Vec<T>>) -> &mut Vec<T> {
    if Arc::get_mut(chunk).is_none() {
        let mut copy = Vec::with_capacity(chunk.capacity());
        copy.extend_from_slice(chunk);
        *chunk = Arc::new(copy);
    }
    Arc::make_mut(chunk)
}

/// One object with a UUID uid: 32 bytes, 4-byte aligned. (Whether a list has seen it is a bit
/// beside it, in [`Objects`], and only while a list is under way.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) uid: [u8; 16],
    /// The version, split so the entry needs no 8-byte alignment (no padding).
    version: [u32; 2],
    /// Where the name is in [`Names`].
    pub(super) name: NameRef,
    /// Index into the namespaces, or `NO_NAMESPACE`.
    pub(super) namespace: u32,
}

impl Entry {
    pub(super) fn new(uid: [u8; 16], version: u64, name: NameRef, namespace: u32) -> Entry {
        let mut entry = Entry {
            uid,
            version: [0; 2],
            name,
            namespace,
        };
        entry.set_version(version);
        entry
    }

    pub(super) fn version(&self) -> u64 {
        u64::from(self.version[0]) | u64::from(self.version[1]) << 32
    }

    pub(super) fn set_version(&mut self, version: u64) {
        // Truncation is the point: the low and the high half.
        self.version = [version as u32, (version >> 32) as u32];
    }
}

fn uid_hash(uid: &[u8; 16]) -> u64 {
    FxBuildHasher.hash_one(uid)
}

/// The objects with a UUID uid: dense entries, an index, the marks (what `changes` compares) in
/// a parallel array that exists only once some object has one, and while a list is under way a
/// bit per object: whether the list has seen it.
#[derive(Debug, Default)]
pub(super) struct Objects {
    index: Index,
    entries: Chunked<Entry>,
    marks: Option<Chunked<u64>>,
    seen: Option<Vec<u64>>,
}

/// An entry moved by a removal: from the last position into the hole.
pub(super) struct Moved {
    pub(super) from: usize,
    pub(super) to: usize,
}

impl Objects {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn find(&self, uid: &[u8; 16]) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(uid_hash(uid), |i| entries.get(i as usize).uid == *uid)
            .map(|slot| self.index.get(slot) as usize)
    }

    /// Room for `additional` more objects without the index growing.
    pub(super) fn reserve(&mut self, additional: usize) {
        let entries = &self.entries;
        self.index
            .reserve(additional, |j| uid_hash(&entries.get(j as usize).uid));
    }

    /// A list begins: no object is seen yet.
    pub(super) fn begin_list(&mut self) {
        self.seen = Some(vec![0; self.len().div_ceil(64)]);
    }

    /// The list is over: the objects it has not seen.
    pub(super) fn end_list(&mut self) -> Vec<[u8; 16]> {
        let Some(seen) = self.seen.take() else {
            return Vec::new();
        };
        self.iter()
            .filter(|(i, _)| seen[i / 64] & 1 << (i % 64) == 0)
            .map(|(_, entry)| entry.uid)
            .collect()
    }

    /// Whether the list under way has seen the object at `i` (true when none is).
    pub(super) fn seen(&self, i: usize) -> bool {
        self.seen
            .as_ref()
            .is_none_or(|seen| seen[i / 64] & 1 << (i % 64) != 0)
    }

    pub(super) fn set_seen(&mut self, i: usize, seen: bool) {
        if let Some(bits) = &mut self.seen {
            let bit = 1 << (i % 64);
            if seen {
                bits[i / 64] |= bit;
            } else {
                bits[i / 64] &= !bit;
            }
        }
    }

    pub(super) fn entry(&self, i: usize) -> &Entry {
        self.entries.get(i)
    }

    pub(super) fn entry_mut(&mut self, i: usize) -> &mut Entry {
        self.entries.get_mut(i)
    }

    pub(super) fn mark(&self, i: usize) -> u64 {
        self.marks.as_ref().map_or(0, |marks| *marks.get(i))
    }

    pub(super) fn set_mark(&mut self, i: usize, mark: u64) {
        if self.marks.is_none() && mark == 0 {
            return;
        }
        let len = self.entries.len();
        let marks = self.marks.get_or_insert_with(|| Chunked::filled(len, 0));
        *marks.get_mut(i) = mark;
    }

    /// Adds an object not yet present (seen by the list under way, if any); returns its
    /// position.
    pub(super) fn insert(&mut self, entry: Entry, mark: u64) -> usize {
        let i = self.entries.len();
        let position =
            u32::try_from(i).expect("fewer than 4 billion objects per watch target fit in memory");
        self.entries.push(entry);
        if let Some(marks) = &mut self.marks {
            marks.push(mark);
        } else {
            self.set_mark(i, mark);
        }
        if let Some(seen) = &mut self.seen {
            if i.is_multiple_of(64) {
                seen.push(0);
            }
        }
        self.set_seen(i, true);
        let entries = &self.entries;
        self.index.insert(uid_hash(&entry.uid), position, |j| {
            uid_hash(&entries.get(j as usize).uid)
        });
        i
    }

    /// Removes the object at `i`; the last entry moves into its place.
    pub(super) fn remove(&mut self, i: usize) -> (Entry, u64, Option<Moved>) {
        let uid = self.entries.get(i).uid;
        let entries = &self.entries;
        let hash_of = |j: u32| uid_hash(&entries.get(j as usize).uid);
        if let Some(slot) = self.index.find(uid_hash(&uid), |j| j as usize == i) {
            self.index.remove(slot, hash_of);
        }
        let last = self.entries.len() - 1;
        let last_seen = self.seen(last);
        let entry = self.entries.swap_remove(i);
        let mark = self.marks.as_mut().map_or(0, |marks| marks.swap_remove(i));
        self.set_seen(i, last_seen);
        if let Some(seen) = &mut self.seen {
            seen.truncate(last.div_ceil(64));
        }
        let moved = (i != last).then(|| {
            let moved_uid = self.entries.get(i).uid;
            if let Some(slot) = self
                .index
                .find(uid_hash(&moved_uid), |j| j as usize == last)
            {
                // `i` is below `last`, which fit.
                self.index.set(slot, i as u32);
            }
            Moved { from: last, to: i }
        });
        let entries = &self.entries;
        self.index
            .shrink(|j| uid_hash(&entries.get(j as usize).uid));
        if self.entries.len() == 0 {
            self.marks = None;
        }
        (entry, mark, moved)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, &Entry)> {
        self.entries.iter().enumerate()
    }

    pub(super) fn share(&self) -> (Shared<Entry>, Option<Shared<u64>>) {
        (
            self.entries.share(),
            self.marks.as_ref().map(Chunked::share),
        )
    }
}

/// Where a name is in [`Names`]: page number (high 16 bits) and offset in the page.
pub(super) type NameRef = u32;

/// Bytes per page of [`Names`]: names start below it (a longer name gets a page of its own; tests
/// use small pages).
const PAGE: usize = if cfg!(test) { 256 } else { 64 * 1024 };

/// Every tracked object's name, a varint length then the bytes, back to back in pages: no
/// allocation (and no allocator overhead) per object, and no page is ever copied to grow.
/// Names of forgotten objects are garbage until the next compaction.
#[derive(Debug, Default)]
pub(super) struct Names {
    pages: Vec<Arc<Vec<u8>>>,
    /// Bytes in use, garbage included.
    len: usize,
    garbage: usize,
}

/// Compaction waits for at least this much garbage, so small states are not rewritten often.
const MIN_NAME_GARBAGE: usize = 64 * 1024;

impl Names {
    pub(super) fn push(&mut self, name: &str) -> NameRef {
        let mut prefix = [0u8; 5];
        let prefix = varint(name.len(), &mut prefix);
        let need = prefix.len() + name.len();
        let full = self
            .pages
            .last()
            .is_none_or(|page| !page.is_empty() && page.len() + need > PAGE);
        if full {
            // Only the first page grows from small; the others are allocated whole.
            let page = if self.pages.is_empty() {
                Vec::new()
            } else {
                Vec::with_capacity(PAGE.max(need))
            };
            self.pages.push(Arc::new(page));
        }
        let number = self.pages.len() - 1;
        let page = unique(&mut self.pages[number]);
        let offset = page.len();
        page.extend_from_slice(prefix);
        page.extend_from_slice(name.as_bytes());
        self.len += need;
        let number = u32::try_from(number)
            .ok()
            .filter(|&n| n < 1 << 16)
            .expect("names stay below 4 GiB: compaction keeps them at most twice the live names");
        // A name starts below PAGE: 16 bits.
        number << 16 | offset as u32
    }

    pub(super) fn get(&self, name: NameRef) -> &str {
        get(&self.pages, name)
    }

    /// The name's bytes are garbage now.
    pub(super) fn release(&mut self, name: NameRef) {
        let len = self.get(name).len();
        self.garbage += len + varint(len, &mut [0; 5]).len();
    }

    pub(super) fn needs_compaction(&self) -> bool {
        self.garbage > MIN_NAME_GARBAGE && self.garbage > self.len / 2
    }

    /// Bytes in use, garbage included.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.len
    }

    /// Live bytes: what a compacted copy would take.
    pub(super) fn live(&self) -> usize {
        self.len - self.garbage
    }

    pub(super) fn share(&self) -> Vec<Arc<Vec<u8>>> {
        self.pages.clone()
    }
}

/// The name at `name` in `pages` (of [`Names`] or a [`super::Frozen`] view of them).
pub(super) fn get(pages: &[Arc<Vec<u8>>], name: NameRef) -> &str {
    let page = &pages[(name >> 16) as usize];
    let mut at = (name & 0xffff) as usize;
    let mut len = 0usize;
    let mut shift = 0;
    while let Some(&byte) = page.get(at) {
        at += 1;
        len |= usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            break;
        }
    }
    // Only whole `&str`s are ever pushed, so the bytes are UTF-8.
    page.get(at..at + len)
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .unwrap_or_default()
}

/// LEB128 of `n` into `buf`.
fn varint(mut n: usize, buf: &mut [u8; 5]) -> &[u8] {
    let mut len = 0;
    loop {
        // The low seven bits.
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 || len == 4 {
            buf[len] = byte;
            return &buf[..=len];
        }
        buf[len] = byte | 0x80;
        len += 1;
    }
}

/// What is remembered of one object, as read out of the storage.
///
/// This is the bulk of kube2nats' memory, so it is kept well under 100 bytes per object: an
/// object with a UUID uid (every object a real API server creates) is a 32-byte [`Entry`] (uid,
/// version, name and namespace references) in dense chunks, a 5-byte slot of an index (6 to 8
/// bytes per object with its spare room), and its name, length-prefixed, in shared pages; the
/// `mark` takes 8 bytes more only in watches whose `changes` sets one, and while a list is under
/// way a bit says whether the list has seen the object. About 62 bytes per pod in all.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tracked {
    /// The integer resourceVersion, or [`super::keys::OPAQUE`].
    pub(super) version: u64,
    /// What `changes` compares for the published version (`crate::noise::NoiseControl::mark`:
    /// a generation or a content fingerprint); 0 = nothing to compare.
    pub(super) mark: u64,
    pub(super) name: NameRef,
    /// Index into [`super::namespaces::Namespaces`], or [`super::namespaces::NO_NAMESPACE`].
    pub(super) namespace: u32,
    /// The list generation that last saw this object.
    pub(super) list_epoch: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_every_length_round_trip_across_pages() {
        let mut names = Names::default();
        let long = "x".repeat(PAGE + 10);
        let texts: Vec<String> = (0..20_000)
            .map(|i| match i {
                7 => long.clone(),
                8 => String::new(),
                _ => format!("{}-{i}", "n".repeat(i % 300)),
            })
            .collect();
        let refs: Vec<NameRef> = texts.iter().map(|t| names.push(t)).collect();
        assert!(names.pages.len() > 10);
        for (text, r) in texts.iter().zip(&refs) {
            assert_eq!(names.get(*r), text);
        }
    }

    #[test]
    fn a_shared_chunk_is_copied_before_it_changes() {
        let mut objects = Objects::default();
        let entry = |i: u32| Entry::new([i as u8; 16], u64::from(i) << 40 | 7, i, 0);
        for i in 0..10 {
            objects.insert(entry(i), 0);
        }
        let (frozen, _) = objects.share();
        objects.entry_mut(3).set_version(99);
        objects.remove(0);
        assert_eq!(frozen[0][3].version(), 3 << 40 | 7);
        assert_eq!(frozen[0][0], entry(0));
        assert_eq!(objects.entry(0), &entry(9), "the last moved into the hole");
        assert_eq!(objects.find(&[9; 16]), Some(0));
        assert_eq!(objects.find(&[0; 16]), None);
        assert_eq!(objects.entry(3).version(), 99);
    }
}
