//! The real kube-apiserver supervisor: etcd and kube-apiserver start, serve objects over TLS to
//! the admin token, refuse anonymous requests, and leave no process behind.

use std::time::Duration;

use kube2nats_harness::real_apiserver::{RealApiServer, RealApiServerOptions};
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/default/pods";

/// Whether a process is gone or a zombie waiting to be reaped (it holds no port, runs nothing).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn serves_pods_to_the_admin_and_stops_both_processes_on_drop() {
    let server = RealApiServer::start()
        .await
        .expect("etcd and kube-apiserver start");
    assert!(server.url().starts_with("https://127.0.0.1:"));
    assert!(server.ca_file().is_file());

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    });
    let created = server.create(PODS, &pod).await.expect("create");
    let rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let updated = server
        .update(PODS, "web", |p| {
            p["metadata"]["labels"] = json!({"tier": "front"})
        })
        .await
        .expect("update");
    assert_eq!(updated["metadata"]["labels"]["tier"], "front");
    let updated_rv: u64 = updated["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(updated_rv > rv, "an update gets a newer resourceVersion");
    server.delete(PODS, "web").await.expect("delete");
    let err = server
        .request(reqwest::Method::GET, &format!("{PODS}/web"), None)
        .await
        .expect_err("deleted");
    assert!(err.to_string().contains("404"), "{err}");

    // Without a token: 401, since anonymous requests are off.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(server.ca_file()).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let anonymous = client
        .get(format!("{}{PODS}", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    let pids = server.pids();
    assert_eq!(pids.len(), 2, "kube-apiserver and etcd");
    drop(server);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|&pid| gone(pid)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a process outlived the drop: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A watch request from `rv` on `server`'s pods, as the admin: its status and the events of the
/// stream (the server ends it after an ERROR).
async fn watch_from(server: &RealApiServer, rv: &str) -> (u16, Vec<serde_json::Value>) {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(server.ca_file()).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let response = client
        .get(format!(
            "{}{PODS}?watch=true&resourceVersion={rv}",
            server.url()
        ))
        .bearer_auth(kube2nats_harness::real_apiserver::ADMIN_TOKEN)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response
        .text()
        .await
        .expect("the stream ends after the error");
    let events = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (status, events)
}

/// Creates and updates a pod; the resourceVersion of its creation.
async fn create_and_update(server: &RealApiServer) -> String {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    });
    let created = server.create(PODS, &pod).await.expect("create");
    server
        .update(PODS, "web", |p| {
            p["metadata"]["labels"] = json!({"step": "1"})
        })
        .await
        .expect("update");
    created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// One ERROR event holding a 410 Expired Status.
fn assert_expired_in_stream(status: u16, events: &[serde_json::Value]) {
    assert_eq!(status, 200, "the watch itself is accepted");
    assert_eq!(events.len(), 1, "one event: {events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["kind"], "Status");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

/// After a restart of kube-apiserver its watch cache starts at etcd's current revision: a watch
/// resuming from an older resourceVersion is answered 200 with one ERROR event holding a 410
/// Expired Status (the form the simulator also sends for a watch, tests/harness/src/apiserver).
#[tokio::test]
async fn a_watch_from_before_a_restart_gets_410_inside_a_200_stream() {
    let mut server = RealApiServer::start()
        .await
        .expect("etcd and kube-apiserver start");
    let old_rv = create_and_update(&server).await;
    server
        .restart_apiserver()
        .await
        .expect("kube-apiserver restarts");
    let (status, events) = watch_from(&server, &old_rv).await;
    assert_expired_in_stream(status, &events);
}

/// Without the watch cache, watches are served from etcd: once kube-apiserver's periodic
/// compaction has passed a resourceVersion, a watch from it gets the same 410 inside a 200 stream.
#[tokio::test]
async fn a_watch_from_a_compacted_revision_gets_410_inside_a_200_stream() {
    let server = RealApiServer::start_with(RealApiServerOptions {
        watch_cache: false,
        compaction_interval: Duration::from_secs(2),
        ..Default::default()
    })
    .await
    .expect("etcd and kube-apiserver start");
    let old_rv = create_and_update(&server).await;
    let now = server
        .request(reqwest::Method::GET, PODS, None)
        .await
        .expect("list")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    server.wait_compacted_past(now).await.expect("compaction");
    let (status, events) = watch_from(&server, &old_rv).await;
    assert_expired_in_stream(status, &events);
}
