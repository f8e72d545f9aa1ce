//! What an operator relies on: metrics that move with what happens, an exposition promtool
//! accepts, readiness that follows sync and NATS, an RBAC self-check that names the rule to add,
//! and a graceful shutdown that loses nothing it read.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{
    ApiServer, ApiServerOptions, Failure, RequestFilter, Rule, INITIAL_TOKEN,
};
use kube2nats_harness::nats::NatsServer;

const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";

async fn get(daemon: &kube2nats::facade::Daemon, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{}{path}", daemon.http_addr))
        .await
        .expect("kube2nats HTTP endpoint");
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric(text, name, labels).unwrap_or_else(|| panic!("no sample {name}{labels:?} in:\n{text}"))
}

/// The commit checked out in this source tree (what build.rs puts in `build_info{revision}`), or
/// `unknown` outside a git checkout, as the build sees it.
fn git_head() -> String {
    if let Ok(revision) = std::env::var("KUBE2NATS_REVISION") {
        return revision;
    }
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Counters and gauges move with events, filtered drops, decode errors, API errors and relists,
/// by the exact amounts.
#[tokio::test]
async fn metrics_count_what_happens() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("a"));
    sim.create("pods", Some("default"), pod("b"));
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = core_config(
        &sim,
        &nats,
        dir.path(),
        &format!("{PODS_WATCH}events = [\"ADDED\", \"MODIFIED\"]\n"),
    );
    let daemon = kube2nats::facade::start(config_from(&text)).await.unwrap();
    let m = || daemon.metrics.render();
    let w = ("watch", "pods");
    eventually("synced", || {
        metric(&m(), "kube2nats_watch_synced", &[w]) == Some(1.0)
    })
    .await;
    assert!(sim.wait_for_watches(1, WAIT).await);
    assert_eq!(
        value(
            &m(),
            "kube2nats_events_synthesized_total",
            &[w, ("type", "ADDED")]
        ),
        2.0
    );
    assert_eq!(
        value(&m(), "kube2nats_relists_total", &[w, ("reason", "initial")]),
        1.0
    );
    assert_eq!(value(&m(), "kube2nats_tracked_objects", &[w]), 2.0);

    sim.create("pods", Some("default"), pod("c"));
    sim.update("pods", Some("default"), "c", |o| {
        o["metadata"]["labels"]["x"] = "1".into()
    });
    sim.delete("pods", Some("default"), "c");
    eventually("the delete received", || {
        metric(
            &m(),
            "kube2nats_events_received_total",
            &[w, ("type", "DELETED")],
        ) == Some(1.0)
    })
    .await;
    let now = m();
    assert_eq!(
        value(
            &now,
            "kube2nats_events_received_total",
            &[w, ("type", "ADDED")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &now,
            "kube2nats_events_published_total",
            &[w, ("type", "ADDED")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &now,
            "kube2nats_events_published_total",
            &[w, ("type", "MODIFIED")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &now,
            "kube2nats_events_published_total",
            &[w, ("type", "DELETED")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &now,
            "kube2nats_events_dropped_total",
            &[w, ("reason", "filtered")]
        ),
        1.0
    );
    assert_eq!(value(&now, "kube2nats_tracked_objects", &[w]), 2.0);
    assert!(value(&now, "kube2nats_publish_duration_seconds_count", &[w]) >= 4.0);
    assert!(value(&now, "kube2nats_watch_last_event_timestamp_seconds", &[w]) > 1.7e9);
    assert_eq!(value(&now, "kube2nats_nats_connected", &[]), 1.0);
    assert_eq!(
        value(
            &now,
            "kube2nats_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", &git_head())
            ]
        ),
        1.0
    );
    assert!(value(&now, "process_resident_memory_bytes", &[]) > 0.0);

    sim.inject_garbage_line();
    eventually("decode error counted", || {
        metric(&m(), "kube2nats_decode_errors_total", &[w]) == Some(1.0)
    })
    .await;
    assert_eq!(
        value(
            &m(),
            "kube2nats_watch_restarts_total",
            &[w, ("reason", "decode_error")]
        ),
        1.0
    );

    assert!(sim.wait_for_watches(1, WAIT).await);
    sim.fail_next_matching(2, RequestFilter::Watch, Failure::Internal);
    sim.drop_watches();
    sim.create("pods", Some("default"), pod("gap"));
    sim.compact();
    eventually("relist after 410", || {
        metric(&m(), "kube2nats_relists_total", &[w, ("reason", "expired")]) == Some(1.0)
    })
    .await;
    eventually("synced again", || {
        metric(&m(), "kube2nats_watch_synced", &[w]) == Some(1.0)
    })
    .await;
    let now = m();
    assert_eq!(
        value(
            &now,
            "kube2nats_api_requests_total",
            &[("verb", "watch"), ("resource", "pods"), ("code", "500")]
        ),
        2.0
    );
    assert!(
        value(
            &now,
            "kube2nats_api_requests_total",
            &[("verb", "get"), ("resource", "discovery"), ("code", "200")]
        ) >= 1.0
    );
    assert_eq!(
        value(
            &now,
            "kube2nats_watch_restarts_total",
            &[w, ("reason", "server_error")]
        ),
        2.0
    );
    assert_eq!(
        value(
            &now,
            "kube2nats_watch_restarts_total",
            &[w, ("reason", "expired")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &now,
            "kube2nats_events_synthesized_total",
            &[w, ("type", "ADDED")]
        ),
        3.0,
        "the gap's pod came from the relist"
    );
    assert_eq!(value(&now, "kube2nats_tracked_objects", &[w]), 3.0);
    daemon.shutdown();
    daemon.wait().await.unwrap();
}

/// `promtool check metrics` accepts a real scrape.
#[tokio::test]
async fn promtool_accepts_the_exposition() {
    let promtool = std::env::var("PROMTOOL_BIN").unwrap_or_else(|_| "promtool".into());
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = kube2nats::facade::start(config_from(&core_config(
        &sim,
        &nats,
        dir.path(),
        PODS_WATCH,
    )))
    .await
    .unwrap();
    eventually("synced", || {
        metric(
            &daemon.metrics.render(),
            "kube2nats_watch_synced",
            &[("watch", "pods")],
        ) == Some(1.0)
    })
    .await;
    let (code, scrape) = get(&daemon, "/metrics").await;
    assert_eq!(code, 200);
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {promtool}: {e}; install it with `apt-get install prometheus` or run scripts/test, which installs it"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics:\n{report}"
    );
}

/// `/readyz` is 503 before the first sync and while NATS is down, 200 otherwise; `/healthz` is
/// 200 throughout.
#[tokio::test]
async fn readiness_follows_sync_and_nats() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let mut nats = NatsServer::start().await.unwrap();
    nats.stop().await;
    sim.fail_next_matching(
        3,
        RequestFilter::List,
        Failure::Unavailable {
            retry_after_secs: 1,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let daemon = kube2nats::facade::start(config_from(&core_config(
        &sim,
        &nats,
        dir.path(),
        PODS_WATCH,
    )))
    .await
    .unwrap();
    let (code, body) = get(&daemon, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("NATS: not connected"), "{body}");
    assert!(body.contains("watch"), "{body}");
    assert_eq!(get(&daemon, "/healthz").await.0, 200);

    nats.restart().await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, body) = get(&daemon, "/readyz").await;
        if code == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    nats.stop().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, body) = get(&daemon, "/readyz").await;
        if code == 503 {
            assert_eq!(body.trim(), "NATS: not connected");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still ready with NATS down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get(&daemon, "/healthz").await.0, 200);
    nats.restart().await.unwrap();
    eventually_ready(&daemon).await;
    daemon.shutdown();
    daemon.wait().await.unwrap();
}

async fn eventually_ready(daemon: &kube2nats::facade::Daemon) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while get(daemon, "/readyz").await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never ready again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The start-up RBAC self-check reports a refused `watch` with the rule to add, and a refused read
/// of the kube-system Namespace (durable state's cluster id); with `rbac_check = "fail"` kube2nats
/// exits with code 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_self_check_names_the_rule_to_add() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.set_rules(
        INITIAL_TOKEN,
        vec![Rule::new(&["get", "list"], &[""], &["pods"], &["default"])],
    );
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let warn = core_config(&sim, &nats, dir.path(), PODS_WATCH);
    let process = Process::spawn(&warn);
    let line = process.line_with(&["RBAC does not allow the request"]);
    // stderr is a pipe here, as under the kubelet: no colour codes inside the line.
    assert!(
        !line.contains('\x1b'),
        "ANSI escape codes in a log file: {line:?}"
    );
    assert!(
        line.contains(r#"verb="watch""#) && line.contains("resource=pods"),
        "{line}"
    );
    assert!(line.contains(r#"add to a Role in namespace "default" (bound to kube2nats' ServiceAccount): {apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"]}"#), "{line}");
    let line = process.line_with(&["RBAC does not allow reading the kube-system Namespace"]);
    assert!(line.contains(r#"add to a ClusterRole (bound with a ClusterRoleBinding): {apiGroups: [""], resources: ["namespaces"], verbs: ["get"], resourceNames: ["kube-system"]}"#), "{line}");
    assert!(
        !process.rest().contains("RBAC does not allow"),
        "list is allowed"
    );
    let reviews: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("selfsubjectaccessreviews"))
        .collect();
    assert_eq!(
        reviews.len(),
        3,
        "list and watch asked once each, and get on the kube-system Namespace"
    );
    drop(process);

    let fail = warn.replace("[kubernetes]", "[kubernetes]\nrbac_check = \"fail\"");
    let mut process = Process::spawn(&fail);
    let (code, _) = process.wait_exit(WAIT);
    assert_eq!(code, Some(3), "log:\n{}", process.rest());
}

/// With leader election on, the self-check also asks for the Lease — `get` and `update` on it by
/// name, `create` on leases (which no rule can limit to a name) — and reports a refusal with the
/// rule to add; with `rbac_check = "fail"` kube2nats exits with code 3 before standing by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_self_check_covers_the_lease_when_leader_election_is_on() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let pods = || Rule::new(&["get", "list", "watch"], &[""], &["pods"], &["default"]);
    let leases =
        |verbs: &[&str]| Rule::new(verbs, &["coordination.k8s.io"], &["leases"], &["default"]);
    let lease_by_name = || leases(&["get", "update"]).named(&["kube2nats"]);
    // Durable state reads the cluster id, the kube-system Namespace's uid.
    let cluster_id = || Rule::new(&["get"], &[""], &["namespaces"], &[]).named(&["kube-system"]);
    sim.set_rules(INITIAL_TOKEN, vec![pods(), lease_by_name(), cluster_id()]);
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let election = "[leader_election]\nenabled = true\nnamespace = \"default\"\n";
    let warn = core_config(&sim, &nats, dir.path(), &format!("{election}{PODS_WATCH}"));
    let process = Process::spawn_env(&warn, &[], &[("POD_NAME", "k2n-0")]);
    let line = process.line_with(&["RBAC does not allow leader election"]);
    assert!(
        line.contains(r#"verb="create""#) && line.contains("resource=leases"),
        "{line}"
    );
    assert!(line.contains(r#"add to a Role in namespace "default" (bound to kube2nats' ServiceAccount): {apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"]}"#), "{line}");
    let reviews: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("selfsubjectaccessreviews"))
        .map(|r| r.path)
        .collect();
    assert_eq!(
        reviews.len(),
        6,
        "list and watch of pods, get, update and create of the Lease, get of the kube-system Namespace"
    );
    assert!(
        !process.rest().contains("RBAC does not allow"),
        "get and update on the named Lease are allowed"
    );
    drop(process);

    // With the rule the line names added, the replica creates the Lease and holds it.
    sim.set_rules(
        INITIAL_TOKEN,
        vec![pods(), lease_by_name(), leases(&["create"]), cluster_id()],
    );
    let process = Process::spawn_env(&warn, &[], &[("POD_NAME", "k2n-0")]);
    process.line_with(&["acquired the Lease"]);
    drop(process);

    sim.set_rules(INITIAL_TOKEN, vec![pods()]);
    let fail = warn.replace("[kubernetes]", "[kubernetes]\nrbac_check = \"fail\"");
    let mut process = Process::spawn_env(&fail, &[], &[("POD_NAME", "k2n-0")]);
    let (code, _) = process.wait_exit(WAIT);
    assert_eq!(code, Some(3), "log:\n{}", process.rest());
}

/// A simulated API server that keeps the history of a busy stream (100k changes).
async fn busy_api_server() -> std::sync::Arc<ApiServer> {
    let options = ApiServerOptions {
        history_limit: 100_000,
        ..Default::default()
    };
    std::sync::Arc::new(ApiServer::start(options).await.unwrap())
}

/// Creates pods `busy-0`, `busy-1`, … in `default` as fast as the server takes them, yielding
/// every 20 so the daemon under test runs beside it; abort the task to stop.
fn create_busy_pods(sim: &std::sync::Arc<ApiServer>) -> tokio::task::JoinHandle<()> {
    let sim = sim.clone();
    tokio::spawn(async move {
        for i in 0..100_000 {
            sim.create("pods", Some("default"), pod(&format!("busy-{i}")));
            if i % 20 == 0 {
                tokio::task::yield_now().await;
            }
        }
    })
}

/// SIGTERM during a busy stream: exit 0 within the grace period, and every event read from the
/// API server was published (JetStream-acknowledged) before exit: the stream holds the changes
/// from the first on, in order, none skipped and none twice, as many as kube2nats read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_busy_stream_publishes_everything_read() {
    let sim = busy_api_server().await;
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let js_section =
        "mode = \"jetstream\"\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n";
    let text = core_config(
        &sim,
        &nats,
        dir.path(),
        &format!("{js_section}{PODS_WATCH}"),
    );
    let daemon = kube2nats::facade::start(config_from(&text)).await.unwrap();
    eventually("synced", || {
        metric(
            &daemon.metrics.render(),
            "kube2nats_watch_synced",
            &[("watch", "pods")],
        ) == Some(1.0)
    })
    .await;
    let producer = create_busy_pods(&sim);
    eventually("a busy stream", || {
        metric(
            &daemon.metrics.render(),
            "kube2nats_events_published_total",
            &[("watch", "pods"), ("type", "ADDED")],
        )
        .unwrap_or(0.0)
            > 300.0
    })
    .await;
    let started = tokio::time::Instant::now();
    daemon.shutdown();
    let metrics = daemon.metrics.clone();
    daemon.wait().await.expect("clean shutdown");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "within the grace period: {:?}",
        started.elapsed()
    );
    producer.abort();
    let text = metrics.render();
    let received = value(
        &text,
        "kube2nats_events_received_total",
        &[("watch", "pods"), ("type", "ADDED")],
    );
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut stream = async_nats::jetstream::new(nc)
        .get_stream("KUBE")
        .await
        .unwrap();
    let stored = stream.info().await.unwrap().state.messages;
    let mut names = Vec::new();
    for seq in 1..=stored {
        let m = stream.get_raw_message(seq).await.unwrap();
        let name = m.headers.get("Kube-Name").map(|v| v.as_str().to_owned());
        names.push(name.unwrap_or_default());
    }
    let created_in_order: Vec<String> = (0..names.len()).map(|i| format!("busy-{i}")).collect();
    assert!(
        names == created_in_order,
        "the stream holds the changes from the first on, in order, none skipped or twice; first difference at {:?}",
        names.iter().zip(&created_in_order).position(|(a, b)| a != b)
    );
    assert_eq!(
        names.len() as f64,
        received,
        "every event read was published before exit"
    );
    let published = value(
        &text,
        "kube2nats_events_published_total",
        &[("watch", "pods"), ("type", "ADDED")],
    );
    assert_eq!(published, received, "and acknowledged before exit");
}

/// SIGTERM to the real process during a busy stream: exit 0 within the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_busy_stream_exits_0_within_the_grace_period() {
    let sim = busy_api_server().await;
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut process = Process::spawn(&core_config(&sim, &nats, dir.path(), PODS_WATCH));
    process.line_with(&["synced"]);
    let producer = create_busy_pods(&sim);
    tokio::time::sleep(Duration::from_millis(300)).await;
    process.terminate();
    let (code, took) = process.wait_exit(Duration::from_secs(10));
    producer.abort();
    assert_eq!(code, Some(0), "log:\n{}", process.rest());
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} (grace period 5s)"
    );
}

/// Past the grace period (NATS down, messages pending: held back until the journal records their
/// objects, which needs NATS) kube2nats exits non-zero and says what it abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_period_exceeded_exits_nonzero_and_names_what_was_abandoned() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let mut nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let js_section =
        "mode = \"jetstream\"\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n";
    let text = core_config(
        &sim,
        &nats,
        dir.path(),
        &format!("{js_section}{PODS_WATCH}"),
    )
    .replace("grace_period = \"5s\"", "grace_period = \"1s\"");
    let mut process = Process::spawn(&text);
    process.line_with(&["synced"]);
    nats.stop().await;
    for i in 0..5 {
        sim.create("pods", Some("default"), pod(&format!("stuck-{i}")));
    }
    std::thread::sleep(Duration::from_millis(300));
    process.terminate();
    let (code, took) = process.wait_exit(Duration::from_secs(10));
    let log = process.rest();
    assert_eq!(code, Some(1), "log:\n{log}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(log.contains("abandoned 5 message(s)"), "log:\n{log}");
}

/// With NATS gone and no message unconfirmed, a shutdown has nothing to lose: kube2nats exits 0
/// at once, instead of waiting out the grace period for a server that is not there.
async fn sigterm_with_nats_gone_and_nothing_pending_exits_0_at_once(mode: &str) {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    for i in 0..3 {
        sim.create("pods", Some("default"), pod(&format!("calm-{i}")));
    }
    let mut nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let js_section = match mode {
        "jetstream" => "mode = \"jetstream\"\n[nats.jetstream.stream]\n",
        _ => "",
    };
    let text = core_config(
        &sim,
        &nats,
        dir.path(),
        &format!("{js_section}[state]\ncheckpoint_interval = \"200ms\"\n{PODS_WATCH}"),
    );
    let mut process = Process::spawn_with(&text, &["--log-format", "json"]);
    process.http_url();
    process.line_with(&["synced"]);
    // Everything published is checkpointed: nothing is left for a shutdown to save.
    let checkpointed = |text: &str| {
        metric(
            text,
            "kube2nats_state_checkpoints_total",
            &[("watch", "pods")],
        )
        .unwrap_or(0.0)
    };
    let mut quiet_since = checkpointed(&process.metrics().await);
    loop {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let now = checkpointed(&process.metrics().await);
        if now >= 1.0 && now == quiet_since {
            break;
        }
        quiet_since = now;
    }
    nats.stop().await;
    process.line_with(&["disconnected from NATS"]);
    // A bookmark moves the watch's version while NATS is away, as the API server's do every
    // minute: the checkpoints (and a last one at shutdown) have a version to write, and writing
    // it needs NATS; nothing is lost without it.
    sim.create("pods", Some("elsewhere"), pod("moves-the-version"));
    sim.send_bookmarks();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    process.terminate();
    let (code, took) = process.wait_exit(Duration::from_secs(10));
    let log = process.rest();
    assert_eq!(code, Some(0), "mode {mode}; log:\n{log}");
    assert!(
        took < Duration::from_secs(1),
        "mode {mode}: took {took:?} (grace period 5s); log:\n{log}"
    );
    assert!(!log.contains("abandoned"), "mode {mode}; log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_nats_gone_and_nothing_pending_exits_0_at_once_core() {
    sigterm_with_nats_gone_and_nothing_pending_exits_0_at_once("core").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_nats_gone_and_nothing_pending_exits_0_at_once_jetstream() {
    sigterm_with_nats_gone_and_nothing_pending_exits_0_at_once("jetstream").await;
}

/// With one list slot, a watch over four namespaces lists them one after another (a list that
/// fails waits for the others): `/readyz` turns 200 only once every target has listed, and every
/// object arrives exactly once.
#[tokio::test]
async fn queued_lists_sync_every_target_before_ready() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let namespaces = ["n0", "n1", "n2", "n3"];
    for ns in namespaces {
        for i in 0..5 {
            sim.create("pods", Some(ns), pod(&format!("{ns}-{i}")));
        }
    }
    sim.fail_next_matching(
        2,
        RequestFilter::List,
        Failure::Unavailable {
            retry_after_secs: 1,
        },
    );
    let nats = NatsServer::start().await.unwrap();
    let tap = CoreTap::start(&nats.url(), "kube.>").await;
    let dir = tempfile::tempdir().unwrap();
    let watch = "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"n0\", \"n1\", \"n2\", \"n3\"]\ninitial_state = \"added\"\n";
    let text = core_config(&sim, &nats, dir.path(), watch).replace(
        "[kubernetes.backoff]",
        "max_concurrent_lists = 1\nlist_page_size = 2\n[kubernetes.backoff]",
    );
    let daemon = kube2nats::facade::start(config_from(&text)).await.unwrap();
    let lists = || {
        sim.requests()
            .into_iter()
            .filter(|r| !r.is_watch() && r.path.ends_with("/pods") && r.status == 200)
            .map(|r| r.path)
            .collect::<Vec<_>>()
    };
    eventually_ready(&daemon).await;
    let served = lists();
    assert_eq!(
        served.len(),
        12,
        "ready before every page of every list was served: {served:?}"
    );
    let mut runs = served.clone();
    runs.dedup();
    assert_eq!(runs.len(), 4, "two lists ran at once: {served:?}");
    eventually("every object published", || tap.count() >= 20).await;
    let mut uids: Vec<String> = tap.keys().into_iter().map(|(uid, _, _)| uid).collect();
    uids.sort();
    uids.dedup();
    assert_eq!((uids.len(), tap.count()), (20, 20), "each object once");
    daemon.shutdown();
    daemon.wait().await.unwrap();
}
