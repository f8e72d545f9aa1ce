//! Delivery end to end, watch by watch: how kube2nats resumes, falls back and catches up when the
//! API server times a watch out, replays events, goes silent, refuses or ignores streaming lists,
//! or serves from a watch cache behind the client. Each test names what subscribers see.

mod common;

use std::time::Duration;

use common::daemon_env::{assert_headers, Env, PODS_WATCH};
use common::*;
use kube2nats_harness::apiserver::{
    ApiServer, ApiServerOptions, Failure, InitialEvents, RequestFilter,
};
use kube2nats_harness::nats::NatsServer;

/// Sets the watch timeout (`T`: the server ends each watch after T to 2T, the client gives up on a
/// silent one at 3T at most).
fn watch_timeout(toml: String, timeout: &str) -> String {
    toml.replace(
        "watch_timeout = \"30s\"",
        &format!("watch_timeout = \"{timeout}\""),
    )
}

fn streaming_lists(toml: String) -> String {
    toml.replace("[kubernetes]\n", "[kubernetes]\nstreaming_list = true\n")
}

fn pods_metric(env: &Env, name: &str, label: (&str, &str)) -> f64 {
    metric(&env.metrics(), name, &[("watch", "pods"), label]).unwrap_or(0.0)
}

/// A resumed watch that first replays events the subscriber already has (as a lagging API
/// server or a proxy can) publishes none of them again: each is dropped as a duplicate (the
/// version published) or as stale (older than it), the deletion of a deleted object included.
#[tokio::test]
async fn replayed_events_on_resume_are_dropped_not_republished() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_with(sim, nats, "", PODS_WATCH).await;
    env.wait_ready().await;
    assert!(env.sim.wait_for_watches(1, WAIT).await);
    env.sim.create("pods", Some("default"), pod("a"));
    env.sim.update("pods", Some("default"), "a", |o| {
        o["metadata"]["labels"]["v"] = "2".into()
    });
    env.sim.create("pods", Some("default"), pod("b"));
    env.sim.create("pods", Some("default"), pod("c"));
    env.sim.delete("pods", Some("default"), "c");
    let got: Vec<String> = inbox.take(5).await.iter().map(Got::short).collect();
    assert_eq!(
        got,
        ["ADDED a", "MODIFIED a", "ADDED b", "ADDED c", "DELETED c"]
    );

    // The next watch replays all five before going live.
    env.sim.replay_on_resume(5);
    env.sim.drop_watches();
    env.sim.create("pods", Some("default"), pod("d"));
    assert_eq!(inbox.next().await.short(), "ADDED d", "nothing replayed");
    inbox.quiet_for(QUIET).await;
    // MODIFIED a, ADDED b and DELETED c are the versions published; ADDED a and ADDED c are older.
    let w = |reason| ("reason", reason);
    assert_eq!(
        pods_metric(&env, "kube2nats_events_dropped_total", w("duplicate")),
        3.0
    );
    assert_eq!(
        pods_metric(&env, "kube2nats_events_dropped_total", w("stale")),
        2.0
    );
    assert_eq!(
        pods_metric(&env, "kube2nats_events_received_total", ("type", "ADDED")),
        7.0,
        "a, b, c, their replays, and d: the replayed events did arrive"
    );
}

/// A watch that goes silent without closing (a half-open connection: no events, no bookmarks,
/// no end at its timeout) is abandoned at the client's idle deadline and resumed; the change
/// made meanwhile arrives once.
#[tokio::test]
async fn silent_watch_is_abandoned_at_the_idle_deadline() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let env = Env::start_edited(sim, nats, "", PODS_WATCH, |t| watch_timeout(t, "2s")).await;
    let mut inbox = Inbox::subscribe(&env.nc, "kube.>").await;
    env.wait_ready().await;
    assert!(env.sim.wait_for_watches(1, WAIT).await);
    env.sim.hang_watches();
    env.sim
        .create("pods", Some("default"), pod("behind-silence"));
    // The deadline is at most 2T + T = 6 s after the watch opened.
    let m = tokio::time::timeout(Duration::from_secs(30), inbox.next())
        .await
        .expect("the change arrives once the silent watch is abandoned");
    assert_eq!(m.short(), "ADDED behind-silence");
    inbox.quiet_for(QUIET).await;
    assert!(
        pods_metric(
            &env,
            "kube2nats_watch_restarts_total",
            ("reason", "idle_timeout")
        ) >= 1.0
    );
    assert_eq!(
        pods_metric(&env, "kube2nats_relists_total", ("reason", "initial")),
        1.0,
        "resumed, not relisted"
    );
}

/// Requests that asked for a streaming list.
fn streaming_requests(sim: &ApiServer) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.param("sendInitialEvents").is_some())
        .count()
}

/// One streaming list asked for, one fallback to paged lists counted.
fn assert_fell_back_once(env: &Env) {
    assert_eq!(streaming_requests(&env.sim), 1, "asked once");
    assert_eq!(
        pods_metric(
            env,
            "kube2nats_relists_total",
            ("reason", "streaming_unsupported")
        ),
        1.0
    );
}

/// A server that refuses `sendInitialEvents` (422: the WatchList feature is off) gets paged lists
/// from then on, for the first list and for every relist; every object is announced once.
#[tokio::test]
async fn streaming_list_refused_falls_back_to_paged_lists_for_good() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.set_initial_events(InitialEvents::Rejected);
    sim.create("pods", Some("default"), pod("a"));
    sim.create("pods", Some("default"), pod("b"));
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_edited(sim, nats, "", PODS_WATCH, streaming_lists).await;
    let got: Vec<String> = inbox.take(2).await.iter().map(Got::short).collect();
    assert_eq!(got, ["ADDED a", "ADDED b"]);
    env.wait_ready().await;
    // A relist (410) later must not try the streaming list again.
    assert!(env.sim.wait_for_watches(1, WAIT).await);
    env.sim
        .fail_next_matching(1, RequestFilter::Watch, Failure::Internal);
    env.sim.drop_watches();
    env.sim.create("pods", Some("default"), pod("c"));
    env.sim.compact();
    assert_eq!(inbox.next().await.short(), "ADDED c");
    eventually("the relist after 410", || {
        pods_metric(&env, "kube2nats_relists_total", ("reason", "expired")) == 1.0
    })
    .await;
    env.wait_ready().await;
    env.sim.create("pods", Some("default"), pod("d"));
    assert_eq!(inbox.next().await.short(), "ADDED d");
    inbox.quiet_for(QUIET).await;
    assert_fell_back_once(&env);
    let lists = env
        .sim
        .requests()
        .iter()
        .filter(|r| !r.is_watch() && r.path == "/api/v1/namespaces/default/pods")
        .count();
    assert!(lists >= 2, "paged lists for the first list and the relist");
}

/// A server that ignores `sendInitialEvents` serves a plain watch: the current state as ADDED,
/// then live events, and never the initial-events-end bookmark. kube2nats notices at the first
/// live event, falls back to a paged list and publishes each object once, at its latest version.
#[tokio::test]
async fn streaming_list_ignored_falls_back_at_the_first_live_event() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.set_initial_events(InitialEvents::Ignored);
    sim.create("pods", Some("default"), pod("a"));
    sim.create("pods", Some("default"), pod("b"));
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_edited(sim, nats, "", PODS_WATCH, streaming_lists).await;
    let got: Vec<String> = inbox.take(2).await.iter().map(Got::short).collect();
    assert_eq!(got, ["ADDED a", "ADDED b"]);
    // Still waiting for the end of the initial events, which never comes; a live event shows it.
    assert!(env.sim.wait_for_watches(1, WAIT).await);
    let a2 = env.sim.update("pods", Some("default"), "a", |o| {
        o["metadata"]["labels"]["v"] = "2".into()
    });
    let m = inbox.next().await;
    assert_eq!(m.short(), "MODIFIED a");
    assert_headers(&m, "MODIFIED", &a2);
    env.wait_ready().await;
    env.sim.create("pods", Some("default"), pod("c"));
    assert_eq!(inbox.next().await.short(), "ADDED c");
    inbox.quiet_for(QUIET).await;
    assert_fell_back_once(&env);
}

/// The same server with no change to show it: the plain watch ends at its timeout without the
/// initial-events-end bookmark; kube2nats falls back to a paged list then and becomes ready.
#[tokio::test]
async fn streaming_list_ignored_falls_back_when_the_stream_ends() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.set_initial_events(InitialEvents::Ignored);
    sim.create("pods", Some("default"), pod("a"));
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_edited(sim, nats, "", PODS_WATCH, |t| {
        streaming_lists(watch_timeout(t, "1s"))
    })
    .await;
    assert_eq!(inbox.next().await.short(), "ADDED a");
    env.wait_ready().await;
    env.sim.create("pods", Some("default"), pod("c"));
    assert_eq!(inbox.next().await.short(), "ADDED c");
    inbox.quiet_for(QUIET).await;
    assert_fell_back_once(&env);
}

/// After a fail-over to an API server whose watch cache is behind what kube2nats has seen, the
/// watch is answered 504 "Too large resource version" (with the `ResourceVersionTooLarge`
/// cause): kube2nats relists (a consistent read) until the cache catches up, publishes the change
/// made meanwhile once, and republishes nothing it had.
#[tokio::test]
async fn watch_cache_behind_the_client_relists_until_it_catches_up() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("a"));
    sim.create("pods", Some("default"), pod("b"));
    let nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let env = Env::start_with(sim, nats, "", PODS_WATCH).await;
    let got: Vec<String> = inbox.take(2).await.iter().map(Got::short).collect();
    assert_eq!(got, ["ADDED a", "ADDED b"]);
    env.wait_ready().await;
    assert!(env.sim.wait_for_watches(1, WAIT).await);
    let behind = env.sim.resource_version();
    env.sim.update("pods", Some("default"), "a", |o| {
        o["metadata"]["labels"]["v"] = "2".into()
    });
    assert_eq!(inbox.next().await.short(), "MODIFIED a");

    env.sim.set_watch_cache_revision(Some(behind));
    env.sim.drop_watches();
    let b2 = env.sim.update("pods", Some("default"), "b", |o| {
        o["metadata"]["labels"]["v"] = "2".into()
    });
    let m = inbox.next().await;
    assert_eq!(m.short(), "MODIFIED b", "from the relist");
    assert_headers(&m, "MODIFIED", &b2);
    assert_eq!(m.header("Kube-Synthesized"), Some("relist"));
    eventually("a 504 answered", || {
        env.sim.requests().iter().any(|r| r.status == 504)
    })
    .await;
    env.sim.set_watch_cache_revision(None);
    assert!(env.sim.wait_for_watches(1, Duration::from_secs(30)).await);
    env.sim.create("pods", Some("default"), pod("c"));
    let m = inbox.next().await;
    assert_eq!(m.short(), "ADDED c");
    assert_eq!(m.header("Kube-Synthesized"), None, "from the watch");
    inbox.quiet_for(QUIET).await;
    let too_large = ("reason", "too_large_resource_version");
    assert!(pods_metric(&env, "kube2nats_relists_total", too_large) >= 1.0);
    assert!(pods_metric(&env, "kube2nats_watch_restarts_total", too_large) >= 1.0);
    assert_eq!(
        pods_metric(&env, "kube2nats_relists_total", ("reason", "expired")),
        0.0
    );
}
