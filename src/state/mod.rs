//! Durable state: checkpoints of each watch target's memory of what it published, kept in NATS
//! JetStream and loaded at start, so that a restart, crash or rollout publishes exactly what
//! changed while kube2nats was down.
//!
//! What is saved per target: the version to resume the watch from, and for every tracked object
//! its uid, last published version, name and namespace (what a synthesized DELETED needs). At
//! start the watch resumes from the saved version (no list, nothing re-published); when the API
//! server no longer has it (410), the relist is diffed against the loaded memory by
//! [`crate::dedupe`], which yields exactly the creates, changes and deletions made meanwhile.
//!
//! ## Where and how
//!
//! One JetStream key-value bucket (`state.bucket`, file storage, history 1) holds, per target
//! (`{cluster}.{instance}.{watch}.{namespace or _all}`; the first two tokens are the owner, see
//! [`owner`], so deployments sharing the bucket never touch each other's keys):
//! - `….a.N` / `….b.N`: two sets of chunks, each a whole snapshot of the memory split into
//!   chunks of at most 256 KiB (see [`codec`]): 100,000 objects are ~5 MB, far more than one
//!   NATS message may carry;
//! - `….manifest`: a small JSON record naming the committed set, its generation, object count,
//!   checksum, the watch's identity, the resume version and the first journal record not in it;
//! - `….j.N`: the [`Journal`]: objects first published, and deletions, since that snapshot,
//!   each record written before the messages it covers, and confirmations of the messages
//!   settled since the record before; folded into the next snapshot and then removed from the
//!   stream (a stream purge, which leaves no per-key marker behind).
//!
//! A snapshot is written to the set the manifest does *not* point at, and the manifest is written
//! last, so a crash or NATS outage mid-write leaves the previous snapshot intact: the manifest is
//! the commit. With history 1 and two fixed sets, storage is bounded by twice the largest snapshot.
//!
//! A snapshot is never held encoded whole: the watch task hands the writer a frozen view of its
//! memory ([`Dedupe::freeze`], which shares the memory's chunks copy-on-write), and the writer
//! encodes and writes it chunk by chunk, releasing each part once written. A checkpoint of a
//! million objects (~44 MB encoded) so costs a chunk or two of memory, plus copies of the parts
//! that events change while it is written. A write that fails half-way has spent its view: the
//! next checkpoint takes a new one.
//!
//! Alternatives weighed: one key per object makes every event a second JetStream write (the CPU
//! budget is +10% per event, a JetStream publish costs about as much as the event itself); a
//! delta log needs compaction and replay logic of its own. A whole snapshot costs O(objects) per
//! checkpoint but nothing per event, and checkpoints are rate-limited (`state.checkpoint_interval`),
//! so the cost is bounded whatever the event rate; a checkpoint in which no object changed (only
//! the resume version moved, e.g. by bookmarks) rewrites only the manifest — under the fence
//! described in [`checkpoint`], so never over chunks that are gone.
//!
//! ## Never ahead of what is published
//!
//! The watch task ([`crate::watcher`]) takes a snapshot only after its outbox is settled (every
//! JetStream publish acknowledged; in core mode, flushed to the server), at a moment when no list
//! is half-way, and hands it to this target's writer task, which writes it in the background.
//! Between checkpoints the journal confirms what is settled (each message's object and version,
//! and the watch position every message before is settled for), so a crash re-publishes at most
//! what was in flight, each message as it was; in JetStream mode their `Nats-Msg-Id`s are the
//! same, so the stream drops them. What a crash must not lose is an object the snapshot does not
//! know (published since): the journal runs *ahead* of publishing for exactly those (and for
//! deletions), and an object known only from it is published once more at the next start. Recently deleted uids (tombstones) are saved with
//! the objects, so a replayed event of an object deleted before the snapshot stays dropped.
//!
//! ## Identity, damage, absence
//!
//! State belongs to the watch's identity (resource, namespace, selectors), stored in the manifest:
//! a watch whose identity changed starts afresh (one log line says so). Damaged state (bad
//! manifest, missing or mismatched chunk, wrong checksum) starts afresh with one error line, never a
//! crash. A bucket that refuses writes (full) does not stop delivery: after a grace the journal is
//! given up and the target is degraded until a checkpoint of every object is stored
//! ([`durability`]). A NATS server without JetStream leaves kube2nats with memory-only state (said once,
//! and `kube2nats_state_durable` is 0); `state.enabled = false` opts out.
//!
//! ## The files
//!
//! This file opens the store ([`StateStore`]: the bucket, the owner prefix) and hands each watch
//! target its [`TargetState`]; [`load`] reads a target's saved state at start (bounded by
//! `state.max_load_bytes`), [`checkpoint`] writes snapshots, [`journal`] the records between
//! them, [`codec`] encodes both, [`bucket`] holds the key layout, [`durability`] the degraded
//! mode of a full bucket, [`owner`] the key prefix, [`metrics`] the `kube2nats_state_*` series.

mod bucket;
mod checkpoint;
pub(crate) mod codec;
mod durability;
mod journal;
mod load;
pub(crate) mod metrics;
pub(crate) mod owner;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use async_nats::Client;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, NATS_SETUP_RETRY};
use crate::config::StateConfig;
use crate::target::Target;
use crate::telemetry::logging::human;
pub(crate) use bucket::{bucket_config, find_or_create, jetstream_context, BucketError};
use bucket::{
    open_bucket, purge, Backend, Bucket, MAX_CHUNK_BYTES, PAYLOAD_HEADROOM, REQUEST_TIMEOUT,
};
pub(crate) use checkpoint::Checkpoints;
pub(crate) use journal::{Journal, Presence};
pub(crate) use load::{Loaded, Start, TargetState};
pub(crate) use metrics::StateMetrics;

/// Where the state of every watch is kept; cheap to clone.
#[derive(Clone)]
pub(crate) struct StateStore {
    backend: Backend,
    /// `{cluster}.{instance}` ([`owner::Owner::prefix`]): starts every key this process reads,
    /// writes or removes.
    prefix: String,
    metrics: StateMetrics,
    checkpoint_interval: Duration,
    /// `state.max_load_bytes`.
    max_load_bytes: usize,
    /// `state.forget_unwatched_after`.
    forget_unwatched_after: Duration,
}

impl StateStore {
    /// Sets up the bucket (creating it, or checking the existing one), retrying while NATS does
    /// not answer, then finds the cluster id that, with `instance`, owns the keys (see
    /// [`owner`]). `None` if shutdown came first. `api_prefix` is the JetStream API's
    /// (`$JS.API`, or a domain's).
    pub(crate) async fn open(
        config: &StateConfig,
        api_prefix: &str,
        client: &Client,
        owner: (&crate::kube::client::ApiClient, String),
        metrics: StateMetrics,
        shutdown: &CancellationToken,
    ) -> Result<Option<StateStore>, owner::OwnerError> {
        let Some(backend) =
            Self::open_backend(config, api_prefix, client, &metrics, shutdown).await
        else {
            return Ok(None);
        };
        let (api, instance) = owner;
        let prefix = match &backend {
            Backend::Durable(bucket) => {
                let cluster_id = config.cluster_id.as_deref();
                let Some(cluster) = owner::cluster_id(cluster_id, api, shutdown).await? else {
                    return Ok(None);
                };
                let owner = owner::Owner { cluster, instance };
                tracing::info!(bucket = %bucket.config.bucket, cluster = %owner.cluster, instance = %owner.instance, "saved state is kept under this cluster id and instance");
                owner.prefix()
            }
            Backend::Disabled | Backend::MemoryOnly => String::new(),
        };
        Ok(Some(StateStore {
            backend,
            prefix,
            metrics,
            checkpoint_interval: config.checkpoint_interval,
            max_load_bytes: config.max_load_bytes,
            forget_unwatched_after: config.forget_unwatched_after,
        }))
    }

    /// `{cluster}.{instance}` of this deployment's keys; `None` without durable state.
    pub(crate) fn owner(&self) -> Option<String> {
        Some(self.prefix.clone()).filter(|p| !p.is_empty())
    }

    async fn open_backend(
        config: &StateConfig,
        api_prefix: &str,
        client: &Client,
        metrics: &StateMetrics,
        shutdown: &CancellationToken,
    ) -> Option<Backend> {
        let store = |backend| backend;
        if !config.enabled {
            metrics.durable.set(0);
            tracing::info!("durable state is off (state.enabled = false): a restart announces every object again");
            return Some(store(Backend::Disabled));
        }
        let context = jetstream_context(api_prefix, client);
        let wanted = bucket_config(
            &config.bucket,
            "kube2nats: what each watch has published (durable state)",
            config.replicas,
        );
        let mut backoff = Backoff::new(NATS_SETUP_RETRY);
        loop {
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return None,
                attempt = open_bucket(&context, &wanted) => attempt,
            };
            let error = match attempt {
                Ok(kv) => {
                    metrics.durable.set(1);
                    let chunk_limit = bucket::chunk_limit(
                        MAX_CHUNK_BYTES,
                        PAYLOAD_HEADROOM,
                        client.server_info().max_payload,
                        kv.stream.cached_info().config.max_message_size,
                    );
                    let bucket = Bucket {
                        context,
                        config: wanted,
                        store: kv,
                        chunk_limit,
                    };
                    return Some(store(Backend::Durable(Arc::new(bucket))));
                }
                Err(BucketError::NoJetStream) => {
                    metrics.durable.set(0);
                    tracing::warn!(bucket = %config.bucket, "the NATS server has no JetStream: state is kept in memory only, and a restart announces every object again (enable JetStream, or set state.enabled = false to silence this)");
                    return Some(store(Backend::MemoryOnly));
                }
                Err(BucketError::Unavailable(e)) => e,
            };
            let delay = backoff.next_delay();
            tracing::warn!(bucket = %config.bucket, error, retry_in = human(delay), "cannot set up the state bucket yet; retrying");
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Forgets the state of targets this configuration does not watch (a namespace dropped
    /// from a watch, a watch removed or renamed) once nothing has written it for
    /// `state.forget_unwatched_after`; younger state is left in place, with a log line each.
    /// Another deployment may share this owner prefix (two releases in one namespace without
    /// `state.instance`), or a rollback may bring the watch back: a start never removes state
    /// that is still being written. `targets` are the keys of the configured targets
    /// ([`target_key`]). Best effort: a failure is logged and looked at again at the next start.
    pub(crate) async fn forget_unwatched(self, targets: Vec<String>) {
        let Backend::Durable(bucket) = &self.backend else {
            return;
        };
        let listing = async {
            use futures_util::TryStreamExt;
            let keys = bucket.store.keys().await.map_err(|e| e.to_string())?;
            keys.try_collect::<Vec<String>>()
                .await
                .map_err(|e| e.to_string())
        };
        let keys = match tokio::time::timeout(4 * REQUEST_TIMEOUT, listing).await {
            Ok(Ok(keys)) => keys,
            Ok(Err(e)) => return tracing::warn!(error = %e, "cannot list the state bucket to forget the state of targets no longer watched"),
            Err(_) => return tracing::warn!("listing the state bucket timed out; the state of targets no longer watched is looked at again at the next start"),
        };
        let own = format!("{}.", self.prefix);
        let configured: std::collections::HashSet<&str> =
            targets.iter().map(String::as_str).collect();
        let mut unwatched: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for key in &keys {
            let Some(owned) = key.strip_prefix(&own) else {
                continue;
            };
            // `{watch}.{namespace}.…`: neither part holds a dot.
            let Some((dot, _)) = owned.match_indices('.').nth(1) else {
                continue;
            };
            let (target, rest) = (&owned[..dot], &owned[dot + 1..]);
            // The manifest and the journal are what a running deployment writes.
            if !configured.contains(target) && (rest == "manifest" || rest.starts_with("j.")) {
                unwatched.entry(target).or_default().push(key);
            }
        }
        let after = self.forget_unwatched_after;
        for (target, written) in unwatched {
            let Some(age) = unwritten_for(&bucket.store, &written).await else {
                continue;
            };
            let unwritten_for = human(age);
            if age < after {
                tracing::info!(key = %target, unwritten_for, forget_after = human(after), "kept the saved state of a target this configuration does not watch: another deployment sharing this owner may write it; it is forgotten once unwritten for state.forget_unwatched_after");
                continue;
            }
            let subjects = format!("{}{own}{target}.>", bucket.store.prefix);
            match purge(&bucket.store, &subjects, None).await {
                Ok(()) => {
                    tracing::info!(key = %target, unwritten_for, "forgot the saved state of a target this configuration does not watch (unwritten for longer than state.forget_unwatched_after)")
                }
                Err(e) => {
                    tracing::warn!(key = %target, error = %e, "cannot remove the saved state of a target no longer watched")
                }
            }
        }
    }

    /// The state of one watch target.
    pub(crate) fn target(&self, watch: &str, target: &Target) -> TargetState {
        TargetState {
            key: format!(
                "{}.{}",
                self.prefix,
                target_key(watch, target.namespace.as_deref())
            ),
            identity: identity(target),
            backend: self.backend.clone(),
            metrics: self.metrics.for_target(watch),
            checkpoint_interval: self.checkpoint_interval,
            max_load_bytes: self.max_load_bytes,
        }
    }
}

/// The prefix of a target's keys in the bucket: `{watch}.{namespace or _all}`.
pub(crate) fn target_key(watch: &str, namespace: Option<&str>) -> String {
    format!("{watch}.{}", namespace.unwrap_or("_all"))
}

/// What a target watches, as stored in its manifest: state saved under another identity describes
/// other objects and is not used.
fn identity(target: &Target) -> String {
    let r = &target.resource;
    format!(
        "resource={}.{} namespace={} labelSelector={} fieldSelector={}",
        r.plural,
        r.group_token(),
        target.namespace.as_deref().unwrap_or("*"),
        target.label_selector.as_deref().unwrap_or(""),
        target.field_selector.as_deref().unwrap_or(""),
    )
}

/// How long ago the newest of `keys` was written; `None` when one cannot be read (logged: the
/// target is looked at again at the next start).
async fn unwritten_for(store: &kv::Store, keys: &[&str]) -> Option<Duration> {
    let mut newest: Option<i128> = None;
    for key in keys {
        match store.entry(*key).await {
            Ok(Some(entry)) => {
                let written = entry.created.unix_timestamp_nanos();
                newest = Some(newest.map_or(written, |n| n.max(written)));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(key, error = %e, "cannot read a saved state key to tell its age");
                return None;
            }
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    let age = i128::try_from(now).ok()?.saturating_sub(newest?);
    Some(Duration::from_nanos(u64::try_from(age).unwrap_or(0)))
}
