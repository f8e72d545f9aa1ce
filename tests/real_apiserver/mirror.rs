//! The mirror (docs/mirror.md) after churn and a kill -9: the bucket holds what the server lists.

use std::time::Duration;

use futures_util::TryStreamExt as _;
use kube2nats_harness::cluster::BUCKET;
use kube2nats_harness::nats::NatsServer;
use serde_json::Value;

use crate::common::{self, restart::Recording};
use crate::daemon::Daemon;
use crate::observe::{checkpoint_covers, published};
use crate::server::{pods, Kind, Server, NS};

const MIRROR: &str = "[mirror]\nenabled = true\ndelete_marker_ttl = \"30s\"\n";

/// The mirror bucket's live keys under the pods of [`NS`]: `(name, resourceVersion)` of each
/// value, sorted by name.
async fn mirrored_pods(client: &async_nats::Client) -> Vec<(String, String)> {
    let js = async_nats::jetstream::new(client.clone());
    let Ok(bucket) = js.get_key_value(BUCKET).await else {
        return Vec::new();
    };
    let keys: Vec<String> = bucket.keys().await.unwrap().try_collect().await.unwrap();
    let prefix = format!("core.v1.pods.{NS}.");
    let mut out = Vec::new();
    for key in keys.iter().filter(|k| k.starts_with(&prefix)) {
        if let Some(value) = bucket.get(key).await.unwrap() {
            let object: Value = serde_json::from_slice(&value).expect("a JSON object");
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            out.push((
                text(&object["metadata"]["name"]),
                text(&object["metadata"]["resourceVersion"]),
            ));
        }
    }
    out.sort();
    out
}

/// Waits until the mirror holds exactly the server's pods of [`NS`], each at its current
/// resourceVersion.
async fn mirror_equals_the_list(server: &Server, client: &async_nats::Client) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listed = server.list(&pods(NS)).await;
        let mirrored = mirrored_pods(client).await;
        if mirrored == listed {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the mirror holds {mirrored:?}, the server lists {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates, updates and deletes, a kill -9, more of them while kube2nats is down, a restart:
/// the mirror ends equal to the server's list.
async fn the_mirror_ends_equal_to_the_list(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let mut daemon = Daemon::start_with(&server, &nats, MIRROR).await;

    for name in ["a", "b", "c"] {
        server.create_pod(name).await;
    }
    server.label_pod("a", "1").await;
    server.delete_pod("b").await;
    let last = server.label_pod("c", "1").await;
    published(&recording, 0, 6).await;
    mirror_equals_the_list(&server, &client).await;
    checkpoint_covers(&nats, common::rv(&last).parse().unwrap()).await;

    daemon.kill();
    server.create_pod("d").await;
    server.label_pod("c", "2").await;
    server.delete_pod("a").await;
    server.create_pod("b").await;
    server.create_pod("e").await;
    server.delete_pod("e").await;
    daemon.restart().await;
    server.label_pod("d", "1").await;
    mirror_equals_the_list(&server, &client).await;
}

#[tokio::test]
async fn the_mirror_ends_equal_to_the_list_on_the_simulated_server() {
    the_mirror_ends_equal_to_the_list(Kind::Simulated).await;
}

#[tokio::test]
async fn the_mirror_ends_equal_to_the_list_on_the_real_server() {
    the_mirror_ends_equal_to_the_list(Kind::Real).await;
}
