//! Leader election: with two or more replicas, only the holder of one Kubernetes Lease publishes.
//!
//! The elector follows client-go's `leaderelection` package — its record, its timings and its
//! clock-skew tolerance:
//! - A replica never compares the Lease's timestamps with its own clock. It remembers the record
//!   it last saw and *when it saw it change*, by its own monotonic clock, and treats the Lease as
//!   held until `leaseDurationSeconds` (the record's) have passed since then without a change.
//!   That instant is taken when the read has returned (client-go's `observedTime`), never before
//!   it was sent: a slow read may carry a renewal made long after it was sent.
//! - A Lease deleted while held is not free: a replica that has seen a holder waits a lease
//!   duration from when it first found the Lease missing before creating a new one (the holder
//!   renewed before the deletion, so its term ends within its renew deadline of that), and the
//!   holder that finds its Lease gone ends its term at once (docs/replicas.md).
//! - Identities are unique per process: the pod name (or the hostname) plus a random suffix, so
//!   two processes with one hostname never both believe they hold the Lease.
//! - Every write is a compare-and-swap on `metadata.resourceVersion` (409 → read again), so of two
//!   replicas that try to take an expired Lease, one wins.
//! - The holder renews every `retry_period`; when it has not managed to renew for
//!   `renew_deadline` — measured from the instant before its last successful renewal was sent —
//!   its term ends at once. Another replica can take over only after seeing that renewal and
//!   waiting `lease_duration`, so the old holder has stopped `lease_duration - renew_deadline`
//!   before the new one starts (5 s with the defaults), as long as the clocks' *rates* agree.
//! - Stopping gracefully, the holder releases the Lease (empty holder, `leaseDurationSeconds: 1`,
//!   as client-go's `ReleaseOnCancel`), so a standby takes over at its next attempt.
//!
//! What a term is for is not this module's business: [`Elector::run`] calls `lead` with a token
//! that is cancelled the moment the term is lost, and `lead` stops every publisher on it
//! (`app`). Metrics: `leader`, `leader_transitions_total`, `lease_renew_failures_total`.

pub(crate) mod clock;
pub(crate) mod lease;

pub(crate) use clock::TermClock;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus::{IntCounter, IntGauge, Registry};
use rand::Rng as _;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ApiSource, Config, LeaderElectionConfig, RETRY_JITTER_FACTOR};
use crate::kube::ApiClient;
use crate::telemetry::metrics::opts;
use lease::{micro_time, Lease, LeaseApi, LeaseError, Record};

/// Environment variable naming this replica (the pod's name, from the downward API).
pub(crate) const POD_NAME_ENV: &str = "POD_NAME";
/// Environment variable naming the pod's namespace (downward API).
pub(crate) const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// The kernel's hostname: a pod's hostname is its name.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";
/// `leaseDurationSeconds` of a released Lease, as client-go writes it.
const RELEASED_LEASE_SECONDS: i64 = 1;
/// The longest a release may take (less if `renew_deadline` is shorter): it comes after the
/// watches' grace period, and the whole stop is bounded (docs/reliability.md). An API server that
/// does not answer in that time leaves the Lease to expire, as after a crash.
const RELEASE_TIMEOUT: Duration = Duration::from_millis(400);

/// The metrics of leader election.
#[derive(Clone)]
pub(crate) struct LeaderMetrics {
    /// 1 while this replica holds the Lease (and publishes).
    pub(crate) leader: IntGauge,
    /// Terms this replica has started.
    pub(crate) transitions: IntCounter,
    /// Renewal attempts of the holder that failed.
    pub(crate) renew_failures: IntCounter,
}

impl LeaderMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<LeaderMetrics> {
        let leader = IntGauge::with_opts(opts(
            "leader",
            "1 while this replica publishes: it holds the Lease, or leader election is off.",
        ))?;
        let transitions = IntCounter::with_opts(opts(
            "leader_transitions_total",
            "Times this replica acquired the Lease and started publishing.",
        ))?;
        let renew_failures = IntCounter::with_opts(opts(
            "lease_renew_failures_total",
            "Attempts of the holder to renew its Lease that failed (API error, timeout, conflict, taken).",
        ))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(transitions.clone()))?;
        registry.register(Box::new(renew_failures.clone()))?;
        Ok(LeaderMetrics {
            leader,
            transitions,
            renew_failures,
        })
    }
}

/// Why leader election cannot start: the environment does not say who or where this replica is.
#[derive(Debug, thiserror::Error)]
#[error("leader_election.namespace: not set, and neither {POD_NAMESPACE_ENV} nor {file} names the pod's namespace; set one of them")]
pub struct NoNamespace {
    file: String,
}

/// Who this replica is and which Lease it competes for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// `holderIdentity`: the pod name (`POD_NAME`), else the hostname (a pod's hostname is its
    /// name), then `_` and 8 random hex digits, as kube-controller-manager appends a UUID: two
    /// processes with the same name (hostNetwork pods, two on one machine) are still two holders.
    pub(crate) identity: String,
    pub(crate) namespace: String,
    pub(crate) lease_name: String,
}

impl Candidate {
    /// Resolves identity and namespace from the configuration and the environment (`env` reads a
    /// variable; `read` a file, so tests need neither).
    pub(crate) fn resolve(
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
        read: impl Fn(&str) -> Option<String>,
    ) -> Result<Candidate, NoNamespace> {
        let election = &config.leader_election;
        let namespace = match &election.namespace {
            Some(namespace) => namespace.clone(),
            None => pod_namespace(config, &env, &read)?,
        };
        let name = non_empty(env(POD_NAME_ENV))
            .or_else(|| non_empty(env("HOSTNAME")))
            .or_else(|| non_empty(read(HOSTNAME_FILE)))
            .unwrap_or_else(|| "kube2nats".to_owned());
        let identity = format!("{name}_{:08x}", rand::rng().random::<u32>());
        Ok(Candidate {
            identity,
            namespace,
            lease_name: election.lease_name.clone(),
        })
    }
}

/// A value from the environment or a file, trimmed; `None` when absent or blank.
fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// The namespace kube2nats runs in: `POD_NAMESPACE`, else the service account's namespace file.
/// Only in-cluster credentials come with that file; elsewhere (a kubeconfig, an explicit URL) the
/// namespace must be configured or given by `POD_NAMESPACE`.
pub(crate) fn pod_namespace(
    config: &Config,
    env: impl Fn(&str) -> Option<String>,
    read: impl Fn(&str) -> Option<String>,
) -> Result<String, NoNamespace> {
    let in_pod = non_empty(env("KUBERNETES_SERVICE_HOST")).is_some();
    let namespace_file = match &config.kubernetes.source {
        // The credentials resolve to the service account only in a pod, with no context named.
        ApiSource::Auto {
            in_cluster,
            context: None,
        } if in_pod => Some(in_cluster.namespace_file.display().to_string()),
        _ => None,
    };
    non_empty(env(POD_NAMESPACE_ENV))
        .or_else(|| non_empty(read(namespace_file.as_deref()?)))
        .ok_or(NoNamespace {
            file: namespace_file.unwrap_or_else(|| "an in-cluster service account".to_owned()),
        })
}

/// The record as this replica last saw it, and when (by the local monotonic clock) it saw it
/// change: the only time that counts, so clock skew between machines does not matter.
struct Observed {
    lease: Lease,
    changed_at: Instant,
}

impl Observed {
    /// How long the record seen holds once written: its own `leaseDurationSeconds`.
    fn lease_duration(&self) -> Duration {
        Duration::from_secs(self.lease.record.lease_duration_seconds.max(0) as u64)
    }
}

/// How one attempt to acquire or renew ended.
enum Attempt {
    /// This replica holds the Lease; it wrote the record at the instant given.
    Held,
    /// Another replica holds a Lease that has not expired.
    HeldBy(String),
    /// The Lease is gone, and this replica saw it held (by itself or another) when it last saw
    /// it: its holder may still be publishing, so nobody creates it until a lease duration after
    /// it was first found missing.
    Deleted,
}

/// Why a term ended.
enum TermEnd {
    /// No renewal succeeded within `renew_deadline`.
    RenewDeadline,
    /// Another replica was found holding the Lease.
    HeldBy(String),
    /// The Lease was deleted while this replica held it.
    Deleted,
}

/// One replica's side of the election.
pub(crate) struct Elector {
    api: LeaseApi,
    identity: String,
    config: LeaderElectionConfig,
    observed: Option<Observed>,
    /// When this replica first found the Lease missing, since it last found it there.
    missing_since: Option<Instant>,
    metrics: LeaderMetrics,
    /// The term's deadline, for the publishers ([`clock`]).
    clock: TermClock,
}

impl Elector {
    pub(crate) fn new(
        client: Arc<ApiClient>,
        candidate: Candidate,
        config: LeaderElectionConfig,
        metrics: LeaderMetrics,
    ) -> Elector {
        metrics.leader.set(0);
        Elector {
            api: LeaseApi::new(client, &candidate.namespace, &candidate.lease_name),
            identity: candidate.identity,
            config,
            observed: None,
            missing_since: None,
            metrics,
            clock: TermClock::ended(),
        }
    }

    /// The term's deadline as this elector moves it: publishers read it before every message.
    pub(crate) fn clock(&self) -> TermClock {
        self.clock.clone()
    }

    /// The Lease this replica competes for: its namespace and name.
    pub(crate) fn lease(&self) -> (&str, &str) {
        self.api.lease()
    }

    /// Alternates standby and terms until `shutdown`: waits to acquire the Lease, runs
    /// `lead(lost)` while renewing it, cancels `lost` the moment renewal misses its deadline (and
    /// goes back to standby once `lead` has returned), and releases the Lease after `lead`
    /// returns on shutdown. `lead` must return promptly once `lost` is cancelled, and on
    /// shutdown only after its publishers have settled.
    pub(crate) async fn run<F, Fut>(
        mut self,
        shutdown: &CancellationToken,
        mut lead: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        tracing::info!(lease = %self.api.describe(), identity = %self.identity, "standby: waiting to acquire the Lease");
        loop {
            let Some(acquired_at) = self.acquire(shutdown).await else {
                return Ok(());
            };
            self.clock
                .hold_until(acquired_at + self.config.renew_deadline);
            self.metrics.leader.set(1);
            self.metrics.transitions.inc();
            tracing::info!(lease = %self.api.describe(), identity = %self.identity, "acquired the Lease: starting the watches");
            let lost = CancellationToken::new();
            let term = lead(lost.clone());
            tokio::pin!(term);
            tokio::select! {
                ended = &mut term => {
                    self.clock.end();
                    self.metrics.leader.set(0);
                    self.release().await;
                    return ended;
                }
                end = self.hold(acquired_at) => {
                    self.clock.end();
                    lost.cancel();
                    let ended = term.await;
                    self.metrics.leader.set(0);
                    self.log_term_end(&end);
                    ended?;
                    if shutdown.is_cancelled() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Standby: tries every `retry_period` (jittered as client-go does) until this replica holds
    /// the Lease; returns the instant before the acquiring write was sent, or `None` on shutdown.
    async fn acquire(&mut self, shutdown: &CancellationToken) -> Option<Instant> {
        let mut last_holder = String::new();
        let mut reported_deleted = false;
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return None,
                attempt = self.try_acquire_or_renew() => attempt,
            };
            match attempt {
                Ok(Attempt::Held) => return Some(started),
                Ok(Attempt::Deleted) => {
                    if !reported_deleted {
                        tracing::warn!(lease = %self.api.describe(), lease_duration = ?self.config.lease_duration, "the Lease was deleted while held; waiting out the last holder's lease duration before creating it");
                        reported_deleted = true;
                    }
                }
                Ok(Attempt::HeldBy(holder)) => {
                    reported_deleted = false;
                    if holder != last_holder {
                        tracing::info!(lease = %self.api.describe(), holder = %holder, "the Lease is held by another replica; standing by");
                        last_holder = holder;
                    }
                }
                Err(e) => {
                    tracing::warn!(lease = %self.api.describe(), error = %e, "cannot read or acquire the Lease; retrying")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                () = tokio::time::sleep(self.jittered_retry()) => {}
            }
        }
    }

    /// The one line that says why a term ended, once publishing has stopped.
    fn log_term_end(&self, end: &TermEnd) {
        let lease = self.api.describe();
        match end {
            TermEnd::RenewDeadline => {
                tracing::warn!(lease = %lease, renew_deadline = ?self.config.renew_deadline, "could not renew the Lease within the renew deadline: stopped publishing; back to standby")
            }
            TermEnd::HeldBy(holder) => {
                tracing::warn!(lease = %lease, holder = %holder, "another replica holds the Lease: stopped publishing; back to standby")
            }
            TermEnd::Deleted => {
                tracing::warn!(lease = %lease, "the Lease was deleted: stopped publishing; back to standby")
            }
        }
    }

    /// A term: renews every `retry_period`; returns when `renew_deadline` has passed since the
    /// last successful renewal (an attempt in flight is abandoned at the deadline), or at once
    /// when another replica is found holding the Lease or the Lease is gone.
    async fn hold(&mut self, acquired_at: Instant) -> TermEnd {
        let mut renewed_at = acquired_at;
        loop {
            let deadline = renewed_at + self.config.renew_deadline;
            tokio::time::sleep_until((Instant::now() + self.config.retry_period).min(deadline))
                .await;
            let started = Instant::now();
            if started >= deadline {
                return TermEnd::RenewDeadline;
            }
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(Attempt::Held)) => {
                    renewed_at = started;
                    self.clock.hold_until(started + self.config.renew_deadline);
                }
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    self.metrics.renew_failures.inc();
                    return TermEnd::HeldBy(holder);
                }
                Ok(Ok(Attempt::Deleted)) => {
                    self.metrics.renew_failures.inc();
                    return TermEnd::Deleted;
                }
                Ok(Err(e)) => {
                    self.metrics.renew_failures.inc();
                    tracing::warn!(lease = %self.api.describe(), error = %e, left = ?deadline.saturating_duration_since(Instant::now()), "renewing the Lease failed; retrying until the renew deadline");
                }
                Err(_elapsed) => {
                    self.metrics.renew_failures.inc();
                    return TermEnd::RenewDeadline;
                }
            }
        }
    }

    /// client-go's `tryAcquireOrRenew`: one read-and-write round.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let now = Instant::now();
        let wall = micro_time(SystemTime::now());
        // Fast path of the holder: write over the record it last saw, without reading first.
        if self.is_leader() && self.lease_valid(now) {
            if let Some(observed) = &self.observed {
                let record = self.renewal(&observed.lease.record, &wall);
                match self.api.update(&observed.lease, &record).await {
                    Ok(lease) => return Ok(self.wrote(lease, now)),
                    Err(e) => {
                        tracing::debug!(lease = %self.api.describe(), error = %e, "optimistic renewal failed; reading the Lease")
                    }
                }
            }
        }
        let Some(current) = self.api.get().await? else {
            let seen = Instant::now();
            let missing_since = *self.missing_since.get_or_insert(seen);
            if self.may_still_be_held(missing_since, seen) {
                return Ok(Attempt::Deleted);
            }
            let record = self.first_record(&wall);
            let lease = self.api.create(&record).await?;
            return Ok(self.wrote(lease, now));
        };
        self.missing_since = None;
        // client-go's observedTime: when the read returned. The record may have been written at
        // any moment while the request was on its way, so the instant before sending it could
        // be long before the holder's renewal and end its lease early here.
        let seen = Instant::now();
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.lease.record != current.record);
        match &mut self.observed {
            Some(o) if !changed => o.lease = current.clone(),
            _ => {
                self.observed = Some(Observed {
                    lease: current.clone(),
                    changed_at: seen,
                })
            }
        }
        let holder = &current.record.holder_identity;
        if !holder.is_empty() && self.lease_valid(now) && !self.is_leader() {
            return Ok(Attempt::HeldBy(holder.clone()));
        }
        let record = if self.is_leader() {
            self.renewal(&current.record, &wall)
        } else {
            Record {
                lease_transitions: current.record.lease_transitions + 1,
                ..self.first_record(&wall)
            }
        };
        let lease = self.api.update(&current, &record).await?;
        Ok(self.wrote(lease, now))
    }

    /// Gives the Lease up after a graceful stop, so a standby takes over at its next attempt
    /// instead of after `lease_duration`; only if this replica still holds it (compare-and-swap).
    async fn release(&mut self) {
        let Some(observed) = self.observed.as_ref().filter(|_| self.is_leader()) else {
            return;
        };
        let wall = micro_time(SystemTime::now());
        let record = Record {
            holder_identity: String::new(),
            lease_duration_seconds: RELEASED_LEASE_SECONDS,
            acquire_time: Some(wall.clone()),
            renew_time: Some(wall),
            lease_transitions: observed.lease.record.lease_transitions,
        };
        let deadline = self.config.renew_deadline.min(RELEASE_TIMEOUT);
        match tokio::time::timeout(deadline, self.api.update(&observed.lease, &record)).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.api.describe(), "released the Lease"),
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.api.describe(), error = %e, "could not release the Lease; another replica takes over when it expires")
            }
            Err(_) => {
                tracing::warn!(lease = %self.api.describe(), "releasing the Lease timed out; another replica takes over when it expires")
            }
        }
    }

    /// The record of a replica taking the Lease over.
    fn first_record(&self, wall: &str) -> Record {
        Record {
            holder_identity: self.identity.clone(),
            lease_duration_seconds: self.config.lease_duration.as_secs() as i64,
            acquire_time: Some(wall.to_owned()),
            renew_time: Some(wall.to_owned()),
            lease_transitions: 0,
        }
    }

    /// The record of the holder renewing: acquire time and transitions kept.
    fn renewal(&self, current: &Record, wall: &str) -> Record {
        Record {
            acquire_time: current.acquire_time.clone(),
            lease_transitions: current.lease_transitions,
            ..self.first_record(wall)
        }
    }

    fn wrote(&mut self, lease: Lease, at: Instant) -> Attempt {
        self.missing_since = None;
        self.observed = Some(Observed {
            lease,
            changed_at: at,
        });
        Attempt::Held
    }

    fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|o| o.lease.record.holder_identity == self.identity)
    }

    /// Whether a Lease found missing since `missing_since` may still be held: the record last
    /// seen named a holder, and a lease duration (its own) has not passed since the Lease was
    /// first found missing. The holder's last renewal came before the deletion, so its term ends
    /// within the renew deadline of that, before then. Counted from when this replica last saw
    /// the record change instead, a standby whose reads had stopped (a process starved of CPU
    /// for a lease duration) would take a Lease deleted while it was not looking at once, beside
    /// a holder that renews until its next attempt. A replica that never saw the Lease takes a
    /// missing one at once, as client-go does (docs/replicas.md).
    fn may_still_be_held(&self, missing_since: Instant, now: Instant) -> bool {
        self.observed.as_ref().is_some_and(|o| {
            !o.lease.record.holder_identity.is_empty() && now < missing_since + o.lease_duration()
        })
    }

    /// Whether the record last seen is still in force by the local clock.
    fn lease_valid(&self, now: Instant) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|o| o.changed_at + o.lease_duration() > now)
    }

    /// client-go's `wait.JitterUntil(…, RetryPeriod, JitterFactor, …)`: spreads standbys apart.
    fn jittered_retry(&self) -> Duration {
        let retry = self.config.retry_period;
        retry + retry.mul_f64(rand::rng().random_range(0.0..RETRY_JITTER_FACTOR))
    }
}

#[cfg(test)]
mod tests;
