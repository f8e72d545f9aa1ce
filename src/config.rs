//! Typed configuration: read once at start from a TOML file and the environment, validated, and
//! handed to the rest of kube2nats as plain typed values.
//!
//! Past start-up no code looks at raw config strings or environment variables.
//!
//! (The typed values below are the contract with the rest of the crate. Parsing and validation
//! — `RawConfig`, `load`, the error type — are to be written below them.)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::event::EventType;
use crate::publish::subject::SubjectTemplate;

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub log: LogConfig,
    pub kubernetes: KubernetesConfig,
    pub nats: NatsConfig,
    pub http: HttpConfig,
    pub shutdown: ShutdownConfig,
    pub watches: Vec<WatchConfig>,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// A `RUST_LOG`-style filter (`info`, `kube2nats=debug,info`).
    pub filter: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    pub source: ApiSource,
    /// Off unless set explicitly; turning it on logs a warning at start.
    pub insecure_skip_tls_verify: bool,
    /// How often the bearer token file is re-read (projected tokens rotate).
    pub token_reload_interval: Duration,
    /// Timeout of a non-watch request (discovery, one list page, access reviews).
    pub request_timeout: Duration,
    /// `limit` of one list page.
    pub list_page_size: u32,
    /// T: each watch asks the server for a `timeoutSeconds` drawn from [T, 2T).
    pub watch_timeout: Duration,
    /// Use streaming lists (`sendInitialEvents=true`) where the server supports them.
    pub streaming_list: bool,
    /// A watch line longer than this is a decode error that ends the stream.
    pub max_line_bytes: usize,
    pub backoff: BackoffConfig,
    pub rbac_check: RbacCheck,
}

/// Where the API server is and how to authenticate to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiSource {
    /// The pod's service account: `KUBERNETES_SERVICE_HOST`/`PORT` and the mounted files.
    InCluster {
        token_file: PathBuf,
        ca_file: PathBuf,
        namespace_file: PathBuf,
    },
    /// An explicit URL (`https://…`, or `http://127.0.0.1:8001` behind `kubectl proxy`).
    Url {
        url: url::Url,
        token_file: Option<PathBuf>,
        ca_file: Option<PathBuf>,
    },
    /// A kubeconfig file; `context: None` means its current-context.
    Kubeconfig {
        path: PathBuf,
        context: Option<String>,
    },
}

/// Exponential backoff with jitter, as a validated value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    pub initial: Duration,
    pub max: Duration,
    /// Factor applied after each failure; >= 1.
    pub multiplier: f64,
    /// Fraction of the delay that is randomized, in [0, 1].
    pub jitter: f64,
    /// A watch healthy for this long starts again from `initial`.
    pub reset_after: Duration,
}

/// What to do when the start-up RBAC self-check finds a missing permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RbacCheck {
    /// Log the missing rule and keep running (and retrying).
    Warn,
    /// Log the missing rule and exit with code 3.
    Fail,
}

#[derive(Debug, Clone)]
pub struct NatsConfig {
    /// One or more server URLs (`nats://`, `tls://`).
    pub servers: Vec<String>,
    /// The connection name shown by the NATS server.
    pub name: String,
    pub auth: NatsAuth,
    pub tls: Option<NatsTls>,
    pub connect_timeout: Duration,
    pub mode: NatsMode,
    /// Capacity of the bounded queue of one watch towards NATS, in events.
    pub queue_capacity: usize,
}

/// At most one NATS authentication method.
#[derive(Clone, PartialEq, Eq)]
pub enum NatsAuth {
    None,
    Token(String),
    UserPassword { user: String, password: String },
    NKeySeedFile(PathBuf),
    CredentialsFile(PathBuf),
}

impl std::fmt::Debug for NatsAuth {
    /// Never prints a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsAuth::None => f.write_str("None"),
            NatsAuth::Token(_) => f.write_str("Token(<redacted>)"),
            NatsAuth::UserPassword { user, .. } => {
                write!(f, "UserPassword {{ user: {user:?}, password: <redacted> }}")
            }
            NatsAuth::NKeySeedFile(p) => write!(f, "NKeySeedFile({p:?})"),
            NatsAuth::CredentialsFile(p) => write!(f, "CredentialsFile({p:?})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsTls {
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key, both or neither.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NatsMode {
    /// Fire-and-forget publish; fastest, no delivery acknowledgement.
    Core,
    /// Publish and await the stream's acknowledgement.
    JetStream(JetStreamConfig),
}

#[derive(Debug, Clone, PartialEq)]
pub struct JetStreamConfig {
    /// How long to wait for one publish acknowledgement before publishing again (same `Nats-Msg-Id`).
    pub ack_timeout: Duration,
    /// Publishes awaiting their acknowledgement, per watch.
    pub max_ack_inflight: usize,
    /// Create the stream, or check it, at start; `None` leaves streams to the operator.
    pub stream: Option<StreamConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StreamConfig {
    pub name: String,
    pub subjects: Vec<String>,
    pub retention: Retention,
    pub storage: Storage,
    pub duplicate_window: Duration,
    /// Zero means unlimited.
    pub max_age: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    Limits,
    Interest,
    WorkQueue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    File,
    Memory,
}

#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub listen: SocketAddr,
}

#[derive(Debug, Clone)]
pub struct ShutdownConfig {
    /// Time allowed to stop watches, publish what is in flight and drain NATS after SIGTERM.
    pub grace_period: Duration,
}

/// One configured watch.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Unique; the `watch` label of every metric and the `watch` field of every log line.
    pub name: String,
    /// The resource as kubectl names it (`pods`, `deployments.apps`, `widgets.v1.example.com`),
    /// resolved through discovery at start.
    pub resource: String,
    /// Empty means all namespaces (and is the only choice for cluster-scoped resources).
    pub namespaces: Vec<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// The event types published; others are dropped (counted as `filtered`).
    pub events: Vec<EventType>,
    pub initial_state: InitialState,
    pub subject: SubjectTemplate,
    /// `{prefix}` of the subject template.
    pub subject_prefix: String,
    /// `{cluster}` of the subject template.
    pub cluster: String,
    pub payload: PayloadMode,
}

/// What the first list of a watch publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialState {
    /// Every listed object as ADDED.
    Added,
    /// Nothing: only changes after start are published.
    Skip,
}

/// The body of a published message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadMode {
    /// The watch event `{"type":…,"object":…}`.
    Event,
    /// The object alone.
    Object,
}
