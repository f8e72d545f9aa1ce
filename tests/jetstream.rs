//! NATS outages with traffic, with the real kube2nats binary so its memory can be measured on its
//! own: in JetStream mode (nothing lost, nothing stored twice, nothing published twice beyond what
//! the restart explains) and in core mode (backpressure: kube2nats stops reading the API server
//! instead of holding what it cannot publish).

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use serde_json::json;

/// Objects large enough that buffering the outage's changes would show in the RSS (~4 KiB each,
/// like a real pod with its status).
fn big_pod(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "annotations": {"filler": "x".repeat(4000)}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    })
}

/// Changes made while NATS is down.
const OUTAGE_UPDATES: usize = 2500;
/// Undelivered changes the simulated watch cache holds per watch before it terminates a watcher
/// that does not read, as kube-apiserver does.
const WATCH_BACKLOG: usize = 200;

/// Stopped and restarted nats-server mid-stream: the stream ends up holding every change exactly
/// once, in per-object order, with each object's last message at its final version; a plain core
/// subscription sees no repeat that the restart does not explain; the daemon's memory does not
/// grow with what happened during the outage (backpressure); and the API server, whose buffer for
/// the watch kube2nats stopped reading overflows, terminates the watch, which kube2nats resumes
/// from its last version without a relist.
#[tokio::test]
async fn nats_outage_in_jetstream_mode_loses_nothing_and_repeats_nothing() {
    const OBJECTS: usize = 20;
    let sim = ApiServer::start(ApiServerOptions {
        history_limit: 20_000,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.limit_watch_backlog(Some(WATCH_BACKLOG));
    for i in 0..OBJECTS {
        sim.create("pods", Some("default"), big_pod(&format!("p{i:02}")));
    }
    let mut nats = NatsServer::start().await.unwrap();
    let mut tap = CoreTap::start(&nats.url(), "kube.>").await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let port = free_port();
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"jetstream\"\nqueue_capacity = 64\n[nats.jetstream]\nack_timeout = \"1s\"\nmax_ack_inflight = 32\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        kube_section(&sim, &token).replace("listen = \"127.0.0.1:0\"", &format!("listen = \"127.0.0.1:{port}\"")),
        nats.url()
    );
    let daemon = Process::spawn(&config);
    let pid = daemon.pid();

    let nc = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc);
    let stored = |js: async_nats::jetstream::Context| async move {
        match js.get_stream("KUBE").await {
            Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
            Err(_) => 0,
        }
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while stored(js.clone()).await < OBJECTS as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "initial list not stored"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let baseline = rss_kib(pid);

    nats.stop().await;
    tap.server_stopped().await;
    let peak = change_during_outage(&sim, OBJECTS, pid).await.max(baseline);
    eventually("the API server terminates the watch nobody reads", || {
        sim.terminated_watches() >= 1
    })
    .await;
    nats.restart().await.unwrap();
    tap.server_restarted("kube.>").await;

    let expected = (OBJECTS + OUTAGE_UPDATES + 2) as u64;
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let n = stored(js.clone()).await;
        if n >= expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stream holds {n} of {expected} messages"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stream = js.get_stream("KUBE").await.unwrap();
    let total = stored(js.clone()).await;
    assert_eq!(total, expected, "every change exactly once");

    let mut keys = HashSet::new();
    let mut last: HashMap<String, (u64, String)> = HashMap::new();
    for seq in 1..=total {
        let m = stream.get_raw_message(seq).await.unwrap();
        let h = |k: &str| {
            m.headers
                .get(k)
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        };
        let (uid, rv, t) = (
            h("Kube-Uid"),
            h("Kube-Resource-Version"),
            h("Kube-Event-Type"),
        );
        assert!(
            keys.insert((uid.clone(), rv.clone(), t.clone())),
            "stored twice: {uid} {rv} {t}"
        );
        let rv: u64 = rv.parse().unwrap();
        if let Some((prev, _)) = last.get(&uid) {
            assert!(
                rv > *prev,
                "per-object order broken for {uid}: {rv} after {prev}"
            );
        }
        last.insert(uid, (rv, t));
    }
    for i in 1..OBJECTS {
        let obj = sim
            .get("pods", Some("default"), &format!("p{i:02}"))
            .unwrap();
        let uid = obj["metadata"]["uid"].as_str().unwrap();
        assert_eq!(
            last[uid].0,
            rv(&obj).parse::<u64>().unwrap(),
            "last message of p{i:02} is its final version"
        );
    }
    assert_eq!(last.values().filter(|(_, t)| t == "DELETED").count(), 1);

    let growth_kib = peak.saturating_sub(baseline);
    let outage_kib = (OUTAGE_UPDATES * 4200 / 1024) as u64;
    println!("RSS baseline {baseline} KiB, peak during outage {peak} KiB, growth {growth_kib} KiB, changes during outage ~{outage_kib} KiB");
    assert!(
        growth_kib < outage_kib / 2,
        "memory grew with the outage: {growth_kib} KiB for ~{outage_kib} KiB of changes"
    );

    let (own, explained) = tap.repeats();
    println!(
        "{} publishes on the core subscription, {explained} repeated around the restart",
        tap.count()
    );
    assert!(own.is_empty(), "{}", own.join("\n"));
    let metrics = scrape(port).await;
    let w = ("watch", "pods");
    assert!(
        metric(
            &metrics,
            "kube2nats_watch_restarts_total",
            &[w, ("reason", "stream_ended")]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "the terminated watch ended cleanly and was resumed"
    );
    assert_eq!(
        metric_sum(&metrics, "kube2nats_relists_total", &[w]),
        1.0,
        "resumed from its last version: no relist after the initial list"
    );
}

/// The outage's changes: `OUTAGE_UPDATES` updates over the `objects` pods, then `p00` deleted and
/// `late` created. Returns the peak RSS of `pid` meanwhile.
async fn change_during_outage(sim: &ApiServer, objects: usize, pid: u32) -> u64 {
    let mut peak = 0;
    for i in 0..OUTAGE_UPDATES {
        let name = format!("p{:02}", i % objects);
        sim.update("pods", Some("default"), &name, |o| {
            o["metadata"]["labels"]["n"] = i.to_string().into()
        });
        if i % 100 == 0 {
            peak = peak.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    sim.delete("pods", Some("default"), "p00");
    sim.create("pods", Some("default"), big_pod("late"));
    for _ in 0..20 {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peak
}

async fn scrape(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .expect("kube2nats /metrics")
        .text()
        .await
        .unwrap_or_default()
}

/// Core mode through a NATS outage with traffic: once `queue_capacity` messages wait in the
/// client, kube2nats stops reading the API server (backpressure) and its memory does not grow
/// with the changes; it stays alive, and when NATS is back every object's final state arrives,
/// nothing twice and in per-object order.
#[tokio::test]
async fn nats_outage_in_core_mode_applies_backpressure_and_bounds_memory() {
    const OBJECTS: usize = 20;
    let sim = ApiServer::start(ApiServerOptions {
        history_limit: 20_000,
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..OBJECTS {
        sim.create("pods", Some("default"), big_pod(&format!("p{i:02}")));
    }
    let mut nats = NatsServer::start().await.unwrap();
    let mut tap = CoreTap::start(&nats.url(), "kube.>").await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let port = free_port();
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\nqueue_capacity = 64\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        kube_section(&sim, &token).replace("listen = \"127.0.0.1:0\"", &format!("listen = \"127.0.0.1:{port}\"")),
        nats.url()
    );
    let mut daemon = Process::spawn(&config);
    let pid = daemon.pid();
    eventually("the initial list published", || tap.count() >= OBJECTS).await;
    let received = |text: &str| {
        metric_sum(
            text,
            "kube2nats_events_received_total",
            &[("watch", "pods")],
        )
    };
    let received_before = received(&scrape(port).await);
    let baseline = rss_kib(pid);

    nats.stop().await;
    tap.server_stopped().await;
    let peak = change_during_outage(&sim, OBJECTS, pid).await.max(baseline);
    let read_during_outage = received(&scrape(port).await) - received_before;
    assert!(daemon.is_running(), "kube2nats died during the outage");
    let growth_kib = peak.saturating_sub(baseline);
    let outage_kib = (OUTAGE_UPDATES * 4200 / 1024) as u64;
    println!("core mode: {read_during_outage} of {OUTAGE_UPDATES} changes read during the outage; RSS baseline {baseline} KiB, peak {peak} KiB, growth {growth_kib} KiB for ~{outage_kib} KiB of changes");
    assert!(
        read_during_outage < (OUTAGE_UPDATES / 4) as f64,
        "backpressure: {read_during_outage} of {OUTAGE_UPDATES} changes read while NATS was down"
    );
    assert!(
        growth_kib < outage_kib / 2,
        "memory grew with the outage: {growth_kib} KiB for ~{outage_kib} KiB of changes"
    );

    nats.restart().await.unwrap();
    tap.server_restarted("kube.>").await;
    let final_rvs: HashMap<String, String> = (1..OBJECTS)
        .map(|i| format!("p{i:02}"))
        .chain(["late".to_owned()])
        .map(|name| {
            let obj = sim.get("pods", Some("default"), &name).unwrap();
            (
                obj["metadata"]["uid"].as_str().unwrap().to_owned(),
                rv(&obj),
            )
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let arrived = tap.last_by_uid();
        let missing = final_rvs
            .iter()
            .filter(|(uid, rv)| arrived.get(*uid).map(|(r, _)| r) != Some(*rv))
            .count();
        if missing == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{missing} objects' final versions never arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(QUIET).await;
    let keys = tap.keys();
    let mut seen = HashSet::new();
    let mut last: HashMap<&str, u64> = HashMap::new();
    for (uid, rv, t) in &keys {
        assert!(
            seen.insert((uid, rv, t)),
            "core mode never publishes twice: {uid} {rv} {t}"
        );
        let rv: u64 = rv.parse().unwrap();
        if let Some(prev) = last.insert(uid, rv) {
            assert!(rv > prev, "order broken for {uid}: {rv} after {prev}");
        }
    }
    let arrived = tap.last_by_uid();
    for (uid, rv) in &final_rvs {
        assert_eq!(
            &arrived[uid].0, rv,
            "{uid}: last message at the final version"
        );
    }
    assert_eq!(
        arrived.values().filter(|(_, t)| t == "DELETED").count(),
        1,
        "p00's deletion arrived last for it"
    );
}

/// The stream kube2nats creates when the config names none of its limits is bounded as
/// config.example.toml documents: a week, 1 GiB, 1000 messages per subject, one replica, the
/// oldest discarded when full, a two-minute duplicate window.
#[tokio::test]
async fn managed_stream_is_created_with_bounded_defaults() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), json!({"metadata": {"name": "a"}}));
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = jetstream_pods_config(&sim, &nats, dir.path());
    let daemon = kube2nats::facade::start(config_from(&config))
        .await
        .unwrap();
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut stream = loop {
        if let Ok(stream) = js.get_stream("KUBE").await {
            break stream;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stream KUBE not created"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let info = stream.info().await.unwrap();
    let config = &info.config;
    assert_eq!(config.subjects, ["kube.>"]);
    assert_eq!(config.max_age, Duration::from_secs(7 * 24 * 3600));
    assert_eq!(config.max_bytes, 1 << 30);
    assert_eq!(config.max_messages_per_subject, 1000);
    assert_eq!(config.num_replicas, 1);
    assert_eq!(
        config.discard,
        async_nats::jetstream::stream::DiscardPolicy::Old
    );
    assert_eq!(config.duplicate_window, Duration::from_secs(120));
    assert_eq!(
        config.storage,
        async_nats::jetstream::stream::StorageType::File
    );
    daemon.shutdown();
    daemon.wait().await.unwrap();
}
