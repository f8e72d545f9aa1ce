//! One term of watching: a task per watch target, the watches waiting for their resource, and the
//! configuration reloads applied while it runs (docs/configuration.md, "Reloading the
//! configuration"). Each watch's tasks form a group with their own stop, so that a reload stops
//! the watches it removes or changes (drained and checkpointed as at shutdown) and starts the
//! added and changed ones, while the tasks of every other watch run on untouched.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::lazy_bucket::LazyBucket;
use super::overlap::MirrorsOverlap;
use super::plan::{plan, Plans, Waiting, WatchPlan};
use super::rbac_check::check_rbac_late;
use super::reload::{diff_watches, WatchSet};
use super::selectors::Selectors;
use super::shared::Shared;
use super::stages::StageMetrics;
use super::task::{TaskFactory, WatchChoices};
use super::term_end::{drain, flush_after_lost_term, join_within};
use crate::config::WatchConfig;
use crate::filter::Filter;
use crate::kube::discovery::Discovery;
use crate::publish::metrics::PublishMetrics;
use crate::state::target_key;
use crate::telemetry::http::Readiness;
use crate::telemetry::logging::human;
use crate::telemetry::metrics::WatchSync;
use crate::telemetry::target::TargetGauges;
use crate::watcher::metrics::WatchMetrics;
use crate::watcher::supervise::supervise;

/// Runs the terms of watching, one at a time; holds what each term needs, resolved while warm.
pub(super) struct TermRunner<'a> {
    pub(super) shared: Shared<'a>,
    pub(super) metrics: &'a StageMetrics,
    pub(super) readiness: &'a Readiness,
    /// The watches of the configuration in force, which each term starts.
    pub(super) current: Mutex<Plans>,
    /// The watches of each reloaded configuration.
    pub(super) reloads: watch::Receiver<WatchSet>,
    /// The mirror bucket, opened once a watch is mirrored.
    pub(super) mirror: LazyBucket,
}

/// One watch's tasks in a term: stopped on their own when a reload removes or changes the watch.
struct Group {
    tasks: JoinSet<()>,
    /// A child of the shutdown: the tasks drain and checkpoint on either.
    stop: CancellationToken,
    /// Each target's share of the watch's gauges, for the abandoned count.
    targets: Vec<TargetGauges>,
    watch_metrics: WatchMetrics,
    publish_metrics: PublishMetrics,
    /// The watch's plan, when it runs mirrored: no other mirrored watch may share its keys.
    mirrored: Option<WatchPlan>,
}

impl Group {
    /// The watch no longer runs here: its gauges say so.
    fn clear_metrics(&self) {
        self.watch_metrics.clear();
        self.publish_metrics.queue_depth.set(0);
    }
}

/// One term's watch tasks and the metrics they report through.
#[derive(Default)]
struct Term {
    /// The running watches, by name (ordered, so that `/readyz` lists them in a stable order).
    groups: BTreeMap<String, Group>,
    /// The metrics of each watch waiting for its resource.
    waiting: BTreeMap<String, WatchMetrics>,
    /// What serves every watch: the namespace watchers, the late RBAC checks.
    shared: JoinSet<()>,
    /// The namespace watcher of each `namespace_selector`, shared by the watches that use it.
    selectors: Selectors,
}

impl Term {
    fn syncs(&self) -> Vec<WatchSync> {
        let running = self.groups.values().map(|g| g.watch_metrics.sync.clone());
        let waiting = self.waiting.values().map(|m| m.sync.clone());
        running.chain(waiting).collect()
    }

    fn targets(&self) -> Vec<TargetGauges> {
        self.groups
            .values()
            .flat_map(|g| g.targets.iter().cloned())
            .collect()
    }

    /// Every task of the term, the shared ones last.
    fn task_sets(&mut self) -> Vec<JoinSet<()>> {
        let groups = self
            .groups
            .values_mut()
            .map(|g| std::mem::take(&mut g.tasks));
        let shared = std::iter::once(std::mem::take(&mut self.shared));
        groups.chain(shared).collect()
    }

    /// `watch` waits for its resource: `watch_served` 0, and `/readyz` names it.
    fn wait_for(&mut self, metrics: &StageMetrics, watch: &WatchConfig) {
        let placeholder = metrics.watch.for_watch(&watch.name, 1);
        if let Some(served) = placeholder.sync.served() {
            served.set(0);
        }
        self.waiting.insert(watch.name.clone(), placeholder);
    }

    /// Stops the tasks of the watches named (drained within `grace_period`, as at shutdown).
    async fn stop<'n>(&mut self, names: impl Iterator<Item = &'n str>, grace_period: Duration) {
        let mut stopping = Vec::new();
        for name in names {
            if let Some(placeholder) = self.waiting.remove(name) {
                placeholder.clear();
            }
            if let Some(group) = self.groups.remove(name) {
                group.stop.cancel();
                stopping.push(group);
            }
        }
        let targets: Vec<TargetGauges> = stopping
            .iter()
            .flat_map(|g| g.targets.iter().cloned())
            .collect();
        let mut sets: Vec<JoinSet<()>> = stopping
            .iter_mut()
            .map(|g| std::mem::take(&mut g.tasks))
            .collect();
        if let Err(abandoned) = join_within(&mut sets, grace_period, &targets).await {
            tracing::warn!(grace_period = human(grace_period), abandoned, "watches stopped by the reload did not drain within the grace period; their unconfirmed messages are re-announced when they start again");
        }
        for group in &stopping {
            group.clear_metrics();
        }
        // Finished late RBAC checks and namespace watchers need not be kept.
        while self.shared.try_join_next().is_some() {}
    }
}

impl TermRunner<'_> {
    fn current(&self) -> MutexGuard<'_, Plans> {
        // Every writer leaves the plans whole, so a poisoned lock still holds valid ones.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one task per watch target, each with fresh memory, until `shutdown` (then waits for
    /// them to publish what is in flight, within the grace period) or until `lost` (then stops
    /// every task at once: nothing more is published, nothing that publishes is awaited).
    pub(super) async fn run_term(
        &self,
        shutdown: &CancellationToken,
        lost: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut reloads = self.reloads.clone();
        // A reload while this replica stood by: the term starts the watches now in force.
        let desired = reloads.borrow_and_update().clone();
        self.update_current(&desired, shutdown).await;
        let current = self.current().clone();
        let mut term = Term::default();
        for plan in &current.resolved {
            self.spawn(plan, &mut term, shutdown);
        }
        let mut waiting = Waiting::new(&current.waiting);
        for watch in &current.waiting {
            term.wait_for(self.metrics, watch);
        }
        self.readiness.set_watches(term.syncs());
        tokio::spawn(
            self.shared
                .state
                .clone()
                .forget_unwatched(current.targets()),
        );
        let mut reloading = true;
        loop {
            tokio::select! {
                _ = lost.cancelled() => break,
                _ = shutdown.cancelled() => {
                    let sets = term.task_sets();
                    let targets = term.targets();
                    let grace_period = self.shared.config.shutdown.grace_period;
                    // Losing the Lease while draining drops the drain, and with it the JoinSets,
                    // which aborts every task.
                    tokio::select! {
                        _ = lost.cancelled() => break,
                        drained = drain(sets, grace_period, &targets, self.shared.nats) => return drained,
                    }
                }
                plans = waiting.resolved(self.shared.client), if !waiting.is_empty() => {
                    for plan in &plans {
                        term.shared.spawn(check_rbac_late(self.shared.client, plan));
                        term.waiting.remove(&plan.watch.name);
                        self.spawn(plan, &mut term, shutdown);
                    }
                    self.readiness.set_watches(term.syncs());
                }
                changed = reloads.changed(), if reloading => {
                    let Ok(()) = changed else {
                        reloading = false;
                        continue;
                    };
                    let desired = reloads.borrow_and_update().clone();
                    tokio::select! {
                        _ = lost.cancelled() => break,
                        () = self.reload(&desired, &mut term, &mut waiting, shutdown) => {}
                    }
                }
            }
        }
        for mut set in term.task_sets() {
            set.abort_all();
            while set.join_next().await.is_some() {}
        }
        flush_after_lost_term(self.shared.config, self.shared.nats).await?;
        self.readiness.set_standby();
        for group in term.groups.values() {
            group.clear_metrics();
        }
        for placeholder in term.waiting.values() {
            placeholder.clear();
        }
        Ok(())
    }

    /// Applies a reloaded configuration's watches to the running term: the removed and changed
    /// ones stop (drained and checkpointed), the added and changed ones start as at start
    /// (discovery, waiting for an unserved resource, the RBAC check); the others are not touched.
    async fn reload(
        &self,
        desired: &WatchSet,
        term: &mut Term,
        waiting: &mut Waiting,
        shutdown: &CancellationToken,
    ) {
        let diff = diff_watches(&self.current().watches(), desired);
        if diff.is_empty() {
            return;
        }
        let leaving: Vec<&str> = diff.leaving().collect();
        waiting.forget(&leaving);
        term.stop(
            leaving.iter().copied(),
            self.shared.config.shutdown.grace_period,
        )
        .await;
        // Readiness no longer waits for the watches stopped.
        self.readiness.set_watches(term.syncs());
        for name in &diff.removed {
            self.metrics.watch.forget(name);
            self.metrics.publish.forget(name);
            self.metrics.mirror.forget(name);
            tracing::info!(watch = %name, "watch removed by the reload: stopped; its saved state is kept (docs/configuration.md, \"Reloading the configuration\")");
        }
        let arrived = self.update_current(desired, shutdown).await;
        for plan in &arrived.resolved {
            term.shared.spawn(check_rbac_late(self.shared.client, plan));
            self.spawn(plan, term, shutdown);
        }
        for watch in &arrived.waiting {
            term.wait_for(self.metrics, watch);
        }
        waiting.add(&arrived.waiting);
        self.readiness.set_watches(term.syncs());
        let targets = self.current().targets();
        tokio::spawn(self.shared.state.clone().forget_unwatched(targets));
    }

    /// Makes `desired` the watches in force: the unchanged keep their plans, the added and
    /// changed are resolved through discovery (or wait for their resource, also when discovery
    /// fails now: waiting runs it again). Returns the plans of those.
    async fn update_current(&self, desired: &WatchSet, shutdown: &CancellationToken) -> Plans {
        let diff = diff_watches(&self.current().watches(), desired);
        if diff.is_empty() {
            return Plans::default();
        }
        let arriving = diff.arriving();
        let names: Vec<&str> = arriving.iter().map(|w| w.resource.as_str()).collect();
        let arrived = match Discovery::fetch_for(self.shared.client, &names).await {
            Ok(discovery) => plan(&arriving, &discovery),
            Err(e) => {
                tracing::warn!(error = %e, "API discovery for the reloaded watches failed; they wait for it");
                Plans {
                    resolved: Vec::new(),
                    waiting: arriving,
                }
            }
        };
        self.mirror.open_for(&arrived, self.shared, shutdown).await;
        let mut current = self.current();
        let leaving: Vec<&str> = diff.leaving().collect();
        current.retain(|name| !leaving.contains(&name));
        current.resolved.extend(arrived.resolved.iter().cloned());
        current.waiting.extend(arrived.waiting.iter().cloned());
        drop(current);
        arrived
    }

    /// Starts the tasks of `plan`'s targets (and the namespace watcher of its selector, unless
    /// running) in `term`, as the watch's group.
    fn spawn(&self, plan: &WatchPlan, term: &mut Term, shutdown: &CancellationToken) {
        let name = &plan.watch.name;
        let metrics = self.metrics;
        let watch = metrics.watch.for_watch(name, plan.namespaces.len());
        let publish = metrics
            .publish
            .for_watch(name, metrics.watch.dropped_too_large(name));
        if let Some(served) = watch.sync.served() {
            served.set(1);
        }
        watch.resource.reading(&plan.resource);
        let selected = term.selectors.subscribe(
            plan,
            self.shared,
            (&watch, &publish),
            &mut term.shared,
            shutdown,
        );
        // One per watch, shared by its namespaces: a run-time error is logged once per watch.
        let filter = plan
            .watch
            .filter
            .clone()
            .map(|expr| Filter::new(expr, name.as_str().into(), watch.filter_errors.clone()));
        let mirror = self.mirror.get().filter(|_| self.may_mirror(plan, term));
        let mut group = Group {
            tasks: JoinSet::new(),
            stop: shutdown.child_token(),
            targets: Vec::new(),
            watch_metrics: watch.clone(),
            publish_metrics: publish.clone(),
            mirrored: mirror.map(|_| plan.clone()),
        };
        let choices = WatchChoices {
            selected,
            filter,
            mirror: mirror.map(|bucket| (bucket.clone(), metrics.mirror.for_watch(name))),
            watch_metrics: watch.clone(),
            publish_metrics: publish.clone(),
        };
        let factory = TaskFactory::new(self.shared, plan, choices);
        for namespace in &plan.namespaces {
            // Every line a watch task logs (its publishes included) carries these fields.
            let span = tracing::info_span!("watch", watch = %name, resource = %plan.resource.plural, namespace = namespace.as_deref().unwrap_or("*"));
            let gauges = TargetGauges::new(
                watch.sync.clone(),
                watch.tracked_objects.clone(),
                publish.queue_depth.clone(),
            );
            group.targets.push(gauges.clone());
            let (factory, target_gauges, target_namespace) =
                (factory.clone(), gauges.clone(), namespace.clone());
            let start = move |stop| {
                let task = factory.build(target_namespace.as_deref(), &target_gauges);
                task.run(stop).instrument(span.clone())
            };
            let namespace = namespace.as_deref().unwrap_or("*").to_owned();
            group.tasks.spawn(supervise(
                start,
                watch.clone(),
                gauges,
                namespace,
                group.stop.clone(),
            ));
        }
        term.groups.insert(name.clone(), group);
    }

    /// Whether `plan`'s watch may be mirrored: it asks for it, and no mirrored watch running
    /// shares its keys. Two that did were refused at start; one arriving later (a reload, a
    /// resource served later) runs without the mirror, logged.
    fn may_mirror(&self, plan: &WatchPlan, term: &Term) -> bool {
        if !plan.watch.mirror {
            return false;
        }
        let running = term.groups.values().filter_map(|g| g.mirrored.as_ref());
        let index = self
            .reloads
            .borrow()
            .iter()
            .position(|w| w.name == plan.watch.name);
        match MirrorsOverlap::find(plan, running, index.unwrap_or_default()) {
            None => true,
            Some(overlap) => {
                tracing::error!(watch = %plan.watch.name, error = %overlap, "not mirrored: another mirrored watch holds these keys (docs/mirror.md, \"Limits\")");
                false
            }
        }
    }
}

impl Plans {
    /// Every watch, resolved or waiting.
    fn watches(&self) -> Vec<Arc<WatchConfig>> {
        let resolved = self.resolved.iter().map(|p| p.watch.clone());
        resolved.chain(self.waiting.iter().cloned()).collect()
    }

    /// Keeps the watches whose name passes `keep`.
    fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.resolved.retain(|p| keep(&p.watch.name));
        self.waiting.retain(|w| keep(&w.name));
    }

    /// The keys of every target the configuration has, the waiting watches' in each scope
    /// they may turn out to have: the state of any other target of these watches is removed.
    fn targets(&self) -> Vec<String> {
        let resolved = self.resolved.iter().flat_map(|p| {
            p.namespaces
                .iter()
                .map(|ns| target_key(&p.watch.name, ns.as_deref()))
        });
        let waiting = self.waiting.iter().flat_map(|w| {
            let namespaces = w.namespaces.iter().map(|ns| Some(ns.as_str()));
            std::iter::once(None)
                .chain(namespaces)
                .map(|ns| target_key(&w.name, ns))
        });
        resolved.chain(waiting).collect()
    }
}
