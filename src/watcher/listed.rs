//! A list, as the watch task diffs it against its memory: each listed object published as new
//! or changed (or only mirrored), and the objects the list did not show announced as deleted.

use super::outlet::Outgoing;
use super::outlet::Publication::{Confirmed, MirrorOnly};
use super::{Filtered, ListDiff, ListReason, WatchTask};
use crate::config::InitialState;
use crate::dedupe::{Listed, Vanished};
use crate::event::{EventType, ObjectEvent, ResourceVersion};
use crate::publish::message::Synthesis;
use crate::state::Presence;

impl WatchTask {
    pub(super) fn list_started(&mut self, reason: ListReason, size_hint: Option<u64>) {
        self.diff = ListDiff::default();
        self.dedupe.begin_list();
        if let Some(items) = size_hint {
            self.dedupe.size_for(items);
        }
        self.metrics.relist(reason.as_str());
        self.gauges.set_synced(false);
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), reason = reason.as_str(), "listing");
    }

    /// Diffs one listed object against the memory; `true` if the memory changed.
    pub(super) async fn listed(&mut self, item: ObjectEvent) -> bool {
        let mut item = match self.filter.is_some() {
            true => match self.filter_listed(item).await {
                Filtered::Pass(item) => item,
                Filtered::Handled(changed) => return changed,
            },
            false => item,
        };
        // Per-name order: a name deleted and recreated during a gap is DELETED (old uid) first.
        // (The new uid is then `Listed::New`, so the memory change is reported below.)
        if let Some(gone) = self.dedupe.superseded(&item.meta) {
            self.diff.deleted += 1;
            // The old uid was gone before the new one was made.
            let by = item.meta.resource_version.clone();
            self.publish_vanished(gone, &by, Synthesis::Relist).await;
        }
        let mark = self.noise.mark(&item);
        let changed = match self.dedupe.listed(&item.meta, mark) {
            Listed::New if !self.listed_once && self.initial_state == InitialState::Skip => {
                self.outlet.hand(Outgoing::listed(item), MirrorOnly).await;
                true
            }
            Listed::New => {
                self.diff.added += 1;
                let recorded = self.outlet.delivery.record(&item.meta, Presence::Present);
                let publication = Confirmed { recorded };
                self.outlet.hand(Outgoing::listed(item), publication).await;
                true
            }
            Listed::Unconfirmed => {
                self.diff.added += 1;
                let publication = Confirmed { recorded: None };
                self.outlet.hand(Outgoing::listed(item), publication).await;
                true
            }
            Listed::Changed => {
                self.diff.modified += 1;
                item.event_type = EventType::Modified;
                let publication = Confirmed { recorded: None };
                self.outlet.hand(Outgoing::listed(item), publication).await;
                true
            }
            // The mirror is written for every listed object: the writer skips the keys that
            // hold it already (or a newer version), and deletes the keys no listed object has.
            Listed::Unchanged => {
                self.outlet.hand(Outgoing::listed(item), MirrorOnly).await;
                false
            }
            Listed::SameMark => {
                self.metrics.dropped_unchanged.inc();
                self.outlet.hand(Outgoing::listed(item), MirrorOnly).await;
                true
            }
            Listed::Stale => {
                self.metrics.dropped_stale.inc();
                self.outlet.hand(Outgoing::listed(item), MirrorOnly).await;
                false
            }
        };
        self.report_tracked();
        changed
    }

    pub(super) async fn list_complete(&mut self, rv: &ResourceVersion) {
        let vanished = self.dedupe.end_list();
        self.diff.deleted += vanished.len();
        for gone in vanished {
            self.publish_vanished(gone, rv, Synthesis::Relist).await;
        }
        if let Some(mirror) = self.outlet.delivery.mirror() {
            mirror.repair_end(rv.clone()).await;
        }
        self.report_tracked();
        self.metrics.touch();
        self.listed_once = true;
        self.gauges.set_synced(true);
        if let Some(saved) = self.resuming.take() {
            let ListDiff {
                added,
                modified,
                deleted,
            } = self.diff;
            tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %rv, saved_objects = saved, added, modified, deleted, "relisted and diffed against the saved objects");
        }
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %rv, objects = self.dedupe.len(), "synced");
    }

    /// Announces an object that a list showed to be gone by `by` (the list's resourceVersion,
    /// or the version of the object that took its name): a synthesized DELETED at that version.
    /// Not at the last version the memory knows: after a crash the memory may not know the last
    /// messages published (those not yet confirmed), and a deletion older than them would go
    /// back behind what subscribers saw. The deletion is journaled, as a received one is, so
    /// one announced again after a crash is the same message (docs/durable-state.md).
    pub(super) async fn publish_vanished(
        &mut self,
        mut gone: Vanished,
        by: &ResourceVersion,
        why: Synthesis,
    ) {
        if !gone.announced {
            gone.meta.resource_version = by.clone();
        }
        let object = self.outlet.messages().vanished_object(&gone.meta);
        let recorded = self.outlet.delivery.record(&gone.meta, Presence::Deleted);
        let event = ObjectEvent {
            event_type: EventType::Deleted,
            meta: gone.meta,
            object,
            watch_line: None,
        };
        let out = Outgoing::synthesized(event, why);
        self.outlet.hand(out, Confirmed { recorded }).await;
    }
}
