//! What kube2nats asks of the server, counted by the server: the simulator's request log, the
//! real one's audit log.

use std::time::Duration;

use kube2nats_harness::nats::NatsServer;

use crate::common::restart::Recording;
use crate::daemon::{Daemon, WIDGETS_WATCH};
use crate::observe::published;
use crate::server::{Asked, Kind, Server};

/// How long the discovery test watches kube2nats wait for the missing CRD: its retries come at
/// 1, 2, 4 and 8 s, then every 8 s (docs/troubleshooting.md).
const WAITING: Duration = Duration::from_secs(16);

/// The paths of the discovery requests in `asked`, in order.
fn discovery(asked: &[Asked]) -> Vec<String> {
    asked
        .iter()
        .filter(|r| r.is_discovery())
        .map(|r| r.path.clone())
        .collect()
}

/// Discovery asks only what the watches need (docs/troubleshooting.md): at start `/api/v1` for
/// the pods watch and `/apis` for the widgets watch, whose CRD is not installed (its group is
/// not in `/apis`, so nothing more); then one `/apis` per retry while the widgets watch waits.
async fn discovery_asks_only_what_the_watches_need(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let started = tokio::time::Instant::now();
    let daemon = Daemon::start_with(&server, &nats, WIDGETS_WATCH).await;
    let ready = started.elapsed();
    daemon
        .metric_becomes("kube2nats_watch_served", &[("watch", "widgets")], 0.0)
        .await;
    let at_start = discovery(&server.asked());
    tokio::time::sleep(WAITING).await;
    let all = discovery(&server.asked());
    let retries = &all[2.min(all.len())..];
    eprintln!(
        "{kind:?}: ready (all but the waiting watch) {ready:?} after the start; discovery at start {at_start:?}; \
         then {} in {WAITING:?} of waiting: {retries:?}",
        retries.len()
    );
    assert_eq!(all[..2], ["/api/v1", "/apis"], "at start: {all:?}");
    assert!(
        retries.iter().all(|path| path == "/apis"),
        "one /apis per retry: {all:?}"
    );
    assert!(retries.len() >= 2, "retries while waiting: {all:?}");
}

#[tokio::test]
async fn discovery_asks_only_what_the_watches_need_on_the_simulated_server() {
    discovery_asks_only_what_the_watches_need(Kind::Simulated).await;
}

#[tokio::test]
async fn discovery_asks_only_what_the_watches_need_on_the_simulated_1_20() {
    discovery_asks_only_what_the_watches_need(Kind::SimulatedLike120).await;
}

#[tokio::test]
async fn discovery_asks_only_what_the_watches_need_on_the_real_server() {
    discovery_asks_only_what_the_watches_need(Kind::Real).await;
}

/// `streaming_list` on, against kube-apiserver 1.20 (no WatchList feature): the first list's
/// `sendInitialEvents` is refused with 422, once, and kube2nats falls back to a paged list,
/// publishing every pod once.
async fn a_refused_streaming_list_falls_back_to_a_paged_list(kind: Kind) {
    let server = Server::start(kind).await;
    server.create_pod("a").await;
    server.create_pod("b").await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let _daemon = Daemon::start_edited(&server, &nats, |config| {
        config.replace("[kubernetes]\n", "[kubernetes]\nstreaming_list = true\n")
    })
    .await;

    let mut got: Vec<String> = published(&recording, 0, 2)
        .await
        .iter()
        .map(|c| format!("{} {}", c.kind, c.name))
        .collect();
    got.sort();
    assert_eq!(got, ["ADDED a", "ADDED b"]);
    let pods: Vec<(bool, u16)> = server
        .asked()
        .iter()
        .filter(|r| r.path == crate::server::pods(crate::server::NS))
        .map(|r| (r.initial_events, r.status))
        .collect();
    assert_eq!(pods.first(), Some(&(true, 422)), "{pods:?}");
    assert_eq!(
        pods.iter().filter(|(streaming, _)| *streaming).count(),
        1,
        "asked once: {pods:?}"
    );
    assert_eq!(pods.get(1), Some(&(false, 200)), "a paged list: {pods:?}");
}

#[tokio::test]
async fn a_refused_streaming_list_falls_back_to_a_paged_list_on_the_simulated_1_20() {
    a_refused_streaming_list_falls_back_to_a_paged_list(Kind::SimulatedLike120).await;
}

#[tokio::test]
async fn a_refused_streaming_list_falls_back_to_a_paged_list_on_the_real_server() {
    a_refused_streaming_list_falls_back_to_a_paged_list(Kind::Real).await;
}
