//! The typed values of each configuration section, as the checks ([`super::check`]) build them
//! from the raw file; [`super::root::Config`] gathers them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::named::{
    Discard, InitialState, LogFormat, MessageFormat, PayloadMode, RbacCheck, Retention, Storage,
};
use super::noise::NoiseConfig;
use crate::event::EventType;
use crate::filter::FilterExpr;
use crate::subject::SubjectTemplate;

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// A `RUST_LOG`-style filter (`info`, `kube2nats=debug,info`).
    pub filter: String,
    /// Text for people, JSON lines for log pipelines.
    pub format: LogFormat,
}

#[derive(Debug, Clone)]
pub(crate) struct KubernetesConfig {
    pub(crate) source: ApiSource,
    /// Off unless set explicitly; turning it on logs a warning at start.
    pub(crate) insecure_skip_tls_verify: bool,
    /// How often the bearer token file is re-read (projected tokens rotate).
    pub(crate) token_reload_interval: Duration,
    /// Timeout of a non-watch request (discovery, one list page, access reviews).
    pub(crate) request_timeout: Duration,
    /// `limit` of one list page.
    pub(crate) list_page_size: u32,
    /// How many targets list at once ([`crate::watcher::ListSlots`]).
    pub(crate) max_concurrent_lists: usize,
    /// T: each watch asks the server for a `timeoutSeconds` drawn from [T, 2T).
    pub(crate) watch_timeout: Duration,
    /// Use streaming lists (`sendInitialEvents=true`) where the server supports them.
    pub(crate) streaming_list: bool,
    /// A watch line longer than this is a decode error that ends the stream.
    pub(crate) max_line_bytes: usize,
    /// Delay between failed attempts of one watch.
    pub(crate) backoff: BackoffConfig,
    /// What a missing permission found by the start-up self-check does.
    pub(crate) rbac_check: RbacCheck,
}

/// Where the API server is and how to authenticate to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiSource {
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
pub(crate) struct InClusterFiles {
    pub(crate) token_file: PathBuf,
    pub(crate) ca_file: PathBuf,
    pub(crate) namespace_file: PathBuf,
}

/// Exponential backoff with jitter, as a validated value: only [`BackoffConfig::new`] (or
/// [`BackoffConfig::checked`] for constants) makes one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BackoffConfig {
    initial: Duration,
    max: Duration,
    multiplier: f64,
    jitter: f64,
    reset_after: Duration,
}

/// Why backoff parameters are not a [`BackoffConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BackoffError {
    #[error("initial must be > 0")]
    ZeroInitial,
    #[error("initial must be <= max")]
    InitialAboveMax,
    #[error("multiplier must be >= 1")]
    MultiplierBelowOne,
    #[error("jitter must be within 0..=1")]
    JitterOutOfRange,
}

impl BackoffConfig {
    /// Checks what [`crate::backoff::Backoff`] relies on: `0 < initial <= max`, a finite
    /// `multiplier >= 1`, `jitter` within `0..=1`.
    pub(crate) const fn new(
        initial: Duration,
        max: Duration,
        multiplier: f64,
        jitter: f64,
        reset_after: Duration,
    ) -> Result<BackoffConfig, BackoffError> {
        if initial.is_zero() {
            return Err(BackoffError::ZeroInitial);
        }
        if initial.as_nanos() > max.as_nanos() {
            return Err(BackoffError::InitialAboveMax);
        }
        if !Self::valid_multiplier(multiplier) {
            return Err(BackoffError::MultiplierBelowOne);
        }
        if !Self::valid_jitter(jitter) {
            return Err(BackoffError::JitterOutOfRange);
        }
        Ok(BackoffConfig {
            initial,
            max,
            multiplier,
            jitter,
            reset_after,
        })
    }

    /// [`new`](Self::new) for constants: invalid values fail the build.
    pub(crate) const fn checked(
        initial: Duration,
        max: Duration,
        multiplier: f64,
        jitter: f64,
        reset_after: Duration,
    ) -> BackoffConfig {
        match Self::new(initial, max, multiplier, jitter, reset_after) {
            Ok(config) => config,
            Err(_) => panic!("invalid BackoffConfig constant"),
        }
    }

    /// Factor applied after each failure: finite and >= 1, so delays never shrink.
    pub(crate) const fn valid_multiplier(multiplier: f64) -> bool {
        multiplier.is_finite() && multiplier >= 1.0
    }

    /// Fraction of the delay that is randomized: within 0..=1, so a delay is never negative.
    pub(crate) const fn valid_jitter(jitter: f64) -> bool {
        jitter >= 0.0 && jitter <= 1.0
    }

    /// The first delay, and the delay again after `reset_after` of health.
    pub(crate) const fn initial(&self) -> Duration {
        self.initial
    }
    /// The longest delay.
    pub(crate) const fn max(&self) -> Duration {
        self.max
    }
    pub(crate) const fn multiplier(&self) -> f64 {
        self.multiplier
    }
    pub(crate) const fn jitter(&self) -> f64 {
        self.jitter
    }
    /// A watch healthy for this long starts again from `initial`.
    pub(crate) const fn reset_after(&self) -> Duration {
        self.reset_after
    }
}

/// `Debug` shows the server URLs without their user part (see the impl).
#[derive(Clone)]
pub(crate) struct NatsConfig {
    /// One or more server URLs (`nats://`, `tls://`).
    pub(crate) servers: Vec<String>,
    /// The connection name shown by the NATS server.
    pub(crate) name: String,
    pub(crate) auth: NatsAuth,
    /// Present when a CA file or a client certificate is configured; `tls://` URLs without it use
    /// the system roots.
    pub(crate) tls: Option<NatsTls>,
    /// Timeout of one connection attempt.
    pub(crate) connect_timeout: Duration,
    pub(crate) mode: NatsMode,
    /// Capacity of the bounded queue between kube2nats and the NATS connection, in messages.
    /// When it is full (NATS slow or down) publishing waits, and the watches stop reading the API
    /// server: the outage costs bounded memory.
    pub(crate) queue_capacity: usize,
    /// `nats.jetstream.domain`: the JetStream domain of the stream and of the state bucket;
    /// `None` = the connected server's own.
    pub(crate) jetstream_domain: Option<String>,
    /// One budget, in bytes, for the data held between the API server and NATS across all
    /// watches (read and not yet published, or published and not yet taken by NATS); when it
    /// is spent, the watches stop reading ([`crate::budget`]).
    pub(crate) max_buffered_bytes: usize,
}

impl NatsConfig {
    /// The subject prefix of the JetStream API: `$JS.API`, or `$JS.{domain}.API` in a domain
    /// (how a client on a leaf node reaches the hub's JetStream).
    pub(crate) fn jetstream_api_prefix(&self) -> String {
        match &self.jetstream_domain {
            None => "$JS.API".to_owned(),
            Some(domain) => format!("$JS.{domain}.API"),
        }
    }
}

/// At most one NATS authentication method.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum NatsAuth {
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

impl std::fmt::Debug for NatsConfig {
    /// Never prints a secret: a server URL may hold a password or a token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers: Vec<String> = self.servers.iter().map(|s| crate::redact::url(s)).collect();
        f.debug_struct("NatsConfig")
            .field("servers", &servers)
            .field("name", &self.name)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("connect_timeout", &self.connect_timeout)
            .field("mode", &self.mode)
            .field("queue_capacity", &self.queue_capacity)
            .field("jetstream_domain", &self.jetstream_domain)
            .field("max_buffered_bytes", &self.max_buffered_bytes)
            .finish()
    }
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
pub(crate) struct NatsTls {
    /// CA bundle that verifies the servers; `None` = the system roots.
    pub(crate) ca_file: Option<PathBuf>,
    /// Client certificate and key, both or neither.
    pub(crate) client_cert: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NatsMode {
    /// Fire-and-forget publish; fastest, no delivery acknowledgement.
    Core,
    /// Publish and await the stream's acknowledgement.
    JetStream(JetStreamConfig),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JetStreamConfig {
    /// How long to wait for one publish acknowledgement before publishing again (same `Nats-Msg-Id`).
    pub(crate) ack_timeout: Duration,
    /// Publishes awaiting their acknowledgement, per watch.
    pub(crate) max_ack_inflight: usize,
    /// Create the stream, or check it, at start; `None` leaves streams to the operator.
    pub(crate) stream: Option<StreamConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StreamConfig {
    /// Stream name (no whitespace, `.`, `*`, `>`, `/`, `\`).
    pub(crate) name: String,
    /// Subjects the stream binds; wildcards allowed. Must cover the watches' subjects.
    pub(crate) subjects: Vec<String>,
    pub(crate) retention: Retention,
    pub(crate) storage: Storage,
    /// Window in which JetStream drops a repeated `Nats-Msg-Id`.
    pub(crate) duplicate_window: Duration,
    /// Zero means unlimited.
    pub(crate) max_age: Duration,
    /// `None` means unlimited.
    pub(crate) max_bytes: Option<u64>,
    /// `None` means unlimited.
    pub(crate) max_msgs_per_subject: Option<u64>,
    pub(crate) replicas: usize,
    pub(crate) discard: Discard,
}

#[derive(Debug, Clone)]
pub(crate) struct HttpConfig {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub(crate) listen: SocketAddr,
    /// Most connections open at once; at the cap the idle one open longest is closed for a new
    /// one. Lowered at start to keep file descriptors free for the watches and NATS.
    pub(crate) max_connections: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct ShutdownConfig {
    /// Time allowed to stop watches, publish what is in flight and drain NATS after SIGTERM.
    pub(crate) grace_period: Duration,
}

/// One configured watch.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchConfig {
    /// Unique; the `watch` label of every metric and the `watch` field of every log line.
    pub(crate) name: String,
    /// The resource as kubectl names it (`pods`, `deployments.apps`, `widgets.v1.example.com`),
    /// resolved through discovery at start.
    pub(crate) resource: String,
    /// Empty means all namespaces (and is the only choice for cluster-scoped resources).
    pub(crate) namespaces: Vec<String>,
    /// With `namespaces` empty: namespaces whose objects are dropped by kube2nats (one watch).
    pub(crate) namespaces_exclude: Vec<String>,
    /// A label selector on namespaces: only objects of namespaces whose labels match are
    /// published, followed as namespaces are relabelled ([`crate::scope`]).
    pub(crate) namespace_selector: Option<String>,
    /// A label selector checked for syntax (`app=web,tier in (a,b)`); `None` = all objects.
    pub(crate) label_selector: Option<String>,
    /// A field selector checked for syntax (`status.phase=Running`); `None` = all objects.
    pub(crate) field_selector: Option<String>,
    /// The event types published; others are dropped (counted as `filtered`).
    pub(crate) events: Vec<EventType>,
    pub(crate) initial_state: InitialState,
    /// The watch's own template, or `publish.subject`; a template using `{cluster}` comes with a
    /// non-empty `cluster`.
    pub(crate) subject: SubjectTemplate,
    /// `{prefix}` of the subject template.
    pub(crate) subject_prefix: String,
    /// `{cluster}` of the subject template.
    pub(crate) cluster: String,
    pub(crate) payload: PayloadMode,
    pub(crate) format: MessageFormat,
    /// Which MODIFIED events are published and which paths are stripped.
    pub(crate) noise: NoiseConfig,
    /// Whether the watch's objects are kept in the `[mirror]` bucket (docs/mirror.md).
    pub(crate) mirror: bool,
    /// Only objects this CEL expression matches are published (docs/filters.md).
    pub(crate) filter: Option<FilterExpr>,
}
