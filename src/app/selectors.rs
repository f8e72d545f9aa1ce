//! The namespace watchers of a term: one per `namespace_selector`, shared by the watches that
//! use it, each publishing the matching namespaces (docs/noise-control.md, "`namespace_selector`:
//! namespaces chosen by their labels").

use std::collections::HashMap;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::plan::WatchPlan;
use super::shared::Shared;
use super::task::target;
use crate::backoff::Backoff;
use crate::publish::metrics::PublishMetrics;
use crate::scope;
use crate::telemetry::target::TargetGauges;
use crate::watcher::machine::Machine;
use crate::watcher::metrics::WatchMetrics;
use crate::watcher::supervise::supervise;
use crate::watcher::NamespaceWatcher;

/// Where each running namespace watcher, by selector, publishes the matching set.
#[derive(Default)]
pub(super) struct Selectors(HashMap<String, watch::Sender<scope::Selected>>);

impl Selectors {
    /// Where the matching namespaces of `plan`'s `namespace_selector` arrive: from the watcher
    /// already running for that selector, or from one started now in `tasks`, supervised like a
    /// watch task under this watch's metrics (a crash is logged and counted, and the watcher
    /// restarts). It runs while a watch task reads its set: once a reload has removed or changed
    /// every watch using it, it stops, and its API server watch with it.
    pub(super) fn subscribe(
        &mut self,
        plan: &WatchPlan,
        shared: Shared<'_>,
        metrics: (&WatchMetrics, &PublishMetrics),
        tasks: &mut JoinSet<()>,
        shutdown: &CancellationToken,
    ) -> Option<watch::Receiver<scope::Selected>> {
        let selector = plan.watch.namespace_selector.as_ref()?;
        if !plan.resource.namespaced {
            return None;
        }
        // A closed one (no reader left) may not have stopped yet: a new one is started.
        if let Some(updates) = self.0.get(selector).filter(|u| !u.is_closed()) {
            return Some(updates.subscribe());
        }
        let template = target(plan, &shared.config.kubernetes, None);
        let target = std::sync::Arc::new(NamespaceWatcher::target(selector, &template));
        let (updates, receiver) = NamespaceWatcher::channel();
        let (client, backoff) = (shared.client.clone(), shared.config.kubernetes.backoff);
        let span = tracing::info_span!("namespaces", watch = %plan.watch.name, namespace_selector = %selector);
        self.0.insert(selector.clone(), updates.clone());
        let (unread, unread_selector) = (updates.clone(), selector.clone());
        let start = move |stop| {
            let machine = Machine::new(client.clone(), target.clone(), Backoff::new(backoff));
            let watcher = NamespaceWatcher::new(machine, updates.clone());
            watcher.run(stop).instrument(span.clone())
        };
        let (watch_metrics, publish_metrics) = metrics;
        // A share of the watch's gauges that stays empty: the watcher tracks no objects.
        let gauges = TargetGauges::new(
            watch_metrics.sync.clone(),
            watch_metrics.tracked_objects.clone(),
            publish_metrics.queue_depth.clone(),
        );
        let watcher = supervise(
            start,
            watch_metrics.clone(),
            gauges,
            "namespaces".to_owned(),
            shutdown.clone(),
        );
        tasks.spawn(async move {
            tokio::select! {
                () = watcher => {}
                // Dropping the supervisor aborts the watcher: it holds nothing to drain.
                () = unread.closed() => tracing::info!(selector = %unread_selector, "no watch uses this namespace_selector any more; stopped watching its namespaces"),
            }
        });
        Some(receiver)
    }
}
