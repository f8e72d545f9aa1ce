//! The Prometheus registry, the process-wide metrics, and what every stage's metrics share.
//!
//! Each stage registers and owns its metric families beside its code, `register(&Registry) ->
//! Self`: `watcher::metrics`, `publish::metrics` and the API client's `api_requests_total`
//! (`kube::client`); `app` wires them into the one registry created here, which also holds
//! `build_info` and the process collector. Each family resolves its labels once per watch, so the
//! hot path only increments counters, never looks up labels.
//!
//! Names and labels are a public interface (docs/metrics.md): change them only on purpose.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use crate::event::EventType;

/// The prefix of every metric name.
pub(crate) const NAMESPACE: &str = "kube2nats";

pub(crate) fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

/// Removes every series of `family` whose `watch` label is `watch`: a watch a reload removed
/// leaves `/metrics` (added back, its counters start again from 0, which Prometheus' `rate`
/// reads as a reset).
pub(crate) fn remove_watch<T: prometheus::core::MetricVecBuilder>(
    family: &prometheus::core::MetricVec<T>,
    watch: &str,
) {
    use prometheus::core::Collector;
    for metrics in family.collect() {
        for metric in metrics.get_metric() {
            let labels: std::collections::HashMap<&str, &str> = metric
                .get_label()
                .iter()
                .map(|label| (label.name(), label.value()))
                .collect();
            if labels.get("watch") == Some(&watch) {
                let _ = family.remove(&labels);
            }
        }
    }
}

/// Registers a counter family.
pub(crate) fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(opts(name, help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

/// Registers a gauge family.
pub(crate) fn gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(opts(name, help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

/// The registry every stage registers into.
#[derive(Clone)]
pub struct Metrics {
    pub(crate) registry: Registry,
}

impl Metrics {
    /// Creates a fresh registry holding the process collector and `build_info`; the stages add
    /// theirs.
    pub fn new() -> prometheus::Result<Metrics> {
        let registry = Registry::new();
        register_build_info(&registry)?;
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Metrics { registry })
    }

    /// The registry rendered in the Prometheus text format.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        prometheus::TextEncoder::new()
            .encode_to_string(&families)
            .unwrap_or_else(|e| format!("# encoding metrics failed: {e}\n"))
    }
}

/// The git revision the binary was built from, or `unknown` (see build.rs).
pub const REVISION: &str = env!("KUBE2NATS_REVISION");

/// `build_info{version, revision}`, always 1: which build runs.
fn register_build_info(registry: &Registry) -> prometheus::Result<()> {
    let build_info = IntGaugeVec::new(
        opts(
            "build_info",
            "Always 1; the labels say which build runs: its version and git revision (unknown when built outside a git checkout).",
        ),
        &["version", "revision"],
    )?;
    registry.register(Box::new(build_info.clone()))?;
    build_info
        .with_label_values(&[env!("CARGO_PKG_VERSION"), REVISION])
        .set(1);
    Ok(())
}

/// One watch's counters of a `{watch, type}` family, one per event type.
#[derive(Clone)]
pub(crate) struct ByType([IntCounter; 3]);

impl ByType {
    pub(crate) fn new(family: &IntCounterVec, watch: &str) -> ByType {
        ByType(EventType::ALL.map(|t| family.with_label_values(&[watch, t.as_str()])))
    }

    pub(crate) fn inc(&self, t: EventType) {
        let i = match t {
            EventType::Added => 0,
            EventType::Modified => 1,
            EventType::Deleted => 2,
        };
        self.0[i].inc();
    }
}

/// Whether every target (namespace) of one watch has completed its list: `watch_synced`, and
/// what `/readyz` checks.
#[derive(Clone)]
pub(crate) struct WatchSync {
    pub(crate) watch: Arc<str>,
    synced: IntGauge,
    unsynced_targets: Arc<AtomicUsize>,
    /// `watch_served`: 0 while the watch's resource is not served (docs/troubleshooting.md).
    served: Option<IntGauge>,
}

impl WatchSync {
    /// `targets` independent list+watch loops, none synced yet.
    pub(crate) fn new(watch: Arc<str>, synced: IntGauge, targets: usize) -> WatchSync {
        synced.set(0);
        WatchSync {
            watch,
            synced,
            unsynced_targets: Arc::new(AtomicUsize::new(targets)),
            served: None,
        }
    }

    /// Reports in `served` whether the watch's resource is served; readiness reads it.
    pub(crate) fn with_served(mut self, served: IntGauge) -> WatchSync {
        self.served = Some(served);
        self
    }

    /// `watch_served`, where the watch reports it.
    pub(crate) fn served(&self) -> Option<&IntGauge> {
        self.served.as_ref()
    }

    /// False while the watch's resource is not served (its CRD not installed, or deleted).
    pub(crate) fn is_served(&self) -> bool {
        self.served.as_ref().is_none_or(|s| s.get() == 1)
    }

    /// One target of this watch finished its list (`true`) or lost its sync (`false`).
    pub(crate) fn set_target_synced(&self, synced: bool) {
        let unsynced = if synced {
            self.unsynced_targets.fetch_sub(1, Ordering::SeqCst) - 1
        } else {
            self.unsynced_targets.fetch_add(1, Ordering::SeqCst) + 1
        };
        self.synced.set(i64::from(unsynced == 0));
    }

    /// The watch no longer runs (this replica stood down): `watch_synced` is 0 until it runs again.
    pub(crate) fn clear(&self) {
        self.synced.set(0);
    }

    /// True when every target of the watch is synced.
    pub(crate) fn is_synced(&self) -> bool {
        self.unsynced_targets.load(Ordering::SeqCst) == 0
    }
}
