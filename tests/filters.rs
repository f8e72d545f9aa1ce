//! Filters on content end to end (docs/filters.md): the real binary, a real nats-server and the
//! simulated API server, in core NATS and JetStream mode. What a subscriber of a watch with
//! `filter` relies on: objects outside it are never published; one that starts matching arrives
//! ADDED, its changes while it matches MODIFIED, and it leaves with a DELETED marked
//! `Kube-Synthesized: filter` (a deletion in the cluster carries no such mark); a restart after
//! kill -9 publishes exactly what entered, changed or left while kube2nats was down.
//!
//! "Nothing arrives" is never a timeout: after changes that must not publish, a change that must
//! is made, and the next message has to be that one.

mod common;
#[path = "common/pods_env.rs"]
mod pods_env;

use std::time::Duration;

use common::*;
use pods_env::{Env, NS};
use serde_json::{json, Value};

const FAILED: &str = "filter = \"object.status.phase == 'Failed'\"";

#[derive(Clone, Copy, Debug)]
enum Mode {
    Core,
    JetStream,
}

impl Env {
    /// One pods watch in `default` carrying `watch_extra`, durable state checkpointed every
    /// 150 ms, publishing in `mode`.
    fn config(&self, mode: Mode, watch_extra: &str) -> String {
        let nats_mode = match mode {
            Mode::Core => "",
            Mode::JetStream => "mode = \"jetstream\"\n[nats.jetstream.stream]\n",
        };
        self.pods_config(nats_mode, watch_extra)
    }

    fn create(&self, name: &str, phase: &str) -> Value {
        self.sim.create(
            "pods",
            Some(NS),
            json!({
                "metadata": {"name": name, "labels": {"team": "a"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1"}]},
                "status": {"phase": phase}
            }),
        )
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut Value)) -> Value {
        self.sim.update("pods", Some(NS), name, f)
    }

    fn phase(&self, name: &str, phase: &str) -> Value {
        self.update(name, |o| o["status"]["phase"] = json!(phase))
    }

    /// Waits until the watch has listed and is watching.
    async fn wait_synced(&self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        let url = format!("http://127.0.0.1:{}/metrics", self.http_port);
        loop {
            // The endpoint is not up until the daemon has started.
            if let Ok(response) = reqwest::get(&url).await {
                let text = response.text().await.unwrap_or_default();
                if metric(&text, "kube2nats_watch_synced", &[("watch", "pods")]) == Some(1.0) {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the watch never synced"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric(&scrape_metrics(self.http_port).await, name, labels).unwrap_or(0.0)
    }
}

/// Asserts `m` is `event_type` of `obj` at its current version, with `Kube-Synthesized` as given.
fn assert_is(m: &Got, event_type: &str, obj: &Value, synthesized: Option<&str>) {
    assert_eq!(
        (
            m.header("Kube-Event-Type"),
            m.header("Kube-Name"),
            m.header("Kube-Resource-Version"),
            m.header("Kube-Synthesized"),
        ),
        (
            Some(event_type),
            obj["metadata"]["name"].as_str(),
            obj["metadata"]["resourceVersion"].as_str(),
            synthesized,
        ),
        "{}",
        m.short()
    );
}

/// Never-matching pods are never published; entering → ADDED, a change while matching →
/// MODIFIED, leaving → DELETED marked `filter` (with the object as it is now), entering again →
/// ADDED, deleting a matching object → DELETED unmarked, deleting a non-matching one → nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_enter_change_and_leave_the_filter() {
    for mode in [Mode::Core, Mode::JetStream] {
        let env = Env::start().await;
        let mut inbox = env.inbox().await;
        let _kube2nats = Process::spawn(&env.config(mode, FAILED));
        env.wait_synced().await;
        env.create("quiet", "Pending");
        env.create("web", "Pending");
        env.phase("quiet", "Running");
        env.update("quiet", |o| o["metadata"]["labels"]["tier"] = json!("x"));

        let entered = env.phase("web", "Failed");
        let m = inbox.next().await;
        assert_is(&m, "ADDED", &entered, None);
        assert_eq!(m.payload["object"]["status"]["phase"], "Failed", "{mode:?}");
        let changed = env.update("web", |o| o["metadata"]["labels"]["tier"] = json!("y"));
        assert_is(&inbox.next().await, "MODIFIED", &changed, None);

        let left = env.phase("web", "Running");
        let m = inbox.next().await;
        assert_is(&m, "DELETED", &left, Some("filter"));
        assert_eq!(m.payload["type"], "DELETED", "{mode:?}");
        assert_eq!(
            m.payload["object"]["status"]["phase"], "Running",
            "{mode:?}"
        );
        // A change outside the filter publishes nothing; matching again is news.
        env.update("web", |o| o["metadata"]["labels"]["tier"] = json!("z"));
        let back = env.phase("web", "Failed");
        assert_is(&inbox.next().await, "ADDED", &back, None);

        let gone = env.sim.delete("pods", Some(NS), "web").unwrap();
        assert_is(&inbox.next().await, "DELETED", &gone, None);
        env.sim.delete("pods", Some(NS), "quiet").unwrap();
        let sentinel = env.create("sentinel", "Failed");
        assert_is(&inbox.next().await, "ADDED", &sentinel, None);

        let not_matching = env
            .metric(
                "kube2nats_events_dropped_total",
                &[("watch", "pods"), ("reason", "not_matching")],
            )
            .await;
        // quiet: ADDED, 2 MODIFIED, DELETED; web: ADDED (Pending), the label change outside.
        assert_eq!(not_matching, 6.0, "{mode:?}");
        let errors = env
            .metric("kube2nats_filter_errors_total", &[("watch", "pods")])
            .await;
        assert_eq!(errors, 0.0, "{mode:?}");
    }
}

/// kill -9 with durable state, then while kube2nats is down: one object leaves the filter, one
/// enters, one changes while matching, one is created matching and one created outside. After
/// the restart exactly those transitions are published, whether the watch resumes from the saved
/// version or must relist (history compacted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_publishes_what_entered_and_left_while_down() {
    for (mode, compact) in [
        (Mode::Core, false),
        (Mode::Core, true),
        (Mode::JetStream, false),
        (Mode::JetStream, true),
    ] {
        let env = Env::start().await;
        let mut inbox = env.inbox().await;
        let config = env.config(mode, FAILED);
        let mut first = Process::spawn(&config);
        let leaving = env.create("leaving", "Failed");
        let staying = env.create("staying", "Failed");
        env.create("entering", "Pending");
        env.create("outside", "Pending");
        let first_messages = inbox.take(2).await;
        for (m, obj) in first_messages.iter().zip([&leaving, &staying]) {
            assert_eq!(m.header("Kube-Event-Type"), Some("ADDED"));
            assert_eq!(m.header("Kube-Name"), obj["metadata"]["name"].as_str());
        }
        env.wait_for_checkpoint(env.sim.resource_version()).await;
        first.kill();

        let left = env.phase("leaving", "Succeeded");
        let entered = env.phase("entering", "Failed");
        let changed = env.update("staying", |o| o["metadata"]["labels"]["tier"] = json!("y"));
        env.phase("outside", "Running");
        let created = env.create("created", "Failed");
        env.create("created-outside", "Pending");
        if compact {
            env.sim.compact();
        }
        let _second = Process::spawn(&config);
        let messages = inbox.take(4).await;
        // Leaving the filter is told apart from a deletion, on the resumed watch and the relist.
        for m in &messages {
            if m.header("Kube-Event-Type") == Some("DELETED") {
                assert_eq!(
                    m.header("Kube-Synthesized"),
                    Some("filter"),
                    "{}",
                    m.short()
                );
            }
        }
        let mut got: Vec<(String, String, Option<String>)> = messages
            .iter()
            .map(|m| {
                (
                    m.header("Kube-Name").unwrap_or_default().to_owned(),
                    m.header("Kube-Event-Type").unwrap_or_default().to_owned(),
                    m.header("Kube-Resource-Version").map(str::to_owned),
                )
            })
            .collect();
        got.sort();
        let at = |o: &Value| o["metadata"]["resourceVersion"].as_str().map(str::to_owned);
        let mut want = vec![
            ("created".to_owned(), "ADDED".to_owned(), at(&created)),
            ("entering".to_owned(), "ADDED".to_owned(), at(&entered)),
            ("leaving".to_owned(), "DELETED".to_owned(), at(&left)),
            ("staying".to_owned(), "MODIFIED".to_owned(), at(&changed)),
        ];
        want.sort();
        assert_eq!(got, want, "{mode:?}, compacted: {compact}");
        let sentinel = env.create("sentinel", "Failed");
        let m = inbox.next().await;
        assert_is(&m, "ADDED", &sentinel, None);
    }
}

/// `{label:team}` in the subject: each team's pods on its own subject, a pod without the label
/// on `_`; a label change moves the object's next message to the new subject (the old subject
/// gets nothing more). With a filter on the same label, core NATS and JetStream alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_built_from_a_label() {
    for mode in [Mode::Core, Mode::JetStream] {
        let env = Env::start().await;
        let nc = async_nats::connect(env.nats.url()).await.unwrap();
        let mut team_a = Inbox::subscribe(&nc, "kube.team.a.>").await;
        let mut team_b = Inbox::subscribe(&nc, "kube.team.b.>").await;
        let mut unlabelled = Inbox::subscribe(&nc, "kube.team._.>").await;
        let _kube2nats = Process::spawn(&env.config(
            mode,
            "subject = \"{prefix}.team.{label:team}.{namespace}.{name}.{type}\"\nfilter = \"object.metadata.name != 'hidden'\"",
        ));
        env.wait_synced().await;
        let web = env.create("web", "Running");
        let m = team_a.next().await;
        assert_eq!(m.subject, "kube.team.a.default.web.added", "{mode:?}");
        assert_is(&m, "ADDED", &web, None);
        let bare = env
            .sim
            .create("pods", Some(NS), json!({"metadata": {"name": "bare"}}));
        let m = unlabelled.next().await;
        assert_eq!(m.subject, "kube.team._.default.bare.added", "{mode:?}");
        assert_is(&m, "ADDED", &bare, None);
        env.create("hidden", "Running");

        let moved = env.update("web", |o| o["metadata"]["labels"]["team"] = json!("b"));
        let m = team_b.next().await;
        assert_eq!(m.subject, "kube.team.b.default.web.modified", "{mode:?}");
        assert_is(&m, "MODIFIED", &moved, None);
        let gone = env.sim.delete("pods", Some(NS), "web").unwrap();
        let m = team_b.next().await;
        assert_eq!(m.subject, "kube.team.b.default.web.deleted", "{mode:?}");
        assert_is(&m, "DELETED", &gone, None);
        // Team a's subject got nothing after the move, nor any subject the hidden pod.
        let sentinel = env.create("sentinel", "Running");
        let m = team_a.next().await;
        assert_is(&m, "ADDED", &sentinel, None);
        let labelled = env.sim.create(
            "pods",
            Some(NS),
            json!({"metadata": {"name": "late", "labels": {"other": "x"}}}),
        );
        assert_is(&unlabelled.next().await, "ADDED", &labelled, None);
    }
}

/// A mirrored watch with a filter: the bucket holds only the matching objects; leaving the
/// filter deletes the object's key, entering puts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_holds_only_matching_objects() {
    let env = Env::start().await;
    let mut inbox = env.inbox().await;
    let config = env
        .config(Mode::JetStream, FAILED)
        .replace("[state]", "[mirror]\nenabled = true\n[state]");
    let _kube2nats = Process::spawn(&config);
    env.wait_synced().await;
    let failed = env.create("failed", "Failed");
    env.create("running", "Running");
    assert_is(&inbox.next().await, "ADDED", &failed, None);
    let js = async_nats::jetstream::new(async_nats::connect(env.nats.url()).await.unwrap());
    let store = js.get_key_value("kube-objects").await.unwrap();
    let key = |name: &str| format!("core.v1.pods.{NS}.{name}");
    mirrored_names(&store, &[key("failed")]).await;

    let left = env.phase("failed", "Succeeded");
    let entered = env.phase("running", "Failed");
    assert_is(&inbox.next().await, "DELETED", &left, Some("filter"));
    assert_is(&inbox.next().await, "ADDED", &entered, None);
    mirrored_names(&store, &[key("running")]).await;
}

/// Waits until the bucket holds a value under exactly `keys`.
async fn mirrored_names(store: &async_nats::jetstream::kv::Store, keys: &[String]) {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut have = Vec::new();
        let mut listed = store.keys().await.unwrap();
        while let Some(key) = listed.next().await {
            let key = key.unwrap();
            if store.get(&key).await.unwrap().is_some() {
                have.push(key);
            }
        }
        have.sort();
        if have == keys {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bucket holds {have:?}, expected {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
