//! Wiring: builds every stage from the validated configuration, runs them, and shuts them down in
//! order.
//!
//! Start-up order: the API server's credentials first (no cluster found is an error before
//! anything claims to serve), metrics and the HTTP endpoints (so probes answer from the first
//! second), then NATS (connecting in the background), then the API client, discovery (retried while the
//! API server is unreachable) and one task per watch target; a watch whose resource discovery does
//! not list waits for it (docs/troubleshooting.md) while the others run. Shutdown order: readiness goes false,
//! watches stop at an event boundary and publish what is in flight, NATS is drained; all within
//! the grace period.
//!
//! With leader election, a replica is warm (discovery, RBAC check, stream, NATS) before it stands
//! by, and runs the watch targets only for the terms it holds the Lease ([`crate::leader`]); a
//! lost term stops every watch task at once, a shutdown settles them before the Lease is released.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::budget::Budget;
use crate::config::{BackoffConfig, Config, InitialState, NatsMode, PayloadMode, WatchConfig};
use crate::event::EventType;
use crate::kube::client::register_api_requests;
use crate::kube::credentials;
use crate::kube::discovery::Discovery;
use crate::kube::ApiClient;
use crate::leader::{Candidate, Elector, LeaderMetrics};
use crate::mirror::metrics::{MirrorFamilies, MirrorMetrics};
use crate::mirror::{Mirror, MirrorBucket};
use crate::noise::NoiseControl;
use crate::publish::metrics::{PublishFamilies, PublishMetrics};
use crate::publish::{connect, MessageBuilder, MessageSpec, Nats, Outbox};
use crate::scope::{self, Scope};
use crate::state::{target_key, StateMetrics, StateStore};
use crate::telemetry::http::{self, Readiness};
use crate::telemetry::metrics::{Metrics, WatchSync};
use crate::telemetry::target::TargetGauges;
use crate::watcher::machine::{Machine, Target};
use crate::watcher::metrics::{WatchFamilies, WatchMetrics};
use crate::watcher::supervise::supervise;
use crate::watcher::NamespaceWatcher;
use crate::watcher::{ListSlots, WatchParts, WatchTask};
use plan::{check_rbac, check_rbac_late, plan, Plans, Waiting, WatchPlan};

mod plan;

/// How long the NATS connection may take to drain at shutdown, after the watches' grace period
/// and [`WATCHES_STOP_MARGIN`]: enough for a reachable server, and keeps the whole shutdown, the
/// HTTP connections' quarter second included, within grace period + 2 s.
const NATS_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the watches may take to stop past the grace period: aborting the tasks that
/// exceeded it and releasing the Lease ([`crate::leader`] bounds the release below this).
const WATCHES_STOP_MARGIN: Duration = Duration::from_millis(500);

/// A running kube2nats.
pub struct Daemon {
    pub metrics: Metrics,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub http_addr: SocketAddr,
    shutdown: CancellationToken,
    main: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Daemon {
    /// Asks every task to stop.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Waits until the daemon has stopped: after [`shutdown`](Self::shutdown), or on a fatal error.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.main.await.context("kube2nats main task panicked")?
    }
}

/// Every stage's metric families, registered into the one registry.
struct StageMetrics {
    watch: WatchFamilies,
    publish: PublishFamilies,
    api_requests: prometheus::IntCounterVec,
    state: StateMetrics,
    leader: LeaderMetrics,
    mirror: MirrorFamilies,
}

impl StageMetrics {
    fn register(registry: &prometheus::Registry) -> prometheus::Result<StageMetrics> {
        Ok(StageMetrics {
            watch: WatchFamilies::register(registry)?,
            publish: PublishFamilies::register(registry)?,
            api_requests: register_api_requests(registry)?,
            state: StateMetrics::register(registry)?,
            leader: LeaderMetrics::register(registry)?,
            mirror: MirrorFamilies::register(registry)?,
        })
    }
}

/// Runs kube2nats until `shutdown` resolves (SIGTERM in production, anything in tests), or until
/// a fatal error (a refused RBAC check with `rbac_check = "fail"`) stops it.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let mut daemon = start(config).await?;
    tokio::select! {
        () = shutdown => {
            daemon.shutdown();
            daemon.wait().await
        }
        stopped = &mut daemon.main => stopped.context("kube2nats main task panicked")?,
    }
}

/// Starts every stage; returns once the HTTP endpoints are bound.
pub async fn start(config: Config) -> anyhow::Result<Daemon> {
    // Before anything is served: without a cluster to watch, the one line that says so is all
    // an operator should see (docs/troubleshooting.md, "Exit codes").
    let endpoint = credentials::resolve(&config.kubernetes, |name| std::env::var(name).ok())
        .context("resolving the Kubernetes API credentials")?;
    let metrics = Metrics::new().context("registering metrics")?;
    let stages = StageMetrics::register(&metrics.registry).context("registering metrics")?;
    let shutdown = CancellationToken::new();
    let readiness = Arc::new(Readiness::new(
        stages.publish.nats_connected.clone(),
        shutdown.clone(),
    ));
    readiness.set_mirror_repairs(stages.mirror.repairs.clone());
    readiness.set_state(stages.state.clone());
    let listener = http::bind(config.http.listen)
        .await
        .with_context(|| format!("binding the HTTP listener on {}", config.http.listen))?;
    let http_addr = listener
        .local_addr()
        .context("reading the HTTP listener's address")?;
    let http_stop = CancellationToken::new();
    let http_task = tokio::spawn(http::serve(
        listener,
        config.http.max_connections,
        metrics.clone(),
        readiness.clone(),
        http_stop.clone(),
    ));
    tracing::info!(address = %http_addr, "serving /metrics, /healthz and /readyz");

    let nats = connect::connect(&config.nats, stages.publish.nats_connected.clone())
        .await
        .with_context(|| {
            format!(
                "setting up the NATS connection to {}",
                config
                    .nats
                    .servers
                    .iter()
                    .map(|s| crate::redact::url(s))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        })?;
    tracing::info!(api_server = %endpoint.base_url, "Kubernetes API server");
    let client = Arc::new(
        ApiClient::new(
            endpoint,
            config.kubernetes.request_timeout,
            stages.api_requests.clone(),
        )
        .context("building the Kubernetes API client")?,
    );

    let main = {
        let shutdown = shutdown.clone();
        let bound = config.shutdown.grace_period + WATCHES_STOP_MARGIN;
        tokio::spawn(async move {
            let watches = run_watches(
                config,
                client,
                nats.clone(),
                stages,
                readiness,
                shutdown.clone(),
            );
            let result = stopped_within(watches, &shutdown, bound).await;
            let discard = result
                .as_ref()
                .is_err_and(|e| e.downcast_ref::<QueuedAfterLostTerm>().is_some());
            if !discard {
                drain_nats(&nats).await;
            }
            http_stop.cancel();
            let _ = http_task.await;
            result
        })
    };
    Ok(Daemon {
        metrics,
        http_addr,
        shutdown,
        main,
    })
}

/// Runs `watches` to its end, or, once `shutdown` is cancelled, for at most `bound`: whatever
/// the API server does (blackholed, a Lease release or a request that never answers), the stop
/// stays within the grace period plus [`WATCHES_STOP_MARGIN`] (docs/reliability.md).
async fn stopped_within(
    watches: impl Future<Output = anyhow::Result<()>>,
    shutdown: &CancellationToken,
    bound: Duration,
) -> anyhow::Result<()> {
    tokio::pin!(watches);
    tokio::select! {
        result = &mut watches => return result,
        _ = shutdown.cancelled() => {}
    }
    match tokio::time::timeout(bound, watches).await {
        Ok(result) => result,
        Err(_) => anyhow::bail!(
            "shutdown: the watches did not stop within {bound:?} (the API server not answering?); stopped them"
        ),
    }
}

/// Drains the NATS connection, within [`NATS_DRAIN_TIMEOUT`]: draining waits for the server, and
/// with NATS down it would wait forever.
async fn drain_nats(nats: &Nats) {
    match tokio::time::timeout(NATS_DRAIN_TIMEOUT, nats.client().drain()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "draining the NATS connection failed"),
        Err(_) => {
            tracing::warn!(timeout = ?NATS_DRAIN_TIMEOUT, "NATS connection not drained in time (NATS unreachable?); messages still in the client's buffer are lost")
        }
    }
}

/// Discovers the watched resources (the warm part a standby does too), then runs the watch
/// targets: until shutdown, or, with leader election, for each term this replica holds the Lease.
async fn run_watches(
    config: Config,
    client: Arc<ApiClient>,
    nats: Nats,
    metrics: StageMetrics,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let elector = elector(&config, &client, &metrics)?;
    let Some(discovery) = discover(&client, &config, &shutdown).await? else {
        return Ok(());
    };
    let Plans { resolved, waiting } = plan(&config, &discovery);
    check_rbac(&client, &config, &resolved, elector.as_ref()).await?;
    if !ensure_stream(&config, &nats, &shutdown).await {
        return Ok(());
    }
    let instance = crate::state::owner::instance(
        &config,
        elector.as_ref().map(Elector::lease),
        |name| std::env::var(name).ok(),
        |path| std::fs::read_to_string(path).ok(),
    );
    let Some(state) = StateStore::open(
        &config.state,
        &config.nats.jetstream_api_prefix(),
        nats.client(),
        (&client, instance),
        metrics.state.clone(),
        &shutdown,
    )
    .await?
    else {
        return Ok(());
    };
    let mirror = match config.watches.iter().any(|w| w.mirror) {
        false => None,
        true => match crate::mirror::open(
            &config.mirror,
            &config.nats.jetstream_api_prefix(),
            nats.client(),
            &shutdown,
        )
        .await?
        {
            Some(bucket) => Some(bucket),
            None => return Ok(()),
        },
    };
    let budget = Budget::new(
        config.nats.max_buffered_bytes,
        metrics.publish.buffered_bytes.clone(),
    );
    let list_slots = ListSlots::new(config.kubernetes.max_concurrent_lists);
    let watches = Watches {
        config: &config,
        client: &client,
        nats: &nats,
        budget: &budget,
        list_slots: &list_slots,
        metrics: &metrics,
        readiness: &readiness,
        state: &state,
        plans: &resolved,
        waiting: &waiting,
        mirror: mirror.as_ref(),
    };
    match elector {
        None => {
            metrics.leader.leader.set(1);
            watches.run_term(&shutdown, CancellationToken::new()).await
        }
        Some(elector) => {
            readiness.set_standby();
            elector
                .run(&shutdown, |lost| watches.run_term(&shutdown, lost))
                .await
        }
    }
}

/// The elector, when `[leader_election]` is on.
fn elector(
    config: &Config,
    client: &Arc<ApiClient>,
    metrics: &StageMetrics,
) -> anyhow::Result<Option<Elector>> {
    if !config.leader_election.enabled {
        return Ok(None);
    }
    let candidate = Candidate::resolve(
        config,
        |name| std::env::var(name).ok(),
        |path| std::fs::read_to_string(path).ok(),
    )?;
    Ok(Some(Elector::new(
        client.clone(),
        candidate,
        config.leader_election.clone(),
        metrics.leader.clone(),
    )))
}

/// A term was lost while NATS did not take the messages already handed to the client (not
/// flushed within `within`). Once reconnected the client would publish them after another
/// replica had taken over, out of order with its messages, so kube2nats exits without draining
/// (its pod restarts as a standby) — as client-go's controllers exit on a lost lease.
#[derive(Debug, thiserror::Error)]
#[error("lost the Lease with messages still queued for NATS (not flushed within {within:?}); exiting so that they are never published after another replica took over")]
struct QueuedAfterLostTerm {
    within: Duration,
}

/// What a term of watching needs: everything resolved while warm.
struct Watches<'a> {
    config: &'a Config,
    client: &'a Arc<ApiClient>,
    nats: &'a Nats,
    /// `nats.max_buffered_bytes`, shared by every target.
    budget: &'a Budget,
    /// `kubernetes.max_concurrent_lists`, shared by every target.
    list_slots: &'a ListSlots,
    metrics: &'a StageMetrics,
    readiness: &'a Readiness,
    state: &'a StateStore,
    plans: &'a [WatchPlan<'a>],
    /// The watches whose resource was not served when discovery ran: each term looks for them.
    waiting: &'a [&'a WatchConfig],
    /// The mirror bucket, when a watch is mirrored.
    mirror: Option<&'a MirrorBucket>,
}

/// One term's watch tasks and the metrics they report through.
#[derive(Default)]
struct Term {
    tasks: JoinSet<()>,
    syncs: Vec<WatchSync>,
    watch_metrics: Vec<WatchMetrics>,
    publish_metrics: Vec<PublishMetrics>,
    /// Each target's share of its watch's gauges, for the abandoned count at shutdown.
    targets: Vec<TargetGauges>,
    /// The namespace watcher of each `namespace_selector`, shared by the watches that use it.
    selectors: HashMap<String, watch::Receiver<scope::Selected>>,
}

impl Watches<'_> {
    /// Runs one task per watch target, each with fresh memory, until `shutdown` (then waits for
    /// them to publish what is in flight, within the grace period) or until `lost` (then stops
    /// every task at once: nothing more is published, nothing that publishes is awaited).
    async fn run_term(
        &self,
        shutdown: &CancellationToken,
        lost: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut term = Term::default();
        for plan in self.plans {
            self.spawn(plan, &mut term, shutdown);
        }
        let mut waiting = Waiting::new(self.waiting);
        for watch in self.waiting {
            let placeholder = self.metrics.watch.for_watch(&watch.name, 1);
            if let Some(served) = placeholder.sync.served() {
                served.set(0);
            }
            term.syncs.push(placeholder.sync.clone());
            term.watch_metrics.push(placeholder);
        }
        self.readiness.set_watches(term.syncs.clone());
        tokio::spawn(self.state.clone().purge_removed(self.targets()));
        loop {
            tokio::select! {
                _ = lost.cancelled() => break,
                _ = shutdown.cancelled() => {
                    let tasks = std::mem::take(&mut term.tasks);
                    let grace_period = self.config.shutdown.grace_period;
                    // Losing the Lease while draining drops the drain, and with it the JoinSet,
                    // which aborts every task.
                    tokio::select! {
                        _ = lost.cancelled() => break,
                        drained = drain(tasks, grace_period, &term.targets) => return drained,
                    }
                }
                plans = waiting.resolved(self.client), if !waiting.is_empty() => {
                    for plan in &plans {
                        term.tasks.spawn(check_rbac_late(self.client, plan));
                        let name = &*plan.watch.name;
                        term.syncs.retain(|sync| &*sync.watch != name);
                        self.spawn(plan, &mut term, shutdown);
                    }
                    self.readiness.set_watches(term.syncs.clone());
                }
            }
        }
        term.tasks.abort_all();
        while term.tasks.join_next().await.is_some() {}
        self.flush_after_lost_term().await?;
        self.readiness.set_standby();
        for m in &term.watch_metrics {
            m.clear();
        }
        for m in &term.publish_metrics {
            m.queue_depth.set(0);
        }
        Ok(())
    }

    /// After a lost term, makes sure the messages already handed to the NATS client reach the
    /// server before another replica can take over; if they cannot (NATS unreachable), the
    /// client would send them on reconnecting, behind the next holder's: only ending the process
    /// discards them.
    async fn flush_after_lost_term(&self) -> Result<(), QueuedAfterLostTerm> {
        let election = &self.config.leader_election;
        // Another replica acquires no sooner than lease_duration after this one's last renewal,
        // which is renew_deadline before now: half that margin leaves the flush room to land.
        let within = election
            .lease_duration
            .saturating_sub(election.renew_deadline)
            / 2;
        match tokio::time::timeout(within, self.nats.client().flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(QueuedAfterLostTerm { within }),
        }
    }

    /// The keys of every target the configuration has, the waiting watches' in each scope
    /// they may turn out to have: the state of any other target of these watches is removed.
    fn targets(&self) -> Vec<String> {
        let resolved = self.plans.iter().flat_map(|p| {
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

    /// Starts the tasks of `plan`'s targets (and the namespace watcher of its selector, unless
    /// running) in `term`.
    fn spawn(&self, plan: &WatchPlan<'_>, term: &mut Term, shutdown: &CancellationToken) {
        let name = &plan.watch.name;
        let metrics = self.metrics;
        let watch = metrics.watch.for_watch(name, plan.namespaces.len());
        let publish = metrics
            .publish
            .for_watch(name, metrics.watch.dropped_too_large(name));
        term.syncs.push(watch.sync.clone());
        term.watch_metrics.push(watch.clone());
        term.publish_metrics.push(publish.clone());
        if let Some(served) = watch.sync.served() {
            served.set(1);
        }
        let selected = self.namespace_watcher(plan, (&watch, &publish), term, shutdown);
        for namespace in &plan.namespaces {
            // Every line a watch task logs (its publishes included) carries these fields.
            let span = tracing::info_span!("watch", watch = %name, resource = %plan.resource.plural, namespace = namespace.as_deref().unwrap_or("*"));
            let parts = TaskParts {
                config: self.config,
                client: self.client,
                nats: self.nats,
                budget: self.budget,
                list_slots: self.list_slots,
                state: self.state,
                plan,
                selected: selected.clone(),
                mirror: self
                    .mirror
                    .filter(|_| plan.watch.mirror)
                    .map(|bucket| (bucket, metrics.mirror.for_watch(name))),
            };
            let gauges = TargetGauges::new(
                watch.sync.clone(),
                watch.tracked_objects.clone(),
                publish.queue_depth.clone(),
            );
            term.targets.push(gauges.clone());
            let factory = parts.watch_task(
                namespace.clone(),
                watch.clone(),
                publish.clone(),
                gauges.clone(),
            );
            let start = move |stop| factory.build().run(stop).instrument(span.clone());
            let namespace = namespace.as_deref().unwrap_or("*").to_owned();
            term.tasks.spawn(supervise(
                start,
                watch.clone(),
                gauges,
                namespace,
                shutdown.clone(),
            ));
        }
    }
}

impl Watches<'_> {
    /// Where the matching namespaces of `plan`'s `namespace_selector` arrive: from the watcher
    /// already running for that selector, or from one started now, supervised like a watch task
    /// under this watch's metrics (a crash is logged and counted, and the watcher restarts).
    fn namespace_watcher(
        &self,
        plan: &WatchPlan<'_>,
        metrics: (&WatchMetrics, &PublishMetrics),
        term: &mut Term,
        shutdown: &CancellationToken,
    ) -> Option<watch::Receiver<scope::Selected>> {
        let selector = plan.watch.namespace_selector.as_ref()?;
        if !plan.resource.namespaced {
            return None;
        }
        if let Some(receiver) = term.selectors.get(selector) {
            return Some(receiver.clone());
        }
        let template = TaskParts {
            config: self.config,
            client: self.client,
            nats: self.nats,
            state: self.state,
            plan,
            selected: None,
            budget: self.budget,
            list_slots: self.list_slots,
            mirror: None,
        }
        .target(None);
        let target = Arc::new(NamespaceWatcher::target(selector, &template));
        let (updates, receiver) = NamespaceWatcher::channel();
        let (client, backoff) = (self.client.clone(), self.config.kubernetes.backoff);
        let span = tracing::info_span!("namespaces", watch = %plan.watch.name, namespace_selector = %selector);
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
        term.tasks.spawn(supervise(
            start,
            watch_metrics.clone(),
            gauges,
            "namespaces".to_owned(),
            shutdown.clone(),
        ));
        term.selectors.insert(selector.clone(), receiver.clone());
        Some(receiver)
    }
}

/// What one watch target's task is built from.
struct TaskParts<'a> {
    config: &'a Config,
    client: &'a Arc<ApiClient>,
    nats: &'a Nats,
    budget: &'a Budget,
    list_slots: &'a ListSlots,
    state: &'a StateStore,
    plan: &'a WatchPlan<'a>,
    /// The matching namespaces of the watch's `namespace_selector`.
    selected: Option<watch::Receiver<scope::Selected>>,
    /// The mirror bucket and the watch's mirror metrics, when the watch is mirrored.
    mirror: Option<(&'a MirrorBucket, MirrorMetrics)>,
}

impl TaskParts<'_> {
    fn target(&self, namespace: Option<String>) -> Target {
        let (config, watch) = (self.config, self.plan.watch);
        Target {
            resource: self.plan.resource.clone(),
            namespace,
            label_selector: watch.label_selector.clone(),
            field_selector: watch.field_selector.clone(),
            page_size: config.kubernetes.list_page_size,
            watch_timeout: config.kubernetes.watch_timeout,
            streaming_list: config.kubernetes.streaming_list,
            max_line_bytes: config.kubernetes.max_line_bytes,
            metadata_only: watch.payload == PayloadMode::Metadata,
        }
    }

    /// What starts the task of one target (`namespace: None`: all namespaces): its list+watch
    /// state machine, its outbox and the messages it builds.
    fn watch_task(
        &self,
        namespace: Option<String>,
        watch_metrics: WatchMetrics,
        publish_metrics: PublishMetrics,
        gauges: TargetGauges,
    ) -> TaskFactory {
        let (config, watch) = (self.config, self.plan.watch);
        let target = Arc::new(self.target(namespace));
        // Cluster-scoped objects have no namespace to choose by (`plan` warned).
        let (exclude, selected) = match self.plan.resource.namespaced {
            true => (
                watch.namespaces_exclude.clone().into(),
                self.selected.clone(),
            ),
            false => (Arc::from([]), None),
        };
        let messages = MessageBuilder::new(MessageSpec {
            watch: watch.name.clone(),
            subject: watch.subject.clone(),
            prefix: watch.subject_prefix.clone(),
            cluster: watch.cluster.clone(),
            resource: self.plan.resource.clone(),
            payload: watch.payload,
            format: watch.format,
        });
        let max_in_flight = match &config.nats.mode {
            NatsMode::Core => 1,
            NatsMode::JetStream(js) => js.max_ack_inflight,
        };
        let mirror = self.mirror.as_ref().map(|(bucket, metrics)| MirrorParts {
            bucket: (*bucket).clone(),
            prefix: crate::mirror::key::watch_prefix(&watch.cluster, &self.plan.resource),
            metrics: metrics.clone(),
        });
        TaskFactory {
            mirror,
            client: self.client.clone(),
            state: self.state.clone(),
            watch_name: watch.name.clone(),
            target,
            backoff: config.kubernetes.backoff,
            nats: self.nats.clone(),
            budget: self.budget.clone(),
            list_slots: self.list_slots.clone(),
            max_in_flight,
            messages,
            events: watch.events.clone(),
            noise: NoiseControl::new(&watch.noise),
            initial_state: watch.initial_state,
            watch_metrics,
            publish_metrics,
            gauges,
            exclude,
            selected,
        }
    }
}

/// Everything one target's task is made of, owned, so that its supervisor can build a fresh task
/// after a crash.
struct TaskFactory {
    mirror: Option<MirrorParts>,
    client: Arc<ApiClient>,
    /// Each build loads the target's saved state afresh: a restarted task resumes from the last
    /// checkpoint, which only ever holds what was published.
    state: StateStore,
    watch_name: String,
    target: Arc<Target>,
    backoff: BackoffConfig,
    nats: Nats,
    budget: Budget,
    list_slots: ListSlots,
    max_in_flight: usize,
    messages: MessageBuilder,
    events: Vec<EventType>,
    noise: NoiseControl,
    initial_state: InitialState,
    watch_metrics: WatchMetrics,
    publish_metrics: PublishMetrics,
    gauges: TargetGauges,
    exclude: Arc<[String]>,
    selected: Option<watch::Receiver<scope::Selected>>,
}

impl TaskFactory {
    fn build(&self) -> WatchTask {
        let machine = Machine::new(
            self.client.clone(),
            self.target.clone(),
            Backoff::new(self.backoff),
        )
        .with_budget(self.budget.clone())
        .with_list_slots(self.list_slots.clone())
        .with_served(self.watch_metrics.sync.served().cloned());
        let outbox = Outbox::new(
            self.nats.clone(),
            self.max_in_flight,
            self.publish_metrics.clone(),
            self.gauges.clone(),
        )
        .with_budget(self.budget.clone());
        WatchTask::new(WatchParts {
            machine,
            outbox,
            messages: self.messages.clone(),
            events: self.events.clone(),
            noise: self.noise.clone(),
            initial_state: self.initial_state,
            metrics: self.watch_metrics.clone(),
            saved: self.state.target(&self.watch_name, &self.target),
            gauges: self.gauges.clone(),
            scope: Scope::new(self.exclude.clone(), self.selected.clone()),
        })
        .with_mirror(self.mirror.as_ref().map(|m| {
            Mirror::start(
                &m.bucket,
                m.prefix.clone(),
                self.target.namespace.as_deref(),
                &self.watch_name,
                m.metrics.clone(),
            )
        }))
    }
}

/// What a mirrored target's writer is made of.
struct MirrorParts {
    bucket: MirrorBucket,
    /// The watch's keys: [`crate::mirror::key::watch_prefix`].
    prefix: String,
    metrics: MirrorMetrics,
}

/// Waits for the watch tasks, which publish what they hold and stop, within the grace period;
/// past it, aborts them and says how much was abandoned.
async fn drain(
    mut tasks: JoinSet<()>,
    grace_period: Duration,
    targets: &[TargetGauges],
) -> anyhow::Result<()> {
    tracing::info!(grace_period = ?grace_period, "shutting down: stopping watches and publishing what is in flight");
    let drained = tokio::time::timeout(grace_period, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        let abandoned: i64 = targets.iter().map(TargetGauges::unconfirmed).sum();
        tasks.abort_all();
        anyhow::bail!(
            "shutdown grace period of {:?} exceeded: abandoned {abandoned} message(s) not yet acknowledged or flushed by NATS, held by {} watch task(s); the next start re-announces them (by its list, or from the checkpoint)",
            grace_period,
            tasks.len()
        );
    }
    tracing::info!("all watches stopped; in-flight messages published");
    Ok(())
}

/// Creates (or checks) the JetStream stream when kube2nats manages it, before any watch publishes:
/// publishing into a stream that does not exist yet only fails and backs off. Retries while NATS
/// is unreachable; `false` if shutdown came first.
async fn ensure_stream(config: &Config, nats: &Nats, shutdown: &CancellationToken) -> bool {
    let (NatsMode::JetStream(js), Nats::JetStream { context, .. }) = (&config.nats.mode, nats)
    else {
        return true;
    };
    let Some(stream) = &js.stream else {
        return true;
    };
    let mut backoff = Backoff::new(STREAM_SETUP_BACKOFF);
    loop {
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => return false,
            attempt = connect::ensure_stream(context, stream) => attempt,
        };
        let Err(e) = attempt else { return true };
        let delay = backoff.next_delay();
        tracing::warn!(stream = %stream.name, error = %e, retry_in = ?delay, "cannot create or check the JetStream stream yet; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// Retries of the stream set-up: quick at first (JetStream may still be starting), capped low so a
/// recovered NATS is used within seconds.
const STREAM_SETUP_BACKOFF: BackoffConfig = BackoffConfig::checked(
    Duration::from_millis(100),
    Duration::from_secs(2),
    2.0,
    0.2,
    Duration::from_secs(60),
);

/// Fetches discovery, retrying with backoff while the API server is unreachable. `None` if
/// shutdown came first.
async fn discover(
    client: &ApiClient,
    config: &Config,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Discovery>> {
    let mut backoff = Backoff::new(config.kubernetes.backoff);
    loop {
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            attempt = Discovery::fetch(client) => attempt,
        };
        match attempt {
            Ok(discovery) => return Ok(Some(discovery)),
            Err(e) if e.is_retryable() => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?delay, "API discovery failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(None),
                    () = tokio::time::sleep(delay) => {}
                }
            }
            Err(e) => return Err(e).context("API discovery"),
        }
    }
}
