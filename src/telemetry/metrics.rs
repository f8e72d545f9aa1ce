//! Every Prometheus metric kube2nats exposes, registered once into one registry.
//!
//! Names and labels are a public interface (DESIGN.md): change them only on purpose. Components
//! get pre-resolved handles ([`WatchMetrics`] per configured watch) so the hot path only
//! increments counters, never looks up labels.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::event::EventType;

const NAMESPACE: &str = "kube2nats";

/// The registry and every metric family in it.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    events_received: IntCounterVec,
    events_published: IntCounterVec,
    events_dropped: IntCounterVec,
    events_synthesized: IntCounterVec,
    publish_errors: IntCounterVec,
    publish_duration: HistogramVec,
    watch_restarts: IntCounterVec,
    relists: IntCounterVec,
    api_requests: IntCounterVec,
    decode_errors: IntCounterVec,
    watch_synced: IntGaugeVec,
    tracked_objects: IntGaugeVec,
    last_event_timestamp: GaugeVec,
    publish_queue_depth: IntGaugeVec,
    jetstream_duplicates: IntCounterVec,
    events_truncated: IntCounterVec,
    pub nats_connected: IntGauge,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

impl Metrics {
    /// Creates a fresh registry holding every metric, the process collector and `build_info`.
    pub fn new() -> prometheus::Result<Metrics> {
        let registry = Registry::new();
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
                let c = IntCounterVec::new(opts(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let gauge = |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntGaugeVec> {
            let g = IntGaugeVec::new(opts(name, help), labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let events_received = counter(
            "events_received_total",
            "Watch events received from the API server, by event type.",
            &["watch", "type"],
        )?;
        let events_published = counter(
            "events_published_total",
            "Events published to NATS (acknowledged in JetStream mode), by event type.",
            &["watch", "type"],
        )?;
        let events_dropped = counter("events_dropped_total", "Events not published: duplicate (already published), stale (older than published), filtered (event type not configured), too_large (over the NATS max_payload), subject_too_long (a subject NATS would refuse).", &["watch", "reason"])?;
        let events_synthesized = counter(
            "events_synthesized_total",
            "Events derived from a list rather than received from a watch, by event type.",
            &["watch", "type"],
        )?;
        let publish_errors = counter(
            "publish_errors_total",
            "Failed publish attempts (each is retried).",
            &["watch"],
        )?;
        let publish_duration = HistogramVec::new(
            HistogramOpts::new("publish_duration_seconds", "Time from handing an event to NATS until it is accepted (core) or acknowledged (JetStream).")
                .namespace(NAMESPACE)
                .buckets(vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["watch"],
        )?;
        registry.register(Box::new(publish_duration.clone()))?;
        let watch_restarts = counter(
            "watch_restarts_total",
            "Watch streams that ended and were reopened, by reason.",
            &["watch", "reason"],
        )?;
        let relists = counter(
            "relists_total",
            "Lists started, by reason (initial, expired, too_large_resource_version, ...).",
            &["watch", "reason"],
        )?;
        let api_requests = counter("api_requests_total", "Requests to the Kubernetes API server, by verb and HTTP status code (0 when no response).", &["verb", "code"])?;
        let decode_errors = counter(
            "decode_errors_total",
            "Watch lines that could not be decoded (malformed, over the size limit, truncated).",
            &["watch"],
        )?;
        let watch_synced = gauge(
            "watch_synced",
            "1 when every namespace of the watch has completed its list and is watching.",
            &["watch"],
        )?;
        let tracked_objects = gauge(
            "tracked_objects",
            "Objects whose last published version is remembered for de-duplication.",
            &["watch"],
        )?;
        let last_event_timestamp = GaugeVec::new(
            opts("watch_last_event_timestamp_seconds", "Unix time of the last event or bookmark received; a stalled watch stops moving it."),
            &["watch"],
        )?;
        registry.register(Box::new(last_event_timestamp.clone()))?;
        let publish_queue_depth = gauge(
            "publish_queue_depth",
            "Events handed to NATS and not yet acknowledged.",
            &["watch"],
        )?;
        let jetstream_duplicates = counter("jetstream_duplicates_total", "JetStream acknowledgements flagged duplicate (the stream already held that Nats-Msg-Id).", &["watch"])?;
        let events_truncated = counter("events_truncated_total", "Events published with their metadata only (Kube-Payload: truncated), by reason: max_payload (larger than the NATS server accepts), max_line_bytes (a watch line over kubernetes.max_line_bytes).", &["watch", "reason"])?;
        let nats_connected = IntGauge::with_opts(opts(
            "nats_connected",
            "1 while connected to a NATS server.",
        ))?;
        registry.register(Box::new(nats_connected.clone()))?;
        let build_info = IntGaugeVec::new(
            opts(
                "build_info",
                "Always 1; the version label says which build runs.",
            ),
            &["version"],
        )?;
        registry.register(Box::new(build_info.clone()))?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Metrics {
            registry,
            events_received,
            events_published,
            events_dropped,
            events_synthesized,
            publish_errors,
            publish_duration,
            watch_restarts,
            relists,
            api_requests,
            decode_errors,
            watch_synced,
            tracked_objects,
            last_event_timestamp,
            publish_queue_depth,
            jetstream_duplicates,
            events_truncated,
            nats_connected,
        })
    }

    /// Handles for one configured watch, resolved once. `targets` is how many independent
    /// list+watch loops (namespaces) the watch runs; it counts as synced when all of them are.
    pub fn for_watch(&self, watch: &str, targets: usize) -> WatchMetrics {
        let by_type = |vec: &IntCounterVec| {
            EventType::ALL.map(|t| vec.with_label_values(&[watch, t.as_str()]))
        };
        let synced = self.watch_synced.with_label_values(&[watch]);
        synced.set(0);
        WatchMetrics {
            watch: watch.into(),
            received: by_type(&self.events_received),
            published: by_type(&self.events_published),
            synthesized: by_type(&self.events_synthesized),
            dropped_duplicate: self.events_dropped.with_label_values(&[watch, "duplicate"]),
            dropped_stale: self.events_dropped.with_label_values(&[watch, "stale"]),
            dropped_filtered: self.events_dropped.with_label_values(&[watch, "filtered"]),
            dropped_too_large: self.events_dropped.with_label_values(&[watch, "too_large"]),
            dropped_subject_too_long: self
                .events_dropped
                .with_label_values(&[watch, "subject_too_long"]),
            publish_errors: self.publish_errors.with_label_values(&[watch]),
            publish_duration: self.publish_duration.with_label_values(&[watch]),
            decode_errors: self.decode_errors.with_label_values(&[watch]),
            synced,
            unsynced_targets: Arc::new(AtomicUsize::new(targets)),
            tracked_objects: self.tracked_objects.with_label_values(&[watch]),
            last_event_timestamp: self.last_event_timestamp.with_label_values(&[watch]),
            queue_depth: self.publish_queue_depth.with_label_values(&[watch]),
            jetstream_duplicates: self.jetstream_duplicates.with_label_values(&[watch]),
            truncated_max_payload: self
                .events_truncated
                .with_label_values(&[watch, "max_payload"]),
            restarts: self.watch_restarts.clone(),
            relists: self.relists.clone(),
        }
    }

    /// The counter of API requests, for the API client.
    pub fn api_requests(&self) -> IntCounterVec {
        self.api_requests.clone()
    }

    /// The registry rendered in the Prometheus text format.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        prometheus::TextEncoder::new()
            .encode_to_string(&families)
            .unwrap_or_else(|e| format!("# encoding metrics failed: {e}\n"))
    }
}

/// The metrics of one configured watch, shared by its namespaces' loops.
#[derive(Clone)]
pub struct WatchMetrics {
    pub watch: Arc<str>,
    received: [IntCounter; 3],
    published: [IntCounter; 3],
    synthesized: [IntCounter; 3],
    pub dropped_duplicate: IntCounter,
    pub dropped_stale: IntCounter,
    pub dropped_filtered: IntCounter,
    /// Larger than the NATS server's `max_payload`: can never be published.
    pub dropped_too_large: IntCounter,
    /// Its subject is longer than a NATS protocol line may be: never published.
    pub dropped_subject_too_long: IntCounter,
    pub publish_errors: IntCounter,
    pub publish_duration: Histogram,
    pub decode_errors: IntCounter,
    synced: IntGauge,
    unsynced_targets: Arc<AtomicUsize>,
    pub tracked_objects: IntGauge,
    pub last_event_timestamp: Gauge,
    pub queue_depth: IntGauge,
    pub jetstream_duplicates: IntCounter,
    /// Published with metadata only: larger than the NATS server's `max_payload`.
    pub truncated_max_payload: IntCounter,
    restarts: IntCounterVec,
    relists: IntCounterVec,
}

fn index(t: EventType) -> usize {
    match t {
        EventType::Added => 0,
        EventType::Modified => 1,
        EventType::Deleted => 2,
    }
}

impl WatchMetrics {
    pub fn received(&self, t: EventType) {
        self.received[index(t)].inc();
    }
    pub fn published(&self, t: EventType) {
        self.published[index(t)].inc();
    }
    pub fn synthesized(&self, t: EventType) {
        self.synthesized[index(t)].inc();
    }
    pub fn restart(&self, reason: &str) {
        self.restarts
            .with_label_values(&[&self.watch, reason])
            .inc();
    }
    pub fn relist(&self, reason: &str) {
        self.relists.with_label_values(&[&self.watch, reason]).inc();
    }
    /// Marks the current time as the last sign of life of the watch.
    pub fn touch(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_event_timestamp.set(now);
    }
    /// One target of this watch finished its list (`true`) or lost its sync (`false`).
    pub fn set_target_synced(&self, synced: bool) {
        let unsynced = if synced {
            self.unsynced_targets.fetch_sub(1, Ordering::SeqCst) - 1
        } else {
            self.unsynced_targets.fetch_add(1, Ordering::SeqCst) + 1
        };
        self.synced.set(i64::from(unsynced == 0));
    }
    /// True when every target of the watch is synced.
    pub fn is_synced(&self) -> bool {
        self.unsynced_targets.load(Ordering::SeqCst) == 0
    }
}
