//! The simulated API server serves `coordination.k8s.io/v1` Leases as kube-apiserver does, and
//! can cut one client off while serving the others.
//!
//! Plain HTTP with reqwest: what is pinned is the wire behaviour a leader elector sees.

use std::time::Duration;

use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Rule};
use serde_json::{json, Value};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

async fn server() -> ApiServer {
    let srv = ApiServer::start(ApiServerOptions::default())
        .await
        .expect("simulator starts");
    srv.set_valid_tokens(&["test-token", "other-token"]);
    srv
}

/// One request with `token`; returns the status and the JSON body.
async fn send(
    srv: &ApiServer,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", srv.url()))
        .bearer_auth(token);
    if let Some(body) = body {
        req = req.json(body);
    }
    let resp = req.send().await.expect("request sent");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON body"))
}

fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-23T10:00:00.000000Z",
            "renewTime": "2026-11-23T10:00:00.000000Z",
            "leaseTransitions": 0
        }
    })
}

#[tokio::test]
async fn discovery_lists_leases_in_coordination_v1() {
    let srv = server().await;
    let (code, groups) = send(&srv, reqwest::Method::GET, "/apis", "test-token", None).await;
    assert_eq!(code, 200);
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "coordination.k8s.io"),
        "{groups}"
    );
    let (code, list) = send(
        &srv,
        reqwest::Method::GET,
        "/apis/coordination.k8s.io/v1",
        "test-token",
        None,
    )
    .await;
    assert_eq!(code, 200);
    let leases = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "leases")
        .expect("leases in discovery");
    assert_eq!(leases["kind"], "Lease");
    assert_eq!(leases["namespaced"], true);
}

/// Create once (201, then 409 AlreadyExists), update only from the current resourceVersion
/// (a stale one is 409 Conflict), get by name, 404 for another name.
#[tokio::test]
async fn leases_have_optimistic_concurrency() {
    use reqwest::Method;
    let srv = server().await;
    let (code, created) = send(
        &srv,
        Method::POST,
        LEASES,
        "test-token",
        Some(&lease("k", "a")),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let (code, again) = send(
        &srv,
        Method::POST,
        LEASES,
        "test-token",
        Some(&lease("k", "b")),
    )
    .await;
    assert_eq!(
        (code, again["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );

    let path = format!("{LEASES}/k");
    let (code, got) = send(&srv, Method::GET, &path, "test-token", None).await;
    assert_eq!(
        (code, got["spec"]["holderIdentity"].as_str()),
        (200, Some("a"))
    );

    let mut renewed = got.clone();
    renewed["spec"]["renewTime"] = json!("2026-11-23T10:00:02.000000Z");
    let (code, updated) = send(&srv, Method::PUT, &path, "test-token", Some(&renewed)).await;
    assert_eq!(code, 200, "{updated}");
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        got["metadata"]["resourceVersion"]
    );

    // A second writer that read before that update loses.
    let mut taken = got.clone();
    taken["spec"]["holderIdentity"] = json!("b");
    let (code, conflict) = send(&srv, Method::PUT, &path, "test-token", Some(&taken)).await;
    assert_eq!((code, conflict["reason"].as_str()), (409, Some("Conflict")));
    let (_, now) = send(&srv, Method::GET, &path, "test-token", None).await;
    assert_eq!(now["spec"]["holderIdentity"], "a");

    let (code, _) = send(
        &srv,
        Method::GET,
        &format!("{LEASES}/other"),
        "test-token",
        None,
    )
    .await;
    assert_eq!(code, 404);
}

/// A spec kube-apiserver would not decode or would refuse is refused.
#[tokio::test]
async fn malformed_lease_specs_are_refused() {
    use reqwest::Method;
    let srv = server().await;
    let mut seconds_only = lease("a", "x");
    seconds_only["spec"]["renewTime"] = json!("2026-11-23T10:00:00Z");
    let mut zero = lease("b", "x");
    zero["spec"]["leaseDurationSeconds"] = json!(0);
    let mut text = lease("c", "x");
    text["spec"]["leaseTransitions"] = json!("1");
    for (bad, code) in [(seconds_only, 400), (zero, 422), (text, 400)] {
        let (got, body) = send(&srv, Method::POST, LEASES, "test-token", Some(&bad)).await;
        assert_eq!(got, code, "{bad} -> {body}");
    }
}

/// `resourceNames` restrict get and update to the named Lease; create cannot be restricted by
/// name (the name is not known when it is authorized), so it needs a rule of its own.
#[tokio::test]
async fn rbac_resource_names_restrict_leases() {
    use reqwest::Method;
    let srv = server().await;
    srv.set_rules(
        "other-token",
        vec![Rule::new(
            &["get", "update"],
            &["coordination.k8s.io"],
            &["leases"],
            &["default"],
        )
        .named(&["mine"])],
    );
    srv.create("leases", Some("default"), lease("mine", "a"));
    srv.create("leases", Some("default"), lease("theirs", "a"));
    let (code, _) = send(
        &srv,
        Method::GET,
        &format!("{LEASES}/mine"),
        "other-token",
        None,
    )
    .await;
    assert_eq!(code, 200);
    let (code, body) = send(
        &srv,
        Method::GET,
        &format!("{LEASES}/theirs"),
        "other-token",
        None,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let (code, _) = send(&srv, Method::GET, LEASES, "other-token", None).await;
    assert_eq!(code, 403, "a named rule does not allow list");
    let (code, _) = send(
        &srv,
        Method::POST,
        LEASES,
        "other-token",
        Some(&lease("mine2", "a")),
    )
    .await;
    assert_eq!(code, 403, "a named rule does not allow create");
}

/// A cut-off client gets no answer while another is served; reconnected, it is answered again.
#[tokio::test]
async fn cut_off_client_gets_no_answer_while_others_are_served() {
    let srv = server().await;
    srv.cut_off("other-token");
    let url = format!("{}{LEASES}", srv.url());
    let held = reqwest::Client::new()
        .get(&url)
        .bearer_auth("other-token")
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(
        held.is_err_and(|e| e.is_timeout()),
        "no answer while cut off"
    );
    let (code, _) = send(&srv, reqwest::Method::GET, LEASES, "test-token", None).await;
    assert_eq!(code, 200, "other clients are served");
    srv.reconnect("other-token");
    let (code, _) = send(&srv, reqwest::Method::GET, LEASES, "other-token", None).await;
    assert_eq!(code, 200);
}
