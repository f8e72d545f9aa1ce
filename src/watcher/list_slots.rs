//! How many watch targets list at once.
//!
//! A list holds a page of objects (the response body, then the objects cut from it) from the
//! moment it is read until each object is published. Lists that all start together, as they do
//! at start-up or when a relist hits every target after an API server restart, hold a page each:
//! a watch over hundreds of namespaces would need hundreds of pages at once, so memory would grow
//! with the number of targets instead of with the objects tracked. So a target lists only while
//! it holds one of a few slots (`kubernetes.max_concurrent_lists`): taken before its first page,
//! given back once the list is complete, or when it fails and backs off (a target that cannot
//! list, e.g. refused by RBAC, must not keep the others waiting). Watches need no slot: an open
//! watch holds a line at a time, under the byte budget ([`crate::budget`]).
//!
//! Every target still lists; a waiting target reports itself not synced, so readiness waits for
//! the last list to complete.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots shared by every watch target of the process; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ListSlots(Arc<Semaphore>);

/// One target's right to list; the slot is given back when it is dropped.
#[derive(Debug)]
pub(crate) struct ListSlot {
    _permit: OwnedSemaphorePermit,
}

impl ListSlots {
    /// `slots` lists at once (at least one).
    pub(crate) fn new(slots: usize) -> ListSlots {
        ListSlots(Arc::new(Semaphore::new(
            slots.clamp(1, Semaphore::MAX_PERMITS),
        )))
    }

    /// As many lists at once as there are targets (tests, and tools that run one target alone).
    pub(crate) fn unlimited() -> ListSlots {
        ListSlots::new(Semaphore::MAX_PERMITS)
    }

    /// Waits for a free slot. Waiters are served in the order they asked.
    pub(crate) async fn take(&self) -> ListSlot {
        let permit = self.0.clone().acquire_owned().await;
        ListSlot {
            _permit: permit.expect("list slots are never closed"),
        }
    }

    /// Slots not taken now: what the tests of the slots and of the machine check.
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.0.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slot_is_given_back_when_dropped_to_the_first_waiter() {
        let slots = ListSlots::new(1);
        let held = slots.take().await;
        assert_eq!(slots.free(), 0);
        let first = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take().await }
        });
        tokio::task::yield_now().await;
        assert!(!first.is_finished(), "no slot while the only one is held");
        drop(held);
        let slot = first.await.unwrap();
        assert_eq!(slots.free(), 0);
        drop(slot);
        assert_eq!(slots.free(), 1);
    }

    #[test]
    fn at_least_one_slot() {
        assert_eq!(ListSlots::new(0).free(), 1);
        assert!(ListSlots::unlimited().free() > 1_000_000);
    }
}
