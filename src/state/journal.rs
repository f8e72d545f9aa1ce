//! The journal: objects recorded before their first message is published, and confirmations of
//! the messages that reached NATS (see [`Journal`]).

use std::sync::Arc;

use async_nats::jetstream::kv;
use tokio::time::error::Elapsed;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::bucket::{ensure_bucket, journal_key, Bucket};
use super::codec::journal::JournalBatch;
use super::durability::DEGRADE_AFTER;
use super::metrics::TargetMetrics;
use crate::backoff::Backoff;
use crate::backoff::NATS_SETUP_RETRY;
use crate::dedupe::{SavedObject, SavedUid, SavedVersion};
use crate::telemetry::logging::human;

/// Records objects before their first message is published, in batches, so that a crash before
/// the next checkpoint cannot make kube2nats forget an object subscribers were told about (its
/// deletion while kube2nats is down would never be announced). Deletions are recorded too (at
/// the deleted version), so that a deletion announced again after a crash is the same message,
/// with the same `Nats-Msg-Id`.
///
/// Group commit: one write is under way at a time, and what is recorded meanwhile becomes the
/// next write, so a quiet stream writes each record at once and a busy one writes one record per
/// round trip to JetStream, however many objects it names — never one per event. The watch task
/// holds back only the messages of the objects recorded (and later messages of the same
/// objects, to keep their order) until their record is written ([`written`](Self::written));
/// everything else goes on being published meanwhile. An object recorded whose message then did
/// not go out (a crash in between) is published once more at the next start, as [`Dedupe`]'s
/// unconfirmed objects are. Each checkpoint folds the records into its snapshot
/// ([`Manifest::journal_next`]) and removes them.
///
/// A write not stored within [`DEGRADE_AFTER`] (a full bucket) is given up: the journal is
/// suspended, what it held back goes out, and later objects and confirmations are not recorded,
/// until a checkpoint taken since is stored (see [`super::durability`]).
///
/// Confirmations: once messages are settled (flushed to the server in core mode, acknowledged
/// in JetStream mode), the watch task adds each one's object and version, and the watch's
/// resourceVersion up to which everything is settled, to the batch; they go out with the next
/// write, and no message ever waits for them. Loaded in order on top of the checkpoint, the
/// records give the memory as of the last confirmation stored, and the watch resumes from its
/// position: a kill -9 re-publishes only what was not yet confirmed (docs/durable-state.md).
///
/// Records are positions `0, 1, 2, …` of the target's journal (keys `….j.{n}`), loaded in that
/// order until the first missing one; since one write is under way at a time, a record is never
/// stored without every record before it.
pub(crate) struct Journal {
    pub(super) target: Arc<JournalTarget>,
    pub(super) store: Arc<kv::Store>,
    /// The position of the next record to be stored: every record before it is.
    pub(super) next: u64,
    /// The stream sequence of the last record written (0: none in this run).
    pub(super) last_stream_sequence: u64,
    /// Objects recorded since the last write began.
    pub(super) batch: JournalBatch,
    /// The write of the record at position `next`, while under way.
    pub(super) writing: Option<JournalWrite>,
    /// The earliest a record of confirmations alone may be written ([`CONFIRMATION_PACE`]).
    pub(super) confirm_after: tokio::time::Instant,
}

/// The least time between the starts of two writes when the second holds confirmations alone:
/// a quiet stream, whose every message settles at once, would otherwise write a record per
/// message. Records of objects are never paced (their messages wait for them), and
/// confirmations go along with them; a crash repeats at most this much more.
pub(super) const CONFIRMATION_PACE: std::time::Duration = std::time::Duration::from_millis(10);

/// What a journal write needs besides its record; shared by the writes of one target.
pub(super) struct JournalTarget {
    pub(super) key: String,
    pub(super) identity: u64,
    pub(super) bucket: Arc<Bucket>,
    pub(super) metrics: TargetMetrics,
}

/// One record being written, on a task of its own: resolves once it is stored (retrying until it
/// is), with the bucket found again if it had to be, or with `Elapsed` at [`DEGRADE_AFTER`]; dropped,
/// the write stops. A task because the watch's loop waits for the write beside every line it
/// reads: a handle costs one check to poll, where the write's own futures and its timer would be
/// polled, and the timer set again, for every event.
pub(super) type JournalWrite = AbortOnDropHandle<Result<Written, Elapsed>>;

/// How a record's write ended; both carry the bucket as the write last found it.
pub(super) enum Written {
    /// The record is stored at this stream sequence.
    Stored {
        stream_sequence: u64,
        store: Arc<kv::Store>,
    },
    /// Another writer's record holds the position: a deposed Lease holder writing late, or a
    /// second deployment with this owner and target. Records are written only where none is
    /// (as manifests replace only the revision this process knows), so neither overwrites the
    /// other's record.
    Taken { store: Arc<kv::Store> },
}

/// What a journal record says of its object: its message announces it (present in the
/// cluster), or its deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Presence {
    Present,
    Deleted,
}

impl Presence {
    /// What a message of `event_type` says of its object.
    pub(crate) fn of(event_type: crate::event::EventType) -> Presence {
        match event_type {
            crate::event::EventType::Deleted => Presence::Deleted,
            _ => Presence::Present,
        }
    }
}

impl Journal {
    /// The object of the next message is about to be published for the first time, or deleted.
    /// Returns the position of the record that will hold it: the message must not go out before
    /// that record is stored ([`stored_below`](Self::stored_below)). `None` while the journal is
    /// suspended: the message goes out at once.
    pub(crate) fn record(
        &mut self,
        meta: &crate::event::ObjectMeta,
        presence: Presence,
    ) -> Option<u64> {
        if self.suspended() {
            return None;
        }
        self.batch
            .push(&SavedObject::of(meta), presence == Presence::Deleted);
        Some(self.next + u64::from(self.writing.is_some()))
    }

    /// Whether messages go out without waiting for the journal ([`super::durability`]).
    fn suspended(&self) -> bool {
        self.target.metrics.durability.journal_suspended()
    }

    /// Objects recorded and not yet being written.
    pub(crate) fn pending(&self) -> usize {
        self.batch.recorded()
    }

    /// The message of the object `uid` at `version` (its deletion, when `presence` says so)
    /// reached NATS: the next record says so.
    /// Nothing is kept while the journal is suspended: the checkpoint that ends it holds all.
    pub(crate) fn confirm(
        &mut self,
        uid: SavedUid<'_>,
        version: SavedVersion<'_>,
        presence: Presence,
    ) {
        if self.suspended() {
            return;
        }
        self.batch
            .confirm(uid, version, presence == Presence::Deleted);
    }

    /// Every event up to `version` reached NATS: the next record says so.
    pub(crate) fn confirm_position(&mut self, version: &str) {
        if self.suspended() {
            return;
        }
        self.batch.confirm_position(version);
    }

    /// No write is under way, and objects were recorded, or confirmations wait and the pace
    /// allows their write.
    pub(crate) fn can_begin_write(&self) -> bool {
        self.writing.is_none()
            && !self.suspended()
            && (self.batch.recorded() != 0
                || (self.batch.confirmations() != 0
                    && tokio::time::Instant::now() >= self.confirm_after))
    }

    /// When confirmations alone wait for the pace: the moment their write may begin.
    pub(crate) fn confirmations_due(&self) -> Option<tokio::time::Instant> {
        let alone = self.batch.recorded() == 0 && self.batch.confirmations() != 0;
        (alone && self.writing.is_none() && !self.suspended()).then_some(self.confirm_after)
    }

    /// Whether a write is under way.
    pub(crate) fn is_writing(&self) -> bool {
        self.writing.is_some()
    }

    /// Every record at a position below this is stored; while suspended, every message may go.
    pub(crate) fn stored_below(&self) -> u64 {
        if self.suspended() {
            return u64::MAX;
        }
        self.next
    }

    /// Starts writing what was recorded, unless a write is under way already or nothing was.
    pub(crate) fn begin_write(&mut self) {
        if self.writing.is_some() || self.batch.is_empty() || self.suspended() {
            return;
        }
        let record = self.batch.record(self.next, self.target.identity);
        if self.batch.recorded() != 0 {
            self.target
                .metrics
                .journal_records
                .observe(self.batch.recorded() as f64);
        }
        self.batch.clear();
        self.confirm_after = tokio::time::Instant::now() + CONFIRMATION_PACE;
        let write = write_record(
            self.target.clone(),
            self.store.clone(),
            journal_key(&self.target.key, self.next),
            record,
        );
        let deadline = Instant::now() + DEGRADE_AFTER;
        self.writing = Some(AbortOnDropHandle::new(tokio::spawn(
            tokio::time::timeout_at(deadline, write),
        )));
    }

    /// Waits until the write under way is stored (forever, if none is), or given up after
    /// [`DEGRADE_AFTER`] (then the journal is suspended). Cancel-safe: the write goes on, and a
    /// later call waits for the same one.
    pub(crate) async fn written(&mut self) {
        let Some(writing) = &mut self.writing else {
            return std::future::pending().await;
        };
        let Ok(Ok(written)) = writing.await else {
            // Given up at the deadline (or the task panicked): the journal is suspended.
            return self.suspend();
        };
        self.writing = None;
        match written {
            Written::Stored {
                stream_sequence,
                store,
            } => {
                self.store = store;
                self.last_stream_sequence = stream_sequence;
                self.next += 1;
            }
            Written::Taken { store } => {
                self.store = store;
                self.taken();
            }
        }
    }

    /// Another writer's record holds the position being written. Its content is not this
    /// memory's, and the next start would load it: the journal moves past it and is suspended
    /// (what it held back goes out), so that the next checkpoint holds every object and, with
    /// `journal_next` past the foreign record, makes it unread.
    fn taken(&mut self) {
        let reason = format!(
            "journal record {} of this target was written by another kube2nats (a deposed Lease holder, or a second deployment with the same state.instance)",
            self.next
        );
        self.target.metrics.durability.journal_failed(&reason);
        self.next += 1;
        self.suspend();
    }

    /// Gives up the write under way and what was recorded: messages no longer wait for the
    /// journal. The next checkpoint holds every object; once one is stored, the journal goes on
    /// at the same position (the manifest's `journal_next`).
    fn suspend(&mut self) {
        self.writing = None;
        self.batch.clear();
        self.target.metrics.durability.suspend_journal();
        let reason = self.target.metrics.durability.reason().unwrap_or_default();
        tracing::error!(watch = %self.target.metrics.watch, key = %self.target.key, reason, "state not durable: the journal cannot be written, so messages are published without waiting for it; a checkpoint that holds every object makes the state durable again (see docs/durable-state.md)");
    }

    /// What a snapshot taken now contains.
    pub(super) fn mark(&self) -> JournalMark {
        JournalMark {
            next: self.next,
            last_stream_sequence: self.last_stream_sequence,
        }
    }
}

/// Stores one journal record where no record is (`Nats-Expected-Last-Subject-Sequence: 0`),
/// retrying (and finding the bucket again) until it is stored, or found to be another writer's.
async fn write_record(
    target: Arc<JournalTarget>,
    mut store: Arc<kv::Store>,
    key: String,
    record: bytes::Bytes,
) -> Written {
    let mut backoff = Backoff::new(NATS_SETUP_RETRY);
    let mut failing = false;
    loop {
        let created = match store.create(&key, record.clone()).await {
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                // A retry finds its own write stored (its acknowledgement was lost), or
                // another writer's record.
                match store.entry(&key).await {
                    Ok(Some(entry)) if entry.value == record => Ok(entry.revision),
                    Ok(Some(_)) => return Written::Taken { store },
                    Ok(None) => Err(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
            other => other.map_err(|e| e.to_string()),
        };
        match created {
            Ok(stream_sequence) => {
                if failing {
                    tracing::info!(watch = %target.metrics.watch, key = %target.key, "the journal is written again");
                }
                return Written::Stored {
                    stream_sequence,
                    store,
                };
            }
            Err(e) => {
                target.metrics.failures.inc();
                target.metrics.durability.journal_failed(&e);
                let delay = backoff.next_delay();
                if !failing {
                    failing = true;
                    tracing::warn!(watch = %target.metrics.watch, key = %target.key, error = %e, retry_in = human(delay), "writing the journal failed; new objects wait until it is written (10 s at most, then they go out without it)");
                }
                tokio::time::sleep(delay).await;
                if let Ok(found) =
                    ensure_bucket(&target.bucket.context, &target.bucket.config).await
                {
                    store = Arc::new(found);
                }
            }
        }
    }
}

/// The journal records a snapshot contains: those before `next`, stored at stream sequences up
/// to `last_stream_sequence`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct JournalMark {
    pub(super) next: u64,
    pub(super) last_stream_sequence: u64,
}
