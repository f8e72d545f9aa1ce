//! The mirror (docs/mirror.md) with the real binary, a real nats-server and the simulated API
//! server: a KV watch of the bucket is a complete informer (initial values, the end-of-initial-
//! values marker, then every change with the event's `Kube-*` headers), the bucket equals the API
//! server's state after churn and after `kill -9` with changes while kube2nats was down (both
//! event modes), and a writer with a stale view never overwrites a newer value.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::kv::{Operation, Store};
use common::*;
use futures_util::StreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use serde_json::Value;

const BUCKET: &str = "kube-objects";
const NS: &str = "shop";

fn config(sim: &ApiServer, nats: &NatsServer, dir: &std::path::Path, mode: &str) -> String {
    let token = token_file(dir, INITIAL_TOKEN);
    let stream = if mode == "jetstream" {
        "[nats.jetstream.stream]\n"
    } else {
        ""
    };
    format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"{mode}\"\n{stream}[state]\ncheckpoint_interval = \"200ms\"\n[mirror]\nenabled = true\ndelete_marker_ttl = \"30s\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"{NS}\"]\n",
        kube_section(sim, &token),
        nats.url()
    )
}

async fn bucket(nats: &NatsServer) -> Store {
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(store) = js.get_key_value(BUCKET).await {
            return store;
        }
        assert!(tokio::time::Instant::now() < deadline, "no mirror bucket");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn key(name: &str) -> String {
    format!("core.v1.pods.{NS}.{name}")
}

fn version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What the bucket holds: key → the resourceVersion of its value.
async fn contents(store: &Store) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut keys = store.keys().await.unwrap();
    while let Some(key) = keys.next().await {
        let key = key.unwrap();
        if let Some(value) = store.get(&key).await.unwrap() {
            let object: Value = serde_json::from_slice(&value).unwrap();
            out.insert(key, version(&object));
        }
    }
    out
}

/// What the API server holds: key → resourceVersion.
fn expected(sim: &ApiServer, names: &[String]) -> BTreeMap<String, String> {
    names
        .iter()
        .filter_map(|n| sim.get("pods", Some(NS), n).map(|o| (key(n), version(&o))))
        .collect()
}

/// Waits until the bucket equals the API server's state.
async fn converged(store: &Store, sim: &ApiServer, names: &[String], within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (have, want) = (contents(store).await, expected(sim, names));
        if have == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bucket does not equal the API server:\nbucket {have:?}\napi    {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates, updates and deletes pods; `round` keeps names apart between rounds.
fn churn(sim: &ApiServer, names: &mut Vec<String>, round: usize) {
    for i in 0..10 {
        let name = format!("r{round}-p{i}");
        sim.create("pods", Some(NS), pod(&name));
        names.push(name);
    }
    let live: Vec<String> = names
        .iter()
        .filter(|n| sim.get("pods", Some(NS), n).is_some())
        .cloned()
        .collect();
    for (i, name) in live.iter().enumerate() {
        match i % 3 {
            0 => {
                sim.update("pods", Some(NS), name, |o| {
                    o["metadata"]["labels"]["round"] = Value::from(round);
                });
            }
            1 => {
                sim.delete("pods", Some(NS), name);
            }
            _ => {}
        }
    }
}

async fn watch_is_an_informer(mode: &str) {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let first = sim.create("pods", Some(NS), pod("web-0"));
    sim.create("pods", Some(NS), pod("web-1"));
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = Process::spawn(&config(&sim, &nats, dir.path(), mode));
    daemon.line_with(&["mirror repaired"]);
    let store = bucket(&nats).await;

    let mut watch = store.watch_with_history(">").await.unwrap();
    let mut initial = BTreeMap::new();
    loop {
        let entry = tokio::time::timeout(WAIT, watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(entry.operation, Operation::Put);
        let object: Value = serde_json::from_slice(&entry.value).unwrap();
        assert!(
            object.get("type").is_none(),
            "the value is the object, not the event"
        );
        initial.insert(entry.key.clone(), version(&object));
        if entry.delta == 0 {
            break;
        }
    }
    assert_eq!(
        initial,
        BTreeMap::from([
            (key("web-0"), version(&first)),
            (
                key("web-1"),
                version(&sim.get("pods", Some(NS), "web-1").unwrap())
            ),
        ])
    );

    let updated = sim.update("pods", Some(NS), "web-0", |o| {
        o["metadata"]["labels"]["tier"] = "front".into();
    });
    let entry = tokio::time::timeout(WAIT, watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (entry.key.as_str(), entry.operation),
        (key("web-0").as_str(), Operation::Put)
    );
    let object: Value = serde_json::from_slice(&entry.value).unwrap();
    assert_eq!(version(&object), version(&updated));
    assert_eq!(object["metadata"]["labels"]["tier"], "front");
    // The value carries the event's headers.
    let stream = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap())
        .get_stream(format!("KV_{BUCKET}"))
        .await
        .unwrap();
    let raw = stream
        .get_last_raw_message_by_subject(&format!("$KV.{BUCKET}.{}", key("web-0")))
        .await
        .unwrap();
    let header = |name: &str| raw.headers.get(name).map(|v| v.as_str().to_owned());
    assert_eq!(header("Kube-Resource-Version"), Some(version(&updated)));
    assert_eq!(header("Kube-Name").as_deref(), Some("web-0"));
    assert_eq!(header("Kube-Namespace").as_deref(), Some(NS));
    assert_eq!(header("Kube-Kind").as_deref(), Some("Pod"));
    assert_eq!(header("Kube-Event-Type").as_deref(), Some("MODIFIED"));
    assert_eq!(header("Nats-Msg-Id"), None);

    let deleted = sim.delete("pods", Some(NS), "web-1").unwrap();
    let entry = tokio::time::timeout(WAIT, watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (entry.key.as_str(), entry.operation),
        (key("web-1").as_str(), Operation::Delete)
    );
    let raw = stream
        .get_last_raw_message_by_subject(&format!("$KV.{BUCKET}.{}", key("web-1")))
        .await
        .unwrap();
    let header = |name: &str| raw.headers.get(name).map(|v| v.as_str().to_owned());
    assert_eq!(
        header("Nats-TTL").as_deref(),
        Some("30s"),
        "delete markers expire"
    );
    assert_eq!(header("Kube-Resource-Version"), Some(version(&deleted)));

    let mut names: Vec<String> = vec!["web-0".into(), "web-1".into()];
    for round in 0..3 {
        churn(&sim, &mut names, round);
    }
    converged(&store, &sim, &names, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_watch_is_an_informer_in_core_mode() {
    watch_is_an_informer("core").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_watch_is_an_informer_in_jetstream_mode() {
    watch_is_an_informer("jetstream").await;
}

/// kill -9, changes while down (creates, updates, deletes), a restart: the start's list repairs
/// the bucket, which then equals the API server's state.
async fn kill_and_restart_converge(mode: &str) {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&sim, &nats, dir.path(), mode);
    let mut names = Vec::new();
    churn(&sim, &mut names, 0);
    let mut daemon = Process::spawn(&config);
    daemon.line_with(&["mirror repaired"]);
    let store = bucket(&nats).await;
    for round in 1..4 {
        churn(&sim, &mut names, round * 10);
        // Killed at once: some of the round's writes are most likely not made.
        daemon.kill();
        churn(&sim, &mut names, round * 10 + 1);
        daemon = Process::spawn(&config);
        converged(&store, &sim, &names, Duration::from_secs(30)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_changes_while_down_converges_in_core_mode() {
    kill_and_restart_converge("core").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_changes_while_down_converges_in_jetstream_mode() {
    kill_and_restart_converge("jetstream").await;
}

/// A restart of a mirrored watch from saved state lists (to repair the bucket) and says what
/// that list found against the saved objects, with the counts docs/durable-state.md shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirrored_restart_logs_the_diff_against_the_saved_objects() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&sim, &nats, dir.path(), "core");
    for name in ["kept", "changed", "gone"] {
        sim.create("pods", Some(NS), pod(name));
    }
    let mut daemon = Process::spawn_with(&config, &["--log-format", "json"]);
    daemon.line_with(&["mirror repaired"]);
    daemon.terminate();
    assert_eq!(daemon.wait_exit(WAIT).0, Some(0), "{}", daemon.rest());
    sim.update("pods", Some(NS), "changed", |o| {
        o["metadata"]["labels"]["v"] = "2".into()
    });
    sim.delete("pods", Some(NS), "gone");
    sim.create("pods", Some(NS), pod("new"));
    let daemon = Process::spawn_with(&config, &["--log-format", "json"]);
    daemon.line_with(&["loaded saved state"]);
    let line = daemon.line_with(&["relisted and diffed against the saved objects"]);
    let entry: Value = serde_json::from_str(&line).expect("a JSON log line");
    let counts: Vec<_> = ["saved_objects", "added", "modified", "deleted"]
        .iter()
        .map(|field| entry[*field].as_u64())
        .collect();
    assert_eq!(counts, [Some(3), Some(1), Some(1), Some(1)], "{line}");
}

/// A key written by another writer at a newer resourceVersion (a new leader, while this replica
/// still believes its own revision current) is not overwritten by an older one: the write is
/// refused by its expected revision, the key is read, and the older write is given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_writer_never_overwrites_a_newer_value() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some(NS), pod("web-0"));
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = config(&sim, &nats, dir.path(), "jetstream").replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    let daemon = Process::spawn(&config);
    daemon.line_with(&["mirror repaired"]);
    let store = bucket(&nats).await;

    // The newer value, from the writer that took over: far ahead of anything the API server
    // sends this replica next.
    let newer = sim.resource_version() + 1_000_000;
    let mut object = sim.get("pods", Some(NS), "web-0").unwrap();
    object["metadata"]["resourceVersion"] = Value::from(newer.to_string());
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Kube-Resource-Version", newer.to_string().as_str());
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    js.publish_with_headers(
        format!("$KV.{BUCKET}.{}", key("web-0")),
        headers,
        serde_json::to_vec(&object).unwrap().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();

    // This replica's next write of the key is older.
    let stale = sim.update("pods", Some(NS), "web-0", |o| {
        o["metadata"]["labels"]["tier"] = "front".into();
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let metrics = scrape_metrics(port).await;
        if metric_sum(
            &metrics,
            "kube2nats_mirror_writes_fenced_total",
            &[("watch", "pods")],
        ) >= 1.0
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stale write was not refused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held: Value =
        serde_json::from_slice(&store.get(key("web-0")).await.unwrap().unwrap()).unwrap();
    assert_eq!(
        version(&held),
        newer.to_string(),
        "the newer value stays, not {}",
        version(&stale)
    );
}

/// The mirror asked for and no JetStream on the server: one clear error naming the key, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_without_jetstream_exits_2() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start_with(kube2nats_harness::nats::NatsOptions {
        jetstream: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config =
        config(&sim, &nats, dir.path(), "core").replace("[state]\n", "[state]\nenabled = false\n");
    let mut daemon = Process::spawn(&config);
    let (code, _) = daemon.wait_exit(WAIT);
    assert_eq!(code, Some(2));
    let log = daemon.rest();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("mirror.enabled: the NATS server has no JetStream"))
        .collect();
    assert!(!errors.is_empty(), "no error naming mirror.enabled:\n{log}");
}

/// Two mirrored watches of the same objects (here `pods` in one namespace and `po`, kubectl's
/// short name, in all) would delete each other's keys at each repair: one clear error naming the
/// second watch's key, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mirrored_watches_of_the_same_objects_exit_2() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&sim, &nats, dir.path(), "core")
        + "[[watches]]\nname = \"configmaps\"\nresource = \"configmaps\"\n"
        + "[[watches]]\nname = \"every-pod\"\nresource = \"po\"\n";
    let mut daemon = Process::spawn(&config);
    let (code, _) = daemon.wait_exit(WAIT);
    assert_eq!(code, Some(2));
    let log = daemon.rest();
    assert!(
        log.lines().any(|l| l.contains(r#"watches[2].mirror: watch "every-pod" would mirror pods in namespace "shop" as watch "pods" does"#)),
        "no error naming watches[2].mirror:\n{log}"
    );
}

/// Two deployments (two clusters) mirroring the same namespace into one bucket without
/// `publish.cluster`: the second neither deletes the first's keys at its repair nor overwrites
/// a key the first wrote (here `web-0`, whose version in the second cluster is the higher), and
/// says why once; keys only it has are its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_deployment_never_deletes_or_overwrites_the_firsts_keys() {
    let nats = NatsServer::start().await.unwrap();
    let (sim_a, sim_b) = (
        ApiServer::start(ApiServerOptions::default()).await.unwrap(),
        ApiServer::start(ApiServerOptions::default()).await.unwrap(),
    );
    let web_0 = sim_a.create("pods", Some(NS), pod("web-0"));
    sim_a.create("pods", Some(NS), pod("web-a"));
    for i in 0..5 {
        sim_b.create("pods", Some("elsewhere"), pod(&format!("x{i}")));
    }
    sim_b.create("pods", Some(NS), pod("web-0"));
    sim_b.create("pods", Some(NS), pod("web-b"));
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let deployment = |sim: &ApiServer, dir: &std::path::Path, cluster: &str| {
        config(sim, &nats, dir, "core").replace(
            "[state]\n",
            &format!("[state]\ncluster_id = \"{cluster}\"\n"),
        )
    };
    let _a = Process::spawn(&deployment(&sim_a, dir_a.path(), "a"));
    let store = bucket(&nats).await;
    let names = ["web-0".to_owned(), "web-a".to_owned()];
    converged(&store, &sim_a, &names, WAIT).await;

    let b = Process::spawn_with(
        &deployment(&sim_b, dir_b.path(), "b"),
        &["--log-format", "json"],
    );
    b.http_url();
    b.line_with(&[
        "another kube2nats deployment writes this mirror key",
        r#""other_owner":"a."#,
    ]);
    b.line_with(&["mirror repaired"]);
    let have = contents(&store).await;
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        [&key("web-0"), &key("web-a"), &key("web-b")],
        "{have:?}"
    );
    let owner_of_web_0 = |value: bytes::Bytes| {
        let object: Value = serde_json::from_slice(&value).unwrap();
        object["metadata"]["uid"].clone()
    };
    let value = store.get(key("web-0")).await.unwrap().expect("web-0");
    assert_eq!(owner_of_web_0(value), web_0["metadata"]["uid"]);

    // A change the second sees later is not written over the first's key either.
    let foreign = |text: &str| {
        metric(
            text,
            "kube2nats_mirror_foreign_keys_total",
            &[("watch", "pods")],
        )
        .unwrap_or(0.0)
    };
    let before = foreign(&b.metrics().await);
    sim_b.update("pods", Some(NS), "web-0", |pod| {
        pod["metadata"]["labels"]["changed"] = Value::from("yes");
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    while foreign(&b.metrics().await) == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change never reached the writer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let value = store.get(key("web-0")).await.unwrap().expect("web-0");
    assert_eq!(owner_of_web_0(value), web_0["metadata"]["uid"]);
}

/// Two replicas sharing one Lease and one bucket: changes, kill -9 of the holder, changes while
/// the other takes over, changes after. The bucket ends equal to the API server's state, and no
/// key ever went back to an older version on the way (a KV watch saw every write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_between_replicas_keeps_the_mirror_in_step() {
    const ELECTION: &str = "[leader_election]\nenabled = true\nnamespace = \"default\"\nlease_duration = \"3s\"\nrenew_deadline = \"2s\"\nretry_period = \"500ms\"\n[mirror]";
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&sim, &nats, dir.path(), "jetstream").replace("[mirror]", ELECTION);
    let mut names = Vec::new();
    churn(&sim, &mut names, 0);
    let mut a = Process::spawn_env(&config, &[], &[("POD_NAME", "replica-a")]);
    a.line_with(&["mirror repaired"]);
    let b = Process::spawn_env(&config, &[], &[("POD_NAME", "replica-b")]);
    b.line_with(&["held by another replica", "replica-a"]);
    let store = bucket(&nats).await;
    let mut watch = store.watch_with_history(">").await.unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(Ok(entry)) = watch.next().await {
                let object: Option<Value> = serde_json::from_slice(&entry.value).ok();
                let version = object.as_ref().map(version);
                seen.lock()
                    .unwrap()
                    .push((entry.key, entry.operation, version));
            }
        })
    };

    churn(&sim, &mut names, 1);
    a.kill();
    churn(&sim, &mut names, 2);
    b.line_with(&["acquired the Lease"]);
    churn(&sim, &mut names, 3);
    converged(&store, &sim, &names, Duration::from_secs(30)).await;
    recorder.abort();

    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for (key, operation, version) in seen.lock().unwrap().iter() {
        if *operation != Operation::Put {
            continue;
        }
        let version: u64 = version.as_deref().unwrap_or_default().parse().unwrap();
        if let Some(previous) = last.insert(key.clone(), version) {
            assert!(
                version >= previous,
                "{key} went back from {previous} to {version}"
            );
        }
    }
    assert!(last.len() >= 10, "the watch saw the writes: {last:?}");
}

/// The randomized mirror fault run: a stream of random creates, updates and deletes over a pool
/// of names runs while kube2nats is killed (-9) at a random moment, stays down while the stream
/// goes on, and starts again; before some restarts the history is compacted (a relist), before
/// others nats-server restarts. After each restart the bucket must equal the API server's state.
/// Seeded: `KUBE2NATS_FAULT_SEED=N` replays a run.
async fn mirror_fault_run(mode: &str) {
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const POOL: usize = 30;
    const CYCLES: usize = 4;
    let seed: u64 = std::env::var("KUBE2NATS_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("mirror fault run ({mode}): seed {seed} (replay with KUBE2NATS_FAULT_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let sim = Arc::new(ApiServer::start(ApiServerOptions::default()).await.unwrap());
    let mut nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&sim, &nats, dir.path(), mode);
    let names: Vec<String> = (0..POOL).map(|i| format!("f{i}")).collect();
    let change = {
        let names = names.clone();
        move |sim: &ApiServer, rng: &mut rand::rngs::StdRng| {
            let name = &names[rng.random_range(0..names.len())];
            match sim.get("pods", Some(NS), name) {
                None => {
                    sim.create("pods", Some(NS), pod(name));
                }
                Some(_) if rng.random_bool(0.65) => {
                    let n: u32 = rng.random();
                    sim.update("pods", Some(NS), name, |o| {
                        o["metadata"]["labels"]["n"] = Value::from(n);
                    });
                }
                Some(_) => {
                    sim.delete("pods", Some(NS), name);
                }
            }
        }
    };
    for _ in 0..POOL {
        change(&sim, &mut rng);
    }
    let mut daemon = Process::spawn(&config);
    daemon.line_with(&["mirror repaired"]);
    let store = bucket(&nats).await;
    for cycle in 0..CYCLES {
        // A busy stream while the daemon runs, is killed, and is down.
        let stop = Arc::new(AtomicBool::new(false));
        let producer = {
            let (sim, stop, change) = (sim.clone(), stop.clone(), change.clone());
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (cycle as u64 + 1));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    change(&sim, &mut rng);
                    std::thread::sleep(Duration::from_millis(rng.random_range(0..4)));
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..600))).await;
        daemon.kill();
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..300))).await;
        stop.store(true, Ordering::Relaxed);
        producer.join().unwrap();
        let fault = match rng.random_range(0..3) {
            0 => {
                sim.compact();
                "compaction (relist)"
            }
            1 => {
                nats.stop().await;
                nats.restart().await.unwrap();
                "nats-server restart"
            }
            _ => "none",
        };
        daemon = Process::spawn(&config);
        converged(&store, &sim, &names, Duration::from_secs(30)).await;
        println!("cycle {cycle}: {fault}; converged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_kill_9_fault_run_leaves_the_bucket_equal_to_the_api_server_core() {
    mirror_fault_run("core").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_kill_9_fault_run_leaves_the_bucket_equal_to_the_api_server_jetstream() {
    mirror_fault_run("jetstream").await;
}

/// nats-server killed (-9) and started again under a running, busy mirror: the answers to the
/// writes in flight are lost with it. Each such write must count as failed once the bucket's
/// request timeout has passed and be written again; a writer that waited for those answers
/// forever would hold every later write of their keys. The bucket then equals the API server's
/// state, the changes made after the restart included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_in_flight_when_nats_dies_are_written_after_it_restarts() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const POOL: usize = 200;
    let sim = Arc::new(
        ApiServer::start(ApiServerOptions {
            history_limit: 1_000_000,
            ..Default::default()
        })
        .await
        .unwrap(),
    );
    let mut nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&sim, &nats, dir.path(), "core");
    let names: Vec<String> = (0..POOL).map(|i| format!("w{i}")).collect();
    for name in &names {
        sim.create("pods", Some(NS), pod(name));
    }
    let update = |sim: &ApiServer, name: &str, n: u64| {
        sim.update("pods", Some(NS), name, |o| {
            o["metadata"]["labels"]["n"] = Value::from(n);
        });
    };
    let daemon = Process::spawn(&config);
    daemon.line_with(&["mirror repaired"]);
    // Every pod updated over and over while nats-server is killed: writes are in flight.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (sim, stop, names) = (sim.clone(), stop.clone(), names.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                for name in &names {
                    update(&sim, name, n);
                }
                n += 1;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    nats.kill().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let rounds = producer.join().unwrap();
    nats.restart().await.unwrap();
    assert!(rounds > 1, "the pods were updated while nats-server died");
    for name in &names {
        update(&sim, name, rounds);
    }
    let store = bucket(&nats).await;
    converged(&store, &sim, &names, Duration::from_secs(45)).await;
    drop(daemon);
}

/// Delete markers do not pile up: objects created and deleted leave one marker per key, which
/// the server removes after `mirror.delete_marker_ttl`; the bucket then holds nothing. The number
/// of objects is `KUBE2NATS_MIRROR_CHURN` (default 2000); the bytes are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_markers_expire_and_the_bucket_stays_bounded() {
    let objects: usize = std::env::var("KUBE2NATS_MIRROR_CHURN")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let sim = ApiServer::start(ApiServerOptions {
        history_limit: 4 * objects + 100,
        ..Default::default()
    })
    .await
    .unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&sim, &nats, dir.path(), "jetstream")
        .replace("delete_marker_ttl = \"30s\"", "delete_marker_ttl = \"2s\"");
    let daemon = Process::spawn(&config);
    daemon.line_with(&["mirror repaired"]);
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let state = || {
        let js = js.clone();
        async move {
            let mut stream = js.get_stream(format!("KV_{BUCKET}")).await.unwrap();
            let info = stream.info().await.unwrap();
            (
                info.state.messages,
                info.state.bytes,
                info.state.last_sequence,
            )
        }
    };
    let started = tokio::time::Instant::now();
    for i in 0..objects {
        let name = format!("c{i}");
        sim.create("pods", Some(NS), pod(&name));
        sim.delete("pods", Some(NS), &name);
    }
    // Every create and delete is written (one put and one marker per object; markers expire
    // meanwhile)...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120 + objects as u64 / 200);
    let mut peak = (0, 0);
    loop {
        let (messages, bytes, written) = state().await;
        peak = peak.max((messages, bytes));
        if written as usize >= 2 * objects {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{written} of {} writes made",
            2 * objects
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and the markers expire.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (messages, bytes, _) = state().await;
        if messages == 0 {
            println!(
                "{objects} objects created and deleted in {:?}: the bucket held at most {} messages, {} bytes; {} messages, {bytes} bytes once the markers expired",
                started.elapsed(),
                peak.0,
                peak.1,
                messages
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{messages} messages ({bytes} bytes) still in the bucket"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
