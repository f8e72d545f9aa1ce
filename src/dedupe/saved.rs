//! The persistence view of the de-duplication memory (`super::Dedupe`): the forms the durable
//! state (`crate::state`) reads ([`Frozen`], part by part, from `Dedupe::freeze`) and refills it
//! with (`Dedupe::restore_saved`).
//!
//! The saved forms borrow from the memory or from the bytes a checkpoint decodes, so neither side
//! copies an object to hand it over.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::keys::{parse_uuid, UidKey, Version, OPAQUE};
use super::store::{self, Entry, NameRef, Tracked};
use crate::event::{ObjectMeta, ResourceVersion};

/// One tracked object as the durable state stores it, borrowed from the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedObject<'a> {
    pub uid: SavedUid<'a>,
    pub version: SavedVersion<'a>,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    /// Known only from the journal: see [`super::Listed::Unconfirmed`].
    pub unconfirmed: bool,
    /// With `unconfirmed`: the journal recorded its deletion, announced at this version (maybe
    /// gone out before a crash); it is announced again the same, see [`super::Vanished::announced`].
    pub deleted: bool,
    /// What `changes` compares; 0 = nothing.
    pub mark: u64,
}

impl<'a> SavedObject<'a> {
    /// The object as received: what the journal records before its first message goes out.
    pub(crate) fn of(meta: &'a ObjectMeta) -> SavedObject<'a> {
        SavedObject {
            uid: SavedUid::of(&meta.uid),
            version: SavedVersion::of_text(meta.resource_version.as_str()),
            name: &meta.name,
            namespace: meta.namespace.as_deref(),
            unconfirmed: false,
            deleted: false,
            mark: 0,
        }
    }
}

/// What a snapshot holds: tracked objects, and the uids of recently deleted ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Saved<'a> {
    Object(SavedObject<'a>),
    Tombstone(SavedUid<'a>),
}

/// A uid: the 16 bytes of a canonical UUID, or the text of any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedUid<'a> {
    Uuid([u8; 16]),
    Text(&'a str),
}

impl<'a> SavedUid<'a> {
    /// The uid as stored: its 16 bytes where it is a canonical UUID.
    pub(crate) fn of(uid: &'a str) -> SavedUid<'a> {
        parse_uuid(uid).map_or(SavedUid::Text(uid), SavedUid::Uuid)
    }
}

/// A resourceVersion: an integer where it is one, the text otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedVersion<'a> {
    Number(u64),
    Text(&'a str),
}

impl SavedVersion<'_> {
    /// The version as the memory holds it.
    pub(super) fn remembered(self) -> Version {
        match self {
            SavedVersion::Number(n) if n != OPAQUE => Version::Number(n),
            SavedVersion::Number(n) => Version::Opaque(n.to_string().into()),
            SavedVersion::Text(text) => Version::new(&ResourceVersion::new(text)),
        }
    }
}

/// A [`Dedupe`] as it was at [`Dedupe::freeze`], read part by part by a checkpoint: each part
/// read is released, so a change to its objects no longer copies them.
#[derive(Debug)]
pub(crate) struct Frozen {
    pub(super) entries: Vec<Option<Arc<Vec<Entry>>>>,
    pub(super) marks: Option<Vec<Option<Arc<Vec<u64>>>>>,
    pub(super) names: Vec<Arc<Vec<u8>>>,
    pub(super) namespaces: Vec<Option<Box<str>>>,
    pub(super) others: Vec<(Box<str>, Tracked)>,
    pub(super) opaque_versions: HashMap<UidKey, Box<str>>,
    pub(super) unconfirmed: FxHashSet<UidKey>,
    pub(super) deletions: FxHashSet<UidKey>,
    pub(super) tombstones: Vec<UidKey>,
    /// The next part: a chunk of the dense entries, then the rest.
    pub(super) next: usize,
}

impl Frozen {
    /// Calls `f` with every object and tombstone, as [`Dedupe::for_each_saved`].
    #[cfg(test)]
    pub(crate) fn for_each(mut self, mut f: impl FnMut(Saved<'_>)) {
        while self.next_part(&mut f) {}
    }

    /// Calls `f` with the objects of the next part (a few thousand; after the last part the
    /// tombstones, oldest first) and releases the part; false when nothing was left.
    pub(crate) fn next_part(&mut self, mut f: impl FnMut(Saved<'_>)) -> bool {
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
            deleted: !self.deletions.is_empty() && self.deletions.contains(key),
            mark,
        }
    }
}

/// The key a saved uid is tracked under.
pub(super) fn saved_key(uid: SavedUid<'_>) -> UidKey {
    match uid {
        SavedUid::Uuid(bytes) => UidKey::Uuid(bytes),
        SavedUid::Text(text) => UidKey::new(text),
    }
}
