//! kube2nats against a real kube-apiserver (v1.20.2 over etcd: `kube2nats_harness::real_apiserver`)
//! and, from the same test bodies, against the simulated one. The simulator is written alongside
//! the daemon, so a misreading of kube-apiserver would be shared by both; here a difference shows
//! as one test failing on one server.
//!
//! Each test runs the real binary against a real nats-server and compares what kube2nats published
//! with the test's own watch on the same server: the server's own account of what happened.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::restart::{Recording, Seen};
use common::{free_port, Process};
use futures_util::StreamExt as _;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Rule, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use kube2nats_harness::real_apiserver::{RealApiServer, RealApiServerOptions};
use serde_json::{json, Value};

/// The namespace the tests' pods live in, unless a test names its own.
const NS: &str = "default";

/// The namespace and name of the ServiceAccount the manifests in deploy/ run kube2nats as.
const SA_NAMESPACE: &str = "kube2nats";
const SA_NAME: &str = "kube2nats";

/// The collection path of the pods of `ns`.
fn pods(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods")
}

/// Which API server a test body runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Simulated,
    Real,
    /// The real server with `--watch-cache=false`: watches served from etcd, whose compaction
    /// answers an old resourceVersion with 410.
    RealWithoutWatchCache,
}

/// The two servers behind the few operations the test bodies need.
enum Server {
    Simulated(ApiServer),
    Real(Box<RealApiServer>),
}

impl Server {
    async fn start(kind: Kind) -> Server {
        match kind {
            Kind::Simulated => Server::Simulated(
                ApiServer::start(ApiServerOptions {
                    tls: true,
                    ..Default::default()
                })
                .await
                .expect("simulated API server"),
            ),
            Kind::Real => Server::Real(Box::new(
                RealApiServer::start().await.expect("real API server"),
            )),
            Kind::RealWithoutWatchCache => Server::Real(Box::new(
                RealApiServer::start_with(RealApiServerOptions {
                    watch_cache: false,
                    compaction_interval: Duration::from_secs(2),
                    ..Default::default()
                })
                .await
                .expect("real API server"),
            )),
        }
    }

    fn url(&self) -> String {
        match self {
            Server::Simulated(sim) => sim.url(),
            Server::Real(real) => real.url(),
        }
    }

    fn ca_file(&self) -> PathBuf {
        match self {
            Server::Simulated(sim) => sim.ca_file().expect("the simulator serves TLS"),
            Server::Real(real) => real.ca_file(),
        }
    }

    /// A token allowed everything.
    fn token_file(&self) -> PathBuf {
        match self {
            Server::Simulated(sim) => sim.token_file(),
            Server::Real(real) => real.admin_token_file(),
        }
    }

    async fn create_pod(&self, name: &str) -> Value {
        self.create_pod_in(NS, name).await
    }

    async fn create_pod_in(&self, ns: &str, name: &str) -> Value {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
        });
        match self {
            Server::Simulated(sim) => sim.create("pods", Some(ns), pod),
            Server::Real(real) => real.create(&pods(ns), &pod).await.expect("create pod"),
        }
    }

    async fn label_pod(&self, name: &str, value: &str) -> Value {
        self.label_pod_in(NS, name, value).await
    }

    async fn label_pod_in(&self, ns: &str, name: &str, value: &str) -> Value {
        let change = |pod: &mut Value| pod["metadata"]["labels"]["step"] = value.into();
        match self {
            Server::Simulated(sim) => sim.update("pods", Some(ns), name, change),
            Server::Real(real) => real
                .update(&pods(ns), name, change)
                .await
                .expect("update pod"),
        }
    }

    async fn delete_pod(&self, name: &str) {
        self.delete_pod_in(NS, name).await
    }

    async fn delete_pod_in(&self, ns: &str, name: &str) {
        match self {
            Server::Simulated(sim) => {
                sim.delete("pods", Some(ns), name).expect("pod to delete");
            }
            Server::Real(real) => {
                real.delete(&pods(ns), name).await.expect("delete pod");
            }
        }
    }

    /// Grants the ServiceAccount of the manifests exactly the RBAC objects deploy/base/rbac.yaml
    /// ships (the RoleBinding's subject in [`SA_NAMESPACE`], as kustomize's `namespace` sets it)
    /// and returns a token of that account: from the TokenRequest API on the real server; on
    /// the simulator, a token given the Roles' rules (it has no bindings of its own).
    async fn shipped_rbac_token(&self) -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/rbac.yaml");
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
        match self {
            Server::Simulated(sim) => {
                let token = "kube2nats-service-account-token";
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .map(|x| x.as_str().unwrap().to_owned())
                        .collect()
                };
                let mut rules = Vec::new();
                for doc in &docs {
                    let namespaces = match doc["kind"].as_str() {
                        Some("Role") => vec![SA_NAMESPACE.to_owned()],
                        Some("ClusterRole") => Vec::new(),
                        _ => continue,
                    };
                    for rule in doc["rules"].as_array().unwrap() {
                        rules.push(Rule {
                            verbs: strings(&rule["verbs"]),
                            api_groups: strings(&rule["apiGroups"]),
                            resources: strings(&rule["resources"]),
                            namespaces: namespaces.clone(),
                            resource_names: strings(&rule["resourceNames"]),
                        });
                    }
                }
                sim.set_valid_tokens(&[INITIAL_TOKEN, token]);
                sim.set_rules(token, rules);
                token.to_owned()
            }
            Server::Real(real) => {
                let create = |path: String, obj: Value| async move {
                    real.create(&path, &obj)
                        .await
                        .unwrap_or_else(|e| panic!("creating {obj}: {e:#}"))
                };
                create(
                    "/api/v1/namespaces".into(),
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SA_NAMESPACE}}),
                )
                .await;
                create(
                    format!("/api/v1/namespaces/{SA_NAMESPACE}/serviceaccounts"),
                    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA_NAME}}),
                )
                .await;
                let rbac = "/apis/rbac.authorization.k8s.io/v1";
                for mut doc in docs {
                    let path = match doc["kind"].as_str().unwrap() {
                        "Role" => format!("{rbac}/namespaces/{SA_NAMESPACE}/roles"),
                        "RoleBinding" => {
                            for subject in doc["subjects"].as_array_mut().unwrap() {
                                subject["namespace"] = SA_NAMESPACE.into();
                            }
                            format!("{rbac}/namespaces/{SA_NAMESPACE}/rolebindings")
                        }
                        "ClusterRole" => format!("{rbac}/clusterroles"),
                        "ClusterRoleBinding" => format!("{rbac}/clusterrolebindings"),
                        other => panic!("rbac.yaml holds a {other}"),
                    };
                    create(path, doc).await;
                }
                let answer = create(
                    format!("/api/v1/namespaces/{SA_NAMESPACE}/serviceaccounts/{SA_NAME}/token"),
                    json!({
                        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                        "spec": {"expirationSeconds": 3600}
                    }),
                )
                .await;
                answer["status"]["token"].as_str().unwrap().to_owned()
            }
        }
    }

    /// Makes every watch that resumes from a resourceVersion older than now get 410 Expired:
    /// the simulator forgets its history; a real kube-apiserver serving watches from etcd waits
    /// for its periodic compaction to pass now; one with the watch cache restarts, since its
    /// cache keeps every event of the last 75 s whatever etcd compacts, and starts over from
    /// etcd's current revision.
    async fn expire_history(&mut self) {
        match self {
            Server::Simulated(sim) => sim.compact(),
            Server::Real(real) if real.watch_cache() => real
                .restart_apiserver()
                .await
                .expect("kube-apiserver restarts"),
            Server::Real(real) => {
                let list = real
                    .request(reqwest::Method::GET, &pods(NS), None)
                    .await
                    .expect("list");
                let now: u64 = list["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                real.wait_compacted_past(now).await.expect("compaction");
            }
        }
    }
}

/// One event of the test's own watch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    kind: String,
    name: String,
    uid: String,
    rv: u64,
}

impl Change {
    fn from_seen(s: &Seen) -> Change {
        Change {
            kind: s.kind.clone(),
            name: s.name.clone(),
            uid: s.uid.clone(),
            rv: s.rv,
        }
    }
}

/// The test's own list+watch of the pods in [`NS`]: every event the server sends, in order.
struct OwnWatch {
    events: Arc<Mutex<Vec<Change>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OwnWatch {
    async fn start(server: &Server) -> OwnWatch {
        OwnWatch::start_in(server, NS).await
    }

    async fn start_in(server: &Server, ns: &str) -> OwnWatch {
        let pem = std::fs::read(server.ca_file()).unwrap();
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
            .build()
            .unwrap();
        let token = std::fs::read_to_string(server.token_file()).unwrap();
        let base = format!("{}{}", server.url(), pods(ns));
        let list: Value = serde_json::from_slice(
            &client
                .get(&base)
                .bearer_auth(token.trim())
                .send()
                .await
                .unwrap()
                .error_for_status()
                .unwrap()
                .bytes()
                .await
                .unwrap(),
        )
        .unwrap();
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
        let response = client
            .get(format!(
                "{base}?watch=true&resourceVersion={rv}&timeoutSeconds=600"
            ))
            .bearer_auth(token.trim())
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let events = events.clone();
            async move {
                let mut body = response.bytes_stream();
                let mut buf = Vec::new();
                while let Some(Ok(chunk)) = body.next().await {
                    buf.extend_from_slice(&chunk);
                    while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=end).collect();
                        let event: Value = serde_json::from_slice(&line).unwrap();
                        let meta = &event["object"]["metadata"];
                        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                        events.lock().unwrap().push(Change {
                            kind: text(&event["type"]),
                            name: text(&meta["name"]),
                            uid: text(&meta["uid"]),
                            rv: text(&meta["resourceVersion"]).parse().unwrap_or(0),
                        });
                    }
                }
            }
        });
        OwnWatch { events, task }
    }

    fn all(&self) -> Vec<Change> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until the watch has seen at least `n` events and then nothing new for a second:
    /// the real server may send more events than the test made changes (a pod's deletion is a
    /// MODIFIED, setting `deletionTimestamp`, then the DELETED).
    async fn wait_for(&self, n: usize) -> Vec<Change> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut seen = 0;
        let mut quiet_since = tokio::time::Instant::now();
        loop {
            let all = self.all();
            if all.len() != seen {
                seen = all.len();
                quiet_since = tokio::time::Instant::now();
            }
            if all.len() >= n && quiet_since.elapsed() >= Duration::from_secs(1) {
                return all;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the test's own watch saw only {all:?}, expected {n} events"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for OwnWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// kube2nats (the real binary) watching the pods of [`NS`], publishing into the `KUBE` stream,
/// with its state checkpointed to the NATS bucket every 150 ms.
struct Daemon {
    config: String,
    http_port: u16,
    process: Option<Process>,
}

impl Daemon {
    fn config(
        server: &Server,
        nats: &NatsServer,
        http_port: u16,
        ns: &str,
        token_file: &std::path::Path,
    ) -> String {
        format!(
            r#"
[kubernetes]
api_url = "{url}"
token_file = {token:?}
ca_file = {ca:?}
watch_timeout = "30s"
[kubernetes.backoff]
initial = "50ms"
max = "1s"
jitter = 0.0
[http]
listen = "127.0.0.1:{http_port}"
[shutdown]
grace_period = "5s"
[nats]
url = "{nats}"
mode = "jetstream"
[nats.jetstream]
ack_timeout = "1s"
[nats.jetstream.stream]
name = "KUBE"
subjects = ["kube.>"]
[state]
checkpoint_interval = "150ms"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["{ns}"]
"#,
            url = server.url(),
            token = token_file.display().to_string(),
            ca = server.ca_file().display().to_string(),
            nats = nats.url(),
        )
    }

    async fn start(server: &Server, nats: &NatsServer) -> Daemon {
        Daemon::start_as(server, nats, NS, &server.token_file()).await
    }

    /// Watching the pods of `ns` with the token in `token_file`.
    async fn start_as(
        server: &Server,
        nats: &NatsServer,
        ns: &str,
        token_file: &std::path::Path,
    ) -> Daemon {
        let http_port = free_port();
        let mut daemon = Daemon {
            config: Daemon::config(server, nats, http_port, ns, token_file),
            http_port,
            process: None,
        };
        daemon.restart().await;
        daemon
    }

    /// Starts the process (again) and waits until `/readyz` answers 200.
    async fn restart(&mut self) {
        self.process = Some(Process::spawn(&self.config));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ready = reqwest::get(format!("http://127.0.0.1:{}/readyz", self.http_port)).await;
            if ready.is_ok_and(|r| r.status() == 200) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                let log = self.process.as_ref().map(Process::rest).unwrap_or_default();
                panic!("kube2nats not ready within 30 s; log:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn metrics(&self) -> String {
        common::scrape_metrics(self.http_port).await
    }

    /// `kill -9`.
    fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }
}

/// Waits until kube2nats has published `n` messages since `from`; returns them once no more
/// arrive for a quiet spell (a repeat would come within it).
async fn published(recording: &Recording, from: usize, n: usize) -> Vec<Change> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while recording.all().len() < from + n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kube2nats published only {:?}, expected {n}",
            recording.all()[from..]
                .iter()
                .map(Change::from_seen)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(common::QUIET).await;
    recording.mark().await;
    recording.all()[from..]
        .iter()
        .map(Change::from_seen)
        .collect()
}

/// Asserts that kube2nats published exactly `expected` (each change once) and, per name, in
/// the server's order. Across objects the order may differ: with durable state an object's first
/// message or a deletion waits for its journal record while other objects' messages go out
/// (docs/delivery.md).
fn assert_same_changes(got: &[Change], expected: &[Change], what: &str) {
    let sorted = |changes: &[Change]| {
        let mut all = changes.to_vec();
        all.sort_by(|x, y| (x.rv, &x.kind).cmp(&(y.rv, &y.kind)));
        all
    };
    assert_eq!(
        sorted(got),
        sorted(expected),
        "{what}: each change exactly once"
    );
    let of = |changes: &[Change], name: &str| -> Vec<Change> {
        changes.iter().filter(|c| c.name == name).cloned().collect()
    };
    for change in expected {
        assert_eq!(
            of(got, &change.name),
            of(expected, &change.name),
            "{what}: the changes of {} in the server's order",
            change.name
        );
    }
}

/// Waits until kube2nats' stored position covers resourceVersion `rv` (so a kill after this
/// loses nothing that must be republished).
async fn checkpoint_covers(nats: &NatsServer, rv: u64) {
    let kv = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap())
        .get_key_value(common::restart::BUCKET)
        .await
        .expect("the state bucket");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut keys = kv.keys().await.unwrap();
        while let Some(Ok(key)) = keys.next().await {
            if !key.ends_with(".pods.default.manifest") {
                continue;
            }
            let Ok(Some(raw)) = kv.get(&key).await else {
                continue;
            };
            let manifest: kube2nats::facade::Manifest = serde_json::from_slice(&raw).unwrap();
            if manifest.resume_version.parse::<u64>().unwrap_or(0) >= rv {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no checkpoint reached resourceVersion {rv}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates, updates and deletes: each change once, in the server's order.
async fn every_change_is_published_once_in_order(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let _daemon = Daemon::start(&server, &nats).await;
    let watch = OwnWatch::start(&server).await;

    for name in ["a", "b", "c"] {
        server.create_pod(name).await;
    }
    server.label_pod("a", "1").await;
    server.delete_pod("b").await;
    server.label_pod("c", "1").await;
    server.label_pod("a", "2").await;
    server.delete_pod("a").await;
    server.create_pod("b").await;

    let expected = watch.wait_for(9).await;
    let got = published(&recording, 0, expected.len()).await;
    assert_same_changes(&got, &watch.all(), "what the server's watch sent");
}

#[tokio::test]
async fn every_change_is_published_once_in_order_on_the_simulated_server() {
    every_change_is_published_once_in_order(Kind::Simulated).await;
}

#[tokio::test]
async fn every_change_is_published_once_in_order_on_the_real_server() {
    every_change_is_published_once_in_order(Kind::Real).await;
}

/// kill -9, creates, updates and deletes while down, a restart: exactly the changes made while
/// down are published, nothing from before again.
async fn changes_while_killed_are_published_exactly(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let mut daemon = Daemon::start(&server, &nats).await;
    let watch = OwnWatch::start(&server).await;

    for name in ["a", "b", "c"] {
        server.create_pod(name).await;
    }
    let last = server.label_pod("b", "1").await;
    let before = watch.wait_for(4).await;
    assert_same_changes(
        &published(&recording, 0, before.len()).await,
        &before,
        "before the kill",
    );
    checkpoint_covers(&nats, common::rv(&last).parse().unwrap()).await;

    daemon.kill();
    server.create_pod("d").await;
    server.label_pod("c", "1").await;
    server.delete_pod("a").await;
    server.create_pod("e").await;
    server.delete_pod("e").await;
    server.label_pod("b", "2").await;
    let while_down = watch.wait_for(before.len() + 6).await[before.len()..].to_vec();
    let from = recording.mark().await;
    daemon.restart().await;

    let got = published(&recording, from, while_down.len()).await;
    assert_same_changes(
        &got,
        &while_down,
        "after kill -9, the changes made while down",
    );
}

#[tokio::test]
async fn changes_while_killed_are_published_exactly_on_the_simulated_server() {
    changes_while_killed_are_published_exactly(Kind::Simulated).await;
}

#[tokio::test]
async fn changes_while_killed_are_published_exactly_on_the_real_server() {
    changes_while_killed_are_published_exactly(Kind::Real).await;
}

/// A resume that meets 410 Expired relists: the objects deleted meanwhile are announced DELETED
/// (synthesized, at the list's version), a new one ADDED, the unchanged ones not at all.
async fn expired_resume_relists_and_announces_deletions(kind: Kind) {
    let mut server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let mut daemon = Daemon::start(&server, &nats).await;

    let mut last = Value::Null;
    for name in ["a", "b", "c"] {
        last = server.create_pod(name).await;
    }
    let before = published(&recording, 0, 3).await;
    checkpoint_covers(&nats, common::rv(&last).parse().unwrap()).await;

    daemon.kill();
    server.delete_pod("b").await;
    server.create_pod("d").await;
    server.expire_history().await;
    let from = recording.mark().await;
    daemon.restart().await;

    let mut got = published(&recording, from, 2).await;
    got.sort_by(|x, y| x.name.cmp(&y.name));
    let b = before.iter().find(|c| c.name == "b").unwrap();
    assert_eq!(got.len(), 2, "only b's deletion and d's creation: {got:?}");
    assert_eq!(
        (got[0].kind.as_str(), got[0].uid.as_str()),
        ("DELETED", b.uid.as_str()),
        "b's deletion, from the relist"
    );
    assert!(
        got[0].rv > b.rv,
        "a relist's DELETED carries the list's version, newer than b's last message: {got:?}"
    );
    assert_eq!((got[1].kind.as_str(), got[1].name.as_str()), ("ADDED", "d"));
    let synthesized: Vec<bool> = recording.all()[from..]
        .iter()
        .map(|s| s.synthesized)
        .collect();
    assert_eq!(synthesized, [true, true], "both come from the relist");
    let expired = common::metric(
        &daemon.metrics().await,
        "kube2nats_relists_total",
        &[("watch", "pods"), ("reason", "expired")],
    );
    assert_eq!(expired, Some(1.0), "the resume met 410 Expired once");
}

#[tokio::test]
async fn expired_resume_relists_and_announces_deletions_on_the_simulated_server() {
    expired_resume_relists_and_announces_deletions(Kind::Simulated).await;
}

#[tokio::test]
async fn expired_resume_relists_and_announces_deletions_on_the_real_server() {
    expired_resume_relists_and_announces_deletions(Kind::Real).await;
}

#[tokio::test]
async fn expired_resume_relists_and_announces_deletions_on_the_real_server_after_compaction() {
    expired_resume_relists_and_announces_deletions(Kind::RealWithoutWatchCache).await;
}

/// The ServiceAccount with exactly the RBAC the manifests ship (deploy/base/rbac.yaml) may do all
/// kube2nats needs: it starts, reads the cluster id, lists and watches, and publishes every change.
/// Any further permission the daemon needs is a manifest bug, and fails here.
async fn shipped_rbac_is_enough(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = common::token_file(dir.path(), &server.shipped_rbac_token().await);
    let _daemon = Daemon::start_as(&server, &nats, SA_NAMESPACE, &token).await;
    let watch = OwnWatch::start_in(&server, SA_NAMESPACE).await;

    server.create_pod_in(SA_NAMESPACE, "a").await;
    server.create_pod_in(SA_NAMESPACE, "b").await;
    server.label_pod_in(SA_NAMESPACE, "a", "1").await;
    server.delete_pod_in(SA_NAMESPACE, "b").await;
    let expected = watch.wait_for(4).await;
    let got = published(&recording, 0, expected.len()).await;
    assert_same_changes(&got, &expected, "as the ServiceAccount of the manifests");
}

#[tokio::test]
async fn shipped_rbac_is_enough_on_the_simulated_server() {
    shipped_rbac_is_enough(Kind::Simulated).await;
}

#[tokio::test]
async fn shipped_rbac_is_enough_on_the_real_server() {
    shipped_rbac_is_enough(Kind::Real).await;
}
