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
//!
//! A reloaded configuration's watches are applied to the running term, and a later term starts
//! the watches then in force (docs/configuration.md, "Reloading the configuration").
//!
//! The parts: `plan` (discovery, waiting watches), `overlap` (mirrored watches whose keys meet),
//! `rbac_check` (the RBAC self-check), `term_end` (draining at shutdown, the flush after a lost
//! term), `term` (one term's tasks,
//! grouped per watch, and the reloads applied to them), `task` (what one target's task is built
//! from), `reload` (the triggers, the checks and the diff), `stages` (the metric families).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::budget::Budget;
use crate::config::{BackoffConfig, Config, NatsMode};
use crate::kube::credentials;
use crate::kube::discovery::Discovery;
use crate::kube::ApiClient;
use crate::leader::{Candidate, Elector};
use crate::publish::{connect, Nats};
use crate::state::StateStore;
use crate::telemetry::http::{self, Readiness};
use crate::telemetry::logging::human;
use crate::telemetry::metrics::Metrics;
use crate::watcher::ListSlots;
use lazy_bucket::LazyBucket;
pub use overlap::MirrorsOverlap;
use plan::plan;
use rbac_check::check_rbac;
use reload::{ReloadMetrics, Reloader, WatchSet};
use shared::Shared;
use stages::StageMetrics;
use term::TermRunner;
use term_end::QueuedAfterLostTerm;

mod lazy_bucket;
mod overlap;
mod plan;
mod rbac_check;
mod reload;
mod selectors;
mod shared;
mod stages;
mod task;
mod term;
mod term_end;

pub use reload::{ConfigSource, Reload};

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

/// Runs kube2nats until `shutdown` resolves (SIGTERM in production, anything in tests), or until
/// a fatal error (a refused RBAC check with `rbac_check = "fail"`) stops it; reloads the
/// configuration on SIGHUP and when its file changes (docs/configuration.md, "Reloading the
/// configuration") when `reload` is given.
pub async fn run_reloading(
    config: Config,
    reload: Option<Reload>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut daemon = start_reloading(config, reload).await?;
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
    start_reloading(config, None).await
}

/// [`start`], reloading the configuration as `reload` says.
pub(crate) async fn start_reloading(
    config: Config,
    reload: Option<Reload>,
) -> anyhow::Result<Daemon> {
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

    let reload_metrics =
        ReloadMetrics::register(&metrics.registry).context("registering metrics")?;
    let watch_set: WatchSet = config.watches.iter().cloned().map(Arc::new).collect();
    let reloads = match reload {
        Some(reload) => {
            let (reloader, reloads) = Reloader::new(reload, watch_set, reload_metrics);
            tokio::spawn(reloader.run(shutdown.clone()));
            reloads
        }
        // Nothing sends: the term sees the channel closed and stops looking.
        None => watch::channel(watch_set).1,
    };
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
                reloads,
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
            tracing::warn!(timeout = human(NATS_DRAIN_TIMEOUT), "NATS connection not drained in time (NATS unreachable?); messages still in the client's buffer are lost")
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
    reloads: watch::Receiver<WatchSet>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let elector = elector(&config, &client, &metrics)?;
    let Some(discovery) = discover(&client, &config, &shutdown).await? else {
        return Ok(());
    };
    let plans = plan(&reloads.borrow(), &discovery);
    MirrorsOverlap::first(&plans.resolved, &reloads.borrow())?;
    check_rbac(&client, &config, &plans.resolved, elector.as_ref()).await?;
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
            Some(bucket) => Some(bucket.owned_by(state.owner())),
            None => return Ok(()),
        },
    };
    let budget = Budget::new(
        config.nats.max_buffered_bytes,
        metrics.publish.buffered_bytes.clone(),
    );
    let list_slots = ListSlots::new(config.kubernetes.max_concurrent_lists);
    let term = elector
        .as_ref()
        .map_or_else(crate::leader::TermClock::unbounded, Elector::clock);
    let runner = TermRunner {
        shared: Shared {
            config: &config,
            client: &client,
            nats: &nats,
            budget: &budget,
            list_slots: &list_slots,
            state: &state,
            term: &term,
        },
        metrics: &metrics,
        readiness: &readiness,
        current: std::sync::Mutex::new(plans),
        reloads,
        mirror: LazyBucket::new(mirror),
    };
    match elector {
        None => {
            metrics.leader.leader.set(1);
            runner.run_term(&shutdown, CancellationToken::new()).await
        }
        Some(elector) => {
            readiness.set_standby();
            elector
                .run(&shutdown, |lost| runner.run_term(&shutdown, lost))
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
        tracing::warn!(stream = %stream.name, error = %e, retry_in = human(delay), "cannot create or check the JetStream stream yet; retrying");
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
    let resources: Vec<&str> = config.watches.iter().map(|w| w.resource.as_str()).collect();
    let mut backoff = Backoff::new(config.kubernetes.backoff);
    loop {
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            attempt = Discovery::fetch_for(client, &resources) => attempt,
        };
        match attempt {
            Ok(discovery) => return Ok(Some(discovery)),
            Err(e) if e.is_retryable() => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = human(delay), "API discovery failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(None),
                    () = tokio::time::sleep(delay) => {}
                }
            }
            Err(e) => return Err(e).context("API discovery"),
        }
    }
}
