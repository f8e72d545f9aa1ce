//! The differences found between the simulator and kube-apiserver, each pinned by a test run on
//! the real server and on the simulator set up as kube-apiserver 1.20 ([`Kind::SimulatedLike120`]).
//! The simulator's defaults keep the short forms (`kube2nats_harness::apiserver`'s module doc
//! says which and why); with them these tests fail, which is the difference. The third, a
//! refused `sendInitialEvents` (422 on 1.20), is pinned in `requests`.

use kube2nats_harness::nats::NatsServer;
use serde_json::{json, Value};

use crate::common::restart::Recording;
use crate::daemon::Daemon;
use crate::observe::{assert_same_changes, published, OwnWatch};
use crate::server::{pods, Kind, Server};

/// A pod deleted (no kubelet runs, so at once) is a MODIFIED that sets `deletionTimestamp` and
/// `deletionGracePeriodSeconds: 0`, then the DELETED; the DELETE answers the pod as of the
/// MODIFIED. kube2nats publishes both, once each.
async fn a_pod_delete_is_a_modified_then_a_deleted(kind: Kind) {
    let server = Server::start(kind).await;
    let nats = NatsServer::start().await.unwrap();
    let recording = Recording::start(&nats.url()).await;
    let _daemon = Daemon::start(&server, &nats).await;
    let watch = OwnWatch::start(&server).await;

    let created = server.create_pod("a").await;
    let answer = server.delete_pod("a").await;
    let seen = watch.wait_for(3).await;
    let kinds: Vec<&str> = seen.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"], "{seen:?}");
    let meta = &answer["metadata"];
    assert_eq!(meta["uid"], created["metadata"]["uid"]);
    assert!(meta["deletionTimestamp"].is_string(), "{answer}");
    assert_eq!(meta["deletionGracePeriodSeconds"], 0, "{answer}");
    assert_eq!(
        meta["resourceVersion"].as_str().map(str::to_owned),
        Some(seen[1].rv.to_string()),
        "the DELETE answers the pod as of the MODIFIED"
    );
    assert!(seen[2].rv > seen[1].rv, "{seen:?}");
    let got = published(&recording, 0, seen.len()).await;
    assert_same_changes(&got, &seen, "a pod's deletion");
}

#[tokio::test]
async fn a_pod_delete_is_a_modified_then_a_deleted_on_the_simulated_1_20() {
    a_pod_delete_is_a_modified_then_a_deleted(Kind::SimulatedLike120).await;
}

#[tokio::test]
async fn a_pod_delete_is_a_modified_then_a_deleted_on_the_real_server() {
    a_pod_delete_is_a_modified_then_a_deleted(Kind::Real).await;
}

/// A create in a namespace that does not exist is 404 NotFound, naming the namespace.
async fn a_create_in_a_missing_namespace_is_not_found(kind: Kind) {
    let server = Server::start(kind).await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "a"},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    });
    let (status, answer) = server.post(&pods("nowhere"), &pod).await;
    assert_eq!(status, 404, "{answer}");
    let field = |name: &str| answer[name].clone();
    assert_eq!(
        [
            field("kind"),
            field("status"),
            field("reason"),
            field("code")
        ],
        [
            json!("Status"),
            json!("Failure"),
            json!("NotFound"),
            json!(404)
        ],
        "{answer}"
    );
    assert_eq!(field("message"), json!("namespaces \"nowhere\" not found"));
    assert_eq!(
        field("details"),
        json!({"name": "nowhere", "kind": "namespaces"})
    );
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nowhere"}});
    let (status, answer) = server.post("/api/v1/namespaces", &namespace).await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer): (u16, Value) = server.post(&pods("nowhere"), &pod).await;
    assert_eq!(status, 201, "once the namespace exists: {answer}");
}

#[tokio::test]
async fn a_create_in_a_missing_namespace_is_not_found_on_the_simulated_1_20() {
    a_create_in_a_missing_namespace_is_not_found(Kind::SimulatedLike120).await;
}

#[tokio::test]
async fn a_create_in_a_missing_namespace_is_not_found_on_the_real_server() {
    a_create_in_a_missing_namespace_is_not_found(Kind::Real).await;
}
