//! The durable state's metrics, registered by the state stage itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::durability::TargetDurability;
use crate::telemetry::metrics::opts;

/// Every metric of the state stage.
#[derive(Clone)]
pub(crate) struct StateMetrics {
    /// 1 while state is saved to JetStream; 0 when it is kept in memory only (disabled, or the
    /// server has no JetStream).
    pub(crate) durable: IntGauge,
    checkpoints: IntCounterVec,
    failures: IntCounterVec,
    load_duration: prometheus::GaugeVec,
    objects_loaded: IntGaugeVec,
    stored_bytes: IntGaugeVec,
    journal_records: prometheus::HistogramVec,
    ages: TargetReadings,
    load_ratios: TargetReadings,
    degraded: Degraded,
}

impl StateMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<StateMetrics> {
        let durable = IntGauge::with_opts(opts(
            "state_durable",
            "1 while the watches' state is checkpointed to JetStream; 0 when it is kept in memory only.",
        ))?;
        registry.register(Box::new(durable.clone()))?;
        let checkpoints = IntCounterVec::new(
            opts(
                "state_checkpoints_total",
                "Checkpoints of the published state written to JetStream.",
            ),
            &["watch"],
        )?;
        registry.register(Box::new(checkpoints.clone()))?;
        let failures = IntCounterVec::new(
            opts(
                "state_checkpoint_failures_total",
                "Checkpoint and journal writes that failed (each is retried).",
            ),
            &["watch"],
        )?;
        registry.register(Box::new(failures.clone()))?;
        let load_duration = prometheus::GaugeVec::new(
            opts(
                "state_load_duration_seconds",
                "Time the last start took to load the saved state (the slowest target of the watch).",
            ),
            &["watch"],
        )?;
        registry.register(Box::new(load_duration.clone()))?;
        let objects_loaded = IntGaugeVec::new(
            opts(
                "state_objects_loaded",
                "Objects loaded from the saved state at start.",
            ),
            &["watch"],
        )?;
        registry.register(Box::new(objects_loaded.clone()))?;
        let stored_bytes = IntGaugeVec::new(
            opts(
                "state_stored_bytes",
                "Size of the last checkpoint written (the watch's targets together).",
            ),
            &["watch"],
        )?;
        registry.register(Box::new(stored_bytes.clone()))?;
        // Its `_count` is the number of journal writes, its `_sum` the objects they recorded.
        let journal_records = prometheus::HistogramVec::new(
            prometheus::HistogramOpts::new(
                "state_journal_records",
                "Objects recorded per journal write (first published, or deleted, since the last checkpoint).",
            )
            .namespace(crate::telemetry::metrics::NAMESPACE)
            .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]),
            &["watch"],
        )?;
        registry.register(Box::new(journal_records.clone()))?;
        let ages = TargetReadings::checkpoint_ages()?;
        registry.register(Box::new(ages.clone()))?;
        let load_ratios = TargetReadings::load_ratios()?;
        registry.register(Box::new(load_ratios.clone()))?;
        let degraded = Degraded::new()?;
        registry.register(Box::new(degraded.clone()))?;
        Ok(StateMetrics {
            durable,
            checkpoints,
            failures,
            load_duration,
            objects_loaded,
            stored_bytes,
            journal_records,
            ages,
            load_ratios,
            degraded,
        })
    }

    /// One line per watch target whose saved state does not keep up (for `/readyz`'s body).
    pub(crate) fn not_durable(&self) -> Vec<String> {
        self.degraded.reasons()
    }

    /// Handles for one target of `watch`.
    pub(crate) fn for_target(&self, watch: &str) -> TargetMetrics {
        let started = Arc::new(AtomicU64::new(unix_millis()));
        self.ages.add(watch, &started);
        let load_share = Arc::new(AtomicU64::new(0f64.to_bits()));
        self.load_ratios.add(watch, &load_share);
        let durability = Arc::new(TargetDurability::default());
        self.degraded.add(watch, &durability);
        TargetMetrics {
            watch: watch.into(),
            checkpoints: self.checkpoints.with_label_values(&[watch]),
            failures: self.failures.with_label_values(&[watch]),
            load_duration: self.load_duration.with_label_values(&[watch]),
            objects_loaded: self.objects_loaded.with_label_values(&[watch]),
            stored_bytes: self.stored_bytes.with_label_values(&[watch]),
            journal_records: self.journal_records.with_label_values(&[watch]),
            last_current: started,
            stored: Arc::new(AtomicU64::new(0)),
            load_share,
            durability,
        }
    }
}

/// The state metrics of one watch target.
#[derive(Clone)]
pub(crate) struct TargetMetrics {
    pub(crate) watch: Arc<str>,
    pub(crate) checkpoints: prometheus::IntCounter,
    pub(crate) failures: prometheus::IntCounter,
    load_duration: prometheus::Gauge,
    objects_loaded: IntGauge,
    stored_bytes: IntGauge,
    /// Objects per journal write.
    pub(crate) journal_records: prometheus::Histogram,
    /// Unix millis of the last moment the saved state matched what was published.
    last_current: Arc<AtomicU64>,
    /// This target's share of `stored_bytes`.
    stored: Arc<AtomicU64>,
    /// The share of `state.max_load_bytes` loading its last checkpoint takes (`f64` bits).
    load_share: Arc<AtomicU64>,
    /// Whether the saved state keeps up ([`super::durability`]).
    pub(crate) durability: Arc<TargetDurability>,
}

impl TargetMetrics {
    pub(crate) fn loaded(&self, objects: usize, seconds: f64) {
        self.objects_loaded.add(objects as i64);
        if seconds > self.load_duration.get() {
            self.load_duration.set(seconds);
        }
    }

    /// The saved state matches what was published, as of now.
    pub(crate) fn current(&self) {
        self.last_current.store(unix_millis(), Ordering::Relaxed);
    }

    /// Loading the last checkpoint takes `share` of `state.max_load_bytes`.
    pub(crate) fn load_share(&self, share: f64) {
        self.load_share.store(share.to_bits(), Ordering::Relaxed);
    }

    pub(crate) fn stored(&self, bytes: u64) {
        let before = self.stored.swap(bytes, Ordering::Relaxed);
        self.stored_bytes.add(bytes as i64 - before as i64);
    }
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A gauge per watch computed when scraped from a reading each running target of the watch
/// holds. Only running targets count: a target whose task ended (a replica that stood down, a
/// restarted task) is forgotten, so its frozen reading cannot skew a live watch, and a standby
/// exports nothing.
///
/// - `kube2nats_state_checkpoint_age_seconds{watch}` ([`TargetReadings::checkpoint_ages`]): how
///   long ago the saved state last matched what was published, for the target of the watch that
///   lags most; it keeps growing while checkpoints fail or the watch is stuck.
/// - `kube2nats_state_load_ratio{watch}` ([`TargetReadings::load_ratios`]): the share of
///   `state.max_load_bytes` that loading the last checkpoint would take, for the watch's target
///   nearest the limit.
#[derive(Clone)]
struct TargetReadings {
    gauge: prometheus::GaugeVec,
    targets: Arc<Mutex<Vec<TargetReading>>>,
    /// The watch's value from the readings of its running targets (at least one).
    value: fn(&[u64]) -> f64,
}

/// A watch's name and a reading of one of its targets (the time it was last checkpointed, in unix
/// millis; its load share, as `f64` bits); the target's [`TargetMetrics`] hold the reading, so it
/// goes away with them.
type TargetReading = (Arc<str>, Weak<AtomicU64>);

impl TargetReadings {
    fn checkpoint_ages() -> prometheus::Result<TargetReadings> {
        TargetReadings::new(
            "state_checkpoint_age_seconds",
            "Seconds since the saved state last matched what was published (the most lagging target of the watch).",
            |lasts| {
                let oldest = lasts.iter().copied().min().unwrap_or_default();
                unix_millis().saturating_sub(oldest) as f64 / 1000.0
            },
        )
    }

    fn load_ratios() -> prometheus::Result<TargetReadings> {
        TargetReadings::new(
            "state_load_ratio",
            "Share of state.max_load_bytes that loading the last checkpoint takes (the watch's largest target); past 1 a start refuses the saved state and starts fresh.",
            |shares| {
                shares
                    .iter()
                    .map(|&bits| f64::from_bits(bits))
                    .fold(0.0, f64::max)
            },
        )
    }

    fn new(name: &str, help: &str, value: fn(&[u64]) -> f64) -> prometheus::Result<TargetReadings> {
        let gauge = prometheus::GaugeVec::new(opts(name, help), &["watch"])?;
        Ok(TargetReadings {
            gauge,
            targets: Arc::default(),
            value,
        })
    }

    fn add(&self, watch: &str, reading: &Arc<AtomicU64>) {
        if let Ok(mut targets) = self.targets.lock() {
            targets.retain(|(_, r)| r.strong_count() > 0);
            targets.push((watch.into(), Arc::downgrade(reading)));
        }
    }
}

impl Collector for TargetReadings {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.gauge.reset();
        if let Ok(mut targets) = self.targets.lock() {
            targets.retain(|(_, r)| r.strong_count() > 0);
            let mut by_watch: Vec<(&str, Vec<u64>)> = Vec::new();
            for (watch, reading) in targets.iter() {
                let Some(reading) = reading.upgrade() else {
                    continue;
                };
                let reading = reading.load(Ordering::Relaxed);
                match by_watch.iter_mut().find(|(w, _)| *w == &**watch) {
                    Some((_, readings)) => readings.push(reading),
                    None => by_watch.push((watch, vec![reading])),
                }
            }
            for (watch, readings) in by_watch {
                self.gauge
                    .with_label_values(&[watch])
                    .set((self.value)(&readings));
            }
        }
        self.gauge.collect()
    }
}

/// `kube2nats_state_degraded{watch}`: 1 while a target of the watch publishes without its saved
/// state keeping up ([`super::durability`]). Computed when scraped, over running targets only,
/// as [`TargetReadings`] are.
#[derive(Clone)]
struct Degraded {
    gauge: IntGaugeVec,
    targets: Arc<Mutex<Vec<TargetDurabilityRef>>>,
}

/// A watch's name and one of its targets' durability, held by the target's [`TargetMetrics`].
type TargetDurabilityRef = (Arc<str>, Weak<TargetDurability>);

impl Degraded {
    fn new() -> prometheus::Result<Degraded> {
        let gauge = IntGaugeVec::new(
            opts(
                "state_degraded",
                "1 while writes to the state bucket fail and the watch publishes without its saved state keeping up (a crash then repeats or misses events).",
            ),
            &["watch"],
        )?;
        Ok(Degraded {
            gauge,
            targets: Arc::default(),
        })
    }

    fn add(&self, watch: &str, durability: &Arc<TargetDurability>) {
        if let Ok(mut targets) = self.targets.lock() {
            targets.retain(|(_, d)| d.strong_count() > 0);
            targets.push((watch.into(), Arc::downgrade(durability)));
        }
    }

    /// The running targets: each one's watch and, if it is degraded, why.
    fn running(&self) -> Vec<(Arc<str>, Option<String>)> {
        let Ok(mut targets) = self.targets.lock() else {
            return Vec::new();
        };
        targets.retain(|(_, d)| d.strong_count() > 0);
        targets
            .iter()
            .filter_map(|(watch, d)| Some((watch.clone(), d.upgrade()?.reason())))
            .collect()
    }

    fn reasons(&self) -> Vec<String> {
        self.running()
            .into_iter()
            .filter_map(|(watch, reason)| Some(format!("watch {watch}: {}", reason?)))
            .collect()
    }
}

impl Collector for Degraded {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.gauge.reset();
        for (watch, reason) in self.running() {
            let gauge = self.gauge.with_label_values(&[&watch]);
            if reason.is_some() {
                gauge.set(1);
            }
        }
        self.gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ages(registry: &Registry) -> Vec<(String, f64)> {
        registry
            .gather()
            .iter()
            .filter(|f| f.name() == "kube2nats_state_checkpoint_age_seconds")
            .flat_map(|f| f.get_metric().to_vec())
            .map(|m| {
                (
                    m.get_label()[0].value().to_owned(),
                    m.get_gauge().get_value(),
                )
            })
            .collect()
    }

    /// The age is that of the most lagging running target; a target whose task ended no longer
    /// counts, and with none running the watch has no age series at all.
    #[test]
    fn checkpoint_age_counts_only_running_targets() {
        let registry = Registry::new();
        let metrics = StateMetrics::register(&registry).unwrap();
        let stale = metrics.for_target("pods");
        stale
            .last_current
            .store(unix_millis() - 3_600_000, Ordering::Relaxed);
        let live = metrics.for_target("pods");
        let age = ages(&registry);
        assert_eq!(age.len(), 1);
        assert!(age[0].1 >= 3_600.0, "{age:?}");

        drop(stale);
        let age = ages(&registry);
        assert_eq!(age.len(), 1);
        assert!(age[0].1 < 60.0, "the ended target still counts: {age:?}");

        drop(live);
        assert_eq!(ages(&registry), []);
    }
}
