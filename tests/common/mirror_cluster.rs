//! A cluster whose pods a subscriber reads from the mirror: the simulated API server, a real
//! nats-server (JetStream on a file store), and the real kube2nats mirroring every namespace's
//! pods and config maps into the bucket (durable state on, `mirror.delete_marker_ttl = "1s"`, so
//! that delete markers and the markers the server leaves when they expire come and go while
//! subscribers run). Subscribers connect through a [`Gate`], which a test closes to cut them
//! off NATS while kube2nats keeps writing.
//!
//! The test changes objects on the API server only, and waits by polling the bucket until it
//! equals the API server.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::gate::Gate;
use kube2nats_harness::nats::NatsServer;
use serde_json::{json, Value};

use crate::common;
use crate::mirror::{api_objects, core_key, BUCKET};

/// How long a bound on the bucket's convergence is: generous, for a loaded machine and the
/// reconnects after a NATS restart or a kube2nats restart.
pub const CONVERGE: Duration = Duration::from_secs(30);

pub fn pod(name: &str, image: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "main", "image": image}]}
    })
}

/// `namespace/name rv` as subscribers print it.
pub fn id(obj: &Value) -> String {
    let m = &obj["metadata"];
    format!(
        "{}/{} {}",
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
        m["resourceVersion"].as_str().unwrap_or_default()
    )
}

/// kube2nats' configuration: every namespace's pods and config maps mirrored, durable state, and
/// a one-second `mirror.delete_marker_ttl`.
fn daemon_config(api: &ApiServer, nats: &NatsServer, dir: &std::path::Path) -> String {
    let token = common::token_file(dir, INITIAL_TOKEN);
    format!(
        "{}\n[nats]\nurl = \"{}\"\n[state]\ncheckpoint_interval = \"200ms\"\n[mirror]\nenabled = true\ndelete_marker_ttl = \"1s\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\n[[watches]]\nname = \"configmaps\"\nresource = \"configmaps\"\n",
        common::kube_section(api, &token),
        nats.url()
    )
}

/// The simulated cluster, the nats-server, and kube2nats mirroring the one into the other.
pub struct Cluster {
    pub api: ApiServer,
    pub nats: NatsServer,
    /// Where subscribers connect to NATS.
    pub gate: Gate,
    pub daemon: common::Process,
    config: String,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Pods in two namespaces (names with dots, escaped in their keys) and a config map, which a
    /// pods subscriber leaves out; kube2nats started, and the bucket equal to the API server.
    pub async fn start() -> Cluster {
        let nats = NatsServer::start().await.expect("nats-server starts");
        let api = ApiServer::start(ApiServerOptions::default())
            .await
            .expect("the simulated API server starts");
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
        let gate = Gate::start(([127, 0, 0, 1], nats.port()).into())
            .await
            .expect("the gate in front of NATS");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = daemon_config(&api, &nats, dir.path());
        let daemon = common::Process::spawn(&config);
        let cluster = Cluster {
            api,
            nats,
            gate,
            daemon,
            config,
            _dir: dir,
        };
        cluster.converged(false).await;
        cluster
    }

    /// The NATS URL subscribers use: through the gate.
    pub fn subscriber_url(&self) -> String {
        format!("nats://{}", self.gate.addr())
    }

    /// kube2nats killed with SIGKILL.
    pub fn kill_daemon(&mut self) {
        self.daemon.kill();
    }

    /// kube2nats started again with the same configuration and durable state.
    pub fn restart_daemon(&mut self) {
        self.daemon = common::Process::spawn(&self.config);
    }

    pub fn create(&self, ns: &str, name: &str) -> String {
        let obj = self.api.create("pods", Some(ns), pod(name, "nginx:1.27"));
        format!("ADDED {}", id(&obj))
    }

    pub fn update(&self, ns: &str, name: &str, image: &str) -> String {
        let obj = self.api.update("pods", Some(ns), name, |p| {
            p["spec"]["containers"][0]["image"] = json!(image)
        });
        format!("MODIFIED {}", id(&obj))
    }

    /// Deletes the pod; the line a subscriber prints for it names the last version it had, the
    /// one before the deletion.
    pub fn delete(&self, ns: &str, name: &str) -> String {
        let before = self
            .api
            .get("pods", Some(ns), name)
            .expect("the pod exists");
        self.api.delete("pods", Some(ns), name).expect("deleted");
        format!("DELETED {}", id(&before))
    }

    /// The API server's pods: `namespace/name` → resourceVersion.
    pub async fn api_pods(&self) -> BTreeMap<String, String> {
        let (objects, _) = api_objects(&self.api.url(), "pods").await;
        objects
            .into_iter()
            .map(|(ns, name, rv)| (format!("{ns}/{name}"), rv))
            .collect()
    }

    /// What the API server holds, as the bucket's keys should: key → resourceVersion.
    async fn api_keys(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for resource in ["pods", "configmaps"] {
            let (_, items) = api_objects(&self.api.url(), resource).await;
            for obj in &items {
                let rv = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                out.insert(core_key(resource, obj), rv.to_owned());
            }
        }
        out
    }

    /// The bucket's live keys → the resourceVersion of their value, and the number of messages
    /// its stream holds (live values and delete markers); `None` while NATS does not answer.
    async fn bucket(&self) -> Option<(BTreeMap<String, String>, u64)> {
        let client = async_nats::connect(self.nats.url()).await.ok()?;
        let js = async_nats::jetstream::new(client);
        let store = js.get_key_value(BUCKET).await.ok()?;
        let mut out = BTreeMap::new();
        let mut keys = store.keys().await.ok()?;
        while let Some(key) = keys.next().await {
            let key = key.ok()?;
            if let Some(value) = store.get(&key).await.ok()? {
                let obj: Value = serde_json::from_slice(&value).ok()?;
                let rv = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                out.insert(key, rv.to_owned());
            }
        }
        let mut stream = js.get_stream(format!("KV_{BUCKET}")).await.ok()?;
        let messages = stream.info().await.ok()?.state.messages;
        Some((out, messages))
    }

    /// Waits until the bucket equals the API server's objects, and with `markers_gone` until no
    /// delete marker is left in it either.
    pub async fn converged(&self, markers_gone: bool) {
        let deadline = tokio::time::Instant::now() + CONVERGE;
        loop {
            let want = self.api_keys().await;
            let have = self.bucket().await;
            if let Some((keys, messages)) = &have {
                if *keys == want && (!markers_gone || *messages == want.len() as u64) {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the bucket (keys, messages) does not equal the API server within {CONVERGE:?}:\nbucket {have:?}\napi    {want:?}\nkube2nats:\n{}",
                self.daemon.rest()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
