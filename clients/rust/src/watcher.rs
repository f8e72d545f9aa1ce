//! kube-runtime's `watcher`, read from kube2nats' object mirror instead of the API server.
//!
//! The stream is the one `kube::runtime::watcher` yields — `Init`, an `InitApply` per object,
//! `InitDone`, then `Apply` and `Delete` — so `reflector`, `Controller::for_stream` and every
//! `WatchStreamExt` adapter take it unchanged. Underneath is the watch a KV client makes: an
//! ordered consumer on the bucket's stream that delivers the last message of each key under the
//! resource's filter, then every new one. Its `num_pending` at creation says how many initial
//! values there are, so an empty resource is synced at once.
//!
//! After every reconnect of the NATS client, and after every error of the consumer, the watch
//! starts afresh and yields a new `Init … InitDone`, as kube-runtime's watcher does after a
//! desync: a deletion whose delete marker expired while the client was away leaves no message
//! to see, so only a relist shows it (a reflector's store drops what the relist does not hold).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::push, consumer::DeliverPolicy};
use futures_util::{Stream, StreamExt};
use kube::runtime::watcher::{self as kube_watcher, Event};
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::backoff::Backoff;
use crate::cache::{Cache, Change};
use crate::entry::Entry;
use crate::error::Error;
use crate::key::Scope;

/// How long a watch that still expects initial values waits for the next one.
const INITIAL_VALUE_WAIT: Duration = Duration::from_secs(5);
/// How often a followed watch that receives nothing checks whether the client reconnected.
const RECONNECT_CHECK: Duration = Duration::from_secs(1);

/// Which objects a watcher reads, beside the resource its type names.
#[derive(Debug, Clone)]
pub struct Config {
    bucket: String,
    cluster: Option<String>,
    namespace: Option<String>,
    any_version: bool,
}

impl Default for Config {
    /// The bucket `kube-objects` (kube2nats' `mirror.bucket` default), no `publish.cluster`, all
    /// namespaces, the type's own version.
    fn default() -> Config {
        Config {
            bucket: "kube-objects".into(),
            cluster: None,
            namespace: None,
            any_version: false,
        }
    }
}

impl Config {
    /// kube2nats' `mirror.bucket`.
    pub fn bucket(mut self, bucket: impl Into<String>) -> Config {
        self.bucket = bucket.into();
        self
    }

    /// kube2nats' `publish.cluster`, which leads every key.
    pub fn cluster(mut self, cluster: impl Into<String>) -> Config {
        self.cluster = Some(cluster.into());
        self
    }

    /// One namespace instead of all.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Config {
        self.namespace = Some(namespace.into());
        self
    }

    /// The resource at whichever version kube2nats serves it: for a watch that follows a CRD's
    /// preferred version (docs/mirror.md, "Keys when the version moves"). Each value is
    /// deserialized into the type whatever its version.
    pub fn any_version(mut self) -> Config {
        self.any_version = true;
        self
    }

    pub(crate) fn scope<K: Resource>(&self, dt: &K::DynamicType) -> Scope {
        Scope {
            cluster: self.cluster.clone(),
            group: K::group(dt).into_owned(),
            version: (!self.any_version).then(|| K::version(dt).into_owned()),
            plural: K::plural(dt).into_owned(),
            namespace: self.namespace.clone(),
        }
    }
}

/// The objects of `K` in kube2nats' mirror, as kube-runtime's watcher yields them from the API
/// server. Errors are items of the stream, each followed by a pause and a fresh start; the stream
/// ends only when it is dropped.
///
/// ```no_run
/// # async fn run(client: async_nats::Client) {
/// use futures_util::StreamExt;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::runtime::{reflector, WatchStreamExt};
///
/// let (reader, writer) = reflector::store::<Pod>();
/// let pods = kube2nats_client::watcher::<Pod>(client, kube2nats_client::Config::default());
/// let mut applied = reflector(writer, pods).applied_objects().boxed();
/// while let Some(pod) = applied.next().await {
///     println!("{} pods cached", reader.state().len());
/// }
/// # }
/// ```
pub fn watcher<K>(
    client: async_nats::Client,
    config: Config,
) -> impl Stream<Item = kube_watcher::Result<Event<K>>> + Send
where
    K: Resource + DeserializeOwned + Clone + Send + 'static,
    K::DynamicType: Default,
{
    watcher_with(client, config, Default::default())
}

/// [`watcher()`] for a type whose resource is known at run time, as kube's `Api::all_with`:
/// `DynamicObject` with an `ApiResource`, say.
pub fn watcher_with<K>(
    client: async_nats::Client,
    config: Config,
    dt: K::DynamicType,
) -> impl Stream<Item = kube_watcher::Result<Event<K>>> + Send
where
    K: Resource + DeserializeOwned + Clone + Send + 'static,
{
    let scope = config.scope::<K>(&dt);
    let kind = K::kind(&dt).into_owned();
    let state = Watch {
        kind: kind.clone(),
        js: jetstream::new(client.clone()),
        client,
        stream: format!("KV_{}", config.bucket),
        prefix: format!("$KV.{}.", config.bucket),
        filter: scope.key_filter(),
        connects: 0,
        phase: Phase::Starting,
        cache: Cache::new(&kind),
        pending: VecDeque::new(),
        backoff: Backoff::new(),
    };
    futures_util::stream::unfold(state, |mut watch| async move {
        let item = watch.step().await;
        Some((item.map_err(Error::into_watcher_error), watch))
    })
}

/// Where the watch stands; each variant says what the next step does.
enum Phase {
    /// Open a fresh consumer, read its initial values, and yield them as `Init … InitDone`.
    Starting,
    /// Yield the next change from the open consumer.
    Following(Box<push::Ordered>),
    /// Pause after an error, then start again.
    Pausing(Duration),
}

struct Watch<K> {
    /// The resource's kind, for errors.
    kind: String,
    client: async_nats::Client,
    js: jetstream::Context,
    /// `KV_{bucket}`, the bucket's stream.
    stream: String,
    /// `$KV.{bucket}.`, before every key in a subject.
    prefix: String,
    filter: String,
    /// The client's connection count when the consumer was opened: a larger one means a
    /// reconnect, after which the watch starts afresh.
    connects: u64,
    phase: Phase,
    cache: Cache,
    /// Items made by one step and yielded by the next ones: a start's `Init … InitDone`, and
    /// the values among its initial ones that are not the resource.
    pending: VecDeque<Result<Event<K>, Error>>,
    backoff: Backoff,
}

impl<K> Watch<K>
where
    K: Resource + DeserializeOwned + Clone,
{
    async fn step(&mut self) -> Result<Event<K>, Error> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return item;
            }
            match std::mem::replace(&mut self.phase, Phase::Starting) {
                Phase::Pausing(pause) => tokio::time::sleep(pause).await,
                Phase::Starting => match self.start().await {
                    Ok(messages) => {
                        self.backoff.reset();
                        self.phase = Phase::Following(Box::new(messages));
                    }
                    Err(e) => {
                        self.phase = Phase::Pausing(self.backoff.next());
                        return Err(e);
                    }
                },
                Phase::Following(mut messages) => {
                    let next = tokio::time::timeout(RECONNECT_CHECK, messages.next()).await;
                    if self.reconnected() {
                        continue;
                    }
                    let message = match next {
                        Err(_elapsed) => {
                            self.phase = Phase::Following(messages);
                            continue;
                        }
                        Ok(Some(Ok(message))) => message,
                        Ok(Some(Err(e))) => {
                            self.phase = Phase::Pausing(self.backoff.next());
                            return Err(Error::follow(&self.stream, e));
                        }
                        Ok(None) => {
                            self.phase = Phase::Pausing(self.backoff.next());
                            return Err(Error::follow(&self.stream, "the consumer ended"));
                        }
                    };
                    self.phase = Phase::Following(messages);
                    match self.apply(&message)? {
                        Change::Added(object) | Change::Modified(object) => {
                            return Ok(Event::Apply(object))
                        }
                        Change::Deleted(object) => return Ok(Event::Delete(object)),
                        Change::Nothing => {}
                    }
                }
            }
        }
    }

    fn reconnected(&self) -> bool {
        self.client.statistics().connects.load(Ordering::Relaxed) != self.connects
    }

    /// Opens a fresh consumer and reads its initial values into a fresh cache, queueing
    /// `Init`, an `InitApply` per object and `InitDone`.
    async fn start(&mut self) -> Result<push::Ordered, Error> {
        let stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(|e| Error::open(&self.stream, e))?;
        // Read once a reply proves a connection, which the count includes: read before, a
        // client made with `retry_on_initial_connect` counts its first connection later, and
        // that looked like a reconnect (one needless fresh start).
        self.connects = self.client.statistics().connects.load(Ordering::Relaxed);
        let consumer = stream
            .create_consumer(push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                filter_subject: format!("{}{}", self.prefix, self.filter),
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::open(&self.stream, e))?;
        let mut pending = consumer.cached_info().num_pending;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| Error::open(&self.stream, e))?;
        self.cache = Cache::new(&self.kind);
        let mut undecodable = Vec::new();
        let mut parsed = HashMap::new();
        while pending > 0 {
            let message = match tokio::time::timeout(INITIAL_VALUE_WAIT, messages.next()).await {
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(e))) => return Err(Error::open(&self.stream, e)),
                Ok(None) => return Err(Error::open(&self.stream, "the consumer ended")),
                Err(_) => return Err(Error::InitialValuesStalled(INITIAL_VALUE_WAIT)),
            };
            pending = message
                .info()
                .map_err(|e| Error::open(&self.stream, e.to_string()))?
                .pending;
            // Each object is parsed once: the InitApply events hand on what was applied.
            match self.apply(&message) {
                Ok(Change::Added(object) | Change::Modified(object)) => {
                    parsed.insert(self.key(&message).to_owned(), object);
                }
                Ok(Change::Deleted(_) | Change::Nothing) => {}
                Err(e) => undecodable.push(Err(e)),
            }
        }
        self.pending.push_back(Ok(Event::Init));
        let objects = self.cache.objects::<K>(parsed).into_iter();
        self.pending
            .extend(objects.map(|o| Ok(Event::InitApply(o))));
        self.pending.push_back(Ok(Event::InitDone));
        // Values that are not the resource are left out of the cache, and reported after it.
        self.pending.extend(undecodable);
        Ok(messages)
    }

    /// The KV key of a message of the bucket's stream.
    fn key<'m>(&self, message: &'m jetstream::Message) -> &'m str {
        message
            .subject
            .strip_prefix(self.prefix.as_str())
            .unwrap_or(&message.subject)
    }

    fn apply(&mut self, message: &jetstream::Message) -> Result<Change<K>, Error> {
        let entry = Entry::of(message.headers.as_ref(), &message.payload);
        let key = self.key(message);
        self.cache.apply(key, entry)
    }
}
