//! Durable state: a restart, crash or rollout publishes exactly what changed while kube2nats was
//! down, deletions included, and nothing else.
//!
//! Each test runs the real binary (killed with SIGKILL, as an OOM kill or a node loss would), a
//! real nats-server with JetStream (the state lives there in both publishing modes) and the
//! simulated API server. Messages are counted with a plain core subscription, which sees every
//! publish: JetStream's duplicate window would hide repeats from a look at the stream.
//!
//! What "exactly" means after a kill -9: every change made while kube2nats was down is published
//! once; nothing the stored state confirmed (versions up to the position the checkpoint or the
//! journal confirmed) is published again; what was in flight may be published once more — in
//! JetStream mode with the same `Nats-Msg-Id`, so the stream drops it. Per object, each run
//! publishes versions in order. `tests/crash_repeats.rs` measures the repeats.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::restart::*;
use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;

const SEEDS: [u64; 3] = [1, 2, 3];

/// kill -9 during a busy stream, changes while down, history compacted: the relist diff against
/// the saved state publishes each change made while down once (deletes as synthesized DELETED)
/// and nothing the checkpoint covered — in core mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_relist_publishes_only_the_changes_made_while_down_core() {
    for seed in SEEDS {
        crash_and_restart(Mode::Core, seed, true).await;
    }
}

/// The same in JetStream mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_relist_publishes_only_the_changes_made_while_down_jetstream() {
    for seed in SEEDS {
        crash_and_restart(Mode::JetStream, seed, true).await;
    }
}

/// kill -9, changes while down, history still available: the watch resumes from the saved
/// version — no list request at all — and every change made while down arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_resume_from_the_saved_version_without_a_list_core() {
    for seed in SEEDS {
        crash_and_restart(Mode::Core, seed, false).await;
    }
}

/// The same in JetStream mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_resume_from_the_saved_version_without_a_list_jetstream() {
    for seed in SEEDS {
        crash_and_restart(Mode::JetStream, seed, false).await;
    }
}

/// nats-server restarts while checkpoints are being written: the writer retries, checkpoints
/// resume, and a later kill -9 with changes while down still publishes exactly those changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restart_while_checkpointing_then_kill_9_keeps_the_promise() {
    for seed in [11, 12] {
        let cycle = Cycle {
            compact: true,
            nats_outage: true,
        };
        crash_and_restart_cycles(Mode::JetStream, seed, &[cycle], 0).await;
    }
}

/// The uid of a pod the simulator holds now.
fn uid_of(sim: &ApiServer, name: &str) -> String {
    let pod = sim.get("pods", Some(NS), name).expect("the pod exists");
    pod["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// Objects first published after the last checkpoint — so absent from the saved snapshot — and
/// deleted while kube2nats is down, with the history compacted: the journal written before their
/// first message lets the relist announce each deletion exactly once, after a kill -9 at the
/// worst moment (no checkpoint since they were published). A deletion published before the kill
/// and announced again carries its own version, so JetStream drops the repeat; nothing the
/// checkpoint covered is published again.
async fn tail_objects_deleted_while_down(mode: Mode) {
    let cluster = Cluster::start(mode, 10_000).await;
    let sim = &cluster.sim;
    for i in 0..10 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let quick = cluster.config(PODS_WATCH, "");
    // No checkpoint is ever due: what the run publishes is known only to its journal.
    let never = without_checkpoints(&quick);
    run_until_checkpointed(&cluster, &recording, &quick, PODS_KEY).await;
    let saved = cluster.manifest(PODS_KEY).await.unwrap().resume_version;

    let daemon = Process::spawn(&never);
    daemon.line_with(&["watching from resourceVersion"]);
    let tail: Vec<String> = (0..5)
        .map(|i| {
            let pod = sim.create("pods", Some(NS), pod_named(&format!("p{}", 20 + i), 1));
            pod["metadata"]["uid"].as_str().unwrap().to_owned()
        })
        .collect();
    sim.update("pods", Some(NS), "p1", |o| {
        o["metadata"]["labels"]["x"] = "1".into()
    });
    let p2 = uid_of(sim, "p2");
    sim.delete("pods", Some(NS), "p2").unwrap();
    converge(sim, &recording).await;
    drop(daemon); // SIGKILL
    let before_len = recording.mark().await;
    let before = recording.all()[..before_len].to_vec();
    assert_eq!(
        cluster.manifest(PODS_KEY).await.unwrap().resume_version,
        saved,
        "no checkpoint since the tail was published"
    );

    for i in 0..4 {
        sim.delete("pods", Some(NS), &format!("p{}", 20 + i))
            .unwrap();
    }
    let p3 = uid_of(sim, "p3");
    sim.delete("pods", Some(NS), "p3").unwrap();
    sim.compact();
    sim.clear_requests();
    let daemon = Process::spawn(&quick);
    let after = converge_after(sim, &recording, &before, before_len).await;
    let log = daemon.rest();
    let deletions = |uid: &str| {
        after
            .iter()
            .filter(|s| s.uid == uid && s.deleted())
            .collect::<Vec<_>>()
    };
    let mut problems = Vec::new();
    for uid in tail[..4].iter().chain([&p3]) {
        let d = deletions(uid);
        if d.len() != 1 || !d[0].synthesized {
            problems.push(format!("deleted while down: {uid}: {d:?}"));
        }
    }
    // The repeats allowed: what was published after the checkpoint, at the same version.
    let published: HashSet<_> = before.iter().map(version_key).collect();
    let tail_uids: HashSet<&str> = tail.iter().map(String::as_str).collect();
    let p1 = uid_of(sim, "p1");
    for s in &after {
        let changed_while_down = s.deleted() && (tail_uids.contains(s.uid.as_str()) || s.uid == p3);
        let tail_repeat = published.contains(&version_key(s))
            && (tail_uids.contains(s.uid.as_str()) || s.uid == p1 || s.uid == p2);
        if !changed_while_down && !tail_repeat {
            problems.push(format!("published after the restart: {s:?}"));
        }
    }
    problems.extend(run_problems("after the restart", &after));
    if mode == Mode::JetStream {
        problems.extend(stored_more_than_once(&cluster.nats.url()).await);
    }
    assert!(
        problems.is_empty(),
        "mode {mode:?}: {}\n--- log ---\n{log}",
        problems.join("\n")
    );
    assert_eq!(cluster.lists(PODS_PATH), 1, "a relist was forced");
    assert!(
        log.contains("relisted and diffed against the saved objects"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_published_after_the_last_checkpoint_and_deleted_while_down_are_announced_core() {
    tail_objects_deleted_while_down(Mode::Core).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_published_after_the_last_checkpoint_and_deleted_while_down_are_announced_jetstream(
) {
    tail_objects_deleted_while_down(Mode::JetStream).await;
}

/// A crash before the first checkpoint: the journal alone says what the first run published, so
/// the restart announces the deletions made while down (once each) and re-announces each other
/// object at most once, at the version it was announced with (JetStream keeps one copy).
async fn crash_before_the_first_checkpoint(mode: Mode) {
    let (cluster, recording, daemon, never) = start_without_checkpoints(mode, 5).await;
    let sim = &cluster.sim;
    daemon.line_with(&["watching from resourceVersion"]);
    sim.create("pods", Some(NS), pod_named("p20", 1));
    converge(sim, &recording).await;
    drop(daemon);
    let before_len = recording.mark().await;
    let before = recording.all()[..before_len].to_vec();
    assert!(
        cluster.manifest(PODS_KEY).await.is_none(),
        "no checkpoint yet"
    );

    let gone = [uid_of(sim, "p1"), uid_of(sim, "p20")];
    sim.delete("pods", Some(NS), "p1").unwrap();
    sim.delete("pods", Some(NS), "p20").unwrap();
    sim.compact();
    let daemon = Process::spawn(&never);
    let after = converge_after(sim, &recording, &before, before_len).await;
    daemon.line_with(&["a journal of what was published before a crash"]);
    let log = daemon.rest();
    let published: HashSet<_> = before.iter().map(version_key).collect();
    let mut problems = run_problems("after the restart", &after);
    for uid in &gone {
        let n = after
            .iter()
            .filter(|s| &s.uid == uid && s.deleted())
            .count();
        if n != 1 {
            problems.push(format!("{uid} deleted while down, announced {n} times"));
        }
    }
    for s in after.iter().filter(|s| !s.deleted()) {
        if !published.contains(&version_key(s)) {
            problems.push(format!("not a re-announcement: {s:?}"));
        }
    }
    if mode == Mode::JetStream {
        problems.extend(stored_more_than_once(&cluster.nats.url()).await);
    }
    assert!(
        problems.is_empty(),
        "mode {mode:?}: {}\n--- log ---\n{log}",
        problems.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_first_checkpoint_still_announces_deletions_core() {
    crash_before_the_first_checkpoint(Mode::Core).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_first_checkpoint_still_announces_deletions_jetstream() {
    crash_before_the_first_checkpoint(Mode::JetStream).await;
}

/// `config` with no checkpoint due while a test runs.
fn without_checkpoints(config: &str) -> String {
    config.replace(
        "checkpoint_interval = \"150ms\"",
        "checkpoint_interval = \"1h\"",
    )
}

/// A cluster holding pods `p0`, `p1`, …, a recording of what is published, and a daemon that
/// writes no checkpoint while the test runs (what it published is in the journal alone); the
/// daemon's config is returned for restarts.
async fn start_without_checkpoints(
    mode: Mode,
    pods: usize,
) -> (Cluster, Recording, Process, String) {
    let cluster = Cluster::start(mode, 10_000).await;
    for i in 0..pods {
        cluster
            .sim
            .create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let never = without_checkpoints(&cluster.config(PODS_WATCH, ""));
    let daemon = Process::spawn(&never);
    (cluster, recording, daemon, never)
}

/// Starts a daemon on `cluster` with `config`, waits until every pod is published and a
/// checkpoint covers the current version, then kills it (-9).
async fn run_until_checkpointed(cluster: &Cluster, recording: &Recording, config: &str, key: &str) {
    let daemon = Process::spawn(config);
    converge(&cluster.sim, recording).await;
    cluster
        .checkpoint_at_least(key, cluster.sim.resource_version())
        .await;
    drop(daemon);
}

/// Damaged state — a manifest that is not JSON, then a chunk that does not match its manifest —
/// starts the watch afresh with one error line (every object announced again, as on a first
/// start), never a crash; the next checkpoint repairs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_state_starts_afresh_with_an_error_line() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    for i in 0..10 {
        cluster
            .sim
            .create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster.config(PODS_WATCH, "");
    run_until_checkpointed(&cluster, &recording, &config, PODS_KEY).await;
    let kv = cluster.kv().await;

    kv.put(
        format!("{}.manifest", cluster.owned(PODS_KEY)),
        "{not json".into(),
    )
    .await
    .unwrap();
    let published = recording.mark().await;
    let daemon = Process::spawn(&config);
    let line = daemon.line_with(&["started fresh", "cannot be used"]);
    assert!(line.contains("ERROR"), "an error line: {line}");
    eventually("every pod announced again", || {
        recording.all().len() >= published + 10
    })
    .await;
    cluster
        .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
        .await;
    cluster.sim.update("pods", Some(NS), "p1", |o| {
        o["metadata"]["labels"]["x"] = "1".into()
    });
    cluster
        .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
        .await;
    drop(daemon);

    let manifest = cluster.manifest(PODS_KEY).await.unwrap();
    let chunk = format!(
        "{}.{}.0",
        cluster.owned(PODS_KEY),
        serde_json::to_value(manifest.slot)
            .unwrap()
            .as_str()
            .unwrap()
    );
    let mut bytes = kv.get(&chunk).await.unwrap().unwrap().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x5a;
    kv.put(&chunk, bytes.into()).await.unwrap();
    cluster.sim.clear_requests();
    let daemon = Process::spawn(&config);
    let line = daemon.line_with(&["started fresh", "cannot be used"]);
    assert!(line.contains("ERROR"), "an error line: {line}");
    daemon.line_with(&["synced"]);
    assert_eq!(cluster.lists(PODS_PATH), 1, "started afresh with a list");
}

/// The state bucket deleted while kube2nats runs is created again by the next checkpoint (with a
/// warning), and a restart then resumes without a list; deleted while kube2nats is down, the
/// restart starts fresh (no saved state) and lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_recreated_or_means_a_fresh_start() {
    let cluster = Cluster::start(Mode::JetStream, 10_000).await;
    for i in 0..10 {
        cluster
            .sim
            .create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster.config(PODS_WATCH, "");
    let daemon = Process::spawn(&config);
    converge(&cluster.sim, &recording).await;
    cluster
        .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
        .await;
    let js = async_nats::jetstream::new(async_nats::connect(cluster.nats.url()).await.unwrap());
    js.delete_key_value(BUCKET).await.unwrap();
    cluster.sim.update("pods", Some(NS), "p2", |o| {
        o["metadata"]["labels"]["x"] = "1".into()
    });
    // Whichever writes first finds the bucket gone: the journal (confirming the change) or
    // the checkpoint.
    daemon.line_with(&["writing", "failed"]);
    cluster
        .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
        .await;
    drop(daemon);

    cluster.sim.clear_requests();
    let daemon = Process::spawn(&config);
    daemon.line_with(&["loaded saved state"]);
    daemon.line_with(&["watching from resourceVersion"]);
    assert_eq!(cluster.lists(PODS_PATH), 0, "resumed without a list");
    drop(daemon);

    js.delete_key_value(BUCKET).await.unwrap();
    cluster.sim.clear_requests();
    let daemon = Process::spawn(&config);
    daemon.line_with(&["created the state bucket"]);
    daemon.line_with(&["started fresh: no saved state"]);
    daemon.line_with(&["synced"]);
    assert_eq!(cluster.lists(PODS_PATH), 1);
}

/// Changing one watch's selector starts that watch afresh (with a log line saying why) while
/// the other resumes from its saved version without a list; the load is in the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_watch_starts_afresh_and_the_others_resume() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    for i in 0..5 {
        for ns in ["a", "b"] {
            cluster
                .sim
                .create("pods", Some(ns), pod_named(&format!("p{i}"), 0));
        }
    }
    let watches = |selector: &str| {
        format!(
            "[[watches]]\nname = \"in-a\"\nresource = \"pods\"\nnamespaces = [\"a\"]\nlabel_selector = \"{selector}\"\n\n[[watches]]\nname = \"in-b\"\nresource = \"pods\"\nnamespaces = [\"b\"]\n"
        )
    };
    let recording = Recording::start(&cluster.nats.url()).await;
    let daemon = Process::spawn(&cluster.config(&watches(""), ""));
    eventually("10 pods announced", || recording.all().len() >= 10).await;
    let rv = cluster.sim.resource_version();
    cluster.checkpoint_at_least("in-a.a", rv).await;
    cluster.checkpoint_at_least("in-b.b", rv).await;
    drop(daemon);

    cluster.sim.clear_requests();
    let daemon = Process::spawn(&cluster.config(&watches("gen=0"), ""));
    let line = daemon.line_with(&["started fresh", "changed since its state was saved"]);
    assert!(line.contains("in-a"), "the changed watch says so: {line}");
    daemon.line_with(&["in-b", "loaded saved state"]);
    eventually("both watches watching", || {
        cluster.watch_versions("/api/v1/namespaces/a/pods").len()
            + cluster.watch_versions("/api/v1/namespaces/b/pods").len()
            >= 2
    })
    .await;
    assert_eq!(cluster.lists("/api/v1/namespaces/a/pods"), 1);
    assert_eq!(cluster.lists("/api/v1/namespaces/b/pods"), 0);
    let metrics = cluster.metrics().await;
    let loaded = |w: &str| metric(&metrics, "kube2nats_state_objects_loaded", &[("watch", w)]);
    assert_eq!(loaded("in-b"), Some(5.0));
    assert_eq!(loaded("in-a"), Some(0.0));
    assert_eq!(metric(&metrics, "kube2nats_state_durable", &[]), Some(1.0));
    assert!(metric(
        &metrics,
        "kube2nats_state_load_duration_seconds",
        &[("watch", "in-b")]
    )
    .is_some());
    assert!(metric(
        &metrics,
        "kube2nats_state_checkpoint_age_seconds",
        &[("watch", "in-b")]
    )
    .is_some());
}

/// Without JetStream on the server, kube2nats keeps its state in memory, says so once and in
/// `kube2nats_state_durable`, and publishes as before (core mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_jetstream_state_is_memory_only_and_said_once() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start_with(kube2nats_harness::nats::NatsOptions {
        jetstream: false,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.create("pods", Some(NS), pod_named("p0", 0));
    let port = free_port();
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\n{PODS_WATCH}",
        kube_section(&sim, &sim.token_file()).replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"127.0.0.1:{port}\"")
        ),
        nats.url()
    );
    let recording = Recording::start(&nats.url()).await;
    let daemon = Process::spawn(&config);
    let line = daemon.line_with(&["no JetStream", "memory only"]);
    assert!(line.contains("WARN"), "{line}");
    eventually("the pod is published", || recording.all().len() == 1).await;
    let metrics = scrape_metrics(port).await;
    assert_eq!(metric(&metrics, "kube2nats_state_durable", &[]), Some(0.0));
    assert_eq!(
        daemon.rest().matches("no JetStream").count(),
        0,
        "said once"
    );
}

/// Saved state this configuration does not watch — a namespace dropped from a watch, or a watch
/// name it does not have (perhaps another kube2nats's with the same owner) — is kept while it is
/// younger than `state.forget_unwatched_after`, and forgotten by the first start after that, each
/// with a log line; the watched target's state is never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwatched_state_is_kept_while_young_and_forgotten_once_old() {
    use futures_util::TryStreamExt;
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    for ns in ["a", "b"] {
        cluster.sim.create("pods", Some(ns), pod_named("p0", 0));
    }
    let config = |namespaces: &str| {
        let watch = format!(
            "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [{namespaces}]\n"
        );
        cluster.config(&watch, "forget_unwatched_after = \"4s\"")
    };
    let recording = Recording::start(&cluster.nats.url()).await;
    let daemon = Process::spawn(&config("\"a\", \"b\""));
    eventually("both pods announced", || recording.all().len() >= 2).await;
    let rv = cluster.sim.resource_version();
    cluster.checkpoint_at_least("pods.a", rv).await;
    cluster.checkpoint_at_least("pods.b", rv).await;
    drop(daemon);
    let kv = cluster.kv().await;
    let others = cluster.owned("others.b.manifest");
    kv.put(&others, "{}".into()).await.unwrap();
    let (a, b) = (cluster.owned("pods.a.manifest"), cluster.owned("pods.b."));
    let keys = || async {
        let keys: Vec<String> = kv.keys().await.unwrap().try_collect().await.unwrap();
        let held = |prefix: &str| keys.iter().any(|k| k.starts_with(prefix));
        (held(&a), held(&b), held(&others))
    };

    let young = Process::spawn(&config("\"a\""));
    for target in ["others.b", "pods.b"] {
        young.line_with(&["kept the saved state of a target", target]);
    }
    assert_eq!(keys().await, (true, true, true), "young state is kept");
    drop(young);

    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let old = Process::spawn(&config("\"a\""));
    for target in ["others.b", "pods.b"] {
        old.line_with(&["forgot the saved state of a target", target]);
    }
    assert_eq!(
        keys().await,
        (true, false, false),
        "state unwritten for 4 s is forgotten, the watched target's is kept"
    );
}

/// While the journal cannot be written (the bucket refuses every write), a new object's first
/// message waits for its record — it is not published without it — but the changes of objects
/// already announced go on being published. Once the bucket takes writes again, the held message
/// follows, and every object's messages are published once, in order. (A checkpoint publishes
/// everything held first, so it waits for the journal: none is due in this run.)
async fn a_stuck_journal_holds_only_the_new_objects(mode: Mode) {
    let (cluster, recording, daemon, _) = start_without_checkpoints(mode, 3).await;
    let sim = &cluster.sim;
    converge(sim, &recording).await;

    let js = async_nats::jetstream::new(async_nats::connect(cluster.nats.url()).await.unwrap());
    let mut bucket = js.get_stream(format!("KV_{BUCKET}")).await.unwrap();
    let mut refusing = bucket.info().await.unwrap().config.clone();
    let limit = refusing.max_bytes;
    // The bucket discards new messages at its limit: every write is refused.
    refusing.max_bytes = 1;
    js.update_stream(&refusing).await.unwrap();
    let new = sim.create("pods", Some(NS), pod_named("p9", 1));
    let new_uid = new["metadata"]["uid"].as_str().unwrap().to_owned();
    daemon.line_with(&["writing the journal failed"]);
    let changed = sim.update("pods", Some(NS), "p1", |o| {
        o["metadata"]["labels"]["x"] = "1".into()
    });
    let (p1, p1_rv) = (uid_of(sim, "p1"), rv(&changed).parse::<u64>().unwrap());
    eventually(
        "the change of an announced object, published while the journal is stuck",
        || recording.all().iter().any(|s| s.uid == p1 && s.rv == p1_rv),
    )
    .await;
    assert!(
        !recording.all().iter().any(|s| s.uid == new_uid),
        "a new object was announced before its journal record was stored"
    );

    refusing.max_bytes = limit;
    js.update_stream(&refusing).await.unwrap();
    let seen = converge(sim, &recording).await;
    daemon.line_with(&["the journal is written again"]);
    let problems = run_problems("the run", &seen);
    assert!(
        problems.is_empty(),
        "mode {mode:?}: {}",
        problems.join("\n")
    );
    assert_eq!(
        seen.iter().filter(|s| s.uid == new_uid).count(),
        1,
        "the new object announced once: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_journal_holds_only_the_new_objects_core() {
    a_stuck_journal_holds_only_the_new_objects(Mode::Core).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_journal_holds_only_the_new_objects_jetstream() {
    a_stuck_journal_holds_only_the_new_objects(Mode::JetStream).await;
}

/// The state bucket fills up (a small `max_bytes`, set by whoever created it): the start says
/// the bucket is limited; once writes fail, delivery goes on without waiting for the journal,
/// and the metric, `/readyz`'s body (status still 200) and an error line say that the state is
/// not durable, and why. With room again, a checkpoint holding every object (those published
/// while writes failed included) makes it durable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_bucket_degrades_durability_not_delivery() {
    use async_nats::jetstream::{kv, stream::StorageType};
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    let sim = &cluster.sim;
    let js = async_nats::jetstream::new(async_nats::connect(cluster.nats.url()).await.unwrap());
    js.create_key_value(kv::Config {
        bucket: BUCKET.into(),
        history: 1,
        storage: StorageType::File,
        max_bytes: 4096,
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..3 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let daemon = Process::spawn(&cluster.config(PODS_WATCH, ""));
    let line = daemon.line_with(&["state bucket", "max_bytes"]);
    assert!(line.contains("max_bytes=4096"), "{line}");
    converge(sim, &recording).await;

    // Another writer takes what room is left: the bucket refuses every write from now on.
    let kv = cluster.kv().await;
    let mut filler = 0;
    while kv
        .put(
            format!("other-cluster._.filler.{filler}"),
            vec![0; 64].into(),
        )
        .await
        .is_ok()
    {
        filler += 1;
    }
    for i in 3..35 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    // Journal writes are given up after 10 s of failing (docs/durable-state.md), and the new
    // objects go out.
    converge(sim, &recording).await;
    let line = daemon.line_within(&["state not durable"], Duration::from_secs(30));
    assert!(line.contains("ERROR"), "{line}");
    let metrics = cluster.metrics().await;
    assert_eq!(
        metric(&metrics, "kube2nats_state_degraded", &[("watch", "pods")]),
        Some(1.0),
        "{metrics}"
    );
    let readyz = reqwest::get(format!("http://127.0.0.1:{}/readyz", cluster.http_port))
        .await
        .unwrap();
    assert_eq!(readyz.status(), 200, "delivery goes on: still ready");
    let body = readyz.text().await.unwrap();
    assert!(
        body.contains("state: not durable (watch pods:")
            && body.contains("the state bucket is full"),
        "{body}"
    );

    let mut config = js.get_stream(format!("KV_{BUCKET}")).await.unwrap();
    let mut roomy = config.info().await.unwrap().config.clone();
    roomy.max_bytes = -1;
    js.update_stream(&roomy).await.unwrap();
    daemon.line_with(&["state durable again"]);
    let metrics = cluster.metrics().await;
    assert_eq!(
        metric(&metrics, "kube2nats_state_degraded", &[("watch", "pods")]),
        Some(0.0),
        "{metrics}"
    );
    let manifest = cluster.manifest(PODS_KEY).await.unwrap();
    assert_eq!(manifest.objects, 35, "the checkpoint holds every object");
    let seen = converge(sim, &recording).await;
    let problems = run_problems("the run", &seen);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A kill -9 while degraded (the bucket full) costs what docs/durable-state.md says and no more:
/// the restart resumes from the last checkpoint stored before the bucket filled up, so the pods
/// first announced while degraded are announced once more (ADDED), the others not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_while_degraded_announces_again_only_what_the_state_missed() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    let sim = &cluster.sim;
    for i in 0..3 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster.config(PODS_WATCH, "");
    let daemon = Process::spawn(&config);
    converge(sim, &recording).await;
    cluster
        .checkpoint_at_least(PODS_KEY, sim.resource_version())
        .await;
    let js = async_nats::jetstream::new(async_nats::connect(cluster.nats.url()).await.unwrap());
    let mut stream = js.get_stream(format!("KV_{BUCKET}")).await.unwrap();
    let mut full = stream.info().await.unwrap().config.clone();
    // At its limit (discard new) the bucket refuses every write.
    full.max_bytes = 1;
    js.update_stream(&full).await.unwrap();
    for i in 3..8 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    converge(sim, &recording).await;
    daemon.line_within(&["state not durable"], Duration::from_secs(30));
    drop(daemon); // SIGKILL
    let before = recording.mark().await;
    full.max_bytes = -1;
    js.update_stream(&full).await.unwrap();

    let daemon = Process::spawn(&config);
    daemon.line_with(&["loaded saved state"]);
    eventually("the pods the saved state missed, announced again", || {
        recording.all().len() >= before + 5
    })
    .await;
    tokio::time::sleep(QUIET).await;
    let after = recording.all()[before..].to_vec();
    let mut names: Vec<&str> = after.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["p3", "p4", "p5", "p6", "p7"],
        "only the pods announced while degraded, once each: {after:?}"
    );
    assert!(after.iter().all(|s| s.kind == "ADDED"), "{after:?}");
}
