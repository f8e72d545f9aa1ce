//! A watch of pods: every change once and in order, kill -9, 410 Expired, the shipped RBAC.

use serde_json::Value;

use crate::common::{self, restart::Recording};
use crate::daemon::Daemon;
use crate::observe::{assert_same_changes, checkpoint_covers, published, OwnWatch};
use crate::server::{Kind, Server, SA_NAMESPACE};
use kube2nats_harness::nats::NatsServer;

/// Creates, updates and deletes: each change once, in the server's order.
async fn every_change_is_published_once_in_order(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let _daemon = Daemon::start(&server, &nats).await;
    let watch = OwnWatch::start(&server).await;

    for name in ["a", "b", "c"] {
        server.create_pod(name).await;
    }
    server.label_pod("a", "1").await;
    server.delete_pod("b").await;
    server.label_pod("c", "1").await;
    server.label_pod("a", "2").await;
    server.delete_pod("a").await;
    server.create_pod("b").await;

    let expected = watch.wait_for(9).await;
    let got = published(&recording, 0, expected.len()).await;
    assert_same_changes(&got, &watch.all(), "what the server's watch sent");
}

#[tokio::test]
async fn every_change_is_published_once_in_order_on_the_simulated_server() {
    every_change_is_published_once_in_order(Kind::Simulated).await;
}

#[tokio::test]
async fn every_change_is_published_once_in_order_on_the_real_server() {
    every_change_is_published_once_in_order(Kind::Real).await;
}

/// kill -9, creates, updates and deletes while down, a restart: exactly the changes made while
/// down are published, nothing from before again.
async fn changes_while_killed_are_published_exactly(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let mut daemon = Daemon::start(&server, &nats).await;
    let watch = OwnWatch::start(&server).await;

    for name in ["a", "b", "c"] {
        server.create_pod(name).await;
    }
    let last = server.label_pod("b", "1").await;
    let before = watch.wait_for(4).await;
    assert_same_changes(
        &published(&recording, 0, before.len()).await,
        &before,
        "before the kill",
    );
    checkpoint_covers(&nats, common::rv(&last).parse().unwrap()).await;

    daemon.kill();
    server.create_pod("d").await;
    server.label_pod("c", "1").await;
    server.delete_pod("a").await;
    server.create_pod("e").await;
    server.delete_pod("e").await;
    server.label_pod("b", "2").await;
    let while_down = watch.wait_for(before.len() + 6).await[before.len()..].to_vec();
    let from = recording.mark().await;
    daemon.restart().await;

    let got = published(&recording, from, while_down.len()).await;
    assert_same_changes(
        &got,
        &while_down,
        "after kill -9, the changes made while down",
    );
}

#[tokio::test]
async fn changes_while_killed_are_published_exactly_on_the_simulated_server() {
    changes_while_killed_are_published_exactly(Kind::Simulated).await;
}

#[tokio::test]
async fn changes_while_killed_are_published_exactly_on_the_real_server() {
    changes_while_killed_are_published_exactly(Kind::Real).await;
}

/// A resume that meets 410 Expired relists: the objects deleted meanwhile are announced DELETED
/// (synthesized, at the list's version), a new one ADDED, the unchanged ones not at all.
async fn expired_resume_relists_and_announces_deletions(kind: Kind) {
    let mut server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let mut daemon = Daemon::start(&server, &nats).await;

    let mut last = Value::Null;
    for name in ["a", "b", "c"] {
        last = server.create_pod(name).await;
    }
    let before = published(&recording, 0, 3).await;
    checkpoint_covers(&nats, common::rv(&last).parse().unwrap()).await;

    daemon.kill();
    server.delete_pod("b").await;
    server.create_pod("d").await;
    server.expire_history().await;
    let from = recording.mark().await;
    daemon.restart().await;

    let mut got = published(&recording, from, 2).await;
    got.sort_by(|x, y| x.name.cmp(&y.name));
    let b = before.iter().find(|c| c.name == "b").unwrap();
    assert_eq!(got.len(), 2, "only b's deletion and d's creation: {got:?}");
    assert_eq!(
        (got[0].kind.as_str(), got[0].uid.as_str()),
        ("DELETED", b.uid.as_str()),
        "b's deletion, from the relist"
    );
    assert!(
        got[0].rv > b.rv,
        "a relist's DELETED carries the list's version, newer than b's last message: {got:?}"
    );
    assert_eq!((got[1].kind.as_str(), got[1].name.as_str()), ("ADDED", "d"));
    let synthesized: Vec<bool> = recording.all()[from..]
        .iter()
        .map(|s| s.synthesized)
        .collect();
    assert_eq!(synthesized, [true, true], "both come from the relist");
    let expired = common::metric(
        &daemon.metrics().await,
        "kube2nats_relists_total",
        &[("watch", "pods"), ("reason", "expired")],
    );
    assert_eq!(expired, Some(1.0), "the resume met 410 Expired once");
}

#[tokio::test]
async fn expired_resume_relists_and_announces_deletions_on_the_simulated_server() {
    expired_resume_relists_and_announces_deletions(Kind::Simulated).await;
}

#[tokio::test]
async fn expired_resume_relists_and_announces_deletions_on_the_real_server() {
    expired_resume_relists_and_announces_deletions(Kind::Real).await;
}

#[tokio::test]
async fn expired_resume_relists_and_announces_deletions_on_the_real_server_after_compaction() {
    expired_resume_relists_and_announces_deletions(Kind::RealWithoutWatchCache).await;
}

/// The ServiceAccount with exactly the RBAC the manifests ship (deploy/base/rbac.yaml) may do all
/// kube2nats needs: it starts, reads the cluster id, lists and watches, and publishes every change.
/// Any further permission the daemon needs is a manifest bug, and fails here.
async fn shipped_rbac_is_enough(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = common::token_file(dir.path(), &server.shipped_rbac_token().await);
    let _daemon = Daemon::start_as(&server, &nats, SA_NAMESPACE, &token).await;
    let watch = OwnWatch::start_in(&server, SA_NAMESPACE).await;

    server.create_pod_in(SA_NAMESPACE, "a").await;
    server.create_pod_in(SA_NAMESPACE, "b").await;
    server.label_pod_in(SA_NAMESPACE, "a", "1").await;
    server.delete_pod_in(SA_NAMESPACE, "b").await;
    let expected = watch.wait_for(4).await;
    let got = published(&recording, 0, expected.len()).await;
    assert_same_changes(&got, &expected, "as the ServiceAccount of the manifests");
}

#[tokio::test]
async fn shipped_rbac_is_enough_on_the_simulated_server() {
    shipped_rbac_is_enough(Kind::Simulated).await;
}

#[tokio::test]
async fn shipped_rbac_is_enough_on_the_real_server() {
    shipped_rbac_is_enough(Kind::Real).await;
}
