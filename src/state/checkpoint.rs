//! Checkpoints: the watch task's side ([`Checkpoints`]), the mailbox that hands snapshots over,
//! and the writer task that writes them chunk by chunk and commits them with the manifest.
//!
//! The manifest write is fenced: it replaces exactly the revision this process last wrote or
//! loaded (`Nats-Expected-Last-Subject-Sequence`). A bucket purged, or deleted and re-created,
//! while kube2nats runs has lost the chunks the manifest would commit; the server then refuses
//! the write, and the next checkpoint saves every object again (see docs/durable-state.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::bucket::{ensure_bucket, journal_subjects, manifest_key, purge, Bucket};
use super::codec::{Encoder, Manifest, Slot, FORMAT};
use super::journal::{Journal, JournalMark};
use super::metrics::TargetMetrics;
use crate::backoff::Backoff;
use crate::backoff::NATS_SETUP_RETRY;
use crate::dedupe::{Dedupe, Frozen, Saved};
use crate::event::ResourceVersion;
use crate::telemetry::logging::human;

pub(super) fn chunk_key(target: &str, slot: Slot, index: u32) -> String {
    format!("{target}.{}.{index}", slot.as_str())
}

/// The watch task's side of checkpointing: what changed since the last snapshot, and when the
/// next is due. The watch task tells it about every change and takes snapshots only with its
/// outbox settled.
pub(crate) struct Checkpoints {
    pub(super) interval: Duration,
    pub(super) next_due: Instant,
    /// The version up to which every event has been handed to the outbox (`None` before
    /// anything was handled).
    pub(super) version: Option<ResourceVersion>,
    /// False while a list is half-way: the memory is then neither the old state nor the new.
    pub(super) consistent: bool,
    pub(super) objects_changed: bool,
    /// The version in the last snapshot handed to the writer.
    pub(super) saved_version: Option<String>,
    pub(super) next_generation: u64,
    pub(super) chunk_limit: usize,
    pub(super) writer: Option<(Arc<Mailbox>, tokio::task::JoinHandle<()>)>,
    pub(super) metrics: TargetMetrics,
}

impl Checkpoints {
    /// An object was published (or, with `initial_state = "skip"`, tracked) or forgotten.
    pub(crate) fn objects_changed(&mut self) {
        self.objects_changed = true;
    }

    /// Every event up to `version` has been handed to the outbox.
    pub(crate) fn advanced(&mut self, version: &ResourceVersion) {
        self.version = Some(version.clone());
        self.consistent = true;
    }

    /// The version up to which every event has been handed to the outbox; `None` while a list
    /// is half-way (or before anything was handled).
    pub(crate) fn position(&self) -> Option<&ResourceVersion> {
        self.version.as_ref().filter(|_| self.consistent)
    }

    /// A list began: until it completes there is no point to checkpoint.
    pub(crate) fn list_started(&mut self) {
        self.consistent = false;
    }

    /// When the next checkpoint is due; `None` when there is nothing to write to or no
    /// consistent point.
    pub(crate) fn due(&self) -> Option<Instant> {
        (self.writer.is_some() && self.consistent).then_some(self.next_due)
    }

    /// Takes a snapshot and hands it to the writer, if the outbox is `settled` (everything handed
    /// to it acknowledged or flushed); otherwise tries again an interval later.
    pub(crate) fn save(&mut self, settled: bool, dedupe: &Dedupe, journal: Option<&Journal>) {
        let Some((mailbox, _)) = &self.writer else {
            return;
        };
        self.next_due = Instant::now() + self.interval;
        if !settled || !self.consistent {
            return;
        }
        if mailbox.take_lost() {
            self.objects_changed = true;
        }
        // Messages went out without journal records: only a snapshot of every object makes the
        // state durable again (see `super::durability`).
        let restores = self.metrics.durability.journal_suspended();
        self.objects_changed |= restores;
        let version = self.version.as_ref().map_or("", ResourceVersion::as_str);
        let version_moved = self.saved_version.as_deref() != Some(version);
        if !self.objects_changed && !version_moved {
            if mailbox.is_idle() {
                self.metrics.current();
            }
            return;
        }
        // Frozen, not encoded: the writer encodes it chunk by chunk as it writes, so a snapshot
        // of a million objects never sits in memory whole beside the state it copies.
        let snapshot = self.objects_changed.then(|| {
            let generation = self.next_generation;
            self.next_generation += 1;
            Snapshot {
                frozen: dedupe.freeze(),
                generation,
                chunk_limit: self.chunk_limit,
            }
        });
        mailbox.post(Job {
            snapshot,
            version: version.to_owned(),
            journal: journal.map(Journal::mark).unwrap_or_default(),
            restores,
        });
        self.objects_changed = false;
        self.saved_version = Some(version.to_owned());
    }

    /// Waits until the writer has written the last snapshot (or given up on it).
    pub(crate) async fn finish(mut self) {
        if let Some((mailbox, task)) = self.writer.take() {
            mailbox.close();
            let _ = task.await;
        }
    }
}

impl Drop for Checkpoints {
    /// A watch task stopped without [`finish`](Self::finish) (aborted, e.g. when this replica
    /// lost its Lease) takes its writer with it: a snapshot must not be written after another
    /// replica may have taken over.
    fn drop(&mut self) {
        if let Some((_, task)) = self.writer.take() {
            task.abort();
        }
    }
}

/// One snapshot to write. `snapshot: None`: no object changed since the previous snapshot, only
/// the resume version moved.
pub(super) struct Job {
    pub(super) snapshot: Option<Snapshot>,
    pub(super) version: String,
    pub(super) journal: JournalMark,
    /// The snapshot was taken while the journal was suspended: storing it makes the state
    /// durable again.
    pub(super) restores: bool,
}

/// The objects of a snapshot, to encode while writing.
pub(super) struct Snapshot {
    pub(super) frozen: Frozen,
    pub(super) generation: u64,
    pub(super) chunk_limit: usize,
}

impl Job {
    /// `newer` replaces `self`, keeping `self`'s objects if `newer` has none of its own.
    fn merged_into(self, newer: Job) -> Job {
        // `restores` goes with the snapshot that is kept.
        let restores = match newer.snapshot {
            Some(_) => newer.restores,
            None => self.restores,
        };
        Job {
            snapshot: newer.snapshot.or(self.snapshot),
            version: newer.version,
            journal: newer.journal,
            restores,
        }
    }
}

/// Hands the latest snapshot to the writer; a snapshot not yet written is replaced (merged) by
/// a newer one, so a slow or absent NATS costs at most one snapshot of memory.
#[derive(Default)]
pub(super) struct Mailbox {
    pub(super) inner: Mutex<MailboxState>,
    pub(super) notify: Notify,
}

#[derive(Default)]
pub(super) struct MailboxState {
    pub(super) pending: Option<Job>,
    pub(super) writing: bool,
    pub(super) failing: bool,
    pub(super) closed: bool,
    /// A snapshot failed half-written: its frozen objects are spent (each part is released once
    /// encoded), so the next checkpoint must take the objects again.
    pub(super) lost: bool,
}

impl Mailbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, MailboxState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn post(&self, job: Job) {
        let mut state = self.lock();
        state.pending = Some(match state.pending.take() {
            Some(older) => older.merged_into(job),
            None => job,
        });
        drop(state);
        self.notify.notify_one();
    }

    /// Puts a job that failed back, unless a newer one (which it is merged into) arrived.
    fn requeue(&self, job: Job) {
        let mut state = self.lock();
        state.pending = Some(match state.pending.take() {
            Some(newer) => job.merged_into(newer),
            None => job,
        });
    }

    /// A job whose snapshot was spent failed: it is dropped, with any pending job that carries
    /// only a newer version (it would commit that version over the older objects).
    fn lose(&self) {
        let mut state = self.lock();
        state.pending = state.pending.take().filter(|job| job.snapshot.is_some());
        state.lost = true;
    }

    /// Whether a snapshot was lost since the last call.
    fn take_lost(&self) -> bool {
        std::mem::take(&mut self.lock().lost)
    }

    fn take(&self) -> Option<Job> {
        let mut state = self.lock();
        let job = state.pending.take();
        state.writing = job.is_some();
        job
    }

    fn is_idle(&self) -> bool {
        let state = self.lock();
        state.pending.is_none() && !state.writing && !state.failing && !state.lost
    }

    fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_one();
    }
}

/// Writes one target's snapshots in the background, one at a time, the latest first.
pub(super) struct Writer {
    pub(super) key: String,
    pub(super) identity: String,
    pub(super) bucket: Arc<Bucket>,
    /// The manifest last written (or loaded).
    pub(super) committed: Option<Manifest>,
    /// The fence of the next manifest write: the stream sequence of the manifest this process
    /// last wrote or loaded (0: none stored), or `None` when not known (state that was not
    /// loaded, or after a conflict), looked up before the write.
    pub(super) manifest_revision: Option<u64>,
    /// Chunks known to be stored in each slot (a, b), so that a smaller snapshot purges the
    /// leftovers of a larger one.
    pub(super) stored_chunks: [u32; 2],
    /// The stream sequence up to which folded journal records are removed.
    pub(super) journal_purged: u64,
    pub(super) mailbox: Arc<Mailbox>,
    pub(super) metrics: TargetMetrics,
    /// `state.max_load_bytes`: each checkpoint says how close the next start comes to it.
    pub(super) max_load_bytes: usize,
    /// Whether the last checkpoint was past [`super::load::meter::WARN_SHARE`] of it (warned once per
    /// crossing).
    pub(super) near_load_limit: bool,
}

impl Writer {
    /// Reports how much of `state.max_load_bytes` loading the checkpoint would take, and warns
    /// when it passes [`super::load::meter::WARN_SHARE`]: past the limit the next start refuses the
    /// state and starts fresh, announcing every object again.
    fn check_load_share(&mut self, manifest: &Manifest) {
        let share = super::load::meter::load_share(manifest, self.max_load_bytes);
        self.metrics.load_share(share);
        let near = share >= super::load::meter::WARN_SHARE;
        if near && !self.near_load_limit {
            tracing::warn!(key = %self.key, objects = manifest.objects, load_share = format!("{:.0}%", share * 100.0), max_load_bytes = self.max_load_bytes, "the saved state nears state.max_load_bytes: past it, the next start refuses it and starts fresh (raise state.max_load_bytes, and the pod's memory limit with it)");
        }
        self.near_load_limit = near;
    }

    pub(super) async fn run(mut self) {
        let mut backoff = Backoff::new(NATS_SETUP_RETRY);
        let mut store = self.bucket.store.clone();
        loop {
            let Some(mut job) = self.mailbox.take() else {
                if self.mailbox.lock().closed {
                    return;
                }
                self.mailbox.notify.notified().await;
                continue;
            };
            let spends_objects = job.snapshot.is_some();
            let restores = job.restores && spends_objects;
            match self.write(&store, &mut job).await {
                Err(WriteError::Conflict) => {
                    self.conflict();
                    continue;
                }
                Ok(()) => {
                    let mut state = self.mailbox.lock();
                    state.writing = false;
                    if state.failing {
                        state.failing = false;
                        tracing::info!(watch = %self.metrics.watch, key = %self.key, "checkpoints are written again");
                    }
                    drop(state);
                    if self.metrics.durability.checkpoint_written(restores) {
                        tracing::info!(watch = %self.metrics.watch, key = %self.key, "state durable again: a checkpoint holding every object is stored");
                    }
                    self.metrics.checkpoints.inc();
                    self.metrics.current();
                    backoff.reset();
                }
                Err(e) => {
                    self.metrics.failures.inc();
                    if let Some(reason) = self.metrics.durability.checkpoint_failed(&e) {
                        tracing::error!(watch = %self.metrics.watch, key = %self.key, reason, "state not durable: checkpoints cannot be written, so a restart repeats or misses what was published since the last one (see docs/durable-state.md)");
                    }
                    let (first, closed) = {
                        let mut state = self.mailbox.lock();
                        state.writing = false;
                        let first = !state.failing;
                        state.failing = true;
                        (first, state.closed)
                    };
                    if closed {
                        tracing::warn!(watch = %self.metrics.watch, key = %self.key, error = %e, "the last checkpoint could not be written before shutdown; the next start diffs against the previous one");
                        return;
                    }
                    let delay = backoff.next_delay();
                    if first {
                        tracing::warn!(watch = %self.metrics.watch, key = %self.key, error = %e, retry_in = human(delay), "writing a checkpoint failed; retrying");
                    } else {
                        tracing::debug!(watch = %self.metrics.watch, key = %self.key, error = %e, retry_in = human(delay), "writing a checkpoint failed again");
                    }
                    if spends_objects {
                        self.mailbox.lose();
                    } else {
                        self.mailbox.requeue(job);
                    }
                    tokio::time::sleep(delay).await;
                    // The bucket may have been deleted: find or create it again.
                    match ensure_bucket(&self.bucket.context, &self.bucket.config).await {
                        Ok(found) => store = found,
                        Err(e) => {
                            tracing::debug!(watch = %self.metrics.watch, error = %e, "state bucket not reachable")
                        }
                    }
                }
            }
        }
    }

    /// Writes the job's chunks (if it has any) to the free slot, encoding them as it goes, then
    /// the manifest that commits them. The job's snapshot is spent.
    async fn write(&mut self, store: &kv::Store, job: &mut Job) -> Result<(), WriteError> {
        let previous = self.committed.as_ref();
        let mut manifest = match (job.snapshot.take(), previous) {
            (Some(snapshot), previous) => {
                let slot = previous.map_or(Slot::A, |m| m.slot.other());
                let Snapshot {
                    mut frozen,
                    generation,
                    chunk_limit,
                } = snapshot;
                let mut encoder = Encoder::new(generation, chunk_limit);
                let mut index = 0;
                loop {
                    let more = frozen.next_part(|saved| match saved {
                        Saved::Object(o) => encoder.push(o),
                        Saved::Tombstone(uid) => encoder.push_tombstone(uid),
                    });
                    let chunks = if more {
                        encoder.take_chunks()
                    } else {
                        break;
                    };
                    for chunk in chunks {
                        store.put(chunk_key(&self.key, slot, index), chunk).await?;
                        index += 1;
                    }
                }
                let encoded = encoder.finish();
                for chunk in encoded.chunks {
                    store.put(chunk_key(&self.key, slot, index), chunk).await?;
                    index += 1;
                }
                Manifest {
                    format: FORMAT,
                    identity: self.identity.clone(),
                    resume_version: String::new(),
                    generation: encoded.generation,
                    slot,
                    chunks: encoded.total_chunks,
                    objects: encoded.objects,
                    bytes: encoded.bytes,
                    checksum: encoded.checksum,
                    saved_at: 0,
                    tombstones: encoded.tombstones,
                    journal_next: 0,
                }
            }
            (None, Some(previous)) => previous.clone(),
            // Nothing was ever encoded: nothing to commit.
            (None, None) => return Ok(()),
        };
        manifest.resume_version.clone_from(&job.version);
        manifest.journal_next = manifest.journal_next.max(job.journal.next);
        manifest.saved_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let json = serde_json::to_vec(&manifest).map_err(|e| WriteError::Failed(e.to_string()))?;
        let key = manifest_key(&self.key);
        let revision = match self.manifest_revision {
            Some(revision) => revision,
            None => store
                .entry(key.as_str())
                .await
                .map_err(|e| WriteError::Failed(e.to_string()))?
                .map_or(0, |entry| entry.revision),
        };
        // Replaces exactly the manifest this process wrote or loaded: the server refuses the
        // write (`Nats-Expected-Last-Subject-Sequence`) if the bucket was purged or re-created
        // since (the manifest would commit chunks that are gone) or another writer stepped in.
        self.manifest_revision = match store.update(&key, json.into(), revision).await {
            Ok(written) => Some(written),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                return Err(WriteError::Conflict)
            }
            Err(e) => return Err(WriteError::Failed(e.to_string())),
        };
        self.metrics.stored(manifest.bytes);
        self.check_load_share(&manifest);
        let stored = &mut self.stored_chunks[manifest.slot as usize];
        for index in manifest.chunks..*stored {
            // Best effort: a leftover that stays is never read (the manifest counts the chunks).
            let _ = store
                .purge(chunk_key(&self.key, manifest.slot, index))
                .await;
        }
        *stored = manifest.chunks;
        self.committed = Some(manifest);
        if job.journal.last_stream_sequence > self.journal_purged {
            // Best effort: records below `journal_next` are never read again.
            let subjects = journal_subjects(store, &self.key);
            if purge(store, &subjects, Some(job.journal.last_stream_sequence + 1))
                .await
                .is_ok()
            {
                self.journal_purged = job.journal.last_stream_sequence;
            }
        }
        Ok(())
    }

    /// The manifest stored is not the one this process last wrote or loaded: the bucket was
    /// purged or deleted (and re-created), or another writer replaced it. What this process
    /// committed may be gone, so the next checkpoint saves every object again, to the slot
    /// and under the fence found then.
    fn conflict(&mut self) {
        tracing::warn!(watch = %self.metrics.watch, key = %self.key, "the state bucket no longer holds the checkpoint this process wrote (bucket purged or re-created, or written by another kube2nats); the next checkpoint saves every object again");
        self.metrics.failures.inc();
        self.committed = None;
        self.manifest_revision = None;
        self.stored_chunks = [0; 2];
        self.journal_purged = 0;
        self.mailbox.lock().writing = false;
        self.mailbox.lose();
    }
}

/// Why a checkpoint was not written.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    #[error("{0}")]
    Failed(String),
    #[error("the stored manifest is not the one this process last wrote or loaded")]
    Conflict,
}

impl From<kv::PutError> for WriteError {
    fn from(e: kv::PutError) -> Self {
        WriteError::Failed(e.to_string())
    }
}
