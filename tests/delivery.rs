//! Delivery end to end: the simulated API server, kube2nats, and a real nats-server. Each test
//! names the promise to subscribers it pins: which messages arrive, on which subjects, with which
//! headers, exactly once and in order.

mod common;

use std::time::Duration;

use common::daemon_env::{assert_headers, Env, PODS_WATCH};
use common::*;
use kube2nats_harness::apiserver::{
    ApiServer, ApiServerOptions, Failure, RequestFilter, Rule, INITIAL_TOKEN,
};
use kube2nats_harness::nats::{NatsAuth, NatsOptions, NatsServer};
use serde_json::json;

/// A create, an update and a delete arrive as exactly ADDED, MODIFIED, DELETED, in order, on the
/// documented subjects, with every header, and the payload is the watch event as sent.
#[tokio::test]
async fn create_update_delete_arrive_in_order_with_headers() {
    let env = Env::start("", PODS_WATCH).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.wait_ready().await;

    let created = env.sim.create("pods", Some("default"), pod("web"));
    let updated = env.sim.update("pods", Some("default"), "web", |o| {
        o["metadata"]["labels"]["tier"] = "front".into()
    });
    let deleted = env
        .sim
        .delete("pods", Some("default"), "web")
        .expect("deleted");
    let got = inbox.take(3).await;
    let subjects: Vec<&str> = got.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "kube.core.v1.pods.default.web.added",
            "kube.core.v1.pods.default.web.modified",
            "kube.core.v1.pods.default.web.deleted"
        ]
    );
    for (m, (t, obj)) in got.iter().zip([
        ("ADDED", &created),
        ("MODIFIED", &updated),
        ("DELETED", &deleted),
    ]) {
        assert_headers(m, t, obj);
        assert_eq!(m.header("Kube-Kind"), Some("Pod"));
        assert_eq!(m.header("Kube-Api-Version"), Some("v1"));
        assert_eq!(
            m.header("Kube-Synthesized"),
            None,
            "received, not synthesized"
        );
        assert_eq!(m.payload["type"], t);
        assert_eq!(
            m.payload["object"], *obj,
            "payload is the event as the API server sent it"
        );
    }
    inbox.quiet_for(QUIET).await;
    let metrics = env.metrics();
    assert_eq!(
        metric(
            &metrics,
            "kube2nats_events_published_total",
            &[("watch", "pods"), ("type", "MODIFIED")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &metrics,
            "kube2nats_events_received_total",
            &[("watch", "pods"), ("type", "DELETED")]
        ),
        Some(1.0)
    );
}

/// `payload = "object"` publishes the object alone; list-derived events carry apiVersion and kind
/// like received ones.
#[tokio::test]
async fn object_payload_mode() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let listed = sim.create("pods", Some("default"), pod("listed"));
    let nats = NatsServer::start().await.unwrap();
    // Subscribed before kube2nats starts, so the initial list's message is seen.
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let watches = format!("{PODS_WATCH}payload = \"object\"\n");
    let env = Env::start_with(sim, nats, "", &watches).await;
    let m = inbox.next().await;
    assert_eq!(m.subject, "kube.core.v1.pods.default.listed.added");
    assert_eq!(m.payload["kind"], "Pod");
    assert_eq!(m.payload["apiVersion"], "v1");
    assert_eq!(m.payload["metadata"], listed["metadata"]);
    assert_eq!(m.payload["spec"], listed["spec"]);
    assert_eq!(m.header("Kube-Synthesized"), Some("relist"));
    env.wait_ready().await;
    let created = env.sim.create("pods", Some("default"), pod("web"));
    let m = inbox.next().await;
    assert_eq!(m.subject, "kube.core.v1.pods.default.web.added");
    assert_eq!(m.payload, created, "payload is the object alone");
    assert_headers(&m, "ADDED", &created);
    inbox.quiet_for(QUIET).await;
}

/// Dropped connections (also mid-line) and server-side timeouts resume the watch without
/// publishing anything twice.
#[tokio::test]
async fn dropped_and_timed_out_watches_publish_no_duplicate() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let mut env = Env::start_with(sim, nats, "", PODS_WATCH).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.wait_ready().await;
    let mut expected = Vec::new();
    for round in 0..4 {
        let name = format!("p{round}");
        env.sim.create("pods", Some("default"), pod(&name));
        env.sim.update("pods", Some("default"), &name, |o| {
            o["metadata"]["labels"]["round"] = round.into()
        });
        let got: Vec<String> = inbox.take(2).await.iter().map(Got::short).collect();
        assert_eq!(got, [format!("ADDED {name}"), format!("MODIFIED {name}")]);
        expected.extend(got);
        // Faults hit the watch that is open now; mid-line and truncation act on its next line.
        assert!(env.sim.wait_for_watches(1, WAIT).await, "watch reopened");
        match round {
            0 => env.sim.drop_watches(),
            1 => env.sim.drop_watches_mid_line(),
            2 => env.sim.inject_garbage_line(),
            _ => env.sim.truncate_watches(),
        }
    }
    env.sim.delete("pods", Some("default"), "p0");
    assert_eq!(inbox.next().await.short(), "DELETED p0");
    inbox.quiet_for(QUIET).await;
    let restarts = env.metrics();
    assert!(
        metric(
            &restarts,
            "kube2nats_watch_restarts_total",
            &[("watch", "pods"), ("reason", "decode_error")]
        )
        .unwrap_or(0.0)
            >= 2.0
    );
    assert_eq!(
        metric(
            &restarts,
            "kube2nats_decode_errors_total",
            &[("watch", "pods")]
        ),
        Some(2.0)
    );
    assert_eq!(
        metric(
            &restarts,
            "kube2nats_relists_total",
            &[("watch", "pods"), ("reason", "initial")]
        ),
        Some(1.0)
    );
    env.stop().await;
}

/// The server's watch timeout ends streams every second here; the resumed watches publish each
/// change once.
#[tokio::test]
async fn server_side_timeouts_publish_no_duplicate() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let toml = format!(
        "{}\n[nats]\nurl = \"{}\"\n{PODS_WATCH}",
        kube_section(&sim, &token),
        nats.url()
    )
    .replace("watch_timeout = \"30s\"", "watch_timeout = \"1s\"");
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let daemon = kube2nats::facade::start(config_from(&toml)).await.unwrap();
    let mut expected = Vec::new();
    for i in 0..6 {
        let name = format!("t{i}");
        sim.create("pods", Some("default"), pod(&name));
        expected.push(format!("ADDED {name}"));
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let got: Vec<String> = inbox
        .take(expected.len())
        .await
        .iter()
        .map(Got::short)
        .collect();
    assert_eq!(got, expected);
    inbox.quiet_for(QUIET).await;
    let ended = metric(
        &daemon.metrics.render(),
        "kube2nats_watch_restarts_total",
        &[("watch", "pods"), ("reason", "stream_ended")],
    )
    .unwrap_or(0.0);
    assert!(
        ended >= 1.0,
        "the server timed out at least one watch ({ended})"
    );
    daemon.shutdown();
    daemon.wait().await.unwrap();
}

/// Changes made while the watch was cut off past the history window (410) arrive after the
/// relist as MODIFIED / ADDED / synthesized DELETED; unchanged objects are not republished; a
/// deleted-and-recreated name is a DELETED of the old uid and an ADDED of the new one.
#[tokio::test]
async fn relist_after_410_publishes_the_difference() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let a = sim.create("pods", Some("default"), pod("a"));
    sim.create("pods", Some("default"), pod("b"));
    let c = sim.create("pods", Some("default"), pod("c"));
    let old_e = sim.create("pods", Some("default"), pod("e"));
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_with(sim, nats, "", PODS_WATCH).await;
    let initial: Vec<String> = inbox.take(4).await.iter().map(Got::short).collect();
    assert_eq!(initial, ["ADDED a", "ADDED b", "ADDED c", "ADDED e"]);
    env.wait_ready().await;

    // Cut the watch off, change things, and let the history forget them.
    env.sim
        .fail_next_matching(3, RequestFilter::Watch, Failure::Internal);
    env.sim.drop_watches();
    let b2 = env.sim.update("pods", Some("default"), "b", |o| {
        o["metadata"]["labels"]["v"] = "2".into()
    });
    env.sim.delete("pods", Some("default"), "c");
    let d = env.sim.create("pods", Some("default"), pod("d"));
    env.sim.delete("pods", Some("default"), "e");
    let new_e = env.sim.create("pods", Some("default"), pod("e"));
    env.sim.compact();

    // Per name in order (the recreated name's old uid DELETED before its ADDED); across names
    // a new object's ADDED may follow later messages, since it waits for its journal record.
    let got = inbox.take(5).await;
    let mut short: Vec<String> = got.iter().map(Got::short).collect();
    let e_deleted = short.iter().position(|s| s == "DELETED e");
    let e_added = short.iter().position(|s| s == "ADDED e");
    assert!(
        e_deleted < e_added,
        "the old e's DELETED before the new e's ADDED: {short:?}"
    );
    short.sort();
    assert_eq!(
        short,
        ["ADDED d", "ADDED e", "DELETED c", "DELETED e", "MODIFIED b"],
        "the difference, once each"
    );
    assert!(got
        .iter()
        .all(|m| m.header("Kube-Synthesized") == Some("relist")));
    let find = |short: &str| {
        got.iter()
            .find(|m| m.short() == short)
            .expect("listed above")
    };
    assert_headers(find("MODIFIED b"), "MODIFIED", &b2);
    assert_headers(find("ADDED d"), "ADDED", &d);
    assert_eq!(
        find("DELETED e").header("Kube-Uid"),
        old_e["metadata"]["uid"].as_str()
    );
    assert_headers(find("ADDED e"), "ADDED", &new_e);
    assert_eq!(
        find("DELETED c").header("Kube-Uid"),
        c["metadata"]["uid"].as_str()
    );
    assert_eq!(
        find("DELETED c").subject,
        "kube.core.v1.pods.default.c.deleted"
    );
    let gone = &find("DELETED c").payload["object"];
    assert_eq!(gone["kind"], "Pod");
    assert_eq!(gone["apiVersion"], "v1");
    assert_eq!(gone["metadata"]["name"], "c");
    assert_eq!(gone["metadata"]["namespace"], "default");
    assert_eq!(gone["metadata"]["uid"], c["metadata"]["uid"]);
    inbox.quiet_for(QUIET).await;
    let _ = a;
    let metrics = env.metrics();
    assert_eq!(
        metric(
            &metrics,
            "kube2nats_relists_total",
            &[("watch", "pods"), ("reason", "expired")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &metrics,
            "kube2nats_events_synthesized_total",
            &[("watch", "pods"), ("type", "DELETED")]
        ),
        Some(2.0)
    );
    assert_eq!(
        metric(&metrics, "kube2nats_tracked_objects", &[("watch", "pods")]),
        Some(4.0)
    );
}

/// docs/messages.md names the resourceVersion a relist's DELETED carries twice: in the header
/// table (`Kube-Resource-Version`) and in the paragraph on the payload (the minimal object's
/// `metadata.resourceVersion`). A real relist's DELETED carries what each statement names.
#[tokio::test]
async fn relist_deleted_carries_the_versions_docs_messages_names() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/messages.md"),
    )
    .expect("docs/messages.md");
    let header_says = relist_deleted_in_header_table(&doc);
    let payload_says = relist_deleted_in_payload_paragraph(&doc);

    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let c = sim.create("pods", Some("default"), pod("c"));
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_with(sim, nats, "", PODS_WATCH).await;
    assert_eq!(inbox.take(2).await.len(), 2);
    env.wait_ready().await;
    // c goes while the watch is cut off, and the history forgets it: only a relist learns it.
    env.sim
        .fail_next_matching(3, RequestFilter::Watch, Failure::Internal);
    env.sim.drop_watches();
    env.sim.delete("pods", Some("default"), "c");
    env.sim.create("pods", Some("default"), pod("d"));
    env.sim.compact();
    let list_version = env.sim.resource_version().to_string();
    let deleted = loop {
        let m = inbox.next().await;
        if m.short() == "DELETED c" {
            break m;
        }
    };
    assert_eq!(deleted.header("Kube-Synthesized"), Some("relist"));
    let named = |statement: &str| -> String {
        let list = statement.contains("the list's resourceVersion");
        let last = statement.contains("last published resourceVersion");
        match (list, last) {
            (true, false) => list_version.clone(),
            (false, true) => rv(&c),
            _ => panic!(
                "docs/messages.md names no one resourceVersion this test knows (the list's, or the last published): {statement:?}"
            ),
        }
    };
    assert_ne!(list_version, rv(&c), "the two versions differ");
    assert_eq!(
        deleted.header("Kube-Resource-Version").unwrap_or_default(),
        named(&header_says),
        "the header, as the table says: {header_says:?}"
    );
    assert_eq!(
        deleted.payload["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default(),
        named(&payload_says),
        "the payload, as its paragraph says: {payload_says:?}"
    );
}

/// What the `Kube-Resource-Version` row of docs/messages.md says after "relist's DELETED".
fn relist_deleted_in_header_table(doc: &str) -> String {
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `Kube-Resource-Version` |"))
        .expect("docs/messages.md has a Kube-Resource-Version row");
    row.split_once("relist's DELETED")
        .expect("the row says what a relist's DELETED carries")
        .1
        .to_owned()
}

/// The sentence of docs/messages.md on the payload of a DELETED synthesized by a relist, its
/// lines joined.
fn relist_deleted_in_payload_paragraph(doc: &str) -> String {
    let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let from = text
        .find("A DELETED synthesized by a relist carries")
        .expect("docs/messages.md says what a relist's DELETED payload carries");
    let sentence = &text[from..];
    let end = sentence.find("). ").map_or(sentence.len(), |i| i + 2);
    sentence[..end].to_owned()
}

/// `initial_state = "skip"` publishes only changes after start.
#[tokio::test]
async fn initial_state_skip_publishes_only_later_changes() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("old"));
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_with(
        sim,
        nats,
        "",
        &format!("{PODS_WATCH}initial_state = \"skip\"\n"),
    )
    .await;
    env.wait_ready().await;
    env.sim.create("pods", Some("default"), pod("new"));
    env.sim.update("pods", Some("default"), "old", |o| {
        o["metadata"]["labels"]["x"] = "y".into()
    });
    // Across objects the order may differ: the new object's ADDED waits for its journal record.
    let mut got: Vec<String> = inbox.take(2).await.iter().map(Got::short).collect();
    got.sort();
    assert_eq!(got, ["ADDED new", "MODIFIED old"]);
}

/// The event filter publishes only the configured types and counts the rest as filtered.
#[tokio::test]
async fn event_filter() {
    let env = Env::start("", &format!("{PODS_WATCH}events = [\"DELETED\"]\n")).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.wait_ready().await;
    env.sim.create("pods", Some("default"), pod("x"));
    env.sim.update("pods", Some("default"), "x", |o| {
        o["metadata"]["labels"]["x"] = "y".into()
    });
    env.sim.delete("pods", Some("default"), "x");
    let got: Vec<String> = inbox.take(1).await.iter().map(Got::short).collect();
    assert_eq!(got, ["DELETED x"]);
    inbox.quiet_for(QUIET).await;
    assert_eq!(
        metric(
            &env.metrics(),
            "kube2nats_events_dropped_total",
            &[("watch", "pods"), ("reason", "filtered")]
        ),
        Some(2.0)
    );
}

/// Names with dots, and tokens NATS reserves, are escaped into single subject tokens.
#[tokio::test]
async fn subject_tokens_are_escaped() {
    let watches = r#"
[[watches]]
name = "configmaps"
resource = "configmaps"
namespaces = ["kube-system"]
"#;
    let env = Env::start("", watches).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.core.v1.configmaps.kube-system.*.added").await;
    env.wait_ready().await;
    env.sim.create(
        "configmaps",
        Some("kube-system"),
        json!({"metadata": {"name": "my.app.config"}, "data": {"k": "v"}}),
    );
    let m = inbox.next().await;
    assert_eq!(
        m.subject,
        "kube.core.v1.configmaps.kube-system.my_app_config.added"
    );
    assert_eq!(m.header("Kube-Name"), Some("my.app.config"));
}

/// Cluster-scoped objects use `_` as the namespace token and carry no Kube-Namespace header;
/// custom resources use their group.
#[tokio::test]
async fn cluster_scoped_and_custom_resources() {
    let watches = r#"
[[watches]]
name = "namespaces"
resource = "namespaces"

[[watches]]
name = "widgets"
resource = "widgets.example.com"
"#;
    let env = Env::start("", watches).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.wait_ready().await;
    env.sim
        .create("namespaces", None, json!({"metadata": {"name": "team-a"}}));
    let ns = inbox.next().await;
    assert_eq!(ns.subject, "kube.core.v1.namespaces._.team-a.added");
    assert_eq!(ns.header("Kube-Namespace"), None);
    env.sim.create(
        "widgets",
        Some("team-a"),
        json!({"metadata": {"name": "w1"}, "spec": {"size": 3}}),
    );
    let w = inbox.next().await;
    assert_eq!(w.subject, "kube.example_com.v1.widgets.team-a.w1.added");
    assert_eq!(w.header("Kube-Kind"), Some("Widget"));
    assert_eq!(w.header("Kube-Api-Version"), Some("example.com/v1"));
}

/// Several watches run independently: one refused by RBAC does not stall the others, and
/// readiness names it.
#[tokio::test]
async fn one_failing_watch_does_not_stall_the_others() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.set_rules(
        INITIAL_TOKEN,
        vec![Rule::new(&["get", "list", "watch"], &[""], &["*"], &[])],
    );
    let nats = NatsServer::start().await.unwrap();
    let watches = r#"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["default", "other"]

[[watches]]
name = "deployments"
resource = "deployments.apps"
"#;
    let env = Env::start_with(sim, nats, "", watches).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    eventually("pods synced", || {
        metric(
            &env.metrics(),
            "kube2nats_watch_synced",
            &[("watch", "pods")],
        ) == Some(1.0)
    })
    .await;
    env.sim.create("pods", Some("other"), pod("o"));
    env.sim.create(
        "deployments",
        Some("default"),
        json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}}),
    );
    env.sim.create("pods", Some("default"), pod("p"));
    // Namespaces are independent targets: order is kept per object, not across them.
    let mut got: Vec<String> = inbox.take(2).await.iter().map(Got::short).collect();
    got.sort();
    assert_eq!(got, ["ADDED o", "ADDED p"]);
    let (code, body) = env.get("/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("watch deployments: not synced"), "{body}");
    assert!(!body.contains("watch pods"), "{body}");
    let forbidden = metric(
        &env.metrics(),
        "kube2nats_watch_restarts_total",
        &[("watch", "deployments"), ("reason", "forbidden")],
    )
    .unwrap_or(0.0);
    assert!(forbidden >= 1.0);
}

/// NATS authentication by token and by user/password.
#[tokio::test]
async fn nats_auth_by_token_and_user_password() {
    for (auth, section) in [
        (NatsAuth::Token("s3cret".into()), "token = \"s3cret\""),
        (
            NatsAuth::UserPassword("kube2nats".into(), "pa55".into()),
            "user = \"kube2nats\"\npassword = \"pa55\"",
        ),
    ] {
        let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
        let nats = NatsServer::start_with(NatsOptions {
            jetstream: false,
            auth: auth.clone(),
            tls: false,
            max_payload: None,
        })
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let token = token_file(dir.path(), INITIAL_TOKEN);
        let toml = format!(
            "{}\n[nats]\nurl = \"{}\"\n{section}\n{PODS_WATCH}",
            kube_section(&sim, &token),
            nats.url()
        );
        let options = match &auth {
            NatsAuth::Token(t) => async_nats::ConnectOptions::with_token(t.clone()),
            NatsAuth::UserPassword(u, p) => {
                async_nats::ConnectOptions::with_user_and_password(u.clone(), p.clone())
            }
            NatsAuth::None | NatsAuth::NKey(_) | NatsAuth::Block(_) => {
                unreachable!("not among the cases")
            }
        };
        let nc = options
            .connect(nats.url())
            .await
            .expect("test subscriber authenticates");
        let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
        let daemon = kube2nats::facade::start(config_from(&toml)).await.unwrap();
        sim.create("pods", Some("default"), pod("authed"));
        assert_eq!(inbox.next().await.short(), "ADDED authed", "{auth:?}");
        daemon.shutdown();
        daemon.wait().await.unwrap();

        // Wrong credentials: refused by the server, never connected, nothing published.
        let wrong = toml.replace("s3cret", "wrong").replace("pa55", "wrong");
        let refusals = nats.log().matches("authentication error").count();
        let daemon = kube2nats::facade::start(config_from(&wrong)).await.unwrap();
        eventually("nats-server refuses kube2nats' credentials", || {
            nats.log().matches("authentication error").count() > refusals
        })
        .await;
        sim.create("pods", Some("default"), pod("refused"));
        inbox.quiet_for(QUIET).await;
        assert_eq!(
            metric(&daemon.metrics.render(), "kube2nats_nats_connected", &[]),
            Some(0.0),
            "{auth:?}"
        );
        daemon.shutdown();
        let _ = daemon.wait().await;
    }
}

/// NATS over TLS with a custom CA (`nats.tls_ca_file`), and NKey authentication from a seed file.
#[tokio::test]
async fn nats_tls_with_a_custom_ca_and_nkey_auth() {
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().expect("a generated key has a seed");
    let nats = NatsServer::start_with(NatsOptions {
        jetstream: false,
        auth: NatsAuth::NKey(user.public_key()),
        tls: true,
        max_payload: None,
    })
    .await
    .unwrap();
    let ca = nats.ca_file().expect("a TLS server has a CA file");
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let seed_file = dir.path().join("kube2nats.nk");
    std::fs::write(&seed_file, &seed).unwrap();
    let section = format!(
        "nkey_seed_file = {:?}\ntls_ca_file = {:?}\n",
        seed_file.display().to_string(),
        ca.display().to_string()
    );
    let toml = format!(
        "{}\n[nats]\nurl = \"{}\"\n{section}{PODS_WATCH}",
        kube_section(&sim, &token),
        nats.url()
    );
    let nc = async_nats::ConnectOptions::with_nkey(seed.clone())
        .add_root_certificates(ca.clone())
        .require_tls(true)
        .connect(nats.url())
        .await
        .expect("test subscriber over TLS");
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let daemon = kube2nats::facade::start(config_from(&toml)).await.unwrap();
    sim.create("pods", Some("default"), pod("over-tls"));
    assert_eq!(inbox.next().await.short(), "ADDED over-tls");
    daemon.shutdown();
    daemon.wait().await.unwrap();

    // Without the CA, the server's certificate is not trusted: never connected.
    let untrusting = toml.replace(
        &format!("tls_ca_file = {:?}\n", ca.display().to_string()),
        "",
    );
    let refusals = nats.log().matches("TLS handshake error").count();
    let daemon = kube2nats::facade::start(config_from(&untrusting))
        .await
        .unwrap();
    eventually("kube2nats abandons the TLS handshake", || {
        nats.log().matches("TLS handshake error").count() > refusals
    })
    .await;
    sim.create("pods", Some("default"), pod("untrusted"));
    inbox.quiet_for(QUIET).await;
    assert_eq!(
        metric(&daemon.metrics.render(), "kube2nats_nats_connected", &[]),
        Some(0.0)
    );
    daemon.shutdown();
    let _ = daemon.wait().await;
}

// ---------------------------------------------------------------------------------------------
// An API server as unkind as kube-apiserver can be: replays, silence, refused or ignored
// streaming lists, terminated slow watchers, a lagging watch cache.
