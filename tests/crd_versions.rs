//! A CRD whose served versions change: the real binary, a real nats-server and the simulated API
//! server, whose custom resources serve the versions their CRD lists, as kube-apiserver does
//! (discovery lists the group's versions in priority order, the first preferred; a version no
//! longer served answers 404; one storage backs every version, so objects keep their uid and
//! resourceVersion and read as the version asked for; a CRD update rebuilds the storage: its
//! watches end, and a watch from before the update gets 410).
//! docs/configuration.md, "Versions that move".

// Multi-threaded: the log lines of the binary are awaited by blocking reads, while the
// simulator serves it from this runtime.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use futures_util::TryStreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use serde_json::{json, Value};

fn widget(name: &str, size: u64) -> Value {
    json!({"metadata": {"name": name}, "spec": {"size": size}})
}

/// kube2nats (the binary) watching widgets in `default` as configured by `resource`, logging
/// JSON lines, checkpointing often (so that a kill -9 loses no checkpoint the test waited for).
fn spawn(sim: &ApiServer, nats: &NatsServer, dir: &tempfile::TempDir, resource: &str) -> Process {
    spawn_with(sim, nats, dir, resource, "")
}

/// [`spawn`], with `sections` of configuration added.
fn spawn_with(
    sim: &ApiServer,
    nats: &NatsServer,
    dir: &tempfile::TempDir,
    resource: &str,
    sections: &str,
) -> Process {
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let config = format!(
        "{}\n[nats]\nurl = \"{}\"\n[state]\ncheckpoint_interval = \"150ms\"\n{sections}\n\
         [[watches]]\nname = \"widgets\"\nresource = \"{resource}\"\nnamespaces = [\"default\"]\n",
        kube_section(sim, &token),
        nats.url()
    );
    let process = Process::spawn_with(&config, &["--log-format", "json"]);
    process.http_url();
    process
}

async fn setup() -> (ApiServer, NatsServer, tempfile::TempDir, async_nats::Client) {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    (sim, nats, tempfile::tempdir().unwrap(), client)
}

/// The subject, type and name of a message, and the version its headers and payload name.
fn seen(message: &Got) -> (String, String, String) {
    let header = message.header("Kube-Api-Version").unwrap_or("?").to_owned();
    let payload = message.payload["object"]["apiVersion"]
        .as_str()
        .unwrap_or("?");
    assert_eq!(header, payload, "header and payload disagree: {message:?}");
    (message.subject.clone(), message.short(), header)
}

/// kube2nats watching `widgets.example.com` while the CRD serves `v1beta1` only (the group's other
/// CRD too, so that `v1beta1` is the group's preferred version): w1 and w2 are published at
/// `v1beta1`.
async fn watching_v1beta1(
    sim: &ApiServer,
    nats: &NatsServer,
    dir: &tempfile::TempDir,
    client: &async_nats::Client,
) -> (Process, Inbox) {
    watching_v1beta1_with(sim, nats, dir, client, "").await
}

/// [`watching_v1beta1`], with `sections` of configuration added.
async fn watching_v1beta1_with(
    sim: &ApiServer,
    nats: &NatsServer,
    dir: &tempfile::TempDir,
    client: &async_nats::Client,
    sections: &str,
) -> (Process, Inbox) {
    sim.set_crd_versions("gadgets", &["v1beta1"]);
    sim.set_crd_versions("widgets", &["v1beta1"]);
    sim.create("widgets", Some("default"), widget("w1", 1));
    sim.create("widgets", Some("default"), widget("w2", 1));
    let mut widgets = Inbox::subscribe(client, "kube.example_com.*.widgets.>").await;
    let daemon = spawn_with(sim, nats, dir, "widgets.example.com", sections);
    let mut added: Vec<_> = widgets.take(2).await.iter().map(seen).collect();
    added.sort();
    assert_eq!(
        added,
        [at("v1beta1", "w1", "ADDED"), at("v1beta1", "w2", "ADDED")]
    );
    assert!(sim.wait_for_watches(1, WAIT).await, "watch not open");
    (daemon, widgets)
}

/// What [`seen`] shows of a widget's message at `version`.
fn at(version: &str, name: &str, event: &str) -> (String, String, String) {
    (
        format!(
            "kube.example_com.{version}.widgets.default.{name}.{}",
            event.to_ascii_lowercase()
        ),
        format!("{event} {name}"),
        format!("example.com/{version}"),
    )
}

/// Changes after the move: each published once, at `v1`.
async fn changes_are_published_once_at_v1(sim: &ApiServer, widgets: &mut Inbox) {
    sim.update("widgets", Some("default"), "w1", |w| {
        w["spec"]["size"] = json!(2)
    });
    sim.create("widgets", Some("default"), widget("w3", 1));
    sim.delete("widgets", Some("default"), "w2").expect("w2");
    let after: Vec<_> = widgets.take(3).await.iter().map(seen).collect();
    assert_eq!(
        after,
        [
            at("v1", "w1", "MODIFIED"),
            at("v1", "w3", "ADDED"),
            at("v1", "w2", "DELETED")
        ]
    );
    widgets.quiet_for(QUIET).await;
}

/// A CRD upgraded from `v1beta1` to `v1` as operators do it: `v1` added (and preferred, the
/// server ends the watches), then `v1beta1` no longer served. The watch names no version, so it
/// follows at the first step: nothing is published for the move (no ADDED again, no DELETED),
/// the changes after it are published once each, on the new version's subjects; and after a
/// kill -9 and a restart, still nothing is published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_added_and_preferred_is_followed_publishing_nothing_again() {
    let (sim, nats, dir, client) = setup().await;
    let (mut daemon, mut widgets) = watching_v1beta1(&sim, &nats, &dir, &client).await;

    sim.set_crd_versions("widgets", &["v1beta1", "v1"]);
    widgets.quiet_for(QUIET).await;
    daemon.line_with(&["preferred version moved v1beta1 → v1"]);
    assert!(sim.wait_for_watches(1, WAIT).await, "watch not moved");
    sim.set_crd_versions("widgets", &["v1"]);
    assert!(sim.wait_for_watches(1, WAIT).await, "watch not reopened");
    widgets.quiet_for(QUIET).await;
    changes_are_published_once_at_v1(&sim, &mut widgets).await;
    let log = daemon.log();
    assert!(!log.contains("no longer served"), "{log}");

    // kill -9 once the changes are checkpointed (quiet for far longer than the interval), then
    // a restart: it resolves v1 and resumes from the saved state, publishing nothing again.
    daemon.kill();
    let restarted = spawn(&sim, &nats, &dir, "widgets.example.com");
    restarted.line_with(&["loaded saved state"]);
    widgets.quiet_for(QUIET).await;
    sim.update("widgets", Some("default"), "w3", |w| {
        w["spec"]["size"] = json!(2)
    });
    assert_eq!(seen(&widgets.next().await), at("v1", "w3", "MODIFIED"));
    widgets.quiet_for(QUIET).await;
}

/// `v1` served and `v1beta1` no longer served in one update: the watch's version answers 404,
/// discovery shows the resource at `v1`, and the watch follows it, publishing nothing for the
/// move. (Before, the 404 announced every object DELETED, and the watch waited for a version
/// that never came back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_replaced_at_once_is_followed_publishing_nothing_again() {
    let (sim, nats, dir, client) = setup().await;
    let (daemon, mut widgets) = watching_v1beta1(&sim, &nats, &dir, &client).await;

    let reads = |text: &str, version: &str| {
        let labels = [
            ("watch", "widgets"),
            ("group", "example.com"),
            ("version", version),
            ("resource", "widgets"),
        ];
        metric(text, "kube2nats_watch_resource_info", &labels)
    };
    let text = daemon.metrics().await;
    assert_eq!(reads(&text, "v1beta1"), Some(1.0), "{text}");
    sim.set_crd_versions("widgets", &["v1"]);
    let updated = tokio::time::Instant::now();
    assert!(sim.wait_for_watches(1, WAIT).await, "watch not moved");
    println!(
        "watching v1 {:?} after the CRD update (404, discovery, 410, list)",
        updated.elapsed()
    );
    widgets.quiet_for(QUIET).await;
    daemon.line_with(&["preferred version moved v1beta1 → v1"]);
    let text = daemon.metrics().await;
    assert_eq!(
        (reads(&text, "v1"), reads(&text, "v1beta1")),
        (Some(1.0), None),
        "{text}"
    );
    changes_are_published_once_at_v1(&sim, &mut widgets).await;
    let log = daemon.log();
    assert!(!log.contains("no longer served"), "{log}");
}

/// Discovery a moment behind the CRD, as kube-apiserver's can be: `v1beta1` answers 404 while
/// discovery still lists it. The watch asks again instead of announcing its objects deleted, and
/// follows once discovery shows `v1`: nothing is published for the move. (Without the wait, w1
/// and w2 were announced DELETED, then ADDED again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_while_discovery_lags_behind_the_crd_announces_nothing() {
    let (sim, nats, dir, client) = setup().await;
    let (daemon, mut widgets) = watching_v1beta1(&sim, &nats, &dir, &client).await;

    sim.hold_discovery(true);
    sim.set_crd_versions("widgets", &["v1"]);
    widgets.quiet_for(Duration::from_secs(2)).await;
    daemon.line_with(&["discovery still lists it"]);
    sim.hold_discovery(false);
    daemon.line_with(&["preferred version moved v1beta1 → v1"]);
    assert!(sim.wait_for_watches(1, WAIT).await, "watch not moved");
    widgets.quiet_for(QUIET).await;
    changes_are_published_once_at_v1(&sim, &mut widgets).await;
    let log = daemon.log();
    assert!(!log.contains("no longer served"), "{log}");
}

/// The mirror bucket's live keys, each with the `apiVersion` and resourceVersion of its value.
async fn mirrored(client: &async_nats::Client) -> BTreeMap<String, (String, String)> {
    let js = async_nats::jetstream::new(client.clone());
    let bucket = js
        .get_key_value("kube-objects")
        .await
        .expect("the mirror bucket");
    let keys: Vec<String> = bucket.keys().await.unwrap().try_collect().await.unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        if let Some(value) = bucket.get(&key).await.unwrap() {
            let object: Value = serde_json::from_slice(&value).expect("a JSON object");
            let field = |path: &str| object.pointer(path).and_then(Value::as_str).unwrap_or("?");
            let seen = (
                field("/apiVersion").to_owned(),
                field("/metadata/resourceVersion").to_owned(),
            );
            out.insert(key, seen);
        }
    }
    out
}

/// Waits until the mirror bucket holds `names` at `version`, and nothing else.
async fn mirror_holds(client: &async_nats::Client, names: &[&str], version: &str) {
    let expected: Vec<String> = names
        .iter()
        .map(|name| format!("example_com.{version}.widgets.default.{name}"))
        .collect();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let keys = mirrored(client).await;
        let api_version = format!("example.com/{version}");
        if keys.keys().eq(expected.iter()) && keys.values().all(|(v, _)| *v == api_version) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the mirror does not hold {names:?} at {version}: {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A mirrored watch that follows a move: its keys name the new version (as its subjects do), the
/// keys under the old version are deleted, and still no event is published for the move. A move
/// while kube2nats is stopped (kill -9): the start resolves the new version, and its list deletes
/// the keys at the version before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirrored_watch_moves_its_keys_to_the_new_version() {
    let (sim, nats, dir, client) = setup().await;
    let mirror = "[mirror]\nenabled = true\ndelete_marker_ttl = \"30s\"";
    let (mut daemon, mut widgets) = watching_v1beta1_with(&sim, &nats, &dir, &client, mirror).await;
    mirror_holds(&client, &["w1", "w2"], "v1beta1").await;

    sim.set_crd_versions("widgets", &["v1"]);
    widgets.quiet_for(QUIET).await;
    daemon.line_with(&["preferred version moved v1beta1 → v1"]);
    mirror_holds(&client, &["w1", "w2"], "v1").await;
    assert!(sim.wait_for_watches(1, WAIT).await, "watch not moved");
    changes_are_published_once_at_v1(&sim, &mut widgets).await;
    mirror_holds(&client, &["w1", "w3"], "v1").await;

    daemon.kill();
    sim.set_crd_versions("widgets", &["v1", "v2"]);
    let restarted = spawn_with(&sim, &nats, &dir, "widgets.example.com", mirror);
    restarted.line_with(&["loaded saved state"]);
    mirror_holds(&client, &["w1", "w3"], "v2").await;
    widgets.quiet_for(QUIET).await;
}

/// A CRD not served at its group's preferred version (the group's other CRD is at `v1`, widgets
/// at `v1beta1` only) is watched at the first version that serves it, as kubectl resolves it.
/// (Before, discovery looked at the preferred version only: the watch waited for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_behind_its_groups_preferred_version_is_watched() {
    let (sim, nats, dir, client) = setup().await;
    sim.set_crd_versions("widgets", &["v1beta1"]);
    sim.create("widgets", Some("default"), widget("w1", 1));
    let mut widgets = Inbox::subscribe(&client, "kube.example_com.*.widgets.>").await;
    let _daemon = spawn(&sim, &nats, &dir, "widgets.example.com");
    assert_eq!(seen(&widgets.next().await), at("v1beta1", "w1", "ADDED"));
    widgets.quiet_for(QUIET).await;
}

/// A watch that pins a version (`widgets.v1beta1.example.com`) does not follow: once that version
/// is no longer served, its objects are announced deleted (`Kube-Synthesized: unserved`) as for
/// a deleted CRD, and it waits for the version to be served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_version_removed_is_unserved() {
    let (sim, nats, dir, client) = setup().await;
    sim.set_crd_versions("widgets", &["v1beta1", "v1"]);
    sim.create("widgets", Some("default"), widget("w1", 1));
    let mut widgets = Inbox::subscribe(&client, "kube.example_com.*.widgets.>").await;
    let daemon = spawn(&sim, &nats, &dir, "widgets.v1beta1.example.com");
    let added = widgets.next().await;
    assert_eq!(
        (added.subject.as_str(), added.short().as_str()),
        (
            "kube.example_com.v1beta1.widgets.default.w1.added",
            "ADDED w1"
        )
    );
    assert!(sim.wait_for_watches(1, WAIT).await, "watch not open");

    sim.set_crd_versions("widgets", &["v1"]);
    let deleted = widgets.next().await;
    assert_eq!(
        (deleted.subject.as_str(), deleted.short().as_str()),
        (
            "kube.example_com.v1beta1.widgets.default.w1.deleted",
            "DELETED w1"
        )
    );
    assert_eq!(deleted.header("Kube-Synthesized"), Some("unserved"));
    daemon.line_with(&["resource no longer served"]);
    widgets.quiet_for(QUIET).await;

    sim.set_crd_versions("widgets", &["v1beta1", "v1"]);
    let back = widgets.next().await;
    assert_eq!(
        (back.subject.as_str(), back.short().as_str()),
        (
            "kube.example_com.v1beta1.widgets.default.w1.added",
            "ADDED w1"
        )
    );
    widgets.quiet_for(QUIET).await;
}
