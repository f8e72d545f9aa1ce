//! Every change of a resource, from kube2nats' event stream, through a durable JetStream consumer:
//! for work that must see each change once (a queue, an audit trail, a notifier) rather than the
//! current objects (the [`watcher`](crate::watcher())).
//!
//! The consumer is durable and acknowledges explicitly: a change is delivered again until
//! [`Change::ack`] is called, and a subscriber restarted under the same durable name resumes after
//! the last acknowledged change. By default one change is in flight at a time
//! (`max_ack_pending = 1`), so changes reach the handler in the stream's order even across
//! restarts: a change handed out but not acknowledged (the subscriber stopped before its `ack`)
//! comes again after the ack wait (10 s), before any later change. A larger
//! [`EventsConfig::max_ack_pending`] lets changes flow without waiting for each acknowledgement,
//! and then such a change comes again after later ones (each object's changes carry growing
//! resourceVersions to tell). kube2nats gives every change one `Nats-Msg-Id`, and JetStream
//! drops a repeat within its duplicate window; a repeat stored later (kube2nats repeating what was
//! in flight at a crash, past that window) has the same id under a new stream sequence, and is
//! acknowledged and skipped here if its id was delivered in this run (the last
//! [`REMEMBERED_IDS`] ids are kept). A delivery of the same stream message again (not acknowledged
//! in time) is yielded again.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, consumer::DeliverPolicy};
use futures_util::{Stream, StreamExt};
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::backoff::Backoff;
use crate::error::Error;
use crate::key::Scope;

/// How many `Nats-Msg-Id`s a stream of changes remembers to drop repeats.
pub const REMEMBERED_IDS: usize = 10_000;

/// Which changes to read, and the durable consumer's name.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    durable: String,
    stream: String,
    prefix: String,
    cluster: Option<String>,
    namespace: Option<String>,
    any_version: bool,
    deliver_new: bool,
    max_ack_pending: i64,
    ack_wait: Duration,
}

impl EventsConfig {
    /// The durable consumer `durable` (one name per subscribing service: replicas of a service
    /// that share it share the work) on the stream `KUBE` under the prefix `kube` (kube2nats'
    /// defaults), all namespaces, the type's own version, from the stream's first change.
    pub fn new(durable: impl Into<String>) -> EventsConfig {
        EventsConfig {
            durable: durable.into(),
            stream: "KUBE".into(),
            prefix: "kube".into(),
            cluster: None,
            namespace: None,
            any_version: false,
            deliver_new: false,
            max_ack_pending: 1,
            ack_wait: Duration::from_secs(10),
        }
    }

    /// How many changes may be handed out and not yet acknowledged (default 1: strictly in
    /// order, also across restarts of the subscriber).
    pub fn max_ack_pending(mut self, n: i64) -> EventsConfig {
        self.max_ack_pending = n;
        self
    }

    /// How long a change handed out waits for its acknowledgement before it is delivered again
    /// (default 10 s).
    pub fn ack_wait(mut self, wait: Duration) -> EventsConfig {
        self.ack_wait = wait;
        self
    }

    /// kube2nats' `nats.jetstream.stream.name`.
    pub fn stream(mut self, stream: impl Into<String>) -> EventsConfig {
        self.stream = stream.into();
        self
    }

    /// kube2nats' `publish.prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> EventsConfig {
        self.prefix = prefix.into();
        self
    }

    /// kube2nats' `publish.cluster`.
    pub fn cluster(mut self, cluster: impl Into<String>) -> EventsConfig {
        self.cluster = Some(cluster.into());
        self
    }

    /// One namespace instead of all.
    pub fn namespace(mut self, namespace: impl Into<String>) -> EventsConfig {
        self.namespace = Some(namespace.into());
        self
    }

    /// The resource at whichever version kube2nats publishes it.
    pub fn any_version(mut self) -> EventsConfig {
        self.any_version = true;
        self
    }

    /// A new consumer starts at the changes published after it is created, not at the stream's
    /// first. (A consumer that exists resumes where it stopped either way.)
    pub fn deliver_new(mut self) -> EventsConfig {
        self.deliver_new = true;
        self
    }
}

/// What a change did to its object: the event's `Kube-Event-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// `ADDED`: the object is new (or listed by kube2nats at a start, `Kube-Synthesized: relist`).
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`: the object is the last state kube2nats saw.
    Deleted,
}

impl ChangeType {
    fn of(header: &str) -> Option<ChangeType> {
        match header {
            "ADDED" => Some(ChangeType::Added),
            "MODIFIED" => Some(ChangeType::Modified),
            "DELETED" => Some(ChangeType::Deleted),
            _ => None,
        }
    }

    /// `ADDED`, `MODIFIED` or `DELETED`, as a watch event's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One change: a watch event (`type`, `object`) and its message, to acknowledge once handled.
#[derive(Debug)]
pub struct Change<K> {
    /// What the change did.
    pub change_type: ChangeType,
    /// The object after the change (before it, for a deletion).
    pub object: K,
    message: jetstream::Message,
}

impl<K> Change<K> {
    /// The event's subject (docs/messages.md).
    pub fn subject(&self) -> &str {
        &self.message.subject
    }

    /// Marks the change handled: it is not delivered again, and a restarted subscriber resumes
    /// after it.
    pub async fn ack(&self) -> Result<(), Error> {
        self.message.ack().await.map_err(|source| Error::Ack {
            subject: self.message.subject.to_string(),
            source,
        })
    }
}

/// The changes of `K` from kube2nats' event stream, through the durable consumer `config` names.
/// Errors are items of the stream, each followed by a pause and a fresh start; the stream ends
/// only when it is dropped.
///
/// ```no_run
/// # async fn run(client: async_nats::Client) -> Result<(), kube2nats_client::Error> {
/// use futures_util::StreamExt;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube2nats_client::{events, EventsConfig};
///
/// let mut changes = events::<Pod>(client, EventsConfig::new("pod-auditor")).boxed();
/// while let Some(change) = changes.next().await {
///     let change = change?;
///     println!("{} {:?}", change.change_type.as_str(), change.object.metadata.name);
///     change.ack().await?;
/// }
/// # Ok(())
/// # }
/// ```
pub fn events<K>(
    client: async_nats::Client,
    config: EventsConfig,
) -> impl Stream<Item = Result<Change<K>, Error>> + Send
where
    K: Resource + DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    events_with(client, config, Default::default())
}

/// [`events()`] for a type whose resource is known at run time (`DynamicObject` with an
/// `ApiResource`).
pub fn events_with<K>(
    client: async_nats::Client,
    config: EventsConfig,
    dt: K::DynamicType,
) -> impl Stream<Item = Result<Change<K>, Error>> + Send
where
    K: Resource + DeserializeOwned + Send + 'static,
{
    let scope = Scope {
        cluster: config.cluster.clone(),
        group: K::group(&dt).into_owned(),
        version: (!config.any_version).then(|| K::version(&dt).into_owned()),
        plural: K::plural(&dt).into_owned(),
        namespace: config.namespace.clone(),
    };
    let consumer = pull::Config {
        durable_name: Some(config.durable.clone()),
        filter_subject: scope.subject_filter(&config.prefix),
        ack_policy: AckPolicy::Explicit,
        max_ack_pending: config.max_ack_pending,
        ack_wait: config.ack_wait,
        deliver_policy: if config.deliver_new {
            DeliverPolicy::New
        } else {
            DeliverPolicy::All
        },
        ..Default::default()
    };
    let state = Events {
        kind: K::kind(&dt).into_owned(),
        js: jetstream::new(client),
        stream: config.stream,
        consumer,
        messages: None,
        backoff: Backoff::new(),
        pause: None,
        seen: Seen::default(),
    };
    futures_util::stream::unfold(state, |mut events| async move {
        let item = events.step::<K>().await;
        Some((item, events))
    })
}

struct Events {
    /// The resource's kind, for errors.
    kind: String,
    js: jetstream::Context,
    stream: String,
    consumer: pull::Config,
    messages: Option<pull::Stream>,
    backoff: Backoff,
    /// A pause to take before the consumer is opened again, after an error.
    pause: Option<Duration>,
    seen: Seen,
}

impl Events {
    async fn step<K>(&mut self) -> Result<Change<K>, Error>
    where
        K: Resource + DeserializeOwned,
    {
        loop {
            if let Some(pause) = self.pause.take() {
                tokio::time::sleep(pause).await;
            }
            let messages = match &mut self.messages {
                Some(messages) => messages,
                None => match self.open().await {
                    Ok(messages) => {
                        self.backoff.reset();
                        self.messages.insert(messages)
                    }
                    Err(e) => {
                        self.pause = Some(self.backoff.next());
                        return Err(e);
                    }
                },
            };
            let message = match messages.next().await {
                Some(Ok(message)) => message,
                failed => {
                    self.messages = None;
                    self.pause = Some(self.backoff.next());
                    let source: crate::BoxError = match failed {
                        Some(Err(e)) => Box::new(e),
                        _ => "the consumer ended".into(),
                    };
                    return Err(Error::follow(self.consumer_name(), source));
                }
            };
            let Ok(info) = message.info().map(|i| i.stream_sequence) else {
                continue;
            };
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Msg-Id"))
                .map(|v| v.as_str().to_owned());
            if let Some(id) = id {
                if self.seen.repeat(id, info) {
                    // Handed out already under another stream sequence: done with.
                    let _ = message.ack().await;
                    continue;
                }
            }
            return match change(message, &self.kind) {
                Ok(change) => Ok(change),
                Err((message, e)) => {
                    // It will never decode: not delivered again, reported once.
                    let _ = message.ack_with(jetstream::AckKind::Term).await;
                    Err(e)
                }
            };
        }
    }

    fn consumer_name(&self) -> String {
        format!(
            "{}/{}",
            self.stream,
            self.consumer.durable_name.as_deref().unwrap_or_default()
        )
    }

    async fn open(&self) -> Result<pull::Stream, Error> {
        let what = self.consumer_name();
        let stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(|e| Error::open(&what, e))?;
        let durable = self.consumer.durable_name.clone().unwrap_or_default();
        let consumer = stream
            .get_or_create_consumer(&durable, self.consumer.clone())
            .await
            .map_err(|e| Error::open(&what, e))?;
        consumer.messages().await.map_err(|e| Error::open(&what, e))
    }
}

/// The watch event a message carries: the type from `Kube-Event-Type`, the object from the
/// payload — the `{"type","object"}` event, or the object alone for a watch with
/// `payload = "object"`.
#[allow(clippy::result_large_err)]
fn change<K: DeserializeOwned>(
    message: jetstream::Message,
    kind: &str,
) -> Result<Change<K>, (jetstream::Message, Error)> {
    #[derive(serde::Deserialize)]
    struct Wrapped<K> {
        object: K,
    }
    let subject = message.subject.to_string();
    let change_type = message
        .headers
        .as_ref()
        .and_then(|h| h.get("Kube-Event-Type"))
        .and_then(|v| ChangeType::of(v.as_str()));
    let Some(change_type) = change_type else {
        return Err((message, Error::NoEventType(subject)));
    };
    let object = serde_json::from_slice::<Wrapped<K>>(&message.payload)
        .map(|w| w.object)
        .or_else(|_| serde_json::from_slice::<K>(&message.payload));
    match object {
        Ok(object) => Ok(Change {
            change_type,
            object,
            message,
        }),
        Err(source) => Err((
            message,
            Error::Decode {
                subject,
                kind: kind.to_owned(),
                source,
            },
        )),
    }
}

/// The `Nats-Msg-Id`s delivered in this run, each with its stream sequence, the last
/// [`REMEMBERED_IDS`] of them.
#[derive(Default)]
struct Seen {
    sequences: HashMap<String, u64>,
    order: VecDeque<String>,
}

impl Seen {
    /// Whether `id` was delivered before under another stream sequence: a repeat of the change.
    fn repeat(&mut self, id: String, sequence: u64) -> bool {
        match self.sequences.get(&id) {
            Some(&first) => first != sequence,
            None => {
                if self.order.len() == REMEMBERED_IDS {
                    if let Some(oldest) = self.order.pop_front() {
                        self.sequences.remove(&oldest);
                    }
                }
                self.order.push_back(id.clone());
                self.sequences.insert(id, sequence);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_is_the_same_id_at_another_sequence() {
        let mut seen = Seen::default();
        assert!(!seen.repeat("pods:u1:5".into(), 10));
        // Delivered again, not acknowledged in time: the same message.
        assert!(!seen.repeat("pods:u1:5".into(), 10));
        // Stored again by kube2nats past the duplicate window.
        assert!(seen.repeat("pods:u1:5".into(), 42));
        assert!(!seen.repeat("pods:u1:6".into(), 43));
    }

    #[test]
    fn only_the_last_ids_are_remembered() {
        let mut seen = Seen::default();
        for i in 0..=REMEMBERED_IDS as u64 {
            assert!(!seen.repeat(format!("id-{i}"), i));
        }
        assert_eq!(seen.sequences.len(), REMEMBERED_IDS);
        // The first was forgotten.
        assert!(!seen.repeat("id-0".into(), 99_999));
        assert!(seen.repeat(format!("id-{REMEMBERED_IDS}"), 99_999));
    }
}
