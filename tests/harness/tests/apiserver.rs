//! The simulated API server answers as kube-apiserver does, fault injection included.
//!
//! Each test talks plain HTTP with reqwest, so what is pinned here is the wire behaviour
//! kube2nats sees, not the simulator's internals.

use std::time::Duration;

use futures_util::StreamExt;
use kube2nats_harness::apiserver::{
    ApiServer, ApiServerOptions, Auth, Failure, Framing, RequestFilter, Rule,
};
use serde_json::{json, Value};

/// How long a test waits for something that should happen at once.
const PROMPT: Duration = Duration::from_secs(2);

async fn server() -> ApiServer {
    server_with(ApiServerOptions::default()).await
}

async fn server_with(opts: ApiServerOptions) -> ApiServer {
    ApiServer::start(opts).await.expect("simulator starts")
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// GET with the initial token; returns status, headers and the JSON body.
async fn get(srv: &ApiServer, path: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    get_as(srv, path, Some("test-token")).await
}

async fn get_as(
    srv: &ApiServer,
    path: &str,
    token: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = client().get(format!("{}{path}", srv.url()));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json().await.expect("JSON body");
    (status, headers, body)
}

fn pod(name: &str) -> Value {
    json!({ "metadata": { "name": name, "labels": { "app": "web" } }, "spec": { "containers": [] } })
}

fn names(items: &Value) -> Vec<String> {
    items
        .as_array()
        .expect("items is an array")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("name").to_string())
        .collect()
}

/// Reads a watch body line by line, keeping what is left after the last newline.
struct Watch {
    stream: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
}

/// How a watch body ended.
#[derive(Debug, PartialEq)]
enum End {
    /// Final chunk received; these bytes had no newline.
    Clean(Vec<u8>),
    /// Connection aborted; these bytes had no newline.
    Aborted(Vec<u8>),
}

impl Watch {
    async fn open(srv: &ApiServer, path_and_query: &str) -> Watch {
        let resp = client()
            .get(format!("{}{path_and_query}", srv.url()))
            .bearer_auth("test-token")
            .send()
            .await
            .expect("watch request sent");
        assert_eq!(resp.status(), 200, "watch {path_and_query}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        Watch {
            stream: resp.bytes_stream().boxed(),
            buf: Vec::new(),
        }
    }

    /// The next complete line as JSON; panics if none arrives promptly.
    async fn next(&mut self) -> Value {
        let line = self.next_line().await.expect("a line before the end");
        serde_json::from_slice(&line).expect("a JSON line")
    }

    async fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(line);
            }
            match tokio::time::timeout(PROMPT, self.stream.next())
                .await
                .expect("watch data arrives promptly")
            {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// Reads to the end of the body and says how it ended.
    async fn end(mut self) -> End {
        loop {
            match tokio::time::timeout(PROMPT, self.stream.next())
                .await
                .expect("watch ends promptly")
            {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(_)) => return End::Aborted(self.buf),
                None => return End::Clean(self.buf),
            }
        }
    }

    /// Whether nothing arrives within a short while.
    async fn quiet(&mut self) -> bool {
        tokio::time::timeout(Duration::from_millis(200), self.stream.next())
            .await
            .is_err()
    }
}

fn event(e: &Value) -> (String, String) {
    (
        e["type"].as_str().expect("type").to_string(),
        e["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// A paged list shows one consistent revision, even when objects change between pages.
#[tokio::test]
async fn paged_list_across_three_pages_sees_one_consistent_revision() {
    let srv = server().await;
    for i in 0..7 {
        srv.create("pods", Some("default"), pod(&format!("p{i}")));
    }
    let (code, _, page1) = get(&srv, "/api/v1/namespaces/default/pods?limit=3").await;
    assert_eq!(code, 200);
    assert_eq!(page1["kind"], "PodList");
    assert_eq!(page1["apiVersion"], "v1");
    let rv = page1["metadata"]["resourceVersion"].clone();
    assert_eq!(page1["metadata"]["remainingItemCount"], 4);
    assert!(
        page1["items"][0].get("kind").is_none(),
        "list items carry no kind"
    );
    assert!(page1["items"][0].get("apiVersion").is_none());

    // Change things the later pages would show.
    srv.delete("pods", Some("default"), "p5");
    srv.update("pods", Some("default"), "p4", |p| p["spec"]["x"] = json!(1));
    srv.create("pods", Some("default"), pod("p9"));

    let token = page1["metadata"]["continue"].as_str().expect("continue");
    let (_, _, page2) = get(
        &srv,
        &format!("/api/v1/namespaces/default/pods?limit=3&continue={token}"),
    )
    .await;
    let token = page2["metadata"]["continue"].as_str().expect("continue");
    let (_, _, page3) = get(
        &srv,
        &format!("/api/v1/namespaces/default/pods?limit=3&continue={token}"),
    )
    .await;
    assert_eq!(page2["metadata"]["resourceVersion"], rv);
    assert_eq!(page3["metadata"]["resourceVersion"], rv);
    assert!(page3["metadata"].get("continue").is_none());
    let all: Vec<String> = [&page1, &page2, &page3]
        .iter()
        .flat_map(|p| names(&p["items"]))
        .collect();
    assert_eq!(all, ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]);
    assert!(page2["items"][1]["spec"].get("x").is_none(), "p4 as of rv");
}

/// A watch from resourceVersion N replays exactly the changes after N, then goes live.
#[tokio::test]
async fn watch_from_rv_yields_exactly_the_later_changes() {
    let srv = server().await;
    srv.create("pods", Some("default"), pod("a"));
    srv.create("pods", Some("default"), pod("b"));
    srv.create(
        "configmaps",
        Some("default"),
        json!({"metadata":{"name":"unrelated"}}),
    );
    let n = srv.resource_version();
    srv.update("pods", Some("default"), "a", |p| p["spec"]["x"] = json!(1));
    let deleted = srv.delete("pods", Some("default"), "b").expect("b existed");
    srv.create("pods", Some("other"), pod("c"));

    let mut w = Watch::open(&srv, &format!("/api/v1/pods?watch=1&resourceVersion={n}")).await;
    let e1 = w.next().await;
    assert_eq!(event(&e1), ("MODIFIED".into(), "a".into()));
    assert_eq!(e1["object"]["kind"], "Pod");
    assert_eq!(e1["object"]["apiVersion"], "v1");
    let e2 = w.next().await;
    assert_eq!(event(&e2), ("DELETED".into(), "b".into()));
    assert_eq!(
        e2["object"]["metadata"]["resourceVersion"],
        deleted["metadata"]["resourceVersion"]
    );
    assert_eq!(event(&w.next().await), ("ADDED".into(), "c".into()));
    srv.create("pods", Some("default"), pod("d"));
    let live = w.next().await;
    assert_eq!(event(&live), ("ADDED".into(), "d".into()));
    assert_eq!(
        live["object"]["metadata"]["resourceVersion"],
        json!(srv.resource_version().to_string())
    );
    let asked = srv
        .requests()
        .into_iter()
        .find(|r| r.is_watch())
        .expect("watch recorded");
    assert_eq!(asked.param("resourceVersion"), Some(n.to_string().as_str()));
}

/// A watch from a compacted version gets 200 and one ERROR event with a 410 Status, then the end.
#[tokio::test]
async fn watch_from_compacted_rv_gets_410_error_event() {
    let srv = server().await;
    srv.create("pods", None, pod("a"));
    let n = srv.resource_version();
    srv.create("pods", None, pod("b"));
    srv.compact();
    let w = Watch::open(
        &srv,
        &format!("/api/v1/pods?watch=true&resourceVersion={n}"),
    )
    .await;
    let End::Clean(body) = w.end().await else {
        panic!("the ERROR stream ends cleanly")
    };
    let e: Value = serde_json::from_slice(&body).expect("one JSON line");
    let current = srv.resource_version();
    assert_eq!(
        e,
        json!({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":format!("too old resource version: {n} ({current})"),"reason":"Expired","code":410}})
    );
}

/// The history is a ring: falling out of it is the same as compaction.
#[tokio::test]
async fn bounded_history_expires_old_versions() {
    let srv = server_with(ApiServerOptions {
        history_limit: 2,
        ..Default::default()
    })
    .await;
    let n = srv.resource_version();
    for i in 0..3 {
        srv.create("pods", None, pod(&format!("p{i}")));
    }
    let mut w = Watch::open(&srv, &format!("/api/v1/pods?watch=1&resourceVersion={n}")).await;
    assert_eq!(w.next().await["object"]["code"], 410);
}

/// A continue token older than the compaction point is a plain HTTP 410 Expired.
#[tokio::test]
async fn expired_continue_token_gets_410() {
    let srv = server().await;
    for i in 0..3 {
        srv.create("pods", None, pod(&format!("p{i}")));
    }
    let (_, _, page1) = get(&srv, "/api/v1/pods?limit=1").await;
    let token = page1["metadata"]["continue"].as_str().expect("continue");
    srv.create("pods", None, pod("later"));
    srv.compact();
    let (code, _, body) = get(&srv, &format!("/api/v1/pods?limit=1&continue={token}")).await;
    assert_eq!(code, 410);
    assert_eq!(
        body,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results.","reason":"Expired","code":410})
    );
}

/// Bookmarks go only to watches that allowed them and carry only the resourceVersion.
#[tokio::test]
async fn bookmarks_reach_watches_that_allowed_them() {
    let srv = server().await;
    let mut with = Watch::open(&srv, "/api/v1/pods?watch=1&allowWatchBookmarks=true").await;
    let mut without = Watch::open(&srv, "/api/v1/pods?watch=1").await;
    srv.create("configmaps", None, json!({"metadata":{"name":"bump"}}));
    srv.send_bookmarks();
    let b = with.next().await;
    assert_eq!(
        b,
        json!({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1",
            "metadata":{"resourceVersion":srv.resource_version().to_string(),"creationTimestamp":null}}})
    );
    assert!(
        without.quiet().await,
        "no bookmark without allowWatchBookmarks"
    );
}

/// With `bookmark_interval`, bookmarks arrive on their own.
#[tokio::test]
async fn periodic_bookmarks() {
    let srv = server_with(ApiServerOptions {
        bookmark_interval: Some(Duration::from_millis(100)),
        ..Default::default()
    })
    .await;
    let mut w = Watch::open(
        &srv,
        "/apis/example.com/v1/widgets?watch=1&allowWatchBookmarks=1",
    )
    .await;
    let b = w.next().await;
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["kind"], "Widget");
    assert_eq!(b["object"]["apiVersion"], "example.com/v1");
}

/// Tokens are re-read on every request: after a rotation the old token is refused.
#[tokio::test]
async fn token_rotation_refuses_old_token() {
    let srv = server().await;
    let token = std::fs::read_to_string(srv.token_file()).expect("token file");
    assert_eq!(token, "test-token");
    assert_eq!(get(&srv, "/api/v1/pods").await.0, 200);
    srv.set_valid_tokens(&["rotated"]);
    let (code, _, body) = get(&srv, "/api/v1/pods").await;
    assert_eq!(code, 401);
    assert_eq!(
        body,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})
    );
    assert_eq!(
        std::fs::read_to_string(srv.token_file()).expect("token file"),
        "rotated"
    );
    assert_eq!(get_as(&srv, "/api/v1/pods", Some("rotated")).await.0, 200);
    assert_eq!(get_as(&srv, "/api/v1/pods", None).await.0, 401);
    let records = srv.requests();
    assert!(records.iter().any(|r| !r.token_sent));
    assert_eq!(records.iter().filter(|r| r.status == 401).count(), 2);
}

/// Without auth, like `kubectl proxy`, no token is needed.
#[tokio::test]
async fn auth_none_accepts_anonymous_requests() {
    let srv = server_with(ApiServerOptions {
        auth: Auth::None,
        ..Default::default()
    })
    .await;
    assert_eq!(get_as(&srv, "/api/v1/pods", None).await.0, 200);
}

/// RBAC refusals are 403 with the real message; SelfSubjectAccessReview uses the same rules.
#[tokio::test]
async fn rbac_refusal_is_403_with_the_real_message() {
    let srv = server().await;
    srv.set_rules(
        "test-token",
        vec![Rule::new(&["list"], &[""], &["pods"], &["default"])],
    );
    assert_eq!(get(&srv, "/api/v1/namespaces/default/pods").await.0, 200);
    let (code, _, body) = get(&srv, "/api/v1/namespaces/default/pods?watch=1").await;
    assert_eq!(code, 403);
    assert_eq!(
        body,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"pods is forbidden: User \"system:serviceaccount:default:kube2nats\" cannot watch resource \"pods\" in API group \"\" in the namespace \"default\"",
            "reason":"Forbidden","details":{"group":"","kind":"pods"},"code":403})
    );
    let (_, _, body) = get(&srv, "/apis/apps/v1/deployments").await;
    assert_eq!(
        body["message"],
        "deployments.apps is forbidden: User \"system:serviceaccount:default:kube2nats\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
    );

    let review = |verb: &str, ns: &str| {
        json!({"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
            "spec":{"resourceAttributes":{"verb":verb,"group":"","resource":"pods","namespace":ns}}})
    };
    for (verb, ns, allowed) in [
        ("list", "default", true),
        ("watch", "default", false),
        ("list", "kube-system", false),
    ] {
        let resp = client()
            .post(format!(
                "{}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                srv.url()
            ))
            .bearer_auth("test-token")
            .json(&review(verb, ns))
            .send()
            .await
            .expect("review sent");
        assert_eq!(resp.status(), 201);
        let body: Value = resp.json().await.expect("JSON");
        assert_eq!(body["status"]["allowed"], allowed, "{verb} in {ns}");
    }
}

/// TLS works with the CA file and only with it.
#[tokio::test]
async fn tls_with_the_ca_file() {
    let srv = server_with(ApiServerOptions {
        tls: true,
        ..Default::default()
    })
    .await;
    assert!(srv.url().starts_with("https://localhost:"));
    let pem = std::fs::read(srv.ca_file().expect("a CA file with TLS")).expect("CA readable");
    let ca = reqwest::Certificate::from_pem(&pem).expect("valid PEM");
    let trusting = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(ca)
        .build()
        .expect("client");
    let resp = trusting
        .get(format!("{}/api", srv.url()))
        .bearer_auth("test-token")
        .send()
        .await
        .expect("TLS request with the CA succeeds");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("JSON");
    assert_eq!(body["kind"], "APIVersions");

    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .build()
        .expect("client");
    assert!(untrusting
        .get(format!("{}/api", srv.url()))
        .send()
        .await
        .is_err());
}

/// Injected 429/503 carry Retry-After and a real Status; a filter limits them to watches.
#[tokio::test]
async fn fail_next_answers_with_retry_after() {
    let srv = server().await;
    srv.fail_next_matching(
        2,
        RequestFilter::Watch,
        Failure::TooManyRequests {
            retry_after_secs: 3,
        },
    );
    assert_eq!(
        get(&srv, "/api/v1/pods").await.0,
        200,
        "lists are not affected"
    );
    for _ in 0..2 {
        let (code, headers, body) = get(&srv, "/api/v1/pods?watch=1&timeoutSeconds=1").await;
        assert_eq!(code, 429);
        assert_eq!(headers["retry-after"], "3");
        assert_eq!(body["reason"], "TooManyRequests");
        assert_eq!(body["details"]["retryAfterSeconds"], 3);
    }
    srv.fail_next(
        1,
        Failure::Unavailable {
            retry_after_secs: 1,
        },
    );
    let (code, headers, body) = get(&srv, "/api").await;
    assert_eq!((code, body["code"].clone()), (503, json!(503)));
    assert_eq!(headers["retry-after"], "1");
    srv.fail_next(1, Failure::Internal);
    assert_eq!(get(&srv, "/api/v1/pods").await.0, 500);
    let _w = Watch::open(&srv, "/api/v1/pods?watch=1").await;
}

/// Dropping mid-line leaves half a line and an aborted body (no final chunk).
#[tokio::test]
async fn drop_mid_line_leaves_a_partial_line_and_an_aborted_body() {
    let srv = server().await;
    let w = Watch::open(&srv, "/api/v1/pods?watch=1").await;
    assert!(srv.wait_for_watches(1, PROMPT).await);
    srv.drop_watches_mid_line();
    srv.create("pods", None, pod("half"));
    match w.end().await {
        End::Aborted(rest) => {
            assert!(!rest.is_empty() && !rest.contains(&b'\n'));
            assert!(serde_json::from_slice::<Value>(&rest).is_err());
        }
        other => panic!("expected an aborted body, got {other:?}"),
    }
    assert!(
        srv.wait_for_watches(0, PROMPT).await,
        "the aborted watch is deregistered"
    );
}

/// Truncation ends the body cleanly after half a line; a plain drop aborts with nothing extra.
#[tokio::test]
async fn truncate_and_drop_end_watches_differently() {
    let srv = server().await;
    let w = Watch::open(&srv, "/api/v1/pods?watch=1&allowWatchBookmarks=true").await;
    srv.truncate_watches();
    srv.send_bookmarks();
    match w.end().await {
        End::Clean(rest) => assert!(!rest.is_empty() && !rest.contains(&b'\n')),
        other => panic!("expected a clean end, got {other:?}"),
    }
    let w = Watch::open(&srv, "/api/v1/pods?watch=1").await;
    srv.drop_watches();
    assert_eq!(w.end().await, End::Aborted(Vec::new()));
}

/// A garbage line arrives as a line; the stream stays open and goes on.
#[tokio::test]
async fn garbage_line_keeps_the_watch_open() {
    let srv = server().await;
    let mut w = Watch::open(&srv, "/api/v1/pods?watch=1").await;
    srv.inject_garbage_line();
    assert_eq!(w.next_line().await.expect("a line"), b"<html>oops</html>\n");
    srv.create("pods", None, pod("after"));
    assert_eq!(event(&w.next().await), ("ADDED".into(), "after".into()));
    assert_eq!(srv.open_watches(), 1);
}

/// sendInitialEvents: all current objects, then a bookmark marking their end, then live changes.
#[tokio::test]
async fn send_initial_events_ends_with_an_annotated_bookmark() {
    let srv = server().await;
    srv.create("pods", None, pod("a"));
    srv.create("pods", None, pod("b"));
    let rv = srv.resource_version();
    let mut w = Watch::open(
        &srv,
        "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    )
    .await;
    let mut initial = vec![event(&w.next().await), event(&w.next().await)];
    initial.sort();
    assert_eq!(
        initial,
        [("ADDED".into(), "a".into()), ("ADDED".into(), "b".into())]
    );
    let b = w.next().await;
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["metadata"]["resourceVersion"], rv.to_string());
    assert_eq!(
        b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    srv.create("pods", None, pod("c"));
    assert_eq!(event(&w.next().await), ("ADDED".into(), "c".into()));

    let (code, _, body) = get(&srv, "/api/v1/pods?watch=1&sendInitialEvents=true").await;
    assert_eq!((code, body["reason"].clone()), (422, json!("Invalid")));
}

/// A version from the future is a 504 with the ResourceVersionTooLarge cause, on list and watch.
#[tokio::test]
async fn too_large_resource_version_is_504() {
    let srv = server().await;
    let future = srv.resource_version() + 10;
    for path in [
        format!("/api/v1/pods?resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
        format!("/api/v1/pods?watch=1&resourceVersion={future}"),
    ] {
        let (code, _, body) = get(&srv, &path).await;
        assert_eq!(code, 504, "{path}");
        assert_eq!(body["reason"], "Timeout");
        assert_eq!(
            body["details"]["causes"],
            json!([{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}])
        );
    }
}

/// An object modified out of a watch's selector is DELETED there; back in, it is ADDED.
#[tokio::test]
async fn selector_changes_become_deleted_and_added() {
    let srv = server().await;
    srv.create("pods", None, pod("x"));
    srv.create(
        "pods",
        None,
        json!({"metadata":{"name":"other","labels":{"app":"db"}}}),
    );
    let mut w = Watch::open(&srv, "/api/v1/pods?watch=1&labelSelector=app%20in%20(web)").await;
    assert_eq!(event(&w.next().await), ("ADDED".into(), "x".into()));
    srv.update("pods", None, "x", |p| {
        p["metadata"]["labels"]["app"] = json!("db")
    });
    assert_eq!(event(&w.next().await), ("DELETED".into(), "x".into()));
    srv.update("pods", None, "x", |p| {
        p["metadata"]["labels"]["app"] = json!("web")
    });
    assert_eq!(event(&w.next().await), ("ADDED".into(), "x".into()));
    let (_, _, list) = get(&srv, "/api/v1/pods?fieldSelector=metadata.name!%3Dx").await;
    assert_eq!(names(&list["items"]), ["other"]);
    let (code, _, _) = get(&srv, "/api/v1/pods?labelSelector=app%20in%20web").await;
    assert_eq!(code, 400);
}

/// Discovery documents have the real shapes, subresources included.
#[tokio::test]
async fn discovery_lists_resources_and_groups() {
    let srv = server().await;
    let (_, _, core) = get(&srv, "/api/v1").await;
    assert_eq!(core["kind"], "APIResourceList");
    assert_eq!(core["groupVersion"], "v1");
    let resources = core["resources"].as_array().expect("resources");
    let pods = resources
        .iter()
        .find(|r| r["name"] == "pods")
        .expect("pods");
    assert_eq!(pods["namespaced"], true);
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert!(resources.iter().any(|r| r["name"] == "pods/status"));
    let ns = resources
        .iter()
        .find(|r| r["name"] == "namespaces")
        .expect("namespaces");
    assert_eq!(ns["namespaced"], false);

    let (_, _, groups) = get(&srv, "/apis").await;
    let example = groups["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["name"] == "example.com")
        .expect("example.com");
    assert_eq!(
        example["preferredVersion"]["groupVersion"],
        "example.com/v1"
    );
    let (_, _, custom) = get(&srv, "/apis/example.com/v1").await;
    let kinds: Vec<&str> = custom["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"Widget") && kinds.contains(&"Gadget"));
}

/// CRUD over HTTP, with 409 and 404 Status bodies.
#[tokio::test]
async fn crud_over_http_with_conflicts_and_not_found() {
    let srv = server().await;
    let url = format!("{}/apis/apps/v1/namespaces/prod/deployments", srv.url());
    let body = json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":1}});
    let post = || {
        client()
            .post(&url)
            .bearer_auth("test-token")
            .json(&body)
            .send()
    };
    let created = post().await.expect("sent");
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.expect("JSON");
    assert_eq!(created["metadata"]["namespace"], "prod");
    assert_eq!(created["metadata"]["uid"].as_str().map(str::len), Some(36));
    let dup = post().await.expect("sent");
    assert_eq!(dup.status(), 409);
    let dup: Value = dup.json().await.expect("JSON");
    assert_eq!(dup["reason"], "AlreadyExists");
    assert_eq!(dup["message"], "deployments.apps \"web\" already exists");

    let mut changed = created.clone();
    changed["spec"]["replicas"] = json!(3);
    let put = client()
        .put(format!("{url}/web"))
        .bearer_auth("test-token")
        .json(&changed)
        .send()
        .await
        .expect("sent");
    assert_eq!(put.status(), 200);
    let stale = client()
        .put(format!("{url}/web"))
        .bearer_auth("test-token")
        .json(&changed)
        .send()
        .await
        .expect("sent");
    assert_eq!(stale.status(), 409, "stale resourceVersion conflicts");
    let del = client()
        .delete(format!("{url}/web"))
        .bearer_auth("test-token")
        .send()
        .await
        .expect("sent");
    assert_eq!(del.status(), 200);
    let (code, _, body) = get(&srv, "/apis/apps/v1/namespaces/prod/deployments/web").await;
    assert_eq!(code, 404);
    assert_eq!(body["reason"], "NotFound");
    assert_eq!(get(&srv, "/apis/nope/v1/things").await.0, 404);
    let (code, _, _) = get(&srv, "/api/v1/pods?resourceVersion=abc").await;
    assert_eq!(code, 400);
}

/// `timeoutSeconds` ends the watch cleanly.
#[tokio::test]
async fn timeout_seconds_ends_the_body_cleanly() {
    let srv = server().await;
    let w = Watch::open(&srv, "/api/v1/namespaces?watch=1&timeoutSeconds=1").await;
    assert_eq!(w.end().await, End::Clean(Vec::new()));
}

/// An API-server restart: connections refused while down, then the same port, store and history.
#[tokio::test]
async fn stop_and_resume_serving_keep_the_store() {
    let srv = server().await;
    srv.create("pods", None, pod("a"));
    let n = srv.resource_version();
    let w = Watch::open(&srv, "/api/v1/pods?watch=1").await;
    srv.stop_serving().await;
    assert!(matches!(w.end().await, End::Aborted(_)));
    assert!(client()
        .get(format!("{}/api", srv.url()))
        .send()
        .await
        .is_err());
    srv.create("pods", None, pod("b"));
    srv.resume_serving().await.expect("same port again");
    let mut w = Watch::open(&srv, &format!("/api/v1/pods?watch=1&resourceVersion={n}")).await;
    assert_eq!(event(&w.next().await), ("ADDED".into(), "b".into()));
}

/// Over TLS the server negotiates HTTP/2 like kube-apiserver; watches and faults work there too.
#[tokio::test]
async fn http2_watch_over_tls() {
    let srv = server_with(ApiServerOptions {
        tls: true,
        ..Default::default()
    })
    .await;
    let pem = std::fs::read(srv.ca_file().expect("CA file")).expect("CA readable");
    let h2 = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("PEM"))
        .build()
        .expect("client");
    let resp = h2
        .get(format!("{}/api/v1/pods?watch=1", srv.url()))
        .bearer_auth("test-token")
        .send()
        .await
        .expect("watch over TLS");
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let mut body = resp.bytes_stream();
    srv.create("pods", None, pod("over-h2"));
    let chunk = tokio::time::timeout(PROMPT, body.next())
        .await
        .expect("event arrives")
        .expect("stream open")
        .expect("data");
    let e: Value = serde_json::from_slice(&chunk).expect("one JSON line per chunk");
    assert_eq!(event(&e), ("ADDED".into(), "over-h2".into()));
    srv.drop_watches();
    let end = tokio::time::timeout(PROMPT, body.next())
        .await
        .expect("end arrives");
    assert!(matches!(end, Some(Err(_))), "stream reset, not a clean end");
}

/// The kubeconfig names the server, the CA file and the token file.
#[tokio::test]
async fn kubeconfig_points_at_the_server() {
    let srv = server_with(ApiServerOptions {
        tls: true,
        ..Default::default()
    })
    .await;
    let path = srv.write_kubeconfig().expect("kubeconfig written");
    let config: Value =
        serde_json::from_slice(&std::fs::read(path).expect("readable")).expect("JSON");
    let cluster = &config["clusters"][0]["cluster"];
    assert_eq!(cluster["server"], srv.url());
    assert_eq!(
        cluster["certificate-authority"],
        srv.ca_file().expect("CA").to_string_lossy().as_ref()
    );
    assert_eq!(
        config["users"][0]["user"]["tokenFile"],
        srv.token_file().to_string_lossy().as_ref()
    );
}

/// Framing knobs: a burst of lines in one chunk, or a line split over many chunks.
#[tokio::test]
async fn framing_coalesces_or_splits_lines() {
    let srv = server().await;
    srv.create("pods", None, pod("a"));
    srv.create("pods", None, pod("b"));
    srv.set_framing(Framing::Coalesce);
    let resp = client()
        .get(format!("{}/api/v1/pods?watch=1", srv.url()))
        .bearer_auth("test-token")
        .send()
        .await
        .expect("watch");
    let mut chunks = resp.bytes_stream();
    let first = tokio::time::timeout(PROMPT, chunks.next())
        .await
        .expect("chunk")
        .expect("open")
        .expect("data");
    assert_eq!(
        first.iter().filter(|b| **b == b'\n').count(),
        2,
        "both initial events in one chunk"
    );

    srv.set_framing(Framing::Split(7));
    srv.create("pods", None, pod("c"));
    let mut line = Vec::new();
    let mut pieces = 0;
    while !line.ends_with(b"\n") {
        let chunk = tokio::time::timeout(PROMPT, chunks.next())
            .await
            .expect("chunk")
            .expect("open")
            .expect("data");
        assert!(chunk.len() <= 7);
        line.extend_from_slice(&chunk);
        pieces += 1;
    }
    assert!(pieces > 1);
    let e: Value = serde_json::from_slice(&line).expect("the pieces make one JSON line");
    assert_eq!(event(&e), ("ADDED".into(), "c".into()));
}
