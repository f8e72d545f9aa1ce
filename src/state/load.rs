//! Loading a target's saved state at start: the manifest and the chunks it commits, then the
//! journal records written after that snapshot, into a fresh memory ([`Dedupe`]), bounded by
//! `state.max_load_bytes` ([`meter`]); and what the target starts from ([`Start`]), with its
//! checkpoints and journal ready to write.

pub(super) mod meter;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bucket::{
    journal_key, journal_subjects, manifest_key, purge, Backend, Bucket, MAX_CHUNK_BYTES,
};
use super::checkpoint::{chunk_key, Checkpoints, Mailbox, Writer};
use super::codec::journal::JournalBatch;
use super::codec::{self, CodecError, Fnv, JournalEntry, Manifest, FORMAT};
use super::journal::{Journal, JournalTarget};
use super::metrics::TargetMetrics;
use crate::backoff::{Backoff, NATS_SETUP_RETRY};
use crate::dedupe::{Dedupe, SavedVersion};
use crate::event::ResourceVersion;
use crate::telemetry::logging::human;

/// Journal records requested ahead while loading: 100,000 records one round trip at a time
/// took 15.7 s.
const JOURNAL_READ_AHEAD: usize = 32;
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
    TooLarge(#[from] meter::TooLarge),
    #[error("reading the state bucket: {0}")]
    Unavailable(String),
}

/// The state of one watch target, before it is loaded.
pub(crate) struct TargetState {
    pub(super) key: String,
    pub(super) identity: String,
    pub(super) backend: Backend,
    pub(super) metrics: TargetMetrics,
    pub(super) checkpoint_interval: Duration,
    pub(super) max_load_bytes: usize,
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
        let mut meter = meter::LoadMeter::new(self.max_load_bytes);
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
        meter: &mut meter::LoadMeter,
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
            version: None,
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
