//! What happened, as the server tells it (the test's own watch) and as kube2nats published it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use crate::common::restart::{Recording, Seen};
use crate::server::{client, pods, Server, NS};
use futures_util::StreamExt as _;
use kube2nats_harness::nats::NatsServer;
use serde_json::Value;

/// One event of the test's own watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
}

impl Change {
    pub fn from_seen(s: &Seen) -> Change {
        Change {
            kind: s.kind.clone(),
            name: s.name.clone(),
            uid: s.uid.clone(),
            rv: s.rv,
        }
    }
}

/// The test's own list+watch of a collection (the pods in [`NS`] unless it says): every event
/// the server sends, in order.
pub struct OwnWatch {
    events: Arc<Mutex<Vec<Change>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OwnWatch {
    pub async fn start(server: &Server) -> OwnWatch {
        OwnWatch::start_in(server, NS).await
    }

    pub async fn start_in(server: &Server, ns: &str) -> OwnWatch {
        OwnWatch::start_at(server, &pods(ns)).await
    }

    /// The test's own list+watch of the collection at `path`.
    pub async fn start_at(server: &Server, path: &str) -> OwnWatch {
        let client = client(&server.ca_file());
        let token = std::fs::read_to_string(server.token_file()).unwrap();
        let base = format!("{}{path}", server.url());
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

    pub fn all(&self) -> Vec<Change> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until the watch has seen at least `n` events and then nothing new for a second:
    /// the real server may send more events than the test made changes (a pod's deletion is a
    /// MODIFIED, setting `deletionTimestamp`, then the DELETED).
    pub async fn wait_for(&self, n: usize) -> Vec<Change> {
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

/// Waits until kube2nats has published `n` messages since `from`; returns them once no more
/// arrive for a quiet spell (a repeat would come within it).
pub async fn published(recording: &Recording, from: usize, n: usize) -> Vec<Change> {
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
pub fn assert_same_changes(got: &[Change], expected: &[Change], what: &str) {
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
pub async fn checkpoint_covers(nats: &NatsServer, rv: u64) {
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
