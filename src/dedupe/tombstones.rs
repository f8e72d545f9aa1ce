//! The uids of recently deleted objects, so a replayed event about one is recognised.

use std::collections::VecDeque;

use rustc_hash::FxHashSet;

use super::keys::UidKey;

/// How many deleted uids each watch target remembers. A replay reaches back a few events (a
/// lagging API server, a proxy re-sending its buffer), so recent deletions are what matters; the
/// bound keeps a deletion-heavy target from growing the state (~40 bytes each).
pub(super) const TOMBSTONES: usize = 1024;

/// The uids of the most recently deleted objects. Kubernetes never reuses a uid, so once an
/// object's deletion is published nothing more about it is news: a replayed DELETED is a
/// duplicate, a replayed ADDED or MODIFIED is stale.
#[derive(Debug, Default)]
pub(super) struct Tombstones {
    pub(super) uids: FxHashSet<UidKey>,
    /// Oldest first, for eviction.
    pub(super) order: VecDeque<UidKey>,
}

impl Tombstones {
    pub(super) fn insert(&mut self, key: UidKey) {
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

    pub(super) fn contains(&self, key: &UidKey) -> bool {
        self.uids.contains(key)
    }
}
