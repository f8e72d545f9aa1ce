//! A cluster whose pods subscribers read from kube2nats' mirror: the simulated API server, a real
//! nats-server (JetStream on a file store), and the real kube2nats binary mirroring every
//! namespace's pods and config maps into the bucket (durable state on,
//! `mirror.delete_marker_ttl = "1s"`, so that delete markers and the markers the server leaves
//! when they expire come and go while subscribers run). Subscribers connect through a [`Gate`],
//! which a test closes to cut them off NATS while kube2nats keeps writing.
//!
//! The tests of kube2nats and of its subscriber kits use it: in process from Rust, and through
//! the `sim-cluster` binary (its line protocol is in `src/bin/sim_cluster.rs`) from the kits'
//! own test runners. Changes are made on the API server only; [`MirrorCluster::converged`] waits
//! until the bucket equals it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures_util::StreamExt as _;
use serde_json::{json, Value};

use crate::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use crate::gate::Gate;
use crate::nats::NatsServer;

/// The bucket kube2nats mirrors into (its default).
pub const BUCKET: &str = "kube-objects";

/// How long [`MirrorCluster::converged`] waits: generous, for a loaded machine and the reconnects
/// after a NATS restart or a kube2nats restart.
pub const CONVERGE: Duration = Duration::from_secs(30);

/// One token of a key, escaped into the KV key alphabet `[-/_=.A-Za-z0-9]` (docs/subscribers.md):
/// letters, digits and `-` pass; `.` becomes `_`; any other byte `=XX`; the empty string `=`.
pub fn key_token(text: &str) -> String {
    if text.is_empty() {
        return "=".to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => out.push(b as char),
            b'.' => out.push('_'),
            _ => out.push_str(&format!("={b:02X}")),
        }
    }
    out
}

/// `{group}.{version}.{resource}.{namespace}.{name}` of an object of the core group (namespace
/// `_` where the object has none: cluster-scoped).
pub fn core_key(resource: &str, obj: &Value) -> String {
    let meta = &obj["metadata"];
    let namespace = match meta["namespace"].as_str() {
        Some(ns) => key_token(ns),
        None => "_".to_owned(),
    };
    format!(
        "core.v1.{resource}.{namespace}.{}",
        key_token(meta["name"].as_str().unwrap_or_default())
    )
}

/// A pod of the workload.
pub fn pod(name: &str, image: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "main", "image": image}]}
    })
}

/// A pod the size of a production one (~2.5 KB of JSON: labels, annotations, two containers with
/// environment, resources, probes and mounts, status with conditions).
pub fn bench_pod(i: usize) -> Value {
    let env: Vec<Value> = (0..8)
        .map(|e| json!({"name": format!("SETTING_{e}"), "value": format!("value-{i}-{e}-abcdefghij")}))
        .collect();
    let container = |name: &str| {
        json!({
            "name": name,
            "image": format!("registry.example.com/team/{name}:1.{}.{}", i % 50, i % 7),
            "env": env,
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
        })
    };
    json!({
        "metadata": {
            "name": format!("app-{i:06}"),
            "labels": {"app": "bench", "shard": format!("s{}", i % 16), "pod-template-hash": "7d4b9c8f6d"},
            "annotations": {"example.com/revision": format!("{i}"), "example.com/owner": "team-bench"},
        },
        "spec": {
            "containers": [container("app"), container("sidecar")],
            "volumes": [{"name": "config", "configMap": {"name": "app-config"}}],
            "nodeName": format!("node-{}", i % 40),
            "serviceAccountName": "app",
        },
        "status": {
            "phase": "Running",
            "podIP": format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        },
    })
}

/// What the API server served for pods: lists and watches (their requests) and response bytes
/// of all requests, as a test counts what subscribers cost it.
pub fn pod_requests(api: &ApiServer) -> Value {
    let requests = api.requests();
    let pods = |watch: bool| {
        requests
            .iter()
            .filter(|r| r.path.ends_with("/pods") && r.is_watch() == watch)
            .count()
    };
    json!({
        "pod_lists": pods(false),
        "pod_watches": pods(true),
        "requests": requests.len(),
        "response_bytes": api.response_bytes(),
    })
}

/// `namespace/name rv`, as subscribers print an object.
pub fn id(obj: &Value) -> String {
    let m = &obj["metadata"];
    format!(
        "{}/{} {}",
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
        m["resourceVersion"].as_str().unwrap_or_default()
    )
}

/// The simulated cluster, the nats-server, and kube2nats mirroring the one into the other.
pub struct MirrorCluster {
    /// The simulated API server, where the test changes pods.
    pub api: ApiServer,
    /// The nats-server kube2nats writes to.
    pub nats: NatsServer,
    /// Where subscribers connect to NATS ([`MirrorCluster::subscriber_url`]).
    pub gate: Gate,
    kube2nats: PathBuf,
    daemon: Option<Child>,
    dir: tempfile::TempDir,
}

impl MirrorCluster {
    /// Pods in two namespaces (names with dots, escaped in their keys) and a config map, which a
    /// pods subscriber leaves out; `kube2nats` (the binary) started, and the bucket equal to the
    /// API server.
    pub async fn start(kube2nats: &Path) -> anyhow::Result<MirrorCluster> {
        MirrorCluster::start_with(kube2nats, 0).await
    }

    /// As [`MirrorCluster::start`], with `bench_pods` more pods of a production size (~2.5 KB:
    /// [`bench_pod`]) in namespace `bench`, for measuring subscribers.
    pub async fn start_with(kube2nats: &Path, bench_pods: usize) -> anyhow::Result<MirrorCluster> {
        let nats = NatsServer::start().await?;
        let api = ApiServer::start(ApiServerOptions::default()).await?;
        for i in 0..bench_pods {
            api.create("pods", Some("bench"), bench_pod(i));
        }
        for i in 0..12 {
            api.create("pods", Some("shop"), pod(&format!("web-{i}"), "nginx:1.27"));
        }
        for i in 0..6 {
            api.create(
                "pods",
                Some("default"),
                pod(&format!("db.v2-{i}"), "postgres:16"),
            );
        }
        api.create(
            "configmaps",
            Some("shop"),
            json!({"metadata": {"name": "web-0"}, "data": {"k": "v"}}),
        );
        let gate = Gate::start(([127, 0, 0, 1], nats.port()).into()).await?;
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("token"), INITIAL_TOKEN)?;
        std::fs::write(
            dir.path().join("kube2nats.toml"),
            format!(
                "[kubernetes]\napi_url = \"{api}\"\ntoken_file = {token:?}\n[nats]\nurl = \"{nats}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[state]\ncheckpoint_interval = \"200ms\"\n[mirror]\nenabled = true\ndelete_marker_ttl = \"1s\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\n[[watches]]\nname = \"configmaps\"\nresource = \"configmaps\"\n",
                api = api.url(),
                token = dir.path().join("token").display().to_string(),
                nats = nats.url(),
            ),
        )?;
        let mut cluster = MirrorCluster {
            api,
            nats,
            gate,
            kube2nats: kube2nats.to_owned(),
            daemon: None,
            dir,
        };
        cluster.start_daemon()?;
        cluster.converged(false).await?;
        Ok(cluster)
    }

    /// The NATS URL subscribers use: through the gate.
    pub fn subscriber_url(&self) -> String {
        format!("nats://{}", self.gate.addr())
    }

    /// Starts kube2nats (again: with the same configuration and durable state). Its log is
    /// appended to [`MirrorCluster::daemon_log`].
    pub fn start_daemon(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("kube2nats.log"))?;
        let child = Command::new(&self.kube2nats)
            .arg("--config")
            .arg(self.dir.path().join("kube2nats.toml"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.kube2nats.display()))?;
        self.daemon = Some(child);
        Ok(())
    }

    /// Kills kube2nats with SIGKILL, as an OOM kill or a node's loss would.
    pub fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// What kube2nats logged, every run of it.
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube2nats.log")).unwrap_or_default()
    }

    /// Creates a pod; the line a subscriber prints for it.
    pub fn create(&self, ns: &str, name: &str) -> String {
        let obj = self.api.create("pods", Some(ns), pod(name, "nginx:1.27"));
        format!("ADDED {}", id(&obj))
    }

    /// Changes a pod's image; the line a subscriber prints for it.
    pub fn update(&self, ns: &str, name: &str, image: &str) -> String {
        let obj = self.api.update("pods", Some(ns), name, |p| {
            p["spec"]["containers"][0]["image"] = json!(image)
        });
        format!("MODIFIED {}", id(&obj))
    }

    /// Deletes a pod; the line a subscriber prints for it names the last version it had, the one
    /// before the deletion. `None` if there is no such pod.
    pub fn delete(&self, ns: &str, name: &str) -> Option<String> {
        let before = self.api.get("pods", Some(ns), name)?;
        self.api.delete("pods", Some(ns), name)?;
        Some(format!("DELETED {}", id(&before)))
    }

    /// The API server's pods: `namespace/name` → resourceVersion.
    pub fn pods(&self) -> BTreeMap<String, String> {
        let mut pods = BTreeMap::new();
        self.api.each("pods", |obj| {
            if let Some((key, rv)) = id(obj).rsplit_once(' ') {
                pods.insert(key.to_owned(), rv.to_owned());
            }
        });
        pods
    }

    /// What the API server holds, as the bucket's keys should: key → resourceVersion.
    fn api_keys(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for resource in ["pods", "configmaps"] {
            self.api.each(resource, |obj| {
                let rv = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                out.insert(core_key(resource, obj), rv.to_owned());
            });
        }
        out
    }

    /// The bucket's live keys → the `Kube-Resource-Version` of their value, and the number of
    /// messages its stream holds (live values and delete markers); `None` while NATS does not
    /// answer. Read as kube2nats' repair reads it: the last message of every key, headers only.
    async fn bucket(&self) -> Option<(BTreeMap<String, String>, u64)> {
        use async_nats::jetstream::consumer::{push, DeliverPolicy};
        let client = async_nats::connect(self.nats.url()).await.ok()?;
        let js = async_nats::jetstream::new(client.clone());
        let mut stream = js.get_stream(format!("KV_{BUCKET}")).await.ok()?;
        let messages = stream.info().await.ok()?.state.messages;
        let consumer = stream
            .create_consumer(push::OrderedConfig {
                deliver_subject: client.new_inbox(),
                filter_subject: format!("$KV.{BUCKET}.>"),
                deliver_policy: DeliverPolicy::LastPerSubject,
                headers_only: true,
                ..Default::default()
            })
            .await
            .ok()?;
        let mut pending = consumer.cached_info().num_pending;
        let mut entries = consumer.messages().await.ok()?;
        let prefix = format!("$KV.{BUCKET}.");
        let mut out = BTreeMap::new();
        while pending > 0 {
            let message = tokio::time::timeout(Duration::from_secs(5), entries.next())
                .await
                .ok()??
                .ok()?;
            pending = message.info().ok()?.pending;
            let header = |name: &str| {
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_owned())
            };
            let deleted =
                header("KV-Operation").is_some() || header("Nats-Marker-Reason").is_some();
            if !deleted {
                let key = message.subject.strip_prefix(prefix.as_str())?.to_owned();
                out.insert(key, header("Kube-Resource-Version").unwrap_or_default());
            }
        }
        Some((out, messages))
    }

    /// Waits until the bucket equals the API server's objects, and with `markers_gone` until no
    /// delete marker is left in it either (every marker and the server's marker after it
    /// expired: nothing in the bucket says the deleted objects were there).
    pub async fn converged(&self, markers_gone: bool) -> anyhow::Result<()> {
        let mut want = self.api_keys();
        // 3 ms more per object: a large bench cluster takes its time to list and write (100k
        // pods took 102-107 s on a quiet 2-core machine, more beside a build).
        let wait = CONVERGE + Duration::from_millis(3 * want.len() as u64);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let have = self.bucket().await;
            if let Some((keys, messages)) = &have {
                if *keys == want && (!markers_gone || *messages == want.len() as u64) {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                let (keys, messages) = have.unwrap_or_default();
                let differ: Vec<_> = want
                    .iter()
                    .filter(|(k, v)| keys.get(*k) != Some(*v))
                    .chain(keys.iter().filter(|(k, _)| !want.contains_key(*k)))
                    .take(20)
                    .collect();
                bail!(
                    "the bucket does not equal the API server within {wait:?}: {} keys in the bucket ({messages} messages), {} on the API server; the first that differ (key, API server's version): {differ:?}\nkube2nats:\n{}",
                    keys.len(),
                    want.len(),
                    self.daemon_log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            want = self.api_keys();
        }
    }
}

impl Drop for MirrorCluster {
    fn drop(&mut self) {
        self.kill_daemon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness' key function, with which tests compare the bucket to the API server, follows
    /// the shared vectors (clients/key-vectors.json) that kube2nats' and every kit's tests read.
    #[test]
    fn keys_follow_the_shared_vectors() {
        let vectors: Value =
            serde_json::from_str(include_str!("../../../clients/key-vectors.json"))
                .expect("clients/key-vectors.json parses");
        for v in vectors["tokens"].as_array().expect("tokens") {
            let text = v["text"].as_str().expect("text");
            assert_eq!(key_token(text), v["key"].as_str().expect("key"), "{text:?}");
        }
        for v in vectors["keys"].as_array().expect("keys") {
            if v["group"] != "" || v["cluster"] != "" || v["version"] != "v1" {
                continue;
            }
            let obj = json!({"metadata": {"namespace": v["namespace"], "name": v["name"]}});
            let resource = v["resource"].as_str().expect("resource");
            assert_eq!(core_key(resource, &obj), v["key"].as_str().expect("key"));
        }
    }
}
