//! De-duplication and the relist difference: the memory of what each watch has published.
//!
//! For every object a watch has published, kube2nats remembers its uid, the last published
//! resourceVersion and its name (to name it in a subject if it must later announce its deletion).
//! That is enough to
//! - drop an event already published (same uid and resourceVersion) or older than the one
//!   published (where versions compare as integers), and
//! - turn a relist into the difference against what subscribers last saw: new objects ADDED,
//!   changed ones MODIFIED, vanished ones DELETED (client-go's `DeletedFinalStateUnknown`).
//!
//! The state is per watch target. [`crate::state`] checkpoints it to JetStream (read through
//! [`Dedupe::freeze`]) and refills it at start ([`Dedupe::restore`]), so a restart's relist
//! is diffed against what was published before it.
//!
//! This file holds the verdicts, the memory and the methods that save and refill it; `saved` the
//! persistence view's forms (what a checkpoint reads, what a load refills from), `store` and
//! `index` the compact storage beneath.

mod confirm;
mod index;
mod keys;
mod leave;
mod namespaces;
mod saved;
mod store;
mod tombstones;

use std::collections::HashMap;

use hashbrown::HashTable;
use rustc_hash::{FxHashMap, FxHashSet};

use keys::{StoredVersion, UidKey, Version, OPAQUE};
use namespaces::Namespaces;
use store::{Entry, NameRef, Names, Objects, Tracked};
use tombstones::Tombstones;

use saved::saved_key;
pub(crate) use saved::{Frozen, Saved};
pub use saved::{SavedObject, SavedUid, SavedVersion};

use crate::event::{EventType, ObjectMeta};

/// What to do with one received watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Publish,
    /// This uid and resourceVersion were already published.
    Duplicate,
    /// Older than the version already published for this uid.
    Stale,
    /// A MODIFIED whose mark (see [`Dedupe::observe`]) equals the published one: no news to
    /// subscribers. Its version is recorded, so a later relist does not announce it either.
    Unchanged,
}

/// What a listed object means against the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listed {
    /// Not known: publish as ADDED.
    New,
    /// Known with another version: publish as MODIFIED.
    Changed,
    /// Known with this version: nothing to publish.
    Unchanged,
    /// Known with a newer version (the list came from a lagging server): nothing to publish.
    Stale,
    /// Known only from the journal, at this version: its ADDED may not have gone out before a
    /// crash, so it is published again (in JetStream mode with the same `Nats-Msg-Id`).
    Unconfirmed,
    /// Known with another version but the same mark: nothing to publish (the version is recorded).
    SameMark,
}

/// An object that was tracked but is missing from a complete relist: it was deleted while the
/// watch could not see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Vanished {
    pub(crate) meta: ObjectMeta,
    /// Its deletion was announced before a crash (and maybe went out) at this version: it is
    /// announced again the same. Otherwise the version is the last one published, and messages
    /// published after it may have been lost from the memory with a crash (docs/durable-state.md).
    pub(crate) announced: bool,
}

/// Where a tracked object is stored.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// Position in [`Dedupe::uuids`].
    Dense(usize),
    /// In [`Dedupe::others`].
    Other,
}

/// The published state of one watch target.
#[derive(Debug, Default)]
pub struct Dedupe {
    /// Objects with a canonical UUID uid: every object a real API server creates. The API server
    /// assigns uids (clients cannot choose them), so a fast unkeyed hash is safe here.
    uuids: Objects,
    /// Objects whose uid is anything else.
    others: HashMap<Box<str>, Tracked>,
    /// The text of versions that are not integers (stored as [`OPAQUE`]).
    opaque_versions: HashMap<UidKey, Box<str>>,
    names: Names,
    namespaces: Namespaces,
    list_epoch: u32,
    /// During a list: the tracked objects by (namespace, name), built at the first
    /// [`Dedupe::superseded`] call of that list and dropped when it ends.
    by_name: Option<ByName>,
    tombstones: Tombstones,
    /// Objects restored from the journal: their first message may not have been published
    /// before a crash, so the next event or list of each is published whatever its version.
    unconfirmed: FxHashSet<UidKey>,
    /// Of those, the ones the journal recorded as deleted: their deletion was announced at the
    /// version tracked, and is announced again at that version (the same message).
    deletions: FxHashSet<UidKey>,
}

/// [`Dedupe::superseded`]'s index: positions in [`Dedupe::uuids`] by a hash of namespace and
/// name (4 bytes each, so a relist of a million objects adds ~10 MB, not ~70), and the uids of
/// the other objects by the same hash.
#[derive(Debug, Default)]
struct ByName {
    dense: HashTable<u32>,
    others: FxHashMap<u64, Box<str>>,
}

/// The most objects [`Dedupe::size_for`] sizes the index for ahead (~25 MB of index).
pub(crate) const MAX_SIZED_AHEAD: u64 = 4 << 20;

impl Dedupe {
    pub fn new() -> Dedupe {
        Dedupe::default()
    }

    /// Whether an object with this uid is tracked: if not, publishing it makes it known, and its
    /// deletion must be announced even after a crash.
    pub(crate) fn tracks(&self, uid: &str) -> bool {
        self.locate(&UidKey::new(uid)).is_some()
    }

    fn is_unconfirmed(&self, key: &UidKey) -> bool {
        !self.unconfirmed.is_empty() && self.unconfirmed.contains(key)
    }

    /// Objects currently tracked.
    pub fn len(&self) -> usize {
        self.uuids.len() + self.others.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Judges a received event and, when it is to be published, records it. `mark` is what the
    /// watch's `changes` compares (0: nothing): a MODIFIED whose mark equals the published one is
    /// [`Verdict::Unchanged`].
    pub fn observe(&mut self, meta: &ObjectMeta, event_type: EventType, mark: u64) -> Verdict {
        self.observe_tracked(meta, event_type, mark).0
    }

    /// As [`observe`](Self::observe), and whether the object was tracked before (what
    /// [`tracks`](Self::tracks) said just before), for the price of one lookup.
    pub(crate) fn observe_tracked(
        &mut self,
        meta: &ObjectMeta,
        event_type: EventType,
        mark: u64,
    ) -> (Verdict, bool) {
        let key = UidKey::new(&meta.uid);
        if self.tombstones.contains(&key) {
            let verdict = match event_type {
                EventType::Deleted => Verdict::Duplicate,
                EventType::Added | EventType::Modified => Verdict::Stale,
            };
            return (verdict, self.locate(&key).is_some());
        }
        let place = self.locate(&key);
        (
            self.judge(key, place, meta, event_type, mark),
            place.is_some(),
        )
    }

    /// The verdict on an event of the object `key`, found at `place` if tracked; recorded when
    /// it is to be published.
    fn judge(
        &mut self,
        key: UidKey,
        place: Option<(Place, Tracked)>,
        meta: &ObjectMeta,
        event_type: EventType,
        mark: u64,
    ) -> Verdict {
        let version = Version::new(&meta.resource_version);
        if let Some((_, tracked)) = place {
            let unconfirmed = self.is_unconfirmed(&key);
            let stored = self.stored_version(&key, tracked);
            if version.older_than(&stored) {
                return Verdict::Stale;
            }
            if event_type != EventType::Deleted && version.same_as(&stored) && !unconfirmed {
                return Verdict::Duplicate;
            }
            if unconfirmed {
                self.unconfirmed.remove(&key);
                self.deletions.remove(&key);
            } else if event_type == EventType::Modified && mark != 0 && mark == tracked.mark {
                self.track(key, place, version, meta.into(), mark);
                return Verdict::Unchanged;
            }
        }
        match event_type {
            EventType::Deleted => {
                self.forget(&key);
                self.tombstones.insert(key);
            }
            EventType::Added | EventType::Modified => {
                self.track(key, place, version, meta.into(), mark)
            }
        }
        Verdict::Publish
    }

    /// A new list begins: objects not seen by [`listed`](Self::listed) before
    /// [`end_list`](Self::end_list) count as vanished.
    pub(crate) fn begin_list(&mut self) {
        self.list_epoch = self.list_epoch.wrapping_add(1);
        self.uuids.begin_list();
        self.by_name = None;
    }

    /// Room for `objects` objects in all without growing the index: a list that says how many
    /// items it has, or a snapshot, sizes the state once instead of growing it (old and new
    /// index alive together) while it fills. Only a hint from outside, so at most
    /// [`MAX_SIZED_AHEAD`] objects are sized ahead; beyond, the index grows as it fills.
    pub fn size_for(&mut self, objects: u64) {
        let objects = usize::try_from(objects.min(MAX_SIZED_AHEAD)).unwrap_or(0);
        self.uuids.reserve(objects.saturating_sub(self.len()));
    }

    /// A listed object's name held by another tracked uid: that object was deleted while the
    /// watch could not see it (names are unique at any instant), so it is forgotten and returned,
    /// to be announced DELETED before the new uid's ADDED. Call it before [`Dedupe::listed`].
    pub(crate) fn superseded(&mut self, meta: &ObjectMeta) -> Option<Vanished> {
        if self.is_empty() {
            return None;
        }
        if self.by_name.is_none() {
            self.by_name = Some(self.name_index());
        }
        let hash = name_hash(meta.namespace.as_deref(), &meta.name);
        let by_name = self.by_name.as_ref()?;
        let named = |name: NameRef, namespace: u32| {
            self.names.get(name) == meta.name
                && self.namespaces.get(namespace) == meta.namespace.as_deref()
        };
        let dense = by_name.dense.find(hash, |&i| {
            let entry = self.uuids.entry(i as usize);
            named(entry.name, entry.namespace)
        });
        let key = match dense {
            Some(&i) => UidKey::Uuid(self.uuids.entry(i as usize).uid),
            None => UidKey::Other(by_name.others.get(&hash)?.clone()),
        };
        if key == UidKey::new(&meta.uid) {
            return None;
        }
        let (_, tracked) = self.locate(&key)?;
        // A hash collision between two names is not a recreation.
        if !named(tracked.name, tracked.namespace) {
            return None;
        }
        if let (UidKey::Other(_), Some(by_name)) = (&key, self.by_name.as_mut()) {
            by_name.others.remove(&hash);
        }
        self.vanish(&key)
    }

    fn name_index(&self) -> ByName {
        let hash = |i: u32| {
            let entry = self.uuids.entry(i as usize);
            name_hash(
                self.namespaces.get(entry.namespace),
                self.names.get(entry.name),
            )
        };
        let mut dense = HashTable::with_capacity(self.uuids.len());
        for (i, _) in self.uuids.iter() {
            // `i` is a position of `uuids`, which fit in u32.
            let i = i as u32;
            dense.insert_unique(hash(i), i, |&j| hash(j));
        }
        let others = self
            .others
            .iter()
            .map(|(uid, t)| {
                let hash = name_hash(self.namespaces.get(t.namespace), self.names.get(t.name));
                (hash, uid.clone())
            })
            .collect();
        ByName { dense, others }
    }

    /// Forgets a tracked object and returns what is announced of it.
    fn vanish(&mut self, key: &UidKey) -> Option<Vanished> {
        let (_, tracked) = self.locate(key)?;
        let meta = ObjectMeta {
            uid: key.to_uid_string(),
            resource_version: self.stored_version(key, tracked).to_resource_version(),
            name: self.names.get(tracked.name).to_owned(),
            namespace: self.namespaces.get(tracked.namespace).map(str::to_owned),
            generation: None,
        };
        let announced = !self.deletions.is_empty() && self.deletions.contains(key);
        self.forget(key);
        self.tombstones.insert(key.clone());
        Some(Vanished { meta, announced })
    }

    /// Compares one listed object with the state, and records it; `mark` as for
    /// [`observe`](Self::observe).
    pub(crate) fn listed(&mut self, meta: &ObjectMeta, mark: u64) -> Listed {
        let key = UidKey::new(&meta.uid);
        let version = Version::new(&meta.resource_version);
        let place = self.locate(&key);
        let verdict = match place {
            None => Listed::New,
            Some((at, tracked)) => {
                let unconfirmed = self.is_unconfirmed(&key);
                let stored = self.stored_version(&key, tracked);
                let verdict = if version.same_as(&stored) && unconfirmed {
                    Listed::Unconfirmed
                } else if version.same_as(&stored) {
                    Listed::Unchanged
                } else if version.older_than(&stored) {
                    Listed::Stale
                } else if mark != 0 && mark == tracked.mark {
                    Listed::SameMark
                } else {
                    Listed::Changed
                };
                if unconfirmed && verdict != Listed::Stale {
                    self.unconfirmed.remove(&key);
                    self.deletions.remove(&key);
                }
                if matches!(verdict, Listed::Unchanged | Listed::Stale) {
                    let seen = Tracked {
                        list_epoch: self.list_epoch,
                        ..tracked
                    };
                    self.write(&key, at, seen);
                    return verdict;
                }
                verdict
            }
        };
        self.track(key, place, version, meta.into(), mark);
        verdict
    }

    /// The list is complete: every tracked object it did not contain has vanished and is forgotten.
    /// The vanished come in namespace and name order, so the deletions a relist announces are
    /// reproducible.
    pub(crate) fn end_list(&mut self) -> Vec<Vanished> {
        let epoch = self.list_epoch;
        let gone: Vec<UidKey> = self
            .uuids
            .end_list()
            .into_iter()
            .map(UidKey::Uuid)
            .chain(
                self.others
                    .iter()
                    .filter(|(_, t)| t.list_epoch != epoch)
                    .map(|(k, _)| UidKey::Other(k.clone())),
            )
            .collect();
        self.by_name = None;
        let mut vanished = gone
            .into_iter()
            .filter_map(|key| self.vanish(&key))
            .collect::<Vec<_>>();
        vanished.sort_by(|a, b| {
            (&a.meta.namespace, &a.meta.name).cmp(&(&b.meta.namespace, &b.meta.name))
        });
        vanished
    }

    /// Where the object is, and what is remembered of it.
    fn locate(&self, key: &UidKey) -> Option<(Place, Tracked)> {
        match key {
            UidKey::Uuid(uuid) => {
                let i = self.uuids.find(uuid)?;
                let entry = self.uuids.entry(i);
                // Only "seen by the list under way or not" is kept for these.
                let list_epoch = if self.uuids.seen(i) {
                    self.list_epoch
                } else {
                    self.list_epoch.wrapping_sub(1)
                };
                let tracked = Tracked {
                    version: entry.version(),
                    mark: self.uuids.mark(i),
                    name: entry.name,
                    namespace: entry.namespace,
                    list_epoch,
                };
                Some((Place::Dense(i), tracked))
            }
            UidKey::Other(uid) => self.others.get(uid).map(|t| (Place::Other, *t)),
        }
    }

    /// Stores `tracked` for the object at `place` (as [`locate`](Self::locate) found it).
    fn write(&mut self, key: &UidKey, place: Place, tracked: Tracked) {
        match (place, key) {
            (Place::Dense(i), _) => {
                let entry = self.uuids.entry_mut(i);
                entry.set_version(tracked.version);
                entry.name = tracked.name;
                entry.namespace = tracked.namespace;
                self.uuids.set_mark(i, tracked.mark);
                let seen = tracked.list_epoch == self.list_epoch;
                self.uuids.set_seen(i, seen);
            }
            (Place::Other, UidKey::Other(uid)) => {
                if let Some(stored) = self.others.get_mut(uid) {
                    *stored = tracked;
                }
            }
            (Place::Other, UidKey::Uuid(_)) => {}
        }
    }

    fn stored_version(&self, key: &UidKey, tracked: Tracked) -> StoredVersion<'_> {
        match tracked.version {
            OPAQUE => StoredVersion::Opaque(self.opaque_versions.get(key).map_or("", |v| &**v)),
            n => StoredVersion::Number(n),
        }
    }

    /// Records `version` and `mark` for the object (found at `place`, if tracked); its name and
    /// namespace are stored on first sight.
    fn track(
        &mut self,
        key: UidKey,
        place: Option<(Place, Tracked)>,
        version: Version,
        named: Named<'_>,
        mark: u64,
    ) {
        let version = match version {
            Version::Number(n) => {
                if !self.opaque_versions.is_empty() {
                    self.opaque_versions.remove(&key);
                }
                n
            }
            Version::Opaque(text) => {
                self.opaque_versions.insert(key.clone(), text);
                OPAQUE
            }
        };
        let list_epoch = self.list_epoch;
        if let Some((at, old)) = place {
            let mut tracked = Tracked {
                version,
                mark,
                list_epoch,
                ..old
            };
            // Name and namespace of an object never change in Kubernetes; should a server say
            // otherwise, the latest wins.
            if self.names.get(old.name) != named.name
                || self.namespaces.get(old.namespace) != named.namespace
            {
                tracked.name = self.names.push(named.name);
                self.names.release(old.name);
                tracked.namespace = self.namespaces.acquire(named.namespace);
                self.namespaces.release(old.namespace);
            }
            self.write(&key, at, tracked);
            if self.names.needs_compaction() {
                self.compact_names();
            }
            return;
        }
        let name = self.names.push(named.name);
        let namespace = self.namespaces.acquire(named.namespace);
        match key {
            UidKey::Uuid(uuid) => {
                let entry = Entry::new(uuid, version, name, namespace);
                self.uuids.insert(entry, mark);
            }
            UidKey::Other(uid) => {
                let tracked = Tracked {
                    version,
                    mark,
                    name,
                    namespace,
                    list_epoch,
                };
                self.others.insert(uid, tracked);
            }
        }
    }

    /// Drops everything remembered of the object.
    fn forget(&mut self, key: &UidKey) {
        let tracked = match key {
            UidKey::Uuid(uuid) => {
                let Some((Place::Dense(i), tracked)) = self.locate(key) else {
                    return;
                };
                let hash_at = |d: &Dedupe, i: usize| {
                    let entry = d.uuids.entry(i);
                    name_hash(d.namespaces.get(entry.namespace), d.names.get(entry.name))
                };
                let removed_hash = self.by_name.is_some().then(|| hash_at(self, i));
                let (_, _, moved) = self.uuids.remove(i);
                debug_assert!(self.uuids.find(uuid).is_none());
                // The name index holds positions: the removed one goes, the moved one follows.
                let moved = moved.map(|m| (hash_at(self, m.to), m));
                if let (Some(by_name), Some(hash)) = (self.by_name.as_mut(), removed_hash) {
                    if let Ok(found) = by_name.dense.find_entry(hash, |&j| j as usize == i) {
                        found.remove();
                    }
                    if let Some((hash, m)) = moved {
                        if let Some(at) = by_name.dense.find_mut(hash, |&j| j as usize == m.from) {
                            // A position of `uuids`, which fit in u32.
                            *at = m.to as u32;
                        }
                    }
                }
                tracked
            }
            UidKey::Other(uid) => match self.others.remove(uid) {
                Some(tracked) => tracked,
                None => return,
            },
        };
        if !self.unconfirmed.is_empty() {
            self.unconfirmed.remove(key);
        }
        if !self.deletions.is_empty() {
            self.deletions.remove(key);
        }
        if tracked.version == OPAQUE {
            self.opaque_versions.remove(key);
        }
        self.namespaces.release(tracked.namespace);
        self.names.release(tracked.name);
        if self.names.needs_compaction() {
            self.compact_names();
        }
    }

    /// Rewrites the names of the live objects into new, tight pages.
    fn compact_names(&mut self) {
        let old = std::mem::take(&mut self.names);
        for i in 0..self.uuids.len() {
            let name = self.names.push(old.get(self.uuids.entry(i).name));
            self.uuids.entry_mut(i).name = name;
        }
        for tracked in self.others.values_mut() {
            tracked.name = self.names.push(old.get(tracked.name));
        }
        debug_assert_eq!(self.names.live(), old.live());
    }
}

/// The name and namespace of an object, as received or as saved.
#[derive(Debug, Clone, Copy)]
struct Named<'a> {
    name: &'a str,
    namespace: Option<&'a str>,
}

impl<'a> From<&'a ObjectMeta> for Named<'a> {
    fn from(meta: &'a ObjectMeta) -> Named<'a> {
        Named {
            name: &meta.name,
            namespace: meta.namespace.as_deref(),
        }
    }
}

// The persistence view: how the durable state (`crate::state`) reads this memory and refills it
// (the saved forms are in `saved`).
impl Dedupe {
    /// Calls `f` with every tracked object, in no particular order, then with every tombstone,
    /// oldest first.
    #[cfg(test)]
    pub(crate) fn for_each_saved(&self, f: impl FnMut(Saved<'_>)) {
        self.freeze().for_each(f);
    }

    /// The state as it is now, for a checkpoint to encode while the state moves on: it shares
    /// the storage, and a part changed meanwhile is copied first (see [`store`]).
    pub(crate) fn freeze(&self) -> Frozen {
        let (entries, marks) = self.uuids.share();
        Frozen {
            entries: entries.into_iter().map(Some).collect(),
            marks: marks.map(|marks| marks.into_iter().map(Some).collect()),
            names: self.names.share(),
            namespaces: self.namespaces.names.clone(),
            others: self
                .others
                .iter()
                .map(|(uid, t)| (uid.clone(), *t))
                .collect(),
            opaque_versions: self.opaque_versions.clone(),
            unconfirmed: self.unconfirmed.clone(),
            deletions: self.deletions.clone(),
            tombstones: self.tombstones.order.iter().cloned().collect(),
            next: 0,
        }
    }

    /// Refills the memory with one saved entry: of a snapshot, or of a journal record (then
    /// `unconfirmed`: the object's first message or its deletion may not have gone out). A
    /// journaled version older than the one tracked is ignored.
    pub(crate) fn restore_saved(&mut self, saved: Saved<'_>, unconfirmed: bool) {
        match saved {
            Saved::Object(object) => {
                let key = saved_key(object.uid);
                if let (true, Some((_, tracked)), SavedVersion::Number(n)) =
                    (unconfirmed, self.locate(&key), object.version)
                {
                    if tracked.version != OPAQUE && n < tracked.version {
                        return;
                    }
                }
                if unconfirmed || object.unconfirmed {
                    if object.deleted {
                        self.deletions.insert(key.clone());
                    }
                    self.unconfirmed.insert(key);
                }
                self.restore(object);
            }
            Saved::Tombstone(uid) => self.tombstones.insert(saved_key(uid)),
        }
    }

    /// Tracked objects whose first message may not have been published.
    pub(crate) fn unconfirmed(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Deleted uids remembered.
    pub(crate) fn tombstones(&self) -> usize {
        self.tombstones.order.len()
    }

    /// Tracks a saved object again, as published at its saved version.
    pub(crate) fn restore(&mut self, saved: SavedObject<'_>) {
        let key = saved_key(saved.uid);
        let version = saved.version.remembered();
        let named = Named {
            name: saved.name,
            namespace: saved.namespace,
        };
        let place = self.locate(&key);
        self.track(key, place, version, named, saved.mark);
    }
}

/// The key of [`Dedupe::superseded`]'s index.
fn name_hash(namespace: Option<&str>, name: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    if let Some(ns) = namespace {
        h.write(ns.as_bytes());
    }
    h.write_u8(0xff);
    h.write(name.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests;

/// The state against a plain model (a map of uid to what was published) under random events,
/// relists, checkpoints taken half-way and restores.
#[cfg(test)]
mod model_tests;
