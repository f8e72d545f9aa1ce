//! The HTTP client for the Kubernetes API: TLS, bearer tokens, request metrics and the mapping of
//! responses to [`ApiError`].
//!
//! It knows paths and verbs, not watch semantics: the watcher decides what a list or a watch means.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use prometheus::IntCounterVec;
use reqwest::header::{HeaderMap, ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use url::Url;

use super::credentials::{AuthSource, Credential, CredentialsError, Endpoint};
use super::error::ApiError;
use super::metadata::ACCEPT_JSON;
use crate::event::ResourceInfo;

/// How long to wait for a TCP (and TLS) connection to the API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keepalive, so the kernel notices a peer that vanished without closing the connection.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// HTTP/2 flow-control windows of the requests other than watches (lists, discovery): how much
/// the API server may send ahead of what kube2nats has read, per stream and per connection. That
/// data sits in the process outside the byte budget (`nats.max_buffered_bytes`), so it is capped:
/// hyper's defaults (2 MiB a stream, 5 MiB a connection) hold megabytes. 1 MiB per connection
/// still carries a list at several hundred MB/s in-cluster.
const H2_STREAM_WINDOW_BYTES: u32 = 256 * 1024;
const H2_CONNECTION_WINDOW_BYTES: u32 = 1024 * 1024;
/// The most an HTTP/1.1 connection's read buffer grows to. Each watch over HTTP/1.1 has a
/// connection of its own, and hyper grows a busy connection's buffer to ~400 KiB and keeps it while
/// the connection lives, outside the byte budget: with hundreds of watches receiving large objects
/// at once that is 100+ MiB. 64 KiB costs no throughput (a read of 64 KiB per wakeup).
const H1_MAX_BUF_BYTES: usize = 64 * 1024;
/// HTTP/2 PING interval and timeout: a half-open HTTP/2 connection fails within about a minute
/// instead of hanging until the watch's own deadline.
const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(15);
/// Error bodies are read up to this size: enough for any Status, bounded against a runaway proxy.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Registers the API client's metric family, `api_requests_total{verb, resource, code}`.
pub(crate) fn register_api_requests(
    registry: &prometheus::Registry,
) -> prometheus::Result<IntCounterVec> {
    crate::telemetry::metrics::counter(
        registry,
        "api_requests_total",
        "Requests to the Kubernetes API server, by verb, resource (as kubectl names it, or discovery) and HTTP status code (0 when no response).",
        &["verb", "resource", "code"],
    )
}

/// The `resource` label of `api_requests_total` for a request path: the resource as kubectl names
/// it (`pods`, `deployments.apps`, `leases.coordination.k8s.io`), or `discovery` for the API
/// discovery documents. kube2nats builds its paths from the configured watches plus discovery,
/// access reviews and its Lease, so the label has no more values than those; object names and
/// namespaces in a path never reach it.
pub(crate) fn resource_label(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return "discovery".to_owned(),
    };
    let resource = match rest {
        [] => return "discovery".to_owned(),
        ["namespaces", _namespace, resource, ..] => resource,
        [resource, ..] => resource,
    };
    if group.is_empty() {
        (*resource).to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// A client for one API server, shared by every watch.
pub(crate) struct ApiClient {
    /// The HTTP clients and the exec plugin's certificate they present, replaced together when
    /// the plugin hands out a new certificate (a TLS identity is fixed when a client is built).
    http: RwLock<(HttpClients, Option<Arc<[u8]>>)>,
    tls: TlsSettings,
    base: Url,
    auth: Option<AuthSource>,
    request_timeout: Duration,
    api_requests: IntCounterVec,
}

/// One client for watches, one for every other request.
///
/// Watches go over HTTP/1.1, each on a connection of its own, even where the API server offers
/// HTTP/2: the byte budget ([`crate::budget`]) stops a watch from reading while it may not keep
/// more, and over HTTP/2 such a watch holds part of the one flow-control window all watches
/// share, so that a few paused watches starve the rest (300 watches receiving large objects at
/// once stalled for good). Paused, an HTTP/1.1 watch holds nothing another needs: TCP pushes back
/// to the API server; let go, it is a clean close rather than a reset of a shared connection.
/// It also keeps kube-apiserver's limit of streams per connection (1000 by default) from holding
/// back watches beyond it.
#[derive(Clone)]
struct HttpClients {
    requests: reqwest::Client,
    watches: reqwest::Client,
}

impl HttpClients {
    fn build(tls: &TlsSettings, identity_pem: Option<&[u8]>) -> Result<Self, CredentialsError> {
        Ok(HttpClients {
            requests: finish(client_builder(tls, identity_pem)?)?,
            watches: finish(client_builder(tls, identity_pem)?.http1_only())?,
        })
    }

    fn for_verb(&self, verb: Verb) -> &reqwest::Client {
        match verb {
            Verb::Watch => &self.watches,
            _ => &self.requests,
        }
    }
}

/// What the HTTP client is built from, kept to rebuild it with a new client certificate.
struct TlsSettings {
    ca_pem: Option<Vec<u8>>,
    identity_pem: Option<Vec<u8>>,
    insecure_skip_tls_verify: bool,
    proxy_url: Option<Url>,
}

/// The `Authorization` header for `token`, marked sensitive so that no debug output of the
/// request (ours or the HTTP stack's) shows it; `None` for a token no header can carry.
fn bearer(token: &str) -> Option<reqwest::header::HeaderValue> {
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// The API verbs kube2nats uses, as they appear in the `verb` label and in RBAC rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
}

impl Verb {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
        }
    }
}

impl ApiClient {
    pub(crate) fn new(
        endpoint: Endpoint,
        request_timeout: Duration,
        api_requests: IntCounterVec,
    ) -> Result<ApiClient, CredentialsError> {
        let tls = TlsSettings {
            ca_pem: endpoint.ca_pem,
            identity_pem: endpoint.identity_pem,
            insecure_skip_tls_verify: endpoint.insecure_skip_tls_verify,
            proxy_url: endpoint.proxy_url,
        };
        if tls.insecure_skip_tls_verify {
            tracing::warn!("TLS verification of the API server is OFF (kubernetes.insecure_skip_tls_verify = true): anyone on the path can impersonate it");
        }
        if endpoint.auth.is_some() && endpoint.base_url.scheme() == "http" {
            tracing::warn!(api_server = %endpoint.base_url, "the bearer token is sent over plain http://: anyone on the path can read it (use https://, or http:// only to a local kubectl proxy without a token)");
        }
        if let Some(proxy) = &tls.proxy_url {
            tracing::info!(proxy = %crate::redact::url(proxy.as_str()), "reaching the API server through a proxy");
        }
        let http = HttpClients::build(&tls, tls.identity_pem.as_deref())?;
        Ok(ApiClient {
            http: RwLock::new((http, None)),
            tls,
            base: endpoint.base_url,
            auth: endpoint.auth,
            request_timeout,
            api_requests,
        })
    }

    /// The HTTP clients to use with `credential`: rebuilt when an exec plugin handed out a
    /// certificate the current ones do not present yet.
    fn http_for(&self, credential: &Credential) -> Result<HttpClients, CredentialsError> {
        let current = self.http.read().unwrap_or_else(|p| p.into_inner());
        let Some(identity) = &credential.identity_pem else {
            return Ok(current.0.clone());
        };
        if current.1.as_ref().is_some_and(|c| Arc::ptr_eq(c, identity)) {
            return Ok(current.0.clone());
        }
        drop(current);
        let http = HttpClients::build(&self.tls, Some(identity))?;
        *self.http.write().unwrap_or_else(|p| p.into_inner()) =
            (http.clone(), Some(identity.clone()));
        Ok(http)
    }

    /// GET a JSON document (discovery), within the request timeout.
    pub(crate) async fn get(&self, path: &str) -> Result<Bytes, ApiError> {
        self.get_as(path, ACCEPT_JSON).await
    }

    /// [`get`](Self::get), `accept` choosing the representation (aggregated discovery).
    pub(crate) async fn get_as(&self, path: &str, accept: &'static str) -> Result<Bytes, ApiError> {
        let response = self
            .send(
                Verb::Get,
                path,
                |h| h.get(self.url(path, &[])).header(ACCEPT, accept),
                true,
            )
            .await?;
        self.read_body(response).await
    }

    /// One list request (one page), within the request timeout; `accept` chooses the
    /// representation ([`super::metadata`]).
    pub(crate) async fn list_as(
        &self,
        path: &str,
        query: &[(&str, &str)],
        accept: &'static str,
    ) -> Result<Bytes, ApiError> {
        let request = |h: &reqwest::Client| h.get(self.url(path, query)).header(ACCEPT, accept);
        let response = self.send(Verb::List, path, request, true).await?;
        self.read_body(response).await
    }

    /// POST a JSON body (access reviews, a Lease's creation).
    pub(crate) async fn create(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Bytes, ApiError> {
        let url = self.url(path, &[]);
        self.send_json(Verb::Create, path, |h| h.post(url), body)
            .await
    }

    /// PUT a whole object (a Lease renewal); the API server refuses it with 409 Conflict when the
    /// body's `metadata.resourceVersion` is not the object's current one.
    pub(crate) async fn update(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Bytes, ApiError> {
        let url = self.url(path, &[]);
        self.send_json(Verb::Update, path, |h| h.put(url), body)
            .await
    }

    async fn send_json(
        &self,
        verb: Verb,
        path: &str,
        build: impl FnOnce(&reqwest::Client) -> reqwest::RequestBuilder,
        body: &serde_json::Value,
    ) -> Result<Bytes, ApiError> {
        let request = |h: &reqwest::Client| {
            build(h)
                .header(ACCEPT, ACCEPT_JSON)
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string())
        };
        let response = self.send(verb, path, request, true).await?;
        self.read_body(response).await
    }

    /// Opens a watch: the response headers arrive within the request timeout, the body then
    /// streams for as long as the server keeps it open; `accept` chooses the representation
    /// ([`super::metadata`]).
    pub(crate) async fn watch_as(
        &self,
        path: &str,
        query: &[(&str, &str)],
        accept: &'static str,
    ) -> Result<reqwest::Response, ApiError> {
        let request = |h: &reqwest::Client| h.get(self.url(path, query)).header(ACCEPT, accept);
        let response = self.send(Verb::Watch, path, request, false).await?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !content_type.is_empty() && !content_type.contains("json") {
            let deadline = tokio::time::Instant::now() + self.request_timeout;
            let body = read_limited(response, deadline).await;
            return Err(ApiError::UnexpectedBody(format!(
                "watch answered with content-type {content_type:?}, not JSON: {}",
                super::error::body_excerpt(&body)
            )));
        }
        Ok(response)
    }

    fn url(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut url = self.base.clone();
        let base_path = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{base_path}{path}"));
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    /// Sends the request `build` makes with the current credentials, counting it by verb,
    /// resource (of `path`) and code; a 401 drops the cached credentials so the next request
    /// fetches new ones.
    async fn send(
        &self,
        verb: Verb,
        path: &str,
        build: impl FnOnce(&reqwest::Client) -> reqwest::RequestBuilder,
        whole_request_timeout: bool,
    ) -> Result<reqwest::Response, ApiError> {
        let credential = match &self.auth {
            Some(auth) => auth.current().await.map_err(ApiError::Credentials)?,
            None => Credential::default(),
        };
        let http = self.http_for(&credential).map_err(ApiError::Credentials)?;
        let mut request = build(http.for_verb(verb));
        if let Some(token) = &credential.token {
            match bearer(token) {
                Some(value) => request = request.header(AUTHORIZATION, value),
                None => {
                    tracing::warn!("the bearer token holds characters an HTTP header cannot; sending the request without it")
                }
            }
        }
        if whole_request_timeout {
            request = request.timeout(self.request_timeout);
        }
        let sent = tokio::time::timeout(self.request_timeout, request.send()).await;
        let response = match sent {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                self.count(verb, path, 0);
                return Err(ApiError::Transport(e));
            }
            Err(_elapsed) => {
                self.count(verb, path, 0);
                return Err(ApiError::ServerError {
                    code: 0,
                    message: format!("no response headers within {:?}", self.request_timeout),
                    retry_after: None,
                });
            }
        };
        let code = response.status().as_u16();
        self.count(verb, path, code);
        if response.status().is_success() {
            return Ok(response);
        }
        if code == 401 {
            if let Some(auth) = &self.auth {
                auth.invalidate().await;
            }
        }
        let retry_after = retry_after(response.headers());
        // A watch's response has no whole-request timeout, and a proxy may send an error's
        // headers and then stall: its body gets the request timeout too.
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let body = read_limited(response, deadline).await;
        Err(ApiError::from_response(code, retry_after, &body))
    }

    async fn read_body(&self, response: reqwest::Response) -> Result<Bytes, ApiError> {
        response.bytes().await.map_err(ApiError::Transport)
    }

    fn count(&self, verb: Verb, path: &str, code: u16) {
        self.api_requests
            .with_label_values(&[verb.as_str(), &resource_label(path), &code.to_string()])
            .inc();
    }
}

/// What every HTTP client for the API server has: the CA bundle (or the web PKI roots), a client
/// certificate, the proxy, and the keepalives that notice a dead connection.
fn client_builder(
    tls: &TlsSettings,
    identity_pem: Option<&[u8]>,
) -> Result<reqwest::ClientBuilder, CredentialsError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_keepalive(TCP_KEEPALIVE)
        .http2_keep_alive_interval(H2_KEEPALIVE_INTERVAL)
        .http2_keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .http2_initial_stream_window_size(H2_STREAM_WINDOW_BYTES)
        .http2_initial_connection_window_size(H2_CONNECTION_WINDOW_BYTES)
        .http1_max_buf_size(H1_MAX_BUF_BYTES)
        .user_agent(concat!("kube2nats/", env!("CARGO_PKG_VERSION")));
    if let Some(pem) = &tls.ca_pem {
        let certs =
            reqwest::Certificate::from_pem_bundle(pem).map_err(|source| CredentialsError::Tls {
                what: "CA bundle",
                source,
            })?;
        builder = builder.tls_built_in_root_certs(false);
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let Some(pem) = identity_pem {
        let identity =
            reqwest::Identity::from_pem(pem).map_err(|source| CredentialsError::Tls {
                what: "client certificate",
                source,
            })?;
        builder = builder.identity(identity);
    }
    if let Some(proxy) = &tls.proxy_url {
        let proxy = reqwest::Proxy::all(proxy.clone()).map_err(|source| CredentialsError::Tls {
            what: "proxy-url",
            source,
        })?;
        builder = builder.proxy(proxy);
    }
    if tls.insecure_skip_tls_verify {
        builder = builder.danger_accept_invalid_certs(true);
    }
    Ok(builder)
}

fn finish(builder: reqwest::ClientBuilder) -> Result<reqwest::Client, CredentialsError> {
    builder.build().map_err(|source| CredentialsError::Tls {
        what: "HTTP client",
        source,
    })
}

/// Reads at most [`MAX_ERROR_BODY_BYTES`] of a body until `deadline`; a failure or the deadline
/// mid-body keeps what arrived.
async fn read_limited(mut response: reqwest::Response, deadline: tokio::time::Instant) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        let room = MAX_ERROR_BODY_BYTES - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY_BYTES {
            break;
        }
    }
    body
}

/// `Retry-After` in seconds (the form the API server sends); dates are ignored.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}

/// The collection path of a resource: `/api/v1/namespaces/default/pods`, `/apis/apps/v1/deployments`.
pub(crate) fn collection_path(resource: &ResourceInfo, namespace: Option<&str>) -> String {
    let mut path = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    if let Some(ns) = namespace {
        path.push_str("/namespaces/");
        path.push_str(ns);
    }
    path.push('/');
    path.push_str(&resource.plural);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vendored reqwest hands `http1_max_buf_size` to hyper, which refuses a cap below its
    /// 8 KiB minimum when the client is built: so the cap kube2nats sets reaches hyper.
    #[test]
    #[should_panic(expected = "max_buf_size cannot be smaller")]
    fn the_http1_buffer_cap_reaches_hyper() {
        let _ = reqwest::Client::builder().http1_max_buf_size(1024).build();
    }

    /// The `resource` label names a resource as kubectl does, never an object or a namespace.
    #[test]
    fn resource_label_names_the_resource_of_a_path() {
        for (path, label) in [
            ("/api", "discovery"),
            ("/apis", "discovery"),
            ("/api/v1", "discovery"),
            ("/apis/apps/v1", "discovery"),
            ("/api/v1/pods", "pods"),
            ("/api/v1/namespaces/shop/pods", "pods"),
            ("/api/v1/namespaces", "namespaces"),
            ("/api/v1/namespaces/shop", "namespaces"),
            (
                "/apis/apps/v1/namespaces/shop/deployments",
                "deployments.apps",
            ),
            ("/apis/example.com/v1alpha1/widgets", "widgets.example.com"),
            (
                "/apis/coordination.k8s.io/v1/namespaces/kube2nats/leases/kube2nats",
                "leases.coordination.k8s.io",
            ),
            (
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                "selfsubjectaccessreviews.authorization.k8s.io",
            ),
        ] {
            assert_eq!(resource_label(path), label, "{path}");
        }
    }

    fn info(group: &str, plural: &str) -> ResourceInfo {
        ResourceInfo {
            group: group.into(),
            version: "v1".into(),
            plural: plural.into(),
            kind: String::new(),
            namespaced: true,
        }
    }

    /// An error response whose body stalls after its first bytes is read until the deadline,
    /// keeping what arrived, instead of forever.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_error_body_is_read_until_the_deadline() {
        use futures_util::StreamExt;
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(
            bytes::Bytes::from_static(b"{\"kind\":\"Status\""),
        )]);
        let stalled = first.chain(futures_util::stream::pending());
        let response = reqwest::Response::from(axum::http::Response::new(
            reqwest::Body::wrap_stream(stalled),
        ));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let body = tokio::time::timeout(Duration::from_secs(60), read_limited(response, deadline))
            .await
            .expect("the body read ends at its deadline");
        assert_eq!(body, b"{\"kind\":\"Status\"");
    }

    /// The `Authorization` header is marked sensitive, so debug output of a request hides it.
    #[test]
    fn the_bearer_header_is_sensitive() {
        let value = bearer("s3cr3t").unwrap();
        assert!(value.is_sensitive());
        assert!(!format!("{value:?}").contains("s3cr3t"));
        assert!(bearer("line\nbreak").is_none());
    }

    #[test]
    fn collection_paths() {
        assert_eq!(
            collection_path(&info("", "pods"), Some("default")),
            "/api/v1/namespaces/default/pods"
        );
        assert_eq!(collection_path(&info("", "pods"), None), "/api/v1/pods");
        assert_eq!(
            collection_path(&info("apps", "deployments"), Some("a")),
            "/apis/apps/v1/namespaces/a/deployments"
        );
    }
}
