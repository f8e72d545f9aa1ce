//! JetStream mode through a NATS outage, with the real kube2nats binary so its memory can be
//! measured on its own.

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

/// Stopped and restarted nats-server mid-stream: the stream ends up holding every change exactly
/// once, in per-object order, with each object's last message at its final version; and the
/// daemon's memory does not grow with what happened during the outage (backpressure).
#[tokio::test]
async fn nats_outage_in_jetstream_mode_loses_nothing_and_repeats_nothing() {
    const OBJECTS: usize = 20;
    const OUTAGE_UPDATES: usize = 2500;
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
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"jetstream\"\nqueue_capacity = 64\n[nats.jetstream]\nack_timeout = \"1s\"\nmax_ack_inflight = 32\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        kube_section(&sim, &token).replace("listen = \"127.0.0.1:0\"", &format!("listen = \"127.0.0.1:{}\"", free_port())),
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
    let mut peak = baseline;
    for i in 0..OUTAGE_UPDATES {
        let name = format!("p{:02}", i % OBJECTS);
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
    nats.restart().await.unwrap();

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
    let daemon = kube2nats::app::start(config_from(&config)).await.unwrap();
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
