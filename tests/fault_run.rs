//! The randomized fault run: the delivery promise under everything at once.
//!
//! Three watches (pods in two namespaces, deployments, a custom resource) in JetStream mode, while a
//! driver makes thousands of creates, updates and deletes and injects, at random: dropped watch
//! connections (also mid-line), history compaction (410), 429/500/503 bursts, garbage and truncated
//! lines, token rotation, and nats-server stopped and restarted. At the end the stream must hold,
//! for every object, its final state as the last message; no (uid, resourceVersion, type) twice;
//! per object, versions that only increase. The daemon's memory stays under a stated bound
//! throughout.
//!
//! Seeded: the seed is printed, and `KUBE2NATS_FAULT_SEED=N` replays a run.
//! `KUBE2NATS_FAULT_OPS` sets its size (default 3000 operations).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Failure, RequestFilter};
use kube2nats_harness::nats::NatsServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// The bound on the daemon's resident memory during the run (a debug build, whose baseline is
/// about 25 MiB).
const RSS_BOUND_KIB: u64 = 128 * 1024;
/// One operation in this many is a fault; the rest are creates, updates and deletes.
const FAULT_ONE_IN: u32 = 40;
/// The driver pauses up to this long after each operation (~6 ms on average), so that between
/// faults most changes travel the watch path rather than being folded into a relist.
const PACE_MAX_MICROS: u64 = 12_000;
/// nats-server outages per run: each costs up to 1.5 s.
const MAX_NATS_OUTAGES: usize = 3;
/// Names per collection: small, so objects are updated and deleted often and names get reused
/// by new objects (new uids).
const NAMES: usize = 25;

/// One watched collection: a simulator resource in a namespace (or all).
#[derive(Clone, Copy)]
struct Collection {
    resource: &'static str,
    namespace: &'static str,
}

const COLLECTIONS: [Collection; 4] = [
    Collection {
        resource: "pods",
        namespace: "ns-a",
    },
    Collection {
        resource: "pods",
        namespace: "ns-b",
    },
    Collection {
        resource: "deployments",
        namespace: "ns-a",
    },
    Collection {
        resource: "widgets",
        namespace: "ns-b",
    },
];

const WATCHES: &str = r#"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["ns-a", "ns-b"]

[[watches]]
name = "deployments"
resource = "deployments.apps"

[[watches]]
name = "widgets"
resource = "widgets.example.com"
"#;

fn object(c: Collection, name: &str, generation: u64) -> serde_json::Value {
    match c.resource {
        "pods" => {
            json!({"metadata": {"name": name, "labels": {"gen": generation.to_string()}}, "spec": {"containers": [{"name": "main", "image": "nginx"}]}})
        }
        "deployments" => json!({"metadata": {"name": name}, "spec": {"replicas": generation % 5}}),
        _ => json!({"metadata": {"name": name}, "spec": {"size": generation}}),
    }
}

/// What the stream says about one uid.
#[derive(Debug, Default)]
struct History {
    last_rv: u64,
    last_type: String,
    count: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_fault_run_keeps_the_delivery_promise() {
    let seed: u64 = std::env::var("KUBE2NATS_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let ops: usize = std::env::var("KUBE2NATS_FAULT_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    println!("fault run: seed {seed}, {ops} operations (replay with KUBE2NATS_FAULT_SEED={seed} KUBE2NATS_FAULT_OPS={ops})");
    let mut rng = StdRng::seed_from_u64(seed);

    let sim = ApiServer::start(ApiServerOptions {
        history_limit: 400,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut nats = NatsServer::start().await.unwrap();
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"jetstream\"\n[nats.jetstream]\nack_timeout = \"1s\"\nmax_ack_inflight = 64\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n{WATCHES}",
        kube_section(&sim, &sim.token_file()).replace("watch_timeout = \"30s\"", "watch_timeout = \"3s\"\ntoken_reload_interval = \"1s\""),
        nats.url()
    );
    let daemon = Process::spawn(&config);
    let pid = daemon.pid();
    let peak_rss = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak_rss.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // Every uid ever created, by collection and name, and the generation counter.
    let mut uids: Vec<(Collection, String, String)> = Vec::new();
    let mut token_serial = 0;
    let mut nats_outages = 0;
    let mut faults: HashMap<&str, usize> = HashMap::new();
    for op in 0..ops {
        let c = COLLECTIONS[rng.random_range(0..COLLECTIONS.len())];
        let name = format!("o{}", rng.random_range(0..NAMES));
        let ns = Some(c.namespace);
        if !rng.random_ratio(1, FAULT_ONE_IN) {
            match sim.get(c.resource, ns, &name) {
                None => {
                    let created = sim.create(c.resource, ns, object(c, &name, op as u64));
                    uids.push((
                        c,
                        name,
                        created["metadata"]["uid"].as_str().unwrap().to_owned(),
                    ));
                }
                Some(_) if rng.random_ratio(3, 4) => {
                    sim.update(c.resource, ns, &name, |o| {
                        o["metadata"]["labels"]["op"] = op.to_string().into()
                    });
                }
                Some(_) => {
                    sim.delete(c.resource, ns, &name);
                }
            }
        } else {
            let fault = match rng.random_range(0..9) {
                0 => {
                    sim.drop_watches();
                    "drop"
                }
                1 => {
                    sim.drop_watches_mid_line();
                    "drop mid-line"
                }
                2 => {
                    sim.compact();
                    "compact (410)"
                }
                3 | 4 => {
                    let failure = match rng.random_range(0..3) {
                        0 => Failure::TooManyRequests {
                            retry_after_secs: rng.random_range(0..2),
                        },
                        1 => Failure::Internal,
                        _ => Failure::Unavailable {
                            retry_after_secs: rng.random_range(0..2),
                        },
                    };
                    let filter = [
                        RequestFilter::Any,
                        RequestFilter::List,
                        RequestFilter::Watch,
                    ][rng.random_range(0..3)];
                    sim.fail_next_matching(rng.random_range(1..6), filter, failure);
                    "error burst"
                }
                5 => {
                    sim.inject_garbage_line();
                    "garbage line"
                }
                6 => {
                    sim.truncate_watches();
                    "truncated line"
                }
                7 => {
                    token_serial += 1;
                    sim.set_valid_tokens(&[&format!("rotated-{token_serial}")]);
                    "token rotation"
                }
                _ if nats_outages < MAX_NATS_OUTAGES => {
                    nats_outages += 1;
                    nats.stop().await;
                    tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
                    nats.restart().await.expect("nats-server restarts");
                    "nats restart"
                }
                _ => "none (nats outages used up)",
            };
            *faults.entry(fault).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..PACE_MAX_MICROS))).await;
    }
    println!("faults injected: {faults:?}");

    // Converge: the stream must come to hold every object's final state.
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let (histories, problems) = loop {
        let (histories, problems) = check(&js, &sim, &uids).await;
        if problems.is_empty() || tokio::time::Instant::now() > deadline {
            break (histories, problems);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak_rss.load(Ordering::Relaxed);
    let messages: usize = histories.values().map(|h| h.count).sum();
    println!(
        "{} objects, {messages} messages in the stream, peak RSS {peak} KiB",
        uids.len()
    );
    if !problems.is_empty() {
        let log = daemon.rest();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "seed {seed}: {} problem(s):\n{}\n--- last log lines ---\n{}",
            problems.len(),
            problems.join("\n"),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    assert!(
        peak < RSS_BOUND_KIB,
        "seed {seed}: peak RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB"
    );
}

/// Reads the whole stream and checks it against the simulator's final state. Returns the per-uid
/// histories and every problem found (empty when the promise holds).
async fn check(
    js: &async_nats::jetstream::Context,
    sim: &ApiServer,
    uids: &[(Collection, String, String)],
) -> (HashMap<String, History>, Vec<String>) {
    let mut problems = Vec::new();
    let Ok(mut stream) = js.get_stream("KUBE").await else {
        return (HashMap::new(), vec!["no stream yet".into()]);
    };
    let Ok(info) = stream.info().await else {
        return (HashMap::new(), vec!["stream info unavailable".into()]);
    };
    let (first, last) = (info.state.first_sequence, info.state.last_sequence);
    let mut seen = HashSet::new();
    let mut histories: HashMap<String, History> = HashMap::new();
    for seq in first..=last {
        let Ok(m) = stream.get_raw_message(seq).await else {
            problems.push(format!("cannot read message {seq}"));
            continue;
        };
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
        if !seen.insert((uid.clone(), rv.clone(), t.clone())) {
            problems.push(format!("stored twice: {uid} {rv} {t} (seq {seq})"));
        }
        let rv: u64 = rv.parse().unwrap_or(0);
        let history = histories.entry(uid.clone()).or_default();
        // A DELETED synthesized by a relist carries the last published version, so it may equal it.
        let synthesized_delete = t == "DELETED" && h("Kube-Synthesized") == "relist";
        if history.count > 0
            && (rv < history.last_rv || (rv == history.last_rv && !synthesized_delete))
        {
            problems.push(format!(
                "order broken for {uid}: {t} {rv} after {} {}",
                history.last_type, history.last_rv
            ));
        }
        history.last_rv = rv;
        history.last_type = t;
        history.count += 1;
    }
    for (c, name, uid) in uids {
        let current = sim
            .get(c.resource, Some(c.namespace), name)
            .filter(|o| o["metadata"]["uid"] == uid.as_str());
        let history = histories.get(uid);
        match (current, history) {
            (Some(obj), Some(h)) => {
                let final_rv: u64 = rv(&obj).parse().unwrap();
                if h.last_type == "DELETED" || h.last_rv != final_rv {
                    problems.push(format!(
                        "{}/{}/{name} ({uid}): last message {} {} but the object is at {final_rv}",
                        c.resource, c.namespace, h.last_type, h.last_rv
                    ));
                }
            }
            (Some(obj), None) => problems.push(format!(
                "{}/{}/{name} ({uid}) at {} was never published",
                c.resource,
                c.namespace,
                rv(&obj)
            )),
            // Created and deleted while unobserved: never announced, which is the true state.
            (None, None) => {}
            (None, Some(h)) if h.last_type == "DELETED" => {}
            (None, Some(h)) => problems.push(format!(
                "{}/{}/{name} ({uid}) is deleted but its last message is {} {}",
                c.resource, c.namespace, h.last_type, h.last_rv
            )),
        }
    }
    (histories, problems)
}
