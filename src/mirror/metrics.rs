//! The mirror's metric families (docs/metrics.md): bucket writes, failures, fenced writes, lag, and
//! the targets whose bucket keys are being repaired.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Registry,
};

use crate::telemetry::metrics::{counter, gauge, opts, remove_watch, NAMESPACE};

/// The families, registered once; [`for_watch`](Self::for_watch) resolves one watch's labels.
#[derive(Clone)]
pub(crate) struct MirrorFamilies {
    writes: IntCounterVec,
    write_errors: IntCounterVec,
    fenced: IntCounterVec,
    foreign: IntCounterVec,
    write_lag: HistogramVec,
    pending: IntGaugeVec,
    /// `mirror_repairs_in_progress`: watch targets comparing the bucket with a list; readiness
    /// waits for them.
    pub(crate) repairs: IntGauge,
}

impl MirrorFamilies {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<MirrorFamilies> {
        let writes = counter(
            registry,
            "mirror_writes_total",
            "Writes the mirror bucket acknowledged, by operation (put, delete).",
            &["watch", "operation"],
        )?;
        let write_errors = counter(
            registry,
            "mirror_write_errors_total",
            "Failed mirror bucket writes (each is retried).",
            &["watch"],
        )?;
        let fenced = counter(
            registry,
            "mirror_writes_fenced_total",
            "Mirror writes not made because the key already held the same or a newer resourceVersion (another writer got there first).",
            &["watch"],
        )?;
        let foreign = counter(
            registry,
            "mirror_foreign_keys_total",
            "Mirror writes and deletions not made because another kube2nats deployment (Kube2nats-Owner) wrote the key last: the deployments share a bucket and keys; give each its own mirror.bucket or publish.cluster.",
            &["watch"],
        )?;
        let write_lag = HistogramVec::new(
            HistogramOpts::new("mirror_write_lag_seconds", "Time from an event being handed to the publisher until the mirror bucket acknowledged its write.")
                .namespace(NAMESPACE)
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &["watch"],
        )?;
        registry.register(Box::new(write_lag.clone()))?;
        let pending = gauge(
            registry,
            "mirror_pending_writes",
            "Mirror writes queued or awaiting the bucket's acknowledgement.",
            &["watch"],
        )?;
        let repairs = IntGauge::with_opts(opts(
            "mirror_repairs_in_progress",
            "Watch targets whose mirror keys are being compared with a list and repaired; /readyz waits for them.",
        ))?;
        registry.register(Box::new(repairs.clone()))?;
        Ok(MirrorFamilies {
            writes,
            write_errors,
            fenced,
            foreign,
            write_lag,
            pending,
            repairs,
        })
    }

    /// A watch removed by a reload: its series leave `/metrics`.
    pub(crate) fn forget(&self, watch: &str) {
        for family in [
            &self.writes,
            &self.write_errors,
            &self.fenced,
            &self.foreign,
        ] {
            remove_watch(family, watch);
        }
        remove_watch(&self.write_lag, watch);
        remove_watch(&self.pending, watch);
    }

    pub(crate) fn for_watch(&self, watch: &str) -> MirrorMetrics {
        MirrorMetrics {
            puts: self.writes.with_label_values(&[watch, "put"]),
            deletes: self.writes.with_label_values(&[watch, "delete"]),
            write_errors: self.write_errors.with_label_values(&[watch]),
            fenced: self.fenced.with_label_values(&[watch]),
            foreign: self.foreign.with_label_values(&[watch]),
            write_lag: self.write_lag.with_label_values(&[watch]),
            pending: self.pending.with_label_values(&[watch]),
            repairs: self.repairs.clone(),
        }
    }
}

/// One watch's handles.
#[derive(Clone)]
pub(crate) struct MirrorMetrics {
    pub puts: IntCounter,
    pub deletes: IntCounter,
    pub write_errors: IntCounter,
    pub fenced: IntCounter,
    pub foreign: IntCounter,
    pub write_lag: Histogram,
    pub pending: IntGauge,
    pub repairs: IntGauge,
}
