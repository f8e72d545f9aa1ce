//! The example informers of examples/subscribers/ (Python, Rust, Node), each a real process
//! reading the object mirror (docs/subscribers.md) from a real nats-server: started after the
//! bucket has its state, through churn, a NATS restart, a writer that is down while the cluster
//! changes, and a second informer started after more changes, each ends with a cache equal to
//! the API server's objects.
//!
//! Needs nats-server, and the informers' runtimes: `scripts/install-test-tools informers`.

mod common;
#[path = "common/mirror.rs"]
mod mirror;

use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;
use mirror::{api_objects, Informer, Language, Mirror};
use std::time::Duration;

use serde_json::{json, Value};

const FILTER: &str = "core.v1.pods.>";

/// The simulated cluster and the mirror of its pods. While the writer is down (kube2nats killed)
/// changes reach the API server only; [`Cluster::writer_back`] catches the bucket up as a
/// restarted kube2nats does.
struct Cluster {
    api: ApiServer,
    mirror: Mirror,
    writer_up: bool,
}

fn pod(name: &str, image: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "main", "image": image}]}
    })
}

/// `namespace/name rv` as an informer prints it.
fn id(obj: &Value) -> String {
    let m = &obj["metadata"];
    format!(
        "{}/{} {}",
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
        m["resourceVersion"].as_str().unwrap_or_default()
    )
}

impl Cluster {
    async fn create(&self, ns: &str, name: &str) -> String {
        let obj = self.api.create("pods", Some(ns), pod(name, "nginx:1.27"));
        if self.writer_up {
            self.mirror.put("pods", "Pod", &obj).await;
        }
        format!("ADDED {}", id(&obj))
    }

    async fn update(&self, ns: &str, name: &str, image: &str) -> String {
        let obj = self.api.update("pods", Some(ns), name, |p| {
            p["spec"]["containers"][0]["image"] = json!(image)
        });
        if self.writer_up {
            self.mirror.put("pods", "Pod", &obj).await;
        }
        format!("MODIFIED {}", id(&obj))
    }

    /// Deletes a pod; the mirror deletes its key (`purge`: as a purge).
    async fn delete(&self, ns: &str, name: &str, purge: bool) -> String {
        // The informers print the last version they had, the one before the deletion.
        let before = self
            .api
            .get("pods", Some(ns), name)
            .expect("the pod exists");
        let obj = self.api.delete("pods", Some(ns), name).expect("deleted");
        if self.writer_up {
            if purge {
                self.mirror.purge("pods", &obj).await;
            } else {
                self.mirror.delete("pods", &obj).await;
            }
        }
        format!("DELETED {}", id(&before))
    }

    async fn writer_back(&mut self) {
        let (_, items) = api_objects(&self.api.url(), "pods").await;
        self.mirror.resync("pods", "Pod", &items).await;
        self.writer_up = true;
    }
}

/// The informer's change lines after `synced`, up to and including `last`.
fn changes_until(lines: &[String], from: usize, last: &str) -> Vec<String> {
    let end = lines[from..]
        .iter()
        .position(|l| l == last)
        .map(|i| from + i + 1)
        .unwrap_or(lines.len());
    lines[from..end].to_vec()
}

async fn informer_follows_the_cluster(language: Language) {
    let mut nats = NatsServer::start().await.expect("nats-server starts");
    let api = ApiServer::start(ApiServerOptions::default())
        .await
        .expect("the simulated API server starts");
    let mirror = Mirror::create(&nats.url()).await;
    let mut cluster = Cluster {
        api,
        mirror,
        writer_up: true,
    };

    // The state before the informer starts: pods in two namespaces (one name with dots, escaped
    // in its key), a pod deleted with a marker still in the bucket, one purged, and a config map
    // that the key filter leaves out.
    for i in 0..12 {
        cluster.create("shop", &format!("web-{i}")).await;
    }
    for i in 0..6 {
        cluster.create("default", &format!("db.v2-{i}")).await;
    }
    cluster.update("shop", "web-3", "nginx:1.28").await;
    cluster.delete("shop", "web-11", false).await;
    cluster.delete("shop", "web-10", true).await;
    let cm = cluster.api.create(
        "configmaps",
        Some("shop"),
        json!({"metadata": {"name": "web-0"}, "data": {"k": "v"}}),
    );
    cluster.mirror.put("configmaps", "ConfigMap", &cm).await;

    let informer = Informer::start(language, &nats.url(), FILTER);
    let synced = informer.wait_for("synced 16 objects").await;

    // Churn: every change is one line, in order, and the markers the server leaves when a
    // delete's TTL runs out make no line of their own.
    let mut expected = Vec::new();
    for i in 0..5 {
        expected.push(
            cluster
                .update("shop", &format!("web-{i}"), "nginx:1.29")
                .await,
        );
    }
    expected.push(cluster.delete("shop", "web-5", false).await);
    expected.push(cluster.delete("default", "db.v2-0", true).await);
    expected.push(cluster.create("shop", "web-10").await);
    expected.push(cluster.create("shop", "web-5").await);
    expected.push(cluster.delete("shop", "web-6", false).await);
    expected.push(cluster.update("default", "db.v2-1", "postgres:17").await);
    let last = expected.last().cloned().unwrap_or_default();
    informer.wait_for(&last).await;
    // Past the markers' two TTLs: the server's markers have come and gone.
    tokio::time::sleep(mirror::MARKER_TTL * 3).await;
    let sentinel = cluster.update("shop", "web-0", "nginx:1.30").await;
    expected.push(sentinel.clone());
    informer.wait_for(&sentinel).await;
    assert_eq!(
        changes_until(&informer.lines(), synced + 1, &sentinel),
        expected,
        "the {language:?} informer's change lines\n{}",
        informer.transcript()
    );

    // A NATS restart (the bucket is on disk), then changes: the informer reconnects and
    // watches afresh.
    nats.restart().await.expect("nats-server restarts");
    let mirror = Mirror::create(&nats.url()).await;
    cluster.mirror = mirror;
    cluster.delete("shop", "web-7", false).await;
    cluster.update("shop", "web-8", "nginx:1.31").await;
    let after_restart = cluster.create("default", "db.v2-9").await;
    informer.wait_for(&after_restart).await;

    // kube2nats killed (-9) while the cluster changes, then back: it lists afresh and writes the
    // difference.
    cluster.writer_up = false;
    cluster.delete("shop", "web-9", false).await;
    cluster.update("shop", "web-1", "nginx:1.32").await;
    cluster.create("default", "db.v2-10").await;
    cluster.writer_back().await;
    let sentinel = cluster.update("shop", "web-2", "nginx:1.33").await;
    informer.wait_for(&sentinel).await;

    let (want, _) = api_objects(&cluster.api.url(), "pods").await;
    let transcript = informer.transcript();
    let cache = informer.terminate().await;
    assert_eq!(
        cache, want,
        "the {language:?} informer's cache against the API server\n{transcript}"
    );

    // Changes while no informer runs, then a new one: it starts from the bucket's state, where
    // the deleted pods' markers have expired.
    cluster.delete("default", "db.v2-2", false).await;
    cluster.delete("default", "db.v2-3", true).await;
    cluster.update("default", "db.v2-4", "postgres:18").await;
    cluster.create("shop", "web-20").await;
    tokio::time::sleep(mirror::MARKER_TTL * 3).await;
    let (want, _) = api_objects(&cluster.api.url(), "pods").await;
    let late = Informer::start(language, &nats.url(), FILTER);
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

    // Direct: each informer lists and watches the API server itself (kube2nats' watch machine,
    // which does what client-go's reflector does).
    api.clear_requests();
    let mut direct = Vec::new();
    for _ in 0..INFORMERS {
        let client = common::client(&api, Some(api.token_file()), Duration::from_secs(60));
        let mut rec =
            common::Recorder::start(client, common::target(common::pods(), Some("default")));
        rec.until("opened").await;
        direct.push(rec);
    }
    let last = update_all("nginx:1.28");
    let last_event = format!("MODIFIED {}", id(&last).replacen("default/", "", 1));
    for rec in &mut direct {
        rec.until(&last_event).await;
    }
    let (direct_lists, direct_watches, direct_requests) = lists_and_watches(&api);
    let direct_bytes = api.response_bytes();
    drop(direct);
    assert!(api.wait_for_watches(0, Duration::from_secs(10)).await);

    // Through the mirror: kube2nats lists and watches once; the informers read the bucket.
    api.clear_requests();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = common::token_file(dir.path(), kube2nats_harness::apiserver::INITIAL_TOKEN);
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        common::kube_section(&api, &token),
        nats.url()
    );
    let daemon = common::Process::spawn(&config);
    assert!(
        api.wait_for_watches(1, Duration::from_secs(30)).await,
        "kube2nats opens its watch\n{}",
        daemon.rest()
    );
    // The writer seam stands in for kube2nats' mirror, which writes what kube2nats' one watch
    // already brings: it costs the API server nothing more.
    let mirror = Mirror::create(&nats.url()).await;
    let before_the_test_list = api.response_bytes();
    let (_, items) = api_objects(&api.url(), "pods").await;
    let bytes_of_the_test = api.response_bytes() - before_the_test_list;
    for obj in &items {
        mirror.put("pods", "Pod", obj).await;
    }
    let informers: Vec<Informer> = (0..INFORMERS)
        .map(|_| Informer::start(Language::Rust, &nats.url(), FILTER))
        .collect();
    for informer in &informers {
        informer.wait_for(&format!("synced {PODS} objects")).await;
    }
    let mut last = Value::Null;
    for i in 0..UPDATES {
        last = api.update("pods", Some("default"), &format!("web-{i}"), |p| {
            p["spec"]["containers"][0]["image"] = json!("nginx:1.29")
        });
        mirror.put("pods", "Pod", &last).await;
    }
    for informer in &informers {
        informer.wait_for(&format!("MODIFIED {}", id(&last))).await;
    }
    // The test's own list (to seed the bucket) is not kube2nats' cost.
    let (lists, watches, requests) = lists_and_watches(&api);
    let (lists, requests) = (lists - 1, requests - 1);
    let mirror_bytes = api.response_bytes() - bytes_of_the_test;

    eprintln!(
        "{INFORMERS} direct informers: {direct_lists} lists, {direct_watches} watches, {direct_requests} requests, {direct_bytes} bytes\n\
         {INFORMERS} informers through kube2nats' mirror: {lists} lists, {watches} watches, {requests} requests (discovery included), {mirror_bytes} bytes"
    );
    assert_eq!((direct_lists, direct_watches), (INFORMERS, INFORMERS));
    // One list; its watch may be renewed when the watch timeout ends it, resuming without a list.
    assert_eq!(lists, 1, "kube2nats lists once");
    assert!(
        (1..INFORMERS).contains(&watches),
        "kube2nats watches: {watches}"
    );
    assert!(
        mirror_bytes * 10 < direct_bytes,
        "through the mirror the API server sends {mirror_bytes} bytes, directly {direct_bytes}"
    );
}

/// The writer seam escapes keys as the contract's examples say (docs/subscribers.md); the
/// informers undo it (their own unit tests and the names with dots above).
#[test]
fn keys_follow_the_contract() {
    for (text, token) in [
        ("nginx", "nginx"),
        ("kube-root-ca.crt", "kube-root-ca_crt"),
        ("system:node:w1", "system=3Anode=3Aw1"),
        ("my_name", "my=5Fname"),
        ("é", "=C3=A9"),
        ("", "="),
        ("50%", "50=25"),
        ("a=b/c", "a=3Db=2Fc"),
    ] {
        assert_eq!(mirror::key_token(text), token, "{text:?}");
    }
    let web0 = json!({"metadata": {"namespace": "shop", "name": "web-0"}});
    assert_eq!(mirror::core_key("pods", &web0), "core.v1.pods.shop.web-0");
    let node = json!({"metadata": {"name": "system:node:w1"}});
    assert_eq!(
        mirror::core_key("nodes", &node),
        "core.v1.nodes._.system=3Anode=3Aw1"
    );
}
