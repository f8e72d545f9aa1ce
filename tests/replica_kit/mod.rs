//! The replica tests' kit: kube2nats replicas as real processes, a subscriber that attributes
//! every message to its publisher, a busy stream of pod changes, and waits on the Lease's holder.
//! Shared by `replicas.rs` and `replica_overlap.rs` (both include `common` too).

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;
use serde_json::Value;
use tokio::time::Instant;

use crate::common::{self, *};

/// The test timings: client-go's ratios and the default checkpoint interval, scaled down 5×.
pub const LEASE_DURATION: Duration = Duration::from_secs(3);
pub const LEADER_ELECTION: &str = "[leader_election]\nenabled = true\nnamespace = \"default\"\nlease_duration = \"3s\"\nrenew_deadline = \"2s\"\nretry_period = \"500ms\"\n[state]\ncheckpoint_interval = \"1s\"\n";

/// The watch every replica runs.
pub const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";

/// One replica: its process and HTTP port. Its name is its subject prefix and token suffix.
pub struct Replica {
    pub process: Process,
    pub port: u16,
    /// Its `holderIdentity`, as it logged it at start.
    pub identity: String,
}

/// The hostname of replicas started with [`Replica::start_on_shared_host`].
pub const SHARED_HOST: &str = "shared-host";

impl Replica {
    pub fn token(name: &str) -> String {
        format!("token-{name}")
    }

    /// A replica in a pod of its own: `POD_NAME` is `replica-<name>`.
    pub fn start(sim: &ApiServer, nats: &NatsServer, name: &'static str, mode: &str) -> Replica {
        let pod = format!("replica-{name}");
        Replica::start_with_env(sim, nats, name, mode, &[("POD_NAME", &pod)])
    }

    /// A replica without `POD_NAME` on a host it shares with the others (hostNetwork pods, or
    /// processes on one machine): only the hostname names it.
    pub fn start_on_shared_host(
        sim: &ApiServer,
        nats: &NatsServer,
        name: &'static str,
        mode: &str,
    ) -> Replica {
        let env = [("POD_NAME", ""), ("HOSTNAME", SHARED_HOST)];
        Replica::start_with_env(sim, nats, name, mode, &env)
    }

    fn start_with_env(
        sim: &ApiServer,
        nats: &NatsServer,
        name: &'static str,
        mode: &str,
        env: &[(&str, &str)],
    ) -> Replica {
        let dir = tempfile::tempdir().unwrap();
        let token = token_file(dir.path(), &Replica::token(name));
        let port = free_port();
        let config = format!(
            "{}\n[nats]\nurl = \"{}\"\nname = \"kube2nats-{name}\"\n{mode}\n[publish]\nsubject_prefix = \"{name}\"\n{LEADER_ELECTION}{PODS_WATCH}",
            kube_section(sim, &token).replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
            nats.url()
        );
        let process = Process::spawn_env(&config, &[], env);
        // The token file must outlive the process's reads of it.
        std::mem::forget(dir);
        let mut replica = Replica {
            process,
            port,
            identity: String::new(),
        };
        let line = replica.line(&["standby: waiting to acquire the Lease"]);
        replica.identity = line
            .split("identity=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no identity in {line:?}"))
            .to_owned();
        replica
    }

    /// Waits (off the async workers) for a log line with every needle.
    pub fn line(&self, needles: &[&str]) -> String {
        tokio::task::block_in_place(|| self.process.line_with(needles))
    }

    pub async fn http(&self, path: &str) -> Option<(u16, String)> {
        let response = reqwest::get(format!("http://127.0.0.1:{}{path}", self.port))
            .await
            .ok()?;
        Some((response.status().as_u16(), response.text().await.ok()?))
    }

    pub async fn metric(&self, name: &str) -> Option<f64> {
        metric(&self.http("/metrics").await?.1, name, &[])
    }

    /// The resourceVersion this replica resumed from when its term began (its log line saying
    /// it loaded the saved state): where the previous holder's last checkpoint stood.
    pub fn resumed_from(&self) -> u64 {
        let line = self.line(&["loaded saved state"]);
        line.split("resource_version=")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no resource_version in {line:?}"))
    }

    /// Waits until this replica has written a checkpoint, so that a takeover has state to load.
    pub async fn checkpointed(&self) {
        eventually_async("a checkpoint of the holder", || async {
            self.metric("kube2nats_state_checkpoints_total")
                .await
                .is_some_and(|n| n >= 1.0)
        })
        .await;
    }
}

/// One message as the subscriber received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The replica that published it (its subject prefix).
    pub publisher: String,
    pub event_type: String,
    pub uid: String,
    pub name: String,
    pub rv: u64,
    pub msg_id: String,
    pub at: Instant,
}

/// Every pod message of every replica, in the order the NATS server relayed them.
#[derive(Clone, Default)]
pub struct Subscriber {
    pub got: Arc<Mutex<Vec<Received>>>,
}

impl Subscriber {
    pub async fn start(nats: &NatsServer) -> Subscriber {
        let nc = async_nats::connect(nats.url()).await.unwrap();
        let mut sub = nc.subscribe("*.core.v1.pods.>").await.unwrap();
        kube2nats_harness::nats::round_trip(&nc).await.unwrap();
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
                    msg_id: header("Nats-Msg-Id"),
                    at,
                });
            }
        });
        subscriber
    }

    pub fn all(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The first message published by `publisher`, waiting for it until `within`.
    pub async fn first_from(&self, publisher: &str, within: Duration) -> Option<Received> {
        self.first_from_after(publisher, 0, within).await
    }

    /// The first message published by `publisher` after the first `skip` messages, waiting for
    /// it until `within`.
    pub async fn first_from_after(
        &self,
        publisher: &str,
        skip: usize,
        within: Duration,
    ) -> Option<Received> {
        let deadline = Instant::now() + within;
        loop {
            let all = self.all();
            if let Some(r) = all.iter().skip(skip).find(|r| r.publisher == publisher) {
                return Some(r.clone());
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
pub struct Change {
    pub event_type: &'static str,
    pub uid: String,
    pub name: String,
    pub rv: u64,
}

impl Change {
    pub fn of(event_type: &'static str, obj: &Value) -> Change {
        Change {
            event_type,
            uid: obj["metadata"]["uid"].as_str().unwrap().to_owned(),
            name: obj["metadata"]["name"].as_str().unwrap().to_owned(),
            rv: rv(obj).parse().unwrap(),
        }
    }
}

/// A busy stream: creates, updates and deletes of pods, one every few milliseconds, recorded.
pub struct Producer {
    pub stop: Arc<AtomicBool>,
    pub task: tokio::task::JoinHandle<Vec<Change>>,
    /// Set: the producer makes no change until it is cleared.
    paused: Arc<AtomicBool>,
    /// Whether the producer has seen `paused` (no change is in the making), and the
    /// resourceVersion of the last change it made.
    parked: Arc<AtomicBool>,
    last_rv: Arc<AtomicU64>,
}

impl Producer {
    pub fn start(sim: Arc<ApiServer>, mut changes: Vec<Change>) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let parked = Arc::new(AtomicBool::new(false));
        let last_rv = Arc::new(AtomicU64::new(0));
        let task = {
            let (stop, paused, parked, last_rv) = (
                stop.clone(),
                paused.clone(),
                parked.clone(),
                last_rv.clone(),
            );
            tokio::spawn(async move {
                let mut live: Vec<String> = changes.iter().map(|c| c.name.clone()).collect();
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    if paused.load(Ordering::SeqCst) {
                        parked.store(true, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(4)).await;
                        continue;
                    }
                    parked.store(false, Ordering::SeqCst);
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
                    last_rv.store(change.rv, Ordering::SeqCst);
                    changes.push(change);
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
                changes
            })
        };
        Producer {
            stop,
            task,
            paused,
            parked,
            last_rv,
        }
    }

    /// Stops making changes; returns, once none is in the making, the resourceVersion of the
    /// last one made.
    pub async fn pause(&self) -> u64 {
        self.paused.store(true, Ordering::SeqCst);
        while !self.parked.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.last_rv.load(Ordering::SeqCst)
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    pub async fn stop(self) -> Vec<Change> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

pub fn seed_pods(sim: &ApiServer, n: usize) -> Vec<Change> {
    (0..n)
        .map(|i| {
            Change::of(
                "ADDED",
                &sim.create("pods", Some("default"), pod(&format!("seed-{i}"))),
            )
        })
        .collect()
}

pub async fn simulator() -> Arc<ApiServer> {
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
pub async fn caught_up(sim: &ApiServer, subscriber: &Subscriber, changes: &[Change]) {
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

/// subjects (so that `Nats-Msg-Id` de-duplicates across them).
pub const CORE: &str = "";
pub const JETSTREAM: &str =
    "mode = \"jetstream\"\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"a.>\", \"b.>\", \"c.>\"]\n";

pub fn mode_name(mode: &str) -> &'static str {
    if mode.is_empty() {
        "core"
    } else {
        "jetstream"
    }
}

/// The index in `identities` of the Lease's holder as the API server has it, once it is not
/// `not` (and not empty), waiting for that until `within`.
pub async fn wait_for_holder(
    sim: &ApiServer,
    identities: &[&str],
    not: Option<usize>,
    within: Duration,
) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let holder = sim
            .get("leases", Some("default"), "kube2nats")
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let found = identities.iter().position(|i| *i == holder);
        if let Some(found) = found.filter(|h| Some(*h) != not) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no new holder within {within:?} (was {not:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `f` resolves to true, polling.
pub async fn eventually_async<F, Fut>(what: &str, mut f: F)
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

/// Samples every replica's `kube2nats_leader` gauge about every 20 ms, all replicas at once in
/// each round, to find two publishers at once as the metrics would show them.
pub struct LeaderGauges {
    /// The replicas' HTTP ports, by slot; a slot's port changes when its replica is restarted.
    ports: Arc<Mutex<Vec<u16>>>,
    /// One entry per round: each slot's reading (`None`: no answer, e.g. while restarting).
    rounds: Arc<Mutex<Vec<Vec<Option<bool>>>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderGauges {
    /// Samples the replicas listening on `ports` (their HTTP ports, by slot).
    pub fn start(ports: &[u16]) -> LeaderGauges {
        let ports = Arc::new(Mutex::new(ports.to_vec()));
        let rounds = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (ports, rounds, stop) = (ports.clone(), rounds.clone(), stop.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_millis(500))
                    .build()
                    .unwrap();
                while !stop.load(Ordering::SeqCst) {
                    let now: Vec<u16> = ports.lock().unwrap().clone();
                    let reads = now.iter().map(|port| {
                        let http = http.clone();
                        async move {
                            let url = format!("http://127.0.0.1:{port}/metrics");
                            let text = http.get(url).send().await.ok()?.text().await.ok()?;
                            metric(&text, "kube2nats_leader", &[]).map(|v| v == 1.0)
                        }
                    });
                    let round = futures_util::future::join_all(reads).await;
                    rounds.lock().unwrap().push(round);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        LeaderGauges {
            ports,
            rounds,
            stop,
            task,
        }
    }

    /// The replica in `slot` was restarted and listens on `port` now.
    pub fn replace(&self, slot: usize, port: u16) {
        self.ports.lock().unwrap()[slot] = port;
    }

    /// Stops sampling; returns (rounds in which two replicas published, rounds sampled). A round
    /// counts when two replicas read 1 both in it and in the next one: readings of one round are
    /// a few milliseconds apart, and a clean handover between them must not count, while two
    /// consecutive rounds with the same two leaders leave no other explanation.
    pub async fn stop(self) -> (usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let rounds = self.rounds.lock().unwrap().clone();
        let both = rounds
            .windows(2)
            .filter(|w| {
                let leading =
                    |r: &Vec<Option<bool>>, i: usize| r.get(i).copied().flatten() == Some(true);
                let steady = (0..w[0].len()).filter(|&i| leading(&w[0], i) && leading(&w[1], i));
                steady.count() >= 2
            })
            .count();
        (both, rounds.len())
    }
}
