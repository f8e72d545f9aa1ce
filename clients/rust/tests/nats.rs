//! The kit against a real nats-server, with a stand-in for kube2nats writing the bucket and the
//! event stream as kube2nats does (docs/mirror.md, docs/messages.md): what the watcher yields for
//! each kind of message, across a reconnect whose deletions' markers expired meanwhile, and what
//! the durable event stream delivers across a restart of the subscriber.
//!
//! Needs nats-server: `scripts/install-test-tools nats-server` prints `NATS_SERVER_BIN`.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream::StorageType};
use async_nats::HeaderMap;
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{reflector, reflector::Store, watcher::Event};
use kube2nats_client::{events, watcher, Change, ChangeType, Config, EventsConfig};
use kube2nats_harness::gate::Gate;
use kube2nats_harness::nats::NatsServer;
use serde_json::json;

const BUCKET: &str = "kube-objects";
/// The TTL of a delete marker, and of the marker the server leaves when it expires.
const MARKER_TTL: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(20);

/// The bucket's writer, as kube2nats writes it.
struct Writer {
    js: jetstream::Context,
}

impl Writer {
    async fn create(nats: &NatsServer) -> Writer {
        let client = async_nats::connect(nats.url()).await.expect("connects");
        let js = jetstream::new(client);
        js.create_key_value(kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            storage: StorageType::File,
            limit_markers: Some(MARKER_TTL),
            ..Default::default()
        })
        .await
        .expect("the bucket");
        Writer { js }
    }

    async fn put(&self, key: &str, namespace: &str, name: &str, rv: u32) {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "resourceVersion": rv.to_string()},
        });
        let mut headers = HeaderMap::new();
        headers.insert("Kube-Resource-Version", rv.to_string().as_str());
        headers.insert("Kube-Kind", "Pod");
        let body = serde_json::to_vec(&pod).expect("json");
        self.publish(key, headers, body).await;
    }

    async fn put_raw(&self, key: &str, value: &[u8]) {
        self.publish(key, HeaderMap::new(), value.to_vec()).await;
    }

    async fn delete(&self, key: &str) {
        let mut headers = HeaderMap::new();
        headers.insert("KV-Operation", "DEL");
        headers.insert("Nats-TTL", "1s");
        self.publish(key, headers, Vec::new()).await;
    }

    async fn purge(&self, key: &str) {
        let mut headers = HeaderMap::new();
        headers.insert("KV-Operation", "PURGE");
        headers.insert("Nats-Rollup", "sub");
        headers.insert("Nats-TTL", "1s");
        self.publish(key, headers, Vec::new()).await;
    }

    async fn publish(&self, key: &str, headers: HeaderMap, payload: Vec<u8>) {
        self.js
            .publish_with_headers(format!("$KV.{BUCKET}.{key}"), headers, payload.into())
            .await
            .expect("publishes")
            .await
            .expect("acknowledged");
    }

    /// Waits until the bucket's stream holds `n` messages: markers expire, then the server's
    /// markers in their place.
    async fn holds(&self, n: u64) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let mut stream = self
                .js
                .get_stream(format!("KV_{BUCKET}"))
                .await
                .expect("stream");
            let messages = stream.info().await.expect("info").state.messages;
            if messages == n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{messages} messages, not {n}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn nats() -> NatsServer {
    NatsServer::start().await.expect(
        "nats-server starts (scripts/install-test-tools nats-server prints NATS_SERVER_BIN)",
    )
}

/// `{Init|InitApply|InitDone|Apply|Delete} name:rv`, or `error …`.
fn line(item: Result<Event<Pod>, kube::runtime::watcher::Error>) -> String {
    let id = |p: &Pod| {
        format!(
            "{}:{}",
            p.metadata.name.as_deref().unwrap_or_default(),
            p.metadata.resource_version.as_deref().unwrap_or_default()
        )
    };
    match item {
        Ok(Event::Init) => "Init".into(),
        Ok(Event::InitApply(p)) => format!("InitApply {}", id(&p)),
        Ok(Event::InitDone) => "InitDone".into(),
        Ok(Event::Apply(p)) => format!("Apply {}", id(&p)),
        Ok(Event::Delete(p)) => format!("Delete {}", id(&p)),
        Err(e) => format!("error {e}"),
    }
}

async fn next_line<S>(stream: &mut S) -> String
where
    S: Stream<Item = Result<Event<Pod>, kube::runtime::watcher::Error>> + Unpin,
{
    let item = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("an event within the wait")
        .expect("the stream goes on");
    line(item)
}

/// The lines of a start: `Init`, the `InitApply`s sorted, `InitDone`.
async fn start_lines<S>(stream: &mut S) -> Vec<String>
where
    S: Stream<Item = Result<Event<Pod>, kube::runtime::watcher::Error>> + Unpin,
{
    let mut lines = vec![next_line(stream).await];
    assert_eq!(lines[0], "Init");
    loop {
        let line = next_line(stream).await;
        lines.push(line.clone());
        if line == "InitDone" {
            break;
        }
    }
    let last = lines.len() - 1;
    lines[1..last].sort();
    lines
}

#[tokio::test]
async fn an_empty_bucket_is_synced_at_once() {
    let nats = nats().await;
    let _writer = Writer::create(&nats).await;
    let client = async_nats::connect(nats.url()).await.expect("connects");
    let mut pods = watcher::<Pod>(client, Config::default()).boxed();
    assert_eq!(start_lines(&mut pods).await, ["Init", "InitDone"]);
}

#[tokio::test]
async fn initial_values_then_each_change_and_every_kind_of_deletion() {
    let nats = nats().await;
    let writer = Writer::create(&nats).await;
    writer.put("core.v1.pods.shop.a", "shop", "a", 1).await;
    writer.put("core.v1.pods.shop.b", "shop", "b", 2).await;
    writer
        .put("core.v1.pods.shop.c_v2", "shop", "c.v2", 3)
        .await;
    // Not pods, and another deployment's pods (publish.cluster): outside the filter.
    writer
        .put("core.v1.configmaps.shop.a", "shop", "a", 4)
        .await;
    writer.put("east.core.v1.pods.shop.x", "shop", "x", 5).await;
    // A deletion whose marker is still there when the watch starts.
    writer
        .put("core.v1.pods.shop.gone", "shop", "gone", 6)
        .await;
    writer.delete("core.v1.pods.shop.gone").await;

    let client = async_nats::connect(nats.url()).await.expect("connects");
    let mut pods = watcher::<Pod>(client, Config::default()).boxed();
    assert_eq!(
        start_lines(&mut pods).await,
        [
            "Init",
            "InitApply a:1",
            "InitApply b:2",
            "InitApply c.v2:3",
            "InitDone"
        ]
    );

    writer.put("core.v1.pods.shop.a", "shop", "a", 7).await;
    assert_eq!(next_line(&mut pods).await, "Apply a:7");
    // The same version again (a repair writing what is there) is no change.
    writer.put("core.v1.pods.shop.a", "shop", "a", 7).await;
    writer.delete("core.v1.pods.shop.b").await;
    assert_eq!(next_line(&mut pods).await, "Delete b:2");
    writer.purge("core.v1.pods.shop.c_v2").await;
    assert_eq!(next_line(&mut pods).await, "Delete c.v2:3");
    // A value that is not a Pod: an error, and the watch goes on.
    writer.put_raw("core.v1.pods.shop.bad", b"{not json").await;
    let error = next_line(&mut pods).await;
    assert!(
        error.starts_with("error") && error.contains("not a Pod"),
        "{error}"
    );
    // The markers expire and the server puts its own in their place (Nats-Marker-Reason), which
    // expire too: no event for any of them. Left: a, the configmap, x, bad.
    writer.holds(4).await;
    writer.put("core.v1.pods.shop.d", "shop", "d", 8).await;
    assert_eq!(next_line(&mut pods).await, "Apply d:8");
    // A marker of a key the watch never held.
    writer.delete("core.v1.pods.shop.never").await;
    writer.put("core.v1.pods.shop.e", "shop", "e", 9).await;
    assert_eq!(next_line(&mut pods).await, "Apply e:9");
}

#[tokio::test]
async fn any_version_follows_an_object_to_its_new_key() {
    let nats = nats().await;
    let writer = Writer::create(&nats).await;
    writer.put("core.v1.pods.shop.a", "shop", "a", 1).await;
    let client = async_nats::connect(nats.url()).await.expect("connects");
    let mut pods = watcher::<Pod>(client, Config::default().any_version()).boxed();
    assert_eq!(
        start_lines(&mut pods).await,
        ["Init", "InitApply a:1", "InitDone"]
    );
    // kube2nats following the resource to v2: the object under the new key, then the old key
    // deleted.
    writer.put("core.v2.pods.shop.a", "shop", "a", 1).await;
    writer.delete("core.v1.pods.shop.a").await;
    writer.put("core.v2.pods.shop.a", "shop", "a", 2).await;
    assert_eq!(next_line(&mut pods).await, "Apply a:2");
    writer.delete("core.v2.pods.shop.a").await;
    assert_eq!(next_line(&mut pods).await, "Delete a:2");
}

#[tokio::test]
async fn a_reconnect_relists_and_a_reflector_drops_what_was_deleted_meanwhile() {
    let nats = nats().await;
    let writer = Writer::create(&nats).await;
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        writer
            .put(
                &format!("core.v1.pods.shop.{name}"),
                "shop",
                name,
                i as u32 + 1,
            )
            .await;
    }
    let gate = Gate::start(([127, 0, 0, 1], nats.port()).into())
        .await
        .expect("the gate");
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(format!("nats://{}", gate.addr()))
        .await
        .expect("connects through the gate");
    let (reader, writer_store) = reflector::store::<Pod>();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = lines.clone();
    let follow = tokio::spawn(
        reflector(writer_store, watcher::<Pod>(client, Config::default())).for_each(move |item| {
            seen.lock().expect("lines").push(line(item));
            futures_util::future::ready(())
        }),
    );
    until(&reader, &["a:1", "b:2", "c:3"]).await;

    // Cut off: b and c deleted and their markers gone before the client is back, a changed, d
    // created.
    gate.close();
    writer.delete("core.v1.pods.shop.b").await;
    writer.purge("core.v1.pods.shop.c").await;
    writer.put("core.v1.pods.shop.a", "shop", "a", 10).await;
    writer.put("core.v1.pods.shop.d", "shop", "d", 11).await;
    writer.holds(2).await;
    let starts_before = lines
        .lock()
        .expect("lines")
        .iter()
        .filter(|l| *l == "Init")
        .count();
    gate.open();
    until(&reader, &["a:10", "d:11"]).await;
    let lines = lines.lock().expect("lines").clone();
    let starts = lines.iter().filter(|l| *l == "Init").count();
    assert!(
        starts > starts_before,
        "no fresh start after the reconnect: {lines:?}"
    );
    follow.abort();
}

/// `name:rv` of every object in the store, sorted.
fn names(store: &Store<Pod>) -> Vec<String> {
    let mut names: Vec<String> = store
        .state()
        .iter()
        .map(|p| {
            format!(
                "{}:{}",
                p.metadata.name.as_deref().unwrap_or_default(),
                p.metadata.resource_version.as_deref().unwrap_or_default()
            )
        })
        .collect();
    names.sort();
    names
}

/// Waits until the store holds exactly `want`.
async fn until(store: &Store<Pod>, want: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while names(store) != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store holds {:?}",
            names(store)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The event stream as kube2nats publishes it: one message per change with `Kube-Event-Type`
/// and `Nats-Msg-Id`, the payload the watch event (or, with `payload = "object"`, the object).
async fn event_stream(nats: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(nats.url()).await.expect("connects");
    let js = jetstream::new(client);
    js.create_stream(jetstream::stream::Config {
        name: "KUBE".into(),
        subjects: vec!["kube.>".into()],
        // Short, so that a repeat of an id can be stored as kube2nats' repeat after a crash is
        // once the window has passed.
        duplicate_window: Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .expect("the stream");
    js
}

async fn publish_event(js: &jetstream::Context, name: &str, rv: u32, kind: &str, wrapped: bool) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "shop", "name": name, "resourceVersion": rv.to_string(), "uid": format!("u-{name}")},
    });
    let payload = if wrapped {
        json!({"type": kind, "object": pod})
    } else {
        pod
    };
    let mut headers = HeaderMap::new();
    headers.insert("Kube-Event-Type", kind);
    headers.insert("Nats-Msg-Id", format!("pods:u-{name}:{rv}").as_str());
    js.publish_with_headers(
        format!("kube.core.v1.pods.shop.{name}.{}", kind.to_lowercase()),
        headers,
        serde_json::to_vec(&payload).expect("json").into(),
    )
    .await
    .expect("publishes")
    .await
    .expect("stored");
}

fn audit() -> EventsConfig {
    EventsConfig::new("audit").ack_wait(Duration::from_secs(1))
}

/// The next change, acknowledged, as `TYPE name:rv`.
async fn read_change<S>(changes: &mut S) -> String
where
    S: Stream<Item = Result<Change<Pod>, kube2nats_client::Error>> + Unpin,
{
    let change = tokio::time::timeout(WAIT, changes.next())
        .await
        .expect("a change within the wait")
        .expect("the stream goes on")
        .expect("a change");
    change.ack().await.expect("acknowledged");
    format!(
        "{} {}:{}",
        change.change_type.as_str(),
        change.object.metadata.name.as_deref().unwrap_or_default(),
        change
            .object
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    )
}

#[tokio::test]
async fn the_event_stream_resumes_after_a_restart_and_drops_a_repeat() {
    let nats = nats().await;
    let js = event_stream(&nats).await;
    publish_event(&js, "a", 1, "ADDED", true).await;
    publish_event(&js, "b", 2, "ADDED", false).await;
    publish_event(&js, "a", 3, "MODIFIED", true).await;
    // Another resource under the same prefix: outside the filter.
    js.publish("kube.core.v1.configmaps.shop.a.added", "{}".into())
        .await
        .expect("publishes")
        .await
        .expect("stored");

    let client = async_nats::connect(nats.url()).await.expect("connects");
    let mut changes = events::<Pod>(client.clone(), audit()).boxed();
    assert_eq!(read_change(&mut changes).await, "ADDED a:1");
    assert_eq!(read_change(&mut changes).await, "ADDED b:2");
    drop(changes);

    // A new subscriber under the same durable name resumes after the last acknowledged change:
    // a:3, handed to the first one but not acknowledged, comes again after the ack wait, first.
    publish_event(&js, "b", 4, "DELETED", true).await;
    let mut changes = events::<Pod>(client.clone(), audit()).boxed();
    assert_eq!(read_change(&mut changes).await, "MODIFIED a:3");
    assert_eq!(read_change(&mut changes).await, "DELETED b:4");
    // kube2nats repeating a change past the duplicate window: the same id, stored again.
    tokio::time::sleep(Duration::from_millis(400)).await;
    publish_event(&js, "a", 3, "MODIFIED", true).await;
    publish_event(&js, "c", 5, "ADDED", true).await;
    assert_eq!(read_change(&mut changes).await, "ADDED c:5");
    let info = js
        .get_stream("KUBE")
        .await
        .expect("stream")
        .get_consumer::<jetstream::consumer::pull::Config>("audit")
        .await
        .expect("the durable consumer")
        .info()
        .await
        .expect("info")
        .clone();
    // Everything delivered was acknowledged, the repeat included.
    assert_eq!(info.num_ack_pending, 0, "{info:?}");
    assert_eq!(ChangeType::Deleted.as_str(), "DELETED");
}
