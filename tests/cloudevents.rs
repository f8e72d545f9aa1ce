//! CloudEvents format: the real binary publishes to a real nats-server, and the CloudEvents Python
//! SDK (a consumer's decoder, not ours) reads the messages a subscriber received.
//!
//! The SDK comes from `scripts/install-test-tools`, which exports `CLOUDEVENTS_PYTHON`.

mod common;

use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use common::*;
use futures_util::StreamExt;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use serde_json::{json, Value};

/// The interpreter of the venv holding the CloudEvents SDK.
const PYTHON_ENV: &str = "CLOUDEVENTS_PYTHON";

/// A message as received: subject, first value of each header, raw payload.
#[derive(Debug, Clone)]
struct Raw {
    subject: String,
    headers: HashMap<String, String>,
    payload: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no header {name} on {}", self.subject))
    }
}

/// Collects the messages of `subject` from a core subscription.
struct Tap(async_nats::Subscriber);

impl Tap {
    async fn start(nats: &NatsServer, subject: &str) -> Tap {
        let nc = async_nats::connect(nats.url()).await.unwrap();
        let sub = nc.subscribe(subject.to_owned()).await.unwrap();
        kube2nats_harness::nats::round_trip(&nc).await.unwrap();
        Tap(sub)
    }

    async fn take(&mut self, n: usize) -> Vec<Raw> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let m = match tokio::time::timeout(WAIT, self.0.next()).await {
                Ok(Some(m)) => m,
                _ => panic!("{} of {n} messages within {WAIT:?}", out.len()),
            };
            let headers = m
                .headers
                .iter()
                .flat_map(|h| h.iter())
                .map(|(k, v)| (k.to_string(), v[0].as_str().to_owned()))
                .collect();
            out.push(Raw {
                subject: m.subject.to_string(),
                headers,
                payload: m.payload.to_vec(),
            });
        }
        out
    }
}

/// Runs the SDK's reader over `messages`; one decoded event (`attributes`, `data`) per message.
fn sdk_read(messages: &[&Raw]) -> Vec<Value> {
    let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| {
        panic!(
            "{PYTHON_ENV} is not set: the CloudEvents Python SDK is installed by the project's \
             script; run `for line in $(scripts/install-test-tools cloudevents); do export \"$line\"; done` \
             (or the README's test command) first"
        )
    });
    let reader = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/sdk/cloudevents_reader.py"
    );
    let mut child = Command::new(&python)
        .arg(reader)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("running {python} ({PYTHON_ENV}): {e}; re-run scripts/install-test-tools")
        });
    let mut input = String::new();
    for m in messages {
        let line = json!({
            "headers": m.headers,
            "payload": base64::engine::general_purpose::STANDARD.encode(&m.payload),
        });
        input.push_str(&line.to_string());
        input.push('\n');
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the CloudEvents SDK rejected a message:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), messages.len());
    events
}

/// `ce-time` as the SDK parsed it, checked to lie in `[from, to]`.
fn assert_time_between(event: &Value, from: SystemTime, to: SystemTime) {
    let text = event["attributes"]["time"]
        .as_str()
        .unwrap_or_else(|| panic!("no time in {event}"));
    let at = humantime::parse_rfc3339_weak(&text.replace("+00:00", "Z").replace('T', " "))
        .unwrap_or_else(|e| panic!("time {text}: {e}"));
    // The header has milliseconds: allow for the truncation.
    assert!(
        at + Duration::from_millis(1) >= from && at <= to,
        "time {text} outside the test"
    );
}

fn daemon_config(sim: &ApiServer, nats: &NatsServer, dir: &std::path::Path, rest: &str) -> String {
    let token = token_file(dir, INITIAL_TOKEN);
    format!(
        "{}\n[nats]\nurl = \"{}\"\n{rest}",
        kube_section(sim, &token),
        nats.url()
    )
}

/// A CloudEvents consumer reads every change as the event it is: ADDED, MODIFIED and DELETED of a
/// namespaced core object and of a cluster-scoped custom resource arrive with the attributes the
/// docs promise (id = `Nats-Msg-Id`, source = cluster + collection path, subject = name, type per
/// resource and change, time of receipt, JSON data = the payload), the `Kube-*` headers are kept,
/// and a watch set back to `native` carries no CloudEvents header.
#[tokio::test]
async fn cloudevents_sdk_reads_every_change_and_native_headers_stay() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("web-1"));
    sim.create("gadgets", None, json!({"metadata": {"name": "g1"}}));
    sim.create(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "cm1"}}),
    );
    let nats = NatsServer::start().await.unwrap();
    let mut tap = Tap::start(&nats, "kube.>").await;
    let dir = tempfile::tempdir().unwrap();
    let config = daemon_config(
        &sim,
        &nats,
        dir.path(),
        r#"
[publish]
cluster = "prod-eu"
format = "cloudevents"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["default"]
payload = "object"
[[watches]]
name = "gadgets"
resource = "gadgets.example.com"
[[watches]]
name = "configmaps"
resource = "configmaps"
namespaces = ["default"]
format = "native"
"#,
    );
    let started = SystemTime::now();
    let _daemon = Process::spawn(&config);
    let mut got = tap.take(3).await;
    sim.update("pods", Some("default"), "web-1", |p| {
        p["metadata"]["labels"]["tier"] = json!("front")
    });
    got.extend(tap.take(1).await);
    sim.delete("gadgets", None, "g1");
    got.extend(tap.take(1).await);
    let finished = SystemTime::now();

    let by_subject: HashMap<&str, &Raw> = got.iter().map(|m| (m.subject.as_str(), m)).collect();
    let key = [
        "kube.prod-eu.core.v1.pods.default.web-1.added",
        "kube.prod-eu.core.v1.pods.default.web-1.modified",
        "kube.prod-eu.example_com.v1.gadgets._.g1.added",
        "kube.prod-eu.example_com.v1.gadgets._.g1.deleted",
    ];
    let cloud: Vec<&Raw> = key
        .iter()
        .map(|s| {
            *by_subject
                .get(s)
                .unwrap_or_else(|| panic!("no {s} in {got:#?}"))
        })
        .collect();
    let native = by_subject["kube.prod-eu.core.v1.configmaps.default.cm1.added"];
    assert!(
        native.headers.keys().all(|k| !k.starts_with("ce-")),
        "{native:?}"
    );
    assert_eq!(native.header("Kube-Event-Type"), "ADDED");

    let events = sdk_read(&cloud);
    let expect = [
        (
            "io.k8s.core.v1.pods.added",
            "/clusters/prod-eu/api/v1/namespaces/default/pods",
            "web-1",
        ),
        (
            "io.k8s.core.v1.pods.modified",
            "/clusters/prod-eu/api/v1/namespaces/default/pods",
            "web-1",
        ),
        (
            "io.k8s.example.com.v1.gadgets.added",
            "/clusters/prod-eu/apis/example.com/v1/gadgets",
            "g1",
        ),
        (
            "io.k8s.example.com.v1.gadgets.deleted",
            "/clusters/prod-eu/apis/example.com/v1/gadgets",
            "g1",
        ),
    ];
    for ((raw, event), (ce_type, source, name)) in cloud.iter().zip(&events).zip(expect) {
        let a = &event["attributes"];
        assert_eq!(a["specversion"], "1.0", "{event}");
        assert_eq!(a["type"], ce_type, "{event}");
        assert_eq!(a["source"], source, "{event}");
        assert_eq!(a["subject"], name, "{event}");
        assert_eq!(a["id"], raw.header("Nats-Msg-Id"), "{event}");
        assert_eq!(a["datacontenttype"], "application/json", "{event}");
        assert!(raw.headers.contains_key("ce-time"), "{raw:?}");
        assert_time_between(event, started, finished);
        // Native headers stay beside the attributes.
        assert_eq!(raw.header("Kube-Name"), name);
        assert_eq!(
            raw.header("Kube-Event-Type").to_lowercase(),
            ce_type.rsplit('.').next().unwrap()
        );
        // data is the payload, parsed by the SDK as JSON.
        let payload: Value = serde_json::from_slice(&raw.payload).unwrap();
        assert_eq!(event["data"], payload, "{event}");
    }
    // `payload = "object"` for pods: data is the object; gadgets keep the watch event.
    assert_eq!(events[1]["data"]["metadata"]["labels"]["tier"], "front");
    assert_eq!(events[3]["data"]["type"], "DELETED");
    assert_eq!(events[3]["data"]["object"]["metadata"]["name"], "g1");
    assert!(events[3]["attributes"]["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("gadgets:") && id.ends_with(":DELETED")));
}

/// `ce-id` names the object version, not the publish: a restarted kube2nats without durable state
/// re-announces what it lists with the same `ce-id` (and `Nats-Msg-Id`) as before, so a
/// CloudEvents consumer de-duplicates by `source` + `id` exactly where JetStream drops the repeat
/// (the stream holds each version once).
#[tokio::test]
async fn cloudevents_id_is_stable_across_republishes() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("web-1"));
    sim.create("pods", Some("default"), pod("web-2"));
    let nats = NatsServer::start().await.unwrap();
    let mut tap = Tap::start(&nats, "kube.>").await;
    let dir = tempfile::tempdir().unwrap();
    let config = daemon_config(
        &sim,
        &nats,
        dir.path(),
        r#"mode = "jetstream"
[nats.jetstream.stream]
name = "KUBE"
[state]
enabled = false
[publish]
format = "cloudevents"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["default"]
"#,
    );
    let mut first = Process::spawn(&config);
    let before = tap.take(2).await;
    first.terminate();
    first.wait_exit(WAIT);
    let _second = Process::spawn(&config);
    let after = tap.take(2).await;

    let by_name = |ms: &[Raw]| -> HashMap<String, Raw> {
        ms.iter()
            .map(|m| (m.header("Kube-Name").to_owned(), m.clone()))
            .collect()
    };
    let (before, after) = (by_name(&before), by_name(&after));
    for name in ["web-1", "web-2"] {
        let events = sdk_read(&[&before[name], &after[name]]);
        let (a, b) = (&events[0]["attributes"], &events[1]["attributes"]);
        assert_eq!((&a["id"], &a["source"]), (&b["id"], &b["source"]), "{name}");
        assert_eq!(a["id"], before[name].header("Nats-Msg-Id"));
        assert_eq!(b["id"], after[name].header("Nats-Msg-Id"));
    }
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut stream = js.get_stream("KUBE").await.unwrap();
    assert_eq!(
        stream.info().await.unwrap().state.messages,
        2,
        "each version stored once"
    );
}
