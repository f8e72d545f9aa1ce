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

/// The uid of a pod the simulator holds now.
fn uid_in(sim: &kube2nats_harness::apiserver::ApiServer, ns: &str, name: &str) -> String {
    sim.get("pods", Some(ns), name).expect("the pod exists")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `(type, uid)` of each message.
fn kinds(seen: &[Seen]) -> Vec<(String, String)> {
    seen.iter()
        .map(|s| (s.kind.clone(), s.uid.clone()))
        .collect()
}

/// The per-namespace sidecar example copied into a second namespace: two kube2nats, each with a
/// watch named `pods` on its own namespace, sharing the default bucket. Neither start removes or
/// reads the other's state, so after both are killed and a pod of each namespace is deleted while
/// down, the restarts announce exactly those two deletions and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_sharing_the_bucket_keep_their_own_state() {
    two_deployments_keep_their_own_state(["team-a", "team-b"]).await;
}

/// Two deployments in one namespace without `state.instance` (two Helm releases with their own
/// values, or hand-written manifests), each with a watch named `pods` on another namespace:
/// they share the owner prefix, and neither start may remove the other's state as a target its
/// configuration does not watch (it is written within `state.forget_unwatched_after`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deployments_in_one_namespace_keep_their_own_state() {
    two_deployments_keep_their_own_state(["ops", "ops"]).await;
}

/// Two kube2nats watching `pods` in `team-a` and `team-b`, running in the pod namespaces
/// `pod_namespaces`: each keeps its own state over the other's start and a kill -9.
async fn two_deployments_keep_their_own_state(pod_namespaces: [&str; 2]) {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    let sim = &cluster.sim;
    let spaces = ["team-a", "team-b"];
    for ns in spaces {
        for i in 0..3 {
            sim.create("pods", Some(ns), pod_named(&format!("p{i}"), 0));
        }
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let configs = spaces.map(|ns| {
        let watch =
            format!("[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"{ns}\"]\n");
        cluster.config(&watch, "").replace(
            &format!("127.0.0.1:{}\"", cluster.http_port),
            &format!("127.0.0.1:{}\"", free_port()),
        )
    });
    let run =
        |i: usize| Process::spawn_env(&configs[i], &[], &[("POD_NAMESPACE", pod_namespaces[i])]);
    let rv = sim.resource_version();
    let wait_saved = |ns: &'static str| saved_at_least(&cluster, format!("pods.{ns}"), rv);
    let a = run(0);
    wait_saved("team-a").await;
    let b = run(1);
    wait_saved("team-b").await;
    eventually("six pods announced", || recording.all().len() >= 6).await;
    // The second start's clean-up of removed targets has run by now (it starts with the term).
    b.line_with(&["watching from resourceVersion"]);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        saved_versions(&cluster, "pods.team-a")
            .await
            .iter()
            .any(|&v| v >= rv),
        "the first sidecar's state survives the second's start"
    );
    drop((a, b)); // SIGKILL
    let before_len = recording.mark().await;

    let gone: Vec<String> = spaces.iter().map(|ns| uid_in(sim, ns, "p1")).collect();
    for ns in spaces {
        sim.delete("pods", Some(ns), "p1").unwrap();
    }
    let (a, b) = (run(0), run(1));
    eventually("two deletions announced", || {
        recording.all()[before_len..]
            .iter()
            .filter(|s| s.deleted())
            .count()
            >= 2
    })
    .await;
    // Late repeats, if any, show up meanwhile.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let after_len = recording.mark().await;
    let mut published = kinds(&recording.all()[before_len..after_len]);
    published.sort();
    let mut expected: Vec<(String, String)> = gone
        .iter()
        .map(|uid| ("DELETED".to_owned(), uid.clone()))
        .collect();
    expected.sort();
    assert_eq!(
        published,
        expected,
        "each sidecar announces exactly its own deletion\n--- a ---\n{}\n--- b ---\n{}",
        a.rest(),
        b.rest()
    );
}

/// Two clusters with `publish.cluster` set and the default bucket on one NATS: east never loads
/// west's checkpoint — it lists its own API server and announces its own pods — and west's state
/// is still there for west's restart, which announces exactly the deletion made while it was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_sharing_the_bucket_never_load_each_others_state() {
    use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
    let west = Cluster::start(Mode::Core, 10_000).await;
    let east = ApiServer::start(ApiServerOptions {
        history_limit: 10_000,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_ne!(west.sim.cluster_uid(), east.cluster_uid());
    for i in 0..3 {
        west.sim
            .create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
        east.create("pods", Some(NS), pod_named(&format!("e{i}"), 0));
    }
    let recording = Recording::start(&west.nats.url()).await;
    let west_config = west.config(PODS_WATCH, "[publish]\ncluster = \"west\"\n");
    let east_config = west_config
        .replace("cluster = \"west\"", "cluster = \"east\"")
        .replace(&west.sim.url(), &east.url())
        .replace(
            &west.sim.token_file().display().to_string(),
            &east.token_file().display().to_string(),
        );

    let daemon = Process::spawn(&west_config);
    converge(&west.sim, &recording).await;
    saved_at_least(&west, PODS_KEY.into(), west.sim.resource_version()).await;
    drop(daemon);
    let west_len = recording.mark().await;
    let west_seen = recording.all()[..west_len].to_vec();

    let daemon = Process::spawn(&east_config);
    let east_uids: Vec<String> = (0..3)
        .map(|i| uid_in(&east, NS, &format!("e{i}")))
        .collect();
    eventually("east announces its own pods", || {
        let all = recording.all();
        east_uids.iter().all(|uid| {
            all[west_len..]
                .iter()
                .any(|s| &s.uid == uid && s.kind == "ADDED")
        })
    })
    .await;
    recording.mark().await;
    drop(daemon);
    let east_len = recording.mark().await;
    let mut east_published = kinds(&recording.all()[west_len..east_len]);
    east_published.sort();
    let mut expected: Vec<(String, String)> = east_uids
        .iter()
        .map(|uid| ("ADDED".to_owned(), uid.clone()))
        .collect();
    expected.sort();
    assert_eq!(
        east_published, expected,
        "east announces its own pods once each, nothing of west's"
    );

    let w1 = uid_in(&west.sim, NS, "p1");
    west.sim.delete("pods", Some(NS), "p1").unwrap();
    let daemon = Process::spawn(&west_config);
    let after = converge_after(&west.sim, &recording, &west_seen, east_len).await;
    assert_eq!(
        kinds(&after),
        vec![("DELETED".to_owned(), w1)],
        "west resumes from its own state\n--- log ---\n{}",
        daemon.rest()
    );
}

/// The resume versions of every manifest of the target `{watch}.{namespace}`, whoever owns it
/// (whatever the key's owner prefix).
async fn saved_versions(cluster: &Cluster, target: &str) -> Vec<u64> {
    use futures_util::TryStreamExt;
    let nc = async_nats::connect(cluster.nats.url()).await.unwrap();
    let Ok(kv) = async_nats::jetstream::new(nc).get_key_value(BUCKET).await else {
        return Vec::new(); // not created yet
    };
    let keys: Vec<String> = kv.keys().await.unwrap().try_collect().await.unwrap();
    let mut versions = Vec::new();
    let suffix = format!("{target}.manifest");
    for key in keys.iter().filter(|k| k.ends_with(&suffix)) {
        if let Some(m) = cluster
            .manifest_at(&key[..key.len() - ".manifest".len()])
            .await
        {
            versions.push(m.resume_version.parse().unwrap());
        }
    }
    versions
}

/// Waits until some manifest of `target` covers `rv`.
async fn saved_at_least(cluster: &Cluster, target: String, rv: u64) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !saved_versions(cluster, &target)
        .await
        .iter()
        .any(|&v| v >= rv)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no checkpoint of {target} reached resourceVersion {rv}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Keys of the layout before owners (`{watch}.{namespace}.…`, no owner prefix) are neither loaded
/// nor removed: the first start under owners starts fresh, and the old keys stay for removal by
/// hand (docs/durable-state.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_the_layout_before_owners_are_neither_loaded_nor_removed() {
    use futures_util::TryStreamExt;
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    let rv: u64 = rv(&cluster.sim.create("pods", Some(NS), pod_named("p0", 0)))
        .parse()
        .unwrap();
    let js = async_nats::jetstream::new(async_nats::connect(cluster.nats.url()).await.unwrap());
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    // What the old layout held: this watch's target, and a namespace it no longer watches.
    let old = ["pods.default.manifest", "pods.other.manifest"];
    for key in old {
        kv.put(key, r#"{"format":1}"#.into()).await.unwrap();
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let daemon = Process::spawn(&cluster.config(PODS_WATCH, ""));
    daemon.line_with(&["started fresh: no saved state"]);
    eventually("p0 announced", || {
        recording
            .all()
            .iter()
            .any(|s| s.name == "p0" && s.kind == "ADDED")
    })
    .await;
    cluster.checkpoint_at_least(PODS_KEY, rv).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let keys: Vec<String> = kv.keys().await.unwrap().try_collect().await.unwrap();
    for key in old {
        assert!(keys.iter().any(|k| k == key), "{key} kept: {keys:?}");
    }
    assert!(
        keys.contains(&format!("{}.manifest", cluster.owned(PODS_KEY))),
        "{keys:?}"
    );
}

/// Runs a daemon with `config` (which must write no checkpoint) until pod p0 is published and
/// journaled, then kills it. Returns the bucket and the identity hash the journal records of
/// the pods target carry (bytes 13..21 of a record's header), which forged records must carry.
async fn journaled_identity(
    cluster: &Cluster,
    recording: &Recording,
    config: &str,
) -> (async_nats::jetstream::kv::Store, u64) {
    let daemon = Process::spawn(config);
    converge(&cluster.sim, recording).await;
    let kv = cluster.kv().await;
    let key = format!("{}.j.0", cluster.owned(PODS_KEY));
    let deadline = tokio::time::Instant::now() + WAIT;
    let record = loop {
        if let Some(record) = kv.get(&key).await.unwrap() {
            break record;
        }
        assert!(tokio::time::Instant::now() < deadline, "no journal record");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    drop(daemon);
    let identity = u64::from_le_bytes(record[13..21].try_into().unwrap());
    (kv, identity)
}

/// Writes journal records at positions `positions` of the pods target, `per_record` pods each
/// (names `forged-{position}-{i}`, distinct uids), as another writer of the bucket could.
async fn forge_journal(
    cluster: &Cluster,
    kv: &async_nats::jetstream::kv::Store,
    identity: u64,
    positions: std::ops::Range<u64>,
    per_record: u64,
) {
    use futures_util::StreamExt;
    use kube2nats::facade::{SavedObject, SavedUid, SavedVersion};
    let target = cluster.owned(PODS_KEY);
    let puts = futures_util::stream::iter(positions).map(|position| {
        let mut batch = kube2nats::facade::JournalBatch::default();
        for i in 0..per_record {
            let mut uid = [0u8; 16];
            uid[..8].copy_from_slice(&position.to_le_bytes());
            uid[8..].copy_from_slice(&i.to_le_bytes());
            batch.push(
                &SavedObject {
                    uid: SavedUid::Uuid(uid),
                    version: SavedVersion::Number(1),
                    name: &format!("forged-{position}-{i}"),
                    namespace: Some(NS),
                    unconfirmed: false,
                    deleted: false,
                    mark: 0,
                },
                false,
            );
        }
        let record = batch.record(position, identity);
        let key = format!("{target}.j.{position}");
        async move { kv.put(key, record).await.unwrap() }
    });
    puts.buffer_unordered(64).collect::<Vec<_>>().await;
}

/// A journal far larger than `state.max_load_bytes` (a runaway, or written by someone else) is
/// refused at start with one error line naming the target and the key, and the watch starts
/// fresh — lists and announces its pod again — instead of loading it all (an OOM-kill loop when
/// it does not fit the pod's memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_over_max_load_bytes_is_refused_and_the_watch_starts_fresh() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    cluster.sim.create("pods", Some(NS), pod_named("p0", 0));
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster
        .config(PODS_WATCH, "max_load_bytes = 1048576\n")
        .replace(
            "checkpoint_interval = \"150ms\"",
            "checkpoint_interval = \"1h\"",
        );
    let (kv, identity) = journaled_identity(&cluster, &recording, &config).await;
    // ~1 MiB encoded and 25,600 objects: about 2.3 MiB once loaded.
    forge_journal(&cluster, &kv, identity, 1..101, 256).await;

    let announced = recording.mark().await;
    cluster.sim.clear_requests();
    let daemon = Process::spawn(&config);
    let line = daemon.line_with(&["started fresh", "too large"]);
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains("state.max_load_bytes"),
        "names the key: {line}"
    );
    assert!(
        line.contains(&format!("key={}", cluster.owned(PODS_KEY))),
        "names the target: {line}"
    );
    daemon.line_with(&["synced"]);
    assert_eq!(cluster.lists(PODS_PATH), 1, "started fresh with a list");
    eventually("p0 announced again", || {
        recording.all()[announced..].iter().any(|s| s.name == "p0")
    })
    .await;
    assert!(
        !recording
            .all()
            .iter()
            .any(|s| s.name.starts_with("forged-")),
        "nothing of the refused journal is announced"
    );
}

/// Journal records are all loaded, in order, up to the first missing one, however many there
/// are (each record a quiet stream's single object). `K2N_LOAD_RECORDS` raises the count for a
/// measurement (docs/performance.md), which this prints: the load time and the daemon's peak RSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_journal_record_up_to_the_first_gap_is_loaded() {
    let records: u64 = std::env::var("K2N_LOAD_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    cluster.sim.create("pods", Some(NS), pod_named("p0", 0));
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster.config(PODS_WATCH, "").replace(
        "checkpoint_interval = \"150ms\"",
        "checkpoint_interval = \"1h\"",
    );
    let (kv, identity) = journaled_identity(&cluster, &recording, &config).await;
    forge_journal(&cluster, &kv, identity, 1..records + 1, 1).await;
    // After a gap: never read.
    forge_journal(&cluster, &kv, identity, records + 2..records + 3, 1).await;

    let daemon = Process::spawn(&config);
    let line = daemon.line_within(
        &["a journal of what was published before a crash"],
        std::time::Duration::from_secs(120),
    );
    assert!(
        line.contains(&format!("objects={}", records + 1))
            && line.contains(&format!("journal_records={}", records + 1)),
        "{line}"
    );
    let metrics = cluster.metrics().await;
    let seconds = metric(
        &metrics,
        "kube2nats_state_load_duration_seconds",
        &[("watch", "pods")],
    );
    eprintln!(
        "loaded {records} journal records in {seconds:?} s; peak RSS {} KiB",
        peak_rss_kib(daemon.pid())
    );
}

/// The `authorization` block of docs/durable-state.md, with passwords filled in.
fn documented_permissions() -> String {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/durable-state.md"),
    )
    .unwrap();
    let start = doc
        .find("  authorization {")
        .expect("the example is in the doc");
    let end = start
        + doc[start..]
            .find("  ```")
            .expect("the example's block ends");
    doc[start..end]
        .replace("$KUBE2NATS_PASSWORD", "\"k2n-pw\"")
        .replace("$READER_PASSWORD", "\"reader-pw\"")
}

/// kube2nats runs under the NATS permissions documented as the trust boundary: with them it
/// publishes (JetStream mode, mirror on), checkpoints, and a restart resumes from its saved
/// state; the read-only user reads the events but cannot write the state bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube2nats_runs_under_the_documented_nats_permissions() {
    use kube2nats_harness::nats::{NatsAuth, NatsOptions, NatsServer};
    let nats = NatsServer::start_with(NatsOptions {
        auth: NatsAuth::Block(documented_permissions()),
        ..Default::default()
    })
    .await
    .unwrap();
    let sim = kube2nats_harness::apiserver::ApiServer::start(Default::default())
        .await
        .unwrap();
    let cluster = Cluster {
        sim,
        nats,
        mode: Mode::JetStream,
        http_port: free_port(),
    };
    cluster.sim.create("pods", Some(NS), pod_named("p0", 0));
    let url = cluster.nats.url();
    let reader = || async {
        async_nats::ConnectOptions::with_user_and_password("reader".into(), "reader-pw".into())
            .connect(cluster.nats.url())
            .await
            .unwrap()
    };
    let recording = Recording::with_client(reader().await).await;
    let config = cluster
        .config(PODS_WATCH, "")
        .replace(
            &format!("url = \"{url}\"\n"),
            &format!("url = \"{url}\"\nuser = \"kube2nats\"\npassword = \"k2n-pw\"\n"),
        )
        .replace("[[watches]]", "[mirror]\nenabled = true\n[[watches]]");
    let daemon = Process::spawn(&config);
    converge(&cluster.sim, &recording).await;
    eventually_metric(&cluster, "kube2nats_state_checkpoints_total").await;
    eventually_metric(&cluster, "kube2nats_mirror_writes_total").await;
    drop(daemon);

    let daemon = Process::spawn(&config);
    daemon.line_with(&["loaded saved state"]);
    cluster.sim.create("pods", Some(NS), pod_named("p1", 0));
    converge(&cluster.sim, &recording).await;
    let metrics = cluster.metrics().await;
    assert_eq!(
        metric(&metrics, "kube2nats_state_degraded", &[("watch", "pods")]),
        Some(0.0)
    );
    let log = daemon.rest();
    assert!(!log.to_lowercase().contains("permission"), "{log}");

    let js = async_nats::jetstream::new(reader().await);
    let kv = js.get_key_value(BUCKET).await.unwrap();
    assert!(
        kv.put(format!("{}.manifest", cluster.owned(PODS_KEY)), "{}".into())
            .await
            .is_err(),
        "the reader cannot write the state bucket"
    );
}

/// Waits until the counter `name` (of the pods watch) is at least 1.
async fn eventually_metric(cluster: &Cluster, name: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let metrics = cluster.metrics().await;
        if metric_sum(&metrics, name, &[("watch", "pods")]) >= 1.0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {name}: {metrics}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Each checkpoint reports how much of `state.max_load_bytes` loading it takes
/// (`kube2nats_state_load_ratio`), and one past 80% warns, naming the target and the key, while
/// a start would still load it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_near_max_load_bytes_warns() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    cluster.sim.create("pods", Some(NS), pod_named("p0", 0));
    let daemon = Process::spawn(&cluster.config(PODS_WATCH, "max_load_bytes = 1048576\n"));
    let ratio = || async {
        metric(
            &cluster.metrics().await,
            "kube2nats_state_load_ratio",
            &[("watch", "pods")],
        )
    };
    cluster
        .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
        .await;
    let small = ratio()
        .await
        .expect("kube2nats_state_load_ratio is exported");
    assert!(small > 0.0 && small < 0.01, "one pod: {small}");
    // Pods until a checkpoint passes 80% (an object takes ~100 bytes of the estimate).
    let mut created = 1;
    while ratio().await.unwrap_or(0.0) < 0.8 {
        assert!(created < 20_000, "20,000 pods never came to 80% of 1 MiB");
        for _ in 0..1_000 {
            cluster
                .sim
                .create("pods", Some(NS), pod_named(&format!("p{created}"), 0));
            created += 1;
        }
        cluster
            .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
            .await;
    }
    let line = daemon.line_with(&["nears state.max_load_bytes"]);
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains(&cluster.owned(PODS_KEY)),
        "names the target: {line}"
    );
    let share = ratio().await.unwrap_or(0.0);
    assert!(
        share < 1.0,
        "{created} pods went past the limit at once: {share}"
    );
}

/// A journal record at a position another writer took (a deposed Lease holder writing late, a
/// second deployment with the same owner and target) is never overwritten, as a manifest never
/// is: the watch moves its journal past the foreign record and checkpoints, so its next start
/// loads its own objects and not the foreign ones — a pod deleted while it was down is announced,
/// and nothing of the foreign record is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_record_of_another_writer_is_never_overwritten_nor_loaded() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    cluster.sim.create("pods", Some(NS), pod_named("p0", 0));
    let recording = Recording::start(&cluster.nats.url()).await;
    let slow = cluster.config(PODS_WATCH, "").replace(
        "checkpoint_interval = \"150ms\"",
        "checkpoint_interval = \"1h\"",
    );
    let (kv, identity) = journaled_identity(&cluster, &recording, &slow).await;
    let config = cluster.config(PODS_WATCH, "");
    let daemon = Process::spawn(&config);
    daemon.line_with(&["watching from resourceVersion"]);
    cluster
        .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
        .await;
    // The journal is quiet (every confirmation written): its next position is free.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let target = cluster.owned(PODS_KEY);
    let mut next = cluster
        .manifest_at(&target)
        .await
        .map_or(0, |m| m.journal_next);
    while kv
        .get(format!("{target}.j.{next}"))
        .await
        .unwrap()
        .is_some()
    {
        next += 1;
    }
    forge_journal(&cluster, &kv, identity, next..next + 1, 1).await;
    let foreign = kv.get(format!("{target}.j.{next}")).await.unwrap();

    // p1 is the next object recorded: at the position the foreign record holds.
    let p1 = cluster.sim.create("pods", Some(NS), pod_named("p1", 0));
    eventually("p1 announced", || {
        recording.all().iter().any(|s| s.name == "p1")
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        kv.get(format!("{target}.j.{next}")).await.unwrap(),
        foreign,
        "the foreign journal record was overwritten"
    );
    let line = daemon.line_with(&["written by another kube2nats"]);
    assert!(line.contains(&format!("journal record {next}")), "{line}");
    let p1_rv: u64 = rv(&p1).parse().unwrap();
    cluster.checkpoint_at_least(PODS_KEY, p1_rv).await;
    drop(daemon); // SIGKILL

    let before = recording.mark().await;
    let p1_uid = uid_in(&cluster.sim, NS, "p1");
    cluster.sim.delete("pods", Some(NS), "p1").unwrap();
    let daemon = Process::spawn(&config);
    eventually("p1's deletion announced", || {
        recording.all()[before..]
            .iter()
            .any(|s| s.deleted() && s.uid == p1_uid)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let forged: Vec<String> = recording.all()[before..]
        .iter()
        .filter(|s| s.name.starts_with("forged-"))
        .map(|s| format!("{} {}", s.kind, s.name))
        .collect();
    assert!(
        forged.is_empty(),
        "the foreign record was loaded: {forged:?}\n{}",
        daemon.rest()
    );
}

/// `initial_state = "skip"` in a crash loop: a run killed before its first checkpoint leaves a
/// journal naming what it published, not the pods its first list tracked silently. The next
/// start lists as a first start does instead of resuming from the journal's position, so a
/// relist (here: that position compacted away, 410) never announces the skipped pods as ADDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_objects_stay_silent_after_a_crash_before_the_first_checkpoint() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    for i in 0..3 {
        cluster
            .sim
            .create("pods", Some(NS), pod_named(&format!("old{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster
        .config(&format!("{PODS_WATCH}initial_state = \"skip\"\n"), "")
        .replace(
            "checkpoint_interval = \"150ms\"",
            "checkpoint_interval = \"1h\"",
        );
    let daemon = Process::spawn(&config);
    daemon.line_with(&["watching from resourceVersion"]);
    cluster.sim.create("pods", Some(NS), pod_named("new", 0));
    eventually("new announced", || {
        recording.all().iter().any(|s| s.name == "new")
    })
    .await;
    // Its confirmation, with the watch's position, reaches the journal.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    drop(daemon); // SIGKILL, before any checkpoint
                  // The cluster moves on (elsewhere) and its history is compacted: the journal's position is
                  // gone, and a watch resumed from it gets 410.
    cluster
        .sim
        .create("pods", Some("elsewhere"), pod_named("x", 0));
    cluster.sim.compact();

    let before = recording.mark().await;
    let daemon = Process::spawn(&config);
    daemon.line_with(&["watching from resourceVersion"]);
    cluster.sim.create("pods", Some(NS), pod_named("later", 0));
    eventually("later announced", || {
        recording.all()[before..].iter().any(|s| s.name == "later")
    })
    .await;
    let after = recording.mark().await;
    let published: Vec<String> = recording.all()[before..after]
        .iter()
        .map(|s| format!("{} {}", s.kind, s.name))
        .collect();
    assert_eq!(published, ["ADDED later"], "{}", daemon.rest());
}
