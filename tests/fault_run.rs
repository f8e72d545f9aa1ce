//! The randomized fault run: the delivery promise under everything at once.
//!
//! Three watches (pods in two namespaces, deployments, a custom resource) in JetStream mode, while a
//! driver makes thousands of creates, updates and deletes and injects, at random: dropped watch
//! connections (also mid-line), history compaction (410), 429/500/503 bursts, garbage and truncated
//! lines, token rotation, and nats-server stopped and restarted. Every resumed watch first replays
//! the last events before its version, as a lagging API server can. Once in each run a fixed tour
//! makes sure each kind of fault bites (a 410, a decode error, a 401) and keeps writing through one
//! NATS outage while the daemon's memory is watched.
//!
//! The deployments watch publishes with `changes = "content"` (status ignored), and half its
//! updates change only the status: for its objects the last message must carry the final content
//! outside the ignored paths, not necessarily the final version.
//!
//! At the end the stream must hold, for every object, its final state as the last message; no
//! (uid, resourceVersion, type) twice; per object, versions that only increase; headers that agree
//! with the payload and the subject; no uid the driver never created; and an object created and
//! deleted without a message only where a relist after a 410 explains it. A plain core
//! subscription beside the stream counts every publish: a repeat is allowed only across a NATS
//! restart. The same checks pass again after a quiet period longer than the watch timeout, and
//! `/metrics` shows that the faults had their effect.
//!
//! The default run speaks HTTP/1.1 in the clear; a second, smaller run goes over TLS, where the
//! server offers HTTP/2 as in a cluster (kube2nats lists over it and watches over HTTP/1.1), with
//! bookmarks and random chunk framing.
//!
//! A third run kills the daemon (-9) at random moments of a busy stream, again and again, and
//! makes changes while it is down (see [`kill_9_fault_run`]), in core and JetStream mode.
//!
//! Seeded: the seed is printed, and `KUBE2NATS_FAULT_SEED=N` replays a run.
//! `KUBE2NATS_FAULT_OPS` sets its size (default 3000 operations; the TLS run makes a third).

#[path = "fault_run/check.rs"]
mod check;
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::restart::{crash_and_restart_cycles, Cycle, Mode};
use common::*;
use kube2nats_harness::apiserver::{
    ApiServer, ApiServerOptions, Failure, Framing, RequestFilter, RequestRecord, INITIAL_TOKEN,
};
use kube2nats_harness::nats::NatsServer;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
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
/// Random nats-server outages per run: each costs up to 1.5 s.
const MAX_NATS_OUTAGES: usize = 3;
/// Names per collection: small, so objects are updated and deleted often and names get reused
/// by new objects (new uids).
const NAMES: usize = 25;
/// Events a resumed watch replays from before its version.
const REPLAY: usize = 3;
/// The watch timeout T: the server ends each watch after T to 2T.
const WATCH_TIMEOUT: Duration = Duration::from_secs(3);
/// Updates made during the tour's NATS outage, each with `FILLER_BYTES`: many MiB the daemon must
/// not hold (it stops reading the API server instead), well over what flow control lets a client
/// receive before it stops reading (kernel socket buffers); more over TLS.
const OUTAGE_WRITES_PLAIN: usize = 3000;
const OUTAGE_WRITES_TLS: usize = 10_000;
const FILLER_BYTES: usize = 4000;
/// `nats.queue_capacity`: what the NATS client may queue while disconnected.
const QUEUE_CAPACITY: usize = 64;

/// One watched collection: a simulator resource in a namespace (or all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Collection {
    resource: &'static str,
    namespace: &'static str,
    /// The collection path kube2nats watches it through.
    path: &'static str,
    /// `{group}.{version}.{resource}` in subjects.
    subject: &'static str,
}

const COLLECTIONS: [Collection; 4] = [
    Collection {
        resource: "pods",
        namespace: "ns-a",
        path: "/api/v1/namespaces/ns-a/pods",
        subject: "core.v1.pods",
    },
    Collection {
        resource: "pods",
        namespace: "ns-b",
        path: "/api/v1/namespaces/ns-b/pods",
        subject: "core.v1.pods",
    },
    Collection {
        resource: "deployments",
        namespace: "ns-a",
        path: "/apis/apps/v1/deployments",
        subject: "apps.v1.deployments",
    },
    Collection {
        resource: "widgets",
        namespace: "ns-b",
        path: "/apis/example.com/v1/widgets",
        subject: "example_com.v1.widgets",
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
changes = "content"
ignore_paths = ["status"]

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

// --- `changes = "content"` (the deployments watch) ---------------------------------------------

/// Whether the collection's watch publishes only content changes (see `WATCHES`).
fn judged_by_content(c: Collection) -> bool {
    c.resource == "deployments"
}

/// An object as `changes = "content"` with `ignore_paths = ["status"]` compares it.
fn content(object: &serde_json::Value) -> serde_json::Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = object["metadata"].as_object_mut() {
        for ignored in ["resourceVersion", "managedFields", "generation"] {
            meta.remove(ignored);
        }
    }
    object
}

// ------------------------------------------------------------------------------------------------

/// How a run talks to the simulated API server.
#[derive(Clone, Copy)]
struct Transport {
    /// HTTPS, where the server offers HTTP/2: kube2nats lists over it, and watches over HTTP/1.1.
    tls: bool,
    /// Bookmarks every this often, and a fault that changes how lines are cut into chunks.
    bookmarks_and_framing: bool,
}

/// One object the driver created.
#[derive(Debug)]
struct Created {
    collection: Collection,
    name: String,
    uid: String,
    created_rv: u64,
    deleted_rv: Option<u64>,
}

/// What the stream says about one uid.
#[derive(Debug, Default)]
struct History {
    last_rv: u64,
    last_type: String,
    count: usize,
    /// The last message's object, kept for collections judged by content.
    last_object: Option<serde_json::Value>,
}

fn seed_and_ops(default_ops: usize) -> (u64, usize) {
    let seed: u64 = std::env::var("KUBE2NATS_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let ops: usize = std::env::var("KUBE2NATS_FAULT_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_ops);
    (seed, ops)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_fault_run_keeps_the_delivery_promise() {
    let (seed, ops) = seed_and_ops(3000);
    let transport = Transport {
        tls: false,
        bookmarks_and_framing: false,
    };
    fault_run(seed, ops, transport).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_fault_run_over_tls_with_bookmarks_and_random_framing() {
    let (seed, ops) = seed_and_ops(3000);
    let transport = Transport {
        tls: true,
        bookmarks_and_framing: true,
    };
    fault_run(seed, ops / 3, transport).await;
}

/// Seeds per kill -9 run (each of a few restarts).
const KILL_RUNS: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_kill_9_restarts_publish_exactly_what_changed_while_down_core() {
    kill_9_fault_run(Mode::Core).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_kill_9_restarts_publish_exactly_what_changed_while_down_jetstream() {
    kill_9_fault_run(Mode::JetStream).await;
}

/// kill -9 at random moments of a busy stream, again and again: each run of the daemon is killed
/// at a seeded moment; objects are created, updated and deleted, and a name deleted and
/// re-created, while it is down; the history is compacted (forcing a relist) before some
/// restarts and not others; each resumed watch first replays a few events from before its
/// version. Every restart must publish each change made while down exactly once, nothing the
/// last checkpoint covered, and per object in order (`common::restart` checks it all).
async fn kill_9_fault_run(mode: Mode) {
    let (seed, _) = seed_and_ops(0);
    println!("kill -9 fault run: seed {seed} (replay with KUBE2NATS_FAULT_SEED={seed})");
    for run in 0..KILL_RUNS {
        let seed = seed.wrapping_add(run);
        let mut rng = StdRng::seed_from_u64(seed);
        // Both kinds of restart in every run, in a random order, and one more of either.
        let mut compact = vec![true, false, rng.random_bool(0.5)];
        compact.shuffle(&mut rng);
        let cycles: Vec<Cycle> = compact
            .into_iter()
            .map(|compact| Cycle {
                compact,
                nats_outage: false,
            })
            .collect();
        let report = crash_and_restart_cycles(mode, seed, &cycles, REPLAY).await;
        println!(
            "seed {seed}: {} messages, {} changes while down, {} repeats of uncheckpointed tails",
            report.messages, report.changes_while_down, report.tail_repeats
        );
    }
}

/// The driver's side of the run: the simulator, nats-server, the daemon and what was created.
struct Run {
    sim: ApiServer,
    nats: NatsServer,
    tap: CoreTap,
    daemon: Process,
    metrics_url: String,
    created: Vec<Created>,
    /// Index into `created` of the live object of each (collection, name).
    live: HashMap<(usize, String), usize>,
    token: String,
    token_serial: usize,
    faults: HashMap<&'static str, usize>,
}

async fn fault_run(seed: u64, ops: usize, transport: Transport) {
    println!("fault run: seed {seed}, {ops} operations, TLS {} (replay with KUBE2NATS_FAULT_SEED={seed} KUBE2NATS_FAULT_OPS={ops})", transport.tls);
    let mut rng = StdRng::seed_from_u64(seed);

    let sim = ApiServer::start(ApiServerOptions {
        tls: transport.tls,
        history_limit: 400,
        bookmark_interval: transport
            .bookmarks_and_framing
            .then_some(Duration::from_millis(300)),
        ..Default::default()
    })
    .await
    .unwrap();
    sim.replay_on_resume(REPLAY);
    let nats = NatsServer::start().await.unwrap();
    let tap = CoreTap::start(&nats.url(), "kube.>").await;
    let port = free_port();
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"jetstream\"\nqueue_capacity = {QUEUE_CAPACITY}\n[nats.jetstream]\nack_timeout = \"1s\"\nmax_ack_inflight = 64\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n{WATCHES}",
        kube_section(&sim, &sim.token_file())
            .replace("watch_timeout = \"30s\"", &format!("watch_timeout = \"{}s\"\ntoken_reload_interval = \"1s\"", WATCH_TIMEOUT.as_secs()))
            .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"127.0.0.1:{port}\"")),
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
    let mut run = Run {
        sim,
        nats,
        tap,
        daemon,
        metrics_url: format!("http://127.0.0.1:{port}/metrics"),
        created: Vec::new(),
        live: HashMap::new(),
        token: INITIAL_TOKEN.to_owned(),
        token_serial: 0,
        faults: HashMap::new(),
    };

    let mut nats_outages = 0;
    for op in 0..ops {
        if op == ops / 3 {
            run.tour(&mut rng).await;
        }
        let ci = rng.random_range(0..COLLECTIONS.len());
        let name = format!("o{}", rng.random_range(0..NAMES));
        if !rng.random_ratio(1, FAULT_ONE_IN) {
            run.change(ci, &name, op as u64, rng.random_ratio(3, 4));
        } else {
            let fault = match rng.random_range(0..10) {
                0 => {
                    run.sim.drop_watches();
                    "drop"
                }
                1 => {
                    run.sim.drop_watches_mid_line();
                    "drop mid-line"
                }
                2 => {
                    run.sim.compact();
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
                    run.sim
                        .fail_next_matching(rng.random_range(1..6), filter, failure);
                    "error burst"
                }
                5 => {
                    run.sim.inject_garbage_line();
                    "garbage line"
                }
                6 => {
                    run.sim.truncate_watches();
                    "truncated line"
                }
                7 => {
                    run.rotate_token();
                    "token rotation"
                }
                8 if transport.bookmarks_and_framing => {
                    run.sim.set_framing(match rng.random_range(0..3) {
                        0 => Framing::PerLine,
                        1 => Framing::Coalesce,
                        _ => Framing::Split(rng.random_range(1..48)),
                    });
                    "framing changed"
                }
                8 => "none (framing stays per line)",
                _ if nats_outages < MAX_NATS_OUTAGES => {
                    nats_outages += 1;
                    run.nats_down().await;
                    tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
                    run.nats_up().await;
                    "nats restart"
                }
                _ => "none (nats outages used up)",
            };
            *run.faults.entry(fault).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..PACE_MAX_MICROS))).await;
    }
    println!("faults injected: {:?}", run.faults);

    // Converge: the stream must come to hold every object's final state.
    let nc = async_nats::connect(run.nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let first = loop {
        let checked = run.check(&js).await;
        if checked.problems.is_empty() || tokio::time::Instant::now() > deadline {
            break checked;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    run.fail_if_any(seed, "converging", &first.problems);
    // Quiet for longer than any watch lasts: every watch has been resumed at least once since, and
    // nothing may have been published again.
    let taps_before = run.tap.count();
    tokio::time::sleep(WATCH_TIMEOUT * 2 + Duration::from_secs(2)).await;
    let second = run.check(&js).await;
    let mut problems = second.problems;
    if second.last_sequence != first.last_sequence {
        problems.push(format!(
            "the stream grew from {} to {} messages while nothing changed",
            first.last_sequence, second.last_sequence
        ));
    }
    if run.tap.count() != taps_before {
        problems.push(format!(
            "{} messages published while nothing changed",
            run.tap.count() - taps_before
        ));
    }
    let (own_repeats, across_restarts) = run.tap.repeats();
    problems.extend(own_repeats);
    run.fail_if_any(seed, "after a quiet period", &problems);

    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak_rss.load(Ordering::Relaxed);
    let messages: usize = second.histories.values().map(|h| h.count).sum();
    println!(
        "{} objects, {messages} messages in the stream, {} publishes seen on the core subscription ({across_restarts} repeated across a NATS restart), peak RSS {peak} KiB",
        run.created.len(),
        run.tap.count(),
    );
    assert!(
        peak < RSS_BOUND_KIB,
        "seed {seed}: peak RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB"
    );
    assert!(run.daemon.is_running(), "seed {seed}: the daemon exited");
    run.assert_faults_had_effect(seed).await;
    if transport.tls {
        run.assert_watches_over_http1(seed);
    }
}

impl Run {
    /// Creates the object if its name is free, else updates it (`update`) or deletes it.
    fn change(&mut self, ci: usize, name: &str, generation: u64, update: bool) {
        let c = COLLECTIONS[ci];
        let ns = Some(c.namespace);
        match self.live.get(&(ci, name.to_owned())).copied() {
            None => {
                let obj = self.sim.create(c.resource, ns, object(c, name, generation));
                self.live.insert((ci, name.to_owned()), self.created.len());
                self.created.push(Created {
                    collection: c,
                    name: name.to_owned(),
                    uid: obj["metadata"]["uid"].as_str().unwrap().to_owned(),
                    created_rv: rv(&obj).parse().unwrap(),
                    deleted_rv: None,
                });
            }
            Some(_) if update && judged_by_content(c) && generation.is_multiple_of(2) => {
                self.sim.update(c.resource, ns, name, |o| {
                    o["status"]["observedOp"] = generation.into()
                });
            }
            Some(_) if update => {
                self.sim.update(c.resource, ns, name, |o| {
                    o["metadata"]["labels"]["op"] = generation.to_string().into()
                });
            }
            Some(i) => {
                let gone = self
                    .sim
                    .delete(c.resource, ns, name)
                    .expect("the driver deletes only live objects");
                self.created[i].deleted_rv = Some(rv(&gone).parse().unwrap());
                self.live.remove(&(ci, name.to_owned()));
            }
        }
    }

    fn rotate_token(&mut self) {
        self.token_serial += 1;
        self.token = format!("rotated-{}", self.token_serial);
        self.sim.set_valid_tokens(&[&self.token]);
    }

    async fn nats_down(&mut self) {
        self.nats.stop().await;
        self.tap.server_stopped().await;
    }

    async fn nats_up(&mut self) {
        self.nats.restart().await.expect("nats-server restarts");
        self.tap.server_restarted("kube.>").await;
    }

    async fn metrics(&self) -> String {
        match reqwest::get(&self.metrics_url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    async fn wait_for_metric(&self, what: &str, name: &str, labels: &[(&str, &str)]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while metric_sum(&self.metrics().await, name, labels) < 1.0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the tour's {what} had no effect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Each kind of fault once, waiting until it bit: a 410 and the relist it forces, a decode
    /// error, a 401, and a NATS outage during which the driver keeps writing.
    async fn tour(&mut self, rng: &mut StdRng) {
        // 410: the watches are cut off and kept off while every collection changes, then the
        // history is compacted. Only once the watches (one per collection) are open: a tour
        // early in a run (seed 7259152690614223534) met a daemon still starting, whose first
        // list came after the compaction and had nothing to expire. Four failures for each
        // watch keep them off (~750 ms of backoff) while the collections change, and the
        // changes wait until the dropped streams have ended: a stream that took them first
        // would deliver them, leaving the daemon's version current after the compaction.
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.sim.open_watches() < COLLECTIONS.len() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the daemon's watches never opened"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.sim
            .fail_next_matching(16, RequestFilter::Watch, Failure::Internal);
        self.sim.drop_watches();
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.sim.open_watches() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the dropped watches never ended"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for ci in 0..COLLECTIONS.len() {
            let name = format!("o{}", rng.random_range(0..NAMES));
            self.change(ci, &name, 0, true);
        }
        self.sim.compact();
        self.wait_for_metric(
            "compaction",
            "kube2nats_relists_total",
            &[("reason", "expired")],
        )
        .await;

        // A garbage line into open watches.
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.sim.open_watches() == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.sim.inject_garbage_line();
        self.wait_for_metric("garbage line", "kube2nats_decode_errors_total", &[])
            .await;

        // 401: the server accepts a new token before the file holding it is rewritten.
        let old = self.token.clone();
        self.rotate_token();
        std::fs::write(self.sim.token_file(), &old).unwrap();
        let refused = |sim: &ApiServer| sim.requests().iter().filter(|r| r.status == 401).count();
        let refused_before = refused(&self.sim);
        self.sim.drop_watches();
        let deadline = tokio::time::Instant::now() + WAIT;
        while refused(&self.sim) == refused_before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no request with the stale token"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::write(self.sim.token_file(), &self.token).unwrap();
        self.wait_for_metric(
            "401",
            "kube2nats_watch_restarts_total",
            &[("reason", "unauthorized")],
        )
        .await;

        self.memory_outage(rng).await;
        *self.faults.entry("tour").or_default() += 1;
    }

    /// NATS down while the driver writes several MiB of changes: the daemon stops reading the API
    /// server instead of holding them (backpressure), and stays alive.
    async fn memory_outage(&mut self, rng: &mut StdRng) {
        let pid = self.daemon.pid();
        let writes = if self.sim.url().starts_with("https") {
            OUTAGE_WRITES_TLS
        } else {
            OUTAGE_WRITES_PLAIN
        };
        let baseline = rss_kib(pid);
        self.nats_down().await;
        let mut peak = baseline;
        for i in 0..writes {
            let ci = rng.random_range(0..COLLECTIONS.len());
            let name = format!("o{}", rng.random_range(0..NAMES));
            let c = COLLECTIONS[ci];
            if self.live.contains_key(&(ci, name.clone())) {
                self.sim.update(c.resource, Some(c.namespace), &name, |o| {
                    o["metadata"]["annotations"] =
                        json!({"filler": format!("{i:06}{}", "x".repeat(FILLER_BYTES))})
                });
            } else {
                self.change(ci, &name, i as u64, true);
            }
            if i % 50 == 0 {
                peak = peak.max(rss_kib(pid));
                tokio::task::yield_now().await;
            }
        }
        for _ in 0..20 {
            peak = peak.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            self.daemon.is_running(),
            "the daemon died during the NATS outage"
        );
        let growth = peak.saturating_sub(baseline);
        let written_kib = (writes * FILLER_BYTES / 1024) as u64;
        println!("NATS outage: RSS baseline {baseline} KiB, peak {peak} KiB, growth {growth} KiB for ~{written_kib} KiB written");
        assert!(
            growth < written_kib / 2,
            "memory grew with what was written during the NATS outage: {growth} KiB for ~{written_kib} KiB"
        );
        self.nats_up().await;
    }

    fn fail_if_any(&self, seed: u64, when: &str, problems: &[String]) {
        if problems.is_empty() {
            return;
        }
        let log = self.daemon.rest();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "seed {seed}: {} problem(s) {when}:\n{}\n--- last log lines ---\n{}",
            problems.len(),
            problems.join("\n"),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }

    /// `/metrics` shows that the faults bit: relists after 410, decode errors, 401 restarts, and
    /// replayed events dropped as duplicates.
    async fn assert_faults_had_effect(&self, seed: u64) {
        let text = self.metrics().await;
        for (name, labels) in [
            ("kube2nats_relists_total", &[("reason", "expired")][..]),
            ("kube2nats_decode_errors_total", &[][..]),
            (
                "kube2nats_watch_restarts_total",
                &[("reason", "unauthorized")][..],
            ),
            (
                "kube2nats_events_dropped_total",
                &[("reason", "duplicate")][..],
            ),
            (
                "kube2nats_events_dropped_total",
                &[("watch", "deployments"), ("reason", "unchanged")][..],
            ),
        ] {
            let n = metric_sum(&text, name, labels);
            println!("{name}{labels:?} = {n}");
            assert!(n >= 1.0, "seed {seed}: {name}{labels:?} is {n}");
        }
    }

    /// Over TLS kube2nats sends its lists and discovery over HTTP/2, and each watch over an
    /// HTTP/1.1 connection of its own (see `HttpClients` in src/kube/client.rs).
    fn assert_watches_over_http1(&self, seed: u64) {
        let requests = self.sim.requests();
        let is_watch = |r: &&RequestRecord| {
            r.query
                .get("watch")
                .is_some_and(|w| w == "1" || w == "true")
        };
        let wrong: Vec<&RequestRecord> = requests
            .iter()
            .filter(|r| r.http_version != if is_watch(r) { "HTTP/1.1" } else { "HTTP/2.0" })
            .collect();
        assert!(
            wrong.is_empty(),
            "seed {seed}: watches not over HTTP/1.1 or other requests not over HTTP/2: {:?}",
            wrong.first()
        );
        assert!(
            requests.iter().filter(is_watch).count() > 0
                && requests.len() > requests.iter().filter(is_watch).count(),
            "seed {seed}: both watches and other requests"
        );
    }
}
