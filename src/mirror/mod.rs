//! The mirror (docs/mirror.md): the current objects of the mirrored watches in a JetStream
//! key-value bucket, kept in step with what kube2nats publishes, so that any NATS client's KV
//! watch is a complete informer (docs/subscribers.md).
//!
//! Each watch target's delivery ([`crate::delivery`]) hands the target's puts and deletes, in the
//! order it takes the event messages, to a writer task of its own ([`writer`]), which writes them
//! with per-key optimistic concurrency.
//! Every list (the first one of each start included: with the mirror on, a start always lists)
//! repairs the target's keys: what differs from the list is written, what the list did not show
//! is deleted. So the bucket converges on the API server's state after any fault, and nothing in
//! kube2nats holds an object body for it: the writer keeps one revision per key.

mod acks;
pub(crate) mod bucket;
pub(crate) mod key;
pub(crate) mod metrics;
mod writer;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::event::{EventType, ObjectMeta, ResourceVersion};
use crate::publish::message::OutMessage;
pub use bucket::MirrorUnavailable;
pub(crate) use bucket::{open, MirrorBucket};
use metrics::MirrorMetrics;
use writer::{Op, Place, Write, WriteKind, Writer};

/// Operations queued for a target's writer before the watch task waits.
const QUEUE: usize = 256;

/// An object's key in the bucket, and the version a write of it carries.
pub(crate) struct MirrorKey {
    /// `$KV.{bucket}.{key}`.
    pub(crate) subject: String,
    pub(crate) version: ResourceVersion,
}

/// One watch target's side of the mirror.
pub(crate) struct Mirror {
    ops: mpsc::Sender<Op>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// `$KV.{bucket}.` and the target's keys' prefix ([`key::watch_prefix`]).
    subject_prefix: String,
    metrics: MirrorMetrics,
}

impl Drop for Mirror {
    /// A watch task stopped without [`Mirror::finish`] (a lost term aborts it): its writer stops
    /// too, so that nothing is written for it after another replica took over.
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl Mirror {
    /// Starts the writer of one target: `namespace` is the target's (`None`: all namespaces).
    pub(crate) fn start(
        bucket: &MirrorBucket,
        prefix: String,
        namespace: Option<&str>,
        watch: &str,
        metrics: MirrorMetrics,
    ) -> Mirror {
        let namespace = namespace.map(|ns| {
            let mut token = String::new();
            key::escape_key_token(ns, &mut token);
            token
        });
        let subject_prefix = format!("$KV.{}.{prefix}", bucket.name);
        let place = Place {
            context: bucket.context.clone(),
            stream: bucket.stream.clone(),
            subject_prefix: format!("$KV.{}.", bucket.name),
            key_prefix: prefix,
            namespace,
            delete_marker_ttl: bucket.delete_marker_ttl,
            max_in_flight: bucket.max_in_flight,
            owner: bucket.owner.clone(),
        };
        let (ops, receiver) = mpsc::channel(QUEUE);
        let writer = Writer::new(place, metrics.clone(), watch.to_owned());
        let task = tokio::spawn(async move { writer.await.run(receiver).await });
        Mirror {
            ops,
            task: Some(task),
            subject_prefix,
            metrics,
        }
    }

    /// The watch's resource is served at `version` now: its keys name that version from here on
    /// (the next list writes them, and deletes those under the old version: docs/mirror.md).
    pub(crate) fn moved_to(&mut self, version: &str) {
        self.subject_prefix = key::at_version(&self.subject_prefix, version);
    }

    /// The object's key in the bucket, at the version `meta` carries.
    pub(crate) fn key(&self, meta: &ObjectMeta) -> MirrorKey {
        MirrorKey {
            subject: key::object_key(&self.subject_prefix, meta),
            version: meta.resource_version.clone(),
        }
    }

    /// Queues the write of the object of `message`: for a deletion a delete, else a put of
    /// `object` with the message's headers. The value shares the message's bytes: it is held
    /// only until the bucket acknowledges it, as a JetStream event message is.
    pub(crate) async fn write(&self, key: MirrorKey, message: &OutMessage, object: Bytes) {
        let headers = message.headers.clone();
        let kind = match message.event_type {
            EventType::Deleted => WriteKind::Delete {
                headers: Some(headers),
            },
            EventType::Added | EventType::Modified => WriteKind::Put {
                headers,
                value: object,
            },
        };
        self.queue(key, kind).await;
    }

    async fn queue(&self, MirrorKey { subject, version }: MirrorKey, kind: WriteKind) {
        self.metrics.pending.inc();
        let write = Write {
            subject: subject.into(),
            version,
            kind,
            queued_at: Instant::now(),
        };
        if self.ops.send(Op::Write(write)).await.is_err() {
            self.metrics.pending.dec();
        }
    }

    /// A list begins: the listed objects are compared with the bucket.
    pub(crate) async fn repair_begin(&self) {
        let _ = self.ops.send(Op::RepairBegin).await;
    }

    /// The list completed at `version`: keys it did not show are deleted.
    pub(crate) async fn repair_end(&self, version: ResourceVersion) {
        let _ = self.ops.send(Op::RepairEnd(version)).await;
    }

    /// Lets the writer complete what it was handed, then stops it.
    pub(crate) async fn finish(mut self) {
        let task = self.task.take();
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.ops, closed));
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}
