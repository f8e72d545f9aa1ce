//! The watch stage against the simulated API server: for each path of the list+watch state
//! machine, the exact sequence of outcomes it emits (no NATS involved).

mod rig;

use std::sync::Arc;
use std::time::Duration;

use kube2nats_harness::apiserver::{
    ApiServer, ApiServerOptions, Auth, Failure, RequestFilter, Rule, INITIAL_TOKEN,
};

use rig::*;

use crate::backoff::Backoff;
use crate::event::ResourceInfo;
use crate::kube::credentials::{AuthSource, Endpoint};
use crate::kube::discovery::Discovery;
use crate::kube::testing::{api_client, client, pod, token_file, FAST_BACKOFF};
use crate::watcher::machine::{Machine, Outcome};
use crate::watcher::ListSlots;

async fn sim() -> ApiServer {
    ApiServer::start(ApiServerOptions::default())
        .await
        .expect("starting the simulated API server")
}

/// A recorder of a pods watch in `default`, authenticated with the initial token.
async fn watch_pods(sim: &ApiServer, dir: &tempfile::TempDir) -> Recorder {
    let token = token_file(dir.path(), INITIAL_TOKEN);
    Recorder::start(
        client(sim, Some(token), Duration::from_secs(60)),
        target(pods(), Some("default")),
    )
}

/// The initial list is paged (`limit`/`continue`), all pages of one list at one version, and the
/// watch opens from the list's version.
#[tokio::test]
async fn initial_paged_list_then_watch_from_the_list_version() {
    let sim = sim().await;
    for i in 0..5 {
        sim.create("pods", Some("default"), pod(&format!("p{i}")));
    }
    sim.create("pods", Some("other"), pod("elsewhere"));
    let list_rv = sim.resource_version();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let mut t = target(pods(), Some("default"));
    t.page_size = 2;
    let mut rec = Recorder::start(client(&sim, Some(token), Duration::from_secs(60)), t);
    assert_eq!(rec.next().await, "list start:initial [p0 p1]");
    assert_eq!(rec.next().await, "list [p2 p3]");
    assert_eq!(rec.next().await, format!("list [p4] complete:{list_rv}"));
    assert_eq!(rec.next().await, format!("opened {list_rv}"));
    let p5 = sim.create("pods", Some("default"), pod("p5"));
    assert_eq!(rec.next().await, format!("ADDED p5 {}", rv(&p5)));

    let lists: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/namespaces/default/pods" && !r.is_watch())
        .collect();
    assert_eq!(lists.len(), 3);
    assert_eq!(lists[0].param("limit"), Some("2"));
    assert_eq!(lists[0].param("continue"), None);
    assert!(lists[1].param("continue").is_some());
    let watch = sim
        .requests()
        .into_iter()
        .find(|r| r.is_watch())
        .expect("a watch request");
    assert_eq!(
        watch.param("resourceVersion"),
        Some(list_rv.to_string().as_str())
    );
    assert_eq!(watch.param("allowWatchBookmarks"), Some("true"));
    let timeout: u64 = watch
        .param("timeoutSeconds")
        .expect("timeoutSeconds")
        .parse()
        .unwrap();
    assert!(
        (60..120).contains(&timeout),
        "timeoutSeconds {timeout} not in [T, 2T)"
    );
}

/// A dropped connection resumes from the last version seen: no relist, no gap.
#[tokio::test]
async fn dropped_connection_resumes_without_relist_or_gap() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    rec.until("opened").await;
    let a = sim.create("pods", Some("default"), pod("a"));
    assert_eq!(rec.next().await, format!("ADDED a {}", rv(&a)));
    sim.drop_watches();
    assert_eq!(rec.next().await, "restart transport");
    let b = sim.create("pods", Some("default"), pod("b"));
    assert_eq!(rec.next().await, format!("opened {}", rv(&a)));
    assert_eq!(rec.next().await, format!("ADDED b {}", rv(&b)));

    sim.drop_watches_mid_line();
    let c = sim.update("pods", Some("default"), "a", |o| {
        o["metadata"]["labels"]["v"] = "2".into()
    });
    let (next, skipped) = rec.until("MODIFIED").await;
    assert_eq!(next, format!("MODIFIED a {}", rv(&c)));
    assert!(
        skipped
            .iter()
            .all(|s| s.starts_with("restart") || s.starts_with("opened")),
        "{skipped:?}"
    );
    assert!(
        !skipped.iter().any(|s| s.starts_with("list")),
        "no relist: {skipped:?}"
    );
}

/// The server's own timeout ends the stream cleanly: the watch reopens from the last version at
/// once, without a relist.
#[tokio::test]
async fn server_timeout_resumes_from_the_last_version() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let mut t = target(pods(), Some("default"));
    t.watch_timeout = Duration::from_secs(1);
    let mut rec = Recorder::start(client(&sim, Some(token), Duration::from_secs(60)), t);
    rec.until("opened").await;
    let a = sim.create("pods", Some("default"), pod("a"));
    assert_eq!(rec.next().await, format!("ADDED a {}", rv(&a)));
    assert_eq!(rec.next().await, "restart stream_ended");
    assert_eq!(rec.next().await, format!("opened {}", rv(&a)));
}

/// A version compacted away while disconnected: the server answers with an ERROR 410 event,
/// and the machine relists.
#[tokio::test]
async fn expired_version_relists() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    let (opened, _) = rec.until("opened").await;
    // Hold the watch off with failures while history moves on and is compacted.
    sim.fail_next_matching(2, RequestFilter::Watch, Failure::Internal);
    sim.drop_watches();
    sim.create("pods", Some("default"), pod("during-gap"));
    sim.compact();
    assert_eq!(rec.next().await, "restart transport");
    assert_eq!(rec.next().await, "restart server_error");
    assert_eq!(rec.next().await, "restart server_error");
    // The server accepts the watch (200) and then says 410 inside the stream, as a real one does.
    assert_eq!(rec.next().await, opened);
    assert_eq!(rec.next().await, "restart expired");
    let now = sim.resource_version();
    assert_eq!(
        rec.next().await,
        format!("list start:expired [during-gap] complete:{now}")
    );
    assert_eq!(rec.next().await, format!("opened {now}"));
}

/// Bookmarks advance the resume point: the reconnect asks for the bookmark's version.
#[tokio::test]
async fn bookmark_advances_the_resume_point() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    rec.until("opened").await;
    // A change elsewhere moves the global version without an event on this watch.
    sim.create("pods", Some("other"), pod("elsewhere"));
    let moved = sim.resource_version();
    sim.send_bookmarks();
    assert_eq!(rec.next().await, format!("bookmark {moved}"));
    sim.clear_requests();
    sim.drop_watches();
    assert_eq!(rec.next().await, "restart transport");
    assert_eq!(rec.next().await, format!("opened {moved}"));
    let watch = sim
        .requests()
        .into_iter()
        .find(|r| r.is_watch())
        .expect("a reconnect");
    assert_eq!(
        watch.param("resourceVersion"),
        Some(moved.to_string().as_str())
    );
}

/// A rotated token file is picked up; a 401 makes the client re-read it at once.
#[tokio::test]
async fn token_rotation_and_401_recovery() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    // A long reload interval: only the 401 can make the client read the file again.
    let mut rec = Recorder::start(
        client(&sim, Some(token.clone()), Duration::from_secs(3600)),
        target(pods(), Some("default")),
    );
    rec.until("opened").await;

    sim.set_valid_tokens(&["rotated-1"]);
    sim.drop_watches();
    assert_eq!(rec.next().await, "restart transport");
    assert_eq!(rec.next().await, "restart unauthorized");
    std::fs::write(&token, "rotated-1").unwrap();
    let (opened, skipped) = rec.until("opened").await;
    assert!(
        skipped.iter().all(|s| s == "restart unauthorized"),
        "{skipped:?}"
    );
    let a = sim.create("pods", Some("default"), pod("a"));
    assert_eq!(rec.next().await, format!("ADDED a {}", rv(&a)));
    assert!(opened.starts_with("opened"));
    assert!(sim.requests().iter().any(|r| r.status == 401));
}

/// A token file rewritten while running is used after the reload interval, with no 401.
#[tokio::test]
async fn token_file_is_reread_periodically() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let mut rec = Recorder::start(
        client(&sim, Some(token.clone()), Duration::from_millis(100)),
        target(pods(), Some("default")),
    );
    rec.until("opened").await;
    std::fs::write(&token, "next").unwrap();
    sim.set_valid_tokens(&[INITIAL_TOKEN, "next"]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    sim.set_valid_tokens(&["next"]);
    sim.drop_watches();
    assert_eq!(rec.next().await, "restart transport");
    assert!(rec.next().await.starts_with("opened"));
    assert!(sim.requests().iter().all(|r| r.status != 401));
}

/// RBAC refusing `watch` gives a Forbidden restart carrying the server's message, retried with
/// backoff; once allowed, the watch proceeds.
#[tokio::test]
async fn forbidden_watch_reports_and_keeps_retrying() {
    let sim = sim().await;
    sim.set_rules(
        INITIAL_TOKEN,
        vec![Rule::new(&["get", "list"], &[""], &["pods"], &["default"])],
    );
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    assert!(rec.next().await.starts_with("list start:initial"));
    let (text, outcome) = rec.next_outcome().await;
    assert_eq!(text, "restart forbidden");
    let Outcome::Restart(restart) = outcome else {
        unreachable!()
    };
    let error = restart.error.expect("an error message").to_string();
    assert!(error.contains(r#"cannot watch resource "pods""#), "{error}");
    assert!(restart.retry_in.is_some());
    assert_eq!(rec.next().await, "restart forbidden", "keeps retrying");
    allow_pods_in(&sim, "default");
    rec.until("opened").await;
}

/// 429 with Retry-After: the machine waits what the server asked (within the backoff bounds)
/// and re-watches from the same version, without a relist.
#[tokio::test]
async fn throttled_watch_honours_retry_after() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    let (opened, _) = rec.until("opened").await;
    sim.fail_next_matching(
        1,
        RequestFilter::Watch,
        Failure::TooManyRequests {
            retry_after_secs: 1,
        },
    );
    sim.drop_watches();
    assert_eq!(rec.next().await, "restart transport");
    let (text, outcome) = rec.next_outcome().await;
    assert_eq!(text, "restart throttled");
    let Outcome::Restart(restart) = outcome else {
        unreachable!()
    };
    assert_eq!(restart.retry_in, Some(Duration::from_secs(1)));
    let started = tokio::time::Instant::now();
    assert_eq!(rec.next().await, opened, "same version, no relist");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited {:?}",
        started.elapsed()
    );
}

/// 503 with Retry-After on the list: retried after the pause.
#[tokio::test]
async fn unavailable_list_is_retried() {
    let sim = sim().await;
    sim.create("pods", Some("default"), pod("a"));
    sim.fail_next_matching(
        2,
        RequestFilter::List,
        Failure::Unavailable {
            retry_after_secs: 0,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    assert_eq!(rec.next().await, "restart server_error");
    assert_eq!(rec.next().await, "restart server_error");
    assert!(rec.next().await.starts_with("list start:initial [a]"));
}

/// A garbage line ends the stream; the watch resumes from the last good version.
#[tokio::test]
async fn garbage_line_is_recovered_from() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    rec.until("opened").await;
    let a = sim.create("pods", Some("default"), pod("a"));
    assert_eq!(rec.next().await, format!("ADDED a {}", rv(&a)));
    sim.inject_garbage_line();
    assert_eq!(rec.next().await, "restart decode_error");
    assert_eq!(rec.next().await, format!("opened {}", rv(&a)));
    let b = sim.create("pods", Some("default"), pod("b"));
    assert_eq!(rec.next().await, format!("ADDED b {}", rv(&b)));
}

/// A body that ends inside a line is a decode error, not an event; the watch resumes.
#[tokio::test]
async fn truncated_line_is_recovered_from() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    let (opened, _) = rec.until("opened").await;
    sim.truncate_watches();
    let a = sim.create("pods", Some("default"), pod("a"));
    assert_eq!(rec.next().await, "restart decode_error");
    assert_eq!(rec.next().await, opened);
    assert_eq!(rec.next().await, format!("ADDED a {}", rv(&a)));
}

/// HTTPS with the cluster CA from a file; without that CA the connection is refused.
#[tokio::test]
async fn tls_with_the_ca_file() {
    let sim = ApiServer::start(ApiServerOptions {
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(sim.url().starts_with("https://"));
    sim.create("pods", Some("default"), pod("secure"));
    let dir = tempfile::tempdir().unwrap();
    let mut rec = watch_pods(&sim, &dir).await;
    assert!(rec.next().await.starts_with("list start:initial [secure]"));

    let token = token_file(dir.path(), INITIAL_TOKEN);
    let endpoint = Endpoint {
        base_url: sim.url().parse().unwrap(),
        ca_pem: None,
        identity_pem: None,
        auth: Some(AuthSource::file(token, Duration::from_secs(60))),
        insecure_skip_tls_verify: false,
        proxy_url: None,
    };
    let mut rec = Recorder::start(api_client(endpoint), target(pods(), Some("default")));
    assert_eq!(rec.next().await, "restart transport");
}

/// Plain HTTP with no credentials, as behind `kubectl proxy`.
#[tokio::test]
async fn plain_http_without_auth_like_kubectl_proxy() {
    let sim = ApiServer::start(ApiServerOptions {
        auth: Auth::None,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let mut rec = Recorder::start(
        client(&sim, None, Duration::from_secs(60)),
        target(pods(), Some("default")),
    );
    assert!(rec.next().await.starts_with("list start:initial [a]"));
    assert!(sim.requests().iter().all(|r| !r.token_sent));
}

/// kubectl-style names resolve through discovery: core, apps (with and without version), a
/// custom resource, and cluster-scoped resources.
#[tokio::test]
async fn kubectl_style_names_resolve_through_discovery() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let client = client(&sim, Some(token), Duration::from_secs(60));
    let discovery = Discovery::fetch(&client).await.expect("discovery");
    let cases = [
        ("pods", "", "v1", "pods", "Pod", true),
        ("po", "", "v1", "pods", "Pod", true),
        (
            "deployments.apps",
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
        ),
        (
            "deployments.v1.apps",
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
        ),
        (
            "widgets.example.com",
            "example.com",
            "v1",
            "widgets",
            "Widget",
            true,
        ),
        (
            "widgets.v1.example.com",
            "example.com",
            "v1",
            "widgets",
            "Widget",
            true,
        ),
        ("namespaces", "", "v1", "namespaces", "Namespace", false),
        ("configmaps", "", "v1", "configmaps", "ConfigMap", true),
    ];
    for (name, group, version, plural, kind, namespaced) in cases {
        let r = discovery
            .resolve(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (
                r.group.as_str(),
                r.version.as_str(),
                r.plural.as_str(),
                r.kind.as_str(),
                r.namespaced
            ),
            (group, version, plural, kind, namespaced),
            "{name}"
        );
    }
    let err = discovery
        .resolve("widget.example.org")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown resource"), "{err}");
    let err = discovery
        .resolve("deploymets.apps")
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean deployments.apps"), "{err}");
}

/// A cluster-scoped resource is listed and watched without a namespace.
#[tokio::test]
async fn cluster_scoped_resource() {
    let sim = sim().await;
    sim.create(
        "namespaces",
        None,
        serde_json::json!({"metadata": {"name": "team-a"}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let client = client(&sim, Some(token), Duration::from_secs(60));
    let discovery = Discovery::fetch(&client).await.unwrap();
    let mut rec = Recorder::start(
        client,
        target(discovery.resolve("namespaces").unwrap(), None),
    );
    let (first, outcome) = rec.next_outcome().await;
    assert!(first.starts_with("list start:initial [team-a]"), "{first}");
    let Outcome::ListPage { items, .. } = outcome else {
        unreachable!()
    };
    assert_eq!(items[0].meta.namespace, None);
    let obj: serde_json::Value = serde_json::from_slice(&items[0].object).unwrap();
    assert_eq!(
        (obj["kind"].as_str(), obj["apiVersion"].as_str()),
        (Some("Namespace"), Some("v1")),
        "list items get kind and apiVersion"
    );
    rec.until("opened").await;
    let b = sim.create(
        "namespaces",
        None,
        serde_json::json!({"metadata": {"name": "team-b"}}),
    );
    assert_eq!(rec.next().await, format!("ADDED team-b {}", rv(&b)));
    assert!(sim
        .requests()
        .iter()
        .filter(|r| r.is_watch())
        .all(|r| r.path == "/api/v1/namespaces"));
}

/// Label and field selectors are passed to the server on lists and watches.
#[tokio::test]
async fn selectors_are_sent_to_the_server() {
    let sim = sim().await;
    sim.create("pods", Some("default"), pod("web"));
    sim.create(
        "pods",
        Some("default"),
        serde_json::json!({"metadata": {"name": "db", "labels": {"app": "db"}}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let mut t = target(pods(), Some("default"));
    t.label_selector = Some("app=web".into());
    t.field_selector = Some("metadata.name!=other".into());
    let mut rec = Recorder::start(client(&sim, Some(token), Duration::from_secs(60)), t);
    assert!(rec
        .next()
        .await
        .starts_with("list start:initial [web] complete:"));
    rec.until("opened").await;
    assert!(sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/pods"))
        .all(|r| r.param("labelSelector") == Some("app=web")
            && r.param("fieldSelector") == Some("metadata.name!=other")));
}

/// With streaming lists on, the initial state arrives as one watch's initial events, closed by
/// the `k8s.io/initial-events-end` bookmark, and the same stream continues as the watch.
#[tokio::test]
async fn streaming_list() {
    let sim = sim().await;
    sim.create("pods", Some("default"), pod("a"));
    sim.create("pods", Some("default"), pod("b"));
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let mut t = target(pods(), Some("default"));
    t.streaming_list = true;
    let mut rec = Recorder::start(client(&sim, Some(token), Duration::from_secs(60)), t);
    assert_eq!(rec.next().await, "list start:initial []");
    let mut names = vec![rec.next().await, rec.next().await];
    names.sort();
    assert_eq!(names, ["list [a]", "list [b]"]);
    let now = sim.resource_version();
    assert_eq!(rec.next().await, format!("list [] complete:{now}"));
    let c = sim.create("pods", Some("default"), pod("c"));
    assert_eq!(rec.next().await, format!("ADDED c {}", rv(&c)));
    assert!(
        sim.requests()
            .iter()
            .all(|r| !r.path.ends_with("/pods") || r.is_watch()),
        "no paged list"
    );
}

/// A `continue` token that expires between two pages (a plain HTTP 410) restarts the list from
/// the first page; only a watch-level 410 is a relist of a different kind.
#[tokio::test]
async fn expired_continue_token_restarts_the_list() {
    let sim = sim().await;
    for name in ["a", "b", "c"] {
        sim.create("pods", Some("default"), pod(name));
    }
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let mut t = target(pods(), Some("default"));
    t.page_size = 2;
    let mut machine = Machine::new(
        client(&sim, Some(token), Duration::from_secs(60)),
        std::sync::Arc::new(t),
        Backoff::new(FAST_BACKOFF),
    );
    let state = machine.start();
    let (first, state) = machine.step(state).await;
    assert_eq!(describe(&first), "list start:initial [a b]");
    sim.create("pods", Some("default"), pod("d"));
    sim.compact();
    let (expired, state) = machine.step(state).await;
    assert_eq!(describe(&expired), "restart expired");
    assert!(sim
        .requests()
        .iter()
        .any(|r| r.status == 410 && r.param("continue").is_some()));
    let (restarted, state) = machine.step(state).await;
    assert_eq!(describe(&restarted), "list start:continue_expired [a b]");
    let (last, _) = machine.step(state).await;
    assert_eq!(
        describe(&last),
        format!("list [c d] complete:{}", sim.resource_version())
    );
}

/// A machine for pods in `namespace`, listing in pages of two, only while it holds a list slot.
fn queued_pods(
    sim: &ApiServer,
    dir: &tempfile::TempDir,
    namespace: &str,
    slots: &ListSlots,
) -> Recorder {
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let mut t = target(pods(), Some(namespace));
    t.page_size = 2;
    let machine = Machine::new(
        client(sim, Some(token), Duration::from_secs(60)),
        Arc::new(t),
        Backoff::new(FAST_BACKOFF),
    )
    .with_list_slots(slots.clone());
    Recorder::machine(machine)
}

/// With one list slot, targets list one after another (no page of one list between the pages of
/// another), and every target lists all its objects and opens its watch.
#[tokio::test]
async fn one_list_at_a_time_and_every_target_lists() {
    let sim = sim().await;
    let namespaces = ["a", "b", "c"];
    for ns in namespaces {
        for i in 0..5 {
            sim.create("pods", Some(ns), pod(&format!("{ns}-{i}")));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let slots = ListSlots::new(1);
    let mut recorders: Vec<Recorder> = namespaces
        .iter()
        .map(|ns| queued_pods(&sim, &dir, ns, &slots))
        .collect();
    for (ns, rec) in namespaces.iter().zip(&mut recorders) {
        let (_, listed) = rec.until("opened").await;
        let names: Vec<String> = listed
            .join(" ")
            .split([' ', '[', ']'])
            .filter(|w| w.starts_with(&format!("{ns}-")))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            names,
            (0..5).map(|i| format!("{ns}-{i}")).collect::<Vec<_>>(),
            "{listed:?}"
        );
    }
    let lists: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| !r.is_watch() && r.path.ends_with("/pods"))
        .map(|r| r.path)
        .collect();
    assert_eq!(lists.len(), 9, "three pages per namespace: {lists:?}");
    let mut runs = lists.clone();
    runs.dedup();
    assert_eq!(
        runs.len(),
        3,
        "the pages of one list were interleaved with another's: {lists:?}"
    );
    assert_eq!(
        slots.free(),
        1,
        "every slot given back once the watches opened"
    );
}

/// The token may read pods in `namespace` only.
fn allow_pods_in(sim: &ApiServer, namespace: &str) {
    sim.set_rules(
        INITIAL_TOKEN,
        vec![Rule::new(
            &["get", "list", "watch"],
            &[""],
            &["pods"],
            &[namespace],
        )],
    );
}

/// A target whose list fails and backs off gives its slot back: the others list meanwhile.
#[tokio::test]
async fn a_list_that_backs_off_lets_the_others_list() {
    let sim = sim().await;
    sim.create("pods", Some("b"), pod("b0"));
    allow_pods_in(&sim, "b");
    let dir = tempfile::tempdir().unwrap();
    let slots = ListSlots::new(1);
    let mut refused = queued_pods(&sim, &dir, "a", &slots);
    assert_eq!(refused.next().await, "restart forbidden");
    let mut allowed = queued_pods(&sim, &dir, "b", &slots);
    let (_, listed) = allowed.until("opened").await;
    assert!(listed.iter().any(|l| l.contains("b0")), "{listed:?}");
    assert_eq!(refused.next().await, "restart forbidden", "still retrying");
}

/// A CRD deleted: the API server's DELETED events, the watch ends, and the 404 that follows is
/// reported once as `unserved` (`watch_served` 0); the lists that look for the resource again
/// stay quiet until the CRD is back, and the first that succeeds lists what exists
/// (`watch_served` 1). docs/troubleshooting.md.
#[tokio::test]
async fn a_resource_no_longer_served_is_reported_once_and_listed_when_back() {
    let sim = sim().await;
    let w1 = sim.create(
        "widgets",
        Some("default"),
        serde_json::json!({"metadata": {"name": "w1"}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let widgets = ResourceInfo {
        group: "example.com".into(),
        version: "v1".into(),
        plural: "widgets".into(),
        kind: "Widget".into(),
        namespaced: true,
    };
    let served = prometheus::IntGauge::new("served", "served").unwrap();
    served.set(1);
    let machine = Machine::new(
        client(&sim, Some(token), Duration::from_secs(60)),
        Arc::new(target(widgets, Some("default"))),
        Backoff::new(FAST_BACKOFF),
    )
    .with_served(Some(served.clone()));
    let mut rec = Recorder::machine(machine);
    assert_eq!(
        rec.next().await,
        format!("list start:initial [w1] complete:{}", rv(&w1))
    );
    rec.until("opened").await;

    assert_eq!(sim.delete_crd("widgets"), 1);
    let deleted = sim.resource_version();
    assert_eq!(rec.next().await, format!("DELETED w1 {deleted}"));
    assert_eq!(rec.next().await, "restart stream_ended");
    assert_eq!(rec.next().await, "unserved");
    assert_eq!(served.get(), 0);
    // Lists at 1 s, then 2 s: 404 each, reported no more.
    rec.quiet_for(Duration::from_millis(3500)).await;
    assert_eq!(served.get(), 0);

    sim.create_crd("widgets");
    let w2 = sim.create(
        "widgets",
        Some("default"),
        serde_json::json!({"metadata": {"name": "w2"}}),
    );
    assert_eq!(
        rec.next().await,
        format!("list start:initial [w2] complete:{}", rv(&w2))
    );
    assert_eq!(served.get(), 1);
    assert_eq!(rec.next().await, format!("opened {}", rv(&w2)));
}
