//! Noise control by scope and size: `namespaces_exclude`, `namespace_selector` and
//! `payload = "metadata"`, with the real binary, a real nats-server and the simulated API server.
//!
//! Messages are read from a core subscription on `kube.>` opened before kube2nats starts, so
//! every publish is seen; a test that says "never arrives" listens for [`QUIET`] after the
//! messages that must arrive.

mod common;

use std::collections::BTreeSet;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, PartialMetadata};
use kube2nats_harness::nats::NatsServer;
use serde_json::{json, Value};

struct Setup {
    sim: ApiServer,
    nats: NatsServer,
    http_port: u16,
}

impl Setup {
    async fn start() -> Setup {
        Setup {
            sim: ApiServer::start(ApiServerOptions::default()).await.unwrap(),
            nats: NatsServer::start().await.unwrap(),
            http_port: free_port(),
        }
    }

    /// Core NATS, durable state (JetStream of the same server), and `watch` as the one watch.
    fn config(&self, watch: &str) -> String {
        format!(
            "{}\n[nats]\nurl = \"{}\"\n[state]\ncheckpoint_interval = \"100ms\"\n[[watches]]\nname = \"cms\"\nresource = \"configmaps\"\n{watch}\n",
            kube_section(&self.sim, &self.sim.token_file()).replace(
                "listen = \"127.0.0.1:0\"",
                &format!("listen = \"127.0.0.1:{}\"", self.http_port)
            ),
            self.nats.url()
        )
    }

    async fn inbox(&self) -> Inbox {
        let nc = async_nats::connect(self.nats.url()).await.unwrap();
        Inbox::subscribe(&nc, "kube.>").await
    }

    async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.http_port);
        reqwest::get(url).await.unwrap().text().await.unwrap()
    }

    fn namespace(&self, name: &str, team: &str) {
        let labels = json!({ "team": team });
        self.sim.create(
            "namespaces",
            None,
            json!({ "metadata": { "name": name, "labels": labels } }),
        );
    }

    fn relabel(&self, name: &str, team: &str) {
        self.sim.update("namespaces", None, name, |ns| {
            ns["metadata"]["labels"]["team"] = json!(team);
        });
    }

    fn configmap(&self, namespace: &str, name: &str) -> Value {
        let data = json!({ "config.yaml": "x".repeat(2048) });
        self.sim.create(
            "configmaps",
            Some(namespace),
            json!({ "metadata": { "name": name }, "data": data }),
        )
    }

    fn touch(&self, namespace: &str, name: &str) {
        self.sim.update("configmaps", Some(namespace), name, |cm| {
            cm["data"]["n"] = json!(rv(cm));
        });
    }
}

/// `ADDED default/a`: type, namespace and name of a message.
fn key(m: &Got) -> String {
    format!(
        "{} {}/{}",
        m.header("Kube-Event-Type").unwrap_or("?"),
        m.header("Kube-Namespace").unwrap_or("_"),
        m.header("Kube-Name").unwrap_or("?")
    )
}

async fn take_set(inbox: &mut Inbox, n: usize) -> BTreeSet<String> {
    inbox.take(n).await.iter().map(key).collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// An excluded namespace's objects never arrive, neither listed nor changed, while one
/// cluster-wide watch serves the rest; each dropped object is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_namespace_objects_never_arrive() {
    let s = Setup::start().await;
    for (ns, name) in [("default", "a"), ("kube-system", "k"), ("team", "t")] {
        s.configmap(ns, name);
    }
    let mut inbox = s.inbox().await;
    let process = Process::spawn(&s.config("namespaces_exclude = [\"kube-system\"]"));
    assert_eq!(
        take_set(&mut inbox, 2).await,
        set(&["ADDED default/a", "ADDED team/t"])
    );
    process.line_with(&["watching from resourceVersion"]);
    s.touch("kube-system", "k");
    s.configmap("kube-system", "k2");
    s.touch("team", "t");
    assert_eq!(key(&inbox.next().await), "MODIFIED team/t");
    inbox.quiet_for(QUIET).await;

    let watches: BTreeSet<String> = s
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.is_watch())
        .map(|r| r.path)
        .collect();
    assert_eq!(
        watches,
        set(&["/api/v1/configmaps"]),
        "one cluster-wide watch"
    );
    let text = s.metrics().await;
    let dropped = metric(
        &text,
        "kube2nats_events_dropped_total",
        &[("watch", "cms"), ("reason", "namespace")],
    );
    assert_eq!(dropped, Some(3.0), "one listed, two received");
}

/// A namespace relabelled into the selector has its objects published as ADDED; one relabelled
/// out has them published as DELETED (synthesized) and its later changes dropped; a namespace
/// created with a matching label is followed from its first object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relabelling_a_namespace_starts_and_stops_its_objects() {
    let s = Setup::start().await;
    s.namespace("payments", "payments");
    s.namespace("shop", "shop");
    s.configmap("payments", "p");
    s.configmap("shop", "s1");
    s.configmap("shop", "s2");
    let mut inbox = s.inbox().await;
    let process = Process::spawn(&s.config("namespace_selector = \"team=payments\""));
    assert_eq!(key(&inbox.next().await), "ADDED payments/p");
    process.line_with(&["watching from resourceVersion"]);
    s.touch("shop", "s1");
    inbox.quiet_for(QUIET).await;

    s.relabel("shop", "payments");
    let started = inbox.take(2).await;
    assert_eq!(
        started.iter().map(key).collect::<BTreeSet<_>>(),
        set(&["ADDED shop/s1", "ADDED shop/s2"])
    );
    assert!(started
        .iter()
        .all(|m| m.header("Kube-Synthesized") == Some("relist")));
    process.line_with(&["namespace now matches namespace_selector", "shop"]);

    s.relabel("payments", "finance");
    let stopped = inbox.next().await;
    assert_eq!(key(&stopped), "DELETED payments/p");
    assert_eq!(stopped.header("Kube-Synthesized"), Some("relist"));
    process.line_with(&["namespace no longer matches namespace_selector", "payments"]);
    process.line_with(&["watching from resourceVersion"]);

    s.touch("payments", "p");
    s.touch("shop", "s2");
    s.namespace("new", "payments");
    s.configmap("new", "n");
    let later = take_set(&mut inbox, 2).await;
    assert_eq!(later, set(&["MODIFIED shop/s2", "ADDED new/n"]));
    inbox.quiet_for(QUIET).await;
}

/// A namespace that stopped matching while kube2nats was down is reported at start (its objects
/// DELETED), one that started matching too (ADDED), and nothing unchanged is published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_relabelled_while_down_is_reported_at_start() {
    let s = Setup::start().await;
    s.namespace("payments", "payments");
    s.namespace("billing", "payments");
    s.namespace("shop", "shop");
    s.configmap("payments", "p");
    s.configmap("billing", "b");
    s.configmap("shop", "s");
    let config = s.config("namespace_selector = \"team=payments\"");
    let mut inbox = s.inbox().await;
    let mut process = Process::spawn(&config);
    assert_eq!(
        take_set(&mut inbox, 2).await,
        set(&["ADDED payments/p", "ADDED billing/b"])
    );
    process.line_with(&["watching from resourceVersion"]);
    // Let a checkpoint cover what was published.
    eventually_async(&s, |text| {
        metric(
            &text,
            "kube2nats_state_checkpoints_total",
            &[("watch", "cms")],
        )
        .unwrap_or(0.0)
            >= 1.0
    })
    .await;
    process.terminate();
    assert_eq!(process.wait_exit(WAIT).0, Some(0));

    s.relabel("payments", "finance");
    s.relabel("shop", "payments");
    let process = Process::spawn(&config);
    assert_eq!(
        take_set(&mut inbox, 2).await,
        set(&["DELETED payments/p", "ADDED shop/s"])
    );
    process.line_with(&["relisting to diff it under the current namespace scope"]);
    inbox.quiet_for(QUIET).await;
}

/// Polls the process' metrics until `f` holds.
async fn eventually_async(s: &Setup, f: impl Fn(String) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if f(s.metrics().await) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The object of a message in the default (`event`) envelope.
fn object(m: &Got) -> &Value {
    &m.payload["object"]
}

/// Asserts a metadata-only message: a PartialObjectMetadata without data, and headers that still
/// name the real kind.
fn assert_metadata_only(m: &Got) {
    let o = object(m);
    assert_eq!(o["kind"], "PartialObjectMetadata", "{o}");
    assert_eq!(o["apiVersion"], "meta.k8s.io/v1");
    assert!(o.get("data").is_none() && o.get("spec").is_none(), "{o}");
    assert!(o["metadata"]["uid"].is_string());
    assert_eq!(m.header("Kube-Kind"), Some("ConfigMap"));
    assert_eq!(m.header("Kube-Api-Version"), Some("v1"));
}

/// A metadata-only watch asks for PartialObjectMetadata and publishes objects without their
/// data, listed and watched alike, under the real kind's headers and subjects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_watch_payload_has_no_data() {
    let s = Setup::start().await;
    s.configmap("default", "a");
    let mut inbox = s.inbox().await;
    let process = Process::spawn(&s.config("payload = \"metadata\""));
    let added = inbox.next().await;
    assert_eq!(added.subject, "kube.core.v1.configmaps.default.a.added");
    assert_metadata_only(&added);
    process.line_with(&["watching from resourceVersion"]);
    s.touch("default", "a");
    let modified = inbox.next().await;
    assert_eq!(key(&modified), "MODIFIED default/a");
    assert_metadata_only(&modified);
    s.sim.delete("configmaps", Some("default"), "a");
    assert_metadata_only(&inbox.next().await);

    let requests = s.sim.requests();
    let accept = |watch: bool| {
        requests
            .iter()
            .find(|r| r.path == "/api/v1/configmaps" && r.is_watch() == watch)
            .map(|r| r.accept.clone())
            .unwrap()
    };
    assert!(accept(false)
        .starts_with("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"));
    assert!(
        accept(true).starts_with("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    );
    let text = s.metrics().await;
    assert_eq!(
        metric(
            &text,
            "kube2nats_events_truncated_total",
            &[("watch", "cms"), ("reason", "metadata_fallback")]
        ),
        Some(0.0),
        "served by the API server, nothing cut by kube2nats"
    );
}

/// A server that cannot convert the resource sends full objects (the Accept fallback), and one
/// behind a proxy answers 406: either way subscribers get metadata only, one log line says why,
/// and the metric counts the objects kube2nats cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_watch_falls_back_when_the_server_will_not() {
    for (mode, line) in [
        (
            PartialMetadata::Unsupported,
            "the API server sends full objects",
        ),
        (
            PartialMetadata::Refused,
            "the server refused PartialObjectMetadata",
        ),
    ] {
        let s = Setup::start().await;
        s.sim.set_partial_metadata(mode);
        s.configmap("default", "a");
        let mut inbox = s.inbox().await;
        let process = Process::spawn(&s.config("payload = \"metadata\""));
        assert_metadata_only(&inbox.next().await);
        process.line_with(&[line]);
        process.line_with(&["watching from resourceVersion"]);
        s.touch("default", "a");
        assert_metadata_only(&inbox.next().await);
        let text = s.metrics().await;
        let cut = metric(
            &text,
            "kube2nats_events_truncated_total",
            &[("watch", "cms"), ("reason", "metadata_fallback")],
        );
        assert_eq!(cut, Some(2.0), "{mode:?}: listed and modified object cut");
        let rest = process.rest();
        assert!(
            !rest.contains("full objects"),
            "{mode:?}: said once:\n{rest}"
        );
    }
}

/// With a list of namespaces, a namespace selector publishes those of them that match, and
/// follows them as they are relabelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_namespace_watch_with_a_selector_publishes_the_matching_ones() {
    let s = Setup::start().await;
    s.namespace("payments", "payments");
    s.namespace("shop", "shop");
    s.namespace("other", "payments");
    for ns in ["payments", "shop", "other"] {
        s.configmap(ns, "c");
    }
    let mut inbox = s.inbox().await;
    let config = "namespaces = [\"payments\", \"shop\"]\nnamespace_selector = \"team=payments\"";
    let _process = Process::spawn(&s.config(config));
    assert_eq!(key(&inbox.next().await), "ADDED payments/c");
    inbox.quiet_for(QUIET).await;
    s.relabel("shop", "payments");
    assert_eq!(key(&inbox.next().await), "ADDED shop/c");
    s.touch("other", "c");
    s.touch("shop", "c");
    assert_eq!(key(&inbox.next().await), "MODIFIED shop/c");
    inbox.quiet_for(QUIET).await;
}

/// Without list and watch on namespaces, the start-up check and the namespace watch name the
/// ClusterRole rule to add, and the selector's watch publishes nothing it cannot scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_without_rbac_on_namespaces_names_the_rule() {
    use kube2nats_harness::apiserver::{Rule, INITIAL_TOKEN};
    let s = Setup::start().await;
    s.namespace("payments", "payments");
    s.configmap("payments", "c");
    s.sim.set_rules(
        INITIAL_TOKEN,
        vec![
            Rule::new(&["get", "list", "watch"], &[""], &["configmaps"], &[]),
            // Durable state reads the cluster id, the kube-system Namespace's uid.
            Rule::new(&["get"], &[""], &["namespaces"], &[]).named(&["kube-system"]),
        ],
    );
    let mut inbox = s.inbox().await;
    let process = Process::spawn(&s.config("namespace_selector = \"team=payments\""));
    let rule = r#"add to a ClusterRole (bound with a ClusterRoleBinding): {apiGroups: [""], resources: ["namespaces"]"#;
    let check = process.line_with(&["RBAC does not allow the request", "resource=namespaces"]);
    assert!(check.contains(rule), "{check}");
    let watch = process.line_with(&["RBAC refused listing or watching namespaces"]);
    assert!(watch.contains(rule), "{watch}");
    inbox.quiet_for(QUIET).await;
}
