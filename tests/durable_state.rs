//! Durable state: a restart, crash or rollout publishes exactly what changed while kube2nats was
//! down, deletions included, and nothing else.
//!
//! Each test runs the real binary (killed with SIGKILL, as an OOM kill or a node loss would), a
//! real nats-server with JetStream (the state lives there in both publishing modes) and the
//! simulated API server. Messages are counted with a plain core subscription, which sees every
//! publish: JetStream's duplicate window would hide repeats from a look at the stream.
//!
//! What "exactly" means after a kill -9: every change made while kube2nats was down is published
//! once; nothing the last checkpoint covered (versions up to its resume version) is published
//! again; what was published after the last checkpoint (at most `checkpoint_interval` of history)
//! may be published once more — in JetStream mode with the same `Nats-Msg-Id`, so the stream drops
//! it. Per object, each run publishes versions in order.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const BUCKET: &str = "kube2nats-state";
const NS: &str = "default";
/// Names the driver works on: few, so objects are updated, deleted and re-created often.
const NAMES: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Core,
    JetStream,
}

/// One message as the core subscription saw it.
#[derive(Debug, Clone)]
struct Seen {
    uid: String,
    name: String,
    rv: u64,
    kind: String,
    synthesized: bool,
}

impl Seen {
    fn from_headers(headers: Option<&async_nats::HeaderMap>) -> Seen {
        let h = |k: &str| {
            headers
                .and_then(|h| h.get(k))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        };
        Seen {
            uid: h("Kube-Uid"),
            name: h("Kube-Name"),
            rv: h("Kube-Resource-Version").parse().unwrap_or(0),
            kind: h("Kube-Event-Type"),
            synthesized: !h("Kube-Synthesized").is_empty(),
        }
    }

    fn deleted(&self) -> bool {
        self.kind == "DELETED"
    }
}

/// Every message on `kube.>`, in arrival order.
struct Recording {
    seen: Arc<Mutex<Vec<Seen>>>,
    nc: async_nats::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Recording {
    async fn start(url: &str) -> Recording {
        let nc = async_nats::connect(url).await.unwrap();
        let mut sub = nc.subscribe("kube.>").await.unwrap();
        nc.flush().await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Some(m) = sub.next().await {
                    let s = Seen::from_headers(m.headers.as_ref());
                    seen.lock().unwrap().push(s);
                }
            })
        };
        Recording { seen, nc, task }
    }

    fn all(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The number of messages so far, once everything sent before this call has arrived.
    async fn mark(&self) -> usize {
        self.nc.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.nc.flush().await.unwrap();
        self.seen.lock().unwrap().len()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Cluster {
    sim: ApiServer,
    nats: NatsServer,
    mode: Mode,
    http_port: u16,
}

impl Cluster {
    async fn start(mode: Mode, history_limit: usize) -> Cluster {
        let sim = ApiServer::start(ApiServerOptions {
            history_limit,
            ..Default::default()
        })
        .await
        .unwrap();
        let nats = NatsServer::start().await.unwrap();
        Cluster {
            sim,
            nats,
            mode,
            http_port: free_port(),
        }
    }

    fn config(&self, watches: &str, extra: &str) -> String {
        let nats = match self.mode {
            Mode::Core => format!("[nats]\nurl = \"{}\"\n", self.nats.url()),
            Mode::JetStream => format!(
                "[nats]\nurl = \"{}\"\nmode = \"jetstream\"\n[nats.jetstream]\nack_timeout = \"1s\"\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n",
                self.nats.url()
            ),
        };
        format!(
            "{}\n{nats}[state]\ncheckpoint_interval = \"150ms\"\n{extra}\n{watches}",
            kube_section(&self.sim, &self.sim.token_file()).replace(
                "listen = \"127.0.0.1:0\"",
                &format!("listen = \"127.0.0.1:{}\"", self.http_port)
            ),
        )
    }

    async fn metrics(&self) -> String {
        reqwest::get(format!("http://127.0.0.1:{}/metrics", self.http_port))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn kv(&self) -> async_nats::jetstream::kv::Store {
        let nc = async_nats::connect(self.nats.url()).await.unwrap();
        async_nats::jetstream::new(nc)
            .get_key_value(BUCKET)
            .await
            .unwrap()
    }

    /// The committed manifest of a target, if any.
    async fn manifest(&self, key: &str) -> Option<kube2nats::state::codec::Manifest> {
        let nc = async_nats::connect(self.nats.url()).await.unwrap();
        let kv = async_nats::jetstream::new(nc)
            .get_key_value(BUCKET)
            .await
            .ok()?;
        let raw = kv.get(format!("{key}.manifest")).await.ok()??;
        serde_json::from_slice(&raw).ok()
    }

    /// Waits until a checkpoint covering at least `rv` is committed; returns its resume version.
    async fn checkpoint_at_least(&self, key: &str, rv: u64) -> u64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(m) = self.manifest(key).await {
                let saved: u64 = m.resume_version.parse().unwrap();
                if saved >= rv {
                    return saved;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no checkpoint of {key} reached resourceVersion {rv}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Requests that listed `path` (a collection path), not watched it.
    fn lists(&self, path: &str) -> usize {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path && !r.is_watch())
            .count()
    }

    fn watch_versions(&self, path: &str) -> Vec<String> {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.path == path && r.is_watch())
            .map(|r| r.param("resourceVersion").unwrap_or("").to_owned())
            .collect()
    }
}

const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";
const PODS_PATH: &str = "/api/v1/namespaces/default/pods";
const PODS_KEY: &str = "pods.default";

fn pod_named(name: &str, generation: u64) -> serde_json::Value {
    json!({"metadata": {"name": name, "labels": {"gen": generation.to_string()}}, "spec": {"containers": [{"name": "main", "image": "nginx"}]}})
}

/// One random create, update or delete; returns what changed as (uid, rv, type).
fn random_change(sim: &ApiServer, rng: &mut StdRng, op: u64) -> (String, u64, &'static str) {
    let name = format!("p{}", rng.random_range(0..NAMES));
    let uid_rv = |o: &serde_json::Value| {
        (
            o["metadata"]["uid"].as_str().unwrap().to_owned(),
            rv(o).parse::<u64>().unwrap(),
        )
    };
    match sim.get("pods", Some(NS), &name) {
        None => {
            let (uid, rv) = uid_rv(&sim.create("pods", Some(NS), pod_named(&name, op)));
            (uid, rv, "ADDED")
        }
        Some(_) if rng.random_ratio(7, 10) => {
            let updated = sim.update("pods", Some(NS), &name, |o| {
                o["metadata"]["labels"]["gen"] = op.to_string().into()
            });
            let (uid, rv) = uid_rv(&updated);
            (uid, rv, "MODIFIED")
        }
        Some(_) => {
            let deleted = sim.delete("pods", Some(NS), &name).unwrap();
            let (uid, rv) = uid_rv(&deleted);
            (uid, rv, "DELETED")
        }
    }
}

/// The pods of the namespace now: uid → (name, rv).
fn current_pods(sim: &ApiServer) -> HashMap<String, (String, u64)> {
    (0..NAMES)
        .filter_map(|i| sim.get("pods", Some(NS), &format!("p{i}")))
        .map(|o| {
            (
                o["metadata"]["uid"].as_str().unwrap().to_owned(),
                (
                    o["metadata"]["name"].as_str().unwrap().to_owned(),
                    rv(&o).parse().unwrap(),
                ),
            )
        })
        .collect()
}

/// Problems with the final state: every pod's last message is its current version, every uid
/// that is gone ends with DELETED.
fn convergence_problems(sim: &ApiServer, seen: &[Seen]) -> Vec<String> {
    let mut last: HashMap<&str, &Seen> = HashMap::new();
    for s in seen {
        last.insert(&s.uid, s);
    }
    let current = current_pods(sim);
    let mut problems = Vec::new();
    for (uid, (name, rv)) in &current {
        match last.get(uid.as_str()) {
            Some(s) if !s.deleted() && s.rv == *rv => {}
            other => problems.push(format!(
                "{name} ({uid}) is at {rv} but its last message is {other:?}"
            )),
        }
    }
    for (uid, s) in &last {
        if !current.contains_key(*uid) && !s.deleted() {
            problems.push(format!(
                "{} ({uid}) is gone but its last message is {s:?}",
                s.name
            ));
        }
    }
    problems
}

/// Waits until `earlier` followed by the recording from `from` on shows the simulator's final
/// state, then a moment more for late repeats to show up; returns the recording from `from`.
async fn converge_after(
    sim: &ApiServer,
    recording: &Recording,
    earlier: &[Seen],
    from: usize,
) -> Vec<Seen> {
    let seen = || {
        let mut all = earlier.to_vec();
        all.extend_from_slice(&recording.all()[from..]);
        all
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let problems = convergence_problems(sim, &seen());
        if problems.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "did not converge:\n{}",
            problems.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    recording.mark().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    recording.all()[from..].to_vec()
}

/// [`converge_after`] over the whole recording.
async fn converge(sim: &ApiServer, recording: &Recording) -> Vec<Seen> {
    converge_after(sim, recording, &[], 0).await
}

/// Every message in the `KUBE` stream, in order: what was published, for a run in which the core
/// subscription was cut off by a NATS outage.
async fn stream_messages(url: &str) -> Vec<Seen> {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
    let mut stream = js.get_stream("KUBE").await.unwrap();
    let info = stream.info().await.unwrap();
    let mut out = Vec::new();
    for seq in info.state.first_sequence..=info.state.last_sequence {
        let m = stream.get_raw_message(seq).await.unwrap();
        out.push(Seen::from_headers(Some(&m.headers)));
    }
    out
}

/// The class of a message for repeat detection: a version is one message whether published as
/// ADDED or MODIFIED (as its `Nats-Msg-Id` says); a deletion is another.
fn version_key(s: &Seen) -> (String, u64, bool) {
    (s.uid.clone(), s.rv, s.deleted())
}

/// Within one run: no version twice, and per object versions only go up.
fn run_problems(run: &str, seen: &[Seen]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut versions = HashSet::new();
    let mut last: HashMap<&str, &Seen> = HashMap::new();
    for s in seen {
        if !versions.insert(version_key(s)) {
            problems.push(format!("{run}: published twice: {s:?}"));
        }
        if let Some(prev) = last.get(s.uid.as_str()) {
            let synthesized_delete = s.deleted() && s.synthesized;
            if prev.deleted() || (s.rv <= prev.rv && !synthesized_delete) {
                problems.push(format!("{run}: order broken: {s:?} after {prev:?}"));
            }
        }
        last.insert(&s.uid, s);
    }
    problems
}

/// What a restart published beyond the changes made while down: repeats of what the last
/// checkpoint covered are problems, repeats of the uncheckpointed tail are counted.
fn restart_problems(before: &[Seen], after: &[Seen], saved_rv: u64) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let published: HashSet<_> = before.iter().map(version_key).collect();
    let deleted_before: HashMap<&str, u64> = before
        .iter()
        .filter(|s| s.deleted())
        .map(|s| (s.uid.as_str(), s.rv))
        .collect();
    let mut tail_repeats = 0;
    for s in after {
        let repeat = published.contains(&version_key(s));
        let repeated_delete = s.deleted() && deleted_before.contains_key(s.uid.as_str());
        if repeat || repeated_delete {
            let published_rv = if s.deleted() {
                deleted_before.get(s.uid.as_str()).copied().unwrap_or(s.rv)
            } else {
                s.rv
            };
            if published_rv <= saved_rv {
                problems.push(format!(
                    "published again although checkpointed (saved at {saved_rv}): {s:?}"
                ));
            } else {
                tail_repeats += 1;
            }
        }
    }
    (problems, tail_repeats)
}

/// Changes while down: updates, creates, deletes and one delete-and-recreate of a name; returns
/// each change as (uid, rv, type) and the recreated name.
fn change_while_down(sim: &ApiServer, rng: &mut StdRng) -> Vec<(String, u64, &'static str)> {
    let mut changes = Vec::new();
    for op in 0..30 {
        changes.push(random_change(sim, rng, 10_000 + op));
    }
    // A delete and re-create of one name: two objects to subscribers (two uids).
    let name = (0..NAMES)
        .map(|i| format!("p{i}"))
        .find(|n| sim.get("pods", Some(NS), n).is_some())
        .expect("some pod exists");
    let gone = sim.delete("pods", Some(NS), &name).unwrap();
    changes.push((
        gone["metadata"]["uid"].as_str().unwrap().to_owned(),
        rv(&gone).parse().unwrap(),
        "DELETED",
    ));
    let again = sim.create("pods", Some(NS), pod_named(&name, 99_999));
    changes.push((
        again["metadata"]["uid"].as_str().unwrap().to_owned(),
        rv(&again).parse().unwrap(),
        "ADDED",
    ));
    changes
}

/// The busy stream, the kill -9 at a seeded moment, changes while down, a restart (after
/// compaction when `compact`), and every check of the promise.
async fn crash_and_restart(mode: Mode, seed: u64, compact: bool) {
    crash_and_restart_with(mode, seed, compact, false).await
}

/// [`crash_and_restart`], with nats-server restarted half-way through the busy stream when
/// `nats_outage` (while checkpoints are being written).
async fn crash_and_restart_with(mode: Mode, seed: u64, compact: bool, nats_outage: bool) {
    println!("mode {mode:?}, seed {seed}, compact {compact}, nats outage {nats_outage}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(mode, 100_000).await;
    for i in 0..NAMES / 2 {
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

    // A busy stream, killed at a random moment.
    let ops = rng.random_range(20..300);
    for op in 0..ops {
        random_change(&cluster.sim, &mut rng, op);
        // ~2 ms per change on average: several checkpoints happen during the stream.
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..4000))).await;
        if nats_outage && op == ops / 2 {
            cluster.nats.stop().await;
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..1000))).await;
            cluster.nats.restart().await.unwrap();
        }
    }
    if nats_outage {
        // Checkpoints are written again after the outage.
        cluster
            .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
            .await;
    }
    drop(daemon); // SIGKILL
    let sim = &cluster.sim;
    let before_len = recording.mark().await;
    // A NATS outage cuts the core subscription off for a while: what was published before the
    // kill is then read from the stream (which holds every acknowledged message).
    let before_all = if nats_outage {
        stream_messages(&cluster.nats.url()).await
    } else {
        recording.all()[..before_len].to_vec()
    };
    let saved_rv: u64 = cluster
        .manifest(PODS_KEY)
        .await
        .expect("a checkpoint exists")
        .resume_version
        .parse()
        .unwrap();
    let before = before_all;

    let changes = change_while_down(sim, &mut rng);
    if compact {
        sim.compact();
    }
    sim.clear_requests();
    let daemon = Process::spawn(&config);
    let after = &converge_after(sim, &recording, &before, before_len).await[..];
    let all: Vec<Seen> = before.iter().chain(after).cloned().collect();
    let log = daemon.rest();

    let mut problems = run_problems("before the kill", &before);
    problems.extend(run_problems("after the restart", after));
    let (repeats, tail_repeats) = restart_problems(&before, after, saved_rv);
    problems.extend(repeats);
    problems.extend(convergence_problems(sim, &all));
    // Each change made while down, exactly once: every version when the watch resumed, the
    // final state of each object when a relist was needed.
    let after_versions: HashMap<(String, u64, bool), usize> =
        after.iter().fold(HashMap::new(), |mut m, s| {
            *m.entry(version_key(s)).or_default() += 1;
            m
        });
    let current = current_pods(sim);
    for (uid, rv, kind) in &changes {
        let deleted = *kind == "DELETED";
        let expected = if compact {
            let is_final = current.get(uid).is_some_and(|(_, now)| now == rv);
            if deleted {
                // Announced once, as a synthesized DELETED with the last known version — also
                // for an object first published after the last checkpoint (the journal keeps
                // it) — unless it was created while down too (subscribers never knew it). One
                // created before the kill whose message did not go out may be announced (its
                // journal record was written first).
                let announced = after
                    .iter()
                    .filter(|s| &s.uid == uid && s.deleted())
                    .count();
                let published = before.iter().any(|s| &s.uid == uid);
                let created_while_down = changes.iter().any(|(u, _, k)| u == uid && *k == "ADDED");
                let ok = match (published, created_while_down) {
                    (true, _) => announced == 1,
                    (false, true) => announced == 0,
                    (false, false) => announced <= 1,
                };
                if !ok {
                    problems.push(format!(
                        "deleted while down: {uid} announced {announced} times (published before the kill: {published})"
                    ));
                }
                continue;
            }
            usize::from(is_final)
        } else {
            1
        };
        let got = after_versions
            .get(&(uid.clone(), *rv, deleted))
            .copied()
            .unwrap_or(0);
        if got != expected {
            problems.push(format!(
                "change while down {kind} {uid} {rv}: published {got} times, expected {expected}"
            ));
        }
    }
    // Deletions found by the relist are synthesized; without compaction they come from the watch.
    if compact {
        assert!(
            after.iter().filter(|s| s.deleted()).all(|s| s.synthesized),
            "deletions after a relist are marked synthesized"
        );
    }
    let lists = cluster.lists(PODS_PATH);
    let watched_from = cluster.watch_versions(PODS_PATH);
    if compact {
        assert!(lists >= 1, "a relist was forced");
        assert!(
            log.contains("relisted and diffed against the saved objects"),
            "log says the relist was diffed:\n{log}"
        );
    } else {
        assert_eq!(lists, 0, "resumed without any list request");
        assert_eq!(
            watched_from.first().map(String::as_str),
            Some(saved_rv.to_string().as_str()),
            "the first watch resumes from the saved version"
        );
    }
    assert!(
        log.contains("loaded saved state"),
        "log says the state was loaded:\n{log}"
    );
    println!(
        "{} before the kill ({} ops), {} after the restart, {} repeats of the uncheckpointed tail (saved at {saved_rv}), {} changes while down",
        before.len(),
        ops,
        after.len(),
        tail_repeats,
        changes.len(),
    );
    assert!(
        problems.is_empty(),
        "mode {mode:?} seed {seed} compact {compact}: {} problem(s):\n{}\n--- log ---\n{log}",
        problems.len(),
        problems.join("\n")
    );
}

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
        crash_and_restart_with(Mode::JetStream, seed, true, true).await;
    }
}

/// The uid of a pod the simulator holds now.
fn uid_of(sim: &ApiServer, name: &str) -> String {
    let pod = sim.get("pods", Some(NS), name).expect("the pod exists");
    pod["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// How often each (uid, version, deletion) is stored in the `KUBE` stream.
async fn stored_counts(url: &str) -> HashMap<(String, u64, bool), usize> {
    let mut counts = HashMap::new();
    for s in stream_messages(url).await {
        *counts.entry(version_key(&s)).or_default() += 1;
    }
    counts
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
    let never = quick.replace(
        "checkpoint_interval = \"150ms\"",
        "checkpoint_interval = \"1h\"",
    );
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
        for (key, n) in stored_counts(&cluster.nats.url()).await {
            if n != 1 {
                problems.push(format!("stored {n} times in the stream: {key:?}"));
            }
        }
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
    let cluster = Cluster::start(mode, 10_000).await;
    let sim = &cluster.sim;
    for i in 0..5 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let never = cluster.config(PODS_WATCH, "").replace(
        "checkpoint_interval = \"150ms\"",
        "checkpoint_interval = \"1h\"",
    );
    let daemon = Process::spawn(&never);
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
    daemon.line_with(&["a journal of objects published before a crash"]);
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
        for (key, n) in stored_counts(&cluster.nats.url()).await {
            if n != 1 {
                problems.push(format!("stored {n} times in the stream: {key:?}"));
            }
        }
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

    kv.put(format!("{PODS_KEY}.manifest"), "{not json".into())
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
        "{PODS_KEY}.{}.0",
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
    daemon.line_with(&["writing a checkpoint failed"]);
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
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(metric(&metrics, "kube2nats_state_durable", &[]), Some(0.0));
    assert_eq!(
        daemon.rest().matches("no JetStream").count(),
        0,
        "said once"
    );
}

/// A namespace dropped from a watch has its saved state removed (with a log line); the state of a
/// watch name this configuration does not have — perhaps another kube2nats's, sharing the bucket —
/// is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_of_a_dropped_namespace_is_removed_and_foreign_state_is_kept() {
    use futures_util::TryStreamExt;
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    for ns in ["a", "b"] {
        cluster.sim.create("pods", Some(ns), pod_named("p0", 0));
    }
    let watch = |namespaces: &str| {
        format!("[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [{namespaces}]\n")
    };
    let recording = Recording::start(&cluster.nats.url()).await;
    let daemon = Process::spawn(&cluster.config(&watch("\"a\", \"b\""), ""));
    eventually("both pods announced", || recording.all().len() >= 2).await;
    let rv = cluster.sim.resource_version();
    cluster.checkpoint_at_least("pods.a", rv).await;
    cluster.checkpoint_at_least("pods.b", rv).await;
    drop(daemon);
    let kv = cluster.kv().await;
    kv.put("others.b.manifest", "{}".into()).await.unwrap();

    let daemon = Process::spawn(&cluster.config(&watch("\"a\""), ""));
    let line = daemon.line_with(&["removed the saved state"]);
    assert!(line.contains("pods.b"), "{line}");
    let keys: Vec<String> = kv.keys().await.unwrap().try_collect().await.unwrap();
    assert!(!keys.iter().any(|k| k.starts_with("pods.b.")), "{keys:?}");
    assert!(keys.iter().any(|k| k == "pods.a.manifest"), "{keys:?}");
    assert!(keys.iter().any(|k| k == "others.b.manifest"), "{keys:?}");
    assert!(
        !daemon.rest().contains("others.b"),
        "a watch name not configured is not touched"
    );
}
