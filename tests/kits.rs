//! The Rust subscriber kit (clients/rust) against kube-rs' own watcher: the same handler code
//! runs on the direct watch of the API server and on the kit reading kube2nats' mirror, and the
//! two stores must end equal to the API server's pods after churn, after a `kill -9` of
//! kube2nats with creates, updates and deletes while it is down, and after the subscriber was cut
//! off NATS for longer than the delete markers live while pods were deleted — each deletion
//! reported by the kit's handler. And a kube-runtime `Controller` on the kit's stream.
//!
//! Real parts: kube2nats, nats-server, the simulated API server ([`MirrorCluster`]). The
//! TypeScript and Python kits run the same scenario in their own runners
//! (clients/node/test, clients/python/tests) through the harness' `sim-cluster`.
//!
//! Needs nats-server: `scripts/install-test-tools nats-server`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{reflector, watcher, Controller, WatchStreamExt};
use kube2nats_harness::apiserver::{ApiServer, INITIAL_TOKEN};
use kube2nats_harness::cluster::MirrorCluster as Cluster;

/// How long the stores may take to equal the API server after the last change.
const SETTLE: Duration = Duration::from_secs(30);

/// A store as the handlers keep it: `namespace/name` → resourceVersion.
type Store = BTreeMap<String, String>;

async fn start_cluster() -> Cluster {
    Cluster::start(Path::new(env!("CARGO_BIN_EXE_kube2nats")))
        .await
        .expect("the mirror cluster starts")
}

/// The subscriber's run: synced, churn, kube2nats killed and restarted, the subscriber cut off.
async fn kit_equals_its_direct_informer(cluster: &mut Cluster, pair: &mut Pair) {
    equal(cluster, pair, "at start").await;

    let mut deleted = Vec::new();
    for i in 0..5 {
        cluster.update("shop", &format!("web-{i}"), "nginx:1.29");
    }
    deleted.push(delete(cluster, "shop", "web-5"));
    deleted.push(delete(cluster, "default", "db.v2-0"));
    cluster.create("shop", "web-30");
    // A new pod, not web-5 again: the bucket holds states, and a deletion followed at once by a
    // re-creation under the same key may reach it as one write (the put).
    cluster.create("shop", "web-31");
    deleted.push(delete(cluster, "shop", "web-6"));
    cluster.update("default", "db.v2-1", "postgres:17");
    equal(cluster, pair, "after churn").await;
    reported(pair, &deleted, "churn");

    // kube2nats killed (-9) while pods are created, changed and deleted, then started again.
    cluster.kill_daemon();
    let deleted = vec![delete(cluster, "shop", "web-9")];
    cluster.update("shop", "web-1", "nginx:1.33");
    cluster.create("default", "db.v2-10");
    cluster.start_daemon().expect("kube2nats starts again");
    equal(cluster, pair, "after kube2nats' kill -9").await;
    reported(pair, &deleted, "kill -9");

    // The subscriber cut off NATS while pods are deleted, until every delete marker (and the
    // server's marker after it) has expired: nothing in the bucket says they were there.
    cluster.gate.close();
    let deleted = vec![
        delete(cluster, "shop", "web-7"),
        delete(cluster, "default", "db.v2-3"),
    ];
    cluster.update("shop", "web-8", "nginx:1.31");
    cluster.create("default", "db.v2-20");
    cluster.converged(true).await.expect("the bucket converges");
    cluster.gate.open();
    equal(cluster, pair, "after the subscriber was cut off").await;
    reported(pair, &deleted, "cut off");
}

fn delete(cluster: &Cluster, ns: &str, name: &str) -> String {
    cluster.delete(ns, name).expect("the pod existed")
}

/// Waits until both stores equal the API server's pods.
async fn equal(cluster: &Cluster, pair: &mut Pair, when: &str) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let want = cluster.pods();
        let (direct, nats) = pair.stores().await;
        if direct == want && nats == want {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "{when}: the stores differ from the API server after {SETTLE:?}\napi    {want:?}\ndirect {direct:?}\nnats   {nats:?}\nlines:\n{}\nkube2nats:\n{}",
                pair.lines().join("\n"),
                cluster.daemon_log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each deletion (`DELETED ns/name rv`, the last version) was reported by the kit's handler.
fn reported(pair: &Pair, deleted: &[String], when: &str) {
    let lines = pair.lines();
    for deletion in deleted {
        let line = format!("nats {deletion}");
        assert!(
            lines.contains(&line),
            "{when}: the kit's handler never reported {deletion:?}\n{}",
            lines.join("\n")
        );
    }
}

// ---- Rust: kube-rs' watcher against kube2nats-client's, in this process ----

/// The handler both Rust informers run: watcher events applied to a store, each change a line.
/// A start's `Init … InitDone` is a relist: what it does not hold is deleted.
struct Handler {
    side: &'static str,
    seen: Arc<Mutex<Seen>>,
    /// The objects of a start, until its `InitDone`.
    relist: Option<Store>,
}

#[derive(Default)]
struct Seen {
    synced: bool,
    store: Store,
    lines: Vec<String>,
}

fn key_and_rv(pod: &Pod) -> (String, String) {
    let m = &pod.metadata;
    (
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        ),
        m.resource_version.clone().unwrap_or_default(),
    )
}

impl Handler {
    fn handle(&mut self, event: watcher::Event<Pod>) {
        let mut seen = self.seen.lock().expect("the handler's state");
        let seen = &mut *seen;
        let mut print = |line: String| seen.lines.push(format!("{} {line}", self.side));
        match event {
            watcher::Event::Init => self.relist = Some(Store::new()),
            watcher::Event::InitApply(pod) => {
                let (key, rv) = key_and_rv(&pod);
                self.relist.get_or_insert_default().insert(key, rv);
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                for (key, rv) in &seen.store {
                    if !fresh.contains_key(key) {
                        print(format!("DELETED {key} {rv}"));
                    }
                }
                for (key, rv) in &fresh {
                    match seen.store.get(key) {
                        None => print(format!("ADDED {key} {rv}")),
                        Some(old) if old != rv => print(format!("MODIFIED {key} {rv}")),
                        Some(_) => {}
                    }
                }
                if !seen.synced {
                    print(format!("synced {}", fresh.len()));
                }
                seen.store = fresh;
                seen.synced = true;
            }
            watcher::Event::Apply(pod) => {
                let (key, rv) = key_and_rv(&pod);
                let verb = if seen.store.contains_key(&key) {
                    "MODIFIED"
                } else {
                    "ADDED"
                };
                print(format!("{verb} {key} {rv}"));
                seen.store.insert(key, rv);
            }
            watcher::Event::Delete(pod) => {
                let (key, rv) = key_and_rv(&pod);
                print(format!("DELETED {key} {rv}"));
                seen.store.remove(&key);
            }
        }
    }
}

/// Runs `events` into a new handler of `side` on a task of its own.
fn run_handler<S>(side: &'static str, events: S) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>)
where
    S: Stream<Item = watcher::Result<watcher::Event<Pod>>> + Send + 'static,
{
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut handler = Handler {
        side,
        seen: seen.clone(),
        relist: None,
    };
    let task = tokio::spawn(events.for_each(move |event| {
        match event {
            Ok(event) => handler.handle(event),
            Err(e) => handler
                .seen
                .lock()
                .expect("the handler's state")
                .lines
                .push(format!("{side} ERROR {e}")),
        }
        futures_util::future::ready(())
    }));
    (seen, task)
}

/// A kube-rs client of the simulated API server.
fn kube_client(api: &ApiServer) -> kube::Client {
    let url = api.url().parse().expect("the API server's URL");
    let mut config = kube::Config::new(url);
    config.auth_info.token = Some(INITIAL_TOKEN.to_owned().into());
    kube::Client::try_from(config).expect("a kube-rs client")
}

async fn nats_client(cluster: &Cluster) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(cluster.subscriber_url())
        .await
        .expect("the subscriber connects to NATS")
}

/// A pair of informers of all pods running one handler: `direct` on the API server, `nats` on
/// the kit.
struct Pair {
    direct: Arc<Mutex<Seen>>,
    nats: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Pair {
    async fn start(cluster: &Cluster) -> Pair {
        let api = kube::Api::<Pod>::all(kube_client(&cluster.api));
        let direct = watcher(api, watcher::Config::default()).default_backoff();
        let (direct, direct_task) = run_handler("direct", direct);
        let kit = kube2nats_client::watcher::<Pod>(
            nats_client(cluster).await,
            kube2nats_client::Config::default(),
        );
        let (nats, nats_task) = run_handler("nats", kit);
        Pair {
            direct,
            nats,
            tasks: vec![direct_task, nats_task],
        }
    }

    /// `(direct, nats)`, once both have synced.
    async fn stores(&mut self) -> (Store, Store) {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            {
                let (direct, nats) = (
                    self.direct.lock().expect("direct"),
                    self.nats.lock().expect("nats"),
                );
                if direct.synced && nats.synced {
                    return (direct.store.clone(), nats.store.clone());
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not synced within {SETTLE:?}:\n{}",
                self.lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every line the handlers printed, `{side} {line}`.
    fn lines(&self) -> Vec<String> {
        let mut lines = self.direct.lock().expect("direct").lines.clone();
        lines.extend(self.nats.lock().expect("nats").lines.clone());
        lines
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_kit_equals_kube_rs_watcher() {
    let mut cluster = start_cluster().await;
    let mut pair = Pair::start(&cluster).await;
    kit_equals_its_direct_informer(&mut cluster, &mut pair).await;
}

/// A `Controller` on the kit's stream (`Controller::for_stream`, kube-runtime's
/// unstable-runtime feature) reconciles every pod after start and after each change (changes of
/// one pod close together may share a reconcile: the latest version is reconciled), and the
/// reflector store it reads equals the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_on_the_kit_reconciles_every_change() {
    let cluster = start_cluster().await;
    let (reader, writer) = reflector::store::<Pod>();
    let stream = reflector(
        writer,
        kube2nats_client::watcher::<Pod>(
            nats_client(&cluster).await,
            kube2nats_client::Config::default(),
        ),
    )
    .applied_objects();
    // namespace/name → every resourceVersion reconciled.
    let reconciled: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> = Arc::default();
    let controller = Controller::for_stream(stream, reader.clone())
        .run(
            |pod: Arc<Pod>, reconciled: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>| async move {
                let (key, rv) = key_and_rv(&pod);
                reconciled
                    .lock()
                    .expect("reconciled")
                    .entry(key)
                    .or_default()
                    .insert(rv);
                Ok::<_, std::convert::Infallible>(kube::runtime::controller::Action::await_change())
            },
            |_pod, _error, _ctx| kube::runtime::controller::Action::await_change(),
            reconciled.clone(),
        )
        .for_each(|_| futures_util::future::ready(()));
    let task = tokio::spawn(controller);

    let every_version_reconciled = |want: Store| {
        let reconciled = reconciled.clone();
        let reader = reader.clone();
        async move {
            let deadline = tokio::time::Instant::now() + SETTLE;
            loop {
                let missing: Vec<String> = {
                    let done = reconciled.lock().expect("reconciled");
                    want.iter()
                        .filter(|(key, rv)| !done.get(*key).is_some_and(|rvs| rvs.contains(*rv)))
                        .map(|(key, rv)| format!("{key} {rv}"))
                        .collect()
                };
                let store: Store = reader.state().iter().map(|p| key_and_rv(p)).collect();
                if missing.is_empty() && store == want {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "not reconciled: {missing:?}; the store {store:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    every_version_reconciled(cluster.pods()).await;
    cluster.update("shop", "web-1", "nginx:1.29");
    cluster.update("shop", "web-1", "nginx:1.30");
    delete(&cluster, "shop", "web-2");
    cluster.create("default", "db.v2-7");
    every_version_reconciled(cluster.pods()).await;
    task.abort();
}

/// Twenty services reading pods through the kit cost the API server nothing beyond kube2nats' own
/// list and watch: no list, no watch and no request more than before they started, while they
/// sync and follow changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kit_informers_cost_the_api_server_nothing_more() {
    const SERVICES: usize = 20;
    let cluster = start_cluster().await;
    let before = kube2nats_harness::cluster::pod_requests(&cluster.api);
    let mut stores = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..SERVICES {
        let (reader, writer) = reflector::store::<Pod>();
        let kit = kube2nats_client::watcher::<Pod>(
            nats_client(&cluster).await,
            kube2nats_client::Config::default(),
        );
        tasks.push(tokio::spawn(reflector(writer, kit).for_each(|_| async {})));
        stores.push(reader);
    }
    for i in 0..5 {
        cluster.update("shop", &format!("web-{i}"), "nginx:1.29");
    }
    delete(&cluster, "shop", "web-5");
    cluster.create("default", "db.v2-30");
    let want = cluster.pods();
    let deadline = tokio::time::Instant::now() + SETTLE;
    for store in &stores {
        loop {
            let have: Store = store.state().iter().map(|p| key_and_rv(p)).collect();
            if have == want {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a service's store {have:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let after = kube2nats_harness::cluster::pod_requests(&cluster.api);
    println!("{SERVICES} kit informers: the API server before {before}, after {after}");
    for count in ["pod_lists", "pod_watches"] {
        assert_eq!(
            after[count], before[count],
            "{count}: before {before}, after {after}"
        );
    }
    for task in tasks {
        task.abort();
    }
}
