//! A watch of a custom resource whose CustomResourceDefinition comes after kube2nats, gains a
//! version, or goes: on the real server a CRD of `apiextensions.k8s.io/v1`, on the simulator its
//! stand-in (docs/troubleshooting.md, "A watch waits for its resource"; docs/configuration.md,
//! "Versions that move").

use crate::common::restart::Recording;
use crate::common::{self, Inbox};
use crate::daemon::{Daemon, WIDGETS_WATCH};
use crate::observe::{assert_same_changes, published, OwnWatch};
use crate::server::{widgets, Kind, Server, WRITE_VERSION};
use kube2nats_harness::nats::NatsServer;

/// Started before the CRD exists: the widgets watch waits; once the CRD is installed, its
/// objects are listed and every change after is published once, in the server's order.
async fn a_crd_installed_after_start_is_watched(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let daemon = Daemon::start_with(&server, &nats, WIDGETS_WATCH).await;
    daemon
        .metric_becomes("kube2nats_watch_served", &[("watch", "widgets")], 0.0)
        .await;

    server.install_widgets(&[WRITE_VERSION]).await;
    let watch = OwnWatch::start_at(&server, &widgets(WRITE_VERSION)).await;
    server.create_widget("w1").await;
    // Listed (so ADDED as it is now) once the watch starts; the rest, once it is synced, comes
    // from its watch.
    daemon.wait_ready().await;
    server.create_widget("w2").await;
    server.resize_widget("w1", 2).await;
    server.delete_widget("w2").await;

    let expected = watch.wait_for(4).await;
    let got = published(&recording, 0, expected.len()).await;
    assert_same_changes(&got, &expected, "the widgets of a CRD installed later");
}

#[tokio::test]
async fn a_crd_installed_after_start_is_watched_on_the_simulated_server() {
    a_crd_installed_after_start_is_watched(Kind::Simulated).await;
}

#[tokio::test]
async fn a_crd_installed_after_start_is_watched_on_the_real_server() {
    a_crd_installed_after_start_is_watched(Kind::Real).await;
}

/// The CRD gains `v2`, which becomes the preferred version: the watch follows it, publishing
/// nothing for the move (no ADDED again, no DELETED), and the changes after it once each, on
/// `v2`'s subjects.
async fn a_version_added_and_preferred_is_followed(kind: Kind) {
    let server = Server::start(kind).await;
    server.install_widgets(&["v1"]).await;
    server.create_widget("w1").await;
    server.create_widget("w2").await;
    let nats = NatsServer::start().await.unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let mut messages = Inbox::subscribe(&client, "kube.example_com.*.widgets.>").await;
    let daemon = Daemon::start_with(&server, &nats, WIDGETS_WATCH).await;
    let mut first: Vec<String> = messages.take(2).await.iter().map(subject).collect();
    first.sort();
    assert_eq!(
        first,
        [
            "kube.example_com.v1.widgets.default.w1.added",
            "kube.example_com.v1.widgets.default.w2.added"
        ]
    );

    // A CRD update ends the watches, which kube2nats follows at once; one landing between its
    // list and its watch is followed at the watch's timeout (docs/configuration.md).
    server.wait_watching_widgets().await;
    server.serve_widgets_at(&["v1", "v2"]).await;
    let at_v2 = [
        ("watch", "widgets"),
        ("group", "example.com"),
        ("version", "v2"),
        ("resource", "widgets"),
    ];
    daemon
        .metric_becomes("kube2nats_watch_resource_info", &at_v2, 1.0)
        .await;
    messages.quiet_for(common::QUIET).await;

    let watch = OwnWatch::start_at(&server, &widgets("v2")).await;
    server.resize_widget("w1", 2).await;
    server.create_widget("w3").await;
    server.delete_widget("w2").await;
    let expected = watch.wait_for(3).await;
    // One change per object: across objects no order is promised (docs/delivery.md).
    let mut after: Vec<String> = messages.take(3).await.iter().map(subject).collect();
    after.sort();
    let mut subjects: Vec<String> = expected
        .iter()
        .map(|change| {
            format!(
                "kube.example_com.v2.widgets.default.{}.{}",
                change.name,
                change.kind.to_ascii_lowercase()
            )
        })
        .collect();
    subjects.sort();
    assert_eq!(
        after, subjects,
        "the changes after the move, once each, at v2"
    );
    messages.quiet_for(common::QUIET).await;
}

fn subject(message: &common::Got) -> String {
    message.subject.clone()
}

#[tokio::test]
async fn a_version_added_and_preferred_is_followed_on_the_simulated_server() {
    a_version_added_and_preferred_is_followed(Kind::Simulated).await;
}

#[tokio::test]
async fn a_version_added_and_preferred_is_followed_on_the_real_server() {
    a_version_added_and_preferred_is_followed(Kind::Real).await;
}

/// The CRD deleted with objects present: a DELETED for each, the server's own events (nothing
/// synthesized), and the watch waits for the resource again.
async fn a_deleted_crd_deletes_each_object(kind: Kind) {
    let server = Server::start(kind).await;
    server.install_widgets(&[WRITE_VERSION]).await;
    for name in ["w1", "w2", "w3"] {
        server.create_widget(name).await;
    }
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let daemon = Daemon::start_with(&server, &nats, WIDGETS_WATCH).await;
    assert_eq!(published(&recording, 0, 3).await.len(), 3);
    let watch = OwnWatch::start_at(&server, &widgets(WRITE_VERSION)).await;
    daemon
        .metric_becomes("kube2nats_watch_served", &[("watch", "widgets")], 1.0)
        .await;

    let from = recording.mark().await;
    server.uninstall_widgets().await;
    let expected = watch.wait_for(3).await;
    assert!(expected.iter().all(|c| c.kind == "DELETED"), "{expected:?}");
    let got = published(&recording, from, expected.len()).await;
    assert_same_changes(&got, &expected, "the CRD's deletion");
    let synthesized = recording.all()[from..].iter().any(|s| s.synthesized);
    assert!(
        !synthesized,
        "the server's own DELETED events are published"
    );
    daemon
        .metric_becomes("kube2nats_watch_served", &[("watch", "widgets")], 0.0)
        .await;
}

#[tokio::test]
async fn a_deleted_crd_deletes_each_object_on_the_simulated_server() {
    a_deleted_crd_deletes_each_object(Kind::Simulated).await;
}

#[tokio::test]
async fn a_deleted_crd_deletes_each_object_on_the_real_server() {
    a_deleted_crd_deletes_each_object(Kind::Real).await;
}
