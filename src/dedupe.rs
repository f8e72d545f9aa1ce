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
//! [`Dedupe::for_each_saved`]) and refills it at start ([`Dedupe::restore`]), so a restart's relist
//! is diffed against what was published before it.

mod index;
mod store;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::{FxHashMap, FxHashSet};

use store::{Entry, NameRef, Names, Objects};

use crate::event::{EventType, ObjectMeta, ResourceVersion};

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
pub enum Listed {
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
pub struct Vanished {
    pub meta: ObjectMeta,
}

/// A uid as a map key: 16 bytes for the UUIDs Kubernetes assigns, the string otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum UidKey {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl UidKey {
    fn new(uid: &str) -> UidKey {
        parse_uuid(uid).map_or_else(|| UidKey::Other(uid.into()), UidKey::Uuid)
    }

    fn to_uid_string(&self) -> String {
        match self {
            UidKey::Uuid(b) => format_uuid(b),
            UidKey::Other(s) => s.to_string(),
        }
    }
}

/// A resourceVersion as received: an integer where it is one (every conforming server).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Version {
    Number(u64),
    Opaque(Box<str>),
}

impl Version {
    fn new(rv: &ResourceVersion) -> Version {
        // Only the canonical spelling of an integer round-trips through u64 (no sign, no leading
        // zero); u64::MAX marks an opaque version in storage, so it is kept as text.
        let text = rv.as_str();
        let canonical =
            text.bytes().all(|c| c.is_ascii_digit()) && (text.len() == 1 || !text.starts_with('0'));
        match rv.as_u64() {
            Some(n) if canonical && n != OPAQUE => Version::Number(n),
            _ => Version::Opaque(text.into()),
        }
    }

    /// Only integers are ordered; opaque versions are never "older".
    fn older_than(&self, other: &StoredVersion<'_>) -> bool {
        matches!((self, other), (Version::Number(a), StoredVersion::Number(b)) if a < b)
    }

    fn same_as(&self, other: &StoredVersion<'_>) -> bool {
        match (self, other) {
            (Version::Number(a), StoredVersion::Number(b)) => a == b,
            (Version::Opaque(a), StoredVersion::Opaque(b)) => **a == **b,
            _ => false,
        }
    }
}

/// The version a [`Tracked`] holds, read back.
enum StoredVersion<'a> {
    Number(u64),
    Opaque(&'a str),
}

impl StoredVersion<'_> {
    fn to_resource_version(&self) -> ResourceVersion {
        match self {
            StoredVersion::Number(n) => ResourceVersion::new(n.to_string()),
            StoredVersion::Opaque(s) => ResourceVersion::new(*s),
        }
    }
}

/// `Tracked::version` of an object whose version is not an integer; the text is in
/// `Dedupe::opaque_versions`.
const OPAQUE: u64 = u64::MAX;
/// `Tracked::namespace` of a cluster-scoped object.
const NO_NAMESPACE: u32 = u32::MAX;

/// What is remembered of one object, as read out of the storage ([`store`]).
///
/// This is the bulk of kube2nats' memory, so it is kept well under 100 bytes per object: an
/// object with a UUID uid (every object a real API server creates) is a 32-byte [`Entry`] (uid,
/// version, name and namespace references) in dense chunks, a 5-byte slot of an index (6 to 8
/// bytes per object with its spare room), and its name, length-prefixed, in shared pages; the
/// `mark` takes 8 bytes more only in watches whose `changes` sets one, and while a list is under
/// way a bit says whether the list has seen the object. About 62 bytes per pod in all.
#[derive(Debug, Clone, Copy)]
struct Tracked {
    /// The integer resourceVersion, or [`OPAQUE`].
    version: u64,
    /// What `changes` compares for the published version (`crate::noise::NoiseControl::mark`:
    /// a generation or a content fingerprint); 0 = nothing to compare.
    mark: u64,
    name: NameRef,
    /// Index into [`Namespaces`], or [`NO_NAMESPACE`].
    namespace: u32,
    /// The list generation that last saw this object.
    list_epoch: u32,
}

/// Where a tracked object is stored.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// Position in [`Dedupe::uuids`].
    Dense(usize),
    /// In [`Dedupe::others`].
    Other,
}

/// Namespaces, interned: each tracked object holds a 4-byte index. A namespace is dropped when its
/// last object is forgotten.
#[derive(Debug, Default)]
struct Namespaces {
    /// By index; `None` for a free slot.
    names: Vec<Option<Box<str>>>,
    /// Objects holding each index.
    refs: Vec<u32>,
    index: HashMap<Box<str>, u32>,
    free: Vec<u32>,
}

impl Namespaces {
    fn acquire(&mut self, namespace: Option<&str>) -> u32 {
        let Some(namespace) = namespace else {
            return NO_NAMESPACE;
        };
        let id = match self.index.get(namespace) {
            Some(&id) => id,
            None => {
                let id = match self.free.pop() {
                    Some(id) => {
                        self.names[id as usize] = Some(namespace.into());
                        id
                    }
                    None => {
                        self.names.push(Some(namespace.into()));
                        self.refs.push(0);
                        u32::try_from(self.names.len() - 1)
                            .expect("fewer than 4 billion namespaces")
                    }
                };
                self.index.insert(namespace.into(), id);
                id
            }
        };
        self.refs[id as usize] += 1;
        id
    }

    fn release(&mut self, id: u32) {
        if id == NO_NAMESPACE {
            return;
        }
        let refs = &mut self.refs[id as usize];
        *refs -= 1;
        if *refs == 0 {
            if let Some(name) = self.names[id as usize].take() {
                self.index.remove(&name);
            }
            self.free.push(id);
        }
    }

    fn get(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize)?.as_deref()
    }
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
pub const MAX_SIZED_AHEAD: u64 = 4 << 20;

/// How many deleted uids each watch target remembers. A replay reaches back a few events (a
/// lagging API server, a proxy re-sending its buffer), so recent deletions are what matters; the
/// bound keeps a deletion-heavy target from growing the state (~40 bytes each).
const TOMBSTONES: usize = 1024;

/// The uids of the most recently deleted objects. Kubernetes never reuses a uid, so once an
/// object's deletion is published nothing more about it is news: a replayed DELETED is a
/// duplicate, a replayed ADDED or MODIFIED is stale.
#[derive(Debug, Default)]
struct Tombstones {
    uids: FxHashSet<UidKey>,
    /// Oldest first, for eviction.
    order: VecDeque<UidKey>,
}

impl Tombstones {
    fn insert(&mut self, key: UidKey) {
        if !self.uids.insert(key.clone()) {
            return;
        }
        self.order.push_back(key);
        if self.order.len() > TOMBSTONES {
            if let Some(oldest) = self.order.pop_front() {
                self.uids.remove(&oldest);
            }
        }
    }

    fn contains(&self, key: &UidKey) -> bool {
        self.uids.contains(key)
    }
}

impl Dedupe {
    pub fn new() -> Dedupe {
        Dedupe::default()
    }

    /// Whether an object with this uid is tracked: if not, publishing it makes it known, and its
    /// deletion must be announced even after a crash.
    pub fn tracks(&self, uid: &str) -> bool {
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
    pub fn observe_tracked(
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
    pub fn begin_list(&mut self) {
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
    pub fn superseded(&mut self, meta: &ObjectMeta) -> Option<Vanished> {
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
        self.forget(key);
        self.tombstones.insert(key.clone());
        Some(Vanished { meta })
    }

    /// Compares one listed object with the state, and records it; `mark` as for
    /// [`observe`](Self::observe).
    pub fn listed(&mut self, meta: &ObjectMeta, mark: u64) -> Listed {
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
    pub fn end_list(&mut self) -> Vec<Vanished> {
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

// ---------------------------------------------------------------------------------------------
// Saving and restoring: how the durable state (`crate::state`) reads and refills this memory.
// ---------------------------------------------------------------------------------------------

/// One tracked object as the durable state stores it, borrowed from the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedObject<'a> {
    pub uid: SavedUid<'a>,
    pub version: SavedVersion<'a>,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    /// Known only from the journal: see [`Listed::Unconfirmed`].
    pub unconfirmed: bool,
    /// What `changes` compares; 0 = nothing.
    pub mark: u64,
}

impl<'a> SavedObject<'a> {
    /// The object as received: what the journal records before its first message goes out.
    pub fn of(meta: &'a ObjectMeta) -> SavedObject<'a> {
        let uid = parse_uuid(&meta.uid).map_or(SavedUid::Text(&meta.uid), SavedUid::Uuid);
        let version = match Version::new(&meta.resource_version) {
            Version::Number(n) => SavedVersion::Number(n),
            Version::Opaque(_) => SavedVersion::Text(meta.resource_version.as_str()),
        };
        SavedObject {
            uid,
            version,
            name: &meta.name,
            namespace: meta.namespace.as_deref(),
            unconfirmed: false,
            mark: 0,
        }
    }
}

/// What a snapshot holds: tracked objects, and the uids of recently deleted ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved<'a> {
    Object(SavedObject<'a>),
    Tombstone(SavedUid<'a>),
}

/// A uid: the 16 bytes of a canonical UUID, or the text of any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedUid<'a> {
    Uuid([u8; 16]),
    Text(&'a str),
}

/// A resourceVersion: an integer where it is one, the text otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedVersion<'a> {
    Number(u64),
    Text(&'a str),
}

impl Dedupe {
    /// Calls `f` with every tracked object, in no particular order, then with every tombstone,
    /// oldest first.
    pub fn for_each_saved(&self, f: impl FnMut(Saved<'_>)) {
        self.freeze().for_each(f);
    }

    /// The state as it is now, for a checkpoint to encode while the state moves on: it shares
    /// the storage, and a part changed meanwhile is copied first (see [`store`]).
    pub fn freeze(&self) -> Frozen {
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
            tombstones: self.tombstones.order.iter().cloned().collect(),
            objects: self.len(),
            next: 0,
        }
    }

    /// Refills the memory with one saved entry: of a snapshot, or of a journal record (then
    /// `unconfirmed`: the object's first message or its deletion may not have gone out). A
    /// journaled version older than the one tracked is ignored.
    pub fn restore_saved(&mut self, saved: Saved<'_>, unconfirmed: bool) {
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
                    self.unconfirmed.insert(key);
                }
                self.restore(object);
            }
            Saved::Tombstone(uid) => self.tombstones.insert(saved_key(uid)),
        }
    }

    /// Tracked objects whose first message may not have been published.
    pub fn unconfirmed(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Deleted uids remembered.
    pub fn tombstones(&self) -> usize {
        self.tombstones.order.len()
    }

    /// Tracks a saved object again, as published at its saved version.
    pub fn restore(&mut self, saved: SavedObject<'_>) {
        let key = saved_key(saved.uid);
        let version = match saved.version {
            SavedVersion::Number(n) if n != OPAQUE => Version::Number(n),
            SavedVersion::Number(n) => Version::Opaque(n.to_string().into()),
            SavedVersion::Text(text) => Version::new(&ResourceVersion::new(text)),
        };
        let named = Named {
            name: saved.name,
            namespace: saved.namespace,
        };
        let place = self.locate(&key);
        self.track(key, place, version, named, saved.mark);
    }
}

/// A [`Dedupe`] as it was at [`Dedupe::freeze`], read part by part by a checkpoint: each part
/// read is released, so a change to its objects no longer copies them.
#[derive(Debug)]
pub struct Frozen {
    entries: Vec<Option<Arc<Vec<Entry>>>>,
    marks: Option<Vec<Option<Arc<Vec<u64>>>>>,
    names: Vec<Arc<Vec<u8>>>,
    namespaces: Vec<Option<Box<str>>>,
    others: Vec<(Box<str>, Tracked)>,
    opaque_versions: HashMap<UidKey, Box<str>>,
    unconfirmed: FxHashSet<UidKey>,
    tombstones: Vec<UidKey>,
    objects: usize,
    /// The next part: a chunk of the dense entries, then the rest.
    next: usize,
}

impl Frozen {
    /// Objects tracked at the freeze.
    pub fn objects(&self) -> usize {
        self.objects
    }

    /// Calls `f` with every object and tombstone, as [`Dedupe::for_each_saved`].
    pub fn for_each(mut self, mut f: impl FnMut(Saved<'_>)) {
        while self.next_part(&mut f) {}
    }

    /// Calls `f` with the objects of the next part (a few thousand; after the last part the
    /// tombstones, oldest first) and releases the part; false when nothing was left.
    pub fn next_part(&mut self, mut f: impl FnMut(Saved<'_>)) -> bool {
        let part = self.next;
        self.next += 1;
        if let Some(slot) = self.entries.get_mut(part) {
            let entries = slot.take();
            let marks = self
                .marks
                .as_mut()
                .and_then(|marks| marks.get_mut(part).and_then(Option::take));
            for (k, entry) in entries.iter().flat_map(|e| e.iter()).enumerate() {
                let mark = marks.as_ref().map_or(0, |m| m[k]);
                let key = UidKey::Uuid(entry.uid);
                f(Saved::Object(SavedObject {
                    uid: SavedUid::Uuid(entry.uid),
                    ..self.saved(&key, entry.version(), entry.name, entry.namespace, mark)
                }));
            }
            return true;
        }
        if part > self.entries.len() {
            return false;
        }
        for (uid, t) in &self.others {
            // Opaque versions and unconfirmed marks are looked up by key; only objects that
            // may hold one need it built.
            let key = if t.version == OPAQUE || !self.unconfirmed.is_empty() {
                UidKey::Other(uid.clone())
            } else {
                UidKey::Uuid([0; 16])
            };
            f(Saved::Object(SavedObject {
                uid: SavedUid::Text(uid),
                ..self.saved(&key, t.version, t.name, t.namespace, t.mark)
            }));
        }
        for key in &self.tombstones {
            f(Saved::Tombstone(match key {
                UidKey::Uuid(bytes) => SavedUid::Uuid(*bytes),
                UidKey::Other(text) => SavedUid::Text(text),
            }));
        }
        true
    }

    fn saved(
        &self,
        key: &UidKey,
        version: u64,
        name: NameRef,
        namespace: u32,
        mark: u64,
    ) -> SavedObject<'_> {
        let version = match version {
            OPAQUE => SavedVersion::Text(self.opaque_versions.get(key).map_or("", |v| &**v)),
            n => SavedVersion::Number(n),
        };
        SavedObject {
            uid: SavedUid::Text(""),
            version,
            name: store::get(&self.names, name),
            namespace: self
                .namespaces
                .get(namespace as usize)
                .and_then(Option::as_deref),
            unconfirmed: !self.unconfirmed.is_empty() && self.unconfirmed.contains(key),
            mark,
        }
    }
}
fn saved_key(uid: SavedUid<'_>) -> UidKey {
    match uid {
        SavedUid::Uuid(bytes) => UidKey::Uuid(bytes),
        SavedUid::Text(text) => UidKey::new(text),
    }
}

/// Parses the canonical `8-4-4-4-12` hex form; anything else is not a UUID here.
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    // Where each byte's two hex digits start (the dashes checked above sit between).
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let mut out = [0u8; 16];
    for (byte, at) in out.iter_mut().zip(AT) {
        *byte = hex_value(b[at])? << 4 | hex_value(b[at + 1])?;
    }
    Some(out)
}

/// Lower-case only: an upper-case UUID would not survive the round trip, so it stays a string.
fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn format_uuid(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
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
mod tests {
    use super::*;

    fn meta(uid: &str, rv: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            uid: uid.into(),
            resource_version: ResourceVersion::new(rv),
            name: name.into(),
            namespace: Some("default".into()),
            generation: None,
        }
    }

    const A: &str = "0b8e6c3a-1f2d-4e5f-9a0b-1c2d3e4f5a6b";
    const B: &str = "not-a-uuid";

    /// `observe_tracked` says whether the object was tracked before, as `tracks` did, for
    /// UUIDs and other uids, through additions, modifications, deletions and their repeats.
    #[test]
    fn observe_tracked_reports_what_tracks_said_before() {
        let mut d = Dedupe::new();
        let steps = [
            (A, "1", EventType::Added),
            (A, "2", EventType::Modified),
            (B, "3", EventType::Modified),
            (A, "2", EventType::Modified),
            (A, "4", EventType::Deleted),
            (A, "5", EventType::Added),
            (B, "6", EventType::Deleted),
            (B, "6", EventType::Deleted),
        ];
        for (uid, rv, event_type) in steps {
            let before = d.tracks(uid);
            let m = meta(uid, rv, "web");
            let (verdict, tracked) = d.observe_tracked(&m, event_type, 0);
            assert_eq!(tracked, before, "{uid} {rv} {event_type}: {verdict:?}");
        }
        assert!(!d.tracks(A) && !d.tracks(B));
    }

    /// A relist that finds a tracked name under a new uid: the old uid is returned (to be
    /// announced first) and forgotten, so the end of the list does not announce it again; a
    /// name under its own uid, and a name never seen, supersede nothing.
    #[test]
    fn a_recreated_name_supersedes_the_old_uid_during_a_list() {
        let mut d = Dedupe::new();
        d.observe(&meta(A, "5", "web"), EventType::Added, 0);
        d.observe(&meta(B, "6", "db"), EventType::Added, 0);
        d.begin_list();
        let new_web = meta("1b8e6c3a-1f2d-4e5f-9a0b-1c2d3e4f5a6b", "9", "web");
        let gone = d.superseded(&new_web).expect("web's old uid");
        assert_eq!(gone.meta.uid, A);
        assert_eq!(gone.meta.resource_version.as_str(), "5");
        assert_eq!(d.listed(&new_web, 0), Listed::New);
        assert_eq!(d.superseded(&meta(B, "6", "db")), None);
        assert_eq!(d.listed(&meta(B, "6", "db"), 0), Listed::Unchanged);
        assert_eq!(d.superseded(&meta("other", "7", "new")), None);
        assert!(d.end_list().is_empty(), "nothing vanished twice");
        assert_eq!(d.len(), 2);
    }

    /// Under `changes = generation | content`: a MODIFIED with the published mark is not news,
    /// but its version is recorded (a replay of it is a duplicate; a relist at that version or a
    /// later one with the same mark announces nothing); ADDED and DELETED are always news; mark
    /// 0 compares with nothing.
    #[test]
    fn a_modified_with_the_published_mark_is_unchanged() {
        let mut d = Dedupe::new();
        assert_eq!(
            d.observe(&meta(A, "1", "a"), EventType::Added, 7),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(A, "2", "a"), EventType::Modified, 7),
            Verdict::Unchanged
        );
        assert_eq!(
            d.observe(&meta(A, "2", "a"), EventType::Modified, 7),
            Verdict::Duplicate
        );
        assert_eq!(
            d.observe(&meta(A, "1", "a"), EventType::Modified, 9),
            Verdict::Stale
        );
        assert_eq!(
            d.observe(&meta(A, "3", "a"), EventType::Modified, 8),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(A, "4", "a"), EventType::Modified, 8),
            Verdict::Unchanged
        );
        assert_eq!(
            d.observe(&meta(A, "5", "a"), EventType::Modified, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(A, "6", "a"), EventType::Modified, 0),
            Verdict::Publish
        );
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "6", "a"), 0), Listed::Unchanged);
        assert!(d.end_list().is_empty());
        assert_eq!(
            d.observe(&meta(A, "7", "a"), EventType::Modified, 5),
            Verdict::Publish
        );
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "9", "a"), 5), Listed::SameMark);
        assert!(d.end_list().is_empty());
        assert_eq!(
            d.observe(&meta(A, "9", "a"), EventType::Modified, 5),
            Verdict::Duplicate
        );
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "10", "a"), 6), Listed::Changed);
        d.end_list();
        assert_eq!(
            d.observe(&meta(A, "11", "a"), EventType::Deleted, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "1", "b"), EventType::Added, 1),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "2", "b"), EventType::Added, 1),
            Verdict::Publish
        );
    }

    #[test]
    fn marks_survive_save_and_restore() {
        let mut d = Dedupe::new();
        d.observe(&meta(A, "1", "a"), EventType::Added, 42);
        d.observe(&meta(B, "1", "b"), EventType::Added, 0);
        let mut restored = Dedupe::new();
        d.for_each_saved(|o| restored.restore_saved(o, false));
        assert_eq!(
            restored.observe(&meta(A, "2", "a"), EventType::Modified, 42),
            Verdict::Unchanged
        );
        assert_eq!(
            restored.observe(&meta(B, "2", "b"), EventType::Modified, 0),
            Verdict::Publish
        );
    }

    #[test]
    fn uuid_round_trip() {
        assert_eq!(format_uuid(&parse_uuid(A).unwrap()), A);
        assert_eq!(parse_uuid("0B8E6C3A-1F2D-4E5F-9A0B-1C2D3E4F5A6B"), None);
    }

    /// The hex digits in the order they appear, dashes skipped: what `parse_uuid` must read.
    fn parse_uuid_reference(s: &str) -> Option<[u8; 16]> {
        let b = s.as_bytes();
        if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
            return None;
        }
        let mut out = [0u8; 16];
        let mut hex = b.iter().filter(|&&c| c != b'-');
        for byte in &mut out {
            *byte = hex_value(*hex.next()?)? << 4 | hex_value(*hex.next()?)?;
        }
        Some(out)
    }

    proptest::proptest! {
        /// UUID-shaped strings, some with a character changed (upper case, a dash, a space, a
        /// multi-byte character): read as the reference reads them.
        #[test]
        fn parse_uuid_agrees_with_the_reference(
            digits in proptest::collection::vec(proptest::sample::select(b"0123456789abcdef".to_vec()), 32),
            edit in proptest::option::of((0usize..36, proptest::sample::select(vec!["A", "-", " ", "g", "é", "0"]))),
        ) {
            let mut s = String::new();
            for (i, d) in digits.iter().enumerate() {
                if matches!(i, 8 | 12 | 16 | 20) {
                    s.push('-');
                }
                s.push(char::from(*d));
            }
            if let Some((at, with)) = edit {
                s.replace_range(at..at + 1, with);
            }
            proptest::prop_assert_eq!(parse_uuid(&s), parse_uuid_reference(&s), "{}", s);
        }
    }

    #[test]
    fn repeats_and_older_versions_are_dropped() {
        let mut d = Dedupe::new();
        assert_eq!(
            d.observe(&meta(A, "10", "a"), EventType::Added, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(A, "10", "a"), EventType::Added, 0),
            Verdict::Duplicate
        );
        assert_eq!(
            d.observe(&meta(A, "12", "a"), EventType::Modified, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(A, "11", "a"), EventType::Modified, 0),
            Verdict::Stale
        );
        assert_eq!(
            d.observe(&meta(A, "13", "a"), EventType::Deleted, 0),
            Verdict::Publish
        );
        assert!(d.is_empty());
    }

    #[test]
    fn events_of_a_deleted_object_replayed_are_dropped() {
        let mut d = Dedupe::new();
        d.observe(&meta(A, "10", "a"), EventType::Added, 0);
        d.observe(&meta(A, "11", "a"), EventType::Deleted, 0);
        assert_eq!(
            d.observe(&meta(A, "10", "a"), EventType::Added, 0),
            Verdict::Stale
        );
        assert_eq!(
            d.observe(&meta(A, "11", "a"), EventType::Deleted, 0),
            Verdict::Duplicate
        );
        assert!(d.is_empty(), "a replay does not bring the object back");
        // Vanished in a relist: its real DELETED, replayed later, is not news either.
        d.observe(&meta(B, "20", "b"), EventType::Added, 0);
        d.begin_list();
        assert_eq!(d.end_list().len(), 1);
        assert_eq!(
            d.observe(&meta(B, "25", "b"), EventType::Deleted, 0),
            Verdict::Duplicate
        );
    }

    #[test]
    fn tombstones_are_bounded() {
        let mut d = Dedupe::new();
        let uid = |i: usize| format!("{i:08x}-0000-4000-8000-000000000000");
        for i in 0..TOMBSTONES + 10 {
            d.observe(&meta(&uid(i), "1", "x"), EventType::Deleted, 0);
        }
        assert_eq!(d.tombstones.order.len(), TOMBSTONES);
        assert_eq!(d.tombstones.uids.len(), TOMBSTONES);
        assert_eq!(
            d.observe(&meta(&uid(0), "1", "x"), EventType::Deleted, 0),
            Verdict::Publish,
            "the oldest is forgotten"
        );
    }

    #[test]
    fn opaque_versions_compare_for_equality_only() {
        let mut d = Dedupe::new();
        assert_eq!(
            d.observe(&meta(B, "abc", "b"), EventType::Added, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "abc", "b"), EventType::Modified, 0),
            Verdict::Duplicate
        );
        assert_eq!(
            d.observe(&meta(B, "abb", "b"), EventType::Modified, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "0042", "b"), EventType::Modified, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "0042", "b"), EventType::Modified, 0),
            Verdict::Duplicate
        );
    }

    #[test]
    fn relist_diff_added_changed_unchanged_vanished() {
        let mut d = Dedupe::new();
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "5", "a"), 0), Listed::New);
        assert_eq!(
            d.listed(
                &meta("11111111-2222-3333-4444-555555555555", "6", "gone"),
                0
            ),
            Listed::New
        );
        assert_eq!(d.listed(&meta(B, "7", "same"), 0), Listed::New);
        assert!(d.end_list().is_empty());

        d.begin_list();
        assert_eq!(d.listed(&meta(A, "9", "a"), 0), Listed::Changed);
        assert_eq!(d.listed(&meta(B, "7", "same"), 0), Listed::Unchanged);
        assert_eq!(
            d.listed(&meta("99999999-2222-3333-4444-555555555555", "8", "new"), 0),
            Listed::New
        );
        let vanished = d.end_list();
        assert_eq!(
            vanished,
            vec![Vanished {
                meta: meta("11111111-2222-3333-4444-555555555555", "6", "gone")
            }]
        );
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn a_relist_of_many_objects_sized_ahead_finds_exactly_the_unlisted_ones_while_names_recur() {
        // Hundreds of objects span several words of the list's seen bits; recreations (same
        // name, new uid) remove objects during the list, moving the last into the hole.
        let mut d = Dedupe::new();
        d.size_for(300);
        let name = |i: u64| format!("pod-{i}");
        for i in 0..300 {
            d.observe(&meta(&uuid_of(i), "5", &name(i)), EventType::Added, 0);
        }
        d.begin_list();
        d.size_for(u64::MAX);
        let mut expected_gone = Vec::new();
        for i in 0..300u64 {
            match i % 5 {
                // Not listed: vanished at the end.
                0 => expected_gone.push(name(i)),
                // Recreated under a new uid: announced at once, the new uid is new.
                1 => {
                    let recreated = meta(&uuid_of(1000 + i), "9", &name(i));
                    let gone = d.superseded(&recreated).expect("the old uid held the name");
                    assert_eq!(gone.meta.uid, uuid_of(i));
                    assert_eq!(d.listed(&recreated, 0), Listed::New);
                }
                _ => assert_eq!(
                    d.listed(&meta(&uuid_of(i), "5", &name(i)), 0),
                    Listed::Unchanged
                ),
            }
        }
        let mut gone: Vec<String> = d.end_list().into_iter().map(|v| v.meta.name).collect();
        gone.sort();
        expected_gone.sort();
        assert_eq!(gone, expected_gone);
        assert_eq!(d.len(), 240);
        assert!(
            d.end_list().is_empty(),
            "no list under way: nothing vanishes"
        );
    }

    #[test]
    fn relist_from_a_lagging_server_is_stale_not_a_change() {
        let mut d = Dedupe::new();
        d.observe(&meta(A, "20", "a"), EventType::Added, 0);
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "15", "a"), 0), Listed::Stale);
        assert!(
            d.end_list().is_empty(),
            "a stale listing still proves the object exists"
        );
        assert_eq!(
            d.observe(&meta(A, "20", "a"), EventType::Modified, 0),
            Verdict::Duplicate
        );
    }

    #[test]
    fn deleted_and_recreated_name_is_two_objects() {
        let mut d = Dedupe::new();
        d.begin_list();
        d.listed(&meta(A, "5", "web"), 0);
        d.end_list();
        d.begin_list();
        let new_uid = "22222222-2222-3333-4444-555555555555";
        assert_eq!(d.listed(&meta(new_uid, "9", "web"), 0), Listed::New);
        let vanished = d.end_list();
        assert_eq!(vanished.len(), 1);
        assert_eq!(vanished[0].meta.uid, A);
        assert_eq!(vanished[0].meta.name, "web");
    }

    fn uuid_of(i: u64) -> String {
        format!("{:08x}-0000-4000-8000-{:012x}", i >> 16, i)
    }

    #[test]
    fn names_survive_compaction_and_namespaces_are_released() {
        let mut d = Dedupe::new();
        d.begin_list();
        for i in 0..20_000 {
            let mut m = meta(&uuid_of(i), "5", &format!("pod-with-a-longish-name-{i}"));
            m.namespace = Some(format!("ns-{}", i % 3));
            d.listed(&m, 0);
        }
        d.end_list();
        // Delete most of them: the names' text is compacted on the way.
        for i in 0..19_000 {
            let m = meta(&uuid_of(i), "6", "ignored");
            assert_eq!(d.observe(&m, EventType::Deleted, 0), Verdict::Publish);
        }
        assert!(d.names.bytes() < 100_000, "{}", d.names.bytes());
        d.begin_list();
        let vanished = d.end_list();
        assert_eq!(vanished.len(), 1000);
        assert_eq!(vanished[0].meta.namespace.as_deref(), Some("ns-0"));
        assert!(vanished
            .iter()
            .all(|v| v.meta.name.starts_with("pod-with-a-longish-name-")));
        let mut names: Vec<_> = vanished.iter().map(|v| v.meta.name.clone()).collect();
        names.dedup();
        assert_eq!(names.len(), 1000);
        assert!(d.is_empty());
        assert!(d.namespaces.index.is_empty());
    }

    #[test]
    fn opaque_and_numeric_versions_round_trip_through_a_relist() {
        let mut d = Dedupe::new();
        d.observe(&meta(A, "abc", "a"), EventType::Added, 0);
        d.observe(&meta(B, "18446744073709551615", "b"), EventType::Added, 0);
        d.observe(&meta("c", "17", "c"), EventType::Added, 0);
        d.begin_list();
        let mut vanished: Vec<_> = d.end_list().into_iter().map(|v| v.meta).collect();
        vanished.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(
            vanished,
            vec![
                meta(A, "abc", "a"),
                meta(B, "18446744073709551615", "b"),
                meta("c", "17", "c")
            ]
        );
        assert!(d.opaque_versions.is_empty());
    }

    #[test]
    fn saved_objects_restore_the_same_memory() {
        let mut d = Dedupe::new();
        d.observe(&meta(A, "abc", "a"), EventType::Added, 0);
        d.observe(&meta(B, "17", "b"), EventType::Added, 0);
        let mut cluster = meta(&uuid_of(3), "18", "c");
        cluster.namespace = None;
        d.observe(&cluster, EventType::Added, 0);
        d.observe(&meta(&uuid_of(4), "19", "gone"), EventType::Added, 0);
        d.observe(&meta(&uuid_of(4), "20", "gone"), EventType::Deleted, 0);
        let mut restored = Dedupe::new();
        d.for_each_saved(|o| restored.restore_saved(o, false));
        assert_eq!(restored.len(), 3);
        assert_eq!(restored.tombstones(), 1);
        assert_eq!(
            restored.observe(&meta(&uuid_of(4), "19", "gone"), EventType::Added, 0),
            Verdict::Stale,
            "a replayed event of an object deleted before the save"
        );
        assert_eq!(
            restored.observe(&meta(A, "abc", "a"), EventType::Modified, 0),
            Verdict::Duplicate
        );
        assert_eq!(
            restored.observe(&meta(B, "16", "b"), EventType::Modified, 0),
            Verdict::Stale
        );
        restored.begin_list();
        let mut vanished: Vec<_> = restored.end_list().into_iter().map(|v| v.meta).collect();
        vanished.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(
            vanished,
            vec![meta(A, "abc", "a"), meta(B, "17", "b"), cluster]
        );
    }

    /// Objects restored from the journal may never have been announced: their next event or
    /// listing is published even at the journaled version, once; their absence from a relist
    /// is a deletion; and the mark survives a save.
    #[test]
    fn journaled_objects_are_published_again_once() {
        let journaled = |d: &mut Dedupe, m: &ObjectMeta| {
            d.restore_saved(Saved::Object(SavedObject::of(m)), true)
        };
        let mut d = Dedupe::new();
        d.observe(&meta(A, "5", "a"), EventType::Added, 0);
        journaled(&mut d, &meta(A, "4", "a"));
        assert_eq!(d.unconfirmed(), 0, "an older journaled version is ignored");
        journaled(&mut d, &meta(B, "7", "b"));
        journaled(&mut d, &meta(&uuid_of(3), "8", "c"));
        journaled(&mut d, &meta(&uuid_of(4), "10", "d"));
        assert_eq!((d.len(), d.unconfirmed()), (4, 3));

        let mut saved = Dedupe::new();
        d.for_each_saved(|o| saved.restore_saved(o, false));
        assert_eq!(saved.unconfirmed(), 3, "the mark is saved");

        assert_eq!(
            d.observe(&meta(B, "7", "b"), EventType::Added, 0),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "7", "b"), EventType::Added, 0),
            Verdict::Duplicate
        );
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "5", "a"), 0), Listed::Unchanged);
        assert_eq!(d.listed(&meta(B, "7", "b"), 0), Listed::Unchanged);
        assert_eq!(
            d.listed(&meta(&uuid_of(3), "8", "c"), 0),
            Listed::Unconfirmed
        );
        let vanished: Vec<_> = d.end_list().into_iter().map(|v| v.meta).collect();
        assert_eq!(vanished, vec![meta(&uuid_of(4), "10", "d")]);
        assert_eq!(d.unconfirmed(), 0);
        d.begin_list();
        assert_eq!(d.listed(&meta(&uuid_of(3), "8", "c"), 0), Listed::Unchanged);
    }
}

/// The state against a plain model (a map of uid to what was published) under random events,
/// relists, checkpoints taken half-way and restores.
#[cfg(test)]
mod model_tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Published {
        version: u64,
        name: String,
        namespace: Option<String>,
        mark: u64,
    }

    type Model = BTreeMap<String, Published>;

    #[derive(Debug, Clone)]
    enum Op {
        Event {
            uid: u8,
            version: u64,
            kind: u8,
            mark: u64,
        },
        /// Objects listed: known ones at a version, new ones under a name, maybe one a
        /// vanished object held.
        Relist(Vec<(u8, u64, u8, u64)>),
        Freeze,
        Restore,
    }

    fn op() -> impl Strategy<Value = Op> {
        let listed = (0u8..60, 1u64..12, 0u8..40, 0u64..3);
        prop_oneof![
            6 => (0u8..60, 1u64..12, 0u8..3, 0u64..3).prop_map(|(uid, version, kind, mark)| {
                Op::Event { uid, version, kind, mark }
            }),
            1 => proptest::collection::vec(listed, 0..50).prop_map(Op::Relist),
            1 => Just(Op::Freeze),
            1 => Just(Op::Restore),
        ]
    }

    fn uid(i: u8) -> String {
        // Some uids are UUIDs (the dense store), some not (the side map).
        if i % 5 == 4 {
            format!("custom-{i}")
        } else {
            format!("{i:08x}-0000-4000-8000-000000000000")
        }
    }

    /// Names of every length: some long, so that forgetting them compacts the names.
    fn name(i: u8) -> String {
        if i % 3 == 0 {
            format!("{}-{i}", "long".repeat(500))
        } else {
            format!("n{i}")
        }
    }

    fn namespace(i: u8) -> Option<String> {
        (i % 4 != 0).then(|| format!("ns{}", i % 4))
    }

    fn meta_of(uid: &str, version: u64, p: &Published) -> ObjectMeta {
        ObjectMeta {
            uid: uid.into(),
            resource_version: ResourceVersion::new(version.to_string()),
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            generation: None,
        }
    }

    fn saved(frozen: Frozen) -> (Model, Vec<String>) {
        let mut objects = Model::new();
        let mut tombstones = Vec::new();
        let text = |uid: SavedUid<'_>| match uid {
            SavedUid::Uuid(bytes) => format_uuid(&bytes),
            SavedUid::Text(text) => text.to_owned(),
        };
        frozen.for_each(|saved| match saved {
            Saved::Object(o) => {
                let SavedVersion::Number(version) = o.version else {
                    panic!("only integer versions here");
                };
                let p = Published {
                    version,
                    name: o.name.to_owned(),
                    namespace: o.namespace.map(str::to_owned),
                    mark: o.mark,
                };
                assert!(objects.insert(text(o.uid), p).is_none(), "saved twice");
            }
            Saved::Tombstone(uid) => tombstones.push(text(uid)),
        });
        (objects, tombstones)
    }

    /// Whether another tracked object holds the name: names are unique at any instant, so
    /// such an event is not generated.
    fn name_taken(model: &Model, uid: &str, p: &Published) -> bool {
        model
            .iter()
            .any(|(u, q)| u != uid && q.name == p.name && q.namespace == p.namespace)
    }

    fn run(ops: Vec<Op>) {
        let mut d = Dedupe::new();
        let mut model = Model::new();
        let mut tombstones: Vec<String> = Vec::new();
        let mut frozen: Vec<(Frozen, Model)> = Vec::new();
        for op in ops {
            match op {
                Op::Event {
                    uid: i,
                    version,
                    kind,
                    mark,
                } => {
                    let u = uid(i);
                    let event_type =
                        [EventType::Added, EventType::Modified, EventType::Deleted][kind as usize];
                    let p = model.get(&u).cloned().unwrap_or(Published {
                        version,
                        name: name(i),
                        namespace: namespace(i),
                        mark,
                    });
                    if name_taken(&model, &u, &p) {
                        continue;
                    }
                    let expected = if tombstones.contains(&u) {
                        if event_type == EventType::Deleted {
                            Verdict::Duplicate
                        } else {
                            Verdict::Stale
                        }
                    } else {
                        match model.get(&u) {
                            Some(t) if version < t.version => Verdict::Stale,
                            Some(t) if event_type != EventType::Deleted && version == t.version => {
                                Verdict::Duplicate
                            }
                            Some(t)
                                if event_type == EventType::Modified
                                    && mark != 0
                                    && mark == t.mark =>
                            {
                                Verdict::Unchanged
                            }
                            _ => Verdict::Publish,
                        }
                    };
                    let got = d.observe(&meta_of(&u, version, &p), event_type, mark);
                    assert_eq!(got, expected, "{event_type:?} {u} at {version}");
                    match (expected, event_type) {
                        (Verdict::Publish, EventType::Deleted) => {
                            model.remove(&u);
                            tombstones.push(u);
                        }
                        (Verdict::Publish | Verdict::Unchanged, _) => {
                            model.insert(u, Published { version, mark, ..p });
                        }
                        _ => {}
                    }
                }
                Op::Relist(items) => {
                    d.begin_list();
                    let mut seen_uids = BTreeSet::new();
                    let mut seen_names = BTreeSet::new();
                    for (i, version, n, mark) in items {
                        let u = uid(i);
                        let p = model.get(&u).cloned().unwrap_or(Published {
                            version,
                            name: name(n),
                            namespace: namespace(n),
                            mark,
                        });
                        if tombstones.contains(&u)
                            || !seen_uids.insert(u.clone())
                            || !seen_names.insert((p.namespace.clone(), p.name.clone()))
                        {
                            continue;
                        }
                        let meta = meta_of(&u, version, &p);
                        let holder = model
                            .iter()
                            .find(|(h, q)| {
                                **h != u && q.name == p.name && q.namespace == p.namespace
                            })
                            .map(|(h, q)| (h.clone(), q.version));
                        let gone = d.superseded(&meta).map(|v| v.meta);
                        assert_eq!(
                            gone.as_ref()
                                .map(|m| (m.uid.clone(), m.resource_version.as_u64())),
                            holder.as_ref().map(|(h, v)| (h.clone(), Some(*v)))
                        );
                        if let Some((h, _)) = holder {
                            model.remove(&h);
                            tombstones.push(h);
                        }
                        let expected = match model.get(&u) {
                            None => Listed::New,
                            Some(t) if t.version == version => Listed::Unchanged,
                            Some(t) if version < t.version => Listed::Stale,
                            Some(t) if mark != 0 && mark == t.mark => Listed::SameMark,
                            Some(_) => Listed::Changed,
                        };
                        assert_eq!(d.listed(&meta, mark), expected, "{u} at {version}");
                        if !matches!(expected, Listed::Unchanged | Listed::Stale) {
                            model.insert(u, Published { version, mark, ..p });
                        }
                    }
                    let mut expected: Vec<(Option<String>, String, String)> = model
                        .iter()
                        .filter(|(u, _)| !seen_uids.contains(*u))
                        .map(|(u, p)| (p.namespace.clone(), p.name.clone(), u.clone()))
                        .collect();
                    expected.sort();
                    let vanished: Vec<_> = d
                        .end_list()
                        .into_iter()
                        .map(|v| (v.meta.namespace, v.meta.name, v.meta.uid))
                        .collect();
                    assert_eq!(vanished, expected);
                    for (_, _, u) in expected {
                        model.remove(&u);
                        tombstones.push(u);
                    }
                }
                Op::Freeze => frozen.push((d.freeze(), model.clone())),
                Op::Restore => {
                    let mut restored = Dedupe::new();
                    d.for_each_saved(|o| restored.restore_saved(o, false));
                    d = restored;
                }
            }
            assert_eq!(d.len(), model.len());
        }
        for (frozen, then) in frozen {
            assert_eq!(
                saved(frozen).0,
                then,
                "a checkpoint sees the state as it was"
            );
        }
        let (now, saved_tombstones) = saved(d.freeze());
        assert_eq!(now, model);
        // A relist's vanished are remembered in no particular order.
        let set = |t: Vec<String>| t.into_iter().collect::<BTreeSet<_>>();
        assert_eq!(set(saved_tombstones), set(tombstones));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn the_state_behaves_as_a_map_of_what_was_published(
            ops in proptest::collection::vec(op(), 1..120)
        ) {
            run(ops);
        }
    }
}
