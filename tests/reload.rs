//! Reloading the configuration while changes flow: the real binary, a real nats-server and the
//! simulated API server. The file is changed as Kubernetes changes a mounted ConfigMap (a new
//! data directory, then the `..data` symlink swapped to it) or rewritten in place (a new file
//! renamed over it), and SIGHUP asks for a reload. docs/configuration.md, "Reloading the
//! configuration".

// Multi-threaded: the log lines of the binary are awaited by blocking reads, while the
// simulator serves it and the changes flow from this runtime.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use serde_json::json;

/// How often the flowing watch's object changes.
const STEP: Duration = Duration::from_millis(20);

struct Setup {
    sim: Arc<ApiServer>,
    nats: NatsServer,
    client: async_nats::Client,
    dir: tempfile::TempDir,
    /// `[kubernetes]`, `[http]`, `[shutdown]` and `[nats]`: everything but the watches.
    settings: String,
}

async fn setup() -> Setup {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let settings = format!(
        "{}\n[nats]\nurl = \"{}\"\n",
        kube_section(&sim, &token),
        nats.url()
    );
    Setup {
        sim: Arc::new(sim),
        nats,
        client,
        dir,
        settings,
    }
}

/// A `[[watches]]` entry in `default`, with extra lines.
fn watch(name: &str, resource: &str, extra: &str) -> String {
    format!("[[watches]]\nname = \"{name}\"\nresource = \"{resource}\"\nnamespaces = [\"default\"]\n{extra}")
}

/// kube2nats (the binary) reading `path`, logging JSON lines.
struct Daemon {
    process: Process,
}

impl Daemon {
    fn spawn(path: &Path) -> Daemon {
        let process = Process::spawn_file(path, |command| {
            command.args(["--log-format", "json"]);
        });
        process.http_url();
        Daemon { process }
    }

    async fn metrics(&self) -> String {
        self.process.metrics().await
    }

    async fn reloads(&self, result: &str) -> Option<f64> {
        let text = self.metrics().await;
        metric(
            &text,
            "kube2nats_config_reloads_total",
            &[("result", result)],
        )
    }

    fn hangup(&self) {
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &self.process.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(sent, "kill -HUP");
    }
}

/// Changes to pod `p` in `default`, one every [`STEP`], until stopped: the resourceVersion of
/// each, in order.
struct Flow {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Flow {
    fn start(sim: &Arc<ApiServer>) -> Flow {
        let (sim, stop) = (sim.clone(), Arc::new(AtomicBool::new(false)));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut versions = Vec::new();
            for step in 0u64.. {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let changed = sim.update("pods", Some("default"), "p", |pod| {
                    pod["metadata"]["labels"]["step"] = json!(step.to_string());
                });
                versions.push(rv(&changed));
                tokio::time::sleep(STEP).await;
            }
            versions
        });
        Flow { stop, task }
    }

    async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the flow of changes")
    }
}

/// The requests for pods the API server has answered so far (lists and watches).
fn pod_requests(sim: &ApiServer) -> usize {
    let requests = sim.requests();
    requests
        .iter()
        .filter(|r| r.path.ends_with("/pods"))
        .count()
}

/// Asserts that `pods` carries the ADDED of `p` at `added`, then a MODIFIED for each of
/// `changes`, each once and in order, and nothing more.
async fn every_change_once(pods: &mut Inbox, added: &str, changes: &[String]) {
    assert!(
        changes.len() > 20,
        "too few changes flowed: {}",
        changes.len()
    );
    let expected: Vec<String> = std::iter::once(format!("ADDED {added}"))
        .chain(changes.iter().map(|v| format!("MODIFIED {v}")))
        .collect();
    let got: Vec<String> = pods
        .take(expected.len())
        .await
        .iter()
        .map(|m| {
            format!(
                "{} {}",
                m.header("Kube-Event-Type").unwrap_or("?"),
                m.header("Kube-Resource-Version").unwrap_or("?")
            )
        })
        .collect();
    assert_eq!(got, expected);
    pods.quiet_for(QUIET).await;
}

/// A directory laid out as the kubelet mounts a ConfigMap: `name` a symlink to `..data/name`,
/// `..data` a symlink to the current timestamped directory, swapped atomically on update.
struct ConfigMapMount {
    dir: PathBuf,
    name: &'static str,
    version: u32,
}

impl ConfigMapMount {
    fn new(parent: &Path, contents: &str) -> ConfigMapMount {
        let dir = parent.join("config");
        std::fs::create_dir(&dir).unwrap();
        let mut mount = ConfigMapMount {
            dir,
            name: "kube2nats.toml",
            version: 0,
        };
        mount.update(contents);
        std::os::unix::fs::symlink(
            Path::new("..data").join(mount.name),
            mount.dir.join(mount.name),
        )
        .unwrap();
        mount
    }

    fn path(&self) -> PathBuf {
        self.dir.join(self.name)
    }

    /// Writes a new data directory, then swaps `..data` to it by renaming a new symlink over
    /// it, as the kubelet's atomic writer does.
    fn update(&mut self, contents: &str) {
        self.version += 1;
        let data = format!("..2026_11_27_v{}", self.version);
        std::fs::create_dir(self.dir.join(&data)).unwrap();
        std::fs::write(self.dir.join(&data).join(self.name), contents).unwrap();
        let staged = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&data, &staged).unwrap();
        std::fs::rename(&staged, self.dir.join("..data")).unwrap();
    }
}

/// Rewrites `path` in place as an editor or `kubectl cp` would not tear it: a new file renamed
/// over the old one.
fn replace_file(path: &Path, contents: &str) {
    let staged = path.with_extension("new");
    std::fs::write(&staged, contents).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// A ConfigMap update adds a watch (widgets), removes one (configmaps) and changes one
/// (deployments, to another subject) while pod `p` changes every 20 ms: the pods watch, not
/// touched by the reload, publishes every change exactly once and in order across it; the added
/// watch publishes, the removed one no longer does, the changed one follows its new subject
/// without re-publishing what it had published. (Before, the file was read at start only.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_removes_and_changes_watches_while_another_publishes_each_change_once() {
    let s = setup().await;
    let pod = s.sim.create("pods", Some("default"), pod("p"));
    s.sim.create(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c1"}}),
    );
    s.sim.create(
        "deployments",
        Some("default"),
        json!({"metadata": {"name": "d1"}, "spec": {"replicas": 1}}),
    );
    s.sim.create(
        "widgets",
        Some("default"),
        json!({"metadata": {"name": "w1"}, "spec": {"size": 1}}),
    );
    let mut pods = Inbox::subscribe(&s.client, "kube.core.v1.pods.>").await;
    let mut configmaps = Inbox::subscribe(&s.client, "kube.core.v1.configmaps.>").await;
    let mut deployments = Inbox::subscribe(&s.client, "kube.apps.v1.deployments.>").await;
    let mut moved = Inbox::subscribe(&s.client, "moved.>").await;
    let mut widgets = Inbox::subscribe(&s.client, "kube.example_com.v1.widgets.>").await;
    let before = format!(
        "{}{}{}{}",
        s.settings,
        watch("pods", "pods", ""),
        watch("configmaps", "configmaps", ""),
        watch("deployments", "deployments.apps", "")
    );
    let mut mount = ConfigMapMount::new(s.dir.path(), &before);
    let daemon = Daemon::spawn(&mount.path());
    assert_eq!(configmaps.next().await.short(), "ADDED c1");
    assert_eq!(deployments.next().await.short(), "ADDED d1");
    assert!(s.sim.wait_for_watches(3, WAIT).await, "watches not open");
    let flow = Flow::start(&s.sim);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let after = format!(
        "{}{}{}{}",
        s.settings,
        watch("pods", "pods", ""),
        watch(
            "deployments",
            "deployments.apps",
            "subject = \"moved.{namespace}.{name}.{type}\"\n"
        ),
        watch("widgets", "widgets.example.com", "")
    );
    let pods_requests = pod_requests(&s.sim);
    assert!(
        pods_requests >= 2,
        "the pods list and watch: {pods_requests}"
    );
    mount.update(&after);
    let swapped = tokio::time::Instant::now();
    let line = daemon
        .process
        .line_with(&["configuration reloaded: applying the watch changes"]);
    assert!(
        line.contains(r#"added":"[\"widgets\"]"#)
            && line.contains(r#"removed":"[\"configmaps\"]"#)
            && line.contains(r#"changed":"[\"deployments\"]"#),
        "{line}"
    );
    assert_eq!(widgets.next().await.short(), "ADDED w1");
    println!(
        "the added watch published {:?} after the ConfigMap's symlink swap",
        swapped.elapsed()
    );
    s.sim.create(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c2"}}),
    );
    let d1 = s.sim.update("deployments", Some("default"), "d1", |d| {
        d["spec"]["replicas"] = json!(2);
    });
    let modified = moved.next().await;
    assert_eq!(modified.short(), "MODIFIED d1");
    assert_eq!(modified.header("Kube-Resource-Version"), Some(&*rv(&d1)));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let changes = flow.stop().await;
    println!(
        "{} changes of pod p flowed across the reload",
        changes.len()
    );
    // The pods watch was not touched: no list, no new watch request, one stream throughout.
    assert_eq!(pod_requests(&s.sim), pods_requests);
    every_change_once(&mut pods, &rv(&pod), &changes).await;
    configmaps.quiet_for(Duration::ZERO).await;
    deployments.quiet_for(Duration::ZERO).await;
    moved.quiet_for(Duration::ZERO).await;
    widgets.quiet_for(Duration::ZERO).await;
    assert_eq!(daemon.reloads("applied").await, Some(1.0));
    assert_eq!(daemon.reloads("invalid").await, Some(0.0));
    // The removed watch's gauges are gone (no alert reads it as unsynced); the others report.
    let text = daemon.metrics().await;
    let synced = |watch| metric(&text, "kube2nats_watch_synced", &[("watch", watch)]);
    assert_eq!(synced("configmaps"), None, "{text}");
    assert_eq!(synced("pods"), Some(1.0));
    assert_eq!(synced("deployments"), Some(1.0));
    assert_eq!(synced("widgets"), Some(1.0));
}

/// An invalid file is refused (one line naming the key, counted) and everything keeps running;
/// a valid one then adds a watch and names the setting that needs a restart; SIGHUP re-reads an
/// unchanged file. Pod `p` changes all along and each change is published exactly once. (Before,
/// SIGHUP ended the process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_leaves_everything_running_and_sighup_reloads() {
    let s = setup().await;
    let pod = s.sim.create("pods", Some("default"), pod("p"));
    s.sim.create(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c1"}}),
    );
    let mut pods = Inbox::subscribe(&s.client, "kube.core.v1.pods.>").await;
    let mut configmaps = Inbox::subscribe(&s.client, "kube.core.v1.configmaps.>").await;
    let path = s.dir.path().join("kube2nats.toml");
    std::fs::write(
        &path,
        format!("{}{}", s.settings, watch("pods", "pods", "")),
    )
    .unwrap();
    let daemon = Daemon::spawn(&path);
    assert!(s.sim.wait_for_watches(1, WAIT).await, "watch not open");
    let flow = Flow::start(&s.sim);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let invalid = format!(
        "{}{}",
        s.settings,
        watch("pods", "pods", "events = [\"CREATED\"]\n")
    );
    replace_file(&path, &invalid);
    let line = daemon
        .process
        .line_with(&["configuration reload refused", "watches[0].events"]);
    assert!(line.contains("\"level\":\"ERROR\""), "{line}");
    assert_eq!(daemon.reloads("invalid").await, Some(1.0));
    let successful = |text: &str| metric(text, "kube2nats_config_last_reload_successful", &[]);
    assert_eq!(successful(&daemon.metrics().await), Some(0.0));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let valid = format!(
        "{}{}{}",
        s.settings
            .replace("grace_period = \"5s\"", "grace_period = \"6s\""),
        watch("pods", "pods", ""),
        watch("configmaps", "configmaps", "")
    );
    assert_ne!(
        valid,
        format!("{}{}", s.settings, watch("pods", "pods", ""))
    );
    replace_file(&path, &valid);
    daemon
        .process
        .line_with(&["cannot change in place", "shutdown.grace_period"]);
    daemon
        .process
        .line_with(&["applying the watch changes", "configmaps"]);
    assert_eq!(configmaps.next().await.short(), "ADDED c1");
    assert_eq!(successful(&daemon.metrics().await), Some(1.0));

    daemon.hangup();
    daemon
        .process
        .line_with(&["\"trigger\":\"SIGHUP\"", "no watch changed"]);
    assert_eq!(daemon.reloads("unchanged").await, Some(1.0));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let changes = flow.stop().await;
    every_change_once(&mut pods, &rv(&pod), &changes).await;
    configmaps.quiet_for(Duration::ZERO).await;
    assert_eq!(daemon.reloads("applied").await, Some(1.0));
    assert_eq!(daemon.reloads("invalid").await, Some(1.0));
    drop(s.nats);
}

/// With leader election, the standby reloads too, and takes the reloaded watches when it next
/// holds the Lease: the holder adds a watch in its term; after it hands over (SIGTERM), the new
/// holder runs that watch, resuming from the checkpoint (nothing published twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_the_reloaded_watches_when_it_takes_over() {
    let s = setup().await;
    s.sim.create("pods", Some("default"), pod("p"));
    s.sim.create(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c1"}}),
    );
    let mut pods = Inbox::subscribe(&s.client, "kube.core.v1.pods.>").await;
    let mut configmaps = Inbox::subscribe(&s.client, "kube.core.v1.configmaps.>").await;
    let election = "[leader_election]\nenabled = true\nnamespace = \"default\"\nlease_duration = \"3s\"\nrenew_deadline = \"2s\"\nretry_period = \"500ms\"\n[state]\ncheckpoint_interval = \"1s\"\n";
    let path = s.dir.path().join("kube2nats.toml");
    let pods_only = format!("{}{election}{}", s.settings, watch("pods", "pods", ""));
    std::fs::write(&path, &pods_only).unwrap();
    let replica = |pod: &'static str| {
        Process::spawn_file(&path, move |command| {
            command.env("POD_NAME", pod).args(["--log-format", "json"]);
        })
    };
    let holder = replica("replica-a");
    holder.line_with(&["acquired the Lease"]);
    assert_eq!(pods.next().await.short(), "ADDED p");
    let standby = replica("replica-b");
    standby.line_with(&["standing by"]);

    replace_file(
        &path,
        &format!("{pods_only}{}", watch("configmaps", "configmaps", "")),
    );
    holder.line_with(&["applying the watch changes", "configmaps"]);
    standby.line_with(&["applying the watch changes", "configmaps"]);
    assert_eq!(configmaps.next().await.short(), "ADDED c1");

    holder.terminate();
    standby.line_with(&["acquired the Lease"]);
    s.sim.create(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c2"}}),
    );
    assert_eq!(configmaps.next().await.short(), "ADDED c2");
    configmaps.quiet_for(QUIET).await;
    pods.quiet_for(Duration::ZERO).await;
}

/// A watch added for a resource not served yet waits for it as at start (`watch_served` 0), starts
/// once its CRD is created, and a later reload removing it stops it: its gauges leave `/metrics`
/// and its objects are no longer published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_added_before_its_crd_waits_for_it_and_can_be_removed_again() {
    let s = setup().await;
    assert_eq!(s.sim.delete_crd("widgets"), 0);
    let mut widgets = Inbox::subscribe(&s.client, "kube.example_com.v1.widgets.>").await;
    let path = s.dir.path().join("kube2nats.toml");
    let pods_only = format!("{}{}", s.settings, watch("pods", "pods", ""));
    std::fs::write(&path, &pods_only).unwrap();
    let daemon = Daemon::spawn(&path);
    assert!(s.sim.wait_for_watches(1, WAIT).await, "watch not open");
    let served = |text: &str| metric(text, "kube2nats_watch_served", &[("watch", "widgets")]);

    let with_widgets = format!("{pods_only}{}", watch("widgets", "widgets.example.com", ""));
    replace_file(&path, &with_widgets);
    daemon
        .process
        .line_with(&["resource not served yet", "\"watch\":\"widgets\""]);
    eventually_async(|| async { served(&daemon.metrics().await) == Some(0.0) }).await;
    s.sim.create_crd("widgets");
    let widget = |name: &str| json!({"metadata": {"name": name}, "spec": {"size": 1}});
    s.sim.create("widgets", Some("default"), widget("w1"));
    assert_eq!(widgets.next().await.short(), "ADDED w1");
    eventually_async(|| async { served(&daemon.metrics().await) == Some(1.0) }).await;

    replace_file(&path, &pods_only);
    daemon
        .process
        .line_with(&["applying the watch changes", r#"removed":"[\"widgets\"]"#]);
    eventually_async(|| async { served(&daemon.metrics().await).is_none() }).await;
    // Its counters leave too; the other watch's stay.
    let text = daemon.metrics().await;
    let received = |watch: &str| {
        metric(
            &text,
            "kube2nats_events_received_total",
            &[("watch", watch), ("type", "ADDED")],
        )
    };
    assert_eq!(received("widgets"), None, "{text}");
    assert!(received("pods").is_some(), "{text}");
    s.sim.create("widgets", Some("default"), widget("w2"));
    widgets.quiet_for(QUIET).await;
}

/// A reload that removes the only watch using a `namespace_selector` stops that selector's
/// namespace watcher (its API server watch closes); one adding the watch back starts a new
/// watcher, whose matching set the watch follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_no_watch_uses_stops_watching_namespaces() {
    let s = setup().await;
    let namespace =
        |name: &str| json!({"metadata": {"name": name, "labels": {"team": "payments"}}});
    s.sim.create("namespaces", None, namespace("payments"));
    let path = s.dir.path().join("kube2nats.toml");
    let pods_only = format!("{}{}", s.settings, watch("pods", "pods", ""));
    let with_selected = format!(
        "{pods_only}[[watches]]\nname = \"cms\"\nresource = \"configmaps\"\nnamespace_selector = \"team=payments\"\n"
    );
    std::fs::write(&path, &with_selected).unwrap();
    let daemon = Daemon::spawn(&path);
    // Pods in `default`, configmaps in every namespace, and the selector's namespaces.
    let sim = &s.sim;
    let open = |n: usize| async move {
        assert!(
            sim.wait_for_watches(n, WAIT).await,
            "{n} watches not open: {}",
            sim.open_watches()
        );
    };
    open(3).await;

    replace_file(&path, &pods_only);
    open(1).await;
    daemon.process.line_with(&[
        "no watch uses this namespace_selector any more",
        "team=payments",
    ]);

    replace_file(&path, &with_selected);
    open(3).await;
    let mut configmaps = Inbox::subscribe(&s.client, "kube.core.v1.configmaps.>").await;
    let configmap = |name: &str| json!({"metadata": {"name": name}, "data": {"k": "v"}});
    s.sim
        .create("configmaps", Some("payments"), configmap("c1"));
    assert_eq!(configmaps.next().await.short(), "ADDED c1");
    s.sim.create("namespaces", None, namespace("billing"));
    daemon
        .process
        .line_with(&["namespace now matches namespace_selector", "billing"]);
    s.sim.create("configmaps", Some("billing"), configmap("c2"));
    assert_eq!(configmaps.next().await.short(), "ADDED c2");
    configmaps.quiet_for(QUIET).await;
}

/// A reload adding a mirrored watch whose keys meet a running mirrored watch's: it runs and
/// publishes, without the mirror (an ERROR line says why); the running one keeps its mirror.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_watch_sharing_a_mirrored_watchs_keys_runs_unmirrored() {
    let s = setup().await;
    let path = s.dir.path().join("kube2nats.toml");
    let settings = format!("{}[mirror]\nenabled = true\n", s.settings);
    let one = format!("{settings}{}", watch("pods", "pods", ""));
    std::fs::write(&path, &one).unwrap();
    let daemon = Daemon::spawn(&path);
    assert!(s.sim.wait_for_watches(1, WAIT).await, "watch not open");
    let every_pod = "[[watches]]\nname = \"every-pod\"\nresource = \"po\"\n";
    replace_file(&path, &format!("{one}{every_pod}"));
    daemon.process.line_with(&[
        "not mirrored: another mirrored watch holds these keys",
        "\"watch\":\"every-pod\"",
        "watches[1].mirror",
    ]);
    assert!(
        s.sim.wait_for_watches(2, WAIT).await,
        "added watch not open"
    );
    let mut pods = Inbox::subscribe(&s.client, "kube.core.v1.pods.>").await;
    s.sim
        .create("pods", Some("default"), json!({"metadata": {"name": "p1"}}));
    // Both watches publish it; one mirrors it.
    let both = [pods.next().await.short(), pods.next().await.short()];
    assert_eq!(both, ["ADDED p1", "ADDED p1"]);
    let puts = |text: &str, watch: &str| {
        metric(
            text,
            "kube2nats_mirror_writes_total",
            &[("watch", watch), ("operation", "put")],
        )
    };
    eventually_async(|| async { puts(&daemon.metrics().await, "pods") == Some(1.0) }).await;
    let metrics = daemon.metrics().await;
    assert_eq!(puts(&metrics, "every-pod").unwrap_or(0.0), 0.0, "{metrics}");
}

/// A reload that mirrors a watch while none was mirrored at start opens the bucket then: the
/// watch restarts mirrored and its objects' keys appear, nothing is published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_turning_the_mirror_on_opens_the_bucket() {
    let s = setup().await;
    s.sim
        .create("pods", Some("default"), json!({"metadata": {"name": "p1"}}));
    let path = s.dir.path().join("kube2nats.toml");
    let pods = watch("pods", "pods", "");
    std::fs::write(&path, format!("{}{pods}", s.settings)).unwrap();
    let mut published = Inbox::subscribe(&s.client, "kube.core.v1.pods.>").await;
    let daemon = Daemon::spawn(&path);
    assert_eq!(published.next().await.short(), "ADDED p1");

    let mirrored = format!("{}[mirror]\nenabled = true\n{pods}", s.settings);
    replace_file(&path, &mirrored);
    daemon
        .process
        .line_with(&["mirror bucket opened for the reloaded watches"]);
    let js = async_nats::jetstream::new(s.client.clone());
    let bucket = js.get_key_value("kube-objects").await.expect("the bucket");
    let key = "core.v1.pods.default.p1";
    eventually_async(|| async { matches!(bucket.get(key).await, Ok(Some(_))) }).await;
    published.quiet_for(QUIET).await;
}

/// Waits until the future that `f` makes resolves to `true`, polling.
async fn eventually_async<F, Fut>(mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
