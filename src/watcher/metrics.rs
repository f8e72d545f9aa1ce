//! The watch stage's metric families: what arrived from the API server, what was dropped before
//! publishing, restarts and relists, and whether each watch is synced.

use std::sync::Arc;

use prometheus::{Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use crate::event::{EventType, ResourceInfo};
use crate::telemetry::metrics::{counter, gauge, opts, remove_watch, ByType, WatchSync};

/// The families, registered once; [`for_watch`](Self::for_watch) resolves one watch's labels.
#[derive(Clone)]
pub(crate) struct WatchFamilies {
    events_received: IntCounterVec,
    events_dropped: IntCounterVec,
    events_synthesized: IntCounterVec,
    watch_restarts: IntCounterVec,
    relists: IntCounterVec,
    decode_errors: IntCounterVec,
    watch_synced: IntGaugeVec,
    watch_served: IntGaugeVec,
    resource_info: IntGaugeVec,
    tracked_objects: IntGaugeVec,
    last_event_timestamp: GaugeVec,
    events_truncated: IntCounterVec,
    filter_errors: IntCounterVec,
}

impl WatchFamilies {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<WatchFamilies> {
        let events_received = counter(
            registry,
            "events_received_total",
            "Watch events received from the API server, by event type.",
            &["watch", "type"],
        )?;
        let events_dropped = counter(registry, "events_dropped_total", "Events not published: duplicate (already published), stale (older than published), unchanged (a MODIFIED that changes = generation or content judged no news), filtered (event type not configured), too_large (over the NATS max_payload), subject_too_long (a subject NATS would refuse), namespace (outside namespaces_exclude / namespace_selector), not_matching (an object outside the watch's filter).", &["watch", "reason"])?;
        let events_synthesized = counter(
            registry,
            "events_synthesized_total",
            "Events derived from a list rather than received from a watch (and the DELETED of the objects left when the resource stopped being served), by event type.",
            &["watch", "type"],
        )?;
        let watch_restarts = counter(
            registry,
            "watch_restarts_total",
            "Watch streams that ended and were reopened, by reason.",
            &["watch", "reason"],
        )?;
        let relists = counter(
            registry,
            "relists_total",
            "Lists started, by reason: initial (a namespace's first list: at start, after taking over the Lease, after a task restart, once its resource is served again; not a relist, so alerts exclude it), expired, too_large_resource_version, continue_expired, streaming_unsupported.",
            &["watch", "reason"],
        )?;
        let decode_errors = counter(
            registry,
            "decode_errors_total",
            "Watch lines that could not be decoded (malformed, over the size limit, truncated).",
            &["watch"],
        )?;
        let watch_synced = gauge(
            registry,
            "watch_synced",
            "1 when every namespace of the watch has completed its list and is watching.",
            &["watch"],
        )?;
        let watch_served = gauge(
            registry,
            "watch_served",
            "1 while the API server serves the watch's resource; 0 while it does not (its CRD not installed yet, or deleted): the watch waits for it.",
            &["watch"],
        )?;
        let resource_info = gauge(
            registry,
            "watch_resource_info",
            "1 for the group (core for the core group), version and resource the watch reads; the version changes when a watch follows its resource's preferred version.",
            &["watch", "group", "version", "resource"],
        )?;
        let tracked_objects = gauge(
            registry,
            "tracked_objects",
            "Objects whose last published version is remembered for de-duplication.",
            &["watch"],
        )?;
        let last_event_timestamp = GaugeVec::new(
            opts("watch_last_event_timestamp_seconds", "Unix time of the last event or bookmark received; a stalled watch stops moving it."),
            &["watch"],
        )?;
        registry.register(Box::new(last_event_timestamp.clone()))?;
        let events_truncated = counter(registry, "events_truncated_total", "Events published with their metadata only (Kube-Payload: truncated), by reason: max_payload (larger than the NATS server accepts), max_line_bytes (a watch line over kubernetes.max_line_bytes), metadata_fallback (payload = metadata, but the server sent the full object: cut by kube2nats).", &["watch", "reason"])?;
        let filter_errors = counter(
            registry,
            "filter_errors_total",
            "Objects on which the watch's filter failed (a missing field read without has(), a wrong type, a result not a bool): counted as not matching.",
            &["watch"],
        )?;
        Ok(WatchFamilies {
            events_received,
            events_dropped,
            events_synthesized,
            watch_restarts,
            relists,
            decode_errors,
            watch_synced,
            watch_served,
            resource_info,
            tracked_objects,
            last_event_timestamp,
            events_truncated,
            filter_errors,
        })
    }

    /// A watch removed by a reload: its series leave `/metrics`, so that no alert reads a watch
    /// that no longer runs as unsynced or stalled.
    pub(crate) fn forget(&self, watch: &str) {
        for family in [
            &self.events_received,
            &self.events_dropped,
            &self.events_synthesized,
            &self.watch_restarts,
            &self.relists,
            &self.decode_errors,
            &self.events_truncated,
            &self.filter_errors,
        ] {
            remove_watch(family, watch);
        }
        for family in [
            &self.watch_synced,
            &self.watch_served,
            &self.resource_info,
            &self.tracked_objects,
        ] {
            remove_watch(family, watch);
        }
        remove_watch(&self.last_event_timestamp, watch);
    }

    /// Handles for one configured watch, resolved once. `targets` is how many independent
    /// list+watch loops (namespaces) the watch runs; it counts as synced when all of them are.
    pub(crate) fn for_watch(&self, watch: &str, targets: usize) -> WatchMetrics {
        let dropped = |reason: &str| self.events_dropped.with_label_values(&[watch, reason]);
        let name: Arc<str> = watch.into();
        WatchMetrics {
            received: ByType::new(&self.events_received, watch),
            synthesized: ByType::new(&self.events_synthesized, watch),
            dropped_duplicate: dropped("duplicate"),
            dropped_stale: dropped("stale"),
            dropped_filtered: dropped("filtered"),
            dropped_unchanged: dropped("unchanged"),
            dropped_subject_too_long: dropped("subject_too_long"),
            dropped_namespace: dropped("namespace"),
            dropped_not_matching: dropped("not_matching"),
            // Exported for every watch (0 without a filter), so alerts need no absent().
            filter_errors: self.filter_errors.with_label_values(&[watch]),
            truncated_metadata_fallback: self
                .events_truncated
                .with_label_values(&[watch, "metadata_fallback"]),
            truncated_max_payload: self
                .events_truncated
                .with_label_values(&[watch, "max_payload"]),
            truncated_max_line: self
                .events_truncated
                .with_label_values(&[watch, "max_line_bytes"]),
            decode_errors: self.decode_errors.with_label_values(&[watch]),
            sync: WatchSync::new(
                name.clone(),
                self.watch_synced.with_label_values(&[watch]),
                targets,
            )
            .with_served(self.watch_served.with_label_values(&[watch])),
            resource: ResourceGauge {
                family: self.resource_info.clone(),
                watch: name.clone(),
            },
            tracked_objects: self.tracked_objects.with_label_values(&[watch]),
            last_event_timestamp: self.last_event_timestamp.with_label_values(&[watch]),
            restarts: self.watch_restarts.clone(),
            relists: self.relists.clone(),
            watch: name,
        }
    }

    /// `events_dropped_total{reason="too_large"}` of one watch: counted by the publish stage, in
    /// the family this stage owns.
    pub(crate) fn dropped_too_large(&self, watch: &str) -> IntCounter {
        self.events_dropped.with_label_values(&[watch, "too_large"])
    }
}

/// The watch stage's metrics of one configured watch, shared by its namespaces' loops.
#[derive(Clone)]
pub(crate) struct WatchMetrics {
    pub(crate) watch: Arc<str>,
    received: ByType,
    synthesized: ByType,
    pub(crate) dropped_duplicate: IntCounter,
    pub(crate) dropped_stale: IntCounter,
    pub(crate) dropped_filtered: IntCounter,
    /// A MODIFIED (or a relist's change) that `changes` judged no news to subscribers.
    pub(crate) dropped_unchanged: IntCounter,
    /// Its subject is longer than a NATS protocol line may be: never published.
    pub(crate) dropped_subject_too_long: IntCounter,
    /// Published with metadata only: larger than the NATS server's `max_payload`.
    pub(crate) truncated_max_payload: IntCounter,
    /// Published with metadata only: its watch line was over `kubernetes.max_line_bytes`.
    pub(crate) truncated_max_line: IntCounter,
    /// In a namespace outside the watch's namespace scope.
    pub(crate) dropped_namespace: IntCounter,
    /// Of an object outside the watch's filter (docs/filters.md).
    pub(crate) dropped_not_matching: IntCounter,
    /// `kube2nats_filter_errors_total`: objects the filter failed on.
    pub(crate) filter_errors: IntCounter,
    /// A full object sent to a metadata-only watch, cut to its metadata here.
    pub truncated_metadata_fallback: IntCounter,
    pub decode_errors: IntCounter,
    pub sync: WatchSync,
    /// `watch_resource_info`: the version read now.
    pub resource: ResourceGauge,
    pub tracked_objects: IntGauge,
    pub last_event_timestamp: Gauge,
    restarts: IntCounterVec,
    relists: IntCounterVec,
}

/// `kube2nats_watch_resource_info` of one watch: one series, for the group, version and resource
/// its targets read (docs/configuration.md, "Versions that move").
#[derive(Clone)]
pub(crate) struct ResourceGauge {
    family: IntGaugeVec,
    watch: Arc<str>,
}

impl ResourceGauge {
    /// The watch reads `resource` now: its series replaces the previous one.
    pub(crate) fn reading(&self, resource: &ResourceInfo) {
        let group = match resource.group.as_str() {
            "" => "core",
            group => group,
        };
        remove_watch(&self.family, &self.watch);
        self.family
            .with_label_values(&[&*self.watch, group, &resource.version, &resource.plural])
            .set(1);
    }
}

impl WatchMetrics {
    /// The watch stopped without its tasks reporting back (this replica stood down): what they
    /// tracked is no longer tracked here.
    pub(crate) fn clear(&self) {
        self.sync.clear();
        self.tracked_objects.set(0);
    }
    pub(crate) fn received(&self, t: EventType) {
        self.received.inc(t);
    }
    pub(crate) fn synthesized(&self, t: EventType) {
        self.synthesized.inc(t);
    }
    pub(crate) fn restart(&self, reason: &str) {
        self.restarts
            .with_label_values(&[&self.watch, reason])
            .inc();
    }
    pub(crate) fn relist(&self, reason: &str) {
        self.relists.with_label_values(&[&self.watch, reason]).inc();
    }
    /// Marks the current time as the last sign of life of the watch.
    pub(crate) fn touch(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_event_timestamp.set(now);
    }
}
