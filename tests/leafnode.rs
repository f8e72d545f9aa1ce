//! Many clusters, one NATS: kube2nats in two clusters publishes through a leaf node into one
//! JetStream stream on the hub, and a consumer on the hub tells the clusters apart.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::{NatsOptions, NatsServer, HUB_DOMAIN};
use serde_json::{json, Value};

/// Waits until a message published on `leaf` reaches a subscriber on `hub`.
async fn wait_leaf_connected(hub: &NatsServer, leaf: &NatsServer) {
    let on_hub = async_nats::connect(hub.url()).await.unwrap();
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    let mut probe = on_hub.subscribe("test.leaf.probe").await.unwrap();
    on_hub.flush().await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        on_leaf
            .publish("test.leaf.probe", "?".into())
            .await
            .unwrap();
        on_leaf.flush().await.unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), probe.next()).await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leaf did not join the hub; leaf log:\n{}\nhub log:\n{}",
            leaf.log(),
            hub.log()
        );
    }
}

/// One cluster: its simulated API server and the kube2nats config that watches it through the
/// leaf node as `cluster`.
async fn cluster(
    name: &str,
    leaf: &NatsServer,
    dir: &std::path::Path,
    format: &str,
) -> (ApiServer, String) {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    for pod_name in ["web-1", "web-2"] {
        sim.create("pods", Some("default"), pod(pod_name));
    }
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let token = token_file(&dir, INITIAL_TOKEN);
    let config = format!(
        r#"{kube}
[nats]
url = "{url}"
mode = "jetstream"
[nats.jetstream]
domain = "{domain}"
[nats.jetstream.stream]
name = "KUBE"
subjects = ["kube.>"]
[state]
bucket = "kube2nats-{name}"
checkpoint_interval = "200ms"
[publish]
cluster = "{name}"
format = "{format}"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["default"]
"#,
        kube = kube_section(&sim, &token),
        url = leaf.url(),
        domain = HUB_DOMAIN,
    );
    (sim, config)
}

/// A hub nats-server with JetStream and a leaf nats-server joined to it; kube2nats in cluster
/// `east` (native headers) and in cluster `west` (CloudEvents) both connect to the leaf and watch
/// objects of the same names. A consumer of the hub's stream receives each cluster's changes
/// exactly once, and tells the clusters apart by the subject's cluster token, the `Kube-Cluster`
/// header (and `ce-source` in CloudEvents format) and the object's uid.
#[tokio::test]
async fn two_clusters_publish_through_a_leaf_node_into_one_stream_on_the_hub() {
    let hub = NatsServer::start_hub(NatsOptions::default()).await.unwrap();
    let leaf = NatsServer::start_leaf(
        &hub,
        NatsOptions {
            jetstream: false,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_leaf_connected(&hub, &leaf).await;
    let dir = tempfile::tempdir().unwrap();
    let (east, east_config) = cluster("east", &leaf, dir.path(), "native").await;
    let (west, west_config) = cluster("west", &leaf, dir.path(), "cloudevents").await;
    let east_daemon = Process::spawn(&east_config);
    let west_daemon = Process::spawn(&west_config);

    let js = async_nats::jetstream::new(async_nats::connect(hub.url()).await.unwrap());
    let stored = || async {
        match js.get_stream("KUBE").await {
            Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
            Err(_) => 0,
        }
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while stored().await < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the initial lists did not reach the hub's stream; east:\n{}\nwest:\n{}",
            east_daemon.rest(),
            west_daemon.rest()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    east.update("pods", Some("default"), "web-1", |p| {
        p["metadata"]["labels"]["tier"] = json!("front")
    });
    west.delete("pods", Some("default"), "web-2");

    // A consumer on the hub: everything the stream holds, from the start.
    let stream = js.get_stream("KUBE").await.unwrap();
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("fan-in".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut seen: HashMap<(String, String, String), usize> = HashMap::new();
    let mut uids: HashMap<(String, String), String> = HashMap::new();
    let mut total = 0;
    while total < 6 {
        let m = match tokio::time::timeout(WAIT, messages.next()).await {
            Ok(Some(Ok(m))) => m,
            other => panic!("{total} of 6 messages from the hub's stream: {other:?}"),
        };
        m.ack().await.unwrap();
        total += 1;
        let h = |k: &str| header_text(m.headers.as_ref(), k);
        let cluster = h("Kube-Cluster");
        let tokens: Vec<&str> = m.subject.split('.').collect();
        assert_eq!(tokens[1], cluster, "subject {} against header", m.subject);
        match cluster.as_str() {
            "west" => assert_eq!(
                h("ce-source"),
                "/clusters/west/api/v1/namespaces/default/pods"
            ),
            "east" => assert_eq!(h("ce-source"), ""),
            other => panic!("unknown cluster {other:?} on {}", m.subject),
        }
        let payload: Value = serde_json::from_slice(&m.payload).unwrap();
        let name = h("Kube-Name");
        assert_eq!(payload["object"]["metadata"]["uid"], h("Kube-Uid"));
        let uid = uids
            .entry((cluster.clone(), name.clone()))
            .or_insert_with(|| h("Kube-Uid"));
        assert_eq!(*uid, h("Kube-Uid"), "one object per cluster and name");
        *seen
            .entry((cluster, h("Kube-Event-Type"), name))
            .or_default() += 1;
    }
    let key = |c: &str, t: &str, n: &str| (c.to_owned(), t.to_owned(), n.to_owned());
    let want: HashMap<_, usize> = [
        key("east", "ADDED", "web-1"),
        key("east", "ADDED", "web-2"),
        key("east", "MODIFIED", "web-1"),
        key("west", "ADDED", "web-1"),
        key("west", "ADDED", "web-2"),
        key("west", "DELETED", "web-2"),
    ]
    .into_iter()
    .map(|k| (k, 1))
    .collect();
    assert_eq!(seen, want);
    // The same names in two clusters are two objects.
    assert_ne!(
        uids[&("east".to_owned(), "web-1".to_owned())],
        uids[&("west".to_owned(), "web-1".to_owned())]
    );
    // Nothing more: each change exactly once.
    if let Ok(Some(m)) = tokio::time::timeout(QUIET, messages.next()).await {
        panic!("an extra message: {m:?}");
    }
    assert_eq!(stored().await, 6);

    // Each cluster's durable state reached its own bucket on the hub, through the leaf.
    for name in ["east", "west"] {
        let bucket = format!("kube2nats-{name}");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let keys = match js.get_key_value(&bucket).await {
                Ok(kv) => match kv.keys().await {
                    Ok(keys) => keys.count().await,
                    Err(_) => 0,
                },
                Err(_) => 0,
            };
            if keys > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no checkpoint in {bucket}; east:\n{}\nwest:\n{}",
                east_daemon.rest(),
                west_daemon.rest()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
