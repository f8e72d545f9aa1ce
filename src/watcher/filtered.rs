//! A watch with a `filter`: each event's object judged before de-duplication, so that the memory
//! holds only matching objects (docs/filters.md). An object that starts matching is published
//! ADDED, one that stops is announced DELETED (`Kube-Synthesized: filter`) and forgotten, events
//! of objects outside are dropped (`events_dropped_total{reason="not_matching"}`). Watches
//! without a filter never get here, and never read their objects.

use super::outlet::{Fit, Outgoing, Publication};
use super::{Filtered, WatchTask};
use crate::dedupe::Verdict;
use crate::event::{EventType, ObjectEvent};
use crate::filter::{Admission, Filter};
use crate::publish::message::Synthesis;

impl WatchTask {
    /// Judges a received event. One over `max_line_bytes` (`fit` is metadata only) has no object
    /// to judge: it keeps its object's membership.
    pub(super) async fn filter_received(&mut self, mut event: ObjectEvent, fit: Fit) -> Filtered {
        let Some(filter) = &self.filter else {
            return Filtered::Pass(event);
        };
        let tracked = self.dedupe.tracks(&event.meta.uid);
        let admission = match fit {
            Fit::Whole => filter.admit(&event, tracked),
            Fit::MetadataOnly => Filter::by_membership(tracked),
        };
        match admission {
            Admission::Publish => Filtered::Pass(event),
            Admission::Enter => {
                // A watch resumed from a saved version sees the change that made it match as
                // MODIFIED; to subscribers it is new.
                event.event_type = EventType::Added;
                Filtered::Pass(event)
            }
            Admission::Leave => Filtered::Handled(self.left_filter(event).await),
            Admission::Outside => {
                self.metrics.dropped_not_matching.inc();
                Filtered::Handled(false)
            }
        }
    }

    /// Judges a listed object: one outside the filter is not listed, so a remembered one that
    /// left it while the watch could not see is announced here (not as vanished by the list's
    /// end, which would not say why).
    pub(super) async fn filter_listed(&mut self, item: ObjectEvent) -> Filtered {
        let Some(filter) = &self.filter else {
            return Filtered::Pass(item);
        };
        match filter.admit(&item, self.dedupe.tracks(&item.meta.uid)) {
            Admission::Publish | Admission::Enter => Filtered::Pass(item),
            Admission::Leave => Filtered::Handled(self.left_filter(item).await),
            Admission::Outside => Filtered::Handled(false),
        }
    }

    /// The object stopped matching: DELETED with the object as it is now, marked
    /// `Kube-Synthesized: filter`, and forgotten (no tombstone: it may match again). Neither
    /// journaled nor confirmed as a deletion, which would make it a tombstone after a crash: a
    /// crash before the next checkpoint announces it again, at the same version (the same
    /// `Nats-Msg-Id`).
    async fn left_filter(&mut self, mut event: ObjectEvent) -> bool {
        if self.dedupe.leave(&event.meta) != Verdict::Publish {
            self.metrics.dropped_stale.inc();
            return false;
        }
        self.report_tracked();
        event.event_type = EventType::Deleted;
        // The line received says ADDED or MODIFIED: the payload is rebuilt as a DELETED.
        event.watch_line = None;
        let out = Outgoing::synthesized(event, Synthesis::Filter);
        self.outlet.hand(out, Publication::Unconfirmed).await;
        true
    }
}
