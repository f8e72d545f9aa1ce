//! The real kube-apiserver supervisor: etcd and kube-apiserver start, serve objects over TLS to
//! the admin token, refuse anonymous requests, and leave no process behind.

use std::time::Duration;

use kube2nats_harness::real_apiserver::RealApiServer;
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

/// After a restart of kube-apiserver its watch cache starts at etcd's current revision: a watch
/// resuming from an older resourceVersion is answered 200 with one ERROR event holding a 410
/// Expired Status (the form the simulator also sends for a watch, tests/harness/src/apiserver).
#[tokio::test]
async fn a_watch_from_before_a_restart_gets_410_inside_a_200_stream() {
    let mut server = RealApiServer::start()
        .await
        .expect("etcd and kube-apiserver start");
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    });
    let created = server.create(PODS, &pod).await.expect("create");
    let old_rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    server
        .update(PODS, "web", |p| {
            p["metadata"]["labels"] = json!({"step": "1"})
        })
        .await
        .expect("update");
    server
        .restart_apiserver()
        .await
        .expect("kube-apiserver restarts");

    let ca = reqwest::Certificate::from_pem(&std::fs::read(server.ca_file()).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let response = client
        .get(format!(
            "{}{PODS}?watch=true&resourceVersion={old_rv}",
            server.url()
        ))
        .bearer_auth(kube2nats_harness::real_apiserver::ADMIN_TOKEN)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the watch itself is accepted");
    let body = response
        .text()
        .await
        .expect("the stream ends after the error");
    let lines: Vec<serde_json::Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "one event: {body}");
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["kind"], "Status");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");
}
