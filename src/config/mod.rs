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
//! The files are the stages: `raw` (the file's shape, each default beside its field), `source`
//! (file + environment, unknown keys, redaction), `check` (raw → typed, section by section),
//! `watches` (`[[watches]]`), `selector` (label/field selector and name syntax), `error`.
//! This file holds the typed values, the contract with the rest of the crate, and [`load`].

mod check;
mod coverage;
mod error;
mod leader;
mod mirror;
mod noise;
mod raw;
mod selector;
mod source;
mod state;
mod watches;

#[cfg(test)]
mod testing;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::event::EventType;
use crate::subject::SubjectTemplate;

pub use error::{ConfigError, ConfigErrors};
pub use leader::{LeaderElectionConfig, RawLeaderElection, RETRY_JITTER_FACTOR};
pub use mirror::{MirrorConfig, RawMirror};
pub use noise::{Changes, NoiseConfig, DEFAULT_CHANGES};
pub use raw::*;
pub use selector::{check_field_selector, check_label_selector};
pub use source::{env_var_name, ENV_PREFIX, ENV_SEPARATOR, REDACTED};
pub use state::{RawState, StateConfig};

use source::{name_env_sources, process_environment, read_raw};

/// A configuration value the file spells by name (`log.format = "json"`).
pub trait Named: Copy + PartialEq + 'static {
    /// Every value with its spelling, in the order error messages list them.
    const NAMES: &'static [(&'static str, Self)];

    /// How the file spells `self`.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("", |(name, _)| name)
    }
}

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub log: LogConfig,
    pub kubernetes: KubernetesConfig,
    pub nats: NatsConfig,
    pub http: HttpConfig,
    pub shutdown: ShutdownConfig,
    pub state: StateConfig,
    pub leader_election: LeaderElectionConfig,
    pub mirror: MirrorConfig,
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

impl Named for LogFormat {
    const NAMES: &'static [(&'static str, Self)] =
        &[("text", LogFormat::Text), ("json", LogFormat::Json)];
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
    /// How many targets list at once ([`crate::watcher::ListSlots`]).
    pub max_concurrent_lists: usize,
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

/// Exponential backoff with jitter, as a validated value: only [`BackoffConfig::new`] (or
/// [`BackoffConfig::checked`] for constants) makes one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    initial: Duration,
    max: Duration,
    multiplier: f64,
    jitter: f64,
    reset_after: Duration,
}

/// Why backoff parameters are not a [`BackoffConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
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
    pub const fn new(
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
    pub const fn checked(
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
    pub const fn valid_multiplier(multiplier: f64) -> bool {
        multiplier.is_finite() && multiplier >= 1.0
    }

    /// Fraction of the delay that is randomized: within 0..=1, so a delay is never negative.
    pub const fn valid_jitter(jitter: f64) -> bool {
        jitter >= 0.0 && jitter <= 1.0
    }

    /// The first delay, and the delay again after `reset_after` of health.
    pub const fn initial(&self) -> Duration {
        self.initial
    }
    /// The longest delay.
    pub const fn max(&self) -> Duration {
        self.max
    }
    pub const fn multiplier(&self) -> f64 {
        self.multiplier
    }
    pub const fn jitter(&self) -> f64 {
        self.jitter
    }
    /// A watch healthy for this long starts again from `initial`.
    pub const fn reset_after(&self) -> Duration {
        self.reset_after
    }
}

/// What to do when the start-up RBAC self-check finds a missing permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RbacCheck {
    /// Log the missing rule and keep running (and retrying).
    Warn,
    /// Log the missing rule and exit with code 3.
    Fail,
}

impl Named for RbacCheck {
    const NAMES: &'static [(&'static str, Self)] =
        &[("warn", RbacCheck::Warn), ("fail", RbacCheck::Fail)];
}

/// `Debug` shows the server URLs without their user part (see the impl).
#[derive(Clone)]
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
    /// `nats.jetstream.domain`: the JetStream domain of the stream and of the state bucket;
    /// `None` = the connected server's own.
    pub jetstream_domain: Option<String>,
    /// One budget, in bytes, for the data held between the API server and NATS across all
    /// watches (read and not yet published, or published and not yet taken by NATS); when it
    /// is spent, the watches stop reading ([`crate::budget`]).
    pub max_buffered_bytes: usize,
}

impl NatsConfig {
    /// The subject prefix of the JetStream API: `$JS.API`, or `$JS.{domain}.API` in a domain
    /// (how a client on a leaf node reaches the hub's JetStream).
    pub fn jetstream_api_prefix(&self) -> String {
        match &self.jetstream_domain {
            None => "$JS.API".to_owned(),
            Some(domain) => format!("$JS.{domain}.API"),
        }
    }
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

impl std::fmt::Debug for NatsConfig {
    /// Never prints a secret: a server URL may hold a password or a token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers: Vec<String> = self.servers.iter().map(|s| source::redact_url(s)).collect();
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
    /// `None` means unlimited.
    pub max_bytes: Option<u64>,
    /// `None` means unlimited.
    pub max_msgs_per_subject: Option<u64>,
    pub replicas: usize,
    pub discard: Discard,
}

/// What a full managed stream gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// Its oldest messages: new events keep flowing.
    Old,
    /// New messages: publishes fail (and the watches wait) until space frees up.
    New,
}

impl Named for Discard {
    const NAMES: &'static [(&'static str, Self)] = &[("old", Discard::Old), ("new", Discard::New)];
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

impl Named for Retention {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("limits", Retention::Limits),
        ("interest", Retention::Interest),
        ("workqueue", Retention::WorkQueue),
    ];
}

/// Where a managed stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// On disk; survives a restart of the NATS server.
    File,
    /// In memory; faster, lost on restart.
    Memory,
}

impl Named for Storage {
    const NAMES: &'static [(&'static str, Self)] =
        &[("file", Storage::File), ("memory", Storage::Memory)];
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
    /// With `namespaces` empty: namespaces whose objects are dropped by kube2nats (one watch).
    pub namespaces_exclude: Vec<String>,
    /// A label selector on namespaces: only objects of namespaces whose labels match are
    /// published, followed as namespaces are relabelled ([`crate::scope`]).
    pub namespace_selector: Option<String>,
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
    pub format: MessageFormat,
    /// Which MODIFIED events are published and which paths are stripped.
    pub noise: NoiseConfig,
    /// Whether the watch's objects are kept in the `[mirror]` bucket (docs/mirror.md).
    pub mirror: bool,
}

/// What the first list of a watch publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialState {
    /// Every listed object as ADDED.
    Added,
    /// Nothing: only changes after start are published.
    Skip,
}

impl Named for InitialState {
    const NAMES: &'static [(&'static str, Self)] =
        &[("added", InitialState::Added), ("skip", InitialState::Skip)];
}

/// The body of a published message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadMode {
    /// The watch event `{"type":…,"object":…}`.
    Event,
    /// The object alone.
    Object,
    /// Like `Event`, but the API server is asked for PartialObjectMetadata: the object carries
    /// its metadata only ([`crate::kube::metadata`]).
    Metadata,
}

impl Named for PayloadMode {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("event", PayloadMode::Event),
        ("object", PayloadMode::Object),
        ("metadata", PayloadMode::Metadata),
    ];
}

/// How a message presents the event, besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFormat {
    /// kube2nats' own `Kube-*` headers (and `Nats-Msg-Id`).
    Native,
    /// The native headers plus the CloudEvents attributes in binary content mode (`ce-*`
    /// headers), per the CloudEvents NATS protocol binding.
    CloudEvents,
}

impl Named for MessageFormat {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("native", MessageFormat::Native),
        ("cloudevents", MessageFormat::CloudEvents),
    ];
}

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

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

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
            BackoffConfig::checked(
                Duration::from_millis(800),
                Duration::from_secs(30),
                2.0,
                0.5,
                Duration::from_secs(120)
            )
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
        assert_eq!(w.format, MessageFormat::Native);
        assert_eq!(
            (w.label_selector.as_deref(), w.field_selector.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn backoff_config_checks_its_invariants() {
        let s = Duration::from_secs;
        let new = |initial, max, multiplier, jitter| {
            BackoffConfig::new(s(initial), s(max), multiplier, jitter, s(60)).map(|_| ())
        };
        assert_eq!(new(1, 30, 2.0, 0.5), Ok(()));
        assert_eq!(new(1, 1, 1.0, 0.0), Ok(()));
        assert_eq!(new(0, 30, 2.0, 0.5), Err(BackoffError::ZeroInitial));
        assert_eq!(new(31, 30, 2.0, 0.5), Err(BackoffError::InitialAboveMax));
        assert_eq!(new(1, 30, 0.5, 0.5), Err(BackoffError::MultiplierBelowOne));
        assert_eq!(
            new(1, 30, f64::INFINITY, 0.5),
            Err(BackoffError::MultiplierBelowOne)
        );
        assert_eq!(new(1, 30, 2.0, 1.5), Err(BackoffError::JitterOutOfRange));
        assert_eq!(
            new(1, 30, 2.0, f64::NAN),
            Err(BackoffError::JitterOutOfRange)
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
        assert_eq!(c.kubernetes.backoff.max(), Duration::from_secs(60));
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
    fn collects_every_problem() {
        let lines = errors("[kubernetes]\nwatch_timeout = \"x\"\nrequest_timeout = \"y\"\n[nats]\nurl = \"nats//x\"");
        assert_eq!(lines.len(), 3, "{lines:#?}");
    }

    /// `Debug` of the NATS configuration hides credentials in server URLs and in `auth`.
    #[test]
    fn nats_config_debug_shows_no_secret() {
        let c = load_str(&format!(
            "[nats]\nurl = \"nats://kube:s3cr3t@a:4222,tls://t0ken@b:4222\"\npassword = \"pw-x\"\nuser = \"u\"\n{MINIMAL}"
        ))
        .unwrap();
        let shown = format!("{:?}", c.nats);
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("t0ken") && !shown.contains("pw-x"),
            "{shown}"
        );
    }
}
