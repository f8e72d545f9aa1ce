//! A simulated kube-apiserver, in process, on a free loopback port.
//!
//! kube2nats' promises (nothing lost, nothing twice, order kept) are about how it reacts to what an
//! API server does over the wire: paged lists at one consistent revision, watches resumed from a
//! resourceVersion, bookmarks, 410 Expired in both its forms, 504 "too large resource version",
//! 429/5xx with Retry-After, token rotation, RBAC refusals and connections that die mid-line. A
//! real cluster cannot be made to do those things on cue, so this module reproduces them, with
//! the real server's paths, JSON shapes and status codes, plus knobs to trigger each fault.
//!
//! Layout:
//! - `store`: objects, the global revision and the bounded history (etcd + watch cache);
//! - `http`: routing, auth, RBAC, list/watch/CRUD handlers and discovery;
//! - `watch`: one task per open watch, writing NDJSON and misbehaving on request;
//! - `leases`: what is particular to `coordination.k8s.io/v1` Leases (their spec's validation);
//! - `partial`: metadata-only lists and watches (PartialObjectMetadata) and their negotiation;
//! - `partition`: cutting one client off, as a network partition between it and the server does;
//! - `selector`, `status`, `resources`, `tls`: the parts those share.
//!
//! Everything a test can do over HTTP (create, update, delete, get, list, watch) it can also do
//! directly through [`ApiServer`]'s methods, which is shorter in test code. Where those take a
//! `namespace: Option<&str>`, `None` means `default` for namespaced resources and is ignored for
//! cluster-scoped ones.
//!
//! Deliberate simplifications: JSON only (no protobuf or CBOR), no PATCH, no field selectors
//! beyond `metadata.name`/`metadata.namespace`, and no finalizers. Two more are defaults that a
//! test can turn into kube-apiserver's behaviour ([`Fidelity`]): deletes are immediate, where
//! kube-apiserver announces even a pod deleted at once (unscheduled, grace period 0) as a MODIFIED
//! that sets `deletionTimestamp`, then the DELETED, and answers the DELETE with the object as of
//! that MODIFIED; and namespaces need not exist before objects are created in them, where
//! kube-apiserver answers 404 (only `kube-system` can always be read by name, with a uid per
//! simulator, as tools read it for a cluster id). They stay the defaults because most tests are
//! about what kube2nats does with one event per change, written shorter without a Namespace to
//! create first. Two behaviours of kube-apiserver 1.20 are options too, the defaults being what
//! current servers do: `sendInitialEvents` refused with 422 ([`InitialEvents::Rejected`]) and no
//! aggregated discovery ([`ApiServerOptions::aggregated_discovery`]). `tests/real_apiserver.rs`
//! runs its tests on both servers (see [`crate::real_apiserver`]), and pins each difference with
//! a test run on the real server and on the simulator set up as kube-apiserver 1.20.

mod crds;
mod fidelity;
mod http;
mod leases;
mod partial;
mod partition;
mod resources;
mod selector;
mod status;
mod store;
mod tls;
mod unkind;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub use fidelity::{Fidelity, Namespaces, PodDeletion};
pub use partial::PartialMetadata;
pub use status::ApiError;
use store::{Store, WatchFault, WatchMsg};
pub use unkind::InitialEvents;
pub use watch::Framing;

/// The user RBAC messages name: a kube2nats service account (the manifests in deploy/ use the
/// namespace `kube2nats`; the simulator keeps `default`, which is what the tests assert on).
pub const USER: &str = "system:serviceaccount:default:kube2nats";

/// The token written to [`ApiServer::token_file`] and accepted at start.
pub const INITIAL_TOKEN: &str = "test-token";

/// Default number of changes the history remembers (the real watch cache holds a bounded window too).
pub const DEFAULT_HISTORY_LIMIT: usize = 1000;

/// How clients must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Auth {
    /// No authentication, like `kubectl proxy`; every request is allowed (RBAC rules still apply
    /// to a bearer token if one is sent).
    None,
    /// A bearer token from the valid-token file is required; it is re-read on every request.
    #[default]
    Tokens,
    /// TLS only: the handshake requires a client certificate signed by the simulator's CA
    /// ([`ApiServer::client_cert_file`]); bearer tokens are not checked.
    ClientCertificates,
}

/// How [`ApiServer::start`] sets the server up.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// Serve HTTPS with a freshly generated CA (see [`ApiServer::ca_file`]).
    pub tls: bool,
    /// Authentication mode.
    pub auth: Auth,
    /// Number of changes remembered for watches and paged lists; older ones are answered 410.
    pub history_limit: usize,
    /// Send a BOOKMARK this often to watches that allow bookmarks; `None`: only on
    /// [`ApiServer::send_bookmarks`] (real servers send them at no fixed interval, or not at all).
    pub bookmark_interval: Option<Duration>,
    /// Answer `GET /apis` with the aggregated discovery document (`APIGroupDiscoveryList`,
    /// apidiscovery.k8s.io/v2) when the client's `Accept` asks for it, as kube-apiserver does
    /// from 1.30 (v2beta1 from 1.26); `false`: the per-group documents alone, as before 1.26.
    pub aggregated_discovery: bool,
    /// Pod deletion and namespace admission as kube-apiserver does them, or short ([`Fidelity`]).
    pub fidelity: Fidelity,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        ApiServerOptions {
            tls: false,
            auth: Auth::Tokens,
            history_limit: DEFAULT_HISTORY_LIMIT,
            bookmark_interval: None,
            aggregated_discovery: true,
            fidelity: Fidelity::default(),
        }
    }
}

/// One RBAC rule, as in a Role: a request is allowed if some rule of its token lists its verb,
/// API group and resource (or `*`), and — unless `namespaces` is empty, meaning all namespaces
/// and cluster scope — its namespace. Cluster-wide requests need a rule with no namespaces.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rule {
    /// `get`, `list`, `watch`, `create`, `update`, `delete` or `*`.
    pub verbs: Vec<String>,
    /// API groups (`""` for core) or `*`.
    pub api_groups: Vec<String>,
    /// Plural resource names or `*`.
    pub resources: Vec<String>,
    /// Namespaces the rule applies to; empty for all.
    pub namespaces: Vec<String>,
    /// `resourceNames`: the object names the rule applies to; empty for all. As in Kubernetes, a
    /// rule with names never allows a request without one (list, watch of a collection, create).
    pub resource_names: Vec<String>,
}

impl Rule {
    /// A rule from string slices; `namespaces` empty means all.
    pub fn new(
        verbs: &[&str],
        api_groups: &[&str],
        resources: &[&str],
        namespaces: &[&str],
    ) -> Self {
        let own = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        Rule {
            verbs: own(verbs),
            api_groups: own(api_groups),
            resources: own(resources),
            namespaces: own(namespaces),
            resource_names: Vec::new(),
        }
    }

    /// The same rule restricted to objects with these names (`resourceNames`).
    pub fn named(mut self, names: &[&str]) -> Self {
        self.resource_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn allows(&self, request: &Attributes<'_>) -> bool {
        let has = |xs: &[String], x: &str| xs.iter().any(|v| v == "*" || v == x);
        has(&self.verbs, request.verb)
            && has(&self.api_groups, request.group)
            && has(&self.resources, request.resource)
            && (self.namespaces.is_empty()
                || request
                    .namespace
                    .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns)))
            && (self.resource_names.is_empty()
                || request
                    .name
                    .is_some_and(|name| self.resource_names.iter().any(|n| n == name)))
    }
}

/// What RBAC decides on: one request's verb, resource, namespace and object name.
#[derive(Debug, Clone, Copy)]
struct Attributes<'a> {
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
}

/// An injected failure answered instead of the real response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 429 TooManyRequests (API priority and fairness), with `Retry-After`.
    TooManyRequests {
        /// `Retry-After` seconds.
        retry_after_secs: u64,
    },
    /// 500 InternalError.
    Internal,
    /// 503 ServiceUnavailable, with `Retry-After`.
    Unavailable {
        /// `Retry-After` seconds.
        retry_after_secs: u64,
    },
    /// The headers of a 500 that announce a body, which then never comes: a proxy that stalls.
    StallAfterHeaders,
}

impl Failure {
    fn to_error(self) -> ApiError {
        match self {
            Failure::TooManyRequests { retry_after_secs } => ApiError::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                None,
            )
            .with_retry_after(retry_after_secs),
            Failure::Internal | Failure::StallAfterHeaders => ApiError::new(
                500,
                "InternalError",
                "Internal error occurred: injected failure",
                Some(serde_json::json!({ "causes": [{ "message": "injected failure" }] })),
            ),
            Failure::Unavailable { retry_after_secs } => ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
                None,
            )
            .with_retry_after(retry_after_secs),
        }
    }
}

/// Which requests an injected failure applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestFilter {
    /// Every request, discovery included.
    #[default]
    Any,
    /// Only list requests (GET on a collection without `watch`).
    List,
    /// Only watch requests.
    Watch,
}

/// One request as the server saw it, for tests to assert on.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Decoded query parameters (last value wins).
    pub query: BTreeMap<String, String>,
    /// Status code answered (200 for a watch, whatever its stream later says).
    pub status: u16,
    /// Whether an `Authorization: Bearer` header was sent.
    pub token_sent: bool,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub http_version: String,
    /// For a list: the revision it was served at; for a watch: the revision after which its
    /// events start.
    pub served_revision: Option<u64>,
    /// Answered 410 Expired, as a status or (for a watch) as an ERROR event in the stream.
    pub expired: bool,
    /// The `Accept` header sent (`""` without one).
    pub accept: String,
}

impl RequestRecord {
    /// Whether this was a watch request.
    pub fn is_watch(&self) -> bool {
        matches!(
            self.query.get("watch").map(String::as_str),
            Some("1" | "true")
        )
    }

    /// A query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }
}

/// Failures still to be answered.
#[derive(Debug, Clone, Copy)]
struct PendingFailures {
    remaining: usize,
    filter: RequestFilter,
    failure: Failure,
}

/// State shared by the server's tasks and the [`ApiServer`] handle.
struct Shared {
    store: Mutex<Store>,
    auth: Auth,
    valid_tokens_file: PathBuf,
    token_file: PathBuf,
    rules: Mutex<HashMap<String, Vec<Rule>>>,
    failures: Mutex<Option<PendingFailures>>,
    stream_settings: Arc<Mutex<watch::StreamSettings>>,
    requests: Mutex<Vec<RequestRecord>>,
    server_address: String,
    unkind: Mutex<unkind::Settings>,
    connections: std::sync::atomic::AtomicUsize,
    /// Bytes of response bodies sent, lists and watch streams alike: what clients cost the server.
    response_bytes: Arc<std::sync::atomic::AtomicU64>,
    cut_off: partition::CutOff,
    slow_lease_reads: leases::SlowReads,
    /// The `kube-system` Namespace's uid: what tools use as the cluster's id, different for
    /// every simulator.
    cluster_uid: String,
    /// [`ApiServerOptions::aggregated_discovery`].
    aggregated_discovery: bool,
}

/// Locks a mutex, recovering from poisoning: a panicking test thread must not take the server
/// down with it, and every critical section leaves the data consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// Takes one pending failure if it applies to a request of this kind.
    fn take_failure(&self, is_list: bool, is_watch: bool) -> Option<Failure> {
        let mut pending = lock(&self.failures);
        let p = pending.as_mut()?;
        let applies = match p.filter {
            RequestFilter::Any => true,
            RequestFilter::List => is_list,
            RequestFilter::Watch => is_watch,
        };
        if !applies {
            return None;
        }
        let failure = p.failure;
        p.remaining -= 1;
        if p.remaining == 0 {
            *pending = None;
        }
        Some(failure)
    }
}

/// A running simulated API server. Dropping it stops the server and aborts every connection.
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    url: String,
    ca_file: Option<PathBuf>,
    /// Built once so a restart serves the same certificate.
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// The accept loop, which owns every connection; `None` while stopped.
    serving: Mutex<Option<JoinHandle<()>>>,
    /// Background tasks (periodic bookmarks).
    tasks: Vec<JoinHandle<()>>,
    /// Holds the token, valid-token, CA and kubeconfig files; removed on drop.
    dir: tempfile::TempDir,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(task) = lock(&self.serving).take() {
            task.abort();
        }
    }
}

fn resource(plural: &str) -> &'static resources::ResourceType {
    resources::by_plural(plural).unwrap_or_else(|| {
        panic!(
            "unknown resource {plural:?}; the simulator serves {:?}",
            resources::RESOURCES
                .iter()
                .map(|r| r.plural)
                .collect::<Vec<_>>()
        )
    })
}

fn custom_resource(plural: &str) -> &'static resources::ResourceType {
    let rt = resource(plural);
    assert!(
        resources::is_custom(rt),
        "{plural:?} is built in, not defined by a CRD"
    );
    rt
}

impl ApiServer {
    /// Starts a server on `127.0.0.1:0` and returns once it accepts connections.
    pub async fn start(opts: ApiServerOptions) -> anyhow::Result<ApiServer> {
        let dir = tempfile::tempdir().context("creating the simulator's temp dir")?;
        let token_file = dir.path().join("token");
        let valid_tokens_file = dir.path().join("valid-tokens");
        std::fs::write(&token_file, INITIAL_TOKEN).context("writing the token file")?;
        std::fs::write(&valid_tokens_file, format!("{INITIAL_TOKEN}\n"))
            .context("writing the valid-token file")?;

        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding 127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let verify_clients = opts.auth == Auth::ClientCertificates;
        anyhow::ensure!(
            opts.tls || !verify_clients,
            "client certificates need tls: true"
        );
        let (url, tls_acceptor, ca_file) = if opts.tls {
            let (acceptor, pki) = tls::acceptor(verify_clients)?;
            let ca_file = dir.path().join("ca.crt");
            std::fs::write(&ca_file, pki.ca_pem).context("writing the CA file")?;
            std::fs::write(dir.path().join("client.crt"), pki.client_cert_pem)
                .context("writing the client certificate")?;
            std::fs::write(dir.path().join("client.key"), pki.client_key_pem)
                .context("writing the client key")?;
            (
                format!("https://localhost:{}", addr.port()),
                Some(acceptor),
                Some(ca_file),
            )
        } else {
            (format!("http://127.0.0.1:{}", addr.port()), None, None)
        };

        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(opts.history_limit, opts.fidelity)),
            auth: opts.auth,
            valid_tokens_file,
            token_file,
            rules: Mutex::new(HashMap::new()),
            failures: Mutex::new(None),
            stream_settings: Arc::new(Mutex::new(watch::StreamSettings::default())),
            requests: Mutex::new(Vec::new()),
            server_address: addr.to_string(),
            unkind: Mutex::new(unkind::Settings::default()),
            connections: std::sync::atomic::AtomicUsize::new(0),
            response_bytes: Arc::default(),
            cut_off: partition::CutOff::default(),
            slow_lease_reads: leases::SlowReads::default(),
            cluster_uid: uuid::Uuid::new_v4().to_string(),
            aggregated_discovery: opts.aggregated_discovery,
        });

        let serving = tokio::spawn(accept_loop(
            listener,
            tls_acceptor.clone(),
            http::router(shared.clone()),
            shared.clone(),
        ));
        let mut tasks = Vec::new();
        if let Some(interval) = opts.bookmark_interval {
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                let mut ticker = tokio::time::interval(interval);
                ticker.tick().await;
                loop {
                    ticker.tick().await;
                    let mut store = shared.store();
                    let revision = store.revision();
                    store.broadcast(WatchMsg::Bookmark(revision));
                }
            }));
        }
        Ok(ApiServer {
            shared,
            addr,
            url,
            ca_file,
            tls: tls_acceptor,
            serving: Mutex::new(Some(serving)),
            tasks,
            dir,
        })
    }

    /// Base URL: `http://127.0.0.1:PORT`, or `https://localhost:PORT` with TLS (the certificate
    /// is valid for `localhost` and `127.0.0.1`).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The loopback address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes the server down, as an API-server restart does: the listening socket is closed
    /// (new connections are refused) and every open connection is aborted. The store, history
    /// and settings are kept for [`resume_serving`](Self::resume_serving).
    pub async fn stop_serving(&self) {
        let task = lock(&self.serving).take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens again on the same port (retrying for a few seconds while the port is not yet
    /// free). Clients resuming their watches see the history as it was, plus any changes made
    /// through this handle while the server was down.
    pub async fn resume_serving(&self) -> anyhow::Result<()> {
        if lock(&self.serving).is_some() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "port not free yet");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("binding {} again", self.addr)),
            }
        };
        let task = tokio::spawn(accept_loop(
            listener,
            self.tls.clone(),
            http::router(self.shared.clone()),
            self.shared.clone(),
        ));
        *lock(&self.serving) = Some(task);
        Ok(())
    }

    /// PEM file of the CA that signed the server certificate (TLS only).
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.ca_file.clone()
    }

    /// PEM files of a client certificate and its key, signed by the CA (TLS only): what
    /// [`Auth::ClientCertificates`] requires.
    pub fn client_cert_files(&self) -> Option<(PathBuf, PathBuf)> {
        self.ca_file.as_ref().map(|_| {
            (
                self.dir.path().join("client.crt"),
                self.dir.path().join("client.key"),
            )
        })
    }

    /// The uid of the `kube-system` Namespace (served at `GET /api/v1/namespaces/kube-system`
    /// as in every real cluster): the cluster's id.
    pub fn cluster_uid(&self) -> &str {
        &self.shared.cluster_uid
    }

    /// File holding one valid token, as a projected service-account token file would;
    /// [`set_valid_tokens`](Self::set_valid_tokens) rewrites it with the first new token.
    pub fn token_file(&self) -> PathBuf {
        self.shared.token_file.clone()
    }

    /// Writes a kubeconfig (JSON, which is valid YAML) pointing at this server, with the CA
    /// file (TLS only) and `tokenFile` set to [`token_file`](Self::token_file), so token
    /// rotation is visible to a client that re-reads it. Context, cluster and user are all
    /// named `harness`. The file lives as long as the server.
    pub fn write_kubeconfig(&self) -> anyhow::Result<PathBuf> {
        let mut cluster = serde_json::json!({ "server": self.url });
        if let Some(ca) = &self.ca_file {
            cluster["certificate-authority"] = Value::String(ca.to_string_lossy().into_owned());
        }
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "harness",
            "clusters": [{ "name": "harness", "cluster": cluster }],
            "users": [{ "name": "harness", "user": { "tokenFile": self.shared.token_file } }],
            "contexts": [{ "name": "harness", "context": { "cluster": "harness", "user": "harness", "namespace": "default" } }],
        });
        let path = self.dir.path().join("kubeconfig");
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)
            .context("writing the kubeconfig")?;
        Ok(path)
    }

    /// Replaces the accepted tokens (the server re-reads them on every request) and writes the
    /// first one to [`token_file`](Self::token_file), as a kubelet rotating a bound token does.
    pub fn set_valid_tokens(&self, tokens: &[&str]) {
        let mut contents = tokens.join("\n");
        contents.push('\n');
        std::fs::write(&self.shared.valid_tokens_file, contents)
            .expect("the simulator's temp dir is writable");
        if let Some(first) = tokens.first() {
            std::fs::write(&self.shared.token_file, first)
                .expect("the simulator's temp dir is writable");
        }
    }

    /// Sets the RBAC rules of `token`. A token without rules may do everything.
    pub fn set_rules(&self, token: &str, rules: Vec<Rule>) {
        lock(&self.shared.rules).insert(token.to_string(), rules);
    }

    /// Creates an object of `resource` (plural name) like `POST` would, returning it as stored.
    /// Namespaced objects go to `namespace`, else to the body's namespace, else `default`.
    ///
    /// # Panics
    /// If the resource is unknown or the object is invalid or already exists (a bug in the test).
    pub fn create(&self, resource_name: &str, namespace: Option<&str>, obj: Value) -> Value {
        let rt = resource(resource_name);
        self.shared
            .store()
            .create(rt, namespace, obj)
            .unwrap_or_else(|e| panic!("create {resource_name}: {}", e.body))
    }

    /// Changes an object through `f`, like `PUT` would; returns the new state. Identity fields
    /// are kept; an `f` that changes nothing does not bump the revision.
    ///
    /// # Panics
    /// If the object does not exist.
    pub fn update(
        &self,
        resource_name: &str,
        namespace: Option<&str>,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Value {
        let rt = resource(resource_name);
        self.shared
            .store()
            .update(rt, namespace, name, f)
            .unwrap_or_else(|e| panic!("update {resource_name}/{name}: {}", e.body))
    }

    /// Deletes an object; returns its final state (with the deletion's resourceVersion), or
    /// `None` if it did not exist.
    pub fn delete(
        &self,
        resource_name: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let rt = resource(resource_name);
        self.shared.store().delete(rt, namespace, name).ok()
    }

    /// The stored object (with `apiVersion` and `kind`), if it exists.
    pub fn get(&self, resource_name: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let rt = resource(resource_name);
        self.shared.store().get(rt, namespace, name)
    }

    /// Calls `f` with every object of a resource now, in key order, without copying them.
    pub fn each(&self, resource_name: &str, mut f: impl FnMut(&Value)) {
        let rt = resource(resource_name);
        for (_, obj) in self.shared.store().objects_of(rt) {
            f(obj);
        }
    }

    /// The current global revision.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().revision()
    }

    /// Forgets all history up to now: watches and continue tokens from older revisions get 410.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Aborts every open watch connection now, without the final chunk.
    pub fn drop_watches(&self) {
        self.shared
            .store()
            .broadcast(WatchMsg::Fault(WatchFault::Drop));
    }

    /// Makes every open watch write only the first half of its next line (event or bookmark),
    /// then abort the connection. Trigger it with a change or [`send_bookmarks`](Self::send_bookmarks).
    pub fn drop_watches_mid_line(&self) {
        self.shared
            .store()
            .broadcast(WatchMsg::Fault(WatchFault::DropMidLine));
    }

    /// Makes every open watch write only the first half of its next line, then end the body
    /// cleanly (final chunk sent): a truncated last line.
    pub fn truncate_watches(&self) {
        self.shared
            .store()
            .broadcast(WatchMsg::Fault(WatchFault::Truncate));
    }

    /// Writes `<html>oops</html>` as a line into every open watch; the watches stay open.
    pub fn inject_garbage_line(&self) {
        self.shared
            .store()
            .broadcast(WatchMsg::Fault(WatchFault::Garbage));
    }

    /// Writes `bytes` exactly as given into every open watch (include the `\n` to end the line)
    /// and keeps the watches open: any bad line a test needs — malformed or non-UTF-8 JSON, an
    /// unknown event type, an object without metadata, a line over the client's size limit, an
    /// ERROR event with some Status. Framing applies as to any line.
    pub fn inject_line(&self, bytes: impl Into<bytes::Bytes>) {
        self.shared.store().broadcast(WatchMsg::Raw(bytes.into()));
    }

    /// Answers the next `n` requests with `failure` (after authentication, as API priority and
    /// fairness does). Replaces any failures still pending.
    pub fn fail_next(&self, n: usize, failure: Failure) {
        self.fail_next_matching(n, RequestFilter::Any, failure);
    }

    /// Like [`fail_next`](Self::fail_next), for the next `n` requests that match `filter`.
    pub fn fail_next_matching(&self, n: usize, filter: RequestFilter, failure: Failure) {
        *lock(&self.shared.failures) = (n > 0).then_some(PendingFailures {
            remaining: n,
            filter,
            failure,
        });
    }

    /// Cuts the client that sends `token` off, as a network partition between it and the server
    /// would: its new requests get no answer (they wait until [`reconnect`](Self::reconnect), or
    /// until the client gives up), while other clients are served as usual. Watch streams it
    /// already has open keep flowing: the harshest case for leader election, where a holder that
    /// cannot renew its Lease still receives events and must stop publishing on its own.
    pub fn cut_off(&self, token: &str) {
        self.shared.cut_off.add(token);
    }

    /// Ends [`cut_off`](Self::cut_off) for `token`; requests that were waiting are answered.
    pub fn reconnect(&self, token: &str) {
        self.shared.cut_off.remove(token);
    }

    /// Slows the next `n` GETs of a Lease (any client's): each waits `delay` before the store is
    /// read, so it answers with what the Lease holds at the end of the delay. Replaces slow reads
    /// still pending.
    pub fn slow_lease_reads(&self, n: usize, delay: Duration) {
        self.shared.slow_lease_reads.set(n, delay);
    }

    /// How many slowed Lease GETs ([`slow_lease_reads`](Self::slow_lease_reads)) have arrived.
    pub fn slow_lease_reads_arrived(&self) -> usize {
        self.shared.slow_lease_reads.arrived()
    }

    /// Sleeps `d` before each event written to a watch (bookmarks are not delayed).
    pub fn set_stream_delay(&self, d: Duration) {
        lock(&self.shared.stream_settings).delay = d;
    }

    /// Sets how watch lines are cut into chunks, for open and future watches.
    pub fn set_framing(&self, framing: Framing) {
        lock(&self.shared.stream_settings).framing = framing;
    }

    /// Sends a BOOKMARK at the current revision to every watch that allowed bookmarks.
    pub fn send_bookmarks(&self) {
        let mut store = self.shared.store();
        let revision = store.revision();
        store.broadcast(WatchMsg::Bookmark(revision));
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.requests).clone()
    }

    /// Forgets the recorded requests, and zeroes [`ApiServer::response_bytes`].
    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
        self.shared
            .response_bytes
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes of response bodies sent so far (lists, watch streams, discovery, errors), as
    /// they leave the handler: before HTTP framing and TLS.
    pub fn response_bytes(&self) -> u64 {
        self.shared
            .response_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Number of watch streams currently open.
    pub fn open_watches(&self) -> usize {
        self.shared.store().open_watches()
    }

    /// Waits until exactly `n` watches are open, for at most `timeout`; returns whether they
    /// are. Use it to know a client has (re)connected, or has let go of its old stream.
    pub async fn wait_for_watches(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.open_watches() == n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Accepts connections and serves each with hyper (HTTP/1.1 or HTTP/2), over TLS if configured.
/// Connection tasks live in a `JoinSet`, so aborting this task (on drop) aborts them all.
async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: axum::Router,
    shared: Arc<Shared>,
) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                shared
                    .connections
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                stream
            }
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        let tls = tls.clone();
        connections.spawn(async move {
            // HTTP/1.1 or HTTP/2 (ALPN over TLS, prior knowledge in clear), like kube-apiserver.
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            // kube-apiserver's `--http2-max-streams-per-connection` default (hyper's is 200).
            builder.http2().max_concurrent_streams(1000);
            let result = match tls {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(tls_stream) => {
                        builder
                            .serve_connection(TokioIo::new(tls_stream), service)
                            .await
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                },
                None => {
                    builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}

/// Reads the valid tokens, one per line; an unreadable file accepts nothing.
fn read_valid_tokens(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| {
            s.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}
