//! The simulated API server's CRDs serve the versions a test sets, as kube-apiserver serves a
//! CRD's versions: discovery in priority order, the first preferred; 404 for a version not
//! served; one storage (same uid and resourceVersion at every version, `apiVersion` as asked);
//! a CRD update restarts the watch cache (410 for a watch from before it).

use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use serde_json::{json, Value};

async fn get(srv: &ApiServer, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("{}{path}", srv.url()))
        .bearer_auth("test-token")
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

async fn get_json(srv: &ApiServer, path: &str) -> (u16, Value) {
    let (status, body) = get(srv, path).await;
    (status, serde_json::from_str(&body).expect("a JSON body"))
}

/// The versions `/apis/example.com` lists, and the preferred one.
async fn group_versions(srv: &ApiServer) -> (Vec<String>, String) {
    let (_, group) = get_json(srv, "/apis/example.com").await;
    let versions = group["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["version"].as_str().expect("version").to_owned())
        .collect();
    let preferred = group["preferredVersion"]["version"].as_str().unwrap_or("?");
    (versions, preferred.to_owned())
}

#[tokio::test]
async fn a_crd_serves_the_versions_set_in_priority_order() {
    let srv = ApiServer::start(ApiServerOptions::default())
        .await
        .expect("simulator starts");
    srv.set_crd_versions("gadgets", &["v1beta1"]);
    srv.set_crd_versions("widgets", &["v1alpha1", "v1beta1"]);
    let created = srv.create(
        "widgets",
        Some("default"),
        json!({"metadata": {"name": "w1"}, "spec": {"size": 1}}),
    );
    let (versions, preferred) = group_versions(&srv).await;
    assert_eq!(
        (versions, preferred.as_str()),
        (vec!["v1beta1".to_owned(), "v1alpha1".to_owned()], "v1beta1")
    );
    let (status, _) = get(&srv, "/apis/example.com/v1/namespaces/default/widgets").await;
    assert_eq!(status, 404);

    srv.set_crd_versions("widgets", &["v1beta1", "v2beta1", "v1"]);
    let (versions, preferred) = group_versions(&srv).await;
    assert_eq!(versions, ["v1", "v2beta1", "v1beta1"]);
    assert_eq!(preferred, "v1");
    let (_, v1) = get_json(&srv, "/apis/example.com/v1").await;
    let kinds: Vec<&str> = v1["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(kinds, ["widgets", "widgets/status"]);
    for version in ["v1beta1", "v1"] {
        let path = format!("/apis/example.com/{version}/namespaces/default/widgets/w1");
        let (status, object) = get_json(&srv, &path).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(object["apiVersion"], format!("example.com/{version}"));
        assert_eq!(object["metadata"]["uid"], created["metadata"]["uid"]);
        assert_eq!(
            object["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
    }
    let (status, _) = get(
        &srv,
        "/apis/example.com/v1alpha1/namespaces/default/widgets",
    )
    .await;
    assert_eq!(status, 404, "v1alpha1 is no longer served");

    // The update restarted the watch cache: a watch from before it is told to relist.
    let rv = created["metadata"]["resourceVersion"].as_str().expect("rv");
    let path =
        format!("/apis/example.com/v1/namespaces/default/widgets?watch=1&resourceVersion={rv}");
    let (status, body) = get(&srv, &path).await;
    assert_eq!(status, 200);
    let line: Value = serde_json::from_str(body.trim()).expect("one event line");
    assert_eq!(
        (line["type"].as_str(), line["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );
}
