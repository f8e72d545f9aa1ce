//! A watch whose resource is served later, or stops being served: the real binary, a real
//! nats-server and the simulated API server, whose custom resources come and go as a CRD's do
//! in kube-apiserver (discovery lists the resource once the CRD is established; deleting the CRD
//! deletes every object first, then the resource leaves discovery and its paths answer 404).
//! docs/troubleshooting.md, "A watch waits for its resource".

// Multi-threaded: the log lines of the binary are awaited by blocking reads, while the
// simulator serves it from this runtime.

mod common;

use std::time::Duration;

use tokio::time::Instant;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use serde_json::{json, Value};

/// How soon a CRD created is followed, as docs/troubleshooting.md promises (discovery is polled
/// at 1 s doubling to 8 s).
const SERVED_WITHIN: Duration = Duration::from_secs(10);

fn widget(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"size": 1}})
}

/// kube2nats (the binary) watching pods and widgets in `default`, logging JSON lines.
struct Daemon {
    process: Process,
    http: String,
}

impl Daemon {
    fn spawn(sim: &ApiServer, nats: &NatsServer, dir: &tempfile::TempDir) -> Daemon {
        let token = token_file(dir.path(), INITIAL_TOKEN);
        let config = format!(
            "{}\n[nats]\nurl = \"{}\"\n\
             [[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n\
             [[watches]]\nname = \"widgets\"\nresource = \"widgets.example.com\"\nnamespaces = [\"default\"]\n",
            kube_section(sim, &token),
            nats.url()
        );
        let process = Process::spawn_with(&config, &["--log-format", "json"]);
        Daemon {
            http: process.http_url(),
            process,
        }
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let response = reqwest::get(format!("{}{path}", self.http))
            .await
            .expect("kube2nats HTTP endpoint");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    async fn served(&self, watch: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics").await;
        metric(&text, "kube2nats_watch_served", &[("watch", watch)])
    }

    /// Waits until `/readyz` answers `status` with a body containing `needle`.
    async fn readyz(&self, status: u16, needle: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let got = self.get("/readyz").await;
            if got.0 == status && got.1.contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz never answered {status} with {needle:?}; last: {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `kube2nats_watch_served{watch}` is `value`.
    async fn served_becomes(&self, watch: &str, value: f64) {
        let deadline = Instant::now() + WAIT;
        while self.served(watch).await != Some(value) {
            assert!(
                Instant::now() < deadline,
                "kube2nats_watch_served{{watch={watch:?}}} never became {value}: {:?}",
                self.served(watch).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn setup() -> (ApiServer, NatsServer, tempfile::TempDir, async_nats::Client) {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    (sim, nats, tempfile::tempdir().unwrap(), client)
}

/// Started before the CRD: the pods are published meanwhile, the widgets watch waits (one log
/// line, `watch_served` 0, `/readyz` names it); once the CRD is created its objects are
/// published within 10 s, and the metric and `/readyz` say so. (Before, kube2nats exited:
/// "unknown resource".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_waits_for_its_crd_and_starts_once_served() {
    let (sim, nats, dir, client) = setup().await;
    assert_eq!(sim.delete_crd("widgets"), 0);
    sim.create("pods", Some("default"), pod("a"));
    let mut pods = Inbox::subscribe(&client, "kube.core.v1.pods.>").await;
    let mut widgets = Inbox::subscribe(&client, "kube.example_com.v1.widgets.>").await;
    let daemon = Daemon::spawn(&sim, &nats, &dir);

    let line = daemon.process.line_with(&["resource not served yet"]);
    assert!(line.contains("\"watch\":\"widgets\""), "{line}");
    assert_eq!(pods.next().await.short(), "ADDED a");
    sim.create("pods", Some("default"), pod("b"));
    assert_eq!(pods.next().await.short(), "ADDED b");
    assert_eq!(daemon.served("widgets").await, Some(0.0));
    assert_eq!(daemon.served("pods").await, Some(1.0));
    daemon
        .readyz(503, "watch widgets: resource not served")
        .await;
    let (_, body) = daemon.get("/readyz").await;
    assert!(!body.contains("watch pods"), "pods are synced: {body}");

    sim.create_crd("widgets");
    let created = Instant::now();
    sim.create("widgets", Some("default"), widget("w1"));
    let added = widgets.next().await;
    let took = created.elapsed();
    assert_eq!(added.short(), "ADDED w1");
    assert_eq!(added.header("Kube-Kind"), Some("Widget"));
    println!("the first widget was published {took:?} after the CRD was created");
    assert!(took < SERVED_WITHIN, "published {took:?} after the CRD");
    daemon.served_becomes("widgets", 1.0).await;
    daemon.readyz(200, "ready").await;
    sim.create("widgets", Some("default"), widget("w2"));
    assert_eq!(widgets.next().await.short(), "ADDED w2");
    widgets.quiet_for(QUIET).await;
    pods.quiet_for(Duration::ZERO).await;
}

/// The CRD deleted with objects present: a DELETED for each (the API server's own events), the
/// watch marked unserved; created again: its objects are ADDED again, each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_crd_deletes_each_object_then_comes_back() {
    let (sim, nats, dir, client) = setup().await;
    sim.create("widgets", Some("default"), widget("w1"));
    sim.create("widgets", Some("default"), widget("w2"));
    let mut widgets = Inbox::subscribe(&client, "kube.example_com.v1.widgets.>").await;
    let daemon = Daemon::spawn(&sim, &nats, &dir);
    let mut added: Vec<String> = widgets.take(2).await.iter().map(Got::short).collect();
    added.sort();
    assert_eq!(added, ["ADDED w1", "ADDED w2"]);
    daemon.readyz(200, "ready").await;
    // Both watches open (pods, widgets): the API server's DELETED events reach kube2nats.
    assert!(sim.wait_for_watches(2, WAIT).await, "watches not open");

    assert_eq!(sim.delete_crd("widgets"), 2);
    let deleted = widgets.take(2).await;
    let mut names: Vec<String> = deleted.iter().map(Got::short).collect();
    names.sort();
    assert_eq!(names, ["DELETED w1", "DELETED w2"]);
    for message in &deleted {
        assert_eq!(message.header("Kube-Synthesized"), None, "{message:?}");
    }
    daemon.served_becomes("widgets", 0.0).await;
    daemon
        .readyz(503, "watch widgets: resource not served")
        .await;
    daemon
        .process
        .line_with(&["resource no longer served", "\"deleted\":0"]);

    sim.create_crd("widgets");
    let created = Instant::now();
    sim.create("widgets", Some("default"), widget("w1"));
    let back = widgets.next().await;
    let took = created.elapsed();
    assert_eq!(back.short(), "ADDED w1");
    println!("w1 was ADDED again {took:?} after the CRD was created again");
    assert!(took < SERVED_WITHIN, "published {took:?} after the CRD");
    daemon.served_becomes("widgets", 1.0).await;
    daemon.readyz(200, "ready").await;
    widgets.quiet_for(QUIET).await;
}

/// The CRD deleted while kube2nats could not watch (the API server unreachable): it missed the
/// DELETED events, so when it finds the resource gone it announces each object it had published
/// as deleted, `Kube-Synthesized: unserved`, and waits; the CRD back, a list ADDs what exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_a_crd_deleted_unseen_are_announced_deleted() {
    let (sim, nats, dir, client) = setup().await;
    sim.create("widgets", Some("default"), widget("w1"));
    sim.create("widgets", Some("default"), widget("w2"));
    let mut widgets = Inbox::subscribe(&client, "kube.example_com.v1.widgets.>").await;
    let daemon = Daemon::spawn(&sim, &nats, &dir);
    assert_eq!(widgets.take(2).await.len(), 2);
    daemon.readyz(200, "ready").await;

    sim.stop_serving().await;
    assert_eq!(sim.delete_crd("widgets"), 2);
    sim.resume_serving().await.unwrap();
    let deleted = widgets.take(2).await;
    let mut names: Vec<String> = deleted.iter().map(Got::short).collect();
    names.sort();
    assert_eq!(names, ["DELETED w1", "DELETED w2"]);
    for message in &deleted {
        assert_eq!(
            message.header("Kube-Synthesized"),
            Some("unserved"),
            "{message:?}"
        );
    }
    daemon
        .process
        .line_with(&["resource no longer served", "\"deleted\":2"]);
    daemon.served_becomes("widgets", 0.0).await;
    widgets.quiet_for(QUIET).await;

    sim.create_crd("widgets");
    sim.create("widgets", Some("default"), widget("w3"));
    let back = widgets.next().await;
    assert_eq!(back.short(), "ADDED w3");
    daemon.served_becomes("widgets", 1.0).await;
    widgets.quiet_for(QUIET).await;
}

/// The CRD deleted while kube2nats is stopped: at the next start the watch waits (its resource
/// not served), and once the CRD is back the objects its saved state holds are announced
/// DELETED, then what exists ADDED: nothing published before is left standing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_deleted_while_stopped_is_caught_up_when_it_returns() {
    let (sim, nats, dir, client) = setup().await;
    sim.create("widgets", Some("default"), widget("w1"));
    let mut widgets = Inbox::subscribe(&client, "kube.example_com.v1.widgets.>").await;
    let mut first = Daemon::spawn(&sim, &nats, &dir);
    assert_eq!(widgets.next().await.short(), "ADDED w1");
    first.readyz(200, "ready").await;
    first.process.terminate();
    assert_eq!(first.process.wait_exit(WAIT).0, Some(0));

    assert_eq!(sim.delete_crd("widgets"), 1);
    let second = Daemon::spawn(&sim, &nats, &dir);
    second.process.line_with(&["resource not served yet"]);
    second.served_becomes("widgets", 0.0).await;
    widgets.quiet_for(QUIET).await;

    sim.create_crd("widgets");
    sim.create("widgets", Some("default"), widget("w2"));
    // Two objects: no order between them is promised.
    let mut caught_up: Vec<String> = widgets.take(2).await.iter().map(Got::short).collect();
    caught_up.sort();
    assert_eq!(caught_up, ["ADDED w2", "DELETED w1"]);
    second.served_becomes("widgets", 1.0).await;
    widgets.quiet_for(QUIET).await;
}

/// The discovery requests kube2nats made of `sim` so far: `GET /api/v1`, `/apis`, `/apis/{group}`
/// and `/apis/{group}/{version}` (never a resource's own path).
fn discovery_requests(sim: &ApiServer) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "GET")
        .map(|r| r.path)
        .filter(|path| {
            let segments = path.split('/').filter(|s| !s.is_empty()).count();
            path == "/api/v1" || (path.starts_with("/apis") && segments <= 3)
        })
        .collect()
}

/// Discovery asks only what the watches need (docs/troubleshooting.md), on a server with
/// aggregated discovery (Kubernetes 1.26+) and on one without: at start, `/api/v1` for the pods
/// watch and `/apis` for the widgets watch, whose CRD is not installed (without aggregated
/// discovery also the versions of its group, which another CRD keeps served; nothing of the
/// other groups); the same for each retry while the widgets watch waits. Counted on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_asks_only_what_the_watches_need() {
    for aggregated_discovery in [true, false] {
        let sim = ApiServer::start(ApiServerOptions {
            aggregated_discovery,
            ..Default::default()
        })
        .await
        .unwrap();
        sim.delete_crd("widgets");
        let nats = NatsServer::start().await.unwrap();
        let client = async_nats::connect(nats.url()).await.unwrap();
        let mut widgets = Inbox::subscribe(&client, "kube.example_com.v1.widgets.>").await;
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon::spawn(&sim, &nats, &dir);
        daemon.process.line_with(&["resource not served yet"]);
        let at_start = discovery_requests(&sim);
        sim.clear_requests();
        // Retries at 1, 2 and 4 s.
        tokio::time::sleep(Duration::from_millis(7500)).await;
        let waiting = discovery_requests(&sim);
        sim.clear_requests();
        sim.create_crd("widgets");
        sim.create("widgets", Some("default"), widget("w1"));
        assert_eq!(widgets.next().await.short(), "ADDED w1");
        let arrived = discovery_requests(&sim);
        eprintln!(
            "aggregated discovery {aggregated_discovery}: at start {at_start:?}; while waiting {waiting:?}; once served {arrived:?}"
        );
        let per_retry: &[&str] = match aggregated_discovery {
            true => &["/apis"],
            false => &["/apis", "/apis/example.com/v1"],
        };
        assert_eq!(at_start, [&["/api/v1"], per_retry].concat());
        let retries = waiting.len() / per_retry.len();
        assert!((2..=4).contains(&retries), "{waiting:?}");
        assert_eq!(waiting, per_retry.repeat(retries));
        assert_eq!(arrived, per_retry);
    }
}
