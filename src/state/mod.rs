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

use async_nats::jetstream::{self, kv};
use async_nats::Client;
use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::backoff::NATS_SETUP_RETRY;
use crate::config::StateConfig;
use crate::dedupe::{Dedupe, SavedVersion};
use crate::event::ResourceVersion;
use crate::target::Target;
use crate::telemetry::logging::human;
use bucket::{
    journal_key, journal_subjects, manifest_key, open_bucket, purge, Bucket, BucketError,
};
pub(crate) use checkpoint::Checkpoints;
use checkpoint::{chunk_key, Mailbox, Writer};
use codec::journal::JournalBatch;
use codec::{CodecError, Fnv, JournalEntry, Manifest, FORMAT};
pub(crate) use journal::Journal;
use journal::JournalTarget;
pub(crate) use metrics::{StateMetrics, TargetMetrics};

/// The largest chunk: far below NATS' default `max_payload` (1 MiB), and small enough that
/// loading holds little more than the memory being rebuilt.
const MAX_CHUNK_BYTES: usize = 256 * 1024;
/// Room left under the server's `max_payload` for subject and headers.
const PAYLOAD_HEADROOM: usize = 4 * 1024;
/// Journal records requested ahead while loading: 100,000 records one round trip at a time
/// took 15.7 s.
const JOURNAL_READ_AHEAD: usize = 32;
/// Timeout of one request to JetStream (a put, a get, a bucket lookup).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
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

#[derive(Clone)]
enum Backend {
    /// `state.enabled = false`.
    Disabled,
    /// The NATS server has no JetStream.
    MemoryOnly,
    Durable(Arc<Bucket>),
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
        let context = jetstream::ContextBuilder::new()
            .api_prefix(api_prefix)
            .timeout(REQUEST_TIMEOUT)
            .build(client.clone());
        let wanted = kv::Config {
            bucket: config.bucket.clone(),
            description: "kube2nats: what each watch has published (durable state)".into(),
            history: 1,
            storage: jetstream::stream::StorageType::File,
            num_replicas: config.replicas,
            ..Default::default()
        };
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

/// What a target starts from.
pub(crate) enum Start {
    /// Saved state: resume the watch from `version`; `dedupe` holds what was published.
    Saved {
        dedupe: Box<Dedupe>,
        version: ResourceVersion,
        /// Whether a checkpoint was loaded; without one, the state is a journal alone, which
        /// names only the objects published, not those a first list tracked silently
        /// (`initial_state = "skip"`).
        checkpointed: bool,
    },
    /// No snapshot, but a journal of objects published by a run that crashed before its first
    /// checkpoint: list, and diff against them (their deletions are announced).
    Journaled { dedupe: Box<Dedupe> },
    /// Nothing usable was saved (the reason is logged).
    Fresh,
}

/// Why saved state was not loaded.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("the state was saved for another configuration of this watch ({saved})")]
    OtherIdentity { saved: String },
    #[error("the saved state is damaged: {0}")]
    Damaged(#[from] CodecError),
    #[error(transparent)]
    TooLarge(#[from] load::TooLarge),
    #[error("reading the state bucket: {0}")]
    Unavailable(String),
}

/// The state of one watch target, before it is loaded.
pub(crate) struct TargetState {
    key: String,
    identity: String,
    backend: Backend,
    metrics: TargetMetrics,
    checkpoint_interval: Duration,
    max_load_bytes: usize,
}

impl TargetState {
    /// Loads the saved state, retrying while NATS does not answer; says in one log line (the
    /// watch's fields come from the caller's span) when it starts fresh, and why. `None` if
    /// shutdown came first.
    pub(crate) async fn load(self, shutdown: &CancellationToken) -> Option<Loaded> {
        let bucket = match &self.backend {
            Backend::Durable(bucket) => bucket.clone(),
            Backend::Disabled | Backend::MemoryOnly => {
                tracing::info!("started fresh: state is not durable");
                return Some(self.loaded(Start::Fresh, None, None, None));
            }
        };
        let started = Instant::now();
        let mut backoff = Backoff::new(NATS_SETUP_RETRY);
        loop {
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return None,
                attempt = self.read(&bucket) => attempt,
            };
            let fresh = match attempt {
                Ok(read) => {
                    let objects = read.dedupe.len();
                    self.metrics
                        .loaded(objects, started.elapsed().as_secs_f64());
                    let journal = read.journal_next;
                    let bucket = Some((bucket, journal));
                    let revision = Some(read.manifest_revision);
                    let position = read.position;
                    let Some(manifest) = read.manifest else {
                        if let Some(position) = position {
                            tracing::info!(objects, journal_records = journal, resource_version = %position, "no checkpoint yet, but a journal of what was published before a crash: resuming from the resourceVersion it confirmed");
                            let start = Start::Saved {
                                version: ResourceVersion::new(position),
                                dedupe: Box::new(read.dedupe),
                                checkpointed: false,
                            };
                            return Some(self.loaded(start, bucket, None, revision));
                        }
                        if objects == 0 {
                            tracing::info!("started fresh: no saved state");
                            return Some(self.loaded(Start::Fresh, bucket, None, revision));
                        }
                        tracing::info!(objects, journal_records = journal, "no checkpoint yet, but a journal of what was published before a crash: listing and diffing against it");
                        let start = Start::Journaled {
                            dedupe: Box::new(read.dedupe),
                        };
                        return Some(self.loaded(start, bucket, None, revision));
                    };
                    self.metrics.stored(manifest.bytes);
                    self.metrics.current();
                    let position = position.unwrap_or_else(|| manifest.resume_version.clone());
                    tracing::debug!(objects, journaled = read.dedupe.unconfirmed(), tombstones = read.dedupe.tombstones(), resource_version = %position, checkpointed = %manifest.resume_version, generation = manifest.generation, elapsed = ?started.elapsed(), "loaded saved state");
                    let start = Start::Saved {
                        version: ResourceVersion::new(position),
                        dedupe: Box::new(read.dedupe),
                        checkpointed: true,
                    };
                    return Some(self.loaded(start, bucket, Some(manifest), revision));
                }
                Err(e @ LoadError::OtherIdentity { .. }) => {
                    tracing::info!(identity = %self.identity, reason = %e, "started fresh: the watch's resource, namespace or selectors changed since its state was saved");
                    true
                }
                Err(e @ LoadError::Damaged(_)) => {
                    tracing::error!(key = %self.key, error = %e, "started fresh: the saved state cannot be used; it will be overwritten by the next checkpoint");
                    true
                }
                Err(e @ LoadError::TooLarge(_)) => {
                    tracing::error!(key = %self.key, error = %e, "started fresh: the saved state is too large to load (raise state.max_load_bytes if it is genuine, and the pod's memory limit with it); it will be overwritten by the next checkpoint");
                    true
                }
                Err(LoadError::Unavailable(error)) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(
                        error,
                        retry_in = human(delay),
                        "cannot read the saved state yet; retrying"
                    );
                    tokio::select! {
                        _ = shutdown.cancelled() => return None,
                        () = tokio::time::sleep(delay) => {}
                    }
                    false
                }
            };
            if fresh {
                // The old journal describes other objects: it must not be read on top of the
                // state this start writes.
                if let Err(e) = purge(
                    &bucket.store,
                    &journal_subjects(&bucket.store, &self.key),
                    None,
                )
                .await
                {
                    tracing::warn!(key = %self.key, error = %e, "cannot remove the unusable journal yet; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
                // The unusable manifest stays until the next checkpoint replaces it, under the
                // fence looked up then.
                return Some(self.loaded(Start::Fresh, Some((bucket, 0)), None, None));
            }
        }
    }

    fn loaded(
        self,
        start: Start,
        bucket: Option<(Arc<Bucket>, u64)>,
        committed: Option<Manifest>,
        manifest_revision: Option<u64>,
    ) -> Loaded {
        let journal = bucket.as_ref().map(|(bucket, next)| Journal {
            target: Arc::new(JournalTarget {
                key: self.key.clone(),
                identity: identity_hash(&self.identity),
                bucket: bucket.clone(),
                metrics: self.metrics.clone(),
            }),
            store: Arc::new(bucket.store.clone()),
            next: *next,
            last_stream_sequence: 0,
            batch: JournalBatch::default(),
            writing: None,
            confirm_after: Instant::now(),
            write_began: Instant::now(),
        });
        let journaled = match &start {
            Start::Saved { dedupe, .. } | Start::Journaled { dedupe } => dedupe.unconfirmed() > 0,
            Start::Fresh => false,
        };
        let mut checkpoints =
            self.checkpoints(bucket.map(|(b, _)| b), committed, manifest_revision);
        checkpoints.objects_changed |= journaled;
        Loaded {
            start,
            checkpoints,
            journal,
        }
    }

    /// Reads the manifest and its chunks into a fresh memory, then the journal records written
    /// after that snapshot.
    async fn read(&self, bucket: &Bucket) -> Result<StoredState, LoadError> {
        let store = &bucket.store;
        let get = |key: String| {
            let store = store.clone();
            async move {
                store
                    .get(key)
                    .await
                    .map_err(|e| LoadError::Unavailable(e.to_string()))
            }
        };
        let mut dedupe = Dedupe::new();
        let mut meter = load::LoadMeter::new(self.max_load_bytes);
        let entry = store
            .entry(manifest_key(&self.key))
            .await
            .map_err(|e| LoadError::Unavailable(e.to_string()))?;
        // The stream sequence of the manifest key (a deletion marker's too; 0: none): the fence
        // of the next manifest write.
        let manifest_revision = entry.as_ref().map_or(0, |e| e.revision);
        let manifest = match entry.filter(|e| e.operation == kv::Operation::Put) {
            Some(entry) => Some(
                self.read_snapshot(&entry.value, &mut dedupe, &mut meter, get)
                    .await?,
            ),
            None => None,
        };
        let mut next = manifest.as_ref().map_or(0, |m| m.journal_next);
        let identity = identity_hash(&self.identity);
        let mut position = manifest.as_ref().map(|m| m.resume_version.clone());
        // Records are read ahead, a few requests in flight, rather than one round trip each;
        // those past the last record come back empty and end the loop.
        let mut records = futures_util::stream::iter(next..)
            .map(|n| get(journal_key(&self.key, n)))
            .buffered(JOURNAL_READ_AHEAD);
        while let Some(record) = records.next().await.transpose()?.flatten() {
            let decoded =
                codec::journal::decode_journal(&record, next, identity, |entry| match entry {
                    JournalEntry::Recorded { object, deleted } => {
                        dedupe.restore_journaled(object, deleted)
                    }
                    JournalEntry::Confirmed {
                        uid,
                        version,
                        deleted,
                    } => dedupe.confirm_saved(uid, version, deleted),
                    JournalEntry::Position(version) => later_position(&mut position, version),
                });
            match decoded {
                Err(CodecError::StaleJournal { .. }) if manifest.is_none() => {
                    return Err(LoadError::OtherIdentity {
                        saved: "a journal of another configuration".into(),
                    })
                }
                other => other?,
            }
            meter.record(record.len(), dedupe.len() as u64)?;
            next += 1;
        }
        Ok(StoredState {
            manifest,
            dedupe,
            journal_next: next,
            manifest_revision,
            position,
        })
    }

    /// Checks the manifest and fills `dedupe` from the chunks it commits.
    async fn read_snapshot<F, Fut>(
        &self,
        raw: &[u8],
        dedupe: &mut Dedupe,
        meter: &mut load::LoadMeter,
        get: F,
    ) -> Result<Manifest, LoadError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<Option<bytes::Bytes>, LoadError>>,
    {
        let manifest: Manifest =
            serde_json::from_slice(raw).map_err(|e| CodecError::Manifest(e.to_string()))?;
        if manifest.format != FORMAT {
            return Err(CodecError::Format {
                found: manifest.format,
            }
            .into());
        }
        if manifest.identity != self.identity {
            return Err(LoadError::OtherIdentity {
                saved: manifest.identity,
            });
        }
        if manifest.resume_version.is_empty() {
            return Err(CodecError::Mismatch {
                what: "no resume version",
            }
            .into());
        }
        meter.admit(&manifest)?;
        dedupe.size_for(manifest.objects);
        let mut checksum = Fnv::new();
        for index in 0..manifest.chunks {
            let chunk = get(chunk_key(&self.key, manifest.slot, index))
                .await?
                .ok_or(CodecError::MissingChunk { index })?;
            checksum.write(&chunk);
            codec::decode_chunk(&chunk, manifest.generation, index, |o| {
                dedupe.restore_saved(o, false)
            })?;
            meter.chunk(chunk.len(), dedupe.len() as u64)?;
        }
        if checksum.0 != manifest.checksum {
            return Err(CodecError::Mismatch { what: "checksum" }.into());
        }
        if dedupe.len() as u64 != manifest.objects
            || dedupe.tombstones() as u64 != manifest.tombstones
        {
            return Err(CodecError::Mismatch {
                what: "object count",
            }
            .into());
        }
        Ok(manifest)
    }

    fn checkpoints(
        self,
        bucket: Option<Arc<Bucket>>,
        committed: Option<Manifest>,
        manifest_revision: Option<u64>,
    ) -> Checkpoints {
        let next_generation = committed.as_ref().map_or(1, |m| m.generation + 1);
        let saved_version = committed.as_ref().map(|m| m.resume_version.clone());
        let chunk_limit = bucket.as_ref().map_or(MAX_CHUNK_BYTES, |b| b.chunk_limit);
        let writer = bucket.map(|bucket| {
            let mailbox = Arc::new(Mailbox::default());
            let mut stored_chunks = [0; 2];
            if let Some(m) = &committed {
                stored_chunks[m.slot as usize] = m.chunks;
            }
            let writer = Writer {
                key: self.key.clone(),
                identity: self.identity.clone(),
                bucket,
                committed,
                manifest_revision,
                stored_chunks,
                journal_purged: 0,
                mailbox: mailbox.clone(),
                metrics: self.metrics.clone(),
                max_load_bytes: self.max_load_bytes,
                near_load_limit: false,
            };
            let task = tokio::spawn(writer.run());
            (mailbox, task)
        });
        Checkpoints {
            interval: self.checkpoint_interval,
            next_due: Instant::now() + self.checkpoint_interval,
            version: String::new(),
            consistent: false,
            objects_changed: saved_version.is_none(),
            saved_version,
            next_generation,
            chunk_limit,
            writer,
            metrics: self.metrics,
        }
    }
}

/// The identity as journal records carry it.
fn identity_hash(identity: &str) -> u64 {
    let mut hash = Fnv::new();
    hash.write(identity.as_bytes());
    hash.0
}

/// What [`TargetState::read`] found.
struct StoredState {
    manifest: Option<Manifest>,
    dedupe: Dedupe,
    /// The position after the last journal record read.
    journal_next: u64,
    /// The manifest key's stream sequence (0: nothing stored).
    manifest_revision: u64,
    /// Where the watch resumes: the latest confirmed position of the journal, else the
    /// checkpoint's resume version.
    position: Option<String>,
}

/// Keeps the later of the position so far and a confirmed one: a record written while a
/// checkpoint was being taken may confirm a position the checkpoint is past.
fn later_position(position: &mut Option<String>, confirmed: SavedVersion<'_>) {
    let newer = match (position.as_deref().map(SavedVersion::of_text), confirmed) {
        (Some(SavedVersion::Number(now)), SavedVersion::Number(n)) => n > now,
        // Opaque versions are not ordered: journal records come in order, the later wins.
        _ => true,
    };
    if newer {
        *position = Some(confirmed.to_text());
    }
}

/// A target's state, loaded: where it starts, its checkpoints and its journal (`None` when
/// state is not durable).
pub(crate) struct Loaded {
    pub(crate) start: Start,
    pub(crate) checkpoints: Checkpoints,
    pub(crate) journal: Option<Journal>,
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
