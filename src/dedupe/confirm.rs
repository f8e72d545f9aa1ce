//! Confirmations read back from the journal: what the memory knew when a message was settled
//! (docs/durable-state.md, "What a crash can repeat").

use super::keys::number;
use super::{saved_key, Dedupe, Named, Saved, SavedObject, SavedUid, SavedVersion};

impl Dedupe {
    /// A journal record of an object: its first message (or, when `deleted`, its deletion) may
    /// have gone out before the crash, at the version recorded. A deletion is announced again
    /// at that version, whether a replayed event or a relist finds it.
    pub(crate) fn restore_journaled(&mut self, object: SavedObject<'_>, deleted: bool) {
        self.restore_saved(Saved::Object(object), true);
        let key = saved_key(object.uid);
        if !self.is_unconfirmed(&key) {
            return;
        }
        if deleted {
            self.deletions.insert(key);
        } else if !self.deletions.is_empty() {
            self.deletions.remove(&key);
        }
    }

    /// A journal confirmation: the object's message at `version` (its deletion, when `deleted`)
    /// reached NATS before the crash, so a replayed event or a relist must not publish it again.
    /// The object then counts as published at `version` (no longer unconfirmed); a deletion
    /// forgets it and remembers its uid as deleted. A confirmation older than what the memory
    /// holds changes nothing (a later record or the checkpoint knows better). The object's
    /// `changes` mark is reset (nothing to compare): the next change of it is published.
    pub(crate) fn confirm_saved(
        &mut self,
        uid: SavedUid<'_>,
        version: SavedVersion<'_>,
        deleted: bool,
    ) {
        let key = saved_key(uid);
        let confirmed = version.remembered();
        let place = self.locate(&key);
        let Some((_, tracked)) = place else {
            // A deletion of an object never tracked (its first message was the deletion).
            if deleted {
                self.tombstones.insert(key);
            }
            return;
        };
        if confirmed.older_than(&self.stored_version(&key, tracked)) {
            return;
        }
        if deleted {
            self.forget(&key);
            self.tombstones.insert(key);
            return;
        }
        if !self.unconfirmed.is_empty() {
            self.unconfirmed.remove(&key);
        }
        if !self.deletions.is_empty() {
            self.deletions.remove(&key);
        }
        let name = self.names.get(tracked.name).to_owned();
        let namespace = self.namespaces.get(tracked.namespace).map(str::to_owned);
        let named = Named {
            name: &name,
            namespace: namespace.as_deref(),
        };
        self.track(key, place, confirmed, named, 0);
    }
}

impl<'a> SavedVersion<'a> {
    /// A resourceVersion as the memory holds it: an integer where it is one, else its text.
    pub(crate) fn of_text(text: &'a str) -> SavedVersion<'a> {
        number(text).map_or(SavedVersion::Text(text), SavedVersion::Number)
    }

    /// The resourceVersion's text.
    pub(crate) fn to_text(self) -> String {
        match self {
            SavedVersion::Number(n) => n.to_string(),
            SavedVersion::Text(text) => text.to_owned(),
        }
    }
}
