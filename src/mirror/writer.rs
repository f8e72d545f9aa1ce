//! One watch target's bucket writer: a task that takes the target's puts and deletes in order and
//! writes them to the bucket with per-key optimistic concurrency, pipelined across keys.
//!
//! # Fencing (docs/mirror.md, "Exactly in step")
//!
//! Every write carries `Nats-Expected-Last-Subject-Sequence`: the revision of the key this writer
//! last saw (0: the key must not exist). The server refuses a write whose key moved on since; the
//! writer then reads the key and writes again over it only if what it writes is newer (its
//! resourceVersion compared numerically where both are integers, as everywhere in kube2nats): a
//! deposed leader, or a restarted replica, therefore never puts an older version over a newer one.
//! Two writes of one key are never in flight together (the second needs the first's revision);
//! writes of different keys are, up to `mirror.max_in_flight`. The writer keeps one revision
//! (a `u64`) per key, under a hash of the key; a collision only costs a refused write and a read.
//!
//! # Acknowledgements
//!
//! The bucket answers each write on the writer's own subscription ([`super::acks`]); a write
//! whose answer is overdue (past the bucket's request timeout) counts as failed and is sent
//! again, with the revision it expected.
//!
//! # Repair
//!
//! A list begins with [`Op::RepairBegin`]: the writer reads the revision and
//! `Kube-Resource-Version` of every key under the target, at every version of its resource
//! (headers only, last per key). Each
//! listed object's put is then written only if it is newer than the key, and [`Op::RepairEnd`]
//! deletes the keys the list did not show, at the list's version (the deletions the list found
//! are left to it: they carry the version kube2nats last checkpointed, which may be older than the
//! key). So after a crash, a NATS restart, a takeover, a 410 relist or a move to another version
//! of the resource (whose keys name the version), the bucket equals the list, whatever writes
//! were lost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use async_nats::client::PublishErrorKind;
use async_nats::header::{SerializedHeaders, SerializedHeadersBuilder};
use async_nats::jetstream::{self, consumer, stream};
use async_nats::{HeaderName, Subject};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::acks::{decimal, Acks, Answer, Outcome};
use super::metrics::MirrorMetrics;
use crate::backoff::{Backoff, NATS_WRITE_RETRY};
use crate::event::ResourceVersion;
use crate::publish::message::header;
use crate::telemetry::logging::human;

const KV_OPERATION: HeaderName = HeaderName::from_static("KV-Operation");
const NATS_TTL: HeaderName = HeaderName::from_static("Nats-TTL");
const EXPECTED_LAST_SUBJECT_SEQUENCE: HeaderName =
    HeaderName::from_static("Nats-Expected-Last-Subject-Sequence");
/// The deployment that wrote a key ([`Place::owner`]).
const OWNER: HeaderName = HeaderName::from_static("Kube2nats-Owner");

/// What the watch task hands the writer, in the order it sees the objects.
pub(crate) enum Op {
    Write(Write),
    /// A list begins: read the keys under the target.
    RepairBegin,
    /// The list is complete at this version: delete the keys it did not show.
    RepairEnd(ResourceVersion),
}

/// One key's new state.
pub(crate) struct Write {
    /// The key's subject: `$KV.{bucket}.{key}`.
    pub(crate) subject: Subject,
    /// The object's version (a deletion's: the version of the deletion).
    pub(crate) version: ResourceVersion,
    pub(crate) kind: WriteKind,
    /// When the event was handed over, for `mirror_write_lag_seconds`.
    pub(crate) queued_at: Instant,
}

pub(crate) enum WriteKind {
    /// The value and the event message's header block.
    Put {
        headers: SerializedHeaders,
        value: Bytes,
    },
    /// A delete marker; the event message's header block when there was a message.
    Delete { headers: Option<SerializedHeaders> },
}

/// The key as it is in the bucket.
#[derive(Debug, Clone)]
struct Found {
    revision: u64,
    /// `Kube-Resource-Version` of the last write (a put's object, a deletion's version).
    version: Option<String>,
    live: bool,
    /// `Kube2nats-Owner` of the last write (`None`: written without one).
    owner: Option<String>,
}

/// A write sent and not yet completed.
struct Pending {
    write: Write,
    hash: u64,
    /// The revision it expects the key at.
    expected: u64,
    /// Its acknowledgement's token ([`Acks`]).
    token: u64,
    sent_at: Instant,
    /// What the bucket answered; `None` until it did, or until the answer is overdue.
    outcome: Option<Outcome>,
}

/// Where the writer writes, and what it owns there.
pub(crate) struct Place {
    pub(crate) context: jetstream::Context,
    pub(crate) stream: stream::Stream,
    /// `$KV.{bucket}.`
    pub(crate) subject_prefix: String,
    /// The target's keys: [`super::key::watch_prefix`].
    pub(crate) key_prefix: String,
    /// The escaped namespace token of a namespaced target; `None`: every key under the prefix.
    pub namespace: Option<String>,
    pub delete_marker_ttl: Duration,
    pub max_in_flight: usize,
    /// `{cluster}.{instance}` of this deployment, written on every key; `None`: not known (no
    /// durable state), nothing written, nothing checked.
    pub owner: Option<String>,
}

pub(crate) struct Writer {
    place: Place,
    /// `Nats-TTL` of delete markers, as the server reads it.
    ttl: String,
    revisions: HashMap<u64, u64, rustc_hash::FxBuildHasher>,
    in_flight: VecDeque<Pending>,
    /// The key hashes of `in_flight`.
    keys_in_flight: HashSet<u64, rustc_hash::FxBuildHasher>,
    acks: Acks,
    /// During a repair: the keys found at its start and not yet listed.
    snapshot: Option<HashMap<String, Found>>,
    metrics: MirrorMetrics,
    retry: Backoff,
    watch: String,
    /// Whether a key written by another deployment was logged (once per writer).
    foreign_logged: bool,
}

impl Writer {
    /// A writer for `place`, once its acknowledgements' subscription is made (retried until it
    /// is).
    pub(crate) async fn new(place: Place, metrics: MirrorMetrics, watch: String) -> Writer {
        // The bucket's requests' timeout.
        let timeout = jetstream::context::traits::TimeoutProvider::timeout(&place.context);
        let acks = Acks::subscribe(&place.context.client(), &watch, timeout).await;
        Writer {
            ttl: format!("{}s", place.delete_marker_ttl.as_secs().max(1)),
            place,
            revisions: HashMap::default(),
            in_flight: VecDeque::new(),
            keys_in_flight: HashSet::default(),
            acks,
            snapshot: None,
            metrics,
            retry: Backoff::new(NATS_WRITE_RETRY),
            watch,
            foreign_logged: false,
        }
    }

    /// Runs until the watch task drops its sender, then completes what is in flight.
    pub(crate) async fn run(mut self, mut ops: mpsc::Receiver<Op>) {
        loop {
            while self.in_flight.front().is_some_and(|p| p.outcome.is_some()) {
                self.complete_oldest().await;
            }
            let waiting = !self.in_flight.is_empty();
            tokio::select! {
                biased;
                () = self.next_answer(), if waiting => {}
                op = ops.recv() => match op {
                    Some(op) => self.handle(op).await,
                    None => break,
                },
            }
        }
        while !self.in_flight.is_empty() {
            self.complete_oldest().await;
        }
        if self.snapshot.take().is_some() {
            self.metrics.repairs.dec();
        }
    }

    async fn handle(&mut self, op: Op) {
        match op {
            Op::Write(write) => self.write(write).await,
            Op::RepairBegin => {
                if self.snapshot.is_none() {
                    self.metrics.repairs.inc();
                }
                // Earlier writes first, so that the keys read show them.
                while !self.in_flight.is_empty() {
                    self.complete_oldest().await;
                }
                let found = self.read_keys().await;
                // Another deployment's key keeps no revision here: a write to it is refused,
                // read and found foreign (`foreign`), never made over it.
                for (key, found) in &found {
                    if self.other_owner(found).is_none() {
                        self.revisions.insert(hash(key), found.revision);
                    }
                }
                self.snapshot = Some(found);
            }
            Op::RepairEnd(version) => {
                let Some(snapshot) = self.snapshot.take() else {
                    return;
                };
                let mut gone: Vec<(String, Found)> = snapshot
                    .into_iter()
                    .filter(|(key, found)| found.live && self.owns(key))
                    .collect();
                gone.retain(|(key, found)| !self.foreign(key, found));
                gone.sort_by(|a, b| a.0.cmp(&b.0));
                let repaired = gone.len();
                for (key, _) in gone {
                    self.metrics.pending.inc();
                    self.write(Write {
                        subject: format!("{}{key}", self.place.subject_prefix).into(),
                        version: version.clone(),
                        kind: WriteKind::Delete { headers: None },
                        queued_at: Instant::now(),
                    })
                    .await;
                }
                while !self.in_flight.is_empty() {
                    self.complete_oldest().await;
                }
                self.metrics.repairs.dec();
                tracing::info!(watch = %self.watch, deleted = repaired, "mirror repaired: the bucket holds the listed objects");
            }
        }
    }

    /// The key `write` is for.
    fn key<'a>(&self, write: &'a Write) -> &'a str {
        &write.subject[self.place.subject_prefix.len()..]
    }

    /// Whether a key under the prefix belongs to this target.
    fn owns(&self, key: &str) -> bool {
        match (
            &self.place.namespace,
            super::key::namespace_token(&self.place.key_prefix, key),
        ) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(namespace), Some(token)) => token == namespace,
        }
    }

    /// Whether another deployment wrote `key` last (its `Kube2nats-Owner` is not this one's):
    /// then this one neither overwrites nor deletes it. Counted and logged (once).
    fn foreign(&mut self, key: &str, found: &Found) -> bool {
        let Some(theirs) = self.other_owner(found) else {
            return false;
        };
        self.metrics.foreign.inc();
        if !self.foreign_logged {
            self.foreign_logged = true;
            let ours = self.place.owner.as_deref().unwrap_or_default();
            tracing::error!(watch = %self.watch, key, owner = %ours, other_owner = %theirs, "another kube2nats deployment writes this mirror key: neither overwritten nor deleted; give each deployment its own mirror.bucket or publish.cluster (docs/mirror.md)");
        }
        true
    }

    /// The owner of a key another deployment wrote last; `None` for this one's (or an owner
    /// not known on either side).
    fn other_owner<'a>(&self, found: &'a Found) -> Option<&'a str> {
        let (ours, theirs) = (self.place.owner.as_deref()?, found.owner.as_deref()?);
        (ours != theirs).then_some(theirs)
    }

    /// Queues one write once no earlier write of its key is in flight and the window has room;
    /// during a repair, only if the key differs from it.
    async fn write(&mut self, write: Write) {
        let hash = hash(self.key(&write));
        let key_at = self.place.subject_prefix.len();
        if let Some(snapshot) = &mut self.snapshot {
            if matches!(write.kind, WriteKind::Delete { .. }) {
                // A deletion a list found carries the object's last version kube2nats remembers,
                // which may be older than the key (the key is written before a checkpoint): the
                // list's end deletes every key it did not show, at the list's version.
                self.metrics.pending.dec();
                return;
            }
            if let Some(found) = snapshot.remove(&write.subject[key_at..]) {
                // The key holds this version already, or a newer one (a list older than what
                // another writer wrote), or another deployment's: nothing to write.
                if !supersedes(&write, Some(&found))
                    || self.foreign(&write.subject[key_at..], &found)
                {
                    self.metrics.pending.dec();
                    return;
                }
            }
        }
        while self.in_flight.len() >= self.place.max_in_flight
            || self.keys_in_flight.contains(&hash)
        {
            self.complete_oldest().await;
        }
        let expected = self.revisions.get(&hash).copied().unwrap_or(0);
        let Some(token) = self.send(&write, expected).await else {
            self.metrics.pending.dec();
            return;
        };
        self.keys_in_flight.insert(hash);
        self.in_flight.push_back(Pending {
            write,
            hash,
            expected,
            token,
            sent_at: Instant::now(),
            outcome: None,
        });
    }

    /// Publishes one write, retrying until the client takes it; its acknowledgement's token, or
    /// `None` for a write the server can never take (larger than its `max_payload`: logged and
    /// counted).
    async fn send(&mut self, write: &Write, expected: u64) -> Option<u64> {
        loop {
            let (headers, payload) = match &write.kind {
                WriteKind::Put { headers, value } => (
                    put_headers(headers, expected, self.place.owner.as_deref()),
                    value.clone(),
                ),
                WriteKind::Delete { headers } => (
                    delete_headers(
                        headers.as_ref(),
                        &write.version,
                        &self.ttl,
                        (expected, self.place.owner.as_deref()),
                    ),
                    Bytes::new(),
                ),
            };
            let (token, reply) = self.acks.next_reply();
            match self
                .place
                .context
                .client()
                .publish_with_reply_and_serialized_headers(
                    write.subject.clone(),
                    reply,
                    headers,
                    payload,
                )
                .await
            {
                Ok(()) => return Some(token),
                Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded => {
                    self.metrics.write_errors.inc();
                    tracing::error!(watch = %self.watch, key = %self.key(write), error = %e, "mirror write larger than the NATS server's max_payload; not written");
                    return None;
                }
                Err(e) => self.pause("bucket write failed", &e).await,
            }
        }
    }

    /// Takes the oldest write out of the window once the bucket answered it; a refused one is
    /// read and written again over an older value, or given up over a newer one; a failed one is
    /// sent again.
    async fn complete_oldest(&mut self) {
        loop {
            let Some(oldest) = self.in_flight.front_mut() else {
                return;
            };
            let Some(outcome) = oldest.outcome.take() else {
                self.next_answer().await;
                continue;
            };
            let Some(pending) = self.in_flight.pop_front() else {
                return;
            };
            let expected = match outcome {
                Outcome::Stored(revision) => {
                    self.revisions.insert(pending.hash, revision);
                    match pending.write.kind {
                        WriteKind::Put { .. } => self.metrics.puts.inc(),
                        WriteKind::Delete { .. } => self.metrics.deletes.inc(),
                    }
                    self.metrics
                        .write_lag
                        .observe(pending.write.queued_at.elapsed().as_secs_f64());
                    self.retry.reset();
                    self.done(&pending);
                    return;
                }
                Outcome::Fenced => {
                    let write = &pending.write;
                    let found = self.read_key(&write.subject).await;
                    let key = &write.subject[self.place.subject_prefix.len()..];
                    if found.as_ref().is_some_and(|f| self.foreign(key, f)) {
                        // Its revision is not kept: the next write to the key is refused too.
                        self.done(&pending);
                        return;
                    }
                    if !supersedes(write, found.as_ref()) {
                        self.revisions
                            .insert(pending.hash, found.map_or(0, |f| f.revision));
                        self.metrics.fenced.inc();
                        tracing::debug!(watch = %self.watch, key = %self.key(write), version = %write.version, "mirror write not made: the key holds the same or a newer version");
                        self.done(&pending);
                        return;
                    }
                    found.map_or(0, |f| f.revision)
                }
                Outcome::Failed(error) => {
                    self.metrics.write_errors.inc();
                    self.pause("bucket write not acknowledged", &error).await;
                    pending.expected
                }
                // The timeout was the wait: a window of writes whose answers a lost connection
                // took with it goes again at once, not a back-off apiece.
                Outcome::Unanswered => pending.expected,
            };
            // Sent again, it stays the oldest.
            match self.send(&pending.write, expected).await {
                Some(token) => self.in_flight.push_front(Pending {
                    expected,
                    token,
                    sent_at: Instant::now(),
                    outcome: None,
                    ..pending
                }),
                None => {
                    self.done(&pending);
                    return;
                }
            }
        }
    }

    /// A write leaves the window.
    fn done(&mut self, pending: &Pending) {
        self.keys_in_flight.remove(&pending.hash);
        self.metrics.pending.dec();
    }

    /// Waits for the next answer to a write in the window and keeps it with the write: an
    /// acknowledgement read from the subscription, or the failure of every write whose answer is
    /// overdue. Cancel-safe.
    async fn next_answer(&mut self) {
        match self.acks.next().await {
            Answer::Ack(token, outcome) => self.record(token, outcome),
            Answer::Watchdog => self.fail_overdue(),
        }
    }

    /// Every write unanswered for longer than [`Acks::timeout`] failed.
    fn fail_overdue(&mut self) {
        let Some(deadline) = Instant::now().checked_sub(self.acks.timeout()) else {
            return;
        };
        let mut overdue = 0;
        for pending in &mut self.in_flight {
            if pending.outcome.is_none() && pending.sent_at <= deadline {
                pending.outcome = Some(Outcome::Unanswered);
                overdue += 1;
            }
        }
        if overdue > 0 {
            self.metrics.write_errors.inc_by(overdue);
            tracing::warn!(watch = %self.watch, writes = overdue, timeout = human(self.acks.timeout()), "mirror writes not acknowledged in time; writing them again");
        }
    }

    /// Keeps the answer `outcome` with the write sent with `token`; an answer to a write no
    /// longer waiting for one (sent again after a timeout) is dropped.
    fn record(&mut self, token: u64, outcome: Outcome) {
        if let Some(pending) = self
            .in_flight
            .iter_mut()
            .find(|p| p.token == token && p.outcome.is_none())
        {
            pending.outcome = Some(outcome);
        }
    }

    /// The last message of the key at `subject` (headers only matter); `None` when the key has
    /// none.
    async fn read_key(&mut self, subject: &str) -> Option<Found> {
        use jetstream::stream::LastRawMessageErrorKind;
        loop {
            match self
                .place
                .stream
                .get_last_raw_message_by_subject(subject)
                .await
            {
                Ok(message) => {
                    let headers = &message.headers;
                    let get = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
                    return Some(Found {
                        revision: message.sequence,
                        version: get("Kube-Resource-Version"),
                        live: is_live(
                            get("KV-Operation").as_deref(),
                            get("Nats-Marker-Reason").is_some(),
                        ),
                        owner: get(OWNER.as_ref()),
                    });
                }
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return None,
                Err(e) => self.pause("reading a mirror key failed", &e).await,
            }
        }
    }

    /// Every key under the target: revision, version, whether live (a last-per-subject,
    /// headers-only consumer, as a KV client lists keys).
    async fn read_keys(&mut self) -> HashMap<String, Found> {
        loop {
            match read_keys(&self.place).await {
                Ok(found) => return found,
                Err(e) => self.pause("reading the mirror's keys failed", &*e).await,
            }
        }
    }
}

/// [`Writer::read_keys`], once.
async fn read_keys(
    place: &Place,
) -> Result<HashMap<String, Found>, Box<dyn std::error::Error + Send + Sync>> {
    {
        let mut found = HashMap::new();
        // The resource's keys at every version: those of a version the watch moved away from are
        // deleted by the repair (docs/mirror.md).
        let keys = super::key::any_version(&place.key_prefix);
        let filter = match &place.namespace {
            Some(namespace) => format!("{}{keys}{namespace}.>", place.subject_prefix),
            None => format!("{}{keys}>", place.subject_prefix),
        };
        let consumer = place
            .stream
            .create_consumer(consumer::push::OrderedConfig {
                deliver_subject: place.context.client().new_inbox(),
                filter_subject: filter,
                headers_only: true,
                replay_policy: consumer::ReplayPolicy::Instant,
                deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await?;
        if consumer.cached_info().num_pending == 0 {
            return Ok(found);
        }
        let mut messages = consumer.messages().await?;
        while let Some(message) = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .map_err(|_| "timed out reading the mirror's keys")?
        {
            let message = message?;
            let info = message.info()?;
            let (revision, pending) = (info.stream_sequence, info.pending);
            let Some(key) = message.subject.strip_prefix(&place.subject_prefix) else {
                continue;
            };
            let headers = message.headers.as_ref();
            let get = |name: &str| {
                headers
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_owned())
            };
            found.insert(
                key.to_owned(),
                Found {
                    revision,
                    version: get("Kube-Resource-Version"),
                    live: is_live(
                        get("KV-Operation").as_deref(),
                        get("Nats-Marker-Reason").is_some(),
                    ),
                    owner: get(OWNER.as_ref()),
                },
            );
            if pending == 0 {
                break;
            }
        }
        Ok(found)
    }
}

impl Writer {
    async fn pause(&mut self, what: &str, error: &(dyn std::fmt::Display + Sync)) {
        let delay = self.retry.next_delay();
        tracing::warn!(watch = %self.watch, error = %error, retry_in = human(delay), "{what}; retrying");
        tokio::time::sleep(delay).await;
    }
}

/// A key holds a value unless its last message is a delete, a purge or a server's marker.
fn is_live(operation: Option<&str>, marker: bool) -> bool {
    !marker && !matches!(operation, Some("DEL" | "PURGE"))
}

/// Whether `write` should replace what the key holds. A put replaces an older version (or a
/// deletion older than it); a delete removes a value not newer than the deletion (a deletion found
/// by a list carries the object's last known version, which the key may hold).
fn supersedes(write: &Write, found: Option<&Found>) -> bool {
    let Some(found) = found else {
        // No message: a put creates the key, a delete has nothing to do.
        return matches!(write.kind, WriteKind::Put { .. });
    };
    let current = found.version.as_deref().map(ResourceVersion::new);
    match write.kind {
        WriteKind::Delete { .. } => {
            found.live
                && current
                    .as_ref()
                    .is_none_or(|current| current.newer_than(&write.version) != Some(true))
        }
        WriteKind::Put { .. } => match current {
            None => true,
            Some(current) => match write.version.newer_than(&current) {
                Some(newer) => newer,
                // Not integers: only equality is known.
                None => write.version != current,
            },
        },
    }
}

fn hash(key: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = rustc_hash::FxBuildHasher.build_hasher();
    h.write(key.as_bytes());
    h.finish()
}

/// A put's header block: the event message's, less its `Nats-Msg-Id` (a KV key may be written
/// with the same version again after a delete, which the bucket's duplicate window would drop),
/// plus the key's expected revision. The event's lines are copied as they are, not parsed again.
fn put_headers(event: &SerializedHeaders, expected: u64, owner: Option<&str>) -> SerializedHeaders {
    let mut block = event.builder_from(&[MSG_ID], EXPECTED_LINE_BYTES + owner_line_bytes(owner));
    append_expected(&mut block, expected);
    append_owner(&mut block, owner);
    block.finish()
}

/// The bytes of a `Kube2nats-Owner` line.
fn owner_line_bytes(owner: Option<&str>) -> usize {
    owner.map_or(0, |o| "Kube2nats-Owner: ".len() + o.len() + 2)
}

/// Appends `Kube2nats-Owner` when the owner is known (a token: never refused).
fn append_owner(block: &mut SerializedHeadersBuilder, owner: Option<&str>) {
    if let Some(owner) = owner {
        let _ = block.append(&OWNER, owner);
    }
}

/// A delete marker's header block: the DELETED message's (when there was one) less its
/// `Nats-Msg-Id` and `Kube-Resource-Version`, plus the marker's operation, TTL and version and the
/// key's expected revision.
fn delete_headers(
    event: Option<&SerializedHeaders>,
    version: &ResourceVersion,
    ttl: &str,
    (expected, owner): (u64, Option<&str>),
) -> SerializedHeaders {
    let extra = 64 + version.as_str().len() + EXPECTED_LINE_BYTES + owner_line_bytes(owner);
    let mut block = match event {
        Some(event) => event.builder_from(&[MSG_ID, header::RESOURCE_VERSION.as_ref()], extra),
        None => SerializedHeaders::builder(extra),
    };
    // Values made here, or a version the event's block accepted: never refused.
    let _ = block.append(&KV_OPERATION, "DEL");
    let _ = block.append(&NATS_TTL, ttl);
    let _ = block.append(&header::RESOURCE_VERSION, version.as_str());
    append_expected(&mut block, expected);
    append_owner(&mut block, owner);
    block.finish()
}

const MSG_ID: &str = "Nats-Msg-Id";

/// `Nats-Expected-Last-Subject-Sequence: <u64>\r\n` at its longest.
const EXPECTED_LINE_BYTES: usize = 36 + 2 + 20 + 2;

/// Appends `Nats-Expected-Last-Subject-Sequence`, formatted without an allocation.
fn append_expected(block: &mut SerializedHeadersBuilder, expected: u64) {
    let mut digits = [0u8; 20];
    let _ = block.append(
        &EXPECTED_LAST_SUBJECT_SEQUENCE,
        decimal(expected, &mut digits),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(version: &str) -> Write {
        Write {
            subject: "$KV.objects.core.v1.pods.a.b".into(),
            version: ResourceVersion::new(version),
            kind: WriteKind::Put {
                headers: SerializedHeaders::builder(0).finish(),
                value: Bytes::new(),
            },
            queued_at: Instant::now(),
        }
    }

    fn found(version: &str, live: bool) -> Found {
        Found {
            revision: 7,
            version: Some(version.into()),
            live,
            owner: None,
        }
    }

    #[test]
    fn only_a_newer_version_replaces_a_key() {
        assert!(supersedes(&put("10"), Some(&found("9", true))));
        assert!(!supersedes(&put("10"), Some(&found("10", true))));
        assert!(!supersedes(&put("10"), Some(&found("11", true))));
        assert!(
            !supersedes(&put("10"), Some(&found("11", false))),
            "a newer deletion stays"
        );
        assert!(
            supersedes(&put("12"), Some(&found("11", false))),
            "a recreation replaces it"
        );
        assert!(supersedes(&put("10"), None));
        assert!(supersedes(&put("b"), Some(&found("a", true))));
        assert!(!supersedes(&put("a"), Some(&found("a", true))));
        let delete = |version: &str| Write {
            kind: WriteKind::Delete { headers: None },
            ..put(version)
        };
        assert!(
            supersedes(&delete("10"), Some(&found("10", true))),
            "a vanished object"
        );
        assert!(supersedes(&delete("11"), Some(&found("10", true))));
        assert!(
            !supersedes(&delete("10"), Some(&found("11", true))),
            "recreated since"
        );
        assert!(
            !supersedes(&delete("12"), Some(&found("11", false))),
            "deleted already"
        );
        assert!(!supersedes(&delete("12"), None));
    }

    #[test]
    fn the_mirror_blocks_drop_the_message_id_and_add_their_own() {
        let mut event = SerializedHeaders::builder(64);
        event.append(&header::RESOURCE_VERSION, "5").unwrap();
        event.append(&header::MSG_ID, "w:u:5").unwrap();
        event.append(&header::NAME, "web").unwrap();
        let event = event.finish();
        let lines = |block: &SerializedHeaders| {
            block
                .iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect::<Vec<_>>()
        };
        let owned = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lines(&put_headers(&event, 3, Some("c1.shop"))).last(),
            Some(&("Kube2nats-Owner".to_owned(), "c1.shop".to_owned()))
        );
        assert_eq!(
            lines(&put_headers(&event, 18_446_744_073_709_551_615, None)),
            owned(&[
                ("Kube-Resource-Version", "5"),
                ("Kube-Name", "web"),
                (
                    "Nats-Expected-Last-Subject-Sequence",
                    "18446744073709551615"
                )
            ])
        );
        let version = ResourceVersion::new("6");
        assert_eq!(
            lines(&delete_headers(
                Some(&event),
                &version,
                "900s",
                (0, Some("c1.shop"))
            )),
            owned(&[
                ("Kube-Name", "web"),
                ("KV-Operation", "DEL"),
                ("Nats-TTL", "900s"),
                ("Kube-Resource-Version", "6"),
                ("Nats-Expected-Last-Subject-Sequence", "0"),
                ("Kube2nats-Owner", "c1.shop")
            ])
        );
        assert_eq!(
            lines(&delete_headers(None, &version, "1s", (42, None))),
            owned(&[
                ("KV-Operation", "DEL"),
                ("Nats-TTL", "1s"),
                ("Kube-Resource-Version", "6"),
                ("Nats-Expected-Last-Subject-Sequence", "42")
            ])
        );
    }
}
