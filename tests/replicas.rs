//! Replicas: two or three kube2nats share one Lease, only the holder publishes, and a holder lost
//! by kill -9, SIGTERM or a partition from the API server hands over without two publishers at
//! once and without losing a change.
//!
//! Real binaries, a real nats-server and the simulated API server (which serves Leases with
//! optimistic concurrency). Each replica publishes under its own subject prefix (`a.…`, `b.…`),
//! which is the only difference between their configurations, so one core subscription can
//! attribute every message to its publisher and see the order in which the NATS server relayed
//! them. Timings are short (lease 3 s, renew deadline 2 s, retry 0.5 s) so the tests are quick;
//! every wait is a wait-for-condition with a generous bound.
//!
//! Exactly once across a takeover needs durable state (the new holder resumes where the old one
//! checkpointed). Without it, the new holder relists and announces every object again as ADDED;
//! [`DURABLE_STATE`] says which of the two is asserted.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;
use serde_json::Value;
use tokio::time::Instant;

/// Whether kube2nats keeps durable state (`[state]`, loaded when a term starts). With it a
/// takeover publishes every change exactly once; without it, the new holder's relist repeats the
/// objects the old holder already announced (as ADDED of the same version) and misses deletions
/// made while nobody held the Lease. Switch this on when durable state is on main.
const DURABLE_STATE: bool = false;

/// The test timings: client-go's ratios, scaled down 5×.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const LEADER_ELECTION: &str = "[leader_election]\nenabled = true\nnamespace = \"default\"\nlease_duration = \"3s\"\nrenew_deadline = \"2s\"\nretry_period = \"500ms\"\n";

/// The watch every replica runs.
const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";

/// One replica: its process and HTTP port. Its name is its subject prefix and token suffix.
struct Replica {
    process: Process,
    port: u16,
}

impl Replica {
    fn token(name: &str) -> String {
        format!("token-{name}")
    }

    fn start(sim: &ApiServer, nats: &NatsServer, name: &'static str, mode: &str) -> Replica {
        let dir = tempfile::tempdir().unwrap();
        let token = token_file(dir.path(), &Replica::token(name));
        let port = free_port();
        let config = format!(
            "{}\n[nats]\nurl = \"{}\"\nname = \"kube2nats-{name}\"\n{mode}\n[publish]\nsubject_prefix = \"{name}\"\n{LEADER_ELECTION}{PODS_WATCH}",
            kube_section(sim, &token).replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
            nats.url()
        );
        let process = Process::spawn_env(&config, &[], &[("POD_NAME", &format!("replica-{name}"))]);
        // The token file must outlive the process's reads of it.
        std::mem::forget(dir);
        Replica { process, port }
    }

    /// Waits (off the async workers) for a log line with every needle.
    fn line(&self, needles: &[&str]) -> String {
        tokio::task::block_in_place(|| self.process.line_with(needles))
    }

    async fn http(&self, path: &str) -> Option<(u16, String)> {
        let response = reqwest::get(format!("http://127.0.0.1:{}{path}", self.port))
            .await
            .ok()?;
        Some((response.status().as_u16(), response.text().await.ok()?))
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        metric(&self.http("/metrics").await?.1, name, &[])
    }
}

/// One message as the subscriber received it.
#[derive(Debug, Clone)]
struct Received {
    /// The replica that published it (its subject prefix).
    publisher: String,
    event_type: String,
    uid: String,
    name: String,
    rv: u64,
    synthesized: bool,
    msg_id: String,
    at: Instant,
}

/// Every pod message of every replica, in the order the NATS server relayed them.
#[derive(Clone, Default)]
struct Subscriber {
    got: Arc<Mutex<Vec<Received>>>,
}

impl Subscriber {
    async fn start(nats: &NatsServer) -> Subscriber {
        let nc = async_nats::connect(nats.url()).await.unwrap();
        let mut sub = nc.subscribe("*.core.v1.pods.>").await.unwrap();
        nc.flush().await.unwrap();
        let subscriber = Subscriber::default();
        let got = subscriber.got.clone();
        tokio::spawn(async move {
            let _keep = nc;
            while let Some(msg) = sub.next().await {
                let at = Instant::now();
                let publisher = msg.subject.split('.').next().unwrap_or("").to_owned();
                let g = common::got(msg);
                let header = |n: &str| g.header(n).unwrap_or("").to_owned();
                got.lock().unwrap().push(Received {
                    publisher,
                    event_type: header("Kube-Event-Type"),
                    uid: header("Kube-Uid"),
                    name: header("Kube-Name"),
                    rv: header("Kube-Resource-Version").parse().unwrap_or(0),
                    synthesized: g.header("Kube-Synthesized") == Some("relist"),
                    msg_id: header("Nats-Msg-Id"),
                    at,
                });
            }
        });
        subscriber
    }

    fn all(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The first message published by `publisher`, waiting for it until `within`.
    async fn first_from(&self, publisher: &str, within: Duration) -> Option<Received> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(r) = self.all().into_iter().find(|r| r.publisher == publisher) {
                return Some(r);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// One change the producer made, as the API server reported it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Change {
    event_type: &'static str,
    uid: String,
    name: String,
    rv: u64,
}

impl Change {
    fn of(event_type: &'static str, obj: &Value) -> Change {
        Change {
            event_type,
            uid: obj["metadata"]["uid"].as_str().unwrap().to_owned(),
            name: obj["metadata"]["name"].as_str().unwrap().to_owned(),
            rv: rv(obj).parse().unwrap(),
        }
    }
}

/// A busy stream: creates, updates and deletes of pods, one every few milliseconds, recorded.
struct Producer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Change>>,
}

impl Producer {
    fn start(sim: Arc<ApiServer>, mut changes: Vec<Change>) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut live: Vec<String> = changes.iter().map(|c| c.name.clone()).collect();
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let change = match i % 7 {
                        0 | 3 => {
                            let name = format!("busy-{i}");
                            live.push(name.clone());
                            Change::of("ADDED", &sim.create("pods", Some("default"), pod(&name)))
                        }
                        5 if live.len() > 10 => {
                            let name = live.remove((i as usize * 13) % live.len());
                            let gone = sim.delete("pods", Some("default"), &name).unwrap();
                            Change::of("DELETED", &gone)
                        }
                        _ => {
                            let name = live[(i as usize * 7) % live.len()].clone();
                            let obj = sim.update("pods", Some("default"), &name, |o| {
                                o["metadata"]["labels"]["step"] = Value::from(i.to_string());
                            });
                            Change::of("MODIFIED", &obj)
                        }
                    };
                    changes.push(change);
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
                changes
            })
        };
        Producer { stop, task }
    }

    async fn stop(self) -> Vec<Change> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

fn seed(sim: &ApiServer, n: usize) -> Vec<Change> {
    (0..n)
        .map(|i| {
            Change::of(
                "ADDED",
                &sim.create("pods", Some("default"), pod(&format!("seed-{i}"))),
            )
        })
        .collect()
}

async fn simulator() -> Arc<ApiServer> {
    let sim = ApiServer::start(ApiServerOptions {
        history_limit: 1_000_000,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.set_valid_tokens(&["test-token", "token-a", "token-b", "token-c"]);
    Arc::new(sim)
}

/// Waits until the last published version of every live pod is its current one (the stream has
/// caught up), then gives stragglers a moment.
async fn caught_up(sim: &ApiServer, subscriber: &Subscriber, changes: &[Change]) {
    let names: HashSet<&str> = changes.iter().map(|c| c.name.as_str()).collect();
    let deadline = Instant::now() + WAIT * 3;
    loop {
        let latest: HashMap<String, u64> = subscriber
            .all()
            .into_iter()
            .map(|r| (r.name, r.rv))
            .collect();
        let behind: Vec<&str> = names
            .iter()
            .filter(|n| {
                sim.get("pods", Some("default"), n)
                    .is_some_and(|o| latest.get(**n) != Some(&rv(&o).parse().unwrap()))
            })
            .copied()
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} live pod(s) never published at their current version, e.g. {:?}",
            behind.len(),
            &behind[..behind.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The delivery promise across takeovers, for messages `got` and the changes actually made:
/// - publishers take turns: the messages of one term never interleave with another's (no
///   interval with two publishers), and `terms` lists the publishers in order;
/// - every message is a change that happened, per-object versions never go backwards;
/// - nothing lost: every live object's current version was published;
/// - with durable state, every change exactly once; without, a repeat is only an ADDED from a
///   relist by a later holder, of a version already published.
fn assert_delivery(got: &[Received], changes: &[Change], terms: &[&str]) {
    let mut runs: Vec<&str> = Vec::new();
    for r in got {
        if runs.last() != Some(&r.publisher.as_str()) {
            runs.push(&r.publisher);
        }
    }
    assert_eq!(
        runs, terms,
        "publishers must take turns, one term each, never interleaved"
    );

    let made: HashSet<(&str, u64)> = changes.iter().map(|c| (c.uid.as_str(), c.rv)).collect();
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut seen: HashMap<(&str, u64, bool), &Received> = HashMap::new();
    let mut repeats = 0;
    for r in got {
        assert!(
            made.contains(&(r.uid.as_str(), r.rv)),
            "published a version that never existed: {r:?}"
        );
        // A DELETED synthesized by a new holder's relist carries the last version its saved
        // state knows, which may be older than one the old holder published after its last
        // checkpoint.
        let synthesized_delete = r.event_type == "DELETED" && r.synthesized;
        let before = last.insert(&r.uid, r.rv).unwrap_or(0);
        assert!(
            before <= r.rv || synthesized_delete,
            "order broken for {}: {before} then {r:?}",
            r.name
        );
        if let Some(first) = seen.insert((&r.uid, r.rv, r.event_type == "DELETED"), r) {
            repeats += 1;
            if DURABLE_STATE {
                panic!("published twice with durable state: {first:?} and {r:?}");
            }
            // The new holder's relist announces again, at the same version (and Nats-Msg-Id),
            // what the old one published after its last checkpoint: an object (ADDED, or
            // MODIFIED against the journal's first version) or a journaled deletion.
            assert!(
                r.synthesized && r.publisher != first.publisher && r.msg_id == first.msg_id,
                "a repeat must be the relist of a new holder announcing an unchanged object: first {first:?}, again {r:?}"
            );
        }
    }
    if DURABLE_STATE {
        let published: HashSet<(&str, u64)> = got.iter().map(|r| (r.uid.as_str(), r.rv)).collect();
        let missing: Vec<&Change> = changes
            .iter()
            .filter(|c| !published.contains(&(c.uid.as_str(), c.rv)))
            .collect();
        assert!(missing.is_empty(), "changes never published: {missing:?}");
    }
    eprintln!(
        "delivery: {} messages for {} changes, {repeats} repeat(s) from relists, terms {terms:?}",
        got.len(),
        changes.len()
    );
}

/// Every live object at the end was published at its current version (the final state reached
/// subscribers whoever published it).
fn assert_final_state(sim: &ApiServer, got: &[Received], changes: &[Change]) {
    let latest: HashMap<&str, u64> = got.iter().map(|r| (r.uid.as_str(), r.rv)).collect();
    let names: BTreeMap<&str, &str> = changes
        .iter()
        .map(|c| (c.name.as_str(), c.uid.as_str()))
        .collect();
    for (name, _) in names {
        if let Some(obj) = sim.get("pods", Some("default"), name) {
            let uid = obj["metadata"]["uid"].as_str().unwrap();
            let current: u64 = rv(&obj).parse().unwrap();
            assert_eq!(
                latest.get(uid),
                Some(&current),
                "{name}: current version not published"
            );
        }
    }
}

/// Two replicas, `a` the holder and `b` the standby, with a subscriber and a busy stream running.
struct Pair {
    sim: Arc<ApiServer>,
    nats: NatsServer,
    subscriber: Subscriber,
    a: Replica,
    b: Replica,
    producer: Producer,
}

impl Pair {
    async fn start(mode: &str) -> Pair {
        let sim = simulator().await;
        let nats = NatsServer::start().await.unwrap();
        let subscriber = Subscriber::start(&nats).await;
        let changes = seed(&sim, 20);
        let a = Replica::start(&sim, &nats, "a", mode);
        a.line(&["acquired the Lease"]);
        a.line(&["synced"]);
        let b = Replica::start(&sim, &nats, "b", mode);
        b.line(&["held by another replica", "replica-a"]);
        let producer = Producer::start(sim.clone(), changes);
        Pair {
            sim,
            nats,
            subscriber,
            a,
            b,
            producer,
        }
    }

    /// Lets the new holder work for a moment, stops the stream, waits until it is published, and
    /// checks the delivery promise for the terms `a` then `b`; returns what was received.
    async fn finish(self) -> (Vec<Received>, NatsServer) {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let changes = self.producer.stop().await;
        caught_up(&self.sim, &self.subscriber, &changes).await;
        let got = self.subscriber.all();
        assert_delivery(&got, &changes, &["a", "b"]);
        assert_final_state(&self.sim, &got, &changes);
        (got, self.nats)
    }
}

/// Two replicas on a busy stream; kill -9 of the holder. The standby is ready and publishes
/// nothing while it waits; it takes over within lease duration + 5 s; the two never publish at
/// the same time, nothing is lost, order holds per object. `mode` is `""` (core) or the
/// JetStream settings, in which case the stream holds each distinct `Nats-Msg-Id` once.
async fn kill_9_of_the_holder(mode: &str) -> Duration {
    let mut pair = Pair::start(mode).await;
    let (a, b) = (&mut pair.a, &pair.b);
    eventually_async("the standby to be ready", || async {
        b.http("/readyz").await.is_some_and(|(code, _)| code == 200)
    })
    .await;
    assert_eq!(b.metric("kube2nats_leader").await, Some(0.0));
    assert_eq!(a.metric("kube2nats_leader").await, Some(1.0));

    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.process.kill();
    let killed = Instant::now();
    b.line(&["acquired the Lease"]);
    let acquired = killed.elapsed();
    let first = pair
        .subscriber
        .first_from("b", LEASE_DURATION + Duration::from_secs(5))
        .await
        .expect("the standby publishes within lease duration + 5 s");
    let takeover = first.at.duration_since(killed);
    let kind = if mode.is_empty() { "core" } else { "jetstream" };
    eprintln!(
        "kill -9 takeover ({kind}): acquired after {acquired:?}, first publish after {takeover:?}"
    );
    assert!(
        takeover <= LEASE_DURATION + Duration::from_secs(5),
        "{takeover:?}"
    );
    assert_eq!(
        b.metric("kube2nats_leader_transitions_total").await,
        Some(1.0)
    );
    let (got, nats) = pair.finish().await;

    if !mode.is_empty() {
        let nc = async_nats::connect(nats.url()).await.unwrap();
        let mut stream = async_nats::jetstream::new(nc)
            .get_stream("KUBE")
            .await
            .unwrap();
        let ids: HashSet<&str> = got.iter().map(|r| r.msg_id.as_str()).collect();
        assert_eq!(
            stream.info().await.unwrap().state.messages,
            ids.len() as u64,
            "the stream holds each Nats-Msg-Id once"
        );
    }
    takeover
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_holder_hands_over_within_lease_duration_plus_5s_core() {
    kill_9_of_the_holder("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_holder_hands_over_within_lease_duration_plus_5s_jetstream() {
    kill_9_of_the_holder(
        "mode = \"jetstream\"\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"a.>\", \"b.>\", \"c.>\"]\n",
    )
    .await;
}

/// SIGTERM of the holder during a busy stream: it settles, releases the Lease, exits 0, and the
/// standby publishes within 3 s; nothing is lost and the two never publish at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_holder_hands_over_within_3s() {
    let mut pair = Pair::start("").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    pair.a.process.terminate();
    let terminated = Instant::now();
    let first = pair
        .subscriber
        .first_from("b", Duration::from_secs(10))
        .await
        .expect("the standby takes over");
    let takeover = first.at.duration_since(terminated);
    let a = &mut pair.a;
    let (code, _) = tokio::task::block_in_place(|| a.process.wait_exit(Duration::from_secs(10)));
    assert_eq!(code, Some(0), "log:\n{}", a.process.rest());
    eprintln!("SIGTERM takeover: first publish after {takeover:?}");
    assert!(takeover <= Duration::from_secs(3), "{takeover:?}");
    pair.finish().await;
}

/// The holder alone loses the API server (its requests get no answer; its open watch keeps
/// delivering events, so it has something to publish): it stops publishing at its renew deadline,
/// before the standby can acquire, and stays a standby once reconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_cut_off_from_the_api_server_stops_publishing_before_the_other_acquires() {
    let pair = Pair::start("").await;
    let (a, subscriber) = (&pair.a, &pair.subscriber);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    pair.sim.cut_off(&Replica::token("a"));
    let cut = Instant::now();
    a.line(&["could not renew the Lease within the renew deadline"]);
    let stood_down = cut.elapsed();
    let first_b = subscriber
        .first_from("b", Duration::from_secs(15))
        .await
        .expect("the standby takes over");
    let last_a = subscriber
        .all()
        .into_iter()
        .rfind(|r| r.publisher == "a")
        .expect("a published");
    eprintln!(
        "partition: a stood down {stood_down:?} after the cut; a's last publish {:?} after the cut, b's first {:?} after the cut (gap {:?})",
        last_a.at.saturating_duration_since(cut),
        first_b.at.duration_since(cut),
        first_b.at.duration_since(last_a.at)
    );
    assert!(last_a.at < first_b.at, "a published after b started");
    assert_eq!(a.metric("kube2nats_leader").await, Some(0.0));
    assert!(a.metric("kube2nats_lease_renew_failures_total").await >= Some(1.0));

    pair.sim.reconnect(&Replica::token("a"));
    a.line(&["held by another replica", "replica-b"]);
    pair.finish().await;
}

/// Three replicas, the holder killed (-9) again and again while the stream is busy, each killed
/// replica restarted: every takeover within lease duration + 5 s, the publishers take turns, and
/// the delivery promise holds across all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_with_repeated_kills_take_turns_and_lose_nothing() {
    let sim = simulator().await;
    let nats = NatsServer::start().await.unwrap();
    let subscriber = Subscriber::start(&nats).await;
    let changes = seed(&sim, 20);
    let names = ["a", "b", "c"];
    let mut replicas: Vec<Replica> = Vec::new();
    for name in names {
        replicas.push(Replica::start(&sim, &nats, name, ""));
    }
    let producer = Producer::start(sim.clone(), changes);
    let mut terms: Vec<&str> = Vec::new();
    let mut takeovers = Vec::new();
    for round in 0..4 {
        let holder = wait_for_holder(&sim).await;
        let index = names.iter().position(|n| *n == holder).unwrap();
        if terms.last() != Some(&names[index]) {
            terms.push(names[index]);
        }
        subscriber
            .first_from(names[index], WAIT)
            .await
            .expect("the holder publishes");
        tokio::time::sleep(Duration::from_millis(800)).await;
        replicas[index].process.kill();
        let killed = Instant::now();
        let published_before = subscriber.all().len();
        let next = loop {
            let h = wait_for_holder(&sim).await;
            if h != holder {
                break h;
            }
            assert!(
                killed.elapsed() < LEASE_DURATION + Duration::from_secs(5),
                "no takeover"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let first = loop {
            let all = subscriber.all();
            if let Some(r) = all[published_before..].iter().find(|r| r.publisher == next) {
                break r.clone();
            }
            assert!(
                killed.elapsed() < LEASE_DURATION + Duration::from_secs(5),
                "round {round}: {next} never published"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        takeovers.push(first.at.duration_since(killed));
        // The killed replica comes back as a standby, as its pod's container would.
        replicas[index] = Replica::start(&sim, &nats, names[index], "");
    }
    let holder = wait_for_holder(&sim).await;
    terms.push(names[names.iter().position(|n| *n == holder).unwrap()]);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let changes = producer.stop().await;
    caught_up(&sim, &subscriber, &changes).await;
    let got = subscriber.all();
    terms.dedup();
    assert_delivery(&got, &changes, &terms);
    assert_final_state(&sim, &got, &changes);
    takeovers.sort();
    eprintln!(
        "three replicas: takeovers {takeovers:?} (median {:?}, max {:?})",
        takeovers[takeovers.len() / 2],
        takeovers.last().unwrap()
    );
}

/// The Lease's holder as the API server has it (`a`, `b` or `c`); waits while it has none.
async fn wait_for_holder(sim: &ApiServer) -> &'static str {
    let deadline = Instant::now() + WAIT;
    loop {
        let holder = sim
            .get("leases", Some("default"), "kube2nats")
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
            .unwrap_or_default();
        match holder.as_str() {
            "replica-a" => return "a",
            "replica-b" => return "b",
            "replica-c" => return "c",
            _ => {}
        }
        assert!(Instant::now() < deadline, "no holder");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `f` resolves to true, polling.
async fn eventually_async<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
