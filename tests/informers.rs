//! The subscriber kits' example informers (clients/*/examples: Python, Rust, Node), each a real process
//! reading kube2nats' object mirror (docs/mirror.md, docs/subscribers.md) from a real
//! nats-server (JetStream on a file store): the test changes pods on the simulated API server,
//! the real kube2nats (durable state and the mirror on) writes the bucket, and each informer,
//! started after kube2nats has synced, ends with a cache equal to the API server's objects after
//! churn, a disconnection of the informer alone while a deletion's markers expire, a nats-server
//! restart, and a `kill -9` of kube2nats with changes made while it is down; a second informer
//! started after more changes does too.
//!
//! Needs nats-server, and the kits' runtimes: `scripts/install-test-tools nats-server kits`.

mod common;
#[path = "common/mirror.rs"]
mod mirror;

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::cluster::{id, pod, MirrorCluster as Cluster};
use kube2nats_harness::gate::Gate;
use kube2nats_harness::nats::NatsServer;
use mirror::{api_objects, Informer, Language, Mirror};
use serde_json::{json, Value};

/// What the informers read: pods, every namespace.
const RESOURCE: &str = "pods";

/// The informer's change lines after `synced`, up to and including `last`.
fn changes_until(lines: &[String], from: usize, last: &str) -> Vec<String> {
    let end = lines[from..]
        .iter()
        .position(|l| l == last)
        .map(|i| from + i + 1)
        .unwrap_or(lines.len());
    lines[from..end].to_vec()
}

/// Change lines grouped by object (`namespace/name`), each object's in the order they came. The
/// bucket orders the writes of one key; writes of different keys are pipelined, and a fenced
/// write (a key whose delete marker expired meanwhile) is written again after later keys' writes
/// (docs/mirror.md), so the order across objects is not the contract.
fn per_object(lines: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut objects: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in lines {
        let object = line.split(' ').nth(1).unwrap_or_default().to_string();
        objects.entry(object).or_default().push(line.clone());
    }
    objects
}

async fn informer_follows_the_cluster(language: Language) {
    let mut cluster = Cluster::start(std::path::Path::new(env!("CARGO_BIN_EXE_kube2nats")))
        .await
        .expect("the mirror cluster starts");
    // Changes kube2nats writes before the informer starts: an update, and a deletion whose
    // marker may still be in the bucket when the informer reads it.
    cluster.update("shop", "web-3", "nginx:1.28");
    cluster.delete("shop", "web-11").expect("the pod existed");
    cluster
        .converged(false)
        .await
        .expect("the bucket converges");

    let pods = api_objects(&cluster.api.url(), "pods").await;
    // Through the gate, which cuts this informer alone off NATS below.
    let informer = Informer::start(language, &cluster.subscriber_url(), RESOURCE);
    let synced = informer
        .wait_for(&format!("synced {} objects", pods.len()))
        .await;

    // Churn: every change is one line, each object's in order, and the markers (kube2nats'
    // delete markers, then the server's when those expire) make no line of their own.
    let mut expected = Vec::new();
    for i in 0..5 {
        expected.push(cluster.update("shop", &format!("web-{i}"), "nginx:1.29"));
    }
    expected.push(cluster.delete("shop", "web-5").expect("the pod existed"));
    expected.push(
        cluster
            .delete("default", "db.v2-0")
            .expect("the pod existed"),
    );
    expected.push(cluster.create("shop", "web-11"));
    // A new name, not web-5 again: the bucket holds states, and a deletion followed at once by a
    // re-creation under the same key may reach it as one write (the put).
    expected.push(cluster.create("shop", "web-12"));
    expected.push(cluster.delete("shop", "web-6").expect("the pod existed"));
    expected.push(cluster.update("default", "db.v2-1", "postgres:17"));
    // Until every marker has expired: the bucket holds one message per object.
    cluster.converged(true).await.expect("the bucket converges");
    let sentinel = cluster.update("shop", "web-0", "nginx:1.30");
    expected.push(sentinel.clone());
    informer.wait_for(&sentinel).await;
    assert_eq!(
        per_object(&changes_until(&informer.lines(), synced + 1, &sentinel)),
        per_object(&expected),
        "the {language:?} informer's change lines\n{}",
        informer.transcript()
    );

    // The informer cut off while a pod is deleted and every marker of the deletion expires: no
    // message of it is left to read, and only the informer's fresh start after the reconnect,
    // diffed against its cache, shows the deletion.
    let before = informer.lines().len();
    cluster.gate.close();
    let unseen = cluster.delete("shop", "web-10").expect("the pod existed");
    cluster.converged(true).await.expect("the bucket converges");
    cluster.gate.open();
    let sentinel = cluster.update("shop", "web-3", "nginx:1.30");
    informer.wait_for(&sentinel).await;
    assert_eq!(
        per_object(&changes_until(&informer.lines(), before, &sentinel)),
        per_object(&[unseen, sentinel]),
        "the {language:?} informer's change lines across its disconnection\n{}",
        informer.transcript()
    );

    // A NATS restart (the bucket is on disk), and changes: kube2nats and the informer reconnect.
    cluster.nats.restart().await.expect("nats-server restarts");
    cluster.delete("shop", "web-7").expect("the pod existed");
    cluster.update("shop", "web-8", "nginx:1.31");
    cluster.create("default", "db.v2-9");
    cluster
        .converged(false)
        .await
        .expect("the bucket converges");
    let sentinel = cluster.update("shop", "web-4", "nginx:1.32");
    informer.wait_for(&sentinel).await;

    // kube2nats killed (-9) while pods are created, changed and deleted, then started again: it
    // resumes from its durable state and brings the bucket up to date.
    cluster.kill_daemon();
    cluster.delete("shop", "web-9").expect("the pod existed");
    cluster.update("shop", "web-1", "nginx:1.33");
    cluster.create("default", "db.v2-10");
    cluster.start_daemon().expect("kube2nats starts again");
    cluster
        .converged(false)
        .await
        .expect("the bucket converges");
    // The bucket's writes come to the informer in order: once it shows this one, it has the rest.
    let sentinel = cluster.update("shop", "web-2", "nginx:1.34");
    informer.wait_for(&sentinel).await;

    let want = api_objects(&cluster.api.url(), "pods").await;
    let transcript = informer.transcript();
    let cache = informer.terminate().await;
    assert_eq!(
        cache, want,
        "the {language:?} informer's cache against the API server\n{transcript}"
    );

    // Changes while no informer runs, then a new one: it starts from the bucket's state, delete
    // markers included.
    cluster
        .delete("default", "db.v2-2")
        .expect("the pod existed");
    cluster
        .delete("default", "db.v2-3")
        .expect("the pod existed");
    cluster.update("default", "db.v2-4", "postgres:18");
    cluster.create("shop", "web-20");
    cluster
        .converged(false)
        .await
        .expect("the bucket converges");
    let want = api_objects(&cluster.api.url(), "pods").await;
    let late = Informer::start(language, &cluster.nats.url(), RESOURCE);
    late.wait_for(&format!("synced {} objects", want.len()))
        .await;
    let transcript = late.transcript();
    assert_eq!(
        late.terminate().await,
        want,
        "the late {language:?} informer's cache against the API server\n{transcript}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_informer_equals_the_api_server() {
    informer_follows_the_cluster(Language::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_informer_equals_the_api_server() {
    informer_follows_the_cluster(Language::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_informer_equals_the_api_server() {
    informer_follows_the_cluster(Language::Node).await;
}

/// A purge, the contract's other deletion (docs/subscribers.md), which kube2nats' mirror does
/// not write: the stand-in writer seeds the bucket with a purge in it, and purges while the three
/// informers run. Each prints the deletion once, also across a reconnect after the purge's
/// marker expired (the fresh start's difference holds no deletion then), and ends with the API
/// server's objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_take_a_purge_as_a_deletion() {
    let nats = NatsServer::start().await.expect("nats-server starts");
    let api = ApiServer::start(ApiServerOptions::default())
        .await
        .expect("the simulated API server starts");
    let mirror = Mirror::create(&nats.url()).await;
    for i in 0..4 {
        let obj = api.create("pods", Some("shop"), pod(&format!("web-{i}"), "nginx:1.27"));
        mirror.put("pods", "Pod", &obj).await;
    }
    let gone = api.delete("pods", Some("shop"), "web-3").expect("deleted");
    mirror.purge("pods", &gone).await;

    let gate = Gate::start(([127, 0, 0, 1], nats.port()).into())
        .await
        .expect("the gate starts");
    let informers: Vec<Informer> = [Language::Python, Language::Rust, Language::Node]
        .into_iter()
        .map(|language| Informer::start(language, &format!("nats://{}", gate.addr()), RESOURCE))
        .collect();
    for informer in &informers {
        informer.wait_for("synced 3 objects").await;
    }
    let before = api
        .get("pods", Some("shop"), "web-0")
        .expect("the pod exists");
    let gone = api.delete("pods", Some("shop"), "web-0").expect("deleted");
    mirror.purge("pods", &gone).await;
    let line = format!("DELETED {}", id(&before));
    for informer in &informers {
        informer.wait_for(&line).await;
    }
    // Once the purge's marker has expired, the informers cut off and let back: each starts
    // afresh. Then a sentinel: a line printed after the purge's comes before it.
    mirror.markers_expired(2).await;
    gate.close();
    tokio::time::sleep(Duration::from_secs(1)).await;
    gate.open();
    let changed = api.update("pods", Some("shop"), "web-1", |p| {
        p["spec"]["containers"][0]["image"] = json!("nginx:1.28")
    });
    mirror.put("pods", "Pod", &changed).await;
    let sentinel = format!("MODIFIED {}", id(&changed));
    let want = api_objects(&api.url(), "pods").await;
    for informer in informers {
        let synced = informer.wait_for("synced 3 objects").await;
        informer.wait_for(&sentinel).await;
        let transcript = informer.transcript();
        assert_eq!(
            &informer.lines()[synced + 1..],
            [line.clone(), sentinel.clone()],
            "one line for the purge, then the sentinel's, across the reconnect\n{transcript}"
        );
        assert_eq!(informer.terminate().await, want, "the cache\n{transcript}");
    }
}

/// An informer of the pods in `default` that reads the API server itself, as client-go's
/// reflector does: one list, then a watch from the list's resourceVersion (with bookmarks and a
/// timeout, as the reflector asks), each event read as `TYPE namespace/name rv`.
struct DirectInformer {
    events: tokio::sync::mpsc::UnboundedReceiver<String>,
    task: tokio::task::JoinHandle<()>,
}

impl DirectInformer {
    /// Lists, and returns once the watch is open.
    async fn start(api: &ApiServer) -> DirectInformer {
        let pods = format!("{}/api/v1/namespaces/default/pods", api.url());
        let token = std::fs::read_to_string(api.token_file()).expect("the API server's token");
        let client = reqwest::Client::new();
        let list = client
            .get(&pods)
            .query(&[("limit", "500")])
            .bearer_auth(token.trim())
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("the informer lists")
            .bytes()
            .await
            .expect("the list's body");
        let list: Value = serde_json::from_slice(&list).expect("a JSON list");
        let version = list["metadata"]["resourceVersion"]
            .as_str()
            .expect("the list's resourceVersion")
            .to_owned();
        let query = [
            ("watch", "1"),
            ("resourceVersion", version.as_str()),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "60"),
        ];
        let mut body = client
            .get(&pods)
            .query(&query)
            .bearer_auth(token.trim())
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("the informer watches")
            .bytes_stream();
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut pending = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                pending.extend_from_slice(&chunk);
                while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let event: Value = serde_json::from_slice(&line).expect("a watch event");
                    let kind = event["type"].as_str().unwrap_or_default();
                    if tx.send(format!("{kind} {}", id(&event["object"]))).is_err() {
                        return;
                    }
                }
            }
        });
        DirectInformer { events, task }
    }

    /// Reads events until `event`.
    async fn until(&mut self, event: &str) {
        loop {
            let next = tokio::time::timeout(common::WAIT, self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("no {event} within {:?}", common::WAIT))
                .expect("the informer's watch ended");
            if next == event {
                return;
            }
        }
    }
}

impl Drop for DirectInformer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The point of the mirror, measured: informers of one resource started through the mirror cost
/// the API server kube2nats' one list and watch, where as many direct informers cost a list and
/// a watch each. Counted by the simulated API server (requests, and bytes of response bodies)
/// over the same work: the informers sync 100 pods, then follow 100 updates. The figures are in
/// docs/subscribers.md; `--nocapture` prints them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_through_the_mirror_cost_the_api_server_one_list_and_watch() {
    const INFORMERS: usize = 20;
    const PODS: usize = 100;
    const UPDATES: usize = 100;
    let nats = NatsServer::start().await.expect("nats-server starts");
    let api = ApiServer::start(ApiServerOptions::default())
        .await
        .expect("the simulated API server starts");
    for i in 0..PODS {
        api.create(
            "pods",
            Some("default"),
            pod(&format!("web-{i}"), "nginx:1.27"),
        );
    }
    let update_all = |image: &str| {
        let mut last = Value::Null;
        for i in 0..UPDATES {
            last = api.update("pods", Some("default"), &format!("web-{i}"), |p| {
                p["spec"]["containers"][0]["image"] = json!(image)
            });
        }
        last
    };
    let lists_and_watches = |api: &ApiServer| {
        let pods: Vec<_> = api
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/pods"))
            .collect();
        let watches = pods.iter().filter(|r| r.is_watch()).count();
        (pods.len() - watches, watches, api.requests().len())
    };

    // Direct: each informer lists and watches the API server itself, as client-go's reflector
    // does.
    api.clear_requests();
    let mut direct = Vec::new();
    for _ in 0..INFORMERS {
        direct.push(DirectInformer::start(&api).await);
    }
    let last = update_all("nginx:1.28");
    let last_event = format!("MODIFIED {}", id(&last));
    for informer in &mut direct {
        informer.until(&last_event).await;
    }
    let (direct_lists, direct_watches, direct_requests) = lists_and_watches(&api);
    let direct_bytes = api.response_bytes();
    drop(direct);
    assert!(api.wait_for_watches(0, Duration::from_secs(10)).await);

    // Through the mirror: kube2nats lists and watches once; the informers read the bucket.
    api.clear_requests();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = common::token_file(dir.path(), kube2nats_harness::apiserver::INITIAL_TOKEN);
    // The default watch timeout (5 m, the server ends a watch after 5 to 10 min) and not the
    // test section's 30 s: the watch is never renewed while this test runs.
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\n[mirror]\nenabled = true\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        common::kube_section(&api, &token).replace("watch_timeout = \"30s\"", "watch_timeout = \"5m\""),
        nats.url()
    );
    let daemon = common::Process::spawn(&config);
    assert!(
        api.wait_for_watches(1, Duration::from_secs(30)).await,
        "kube2nats opens its watch\n{}",
        daemon.rest()
    );
    daemon.line_with(&["mirror repaired"]);
    let informers: Vec<Informer> = (0..INFORMERS)
        .map(|_| Informer::start(Language::Rust, &nats.url(), RESOURCE))
        .collect();
    for informer in &informers {
        informer.wait_for(&format!("synced {PODS} objects")).await;
    }
    let last = update_all("nginx:1.29");
    for informer in &informers {
        informer.wait_for(&format!("MODIFIED {}", id(&last))).await;
    }
    let (lists, watches, requests) = lists_and_watches(&api);
    let mirror_bytes = api.response_bytes();

    eprintln!(
        "{INFORMERS} direct informers: {direct_lists} lists, {direct_watches} watches, {direct_requests} requests, {direct_bytes} bytes\n\
         {INFORMERS} informers through kube2nats' mirror: {lists} lists, {watches} watches, {requests} requests (discovery included), {mirror_bytes} bytes"
    );
    assert_eq!((direct_lists, direct_watches), (INFORMERS, INFORMERS));
    // One list and one watch from its resourceVersion: the watch lasts past the test (its
    // timeout is 5 to 10 min), and nothing in it ends the watch early.
    assert_eq!(
        (lists, watches),
        (1, 1),
        "kube2nats' lists and watches of pods"
    );
    assert!(
        mirror_bytes * 10 < direct_bytes,
        "through the mirror the API server sends {mirror_bytes} bytes, directly {direct_bytes}"
    );
}
