//! The publish stage's metric families: what reached NATS, how long it took, what is in flight,
//! and the connection itself.

use std::sync::Arc;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Registry,
};

use crate::event::EventType;
use crate::telemetry::metrics::{counter, gauge, opts, remove_watch, ByType, NAMESPACE};

/// The families, registered once; [`for_watch`](Self::for_watch) resolves one watch's labels.
#[derive(Clone)]
pub(crate) struct PublishFamilies {
    events_published: IntCounterVec,
    publish_errors: IntCounterVec,
    publish_duration: HistogramVec,
    publish_queue_depth: IntGaugeVec,
    jetstream_duplicates: IntCounterVec,
    /// `nats_connected`: one connection for the process.
    pub(crate) nats_connected: IntGauge,
    /// `buffered_bytes`: the byte budget in use, for the process.
    pub(crate) buffered_bytes: IntGauge,
}

impl PublishFamilies {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<PublishFamilies> {
        let events_published = counter(
            registry,
            "events_published_total",
            "Events published to NATS (acknowledged in JetStream mode), by event type.",
            &["watch", "type"],
        )?;
        let publish_errors = counter(
            registry,
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
        let publish_queue_depth = gauge(
            registry,
            "publish_queue_depth",
            "Events handed to NATS and not yet acknowledged (JetStream) or flushed to the socket (core).",
            &["watch"],
        )?;
        let jetstream_duplicates = counter(registry, "jetstream_duplicates_total", "JetStream acknowledgements flagged duplicate (the stream already held that Nats-Msg-Id).", &["watch"])?;
        let nats_connected = IntGauge::with_opts(opts(
            "nats_connected",
            "1 while connected to a NATS server.",
        ))?;
        registry.register(Box::new(nats_connected.clone()))?;
        let buffered_bytes = IntGauge::with_opts(opts(
            "buffered_bytes",
            "Bytes held between the API server and NATS (read and not yet published, or published and not yet acknowledged or flushed); watches stop reading at nats.max_buffered_bytes.",
        ))?;
        registry.register(Box::new(buffered_bytes.clone()))?;
        Ok(PublishFamilies {
            events_published,
            publish_errors,
            publish_duration,
            publish_queue_depth,
            jetstream_duplicates,
            nats_connected,
            buffered_bytes,
        })
    }

    /// A watch removed by a reload: its series leave `/metrics`.
    pub(crate) fn forget(&self, watch: &str) {
        for family in [
            &self.events_published,
            &self.publish_errors,
            &self.jetstream_duplicates,
        ] {
            remove_watch(family, watch);
        }
        remove_watch(&self.publish_duration, watch);
        remove_watch(&self.publish_queue_depth, watch);
    }

    /// Handles for one configured watch, resolved once; `dropped_too_large` is its
    /// `events_dropped_total{reason="too_large"}`, a family of the watch stage.
    pub(crate) fn for_watch(&self, watch: &str, dropped_too_large: IntCounter) -> PublishMetrics {
        PublishMetrics {
            watch: watch.into(),
            published: ByType::new(&self.events_published, watch),
            dropped_too_large,
            publish_errors: self.publish_errors.with_label_values(&[watch]),
            publish_duration: self.publish_duration.with_label_values(&[watch]),
            queue_depth: self.publish_queue_depth.with_label_values(&[watch]),
            jetstream_duplicates: self.jetstream_duplicates.with_label_values(&[watch]),
        }
    }
}

/// The publish stage's metrics of one configured watch, shared by its namespaces' outboxes.
#[derive(Clone)]
pub(crate) struct PublishMetrics {
    pub(crate) watch: Arc<str>,
    published: ByType,
    /// Larger than the NATS server's `max_payload`: can never be published.
    pub(crate) dropped_too_large: IntCounter,
    pub(crate) publish_errors: IntCounter,
    pub(crate) publish_duration: Histogram,
    pub(crate) queue_depth: IntGauge,
    pub(crate) jetstream_duplicates: IntCounter,
}

impl PublishMetrics {
    pub(crate) fn published(&self, t: EventType) {
        self.published.inc(t);
    }
}
