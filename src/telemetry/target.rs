//! One watch target's share of its watch's gauges.
//!
//! A watch with several namespaces runs one target (list+watch loop) per namespace, and its
//! gauges (`watch_synced`, `tracked_objects`, `publish_queue_depth`) describe all of them: each is
//! a sum (or, for `watch_synced`, an "all") over the targets. So a target never sets a watch-level
//! gauge: it reports its own value here, which moves the gauge by the difference. And a target
//! whose task dies withdraws its share ([`TargetGauges::withdraw`]), so a restarted task does not
//! count its objects twice and readiness sees it as not synced until it has listed again.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use prometheus::IntGauge;

use super::metrics::WatchSync;

/// Cheap to clone; the clones share one target's share.
#[derive(Clone)]
pub(crate) struct TargetGauges(Arc<Shares>);

struct Shares {
    /// `watch_synced` and readiness.
    sync: WatchSync,
    /// The watch's `tracked_objects`.
    tracked_objects: IntGauge,
    /// The watch's `publish_queue_depth`.
    queue_depth: IntGauge,
    synced: AtomicBool,
    tracked: AtomicI64,
    queued: AtomicI64,
    /// Messages not yet taken by NATS (unacknowledged, unflushed or being sent): with
    /// `held_back`, what a shutdown past its grace period abandons.
    unconfirmed: AtomicI64,
    /// Messages held back until the journal has recorded their objects.
    held_back: AtomicI64,
}

impl TargetGauges {
    /// A target that has not listed yet: not synced, nothing tracked or queued.
    pub(crate) fn new(
        sync: WatchSync,
        tracked_objects: IntGauge,
        queue_depth: IntGauge,
    ) -> TargetGauges {
        TargetGauges(Arc::new(Shares {
            sync,
            tracked_objects,
            queue_depth,
            synced: AtomicBool::new(false),
            tracked: AtomicI64::new(0),
            queued: AtomicI64::new(0),
            unconfirmed: AtomicI64::new(0),
            held_back: AtomicI64::new(0),
        }))
    }

    /// This target completed its list and watches (`true`) or lost its sync (`false`).
    pub(crate) fn set_synced(&self, synced: bool) {
        if self.0.synced.swap(synced, Ordering::SeqCst) != synced {
            self.0.sync.set_target_synced(synced);
        }
    }

    /// Objects this target remembers.
    pub(crate) fn set_tracked(&self, objects: usize) {
        let now = i64::try_from(objects).unwrap_or(i64::MAX);
        let before = self.0.tracked.swap(now, Ordering::SeqCst);
        self.0.tracked_objects.add(now - before);
    }

    /// Messages this target has handed to NATS and not yet seen acknowledged.
    pub(crate) fn set_queued(&self, messages: usize) {
        let now = i64::try_from(messages).unwrap_or(i64::MAX);
        let before = self.0.queued.swap(now, Ordering::SeqCst);
        self.0.queue_depth.add(now - before);
    }

    /// Messages this target holds that NATS has not taken yet.
    pub(crate) fn set_unconfirmed(&self, messages: usize) {
        let now = i64::try_from(messages).unwrap_or(i64::MAX);
        self.0.unconfirmed.store(now, Ordering::SeqCst);
    }

    /// Messages this target holds back until the journal has recorded their objects.
    pub(crate) fn set_held_back(&self, messages: usize) {
        let now = i64::try_from(messages).unwrap_or(i64::MAX);
        self.0.held_back.store(now, Ordering::SeqCst);
    }

    /// What this target last reported as not taken by NATS: in its outbox, or held back for
    /// the journal.
    pub(crate) fn unconfirmed(&self) -> i64 {
        let outbox = self.0.unconfirmed.load(Ordering::SeqCst);
        outbox.saturating_add(self.0.held_back.load(Ordering::SeqCst))
    }

    /// Takes this target's share out of every gauge: its task is gone.
    pub(crate) fn withdraw(&self) {
        self.set_synced(false);
        self.set_tracked(0);
        self.set_queued(0);
        self.set_unconfirmed(0);
        self.set_held_back(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two namespaces of one watch: the gauges are sums, and a withdrawn target leaves only the
    /// other's share.
    #[test]
    fn gauges_sum_over_targets_and_a_withdrawn_target_leaves_its_share() {
        let (tracked, queued) = (
            IntGauge::new("t", "t").unwrap(),
            IntGauge::new("q", "q").unwrap(),
        );
        let sync = WatchSync::new("pods".into(), IntGauge::new("s", "s").unwrap(), 2);
        let target = || TargetGauges::new(sync.clone(), tracked.clone(), queued.clone());
        let (a, b) = (target(), target());
        a.set_queued(3);
        b.set_queued(4);
        a.set_tracked(10);
        b.set_tracked(5);
        a.set_synced(true);
        b.set_synced(true);
        b.set_synced(true);
        assert_eq!(queued.get(), 7);
        assert_eq!(tracked.get(), 15);
        assert!(sync.is_synced());
        a.set_queued(1);
        assert_eq!(queued.get(), 5);
        a.withdraw();
        assert_eq!(queued.get(), 4);
        assert_eq!(tracked.get(), 5);
        assert!(!sync.is_synced());
        a.withdraw();
        a.set_synced(true);
        assert!(sync.is_synced(), "no double count after a second withdraw");
    }

    /// What a shutdown abandons counts the messages held back for the journal with the
    /// outbox's: either alone is lost the same way.
    #[test]
    fn unconfirmed_counts_the_outbox_and_the_messages_held_back() {
        let gauge = |name: &str| IntGauge::new(name, name).unwrap();
        let sync = WatchSync::new("pods".into(), gauge("s"), 1);
        let target = TargetGauges::new(sync, gauge("t"), gauge("q"));
        target.set_unconfirmed(2);
        target.set_held_back(5);
        assert_eq!(target.unconfirmed(), 7);
        target.withdraw();
        assert_eq!(target.unconfirmed(), 0);
    }
}
