//! A received event, as the watch task judges it: inside the namespace scope, through the
//! filter, against the memory of what was published; then handed to the outlet.

use super::outlet::{Fit, Outgoing, Publication};
use super::{Filtered, WatchTask};
use crate::config::PayloadMode;
use crate::dedupe::Verdict;
use crate::event::{EventType, ObjectEvent};
use crate::kube::metadata;
use crate::state::Presence;

impl WatchTask {
    /// A change that arrived in a watch line over `max_line_bytes`, of which only the metadata
    /// is known: published as such (`Kube-Payload: truncated`), so subscribers learn of it.
    pub(super) async fn received_oversized(
        &mut self,
        event: ObjectEvent,
        line_bytes: usize,
    ) -> bool {
        self.metrics.truncated_max_line.inc();
        tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), name = ?event.meta.name, uid = ?event.meta.uid, resource_version = %event.meta.resource_version, line_bytes, "watch line over kubernetes.max_line_bytes; publishing the object's metadata only (Kube-Payload: truncated)");
        self.received(event, Fit::MetadataOnly).await
    }

    /// Judges one received event, carried whole or (`Fit::MetadataOnly`) as its metadata, and
    /// hands it to the outlet; `true` if the memory changed.
    pub(super) async fn received(&mut self, mut event: ObjectEvent, fit: Fit) -> bool {
        self.metrics.received(event.event_type);
        self.metrics.touch();
        if !self.in_scope(&mut event) {
            return false;
        }
        // Unfiltered watches never read their objects (docs/filters.md, "What it costs").
        let event = match self.filter.is_some() {
            true => match self.filter_received(event, fit).await {
                Filtered::Pass(event) => event,
                Filtered::Handled(changed) => return changed,
            },
            false => event,
        };
        // The journal records an object's first message, so its deletion is announced even
        // after a crash; and a deletion, so that one announced again after a crash carries the
        // same version (and `Nats-Msg-Id`).
        let mark = match event.event_type {
            EventType::Deleted => 0,
            EventType::Added | EventType::Modified => self.noise.mark(&event),
        };
        let (verdict, tracked) = self
            .dedupe
            .observe_tracked(&event.meta, event.event_type, mark);
        let journaled = self.outlet.delivery.journal().is_some()
            && (event.event_type == EventType::Deleted) == tracked;
        let changed = match verdict {
            Verdict::Publish => {
                let recorded = if journaled {
                    let presence = Presence::of(event.event_type);
                    self.outlet.delivery.record(&event.meta, presence)
                } else {
                    None
                };
                let publication = Publication::Confirmed { recorded };
                self.outlet
                    .hand(Outgoing::received(event, fit), publication)
                    .await;
                true
            }
            Verdict::Unchanged => {
                self.metrics.dropped_unchanged.inc();
                let publication = Publication::MirrorOnly;
                self.outlet
                    .hand(Outgoing::received(event, fit), publication)
                    .await;
                true
            }
            Verdict::Duplicate => {
                self.metrics.dropped_duplicate.inc();
                false
            }
            Verdict::Stale => {
                self.metrics.dropped_stale.inc();
                false
            }
        };
        self.report_tracked();
        changed
    }

    /// Whether `event` is inside the namespace scope (counted as dropped if not); with
    /// `payload = "metadata"`, also cuts a full object the server sent to its metadata.
    pub(super) fn in_scope(&mut self, event: &mut ObjectEvent) -> bool {
        if !self.scope.admits(event.meta.namespace.as_deref()) {
            self.metrics.dropped_namespace.inc();
            return false;
        }
        if self.outlet.payload() == PayloadMode::Metadata && !metadata::is_partial(&event.object) {
            self.metadata_fallback(event);
        }
        true
    }

    /// The server sent a full object to a metadata-only watch (it cannot convert this resource):
    /// kube2nats cuts it, so subscribers never see more than they asked for.
    fn metadata_fallback(&mut self, event: &mut ObjectEvent) {
        self.metrics.truncated_metadata_fallback.inc();
        if !self.metadata_fallback_logged {
            self.metadata_fallback_logged = true;
            tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), "the API server sends full objects, not PartialObjectMetadata, for this resource: kube2nats cuts them to their metadata (payloads unchanged, no bandwidth saved)");
        }
        match metadata::to_metadata(&event.object) {
            Ok(cut) => event.object = cut,
            // The object was read for its metadata already, so this cannot happen; should it,
            // the metadata kube2nats read is still all a subscriber gets.
            Err(_) => event.object = self.outlet.messages().vanished_object(&event.meta),
        }
        event.watch_line = None;
    }
}
