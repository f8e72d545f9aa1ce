//! Noise control end to end: the real binary, a real nats-server and the simulated API server
//! (which keeps `metadata.generation` as kube-apiserver does). Each test pins what a subscriber
//! of a watch with `changes` or `strip_paths` relies on: which changes arrive, which do not, and
//! what a published object holds.
//!
//! "Nothing arrives" is never a timeout: after the changes that must not publish, a change that
//! must is made, and the next message has to be that one (per-object order is kept).

mod common;
#[path = "common/pods_env.rs"]
mod pods_env;

use std::time::Duration;

use common::*;
use pods_env::{Env, NS};
use serde_json::{json, Value};

impl Env {
    /// A configuration with one pods watch in `default` carrying `watch_extra`, durable state
    /// checkpointed every 150 ms.
    fn config(&self, watch_extra: &str) -> String {
        self.pods_config("", watch_extra)
    }

    async fn dropped_unchanged(&self) -> f64 {
        let text = self.metrics().await;
        metric(
            &text,
            "kube2nats_events_dropped_total",
            &[("watch", "pods"), ("reason", "unchanged")],
        )
        .unwrap_or(0.0)
    }

    fn create(&self, name: &str) -> Value {
        self.sim.create(
            "pods",
            Some(NS),
            json!({
                "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {"example.com/heartbeat": "0"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1"}]},
                "status": {"phase": "Pending"}
            }),
        )
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut Value)) -> Value {
        self.sim.update("pods", Some(NS), name, f)
    }
}

fn status(phase: &str) -> impl FnOnce(&mut Value) + '_ {
    move |o| o["status"]["phase"] = json!(phase)
}

fn image(image: &str) -> impl FnOnce(&mut Value) + '_ {
    move |o| o["spec"]["containers"][0]["image"] = json!(image)
}

fn heartbeat(beat: &str) -> impl FnOnce(&mut Value) + '_ {
    move |o| o["metadata"]["annotations"]["example.com/heartbeat"] = json!(beat)
}

/// Asserts `m` is `event_type` of `obj` at its current version.
fn assert_is(m: &Got, event_type: &str, obj: &Value) {
    assert_eq!(
        (
            m.header("Kube-Event-Type"),
            m.header("Kube-Name"),
            m.header("Kube-Resource-Version")
        ),
        (
            Some(event_type),
            obj["metadata"]["name"].as_str(),
            obj["metadata"]["resourceVersion"].as_str()
        ),
        "{}",
        m.short()
    );
}

/// `changes = "generation"`: a status update and a label change (neither moves the generation)
/// publish nothing; a spec change publishes its MODIFIED; deletion is always published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_publishes_only_spec_changes() {
    let env = Env::start().await;
    let mut inbox = env.inbox().await;
    let _kube2nats = Process::spawn(&env.config("changes = \"generation\""));
    let created = env.create("web");
    assert_is(&inbox.next().await, "ADDED", &created);

    env.update("web", status("Running"));
    env.update("web", |o| o["metadata"]["labels"]["tier"] = json!("front"));
    let spec = env.update("web", image("nginx:2"));
    assert_eq!(spec["metadata"]["generation"], 2);
    let m = inbox.next().await;
    assert_is(&m, "MODIFIED", &spec);
    assert_eq!(
        m.payload["object"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    assert_eq!(m.payload["object"]["status"]["phase"], "Running");

    let gone = env.sim.delete("pods", Some(NS), "web").unwrap();
    assert_is(&inbox.next().await, "DELETED", &gone);
    eventually_metric(&env, 2.0).await;
}

/// `changes = "content"` with `status` and one annotation ignored: status updates, heartbeat
/// annotation changes and resourceVersion-only changes publish nothing; a change to another
/// annotation, a label or the spec publishes, with the whole object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_publishes_only_changes_outside_the_ignored_paths() {
    let env = Env::start().await;
    let mut inbox = env.inbox().await;
    let _kube2nats = Process::spawn(&env.config(
        "changes = \"content\"\nignore_paths = [\"status\", 'metadata.annotations.\"example.com/heartbeat\"']",
    ));
    let created = env.create("web");
    assert_is(&inbox.next().await, "ADDED", &created);

    env.update("web", status("Running"));
    env.update("web", heartbeat("1"));
    env.update("web", |o| {
        o["metadata"]["managedFields"] = json!([{"manager": "kubelet", "operation": "Update"}])
    });
    let annotated = env.update("web", |o| {
        o["metadata"]["annotations"]["example.com/owner"] = json!("team-a")
    });
    let m = inbox.next().await;
    assert_is(&m, "MODIFIED", &annotated);
    assert_eq!(
        m.payload["object"]["status"]["phase"], "Running",
        "the object is whole"
    );

    env.update("web", heartbeat("2"));
    env.update("web", status("Succeeded"));
    let spec = env.update("web", image("nginx:2"));
    assert_is(&inbox.next().await, "MODIFIED", &spec);
    let labelled = env.update("web", |o| o["metadata"]["labels"]["app"] = json!("api"));
    assert_is(&inbox.next().await, "MODIFIED", &labelled);

    let gone = env.sim.delete("pods", Some(NS), "web").unwrap();
    assert_is(&inbox.next().await, "DELETED", &gone);
    eventually_metric(&env, 5.0).await;
}

/// `strip_paths`: the named members are absent from the published object, every other member is
/// exactly as the API server has it; an object holding none of them is published as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripped_fields_are_absent_and_the_rest_intact() {
    let env = Env::start().await;
    let mut inbox = env.inbox().await;
    let _kube2nats = Process::spawn(&env.config(
        "strip_paths = [\"metadata.managedFields\", 'metadata.annotations.\"kubectl.kubernetes.io/last-applied-configuration\"']",
    ));
    let bulky = env.sim.create(
        "pods",
        Some(NS),
        json!({
            "metadata": {
                "name": "bulky",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\":true}", "keep.me/too": "yes"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {"containers": [{"name": "main", "image": "nginx"}]}
        }),
    );
    let m = inbox.next().await;
    assert_is(&m, "ADDED", &bulky);
    let mut expected = bulky.clone();
    let meta = expected["metadata"].as_object_mut().unwrap();
    meta.remove("managedFields");
    meta["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    assert_eq!(m.payload["object"], expected);
    assert_eq!(m.payload["type"], "ADDED");

    let plain = env.create("plain");
    let m = inbox.next().await;
    assert_is(&m, "ADDED", &plain);
    assert_eq!(m.payload["object"], plain);

    let modified = env.update("bulky", image("nginx:2"));
    let m = inbox.next().await;
    assert_is(&m, "MODIFIED", &modified);
    assert!(m.payload["object"]["metadata"]
        .get("managedFields")
        .is_none());
    assert_eq!(
        m.payload["object"]["metadata"]["annotations"],
        json!({"keep.me/too": "yes"})
    );
}

/// With durable state, a restart publishes no object whose content (outside the ignored paths)
/// did not change while kube2nats was down, whether the restart resumes the watch or must relist
/// (history compacted): the fingerprints are saved with the state. The one object whose spec
/// changed is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_state_does_not_republish_content_unchanged_objects() {
    for compact in [false, true] {
        let env = Env::start().await;
        let mut inbox = env.inbox().await;
        let config = env.config("changes = \"content\"\nignore_paths = [\"status\"]");
        let mut first = Process::spawn(&config);
        let names: Vec<String> = (0..6).map(|i| format!("pod-{i}")).collect();
        for name in &names {
            env.create(name);
        }
        for m in inbox.take(names.len()).await {
            assert_eq!(m.header("Kube-Event-Type"), Some("ADDED"));
        }
        let last = env.sim.resource_version();
        env.wait_for_checkpoint(last).await;
        first.kill();

        for name in &names {
            env.update(name, status("Running"));
            env.update(name, |o| {
                o["metadata"]["managedFields"] = json!([{"manager": "k"}])
            });
        }
        let changed = env.update("pod-3", image("nginx:2"));
        if compact {
            env.sim.compact();
        }
        let _second = Process::spawn(&config);
        let m = inbox.next().await;
        assert_is(&m, "MODIFIED", &changed);
        let sentinel = env.create("sentinel");
        assert_is(&inbox.next().await, "ADDED", &sentinel);
        let expected = if compact { 5.0 } else { 12.0 };
        eventually_metric(&env, expected).await;
    }
}

/// Waits until `events_dropped_total{reason="unchanged"}` of the watch is `want`.
async fn eventually_metric(env: &Env, want: f64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = env.dropped_unchanged().await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events_dropped_total{{reason=\"unchanged\"}} is {got}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
