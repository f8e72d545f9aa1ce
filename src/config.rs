//! Typed configuration: read once at start from a TOML file and the environment, validated, and
//! handed to the rest of kube2nats as plain typed values.
//!
//! Past start-up no code looks at raw config strings or environment variables.
//!
//! Two stages, as ripgrep's low- and high-level arguments:
//!
//! 1. [`load_raw`] reads the TOML file and the `KUBE2NATS__…` environment with the `config` crate
//!    into [`RawConfig`], a mirror of the file in which every key has its default and meaningful
//!    strings (durations, URLs, enum names, selectors, templates) are still strings. Unknown keys
//!    and wrong types are reported here (every unknown key at once; a wrong type stops at the
//!    first, since nothing after it can be read reliably).
//! 2. `Config::try_from(RawConfig)` checks every value and builds the typed [`Config`] below,
//!    collecting every problem ([`ConfigErrors`], one line each, naming the key) rather than
//!    stopping at the first, so one run of `--check-config` shows every mistake.
//!
//! Every key can be overridden by `KUBE2NATS__<SECTION>__<KEY>` (see [`env_var_name`]); an error
//! about a key set that way names the variable. Lists and `[[watches]]` come from the file only.
//! [`load_with_raw`] also returns the effective raw configuration, which
//! [`RawConfig::to_redacted_toml`] prints for `--check-config`.
//!
//! The typed values come first: they are the contract with the rest of the crate.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::event::EventType;
use crate::publish::subject::{validate_prefix, SubjectTemplate};

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
    /// Text for people, JSON lines for log pipelines.
    pub format: LogFormat,
}

/// How log lines are written (to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target` and the event's fields.
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
    /// Delay between failed attempts of one watch.
    pub backoff: BackoffConfig,
    /// What a missing permission found by the start-up self-check does.
    pub rbac_check: RbacCheck,
}

/// Where the API server is and how to authenticate to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiSource {
    /// As client-go and kubectl decide: the pod's service account when `KUBERNETES_SERVICE_HOST`
    /// is set and no `context` is named, else the files of `$KUBECONFIG` (merged), else
    /// `~/.kube/config`.
    Auto {
        in_cluster: InClusterFiles,
        context: Option<String>,
    },
    /// An explicit URL (`https://…`, or `http://127.0.0.1:8001` behind `kubectl proxy`).
    Url {
        url: url::Url,
        token_file: Option<PathBuf>,
        ca_file: Option<PathBuf>,
    },
    /// Kubeconfig files, merged as kubectl merges `$KUBECONFIG`; `context: None` means the
    /// current-context.
    Kubeconfig {
        paths: Vec<PathBuf>,
        context: Option<String>,
    },
}

/// The service-account files a pod has mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InClusterFiles {
    pub token_file: PathBuf,
    pub ca_file: PathBuf,
    pub namespace_file: PathBuf,
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
    /// Present when a CA file or a client certificate is configured; `tls://` URLs without it use
    /// the system roots.
    pub tls: Option<NatsTls>,
    /// Timeout of one connection attempt.
    pub connect_timeout: Duration,
    pub mode: NatsMode,
    /// Capacity of the bounded queue between kube2nats and the NATS connection, in messages.
    /// When it is full (NATS slow or down) publishing waits, and the watches stop reading the API
    /// server: the outage costs bounded memory.
    pub queue_capacity: usize,
}

/// At most one NATS authentication method.
#[derive(Clone, PartialEq, Eq)]
pub enum NatsAuth {
    /// No credentials (or credentials inside the URL).
    None,
    /// `nats.token`.
    Token(String),
    /// `nats.user` and `nats.password`.
    UserPassword { user: String, password: String },
    /// `nats.nkey_seed_file`: path of an NKey seed.
    NKeySeedFile(PathBuf),
    /// `nats.credentials_file`: path of a `.creds` file (JWT and seed).
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
    /// CA bundle that verifies the servers; `None` = the system roots.
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
    /// Stream name (no whitespace, `.`, `*`, `>`, `/`, `\`).
    pub name: String,
    /// Subjects the stream binds; wildcards allowed. Must cover the watches' subjects.
    pub subjects: Vec<String>,
    pub retention: Retention,
    pub storage: Storage,
    /// Window in which JetStream drops a repeated `Nats-Msg-Id`.
    pub duplicate_window: Duration,
    /// Zero means unlimited.
    pub max_age: Duration,
}

/// JetStream retention policy of a managed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Keep messages until a limit (age, count, size) removes them.
    Limits,
    /// Keep a message while some consumer has not acknowledged it.
    Interest,
    /// Remove a message once one consumer has acknowledged it.
    WorkQueue,
}

/// Where a managed stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// On disk; survives a restart of the NATS server.
    File,
    /// In memory; faster, lost on restart.
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
    /// A label selector checked for syntax (`app=web,tier in (a,b)`); `None` = all objects.
    pub label_selector: Option<String>,
    /// A field selector checked for syntax (`status.phase=Running`); `None` = all objects.
    pub field_selector: Option<String>,
    /// The event types published; others are dropped (counted as `filtered`).
    pub events: Vec<EventType>,
    pub initial_state: InitialState,
    /// The watch's own template, or `publish.subject`; a template using `{cluster}` comes with a
    /// non-empty `cluster`.
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

// ---------------------------------------------------------------------------------------------
// Stage one: what the user wrote.
// ---------------------------------------------------------------------------------------------
//
// `RawConfig` mirrors the TOML file key for key. It only checks shapes (a table is a table, a
// number is a number, no unknown key); every string with meaning — durations, URLs, enums,
// selectors, templates — stays a string here and is checked in stage two, `Config::try_from`,
// which reports every problem at once instead of stopping at the first.

/// Prefix of the environment variables that override file keys: `KUBE2NATS__NATS__URL`.
pub const ENV_PREFIX: &str = "KUBE2NATS";
/// Separator between the prefix and the key path segments in environment variable names.
pub const ENV_SEPARATOR: &str = "__";
/// What a redacted secret is shown as by `--check-config`.
pub const REDACTED: &str = "<redacted>";

/// `log.filter`: `info` shows start-up, reconnects that need attention and errors, without the
/// per-event chatter of `debug`.
pub const DEFAULT_LOG_FILTER: &str = "info";
/// `log.format`: text reads well in `kubectl logs`; use `json` for log pipelines.
pub const DEFAULT_LOG_FORMAT: &str = "text";

/// In-cluster service-account token, mounted by the kubelet (projected and rotated).
pub const DEFAULT_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// In-cluster CA bundle of the API server.
pub const DEFAULT_CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// In-cluster file holding the pod's namespace.
pub const DEFAULT_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// `kubernetes.token_reload_interval`: bound tokens expire after an hour and are refreshed by the
/// kubelet well before; re-reading each minute (as client-go does) always picks up the new one.
pub const DEFAULT_TOKEN_RELOAD_INTERVAL: &str = "1m";
/// `kubernetes.request_timeout`: generous for one list page of a large resource, short enough to
/// notice a dead API server.
pub const DEFAULT_REQUEST_TIMEOUT: &str = "30s";
/// `kubernetes.list_page_size`: client-go's pager default; bounds memory per page.
pub const DEFAULT_LIST_PAGE_SIZE: u32 = 500;
/// Largest `list_page_size` accepted; larger pages only cost memory.
pub const MAX_LIST_PAGE_SIZE: u32 = 10_000;
/// `kubernetes.watch_timeout`: client-go's reflector asks for a timeout in [5m, 10m).
pub const DEFAULT_WATCH_TIMEOUT: &str = "5m";
/// `kubernetes.max_line_bytes`: 8 MiB, a little above the API server's default 3 MiB request limit
/// (etcd's 1.5 MiB object limit plus JSON overhead), so no real object is refused but a malformed
/// stream cannot grow a buffer without bound.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Smallest `max_line_bytes` accepted: smaller cannot hold even a minimal event.
pub const MIN_MAX_LINE_BYTES: usize = 1024;
/// `kubernetes.rbac_check`: warn, so a missing permission is visible but one optional watch does not
/// take the whole daemon down.
pub const DEFAULT_RBAC_CHECK: &str = "warn";

/// `kubernetes.backoff.initial`: kube-rs's and client-go's 800 ms.
pub const DEFAULT_BACKOFF_INITIAL: &str = "800ms";
/// `kubernetes.backoff.max`: 30 s, client-go's cap.
pub const DEFAULT_BACKOFF_MAX: &str = "30s";
/// `kubernetes.backoff.multiplier`: doubling, as client-go.
pub const DEFAULT_BACKOFF_MULTIPLIER: f64 = 2.0;
/// `kubernetes.backoff.jitter`: half the delay randomized, so replicas do not retry in lockstep.
pub const DEFAULT_BACKOFF_JITTER: f64 = 0.5;
/// `kubernetes.backoff.reset_after`: client-go's 2 minutes of health before the backoff resets.
pub const DEFAULT_BACKOFF_RESET_AFTER: &str = "2m";

/// `nats.url`: a local nats-server, e.g. a sidecar.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";
/// `nats.name`: the connection name shown by `nats server report connections`.
pub const DEFAULT_NATS_NAME: &str = "kube2nats";
/// `nats.mode`: core NATS needs no stream set-up; choose `jetstream` for acknowledged delivery.
pub const DEFAULT_NATS_MODE: &str = "core";
/// `nats.connect_timeout`: async-nats' default.
pub const DEFAULT_NATS_CONNECT_TIMEOUT: &str = "5s";
/// `nats.queue_capacity`: messages queued towards the NATS connection before publishing waits;
/// small, so a NATS outage costs bounded memory (the API server keeps the history, not kube2nats).
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
/// `nats.jetstream.ack_timeout`: async-nats' default request timeout.
pub const DEFAULT_ACK_TIMEOUT: &str = "5s";
/// `nats.jetstream.max_ack_inflight`: enough to keep throughput high over a round trip of a few ms,
/// small enough that a stalled stream applies backpressure quickly.
pub const DEFAULT_MAX_ACK_INFLIGHT: usize = 256;
/// `nats.jetstream.stream.name`.
pub const DEFAULT_STREAM_NAME: &str = "KUBE";
/// `nats.jetstream.stream.subjects`: everything under the default prefix.
pub const DEFAULT_STREAM_SUBJECT: &str = "kube.>";
/// `nats.jetstream.stream.retention`.
pub const DEFAULT_STREAM_RETENTION: &str = "limits";
/// `nats.jetstream.stream.storage`.
pub const DEFAULT_STREAM_STORAGE: &str = "file";
/// `nats.jetstream.stream.duplicate_window`: JetStream's own default; must cover the longest
/// window in which kube2nats may republish (reconnect plus relist).
pub const DEFAULT_DUPLICATE_WINDOW: &str = "2m";
/// `nats.jetstream.stream.max_age`: zero, unlimited; age limits are the operator's choice.
pub const DEFAULT_STREAM_MAX_AGE: &str = "0s";

/// `publish.subject_prefix`.
pub const DEFAULT_SUBJECT_PREFIX: &str = "kube";
/// `publish.payload`: the event as the API server sent it, type included.
pub const DEFAULT_PAYLOAD: &str = "event";
/// `http.listen`: all interfaces, so the kubelet and Prometheus can reach the pod.
pub const DEFAULT_HTTP_LISTEN: &str = "0.0.0.0:9090";
/// `shutdown.grace_period`: below Kubernetes' default 30 s termination grace period, leaving room
/// for the pod to exit before SIGKILL.
pub const DEFAULT_SHUTDOWN_GRACE_PERIOD: &str = "10s";
/// `watches[].initial_state`: publish the listed objects as ADDED so subscribers start complete.
pub const DEFAULT_INITIAL_STATE: &str = "added";

fn s(v: &str) -> String {
    v.to_owned()
}

/// The configuration file as written, plus environment overrides, before validation.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub log: RawLog,
    /// Absent: in-cluster with the defaults below.
    pub kubernetes: RawKubernetes,
    pub nats: RawNats,
    pub publish: RawPublish,
    pub http: RawHttp,
    pub shutdown: RawShutdown,
    /// At least one.
    pub watches: Vec<RawWatch>,
}

/// `[log]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLog {
    /// A `RUST_LOG`-style filter; the `RUST_LOG` environment variable, when set, wins.
    /// Default [`DEFAULT_LOG_FILTER`].
    pub filter: String,
    /// `text` or `json`. Default [`DEFAULT_LOG_FORMAT`].
    pub format: String,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            filter: s(DEFAULT_LOG_FILTER),
            format: s(DEFAULT_LOG_FORMAT),
        }
    }
}

/// `[kubernetes]`: where the API server is, and how kube2nats talks to it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawKubernetes {
    /// `""`: found as kubectl finds it (see [`ApiSource::Auto`]); otherwise an http(s) URL such
    /// as `http://127.0.0.1:8001` behind `kubectl proxy`. Default `""`.
    pub api_url: String,
    /// Kubeconfig path(s), `:`-separated like `$KUBECONFIG`; excludes `api_url`. Default `""`:
    /// `$KUBECONFIG`, else `~/.kube/config`, when not in a pod.
    pub kubeconfig: String,
    /// Context of the kubeconfig; `""` is its current-context. Naming one uses the kubeconfig
    /// even in a pod. Excludes `api_url`.
    pub context: String,
    /// Bearer token file. In-cluster: default [`DEFAULT_TOKEN_FILE`]; with `api_url`: used only
    /// when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// CA bundle file. In-cluster: default [`DEFAULT_CA_FILE`]; with `api_url`: used only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// In-cluster only: the pod's namespace file. Default [`DEFAULT_NAMESPACE_FILE`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_file: Option<String>,
    /// Skip verifying the API server's certificate. Default false; a warning is logged when true.
    pub insecure_skip_tls_verify: bool,
    /// Duration; how often the token file is re-read. Default [`DEFAULT_TOKEN_RELOAD_INTERVAL`].
    pub token_reload_interval: String,
    /// Duration; timeout of one non-watch request. Default [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: String,
    /// Objects per list page, 1..=10000. Default [`DEFAULT_LIST_PAGE_SIZE`].
    pub list_page_size: u32,
    /// Duration, >= 1s; server-side watch timeout base. Default [`DEFAULT_WATCH_TIMEOUT`].
    pub watch_timeout: String,
    /// Use streaming lists where supported. Default false (needs Kubernetes >= 1.32 to be useful).
    pub streaming_list: bool,
    /// Bytes, >= 1024; longest accepted watch line. Default [`DEFAULT_MAX_LINE_BYTES`].
    pub max_line_bytes: usize,
    /// `warn` or `fail`. Default [`DEFAULT_RBAC_CHECK`].
    pub rbac_check: String,
    pub backoff: RawBackoff,
}

impl Default for RawKubernetes {
    fn default() -> Self {
        RawKubernetes {
            api_url: String::new(),
            kubeconfig: String::new(),
            context: String::new(),
            token_file: None,
            ca_file: None,
            namespace_file: None,
            insecure_skip_tls_verify: false,
            token_reload_interval: s(DEFAULT_TOKEN_RELOAD_INTERVAL),
            request_timeout: s(DEFAULT_REQUEST_TIMEOUT),
            list_page_size: DEFAULT_LIST_PAGE_SIZE,
            watch_timeout: s(DEFAULT_WATCH_TIMEOUT),
            streaming_list: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            rbac_check: s(DEFAULT_RBAC_CHECK),
            backoff: RawBackoff::default(),
        }
    }
}

/// `[kubernetes.backoff]`: the delay between failed attempts of one watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawBackoff {
    /// Duration, > 0 and <= `max`. Default [`DEFAULT_BACKOFF_INITIAL`].
    pub initial: String,
    /// Duration. Default [`DEFAULT_BACKOFF_MAX`].
    pub max: String,
    /// >= 1. Default [`DEFAULT_BACKOFF_MULTIPLIER`].
    pub multiplier: f64,
    /// 0..=1. Default [`DEFAULT_BACKOFF_JITTER`].
    pub jitter: f64,
    /// Duration. Default [`DEFAULT_BACKOFF_RESET_AFTER`].
    pub reset_after: String,
}

impl Default for RawBackoff {
    fn default() -> Self {
        RawBackoff {
            initial: s(DEFAULT_BACKOFF_INITIAL),
            max: s(DEFAULT_BACKOFF_MAX),
            multiplier: DEFAULT_BACKOFF_MULTIPLIER,
            jitter: DEFAULT_BACKOFF_JITTER,
            reset_after: s(DEFAULT_BACKOFF_RESET_AFTER),
        }
    }
}

/// `[nats]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawNats {
    /// Comma-separated server URLs; schemes `nats`, `tls`, `ws`, `wss`. Default [`DEFAULT_NATS_URL`].
    pub url: String,
    /// Connection name. Default [`DEFAULT_NATS_NAME`].
    pub name: String,
    /// `core` or `jetstream`. Default [`DEFAULT_NATS_MODE`].
    pub mode: String,
    /// Auth token (secret). At most one of token, user+password, nkey_seed_file, credentials_file.
    pub token: String,
    /// User name; needs `password`.
    pub user: String,
    /// Password (secret); needs `user`.
    pub password: String,
    /// Path of an NKey seed file.
    pub nkey_seed_file: String,
    /// Path of a `.creds` file (JWT and seed).
    pub credentials_file: String,
    /// CA bundle for `tls://` servers; `""` = system roots.
    pub tls_ca_file: String,
    /// Client certificate (mutual TLS); with `tls_key_file`, both or neither.
    pub tls_cert_file: String,
    /// Client key; with `tls_cert_file`.
    pub tls_key_file: String,
    /// Duration. Default [`DEFAULT_NATS_CONNECT_TIMEOUT`].
    pub connect_timeout: String,
    /// Events, >= 1. Default [`DEFAULT_QUEUE_CAPACITY`].
    pub queue_capacity: usize,
    pub jetstream: RawJetStream,
}

impl Default for RawNats {
    fn default() -> Self {
        RawNats {
            url: s(DEFAULT_NATS_URL),
            name: s(DEFAULT_NATS_NAME),
            mode: s(DEFAULT_NATS_MODE),
            token: String::new(),
            user: String::new(),
            password: String::new(),
            nkey_seed_file: String::new(),
            credentials_file: String::new(),
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            connect_timeout: s(DEFAULT_NATS_CONNECT_TIMEOUT),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            jetstream: RawJetStream::default(),
        }
    }
}

/// `[nats.jetstream]`: used when `nats.mode = "jetstream"`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawJetStream {
    /// Duration. Default [`DEFAULT_ACK_TIMEOUT`].
    pub ack_timeout: String,
    /// >= 1. Default [`DEFAULT_MAX_ACK_INFLIGHT`].
    pub max_ack_inflight: usize,
    /// Absent: kube2nats does not manage streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<RawStream>,
}

impl Default for RawJetStream {
    fn default() -> Self {
        RawJetStream {
            ack_timeout: s(DEFAULT_ACK_TIMEOUT),
            max_ack_inflight: DEFAULT_MAX_ACK_INFLIGHT,
            stream: None,
        }
    }
}

/// `[nats.jetstream.stream]`: the stream kube2nats creates or checks at start.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawStream {
    /// Default [`DEFAULT_STREAM_NAME`].
    pub name: String,
    /// Default `["kube.>"]`.
    pub subjects: Vec<String>,
    /// `limits`, `interest` or `workqueue`. Default [`DEFAULT_STREAM_RETENTION`].
    pub retention: String,
    /// `file` or `memory`. Default [`DEFAULT_STREAM_STORAGE`].
    pub storage: String,
    /// Duration. Default [`DEFAULT_DUPLICATE_WINDOW`].
    pub duplicate_window: String,
    /// Duration; `0s` = unlimited. Default [`DEFAULT_STREAM_MAX_AGE`].
    pub max_age: String,
}

impl Default for RawStream {
    fn default() -> Self {
        RawStream {
            name: s(DEFAULT_STREAM_NAME),
            subjects: vec![s(DEFAULT_STREAM_SUBJECT)],
            retention: s(DEFAULT_STREAM_RETENTION),
            storage: s(DEFAULT_STREAM_STORAGE),
            duplicate_window: s(DEFAULT_DUPLICATE_WINDOW),
            max_age: s(DEFAULT_STREAM_MAX_AGE),
        }
    }
}

/// `[publish]`: defaults for every watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawPublish {
    /// Tokens of `[A-Za-z0-9_-]` separated by dots. Default [`DEFAULT_SUBJECT_PREFIX`].
    pub subject_prefix: String,
    /// Value of `{cluster}`; a template using `{cluster}` needs it non-empty. Default `""`.
    pub cluster: String,
    /// Subject template. Default [`crate::publish::subject::DEFAULT_TEMPLATE`].
    pub subject: String,
    /// `event` or `object`. Default [`DEFAULT_PAYLOAD`].
    pub payload: String,
}

impl Default for RawPublish {
    fn default() -> Self {
        RawPublish {
            subject_prefix: s(DEFAULT_SUBJECT_PREFIX),
            cluster: String::new(),
            subject: s(crate::publish::subject::DEFAULT_TEMPLATE),
            payload: s(DEFAULT_PAYLOAD),
        }
    }
}

/// `[http]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawHttp {
    /// Socket address of `/metrics`, `/healthz`, `/readyz`. Default [`DEFAULT_HTTP_LISTEN`].
    pub listen: String,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: s(DEFAULT_HTTP_LISTEN),
        }
    }
}

/// `[shutdown]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawShutdown {
    /// Duration. Default [`DEFAULT_SHUTDOWN_GRACE_PERIOD`].
    pub grace_period: String,
}

impl Default for RawShutdown {
    fn default() -> Self {
        RawShutdown {
            grace_period: s(DEFAULT_SHUTDOWN_GRACE_PERIOD),
        }
    }
}

/// `[[watches]]`: one resource to list and watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawWatch {
    /// Required, unique, `[A-Za-z0-9_-]{1,63}`: the `watch` label of metrics.
    pub name: String,
    /// Required; kubectl-style `plural[.version][.group]`.
    pub resource: String,
    /// DNS-1123 labels; `[]` = all namespaces.
    pub namespaces: Vec<String>,
    /// Kubernetes label selector; `""` = none.
    pub label_selector: String,
    /// Kubernetes field selector; `""` = none.
    pub field_selector: String,
    /// Non-empty subset of ADDED, MODIFIED, DELETED (any case). Default all three.
    pub events: Vec<String>,
    /// `added` or `skip`. Default [`DEFAULT_INITIAL_STATE`].
    pub initial_state: String,
    /// Subject template; `""` = `publish.subject`.
    pub subject: String,
    /// `event` or `object`; `""` = `publish.payload`.
    pub payload: String,
}

impl Default for RawWatch {
    fn default() -> Self {
        RawWatch {
            name: String::new(),
            resource: String::new(),
            namespaces: Vec::new(),
            label_selector: String::new(),
            field_selector: String::new(),
            events: EventType::ALL.iter().map(|t| s(t.as_str())).collect(),
            initial_state: s(DEFAULT_INITIAL_STATE),
            subject: String::new(),
            payload: String::new(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// One problem with the configuration: the key it concerns and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key path (`watches[2].subject`), or the file for problems not tied to one key.
    pub key: String,
    /// What is wrong: the bad value and what is allowed.
    pub message: String,
}

impl ConfigError {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

/// Every problem found in one configuration; displays one line per problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn iter(&self) -> impl Iterator<Item = &ConfigError> {
        self.0.iter()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

/// Turns an error of the `config` crate into one line naming its key (or file).
fn from_source_error(err: config::ConfigError, file: Option<&Path>) -> ConfigError {
    let file_key = || file.map(|p| p.display().to_string()).unwrap_or_default();
    match err {
        config::ConfigError::Type {
            unexpected,
            expected,
            key,
            ..
        } => ConfigError::new(
            key.unwrap_or_default(),
            format!("invalid type: {unexpected}, expected {expected}"),
        ),
        config::ConfigError::At { error, key, .. } => {
            ConfigError::new(key.unwrap_or_default(), error.to_string())
        }
        config::ConfigError::FileParse { cause, .. } => ConfigError::new(
            file_key(),
            format!("not a valid TOML file: {}", one_line(&cause.to_string())),
        ),
        config::ConfigError::NotFound(key) => ConfigError::new(key, "missing"),
        other => ConfigError::new(file_key(), other.to_string()),
    }
}

/// The TOML parser draws the offending line with a caret over several lines; keep the position
/// (first line) and the reason (last line) so each problem stays one line.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.as_slice() {
        [] => String::new(),
        [only] => (*only).to_owned(),
        [first, .., last] => format!("{first}: {last}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// Loads and validates the configuration: `file` (TOML) if given, then the environment on top.
///
/// `env: None` reads the process environment; tests pass a map. Only variables named
/// `KUBE2NATS__SECTION__KEY` are read (`KUBE2NATS__NATS__URL`, `KUBE2NATS__KUBERNETES__BACKOFF__MAX`);
/// lists and `[[watches]]` come from the file only.
pub fn load(
    file: Option<&Path>,
    env: Option<HashMap<String, String>>,
) -> Result<Config, ConfigErrors> {
    load_with_raw(file, env).map(|(_, config)| config)
}

/// [`load`], also returning the effective [`RawConfig`] (defaults filled in, environment applied)
/// for `--check-config` to print with [`RawConfig::to_redacted_toml`].
pub fn load_with_raw(
    file: Option<&Path>,
    env: Option<HashMap<String, String>>,
) -> Result<(RawConfig, Config), ConfigErrors> {
    let env = env.unwrap_or_else(process_environment);
    let loaded = read_raw(file, &env).and_then(|raw| Ok((raw.clone(), Config::try_from(raw)?)));
    loaded.map_err(|errors| name_env_sources(errors, &env))
}

/// Stage one of [`load`]: reads the file and the environment, checks the shape (unknown keys,
/// types), fills in defaults; meaning is checked by `Config::try_from`.
pub fn load_raw(
    file: Option<&Path>,
    env: Option<HashMap<String, String>>,
) -> Result<RawConfig, ConfigErrors> {
    let env = env.unwrap_or_else(process_environment);
    read_raw(file, &env).map_err(|errors| name_env_sources(errors, &env))
}

/// The variables of this process that could be overrides (non-Unicode ones cannot be).
fn process_environment() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect()
}

/// The environment variable that overrides `key` (`kubernetes.watch_timeout` →
/// `KUBE2NATS__KUBERNETES__WATCH_TIMEOUT`).
pub fn env_var_name(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{ENV_SEPARATOR}{}",
        key.replace('.', ENV_SEPARATOR).to_uppercase()
    )
}

/// A key's value may come from the environment rather than the file; say so, or the operator
/// looks for the mistake in the wrong place.
fn name_env_sources(mut errors: ConfigErrors, env: &HashMap<String, String>) -> ConfigErrors {
    for e in &mut errors.0 {
        let vars: Vec<String> = e
            .key
            .split(", ")
            .map(env_var_name)
            .filter(|v| env.keys().any(|k| k.eq_ignore_ascii_case(v)))
            .collect();
        if !vars.is_empty() {
            e.message = format!(
                "{} (set by environment variable {})",
                e.message,
                vars.join(", ")
            );
        }
    }
    errors
}

fn read_raw(file: Option<&Path>, env: &HashMap<String, String>) -> Result<RawConfig, ConfigErrors> {
    let mut builder = config::Config::builder();
    if let Some(path) = file {
        builder = builder.add_source(
            config::File::from(path)
                .format(config::FileFormat::Toml)
                .required(true),
        );
    }
    let environment = config::Environment::with_prefix(ENV_PREFIX)
        .prefix_separator(ENV_SEPARATOR)
        .separator(ENV_SEPARATOR)
        // Values stay strings (a token "007" must not become the number 7); typed fields convert.
        .try_parsing(false)
        .source(Some(env.clone()));
    let merged = builder
        .add_source(environment)
        .build()
        .map_err(|e| from_source_error(e, file))?;

    // serde's deny_unknown_fields stops at the first unknown key and does not say where it is;
    // walking the tree against the schema names every one with its path.
    let tree: serde_json::Value = merged
        .clone()
        .try_deserialize()
        .map_err(|e| from_source_error(e, file))?;
    let mut errors = Vec::new();
    unknown_keys(&tree, &schema(), "", &mut errors);
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    merged
        .try_deserialize::<RawConfig>()
        .map_err(|e| from_source_error(e, file).into())
}

/// Every key a configuration may have, as a JSON tree with every optional part present.
fn schema() -> serde_json::Value {
    let mut sample = RawConfig::default();
    sample.kubernetes.token_file = Some(String::new());
    sample.kubernetes.ca_file = Some(String::new());
    sample.kubernetes.namespace_file = Some(String::new());
    sample.nats.jetstream.stream = Some(RawStream::default());
    sample.watches.push(RawWatch::default());
    serde_json::to_value(sample)
        .expect("RawConfig serializes to JSON: it has only strings, numbers, lists and maps")
}

fn unknown_keys(
    value: &serde_json::Value,
    schema: &serde_json::Value,
    path: &str,
    out: &mut Vec<ConfigError>,
) {
    use serde_json::Value;
    match (value, schema) {
        (Value::Object(map), Value::Object(known)) => {
            for (key, v) in map {
                let full = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match known.get(key) {
                    Some(s) => unknown_keys(v, s, &full, out),
                    None => {
                        let allowed: Vec<&str> = known.keys().map(String::as_str).collect();
                        out.push(ConfigError::new(
                            full,
                            format!("unknown key (allowed here: {})", allowed.join(", ")),
                        ));
                    }
                }
            }
        }
        (Value::Array(items), Value::Array(known)) if known.len() == 1 => {
            for (i, v) in items.iter().enumerate() {
                unknown_keys(v, &known[0], &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

impl RawConfig {
    /// A copy with secrets replaced by [`REDACTED`]: `nats.token`, `nats.password` and credentials
    /// inside `nats.url`.
    pub fn redacted(&self) -> RawConfig {
        let mut raw = self.clone();
        if !raw.nats.token.is_empty() {
            raw.nats.token = s(REDACTED);
        }
        if !raw.nats.password.is_empty() {
            raw.nats.password = s(REDACTED);
        }
        raw.nats.url = raw
            .nats
            .url
            .split(',')
            .map(|u| redact_url(u.trim()))
            .collect::<Vec<_>>()
            .join(",");
        raw
    }

    /// The effective configuration as TOML, secrets redacted: what `--check-config` prints.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string(&self.redacted())
            .expect("RawConfig serializes to TOML: plain tables, no None in arrays")
    }
}

/// `nats://user:secret@host` → `nats://user:redacted@host`; a lone user part is a token and is
/// redacted too.
fn redact_url(u: &str) -> String {
    match url::Url::parse(u) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("redacted"));
            parsed.to_string()
        }
        Ok(mut parsed) if !parsed.username().is_empty() => {
            let _ = parsed.set_username("redacted");
            parsed.to_string()
        }
        _ => u.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Stage two: validation into typed values.
// ---------------------------------------------------------------------------------------------

/// Collects problems; each check returns `None` after recording why.
#[derive(Default)]
struct Checker {
    errors: Vec<ConfigError>,
}

impl Checker {
    fn fail<T>(&mut self, key: impl Into<String>, message: impl Into<String>) -> Option<T> {
        self.errors.push(ConfigError::new(key, message));
        None
    }

    fn duration(&mut self, key: &str, value: &str) -> Option<Duration> {
        match humantime::parse_duration(value.trim()) {
            Ok(d) => Some(d),
            Err(_) => self.fail(
                key,
                format!("invalid duration {value:?} (expected humantime like 30s, 5m)"),
            ),
        }
    }

    /// A duration of at least `min`.
    fn duration_min(&mut self, key: &str, value: &str, min: Duration) -> Option<Duration> {
        let d = self.duration(key, value)?;
        if d < min {
            let shown = if min == Duration::from_nanos(1) {
                "> 0".to_owned()
            } else {
                format!(">= {}", humantime::format_duration(min))
            };
            return self.fail(key, format!("{value:?} is too short (allowed: {shown})"));
        }
        Some(d)
    }

    fn positive(&mut self, key: &str, value: &str) -> Option<Duration> {
        self.duration_min(key, value, Duration::from_nanos(1))
    }

    fn one_of<T: Copy>(&mut self, key: &str, value: &str, allowed: &[(&str, T)]) -> Option<T> {
        if let Some((_, t)) = allowed
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(value.trim()))
        {
            return Some(*t);
        }
        let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
        self.fail(
            key,
            format!("invalid value {value:?} (allowed: {})", names.join(", ")),
        )
    }

    fn range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        key: &str,
        value: T,
        min: T,
        max: Option<T>,
    ) -> Option<T> {
        let ok = value >= min && max.is_none_or(|m| value <= m);
        if ok {
            return Some(value);
        }
        let allowed = match max {
            Some(m) => format!("{min}..={m}"),
            None => format!(">= {min}"),
        };
        self.fail(key, format!("{value} is out of range (allowed: {allowed})"))
    }
}

fn non_empty(v: &str) -> Option<&str> {
    let v = v.trim();
    (!v.is_empty()).then_some(v)
}

impl TryFrom<RawConfig> for Config {
    type Error = ConfigErrors;

    /// Validates every key and reports every problem, not just the first.
    fn try_from(raw: RawConfig) -> Result<Config, ConfigErrors> {
        let RawConfig {
            log,
            kubernetes,
            nats,
            publish,
            http,
            shutdown,
            watches,
        } = raw;
        let mut c = Checker::default();
        let log = check_log(&mut c, &log);
        let kubernetes = check_kubernetes(&mut c, &kubernetes);
        let nats = check_nats(&mut c, &nats);
        let watches = check_watches(&mut c, &publish, &watches);
        let http = c.listen_addr(&http.listen);
        let grace_period = c.duration("shutdown.grace_period", &shutdown.grace_period);
        match (log, kubernetes, nats, watches, http, grace_period) {
            (
                Some(log),
                Some(kubernetes),
                Some(nats),
                Some(watches),
                Some(listen),
                Some(grace_period),
            ) if c.errors.is_empty() => Ok(Config {
                log,
                kubernetes,
                nats,
                http: HttpConfig { listen },
                shutdown: ShutdownConfig { grace_period },
                watches,
            }),
            _ => Err(ConfigErrors(c.errors)),
        }
    }
}

impl Checker {
    fn listen_addr(&mut self, v: &str) -> Option<SocketAddr> {
        match v.trim().parse() {
            Ok(a) => Some(a),
            Err(e) => self.fail(
                "http.listen",
                format!("invalid socket address {v:?}: {e} (expected ip:port, e.g. 0.0.0.0:9090)"),
            ),
        }
    }
}

fn check_log(c: &mut Checker, log: &RawLog) -> Option<LogConfig> {
    let format = c.one_of(
        "log.format",
        &log.format,
        &[("text", LogFormat::Text), ("json", LogFormat::Json)],
    );
    let filter = match tracing_subscriber::EnvFilter::builder().parse(&log.filter) {
        Ok(_) => Some(log.filter.clone()),
        Err(e) => {
            let why = format!(
                "invalid filter {:?}: {e} (expected RUST_LOG syntax, e.g. info or kube2nats=debug,info)",
                log.filter
            );
            c.fail("log.filter", why)
        }
    };
    Some(LogConfig {
        filter: filter?,
        format: format?,
    })
}

fn check_kubernetes(c: &mut Checker, k: &RawKubernetes) -> Option<KubernetesConfig> {
    let source = check_api_source(c, k);
    let token_reload_interval =
        c.positive("kubernetes.token_reload_interval", &k.token_reload_interval);
    let request_timeout = c.positive("kubernetes.request_timeout", &k.request_timeout);
    let list_page_size = c.range(
        "kubernetes.list_page_size",
        k.list_page_size,
        1,
        Some(MAX_LIST_PAGE_SIZE),
    );
    let watch_timeout = c.duration_min(
        "kubernetes.watch_timeout",
        &k.watch_timeout,
        Duration::from_secs(1),
    );
    let max_line_bytes = c.range(
        "kubernetes.max_line_bytes",
        k.max_line_bytes,
        MIN_MAX_LINE_BYTES,
        None,
    );
    let rbac_check = c.one_of(
        "kubernetes.rbac_check",
        &k.rbac_check,
        &[("warn", RbacCheck::Warn), ("fail", RbacCheck::Fail)],
    );
    let backoff = check_backoff(c, &k.backoff);
    Some(KubernetesConfig {
        source: source?,
        insecure_skip_tls_verify: k.insecure_skip_tls_verify,
        token_reload_interval: token_reload_interval?,
        request_timeout: request_timeout?,
        list_page_size: list_page_size?,
        watch_timeout: watch_timeout?,
        streaming_list: k.streaming_list,
        max_line_bytes: max_line_bytes?,
        backoff: backoff?,
        rbac_check: rbac_check?,
    })
}

fn check_api_source(c: &mut Checker, k: &RawKubernetes) -> Option<ApiSource> {
    const EXAMPLES: &str = "e.g. https://10.0.0.1:6443, http://127.0.0.1:8001";
    let path = |v: &Option<String>| v.as_deref().and_then(non_empty).map(PathBuf::from);
    let api_url = non_empty(&k.api_url);
    let kubeconfig = non_empty(&k.kubeconfig);
    let context = non_empty(&k.context);
    if context.is_some() && api_url.is_some() {
        let why = "set together with kubernetes.api_url (context only applies to a kubeconfig)";
        c.fail::<()>("kubernetes.context", why);
    }
    match (api_url, kubeconfig) {
        (Some(_), Some(_)) => c.fail(
            "kubernetes.api_url",
            "set together with kubernetes.kubeconfig \
             (allowed: at most one of api_url, kubeconfig; neither = in-cluster)",
        ),
        (Some(u), None) => {
            let why = match url::Url::parse(u) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
                    return Some(ApiSource::Url {
                        url,
                        token_file: path(&k.token_file),
                        ca_file: path(&k.ca_file),
                    });
                }
                Ok(_) => "scheme must be http or https with a host".to_owned(),
                Err(e) => e.to_string(),
            };
            c.fail(
                "kubernetes.api_url",
                format!("invalid URL {u:?}: {why} ({EXAMPLES})"),
            )
        }
        (None, Some(p)) => {
            let files = [
                ("token_file", &k.token_file),
                ("ca_file", &k.ca_file),
                ("namespace_file", &k.namespace_file),
            ];
            for (key, v) in files {
                if v.is_some() {
                    let why = "not used with kubernetes.kubeconfig \
                               (the kubeconfig holds the credentials); remove it";
                    c.fail::<()>(format!("kubernetes.{key}"), why);
                }
            }
            Some(ApiSource::Kubeconfig {
                paths: std::env::split_paths(p)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect(),
                context: context.map(str::to_owned),
            })
        }
        (None, None) => Some(ApiSource::Auto {
            in_cluster: InClusterFiles {
                token_file: path(&k.token_file).unwrap_or_else(|| DEFAULT_TOKEN_FILE.into()),
                ca_file: path(&k.ca_file).unwrap_or_else(|| DEFAULT_CA_FILE.into()),
                namespace_file: path(&k.namespace_file)
                    .unwrap_or_else(|| DEFAULT_NAMESPACE_FILE.into()),
            },
            context: context.map(str::to_owned),
        }),
    }
}

fn check_backoff(c: &mut Checker, b: &RawBackoff) -> Option<BackoffConfig> {
    let initial = c.positive("kubernetes.backoff.initial", &b.initial);
    let max = c.positive("kubernetes.backoff.max", &b.max);
    let reset_after = c.duration("kubernetes.backoff.reset_after", &b.reset_after);
    if let (Some(i), Some(m)) = (initial, max) {
        if i > m {
            c.fail::<()>(
                "kubernetes.backoff.initial",
                format!(
                    "{:?} is greater than kubernetes.backoff.max {:?} (allowed: initial <= max)",
                    b.initial, b.max
                ),
            );
        }
    }
    let multiplier = if b.multiplier.is_finite() && b.multiplier >= 1.0 {
        Some(b.multiplier)
    } else {
        c.fail(
            "kubernetes.backoff.multiplier",
            format!("{} is out of range (allowed: >= 1)", b.multiplier),
        )
    };
    let jitter = if (0.0..=1.0).contains(&b.jitter) {
        Some(b.jitter)
    } else {
        c.fail(
            "kubernetes.backoff.jitter",
            format!("{} is out of range (allowed: 0..=1)", b.jitter),
        )
    };
    Some(BackoffConfig {
        initial: initial?,
        max: max?,
        multiplier: multiplier?,
        jitter: jitter?,
        reset_after: reset_after?,
    })
}

const NATS_SCHEMES: [&str; 4] = ["nats", "tls", "ws", "wss"];

fn check_nats(c: &mut Checker, n: &RawNats) -> Option<NatsConfig> {
    let servers = check_nats_urls(c, &n.url);
    let name = match non_empty(&n.name) {
        Some(v) => Some(v.to_owned()),
        None => c.fail("nats.name", "must not be empty (default \"kube2nats\")"),
    };
    let auth = check_nats_auth(c, n);
    let tls = check_nats_tls(c, n);
    let connect_timeout = c.positive("nats.connect_timeout", &n.connect_timeout);
    let queue_capacity = c.range("nats.queue_capacity", n.queue_capacity, 1, None);
    let is_jetstream = c.one_of(
        "nats.mode",
        &n.mode,
        &[("core", false), ("jetstream", true)],
    );
    let jetstream = check_jetstream(c, &n.jetstream);
    let mode = if is_jetstream? {
        NatsMode::JetStream(jetstream?)
    } else {
        NatsMode::Core
    };
    Some(NatsConfig {
        servers: servers?,
        name: name?,
        auth: auth?,
        tls: tls?,
        connect_timeout: connect_timeout?,
        mode,
        queue_capacity: queue_capacity?,
    })
}

fn check_nats_urls(c: &mut Checker, urls: &str) -> Option<Vec<String>> {
    let mut servers = Vec::new();
    let mut ok = true;
    for u in urls.split(',').map(str::trim) {
        let problem = match url::Url::parse(u) {
            Err(e) => Some(e.to_string()),
            Ok(p) if !NATS_SCHEMES.contains(&p.scheme()) => {
                Some(format!("scheme {:?} is not supported", p.scheme()))
            }
            Ok(p) if !p.has_host() || p.host_str() == Some("") => Some("no host".to_owned()),
            Ok(_) => None,
        };
        match problem {
            Some(why) => {
                ok = false;
                // Credentials in a URL must not reach the logs, even from a broken URL.
                let shown = redact_url(u);
                let why = format!(
                    "invalid URL {shown:?}: {why} \
                     (expected comma-separated URLs like nats://host:4222; schemes nats, tls, ws, wss)"
                );
                c.fail::<()>("nats.url", why);
            }
            None => servers.push(u.to_owned()),
        }
    }
    ok.then_some(servers)
}

fn check_nats_auth(c: &mut Checker, n: &RawNats) -> Option<NatsAuth> {
    let user = non_empty(&n.user);
    let password = non_empty(&n.password);
    let mut methods = Vec::new();
    if let Some(t) = non_empty(&n.token) {
        methods.push(("nats.token", NatsAuth::Token(t.to_owned())));
    }
    match (user, password) {
        (Some(u), Some(p)) => methods.push((
            "nats.user",
            NatsAuth::UserPassword {
                user: u.to_owned(),
                password: p.to_owned(),
            },
        )),
        (Some(_), None) => return c.fail("nats.password", "required when nats.user is set"),
        (None, Some(_)) => return c.fail("nats.user", "required when nats.password is set"),
        (None, None) => {}
    }
    if let Some(p) = non_empty(&n.nkey_seed_file) {
        methods.push((
            "nats.nkey_seed_file",
            NatsAuth::NKeySeedFile(PathBuf::from(p)),
        ));
    }
    if let Some(p) = non_empty(&n.credentials_file) {
        methods.push((
            "nats.credentials_file",
            NatsAuth::CredentialsFile(PathBuf::from(p)),
        ));
    }
    if methods.len() > 1 {
        let keys: Vec<&str> = methods.iter().map(|(k, _)| *k).collect();
        return c.fail(
            keys.join(", "),
            "conflicting NATS authentication methods (allowed: at most one of token, user+password, nkey_seed_file, credentials_file)",
        );
    }
    Some(methods.pop().map_or(NatsAuth::None, |(_, a)| a))
}

fn check_nats_tls(c: &mut Checker, n: &RawNats) -> Option<Option<NatsTls>> {
    let ca_file = non_empty(&n.tls_ca_file).map(PathBuf::from);
    let client_cert = match (non_empty(&n.tls_cert_file), non_empty(&n.tls_key_file)) {
        (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
        (Some(_), None) => {
            return c.fail(
                "nats.tls_key_file",
                "required when nats.tls_cert_file is set (both or neither)",
            )
        }
        (None, Some(_)) => {
            return c.fail(
                "nats.tls_cert_file",
                "required when nats.tls_key_file is set (both or neither)",
            )
        }
        (None, None) => None,
    };
    if ca_file.is_none() && client_cert.is_none() {
        return Some(None);
    }
    Some(Some(NatsTls {
        ca_file,
        client_cert,
    }))
}

fn check_jetstream(c: &mut Checker, j: &RawJetStream) -> Option<JetStreamConfig> {
    let ack_timeout = c.positive("nats.jetstream.ack_timeout", &j.ack_timeout);
    let max_ack_inflight = c.range(
        "nats.jetstream.max_ack_inflight",
        j.max_ack_inflight,
        1,
        None,
    );
    let stream = match &j.stream {
        Some(s) => Some(Some(check_stream(c, s)?)),
        None => Some(None),
    };
    Some(JetStreamConfig {
        ack_timeout: ack_timeout?,
        max_ack_inflight: max_ack_inflight?,
        stream: stream?,
    })
}

fn check_stream(c: &mut Checker, s: &RawStream) -> Option<StreamConfig> {
    const K: &str = "nats.jetstream.stream";
    let name_ok = !s.name.is_empty()
        && !s
            .name
            .chars()
            .any(|ch| ch.is_whitespace() || ch.is_control() || ".*>/\\".contains(ch));
    let name = if name_ok {
        Some(s.name.clone())
    } else {
        c.fail(
            format!("{K}.name"),
            format!(
                "invalid stream name {:?} (no whitespace, '.', '*', '>', '/', '\\'; not empty)",
                s.name
            ),
        )
    };
    let mut subjects_ok = !s.subjects.is_empty();
    if s.subjects.is_empty() {
        c.fail::<()>(
            format!("{K}.subjects"),
            "must not be empty (e.g. [\"kube.>\"])",
        );
    }
    for (i, subject) in s.subjects.iter().enumerate() {
        if let Err(why) = check_subscription_subject(subject) {
            subjects_ok = false;
            c.fail::<()>(
                format!("{K}.subjects[{i}]"),
                format!("invalid subject {subject:?}: {why}"),
            );
        }
    }
    let retention = c.one_of(
        &format!("{K}.retention"),
        &s.retention,
        &[
            ("limits", Retention::Limits),
            ("interest", Retention::Interest),
            ("workqueue", Retention::WorkQueue),
        ],
    );
    let storage = c.one_of(
        &format!("{K}.storage"),
        &s.storage,
        &[("file", Storage::File), ("memory", Storage::Memory)],
    );
    let duplicate_window = c.positive(&format!("{K}.duplicate_window"), &s.duplicate_window);
    let max_age = c.duration(&format!("{K}.max_age"), &s.max_age);
    Some(StreamConfig {
        name: name?,
        subjects: subjects_ok.then(|| s.subjects.clone())?,
        retention: retention?,
        storage: storage?,
        duplicate_window: duplicate_window?,
        max_age: max_age?,
    })
}

/// A subject a stream may bind: non-empty tokens, `*` and `>` only as whole tokens, `>` last.
fn check_subscription_subject(subject: &str) -> Result<(), &'static str> {
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return Err("empty token");
        }
        if t.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
            return Err("whitespace");
        }
        if t.len() > 1 && (t.contains('*') || t.contains('>')) {
            return Err("wildcards must be whole tokens");
        }
        if *t == ">" && i + 1 != tokens.len() {
            return Err("'>' must be the last token");
        }
    }
    Ok(())
}

const PAYLOADS: [(&str, PayloadMode); 2] = [
    ("event", PayloadMode::Event),
    ("object", PayloadMode::Object),
];

fn check_watches(
    c: &mut Checker,
    publish: &RawPublish,
    watches: &[RawWatch],
) -> Option<Vec<WatchConfig>> {
    let prefix = match validate_prefix(&publish.subject_prefix) {
        Ok(()) => Some(publish.subject_prefix.clone()),
        Err(why) => c.fail("publish.subject_prefix", why),
    };
    let default_subject = match SubjectTemplate::parse(&publish.subject) {
        Ok(t) => Some(t),
        Err(e) => c.fail("publish.subject", e.to_string()),
    };
    let default_payload = c.one_of("publish.payload", &publish.payload, &PAYLOADS);
    if watches.is_empty() {
        return c.fail(
            "watches",
            "no watch configured (add at least one [[watches]] table with name and resource)",
        );
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::with_capacity(watches.len());
    let mut default_needs_cluster = false;
    for (i, w) in watches.iter().enumerate() {
        let key = |field: &str| format!("watches[{i}].{field}");
        if !w.name.is_empty() {
            match seen.get(w.name.as_str()) {
                Some(first) => {
                    let why = format!(
                        "duplicate watch name {:?} (also watches[{first}].name; names must be unique)",
                        w.name
                    );
                    c.fail::<()>(key("name"), why);
                }
                None => {
                    seen.insert(w.name.as_str(), i);
                }
            }
        }
        let name = match check_watch_name(&w.name) {
            Ok(()) => Some(w.name.clone()),
            Err(why) => c.fail(key("name"), why),
        };
        let resource = match check_resource(&w.resource) {
            Ok(()) => Some(w.resource.clone()),
            Err(why) => c.fail(key("resource"), why),
        };
        let namespaces = check_namespaces(c, &key("namespaces"), &w.namespaces);
        let label_selector = match non_empty(&w.label_selector).map(check_label_selector) {
            None => Some(None),
            Some(Ok(())) => Some(Some(w.label_selector.trim().to_owned())),
            Some(Err(why)) => c.fail(
                key("label_selector"),
                format!("invalid label selector {:?}: {why}", w.label_selector),
            ),
        };
        let field_selector = match non_empty(&w.field_selector).map(check_field_selector) {
            None => Some(None),
            Some(Ok(())) => Some(Some(w.field_selector.trim().to_owned())),
            Some(Err(why)) => c.fail(
                key("field_selector"),
                format!("invalid field selector {:?}: {why}", w.field_selector),
            ),
        };
        let events = check_events(c, &key("events"), &w.events);
        let initial_state = c.one_of(
            &key("initial_state"),
            &w.initial_state,
            &[("added", InitialState::Added), ("skip", InitialState::Skip)],
        );
        let subject = match non_empty(&w.subject) {
            None => {
                default_needs_cluster |= default_subject
                    .as_ref()
                    .is_some_and(SubjectTemplate::uses_cluster);
                default_subject.clone()
            }
            Some(t) => match SubjectTemplate::parse(t) {
                Ok(t) if t.uses_cluster() && publish.cluster.is_empty() => c.fail(
                    key("subject"),
                    format!(
                        "{:?} uses {{cluster}} but publish.cluster is empty (set publish.cluster)",
                        w.subject
                    ),
                ),
                Ok(t) => Some(t),
                Err(e) => c.fail(key("subject"), e.to_string()),
            },
        };
        let payload = match non_empty(&w.payload) {
            None => default_payload,
            Some(p) => c.one_of(&key("payload"), p, &PAYLOADS),
        };
        if let (
            Some(name),
            Some(resource),
            Some(namespaces),
            Some(label_selector),
            Some(field_selector),
            Some(events),
            Some(initial_state),
            Some(subject),
            Some(payload),
            Some(prefix),
        ) = (
            name,
            resource,
            namespaces,
            label_selector,
            field_selector,
            events,
            initial_state,
            subject,
            payload,
            prefix.clone(),
        ) {
            out.push(WatchConfig {
                name,
                resource,
                namespaces,
                label_selector,
                field_selector,
                events,
                initial_state,
                subject,
                subject_prefix: prefix,
                cluster: publish.cluster.clone(),
                payload,
            });
        }
    }
    if default_needs_cluster && publish.cluster.is_empty() {
        c.fail::<()>(
            "publish.subject",
            format!(
                "{:?} uses {{cluster}} but publish.cluster is empty (set publish.cluster)",
                publish.subject
            ),
        );
    }
    (out.len() == watches.len()).then_some(out)
}

fn check_watch_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("required (a unique name of [A-Za-z0-9_-], 1 to 63 characters)".into());
    }
    if name.len() > 63
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "invalid name {name:?} (allowed: [A-Za-z0-9_-], 1 to 63 characters)"
        ));
    }
    Ok(())
}

/// kubectl's `plural[.version][.group]`: lower-case DNS-like segments; resolved by discovery later.
fn check_resource(resource: &str) -> Result<(), String> {
    if resource.is_empty() {
        return Err("required (kubectl-style plural[.version][.group], e.g. pods, deployments.apps, widgets.v1.example.com)".into());
    }
    let ok = resource.len() <= 253 && resource.split('.').all(is_dns_label);
    if !ok {
        return Err(format!(
            "invalid resource {resource:?} (expected kubectl-style plural[.version][.group] of lower-case DNS labels, e.g. pods, deployments.apps, widgets.v1.example.com)"
        ));
    }
    Ok(())
}

/// A DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending with an alphanumeric.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn check_namespaces(c: &mut Checker, key: &str, namespaces: &[String]) -> Option<Vec<String>> {
    let before = c.errors.len();
    for (i, ns) in namespaces.iter().enumerate() {
        if !is_dns_label(ns) {
            let why = format!(
                "invalid namespace {ns:?} (expected a DNS-1123 label: [a-z0-9-], 1 to 63 characters)"
            );
            c.fail::<()>(format!("{key}[{i}]"), why);
        } else if namespaces[..i].contains(ns) {
            c.fail::<()>(format!("{key}[{i}]"), format!("duplicate namespace {ns:?}"));
        }
    }
    (c.errors.len() == before).then(|| namespaces.to_vec())
}

fn check_events(c: &mut Checker, key: &str, events: &[String]) -> Option<Vec<EventType>> {
    if events.is_empty() {
        return c.fail(
            key,
            "must not be empty (allowed: a subset of ADDED, MODIFIED, DELETED)",
        );
    }
    let before = c.errors.len();
    let mut out = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        match e.trim().parse::<EventType>() {
            Ok(t) if out.contains(&t) => {
                c.fail::<()>(format!("{key}[{i}]"), format!("duplicate event type {e:?}"));
            }
            Ok(t) => out.push(t),
            Err(why) => {
                c.fail::<()>(format!("{key}[{i}]"), why);
            }
        }
    }
    (c.errors.len() == before).then_some(out)
}

/// Checks a label selector as the API server parses it: comma-separated requirements `k=v`,
/// `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
pub fn check_label_selector(selector: &str) -> Result<(), String> {
    for requirement in split_top_level(selector)? {
        check_label_requirement(requirement.trim())?;
    }
    Ok(())
}

/// Splits at commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, ch) in s.char_indices() {
        match ch {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parenthesis".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("unbalanced ')'".into()),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn check_label_requirement(r: &str) -> Result<(), String> {
    if r.is_empty() {
        return Err("empty requirement (a stray comma?)".into());
    }
    if let Some(key) = r.strip_prefix('!') {
        return check_label_key(key.trim());
    }
    let key_end = r
        .find(|ch: char| ch.is_whitespace() || "=!(".contains(ch))
        .unwrap_or(r.len());
    let (key, rest) = (&r[..key_end], r[key_end..].trim_start());
    check_label_key(key)?;
    if rest.is_empty() {
        return Ok(());
    }
    for op in ["==", "!=", "="] {
        if let Some(value) = rest.strip_prefix(op) {
            return check_label_value(value.trim());
        }
    }
    for op in ["notin", "in"] {
        if let Some(set) = rest.strip_prefix(op) {
            let set = set.trim();
            let Some(inner) = set.strip_prefix('(').and_then(|s| s.strip_suffix(')')) else {
                return Err(format!("expected a parenthesized list after {op} in {r:?}"));
            };
            if inner.trim().is_empty() {
                return Err(format!("empty value list in {r:?}"));
            }
            return inner
                .split(',')
                .try_for_each(|v| check_label_value(v.trim()));
        }
    }
    Err(format!(
        "unknown operator in {r:?} (allowed: =, ==, !=, in, notin, exists, !)"
    ))
}

/// `[prefix/]name`: prefix a DNS-1123 subdomain, name 1–63 of `[A-Za-z0-9-_.]` with alphanumeric ends.
fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !p.split('.').all(is_dns_label) {
            return Err(format!("invalid label key prefix {p:?} (expected a DNS subdomain such as app.kubernetes.io)"));
        }
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(format!("invalid label key {key:?} (expected [prefix/]name, name 1 to 63 of [A-Za-z0-9-_.] starting and ending alphanumeric)"));
    }
    Ok(())
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() <= 63
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_label_name(v) {
        Ok(())
    } else {
        Err(format!("invalid label value {v:?} (expected at most 63 of [A-Za-z0-9-_.] starting and ending alphanumeric, or empty)"))
    }
}

/// Checks a field selector: comma-separated `k=v`, `k==v`, `k!=v` (e.g. `status.phase=Running`).
pub fn check_field_selector(selector: &str) -> Result<(), String> {
    for r in selector.split(',').map(str::trim) {
        if r.is_empty() {
            return Err("empty requirement (a stray comma?)".into());
        }
        let Some(i) = r.find(['=', '!']) else {
            return Err(format!("no operator in {r:?} (allowed: =, ==, !=)"));
        };
        let (key, rest) = (r[..i].trim(), &r[i..]);
        let value = ["==", "!=", "="]
            .iter()
            .find_map(|op| rest.strip_prefix(op));
        let Some(value) = value else {
            return Err(format!("unknown operator in {r:?} (allowed: =, ==, !=)"));
        };
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        {
            return Err(format!(
                "invalid field {key:?} in {r:?} (expected a field path such as metadata.name)"
            ));
        }
        if value.trim().contains(['=', '!']) && !value.contains('\\') {
            return Err(format!("unexpected operator in the value of {r:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const MINIMAL: &str = "[[watches]]\nname = \"pods\"\nresource = \"pods\"\n";

    fn file(contents: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new()
            .suffix(".toml")
            .tempfile()
            .expect("temp file");
        f.write_all(contents.as_bytes()).expect("write temp file");
        f
    }

    fn env(pairs: &[(&str, &str)]) -> Option<HashMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn load_str(contents: &str) -> Result<Config, ConfigErrors> {
        let f = file(contents);
        load(Some(f.path()), env(&[]))
    }

    /// The error lines of a configuration made of `MINIMAL` plus `extra` before it.
    fn errors(extra: &str) -> Vec<String> {
        let err =
            load_str(&format!("{extra}\n{MINIMAL}")).expect_err("configuration should be invalid");
        err.iter().map(ToString::to_string).collect()
    }

    fn assert_error(extra: &str, want: &str) {
        let lines = errors(extra);
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "no line containing {want:?} in {lines:#?}"
        );
    }

    #[test]
    fn defaults() {
        let c = load_str(MINIMAL).unwrap();
        assert_eq!(c.log.filter, "info");
        assert_eq!(c.log.format, LogFormat::Text);
        assert_eq!(
            c.kubernetes.source,
            ApiSource::Auto {
                in_cluster: InClusterFiles {
                    token_file: DEFAULT_TOKEN_FILE.into(),
                    ca_file: DEFAULT_CA_FILE.into(),
                    namespace_file: DEFAULT_NAMESPACE_FILE.into()
                },
                context: None,
            }
        );
        assert_eq!(c.kubernetes.watch_timeout, Duration::from_secs(300));
        assert_eq!(c.kubernetes.list_page_size, 500);
        assert_eq!(c.kubernetes.max_line_bytes, 8 << 20);
        assert_eq!(c.kubernetes.rbac_check, RbacCheck::Warn);
        assert_eq!(
            c.kubernetes.backoff,
            BackoffConfig {
                initial: Duration::from_millis(800),
                max: Duration::from_secs(30),
                multiplier: 2.0,
                jitter: 0.5,
                reset_after: Duration::from_secs(120)
            }
        );
        assert_eq!(c.nats.servers, ["nats://127.0.0.1:4222"]);
        assert_eq!(c.nats.auth, NatsAuth::None);
        assert_eq!(c.nats.tls, None);
        assert_eq!(c.nats.mode, NatsMode::Core);
        assert_eq!(c.http.listen, "0.0.0.0:9090".parse().unwrap());
        assert_eq!(c.shutdown.grace_period, Duration::from_secs(10));
        let w = &c.watches[0];
        assert_eq!(w.events, EventType::ALL);
        assert_eq!(w.initial_state, InitialState::Added);
        assert_eq!(w.subject, SubjectTemplate::default());
        assert_eq!(w.subject_prefix, "kube");
        assert_eq!(w.payload, PayloadMode::Event);
        assert_eq!(
            (w.label_selector.as_deref(), w.field_selector.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn no_file_means_defaults_and_needs_a_watch() {
        let err = load(None, env(&[])).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert!(
            err.to_string().starts_with("watches: no watch configured"),
            "{err}"
        );
    }

    #[test]
    fn file_overrides_defaults() {
        let c = load_str(&format!(
            "[kubernetes]\nwatch_timeout = \"10m\"\nlist_page_size = 50\n[kubernetes.backoff]\nmax = \"1m\"\n\
             [nats]\nmode = \"jetstream\"\nurl = \"nats://a:4222, tls://b:4222\"\n\
             [nats.jetstream.stream]\nname = \"K\"\n[publish]\npayload = \"object\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(c.kubernetes.watch_timeout, Duration::from_secs(600));
        assert_eq!(c.kubernetes.list_page_size, 50);
        assert_eq!(c.kubernetes.backoff.max, Duration::from_secs(60));
        assert_eq!(c.nats.servers, ["nats://a:4222", "tls://b:4222"]);
        let NatsMode::JetStream(js) = &c.nats.mode else {
            panic!("expected jetstream: {:?}", c.nats.mode)
        };
        assert_eq!(js.max_ack_inflight, 256);
        let stream = js.stream.as_ref().expect("stream configured");
        assert_eq!(
            (stream.name.as_str(), stream.subjects.as_slice()),
            ("K", &["kube.>".to_owned()][..])
        );
        assert_eq!(c.watches[0].payload, PayloadMode::Object);
    }

    #[test]
    fn environment_overrides_file() {
        let f = file(&format!("[nats]\nurl = \"nats://file:4222\"\n{MINIMAL}"));
        let c = load(
            Some(f.path()),
            env(&[
                ("KUBE2NATS__NATS__URL", "nats://env:4222"),
                ("KUBE2NATS__NATS__TOKEN", "007"),
                ("KUBE2NATS__KUBERNETES__WATCH_TIMEOUT", "7m"),
                ("KUBE2NATS__KUBERNETES__LIST_PAGE_SIZE", "42"),
                ("KUBE2NATS__KUBERNETES__STREAMING_LIST", "true"),
                ("KUBE2NATS__KUBERNETES__BACKOFF__MULTIPLIER", "1.5"),
                ("KUBE2NATS_CONFIG", "/not/a/key"),
                ("OTHER__NATS__URL", "nats://other:4222"),
            ]),
        )
        .unwrap();
        assert_eq!(c.nats.servers, ["nats://env:4222"]);
        assert_eq!(c.nats.auth, NatsAuth::Token("007".into()));
        assert_eq!(c.kubernetes.watch_timeout, Duration::from_secs(420));
        assert_eq!(c.kubernetes.list_page_size, 42);
        assert!(c.kubernetes.streaming_list);
        assert_eq!(c.kubernetes.backoff.multiplier, 1.5);
    }

    #[test]
    fn bad_environment_value_names_the_key() {
        let f = file(MINIMAL);
        let err = load(
            Some(f.path()),
            env(&[("KUBE2NATS__KUBERNETES__WATCH_TIMEOUT", "forever")]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubernetes.watch_timeout: invalid duration \"forever\" (expected humantime like 30s, 5m) (set by environment variable KUBE2NATS__KUBERNETES__WATCH_TIMEOUT)"
        );
        let err = load(Some(f.path()), env(&[("KUBE2NATS__NATS__NOPE", "x")])).unwrap_err();
        assert!(
            err.to_string().starts_with("nats.nope: unknown key"),
            "{err}"
        );
    }

    #[test]
    fn env_var_names() {
        assert_eq!(env_var_name("nats.url"), "KUBE2NATS__NATS__URL");
        assert_eq!(
            env_var_name("kubernetes.backoff.reset_after"),
            "KUBE2NATS__KUBERNETES__BACKOFF__RESET_AFTER"
        );
        let f = file(MINIMAL);
        let err = load(Some(f.path()), env(&[("KUBE2NATS__NATS__NOPE", "x")])).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("(set by environment variable KUBE2NATS__NATS__NOPE)"),
            "{err}"
        );
    }

    #[test]
    fn example_config_is_valid_and_lists_every_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let raw = load_raw(Some(&path), env(&[])).unwrap();
        let c = Config::try_from(raw).unwrap();
        let names: Vec<&str> = c.watches.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["pods", "deployments"]);
        // Every key of the schema appears in the example, written out or commented with its default.
        let text = std::fs::read_to_string(&path).unwrap();
        let mut keys = Vec::new();
        collect_keys(&schema(), &mut keys);
        for key in keys {
            assert!(
                text.contains(&format!("{key} = ")),
                "config.example.toml does not document {key}"
            );
        }
    }

    fn collect_keys(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if !v.is_object()
                        && !v
                            .as_array()
                            .is_some_and(|a| a.first().is_some_and(|x| x.is_object()))
                    {
                        out.push(k.clone());
                    }
                    collect_keys(v, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| collect_keys(x, out)),
            _ => {}
        }
    }

    #[test]
    fn example_defaults_match_code_defaults() {
        // The example documents the defaults: the parts that are not watches must equal them.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let mut raw = load_raw(Some(&path), env(&[])).unwrap();
        raw.watches.clear();
        raw.nats.jetstream.stream = None;
        assert_eq!(raw, RawConfig::default());
    }

    #[test]
    fn redacts_secrets() {
        let f = file(&format!("[nats]\nurl = \"nats://u:hunter2@h:4222\"\nuser = \"u\"\npassword = \"hunter2\"\n{MINIMAL}"));
        let out = load_raw(Some(f.path()), env(&[]))
            .unwrap()
            .to_redacted_toml();
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains("password = \"<redacted>\""), "{out}");
        assert!(out.contains("user = \"u\""), "{out}");
        // The output is itself a valid configuration file.
        let again = file(&out);
        assert!(load_raw(Some(again.path()), env(&[])).is_ok());
    }

    #[test]
    fn collects_every_problem() {
        let lines = errors("[kubernetes]\nwatch_timeout = \"x\"\nrequest_timeout = \"y\"\n[nats]\nurl = \"nats//x\"");
        assert_eq!(lines.len(), 3, "{lines:#?}");
    }

    #[test]
    fn unknown_keys() {
        assert_error(
            "[nats]\nurll = \"x\"",
            "nats.urll: unknown key (allowed here: ",
        );
        assert_error(
            "[kubernetes.backoff]\nfactor = 2",
            "kubernetes.backoff.factor: unknown key",
        );
        assert_error("[surprise]\nx = 1", "surprise: unknown key");
        let lines = errors("[[watches]]\nname = \"b\"\nresource = \"pods\"\nlabels = \"x\"");
        assert_eq!(lines, ["watches[0].labels: unknown key (allowed here: events, field_selector, initial_state, label_selector, name, namespaces, payload, resource, subject)"]);
    }

    #[test]
    fn bad_types_name_the_key() {
        assert_error(
            "[kubernetes]\nlist_page_size = \"many\"",
            "kubernetes.list_page_size: invalid type",
        );
    }

    #[test]
    fn durations() {
        assert_error(
            "[kubernetes]\nwatch_timeout = \"soon\"",
            "kubernetes.watch_timeout: invalid duration \"soon\" (expected humantime like 30s, 5m)",
        );
        assert_error(
            "[kubernetes]\nwatch_timeout = \"500ms\"",
            "kubernetes.watch_timeout: \"500ms\" is too short (allowed: >= 1s)",
        );
        assert_error(
            "[shutdown]\ngrace_period = \"10\"",
            "shutdown.grace_period: invalid duration \"10\"",
        );
        assert_error(
            "[nats]\nconnect_timeout = \"0s\"",
            "nats.connect_timeout: \"0s\" is too short (allowed: > 0)",
        );
    }

    #[test]
    fn numeric_ranges() {
        assert_error(
            "[kubernetes]\nlist_page_size = 0",
            "kubernetes.list_page_size: 0 is out of range (allowed: 1..=10000)",
        );
        assert_error(
            "[kubernetes]\nlist_page_size = 10001",
            "kubernetes.list_page_size: 10001 is out of range",
        );
        assert_error(
            "[kubernetes]\nmax_line_bytes = 100",
            "kubernetes.max_line_bytes: 100 is out of range (allowed: >= 1024)",
        );
        assert_error(
            "[nats]\nqueue_capacity = 0",
            "nats.queue_capacity: 0 is out of range (allowed: >= 1)",
        );
        assert_error(
            "[nats.jetstream]\nmax_ack_inflight = 0",
            "nats.jetstream.max_ack_inflight: 0 is out of range",
        );
    }

    #[test]
    fn backoff() {
        assert_error(
            "[kubernetes.backoff]\ninitial = \"1m\"",
            "kubernetes.backoff.initial: \"1m\" is greater than kubernetes.backoff.max \"30s\"",
        );
        assert_error(
            "[kubernetes.backoff]\ninitial = \"0s\"",
            "kubernetes.backoff.initial: \"0s\" is too short",
        );
        assert_error(
            "[kubernetes.backoff]\nmultiplier = 0.5",
            "kubernetes.backoff.multiplier: 0.5 is out of range (allowed: >= 1)",
        );
        assert_error(
            "[kubernetes.backoff]\njitter = 1.5",
            "kubernetes.backoff.jitter: 1.5 is out of range (allowed: 0..=1)",
        );
    }

    #[test]
    fn enums_list_allowed_values() {
        assert_error(
            "[log]\nformat = \"xml\"",
            "log.format: invalid value \"xml\" (allowed: text, json)",
        );
        assert_error(
            "[kubernetes]\nrbac_check = \"ignore\"",
            "kubernetes.rbac_check: invalid value \"ignore\" (allowed: warn, fail)",
        );
        assert_error(
            "[nats]\nmode = \"stream\"",
            "nats.mode: invalid value \"stream\" (allowed: core, jetstream)",
        );
        assert_error(
            "[publish]\npayload = \"raw\"",
            "publish.payload: invalid value \"raw\" (allowed: event, object)",
        );
        assert_error(
            "[nats.jetstream.stream]\nretention = \"forever\"",
            "nats.jetstream.stream.retention: invalid value \"forever\" (allowed: limits, interest, workqueue)",
        );
        assert_error(
            "[nats.jetstream.stream]\nstorage = \"disk\"",
            "nats.jetstream.stream.storage: invalid value \"disk\" (allowed: file, memory)",
        );
        assert_error(
            "[log]\nfilter = \"x=loud\"",
            "log.filter: invalid filter \"x=loud\"",
        );
    }

    #[test]
    fn api_source() {
        let c = load_str(&format!(
            "[kubernetes]\napi_url = \"http://127.0.0.1:8001\"\n{MINIMAL}"
        ))
        .unwrap();
        let ApiSource::Url {
            url,
            token_file,
            ca_file,
        } = c.kubernetes.source
        else {
            panic!("expected Url")
        };
        assert_eq!(
            (url.as_str(), token_file, ca_file),
            ("http://127.0.0.1:8001/", None, None)
        );
        let c = load_str(&format!(
            "[kubernetes]\nkubeconfig = \"/k\"\ncontext = \"kind\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(
            c.kubernetes.source,
            ApiSource::Kubeconfig {
                paths: vec!["/k".into()],
                context: Some("kind".into())
            }
        );
        assert_error(
            "[kubernetes]\napi_url = \"http://x\"\nkubeconfig = \"/k\"",
            "kubernetes.api_url: set together with kubernetes.kubeconfig",
        );
        assert_error(
            "[kubernetes]\napi_url = \"ftp://x\"",
            "kubernetes.api_url: invalid URL \"ftp://x\": scheme must be http or https",
        );
        assert_error(
            "[kubernetes]\napi_url = \"localhost:8001\"",
            "kubernetes.api_url: invalid URL",
        );
        assert_error(
            "[kubernetes]\napi_url = \"http://x\"\ncontext = \"kind\"",
            "kubernetes.context: set together with kubernetes.api_url",
        );
        assert_error(
            "[kubernetes]\nkubeconfig = \"/k\"\ntoken_file = \"/t\"",
            "kubernetes.token_file: not used with kubernetes.kubeconfig",
        );
    }

    #[test]
    fn nats_urls() {
        assert_error(
            "[nats]\nurl = \"nats//x\"",
            "nats.url: invalid URL \"nats//x\": relative URL without a base",
        );
        assert_error(
            "[nats]\nurl = \"http://x:4222\"",
            "nats.url: invalid URL \"http://x:4222\": scheme \"http\" is not supported",
        );
        assert_error(
            "[nats]\nurl = \"nats://a:4222,\"",
            "nats.url: invalid URL \"\"",
        );
        let c = load_str(&format!("[nats]\nurl = \"wss://a:443,ws://b\"\n{MINIMAL}")).unwrap();
        assert_eq!(c.nats.servers.len(), 2);
    }

    #[test]
    fn nats_url_errors_do_not_show_credentials() {
        let lines = errors("[nats]\nurl = \"http://me:hunter2@x:4222\"");
        assert_eq!(lines.len(), 1);
        assert!(!lines[0].contains("hunter2"), "{}", lines[0]);
    }

    #[test]
    fn nats_auth() {
        assert_error(
            "[nats]\ntoken = \"t\"\nuser = \"u\"\npassword = \"p\"",
            "nats.token, nats.user: conflicting NATS authentication methods (allowed: at most one of token, user+password, nkey_seed_file, credentials_file)",
        );
        assert_error(
            "[nats]\nnkey_seed_file = \"/n\"\ncredentials_file = \"/c\"",
            "nats.nkey_seed_file, nats.credentials_file: conflicting",
        );
        assert_error(
            "[nats]\nuser = \"u\"",
            "nats.password: required when nats.user is set",
        );
        assert_error(
            "[nats]\npassword = \"p\"",
            "nats.user: required when nats.password is set",
        );
        let c = load_str(&format!("[nats]\ncredentials_file = \"/c\"\n{MINIMAL}")).unwrap();
        assert_eq!(c.nats.auth, NatsAuth::CredentialsFile("/c".into()));
    }

    #[test]
    fn nats_tls() {
        assert_error(
            "[nats]\ntls_cert_file = \"/c\"",
            "nats.tls_key_file: required when nats.tls_cert_file is set",
        );
        assert_error(
            "[nats]\ntls_key_file = \"/k\"",
            "nats.tls_cert_file: required when nats.tls_key_file is set",
        );
        let c = load_str(&format!(
            "[nats]\ntls_cert_file = \"/c\"\ntls_key_file = \"/k\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(
            c.nats.tls,
            Some(NatsTls {
                ca_file: None,
                client_cert: Some(("/c".into(), "/k".into()))
            })
        );
    }

    #[test]
    fn stream() {
        assert_error(
            "[nats.jetstream.stream]\nname = \"a.b\"",
            "nats.jetstream.stream.name: invalid stream name \"a.b\"",
        );
        assert_error(
            "[nats.jetstream.stream]\nsubjects = []",
            "nats.jetstream.stream.subjects: must not be empty",
        );
        assert_error("[nats.jetstream.stream]\nsubjects = [\"a.>.b\"]", "nats.jetstream.stream.subjects[0]: invalid subject \"a.>.b\": '>' must be the last token");
        assert_error(
            "[nats.jetstream.stream]\nsubjects = [\"a..b\"]",
            "nats.jetstream.stream.subjects[0]: invalid subject \"a..b\": empty token",
        );
    }

    #[test]
    fn publish_section() {
        assert_error(
            "[publish]\nsubject_prefix = \"a..b\"",
            "publish.subject_prefix: empty token",
        );
        assert_error(
            "[publish]\nsubject_prefix = \"k*\"",
            "publish.subject_prefix: invalid token \"k*\"",
        );
        assert_error("[publish]\nsubject = \"{prefix}.{cluster}.{name}\"", "publish.subject: \"{prefix}.{cluster}.{name}\" uses {cluster} but publish.cluster is empty");
        let c = load_str(&format!(
            "[publish]\ncluster = \"eu\"\nsubject = \"{{prefix}}.{{cluster}}.{{name}}\"\n{MINIMAL}"
        ))
        .unwrap();
        assert!(c.watches[0].subject.uses_cluster());
        assert_eq!(c.watches[0].cluster, "eu");
        assert_error(
            "[http]\nlisten = \"9090\"",
            "http.listen: invalid socket address \"9090\"",
        );
    }

    fn watch_errors(body: &str) -> Vec<String> {
        let err = load_str(&format!(
            "[[watches]]\nname = \"w\"\nresource = \"pods\"\n{body}"
        ))
        .expect_err("invalid watch");
        err.iter().map(ToString::to_string).collect()
    }

    fn assert_watch_error(body: &str, want: &str) {
        let lines = watch_errors(body);
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "no line containing {want:?} in {lines:#?}"
        );
    }

    #[test]
    fn watches_list() {
        let err = load_str("[log]\nformat = \"text\"").unwrap_err();
        assert_eq!(err.to_string(), "watches: no watch configured (add at least one [[watches]] table with name and resource)");
        let lines = errors("[[watches]]\nname = \"pods\"\nresource = \"pods\"\n[[watches]]\nname = \"x\"\nresource = \"services\"");
        assert_eq!(lines, ["watches[2].name: duplicate watch name \"pods\" (also watches[0].name; names must be unique)"]);
    }

    #[test]
    fn watch_name_and_resource() {
        assert_error(
            "[[watches]]\nresource = \"pods\"",
            "watches[0].name: required",
        );
        assert_watch_error(
            "[[watches]]\nname = \"a b\"\nresource = \"pods\"",
            "watches[1].name: invalid name \"a b\"",
        );
        assert_error("[[watches]]\nname = \"x\"", "watches[0].resource: required");
        for bad in ["Pods", "pods..apps", "pods.", "deployments/apps", "-pods"] {
            assert_error(
                &format!("[[watches]]\nname = \"x\"\nresource = \"{bad}\""),
                &format!("watches[0].resource: invalid resource \"{bad}\""),
            );
        }
        for good in [
            "pods",
            "deployments.apps",
            "widgets.v1.example.com",
            "horizontalpodautoscalers.v2.autoscaling",
        ] {
            load_str(&format!("[[watches]]\nname = \"x\"\nresource = \"{good}\"")).unwrap();
        }
    }

    #[test]
    fn watch_namespaces_and_events() {
        assert_watch_error(
            "namespaces = [\"Default\"]",
            "watches[0].namespaces[0]: invalid namespace \"Default\"",
        );
        assert_watch_error(
            "namespaces = [\"a\", \"a\"]",
            "watches[0].namespaces[1]: duplicate namespace \"a\"",
        );
        assert_watch_error(
            "events = []",
            "watches[0].events: must not be empty (allowed: a subset of ADDED, MODIFIED, DELETED)",
        );
        assert_watch_error("events = [\"ADDED\", \"BOOKMARK\"]", "watches[0].events[1]: unknown event type \"BOOKMARK\" (allowed: ADDED, MODIFIED, DELETED)");
        assert_watch_error(
            "events = [\"added\", \"ADDED\"]",
            "watches[0].events[1]: duplicate event type \"ADDED\"",
        );
        assert_watch_error(
            "initial_state = \"all\"",
            "watches[0].initial_state: invalid value \"all\" (allowed: added, skip)",
        );
        assert_watch_error(
            "payload = \"cloudevent\"",
            "watches[0].payload: invalid value \"cloudevent\" (allowed: event, object)",
        );
        let c = load_str("[[watches]]\nname = \"w\"\nresource = \"pods\"\nevents = [\"deleted\"]\ninitial_state = \"skip\"").unwrap();
        assert_eq!(
            (c.watches[0].events.as_slice(), c.watches[0].initial_state),
            (&[EventType::Deleted][..], InitialState::Skip)
        );
    }

    #[test]
    fn watch_subject() {
        assert_watch_error(
            "subject = \"kube.{kind}.{name}\"",
            "watches[0].subject: unknown placeholder {kind} in \"kube.{kind}.{name}\" (allowed: {prefix}, {cluster}, {group}, {version}, {resource}, {namespace}, {name}, {type})",
        );
        assert_watch_error("subject = \"kube.{cluster}.{name}\"", "watches[0].subject: \"kube.{cluster}.{name}\" uses {cluster} but publish.cluster is empty");
        assert_watch_error("subject = \"kube.*\"", "watches[0].subject: wildcard");
    }

    #[test]
    fn label_selectors() {
        for good in [
            "app=web",
            "app==web",
            "app!=web",
            "tier in (a,b)",
            "tier notin (a, b)",
            "app",
            "!app",
            "app.kubernetes.io/name=x,env",
            "a=",
            "a in (x),b!=y",
        ] {
            assert_eq!(check_label_selector(good), Ok(()), "{good:?}");
        }
        for bad in [
            "app=we b",
            "app in a,b",
            "app in ()",
            "in (a",
            ",app",
            "app=x,",
            "a b",
            "Ex@mple=1",
            "-a=b",
            "example.com/=x",
            "Example.com/a=b",
            "a<b",
        ] {
            assert!(check_label_selector(bad).is_err(), "{bad:?}");
        }
        assert_watch_error(
            "label_selector = \"a in (b\"",
            "watches[0].label_selector: invalid label selector \"a in (b\": unbalanced '('",
        );
    }

    #[test]
    fn field_selectors() {
        for good in [
            "metadata.name=x",
            "status.phase!=Running",
            "spec.nodeName==n1,metadata.namespace!=kube-system",
            "metadata.name=",
        ] {
            assert_eq!(check_field_selector(good), Ok(()), "{good:?}");
        }
        for bad in ["metadata.name", "=x", "a=b,", "a<b", "a b=c"] {
            assert!(check_field_selector(bad).is_err(), "{bad:?}");
        }
        assert_watch_error(
            "field_selector = \"status.phase\"",
            "watches[0].field_selector: invalid field selector \"status.phase\": no operator",
        );
    }

    #[test]
    fn not_toml() {
        let f = file("this is = = not toml");
        let err = load(Some(f.path()), env(&[])).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert!(
            err.to_string()
                .contains("not a valid TOML file: TOML parse error at line 1"),
            "{err}"
        );
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    }
}
