//! Crash and restart runs of the real binary: a busy stream killed with SIGKILL at a seeded
//! moment, changes while kube2nats is down, a restart, and every check of the promise that a
//! restart publishes exactly what changed while it was down (see `tests/durable_state.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use futures_util::StreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

pub const BUCKET: &str = "kube2nats-state";
pub const NS: &str = "default";
/// Names the driver works on: few, so objects are updated, deleted and re-created often.
pub const NAMES: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Core,
    JetStream,
}

/// One message as the core subscription saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub uid: String,
    pub name: String,
    pub rv: u64,
    pub kind: String,
    pub synthesized: bool,
    /// `Nats-Msg-Id`: the same for a message published again.
    pub msg_id: String,
}

impl Seen {
    pub fn from_headers(headers: Option<&async_nats::HeaderMap>) -> Seen {
        let h = |k: &str| header_text(headers, k);
        Seen {
            uid: h("Kube-Uid"),
            name: h("Kube-Name"),
            rv: h("Kube-Resource-Version").parse().unwrap_or(0),
            kind: h("Kube-Event-Type"),
            synthesized: !h("Kube-Synthesized").is_empty(),
            msg_id: h("Nats-Msg-Id"),
        }
    }

    pub fn deleted(&self) -> bool {
        self.kind == "DELETED"
    }
}

/// Every message on `kube.>`, in arrival order.
pub struct Recording {
    seen: Arc<Mutex<Vec<Seen>>>,
    nc: async_nats::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Recording {
    pub async fn start(url: &str) -> Recording {
        Recording::with_client(async_nats::connect(url).await.unwrap()).await
    }

    /// Records what `nc` (e.g. a client with credentials) receives on `kube.>`.
    pub async fn with_client(nc: async_nats::Client) -> Recording {
        let mut sub = nc.subscribe("kube.>").await.unwrap();
        kube2nats_harness::nats::round_trip(&nc).await.unwrap();
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

    pub fn all(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The number of messages so far, once everything sent before this call has arrived.
    pub async fn mark(&self) -> usize {
        self.nc.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.nc.flush().await.unwrap();
        self.seen.lock().unwrap().len()
    }

    /// Waits until no message has come for [`QUIET`]; the number of messages then. A repeat comes
    /// on a timer of its own (a publish retried, a watch resumed, after a backoff of a second or
    /// two), not behind a change made now, so a sentinel change would not wait for it: the
    /// window instead starts again at every message, and a repeat due within [`QUIET`] of the
    /// last message falls inside it.
    pub async fn quiet(&self) -> usize {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut count = self.mark().await;
        let mut since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.mark().await;
            if now != count {
                (count, since) = (now, tokio::time::Instant::now());
            } else if since.elapsed() >= QUIET {
                return count;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "messages kept coming for a minute: {} so far",
                count
            );
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct Cluster {
    pub sim: ApiServer,
    pub nats: NatsServer,
    pub mode: Mode,
    pub http_port: u16,
}

impl Cluster {
    pub async fn start(mode: Mode, history_limit: usize) -> Cluster {
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

    pub fn config(&self, watches: &str, extra: &str) -> String {
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

    pub async fn metrics(&self) -> String {
        scrape_metrics(self.http_port).await
    }

    pub async fn kv(&self) -> async_nats::jetstream::kv::Store {
        let nc = async_nats::connect(self.nats.url()).await.unwrap();
        async_nats::jetstream::new(nc)
            .get_key_value(BUCKET)
            .await
            .unwrap()
    }

    /// The full key of a target (`{watch}.{namespace}`) as a daemon of this cluster run outside
    /// a pod, with no instance configured, stores it: under its owner, the cluster id and `_`.
    pub fn owned(&self, key: &str) -> String {
        format!("{}._.{key}", self.sim.cluster_uid())
    }

    /// The committed manifest of a target, if any.
    pub async fn manifest(&self, key: &str) -> Option<kube2nats::facade::Manifest> {
        self.manifest_at(&self.owned(key)).await
    }

    /// The committed manifest under a full key, if any.
    pub async fn manifest_at(&self, key: &str) -> Option<kube2nats::facade::Manifest> {
        let nc = async_nats::connect(self.nats.url()).await.unwrap();
        let kv = async_nats::jetstream::new(nc)
            .get_key_value(BUCKET)
            .await
            .ok()?;
        let raw = kv.get(format!("{key}.manifest")).await.ok()??;
        serde_json::from_slice(&raw).ok()
    }

    /// Waits until a checkpoint covering at least `rv` is committed; returns its resume version.
    pub async fn checkpoint_at_least(&self, key: &str, rv: u64) -> u64 {
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
    pub fn lists(&self, path: &str) -> usize {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path && !r.is_watch())
            .count()
    }

    pub fn watch_versions(&self, path: &str) -> Vec<String> {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.path == path && r.is_watch())
            .map(|r| r.param("resourceVersion").unwrap_or("").to_owned())
            .collect()
    }
}

pub const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";
pub const PODS_PATH: &str = "/api/v1/namespaces/default/pods";
pub const PODS_KEY: &str = "pods.default";

pub fn pod_named(name: &str, generation: u64) -> serde_json::Value {
    json!({"metadata": {"name": name, "labels": {"gen": generation.to_string()}}, "spec": {"containers": [{"name": "main", "image": "nginx"}]}})
}

/// One random create, update or delete; returns what changed as (uid, rv, type).
pub fn random_change(sim: &ApiServer, rng: &mut StdRng, op: u64) -> (String, u64, &'static str) {
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
            // The label names the version it replaces, so every update is a real change: the
            // same `op` comes up again in later cycles, and an update that changes nothing is
            // a no-op that keeps the old resourceVersion (as in kube-apiserver).
            let updated = sim.update("pods", Some(NS), &name, |o| {
                let replaces = rv(o);
                o["metadata"]["labels"]["gen"] = format!("{op}.{replaces}").into()
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
pub fn current_pods(sim: &ApiServer) -> HashMap<String, (String, u64)> {
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
pub fn convergence_problems(sim: &ApiServer, seen: &[Seen]) -> Vec<String> {
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
/// state, then until the recording is quiet ([`Recording::quiet`]), so that late repeats are in
/// it; returns the recording from `from`.
pub async fn converge_after(
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
    recording.quiet().await;
    recording.all()[from..].to_vec()
}

/// [`converge_after`] over the whole recording.
pub async fn converge(sim: &ApiServer, recording: &Recording) -> Vec<Seen> {
    converge_after(sim, recording, &[], 0).await
}

/// Every message in the `KUBE` stream, in order: what was published, for a run in which the core
/// subscription was cut off by a NATS outage.
pub async fn stream_messages(url: &str) -> Vec<Seen> {
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
pub fn version_key(s: &Seen) -> (String, u64, bool) {
    (s.uid.clone(), s.rv, s.deleted())
}

/// Within one run: no version twice, and per object versions only go up.
pub fn run_problems(run: &str, seen: &[Seen]) -> Vec<String> {
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

/// What a restart published beyond the changes made while down: repeats of what the stored
/// position covered (`saved_rv`, see [`stored_position`]) are problems, repeats of the rest
/// (what was in flight) are counted.
pub fn restart_problems(before: &[Seen], after: &[Seen], saved_rv: u64) -> (Vec<String>, usize) {
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
                    "published again although confirmed (up to {saved_rv}): {s:?}"
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
pub fn change_while_down(sim: &ApiServer, rng: &mut StdRng) -> Vec<(String, u64, &'static str)> {
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

/// One kill -9 and restart of [`crash_and_restart_cycles`].
#[derive(Debug, Clone, Copy)]
pub struct Cycle {
    /// Compact the history while kube2nats is down, forcing a relist.
    pub compact: bool,
    /// Restart nats-server half-way through the busy stream (while checkpoints are written);
    /// only in JetStream mode, and only in the first cycle (what was published before the kill
    /// is then read from the stream, which holds the whole history).
    pub nats_outage: bool,
}

/// The busy stream, the kill -9 at a seeded moment, changes while down, a restart (after
/// compaction when `compact`), and every check of the promise.
pub async fn crash_and_restart(mode: Mode, seed: u64, compact: bool) {
    let cycle = Cycle {
        compact,
        nats_outage: false,
    };
    crash_and_restart_cycles(mode, seed, &[cycle], 0).await;
}

/// What a test says about the run: a tally of repeats of the uncheckpointed tail.
#[derive(Debug, Default)]
pub struct CrashReport {
    pub messages: usize,
    pub tail_repeats: usize,
    pub changes_while_down: usize,
}

/// Runs `cycles` of a busy stream killed (-9) at a seeded moment, changes while down, and a
/// restart, on one simulator and one nats-server; a resumed watch first replays `replay` events
/// from before its version (as a lagging API server can). Panics naming the seed and cycle at
/// the first broken promise.
pub async fn crash_and_restart_cycles(
    mode: Mode,
    seed: u64,
    cycles: &[Cycle],
    replay: usize,
) -> CrashReport {
    println!("mode {mode:?}, seed {seed}, cycles {cycles:?}, replay {replay}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(mode, 100_000).await;
    if replay > 0 {
        cluster.sim.replay_on_resume(replay);
    }
    for i in 0..NAMES / 2 {
        cluster
            .sim
            .create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = cluster.config(PODS_WATCH, "");
    let mut daemon = Process::spawn(&config);
    converge(&cluster.sim, &recording).await;
    cluster
        .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
        .await;
    let mut report = CrashReport::default();
    let mut run_start = 0;
    for (i, cycle) in cycles.iter().enumerate() {
        assert!(!cycle.nats_outage || (i == 0 && mode == Mode::JetStream));
        // A busy stream, killed at a random moment.
        let ops = rng.random_range(20..300);
        for op in 0..ops {
            random_change(&cluster.sim, &mut rng, op);
            // ~2 ms per change on average: several checkpoints happen during the stream.
            tokio::time::sleep(Duration::from_micros(rng.random_range(0..4000))).await;
            if cycle.nats_outage && op == ops / 2 {
                cluster.nats.stop().await;
                tokio::time::sleep(Duration::from_millis(rng.random_range(100..1000))).await;
                cluster.nats.restart().await.unwrap();
            }
        }
        if cycle.nats_outage {
            // Checkpoints are written again after the outage.
            cluster
                .checkpoint_at_least(PODS_KEY, cluster.sim.resource_version())
                .await;
        }
        drop(daemon); // SIGKILL
        let before_len = recording.mark().await;
        // A NATS outage cuts the core subscription off for a while: what was published before
        // the kill is then read from the stream (which holds every acknowledged message).
        let before = if cycle.nats_outage {
            stream_messages(&cluster.nats.url()).await
        } else {
            recording.all()[..before_len].to_vec()
        };
        let this_run = if cycle.nats_outage {
            &before[..]
        } else {
            &before[run_start..]
        };
        let saved_rv = stored_position(&cluster, PODS_KEY)
            .await
            .expect("a checkpoint exists");
        let (next, problems, tail_repeats, changes, log) = check_restart(
            &cluster,
            &recording,
            &config,
            &mut rng,
            *cycle,
            (&before, this_run, before_len),
            saved_rv,
        )
        .await;
        println!(
            "cycle {i}: {} before the kill ({ops} ops), {tail_repeats} repeats of what was not confirmed (confirmed up to {saved_rv}), {changes} changes while down, compact {}",
            this_run.len(),
            cycle.compact,
        );
        assert!(
            problems.is_empty(),
            "mode {mode:?} seed {seed} cycle {i} ({cycle:?}): {} problem(s):\n{}\n--- log ---\n{log}",
            problems.len(),
            problems.join("\n")
        );
        if mode == Mode::JetStream {
            // Every repeat of the uncheckpointed tail carried the first publish's Nats-Msg-Id.
            let stored_twice = stored_more_than_once(&cluster.nats.url()).await;
            assert!(
                stored_twice.is_empty(),
                "mode {mode:?} seed {seed} cycle {i}: {stored_twice:?}"
            );
        }
        report.tail_repeats += tail_repeats;
        report.changes_while_down += changes;
        daemon = next;
        run_start = before_len;
    }
    report.messages = recording.all().len();
    report
}

/// Changes while down, the restart, and the checks of what it published: returns the restarted
/// daemon, the problems, the repeats of the uncheckpointed tail, the changes made and the log.
async fn check_restart(
    cluster: &Cluster,
    recording: &Recording,
    config: &str,
    rng: &mut StdRng,
    cycle: Cycle,
    (before, this_run, before_len): (&[Seen], &[Seen], usize),
    saved_rv: u64,
) -> (Process, Vec<String>, usize, usize, String) {
    let (sim, compact) = (&cluster.sim, cycle.compact);
    let changes = change_while_down(sim, rng);
    if compact {
        sim.compact();
    }
    sim.clear_requests();
    let daemon = Process::spawn(config);
    let after = &converge_after(sim, recording, before, before_len).await[..];
    let all: Vec<Seen> = before.iter().chain(after).cloned().collect();
    let log = daemon.rest();

    let mut problems = run_problems("before the kill", this_run);
    problems.extend(run_problems("after the restart", after));
    let (repeats, tail_repeats) = restart_problems(before, after, saved_rv);
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
    if compact && !after.iter().filter(|s| s.deleted()).all(|s| s.synthesized) {
        problems.push("deletions after a relist are marked synthesized".into());
    }
    let lists = cluster.lists(PODS_PATH);
    let watched_from = cluster.watch_versions(PODS_PATH);
    if compact {
        if lists == 0 || !log.contains("relisted and diffed against the saved objects") {
            problems.push(format!(
                "no relist diffed against the saved objects ({lists} lists)"
            ));
        }
    } else if lists != 0 || watched_from.first() != Some(&saved_rv.to_string()) {
        problems.push(format!(
            "did not resume from the confirmed version {saved_rv} without a list: {lists} lists, watched from {watched_from:?}"
        ));
    }
    if !log.contains("loaded saved state") {
        problems.push("no log line says the state was loaded".into());
    }
    (daemon, problems, tail_repeats, changes.len(), log)
}

/// The resourceVersion a restart of `key` (`{watch}.{namespace}`) resumes from: the latest
/// position the journal confirmed after the committed checkpoint, else the checkpoint's;
/// `None` when neither is stored.
pub async fn stored_position(cluster: &Cluster, key: &str) -> Option<u64> {
    use kube2nats::facade::SavedVersion;
    use kube2nats::facade::{decode_journal, JournalEntry};
    let key = cluster.owned(key);
    let manifest = cluster.manifest_at(&key).await;
    let mut position = manifest
        .as_ref()
        .map(|m| m.resume_version.parse::<u64>().unwrap());
    let mut next = manifest.map_or(0, |m| m.journal_next);
    // Killed before the bucket was made: nothing stored.
    let nc = async_nats::connect(cluster.nats.url()).await.unwrap();
    let Ok(kv) = async_nats::jetstream::new(nc).get_key_value(BUCKET).await else {
        return position;
    };
    while let Some(record) = kv.get(format!("{key}.j.{next}")).await.unwrap() {
        // The record names its target by the hash at bytes 13..21 (see state::codec).
        let identity = u64::from_le_bytes(record[13..21].try_into().unwrap());
        decode_journal(&record, next, identity, |entry| {
            if let JournalEntry::Position(SavedVersion::Number(n)) = entry {
                position = Some(position.map_or(n, |p| p.max(n)));
            }
        })
        .unwrap();
        next += 1;
    }
    position
}

/// Each (uid, version, deletion) the `KUBE` stream holds more than once, as a problem.
pub async fn stored_more_than_once(url: &str) -> Vec<String> {
    let mut counts: HashMap<_, usize> = HashMap::new();
    for s in stream_messages(url).await {
        *counts.entry(version_key(&s)).or_default() += 1;
    }
    counts
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(key, n)| format!("stored {n} times in the stream: {key:?}"))
        .collect()
}
