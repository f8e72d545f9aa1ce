//! Saved state that can be trusted: a checkpoint is always loadable, even after the state bucket
//! was purged or deleted and re-created while kube2nats ran (see docs/durable-state.md).
//!
//! Each test runs the real binary, a real nats-server with JetStream and the simulated API
//! server, and counts messages with a plain core subscription.

mod common;

use common::restart::*;
use common::*;

/// What happens to the state bucket while kube2nats runs.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `nats stream purge KV_kube2nats-state`: every key gone, the stream kept.
    Purge,
    /// `nats kv del kube2nats-state` then `nats kv add kube2nats-state`: a new, empty stream.
    Recreate,
}

/// A run checkpoints; the bucket loses everything; a checkpoint where only the resume version
/// moved (a bookmark) follows; kill -9; a pod is deleted while down; the restart publishes
/// exactly that deletion and nothing else. The moved version must not be committed over chunks
/// that are gone: the next checkpoint after the loss saves every object again.
async fn bucket_lost_while_running(loss: Loss, compact: bool) {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    let sim = &cluster.sim;
    let mut last = 0;
    for i in 0..5 {
        last = rv(&sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0)))
            .parse()
            .unwrap();
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster.config(PODS_WATCH, "");
    let daemon = Process::spawn(&config);
    converge(sim, &recording).await;
    cluster.checkpoint_at_least(PODS_KEY, last).await;

    let js = async_nats::jetstream::new(async_nats::connect(cluster.nats.url()).await.unwrap());
    match loss {
        Loss::Purge => {
            let stream = js.get_stream(format!("KV_{BUCKET}")).await.unwrap();
            stream.purge().await.unwrap();
        }
        Loss::Recreate => {
            js.delete_key_value(BUCKET).await.unwrap();
            js.create_key_value(async_nats::jetstream::kv::Config {
                bucket: BUCKET.into(),
                history: 1,
                storage: async_nats::jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await
            .unwrap();
        }
    }
    assert!(
        cluster.manifest(PODS_KEY).await.is_none(),
        "the state is gone"
    );
    // Only the resume version moves: a change the watch does not see, then a bookmark.
    let moved: u64 = rv(&sim.create(
        "configmaps",
        Some(NS),
        serde_json::json!({"metadata": {"name": "unwatched"}}),
    ))
    .parse()
    .unwrap();
    sim.send_bookmarks();
    cluster.checkpoint_at_least(PODS_KEY, moved).await;
    drop(daemon); // SIGKILL
    let before_len = recording.mark().await;
    let before = recording.all()[..before_len].to_vec();

    let p1 = sim.get("pods", Some(NS), "p1").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    sim.delete("pods", Some(NS), "p1").unwrap();
    if compact {
        sim.compact();
    }
    let daemon = Process::spawn(&config);
    let after = converge_after(sim, &recording, &before, before_len).await;
    let log = daemon.rest();
    let published: Vec<(String, String)> = after
        .iter()
        .map(|s| (s.kind.clone(), s.uid.clone()))
        .collect();
    assert_eq!(
        published,
        vec![("DELETED".to_owned(), p1)],
        "{loss:?}: the restart publishes exactly the deletion made while down\n--- log ---\n{log}"
    );
    assert!(!log.contains("started fresh"), "{loss:?}: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_purged_while_running_next_start_loads_the_checkpoint() {
    bucket_lost_while_running(Loss::Purge, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_recreated_while_running_next_start_loads_the_checkpoint() {
    bucket_lost_while_running(Loss::Recreate, true).await;
}
