//! The HTTP face of the simulator: routing, authentication, RBAC, and the list, watch, CRUD and
//! discovery handlers.
//!
//! Every request goes through one function, [`handle`], which records it for the test, so the
//! order of checks is visible in one place and matches the real server's filter chain:
//! authentication (401), injected failures (429/5xx, as priority and fairness answers after
//! authentication), routing (404/405), authorization (403), then the handler. Handlers return
//! `Result<Response, ApiError>`; nothing that comes from the network is unwrapped, so a bad
//! request is a 400 Status, never a panic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::resources::{self, ResourceType};
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{strip_type_meta, Key};
use super::unkind::{InitialEvents, Served};
use super::watch::{self, event_line, WatchSpec};
use super::{
    leases, lock, partial, read_valid_tokens, Attributes, Auth, RequestRecord, Shared, USER,
};

/// Largest request body accepted; objects in tests are tiny, so this only guards memory.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Buffered lines per watch body before the watch task waits for the client (backpressure).
const WATCH_BODY_BUFFER: usize = 16;

/// The router: one fallback handler, because Kubernetes paths are easier to match as a slice
/// than as a route table.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

type Query = BTreeMap<String, String>;

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query: Query = form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let token = bearer_token(req.headers());
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let http_version = format!("{:?}", req.version());
    shared.cut_off.wait_while_cut_off(token.as_deref()).await;
    let mut response = serve(
        &shared,
        &method,
        &path,
        &query,
        token.as_deref(),
        &accept,
        req.into_body(),
    )
    .await
    .unwrap_or_else(error_response);
    // Headers every real API server response carries; clients log Audit-Id to correlate.
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    if let Ok(audit_id) = HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()) {
        headers.insert("audit-id", audit_id);
    }
    let served = response
        .extensions()
        .get::<Served>()
        .copied()
        .unwrap_or_default();
    lock(&shared.requests).push(RequestRecord {
        method: method.to_string(),
        path,
        query,
        status: response.status().as_u16(),
        token_sent: token.is_some(),
        http_version,
        served_revision: served.revision,
        expired: served.expired || response.status() == StatusCode::GONE,
        accept,
    });
    count_body_bytes(response, shared.response_bytes.clone())
}

/// `response` with its body counted into `total` as it is sent. The body keeps its size hint,
/// so a list still goes out with a `Content-Length`.
fn count_body_bytes(response: Response, total: Arc<std::sync::atomic::AtomicU64>) -> Response {
    use http_body_util::BodyExt as _;
    let (parts, body) = response.into_parts();
    let counted = body.map_frame(move |frame| {
        if let Some(data) = frame.data_ref() {
            total.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        frame
    });
    Response::from_parts(parts, Body::new(counted))
}

fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

/// What a request addresses.
enum Route {
    /// A fixed discovery (or version) document.
    Document(Value),
    /// `GET /apis`: the legacy group list, or the aggregated discovery document.
    GroupList,
    /// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`.
    SelfSubjectAccessReview,
    /// A collection or one object.
    Resource {
        rt: &'static ResourceType,
        namespace: Option<String>,
        name: Option<String>,
    },
}

fn parse_route(shared: &Shared, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let doc = |d: Option<Value>| d.map(Route::Document).ok_or_else(ApiError::unknown_path);
    match segs.as_slice() {
        ["api"] => Ok(Route::Document(resources::api_versions(
            &shared.server_address,
        ))),
        ["apis"] => Ok(Route::GroupList),
        ["version"] => Ok(Route::Document(json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-kube2nats-harness",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
            "platform": "linux/amd64"
        }))),
        ["api", version] => doc(resources::api_resource_list(
            "",
            version,
            shared.store().discovered(),
        )),
        ["apis", group] => doc(resources::api_group(group, shared.store().discovered())),
        ["apis", group, version] => doc(resources::api_resource_list(
            group,
            version,
            shared.store().discovered(),
        )),
        ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] => {
            Ok(Route::SelfSubjectAccessReview)
        }
        ["api", version, rest @ ..] => resource_route(shared, "", version, rest),
        ["apis", group, version, rest @ ..] => resource_route(shared, group, version, rest),
        _ => Err(ApiError::unknown_path()),
    }
}

fn resource_route(
    shared: &Shared,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Route, ApiError> {
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(ns.to_string()), tail),
        _ => (None, rest),
    };
    let (plural, name) = match rest {
        [plural] => (*plural, None),
        [plural, name] => (*plural, Some(name.to_string())),
        _ => return Err(ApiError::unknown_path()),
    };
    let rt = resources::lookup(group, version, plural, shared.store().crds())
        .ok_or_else(ApiError::unknown_path)?;
    // Cluster-scoped kinds have no namespaced path; a namespaced object needs its namespace.
    let wrong_scope = matches!(
        (rt.namespaced, &namespace, &name),
        (false, Some(_), _) | (true, None, Some(_))
    );
    if wrong_scope {
        return Err(ApiError::unknown_path());
    }
    Ok(Route::Resource {
        rt,
        namespace,
        name,
    })
}

/// The `kube-system` Namespace, which every real cluster has, unless a test created its own: its
/// uid is what tools read as the cluster's id.
fn kube_system(shared: &Shared, rt: &resources::ResourceType, name: &str) -> Option<Value> {
    (rt.plural == "namespaces" && name == "kube-system").then(|| {
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "kube-system", "uid": shared.cluster_uid, "resourceVersion": "1",
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}
        })
    })
}

fn is_true(query: &Query, key: &str) -> bool {
    matches!(
        query.get(key).map(String::as_str),
        Some("1" | "true" | "True")
    )
}

/// The RBAC verb of a resource request.
fn verb(method: &Method, has_name: bool, watch: bool) -> Option<&'static str> {
    match (method.as_str(), has_name, watch) {
        ("GET", _, true) => Some("watch"),
        ("GET", true, false) => Some("get"),
        ("GET", false, false) => Some("list"),
        ("POST", false, _) => Some("create"),
        ("PUT", true, _) => Some("update"),
        ("DELETE", true, _) => Some("delete"),
        _ => None,
    }
}

async fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &Query,
    token: Option<&str>,
    accept: &str,
    body: Body,
) -> Result<Response, ApiError> {
    authenticate(shared, token)?;
    let route = parse_route(shared, path);
    let watch = is_true(query, "watch");
    let is_collection_get =
        matches!(&route, Ok(Route::Resource { name: None, .. })) && method == Method::GET;
    if let Some(failure) = shared.take_failure(is_collection_get && !watch, watch) {
        if failure == super::Failure::StallAfterHeaders {
            return Ok(stalled_response());
        }
        return Err(failure.to_error());
    }
    match route? {
        Route::GroupList if method == Method::GET => Ok(group_list(shared, accept)),
        Route::Document(doc) if method == Method::GET => Ok(json_response(StatusCode::OK, &doc)),
        Route::GroupList => Err(ApiError::method_not_allowed(method.as_str())),
        Route::Document(_) => Err(ApiError::method_not_allowed(method.as_str())),
        Route::SelfSubjectAccessReview if method == Method::POST => {
            let review = read_json(body).await?;
            Ok(self_subject_access_review(shared, token, review))
        }
        Route::SelfSubjectAccessReview => Err(ApiError::method_not_allowed(method.as_str())),
        Route::Resource {
            rt,
            namespace,
            name,
        } => {
            let verb = verb(method, name.is_some(), watch)
                .ok_or_else(|| ApiError::method_not_allowed(method.as_str()))?;
            authorize(
                shared,
                token,
                verb,
                rt,
                namespace.as_deref(),
                name.as_deref(),
            )?;
            let ns = namespace.as_deref();
            match (verb, name) {
                ("watch", name) => {
                    let partial = negotiate_partial(shared, accept, false)?;
                    start_watch(shared, rt, namespace, name, query, partial)
                }
                ("list", _) => {
                    let partial = negotiate_partial(shared, accept, true)?;
                    list(shared, rt, ns, query, partial)
                }
                ("get", Some(name)) => {
                    if rt.plural == "leases" {
                        shared.slow_lease_reads.hold().await;
                    }
                    shared
                        .store()
                        .get(rt, ns, &name)
                        .or_else(|| kube_system(shared, rt, &name))
                        .map(|obj| json_response(StatusCode::OK, &obj))
                        .ok_or_else(|| ApiError::not_found(rt.plural, rt.group, &name))
                }
                ("create", _) => {
                    let obj = read_json(body).await?;
                    leases::validate(rt, &obj)?;
                    let created = shared.store().create(rt, ns, obj)?;
                    Ok(json_response(StatusCode::CREATED, &created))
                }
                ("update", Some(name)) => {
                    let obj = read_json(body).await?;
                    leases::validate(rt, &obj)?;
                    update(shared, rt, ns, &name, obj)
                }
                ("delete", Some(name)) => {
                    let deleted = shared.store().delete(rt, ns, &name)?;
                    Ok(json_response(StatusCode::OK, &deleted))
                }
                _ => Err(ApiError::method_not_allowed(method.as_str())),
            }
        }
    }
}

/// 401 unless auth is off or the token is in the valid-token file, re-read on every request
/// so tests can rotate tokens between two requests.
fn authenticate(shared: &Shared, token: Option<&str>) -> Result<(), ApiError> {
    match shared.auth {
        Auth::None | Auth::ClientCertificates => Ok(()),
        Auth::Tokens => {
            let valid = read_valid_tokens(&shared.valid_tokens_file);
            match token {
                Some(t) if valid.iter().any(|v| v == t) => Ok(()),
                _ => Err(ApiError::unauthorized()),
            }
        }
    }
}

fn allowed(shared: &Shared, token: Option<&str>, request: &Attributes<'_>) -> bool {
    let rules = lock(&shared.rules);
    match rules.get(token.unwrap_or("")) {
        None => true,
        Some(rules) => rules.iter().any(|r| r.allows(request)),
    }
}

fn authorize(
    shared: &Shared,
    token: Option<&str>,
    verb: &str,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(), ApiError> {
    let request = Attributes {
        verb,
        group: rt.group,
        resource: rt.plural,
        namespace,
        name,
    };
    if allowed(shared, token, &request) {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            USER, verb, rt.plural, rt.group, namespace, name,
        ))
    }
}

fn self_subject_access_review(shared: &Shared, token: Option<&str>, review: Value) -> Response {
    let attrs = &review["spec"]["resourceAttributes"];
    let field = |k: &str| attrs[k].as_str().unwrap_or("");
    let namespace = Some(field("namespace")).filter(|ns| !ns.is_empty());
    let name = Some(field("name")).filter(|n| !n.is_empty());
    let request = Attributes {
        verb: field("verb"),
        group: field("group"),
        resource: field("resource"),
        namespace,
        name,
    };
    let is_allowed = attrs.is_object() && allowed(shared, token, &request);
    let status = json!({ "allowed": is_allowed });
    json_response(
        StatusCode::CREATED,
        &json!({
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": { "creationTimestamp": null },
            "spec": review.get("spec").cloned().unwrap_or(json!({})),
            "status": status,
        }),
    )
}

fn update(
    shared: &Shared,
    rt: &'static ResourceType,
    namespace: Option<&str>,
    name: &str,
    obj: Value,
) -> Result<Response, ApiError> {
    if let Some(body_name) = obj.pointer("/metadata/name").and_then(Value::as_str) {
        if body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
    }
    let mut store = shared.store();
    let current = store
        .get(rt, namespace, name)
        .ok_or_else(|| ApiError::not_found(rt.plural, rt.group, name))?;
    let sent_rv = obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    if sent_rv.is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str()) {
        return Err(ApiError::conflict(rt.plural, rt.group, name));
    }
    let updated = store.update(rt, namespace, name, |o| *o = obj)?;
    Ok(json_response(StatusCode::OK, &updated))
}

/// Parses `resourceVersion`: `None` for unset or "", else the number.
fn parse_rv(query: &Query) -> Result<Option<u64>, ApiError> {
    match query.get("resourceVersion").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}"))),
    }
}

fn selectors(query: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
        .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// A continue token: the list's revision and the last key returned, base64 JSON like the real
/// server's (`{"v":"meta.k8s.io/v1","rv":N,"start":"ns/name"}`).
fn encode_continue(revision: u64, last: &Key) -> String {
    let token =
        json!({ "v": "meta.k8s.io/v1", "rv": revision, "start": format!("{}/{}", last.1, last.2) });
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String, String), ApiError> {
    let invalid = || {
        ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| invalid())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let revision = value["rv"].as_u64().ok_or_else(invalid)?;
    let (ns, name) = value["start"]
        .as_str()
        .and_then(|s| s.split_once('/'))
        .ok_or_else(invalid)?;
    Ok((revision, ns.to_string(), name.to_string()))
}

fn negotiate_partial(shared: &Shared, accept: &str, list: bool) -> Result<bool, ApiError> {
    let mode = lock(&shared.unkind).partial_metadata;
    partial::negotiate(accept, list, mode)
}

fn list(
    shared: &Shared,
    rt: &'static ResourceType,
    namespace: Option<&str>,
    query: &Query,
    partial: bool,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(query)?;
    let limit: usize = match query.get("limit").map(String::as_str) {
        None | Some("") => 0,
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {s:?}")))?,
    };
    let rv = parse_rv(query)?;
    let rv_match = query
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|m| !m.is_empty());
    let continue_token = query
        .get("continue")
        .map(String::as_str)
        .filter(|c| !c.is_empty());

    let store = shared.store();
    let current = store.revision();
    let (revision, start) = match continue_token {
        Some(token) => {
            if rv.is_some_and(|r| r != 0) {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let (revision, ns, name) = decode_continue(token)?;
            if revision < store.history_start() {
                return Err(ApiError::continue_expired());
            }
            if revision > current {
                return Err(ApiError::bad_request(
                    "continue key is not valid: too large resource version",
                ));
            }
            (revision, Some((ns, name)))
        }
        None => {
            let revision = match (rv, rv_match) {
                (None, Some(_)) => {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ))
                }
                (None, None) | (Some(0), None | Some("NotOlderThan")) => current,
                (Some(n), _) if n > current => return Err(ApiError::too_large(n, current)),
                (Some(_), None | Some("NotOlderThan")) => current,
                (Some(n), Some("Exact")) if n < store.history_start() => {
                    return Err(ApiError::too_old(n, store.history_start()))
                }
                (Some(n), Some("Exact")) => n,
                (Some(_), Some(other)) => {
                    return Err(ApiError::bad_request(format!(
                        "unsupported resourceVersionMatch: {other:?}"
                    )))
                }
            };
            (revision, None)
        }
    };
    // At the current revision (most lists) the objects are read in place; an older revision's
    // state is rebuilt from the history.
    let past;
    let state: Vec<(&Key, &Value)> = if revision == current {
        store.objects_of(rt).collect()
    } else {
        past = store.state_at(rt, revision);
        past.iter().collect()
    };

    let scope_ok = |obj: &Value| {
        namespace
            .is_none_or(|ns| obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns))
    };
    let mut matching = state.into_iter().filter(|(key, obj)| {
        start
            .as_ref()
            .is_none_or(|(ns, name)| (&key.1, &key.2) > (ns, name))
            && scope_ok(obj)
            && labels.matches(obj)
            && fields.matches(obj)
    });
    let mut items = Vec::new();
    let mut last_key = None;
    for (key, obj) in matching.by_ref() {
        // Items of a PartialObjectMetadataList keep their type fields; a full list's do not.
        items.push(match partial {
            true => partial::cut(obj),
            false => strip_type_meta(obj.clone()),
        });
        last_key = Some(key.clone());
        if limit > 0 && items.len() == limit {
            break;
        }
    }
    let remaining = matching.count();
    drop(store);
    let mut metadata = json!({ "resourceVersion": revision.to_string() });
    if remaining > 0 {
        if let Some(last) = &last_key {
            metadata["continue"] = json!(encode_continue(revision, last));
        }
        // The real server counts what is left only when no selector filters it.
        if labels.is_empty() && fields.is_empty() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    let (kind, api_version) = match partial {
        true => (
            "PartialObjectMetadataList".to_owned(),
            "meta.k8s.io/v1".to_owned(),
        ),
        false => (format!("{}List", rt.kind), rt.api_version()),
    };
    let mut response = json_response(
        StatusCode::OK,
        &json!({
            "kind": kind,
            "apiVersion": api_version,
            "metadata": metadata,
            "items": items,
        }),
    );
    response.extensions_mut().insert(Served {
        revision: Some(revision),
        expired: false,
    });
    Ok(response)
}

fn start_watch(
    shared: &Arc<Shared>,
    rt: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    query: &Query,
    partial: bool,
) -> Result<Response, ApiError> {
    let (labels, mut fields) = selectors(query)?;
    if let Some(name) = name {
        // The deprecated watch on a single object is a watch with a name field selector.
        let combined = match query.get("fieldSelector").filter(|s| !s.is_empty()) {
            Some(s) => format!("{s},metadata.name={name}"),
            None => format!("metadata.name={name}"),
        };
        fields = FieldSelector::parse(&combined).map_err(ApiError::bad_request)?;
    }
    let timeout = match query.get("timeoutSeconds").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(Duration::from_secs(s.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds: {s:?}"))
        })?)),
    };
    let spec = WatchSpec {
        resource: rt,
        namespace,
        labels,
        fields,
        allow_bookmarks: is_true(query, "allowWatchBookmarks"),
        timeout,
        partial,
    };
    let unkind = *lock(&shared.unkind);
    let send_initial = is_true(query, "sendInitialEvents");
    let rv_match = query
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|m| !m.is_empty());
    // A server that ignores the watch-list parameters serves a plain watch from "now".
    let ignore_initial = send_initial && unkind.initial_events == InitialEvents::Ignored;
    if send_initial && !ignore_initial {
        if unkind.initial_events == InitialEvents::Rejected {
            return Err(ApiError::invalid(
                "ListOptions",
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            ));
        }
        if rv_match != Some("NotOlderThan") {
            return Err(ApiError::invalid(
                "ListOptions",
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !spec.allow_bookmarks {
            return Err(ApiError::invalid(
                "ListOptions",
                "allowWatchBookmarks",
                "allowWatchBookmarks must be set to true when sendInitialEvents is set",
            ));
        }
    } else if !send_initial && rv_match.is_some() {
        return Err(ApiError::invalid(
            "ListOptions",
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let rv = if ignore_initial {
        None
    } else {
        parse_rv(query)?
    };

    let mut store = shared.store();
    let current = store.revision();
    // What the watch cache has seen: all of it, unless it is set to lag behind.
    let cache_revision = unkind.watch_cache_revision.unwrap_or(current).min(current);
    let snapshot = |store: &super::Store| -> Vec<Bytes> {
        store
            .state_at(rt, current)
            .values()
            .filter(|obj| spec.matches(obj))
            .map(|obj| spec.line("ADDED", obj))
            .collect()
    };
    let initial = match rv {
        Some(n) if n > cache_revision => return Err(ApiError::too_large(n, cache_revision)),
        _ if send_initial && !ignore_initial => {
            let mut lines = snapshot(&store);
            lines.push(spec.bookmark(current, true));
            lines
        }
        None | Some(0) => snapshot(&store),
        Some(n) if n < store.watch_start(rt) => {
            let status = ApiError::too_old(n, store.watch_start(rt)).body;
            let line = event_line("ERROR", &status);
            let mut response =
                stream_response(Body::from_stream(futures_util::stream::once(async move {
                    Ok::<_, std::io::Error>(line)
                })));
            response.extensions_mut().insert(Served {
                revision: None,
                expired: true,
            });
            return Ok(response);
        }
        Some(n) => {
            let replayed = store.changes_before(rt, n, unkind.replay_on_resume, |c| {
                spec.event_for(c).is_some()
            });
            replayed
                .iter()
                .chain(store.changes_since(rt, n).iter())
                .filter_map(|change| spec.event_for(change))
                .collect()
        }
    };
    let (rx, backlog) = store.register_bounded(rt, unkind.watch_backlog_limit);
    drop(store);

    let (tx, body_rx) = mpsc::channel(WATCH_BODY_BUFFER);
    tokio::spawn(watch::run(
        spec,
        initial,
        rx,
        tx,
        shared.stream_settings.clone(),
        backlog,
    ));
    let mut response = stream_response(Body::from_stream(ReceiverStream::new(body_rx)));
    response.extensions_mut().insert(Served {
        revision: Some(rv.filter(|&n| n != 0).unwrap_or(current)),
        expired: false,
    });
    Ok(response)
}

async fn read_json(body: Body) -> Result<Value, ApiError> {
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format: {e}"
        ))
    })
}

/// A 500 whose announced JSON body never arrives.
fn stalled_response() -> Response {
    let never = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
    let mut response = Response::new(Body::from_stream(never));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("200"));
    response
}

/// `GET /apis`: the aggregated discovery document (`APIGroupDiscoveryList`) when the server
/// offers it and `accept` asks for it (a client lists it before plain JSON, as kubectl does),
/// else the legacy `APIGroupList`.
fn group_list(shared: &Shared, accept: &str) -> Response {
    let asks = accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=APIGroupDiscoveryList") && first.contains("v=v2"));
    let discovered = shared.store();
    if !(shared.aggregated_discovery && asks) {
        return json_response(
            StatusCode::OK,
            &resources::api_group_list(discovered.discovered()),
        );
    }
    let doc = resources::api_group_discovery_list(discovered.discovered());
    let mut response = json_response(StatusCode::OK, &doc);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        ),
    );
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A 200 whose body is streamed (chunked), as every watch response is.
fn stream_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(error: ApiError) -> Response {
    let status = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, &error.body);
    if let Some(secs) = error.retry_after_secs {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}
