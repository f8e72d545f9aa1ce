//! Stage one, the shape: `RawConfig` mirrors the TOML file key for key, each default beside its
//! field. It only checks shapes (a table is a table, a number is a number, no unknown key); every
//! string with meaning — durations, URLs, enums, selectors, templates — stays a string here and is
//! checked in stage two, `Config::try_from`, which reports every problem at once instead of
//! stopping at the first.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use super::named::{
    Discard, InitialState, LogFormat, MessageFormat, Named, PayloadMode, RbacCheck, Retention,
    Storage,
};
use crate::event::EventType;

/// `log.filter`: `info` shows start-up, reconnects that need attention and errors, without the
/// per-event chatter of `debug`.
pub(crate) const DEFAULT_LOG_FILTER: &str = "info";
/// `log.format`: text reads well in `kubectl logs`; use `json` for log pipelines.
pub(crate) const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Text;

/// In-cluster service-account token, mounted by the kubelet (projected and rotated).
pub(crate) const DEFAULT_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// In-cluster CA bundle of the API server.
pub(crate) const DEFAULT_CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// In-cluster file holding the pod's namespace.
pub(crate) const DEFAULT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// `kubernetes.token_reload_interval`: bound tokens expire after an hour and are refreshed by the
/// kubelet well before; re-reading each minute (as client-go does) always picks up the new one.
pub(crate) const DEFAULT_TOKEN_RELOAD_INTERVAL: Duration = Duration::from_secs(60);
/// `kubernetes.request_timeout`: generous for one list page of a large resource, short enough to
/// notice a dead API server.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// `kubernetes.list_page_size`: client-go's pager default; bounds memory per page.
pub(crate) const DEFAULT_LIST_PAGE_SIZE: u32 = 500;
/// Largest `list_page_size` accepted; larger pages only cost memory.
pub(crate) const MAX_LIST_PAGE_SIZE: u32 = 10_000;
/// `kubernetes.max_concurrent_lists`: a list holds a page of objects until they are published,
/// so memory grows with the lists under way, not with the targets. Two keep one list's request
/// in flight while another's page is published (the one thread is never idle waiting for the
/// API server), at two pages' memory.
pub(crate) const DEFAULT_MAX_CONCURRENT_LISTS: usize = 2;
/// `kubernetes.watch_timeout`: client-go's reflector asks for a timeout in [5m, 10m).
pub(crate) const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// `kubernetes.max_line_bytes`: 8 MiB, a little above the API server's default 3 MiB request limit
/// (etcd's 1.5 MiB object limit plus JSON overhead), so no real object is refused but a malformed
/// stream cannot grow a buffer without bound.
pub(crate) const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Smallest `max_line_bytes` accepted: smaller cannot hold even a minimal event.
pub(crate) const MIN_MAX_LINE_BYTES: usize = 1024;
/// `kubernetes.rbac_check`: warn, so a missing permission is visible but one optional watch does not
/// take the whole daemon down.
pub(crate) const DEFAULT_RBAC_CHECK: RbacCheck = RbacCheck::Warn;

/// `kubernetes.backoff.initial`: kube-rs's and client-go's 800 ms.
pub(crate) const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(800);
/// `kubernetes.backoff.max`: 30 s, client-go's cap.
pub(crate) const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// `kubernetes.backoff.multiplier`: doubling, as client-go.
pub(crate) const DEFAULT_BACKOFF_MULTIPLIER: f64 = 2.0;
/// `kubernetes.backoff.jitter`: half the delay randomized, so replicas do not retry in lockstep.
pub(crate) const DEFAULT_BACKOFF_JITTER: f64 = 0.5;
/// `kubernetes.backoff.reset_after`: client-go's 2 minutes of health before the backoff resets.
pub(crate) const DEFAULT_BACKOFF_RESET_AFTER: Duration = Duration::from_secs(2 * 60);

/// `nats.url`: a local nats-server, e.g. a sidecar.
pub(crate) const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";
/// `nats.name`: the connection name shown by `nats server report connections`.
pub(crate) const DEFAULT_NATS_NAME: &str = "kube2nats";
/// `nats.mode`: core NATS needs no stream set-up; choose `jetstream` for acknowledged delivery.
pub(crate) const DEFAULT_NATS_MODE: &str = "core";
/// `nats.connect_timeout`: async-nats' default.
pub(crate) const DEFAULT_NATS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// `nats.queue_capacity`: messages queued towards the NATS connection before publishing waits;
/// small, so a NATS outage costs bounded memory (the API server keeps the history, not kube2nats).
pub(crate) const DEFAULT_QUEUE_CAPACITY: usize = 1024;
/// `nats.max_buffered_bytes`: 32 MiB. The shipped manifests limit the container to 128 MiB; the
/// process needs ~15 MiB without data, and beyond the budget it holds up to one read chunk per
/// watch connection, one over-budget line and the HTTP/2 flow-control windows (see
/// `kube::client`), so 32 MiB leaves room for those and the allocator's slack.
pub(crate) const DEFAULT_MAX_BUFFERED_BYTES: usize = 32 * 1024 * 1024;
/// Smallest `max_buffered_bytes` accepted: less than a typical large object only adds reconnects.
pub(crate) const MIN_MAX_BUFFERED_BYTES: usize = 1024 * 1024;
/// `nats.jetstream.ack_timeout`: async-nats' default request timeout.
pub(crate) const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// `nats.jetstream.max_ack_inflight`: enough to keep throughput high over a round trip of a few ms,
/// small enough that a stalled stream applies backpressure quickly.
pub(crate) const DEFAULT_MAX_ACK_INFLIGHT: usize = 256;
/// `nats.jetstream.stream.name`.
pub(crate) const DEFAULT_STREAM_NAME: &str = "KUBE";
/// `nats.jetstream.stream.subjects`: everything under the default prefix.
pub(crate) const DEFAULT_STREAM_SUBJECT: &str = "kube.>";
/// `nats.jetstream.stream.retention`.
pub(crate) const DEFAULT_STREAM_RETENTION: Retention = Retention::Limits;
/// `nats.jetstream.stream.storage`.
pub(crate) const DEFAULT_STREAM_STORAGE: Storage = Storage::File;
/// `nats.jetstream.stream.duplicate_window`: JetStream's own default; must cover the longest
/// window in which kube2nats may republish (reconnect plus relist).
pub(crate) const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(2 * 60);
/// `nats.jetstream.stream.max_age`: a week, so a consumer that was down over a long weekend can
/// still replay what it missed, and nothing is kept for ever.
pub(crate) const DEFAULT_STREAM_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// `nats.jetstream.stream.max_bytes`: 1 GiB bounds the disk (or memory) the stream takes whatever
/// the cluster's churn; at a few KiB per event that is hundreds of thousands of changes.
pub(crate) const DEFAULT_STREAM_MAX_BYTES: i64 = 1 << 30;
/// `nats.jetstream.stream.max_msgs_per_subject`: a subject is one object and event type, so this
/// keeps each object's last 1000 changes of a type: one hot object (a Lease renewed every few
/// seconds) cannot push every other object's history out of `max_bytes`.
pub(crate) const DEFAULT_STREAM_MAX_MSGS_PER_SUBJECT: i64 = 1000;
/// `nats.jetstream.stream.replicas`: 1 runs on a single NATS server (the NATS Helm chart's
/// default); use 3 on a JetStream cluster so the loss of one NATS server loses nothing.
pub(crate) const DEFAULT_STREAM_REPLICAS: usize = 1;
/// `nats.jetstream.stream.discard`: `old`, so a full stream drops its oldest messages and keeps
/// accepting new ones. `new` would refuse publishes when full, which stalls every watch.
pub(crate) const DEFAULT_STREAM_DISCARD: Discard = Discard::Old;

/// `publish.subject_prefix`.
pub(crate) const DEFAULT_SUBJECT_PREFIX: &str = "kube";
/// `publish.payload`: the event as the API server sent it, type included.
pub(crate) const DEFAULT_PAYLOAD: PayloadMode = PayloadMode::Event;
/// `publish.format`: kube2nats' own headers; CloudEvents consumers opt in.
pub(crate) const DEFAULT_FORMAT: MessageFormat = MessageFormat::Native;
/// `http.listen`: all interfaces, so the kubelet and Prometheus can reach the pod.
pub(crate) const DEFAULT_HTTP_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 9090));
/// `http.max_connections`: the kubelet's probes and a few Prometheus scrapers need a handful; the
/// rest of the cap is room for clients that come and go.
pub(crate) const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 64;
/// `shutdown.grace_period`: below Kubernetes' default 30 s termination grace period, leaving room
/// for the pod to exit before SIGKILL.
pub(crate) const DEFAULT_SHUTDOWN_GRACE_PERIOD: Duration = Duration::from_secs(10);
/// `watches[].initial_state`: publish the listed objects as ADDED so subscribers start complete.
pub(crate) const DEFAULT_INITIAL_STATE: InitialState = InitialState::Added;

pub(super) fn s(v: &str) -> String {
    v.to_owned()
}

/// A default duration as the file spells it (`30s`, `800ms`).
fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The configuration file as written, plus environment overrides, before validation.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub(crate) log: RawLog,
    /// Absent: in-cluster with the defaults below.
    pub(crate) kubernetes: RawKubernetes,
    pub(crate) nats: RawNats,
    pub(crate) publish: RawPublish,
    pub(crate) http: RawHttp,
    pub(crate) shutdown: RawShutdown,
    pub(crate) state: super::RawState,
    pub(crate) leader_election: super::RawLeaderElection,
    pub(crate) mirror: super::RawMirror,
    /// At least one.
    pub(crate) watches: Vec<RawWatch>,
}

/// `[log]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawLog {
    /// A `RUST_LOG`-style filter; the `RUST_LOG` environment variable, when set, wins.
    /// Default [`DEFAULT_LOG_FILTER`].
    pub(crate) filter: String,
    /// `text` or `json`. Default [`DEFAULT_LOG_FORMAT`].
    pub(crate) format: String,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            filter: s(DEFAULT_LOG_FILTER),
            format: s(DEFAULT_LOG_FORMAT.name()),
        }
    }
}

/// `[kubernetes]`: where the API server is, and how kube2nats talks to it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawKubernetes {
    /// `""`: found as kubectl finds it (see [`ApiSource::Auto`]); otherwise an http(s) URL such
    /// as `http://127.0.0.1:8001` behind `kubectl proxy`. Default `""`.
    pub(crate) api_url: String,
    /// Kubeconfig path(s), `:`-separated like `$KUBECONFIG`; excludes `api_url`. Default `""`:
    /// `$KUBECONFIG`, else `~/.kube/config`, when not in a pod.
    pub(crate) kubeconfig: String,
    /// Context of the kubeconfig; `""` is its current-context. Naming one uses the kubeconfig
    /// even in a pod. Excludes `api_url`.
    pub(crate) context: String,
    /// Bearer token file. In-cluster: default [`DEFAULT_TOKEN_FILE`]; with `api_url`: used only
    /// when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) token_file: Option<String>,
    /// CA bundle file. In-cluster: default [`DEFAULT_CA_FILE`]; with `api_url`: used only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ca_file: Option<String>,
    /// In-cluster only: the pod's namespace file. Default [`DEFAULT_NAMESPACE_FILE`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) namespace_file: Option<String>,
    /// Skip verifying the API server's certificate. Default false; a warning is logged when true.
    pub(crate) insecure_skip_tls_verify: bool,
    /// Duration; how often the token file is re-read. Default [`DEFAULT_TOKEN_RELOAD_INTERVAL`].
    pub(crate) token_reload_interval: String,
    /// Duration; timeout of one non-watch request. Default [`DEFAULT_REQUEST_TIMEOUT`].
    pub(crate) request_timeout: String,
    /// Objects per list page, 1..=10000. Default [`DEFAULT_LIST_PAGE_SIZE`].
    pub(crate) list_page_size: u32,
    /// Targets that list at once, >= 1; the others wait for a slot. Default
    /// [`DEFAULT_MAX_CONCURRENT_LISTS`].
    pub(crate) max_concurrent_lists: usize,
    /// Duration, >= 1s; server-side watch timeout base. Default [`DEFAULT_WATCH_TIMEOUT`].
    pub(crate) watch_timeout: String,
    /// Use streaming lists where supported. Default false (needs Kubernetes >= 1.32 to be useful).
    pub(crate) streaming_list: bool,
    /// Bytes, >= 1024; longest accepted watch line. Default [`DEFAULT_MAX_LINE_BYTES`].
    pub(crate) max_line_bytes: usize,
    /// `warn` or `fail`. Default [`DEFAULT_RBAC_CHECK`].
    pub(crate) rbac_check: String,
    pub(crate) backoff: RawBackoff,
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
            token_reload_interval: duration(DEFAULT_TOKEN_RELOAD_INTERVAL),
            request_timeout: duration(DEFAULT_REQUEST_TIMEOUT),
            list_page_size: DEFAULT_LIST_PAGE_SIZE,
            max_concurrent_lists: DEFAULT_MAX_CONCURRENT_LISTS,
            watch_timeout: duration(DEFAULT_WATCH_TIMEOUT),
            streaming_list: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            rbac_check: s(DEFAULT_RBAC_CHECK.name()),
            backoff: RawBackoff::default(),
        }
    }
}

/// `[kubernetes.backoff]`: the delay between failed attempts of one watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawBackoff {
    /// Duration, > 0 and <= `max`. Default [`DEFAULT_BACKOFF_INITIAL`].
    pub(crate) initial: String,
    /// Duration. Default [`DEFAULT_BACKOFF_MAX`].
    pub(crate) max: String,
    /// >= 1. Default [`DEFAULT_BACKOFF_MULTIPLIER`].
    pub(crate) multiplier: f64,
    /// 0..=1. Default [`DEFAULT_BACKOFF_JITTER`].
    pub(crate) jitter: f64,
    /// Duration. Default [`DEFAULT_BACKOFF_RESET_AFTER`].
    pub(crate) reset_after: String,
}

impl Default for RawBackoff {
    fn default() -> Self {
        RawBackoff {
            initial: duration(DEFAULT_BACKOFF_INITIAL),
            max: duration(DEFAULT_BACKOFF_MAX),
            multiplier: DEFAULT_BACKOFF_MULTIPLIER,
            jitter: DEFAULT_BACKOFF_JITTER,
            reset_after: duration(DEFAULT_BACKOFF_RESET_AFTER),
        }
    }
}

/// `[nats]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawNats {
    /// Comma-separated server URLs; schemes `nats`, `tls`, `ws`, `wss`. Default [`DEFAULT_NATS_URL`].
    pub(crate) url: String,
    /// Connection name. Default [`DEFAULT_NATS_NAME`].
    pub(crate) name: String,
    /// `core` or `jetstream`. Default [`DEFAULT_NATS_MODE`].
    pub(crate) mode: String,
    /// Auth token (secret). At most one of token, user+password, nkey_seed_file, credentials_file.
    pub(crate) token: String,
    /// User name; needs `password`.
    pub(crate) user: String,
    /// Password (secret); needs `user`.
    pub(crate) password: String,
    /// Path of an NKey seed file.
    pub(crate) nkey_seed_file: String,
    /// Path of a `.creds` file (JWT and seed).
    pub(crate) credentials_file: String,
    /// CA bundle for `tls://` servers; `""` = system roots.
    pub(crate) tls_ca_file: String,
    /// Client certificate (mutual TLS); with `tls_key_file`, both or neither.
    pub(crate) tls_cert_file: String,
    /// Client key; with `tls_cert_file`.
    pub(crate) tls_key_file: String,
    /// Duration. Default [`DEFAULT_NATS_CONNECT_TIMEOUT`].
    pub(crate) connect_timeout: String,
    /// Events, >= 1. Default [`DEFAULT_QUEUE_CAPACITY`].
    pub(crate) queue_capacity: usize,
    /// Bytes, >= [`MIN_MAX_BUFFERED_BYTES`]. Default [`DEFAULT_MAX_BUFFERED_BYTES`].
    pub(crate) max_buffered_bytes: usize,
    pub(crate) jetstream: RawJetStream,
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
            connect_timeout: duration(DEFAULT_NATS_CONNECT_TIMEOUT),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            jetstream: RawJetStream::default(),
        }
    }
}

/// `[nats.jetstream]`: used when `nats.mode = "jetstream"`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawJetStream {
    /// Duration. Default [`DEFAULT_ACK_TIMEOUT`].
    pub(crate) ack_timeout: String,
    /// >= 1. Default [`DEFAULT_MAX_ACK_INFLIGHT`].
    pub(crate) max_ack_inflight: usize,
    /// The JetStream domain of the stream and of the state bucket; `""` (the default) = the
    /// domain of the server kube2nats connects to. Set it to the hub's domain when kube2nats
    /// connects to a leaf node: JetStream requests then cross the leaf-node connection.
    pub(crate) domain: String,
    /// Absent: kube2nats does not manage streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream: Option<RawStream>,
}

impl Default for RawJetStream {
    fn default() -> Self {
        RawJetStream {
            ack_timeout: duration(DEFAULT_ACK_TIMEOUT),
            max_ack_inflight: DEFAULT_MAX_ACK_INFLIGHT,
            domain: String::new(),
            stream: None,
        }
    }
}

/// `[nats.jetstream.stream]`: the stream kube2nats creates or checks at start.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawStream {
    /// Default [`DEFAULT_STREAM_NAME`].
    pub(crate) name: String,
    /// Default `["kube.>"]`.
    pub(crate) subjects: Vec<String>,
    /// `limits`, `interest` or `workqueue`. Default [`DEFAULT_STREAM_RETENTION`].
    pub(crate) retention: String,
    /// `file` or `memory`. Default [`DEFAULT_STREAM_STORAGE`].
    pub(crate) storage: String,
    /// Duration. Default [`DEFAULT_DUPLICATE_WINDOW`].
    pub(crate) duplicate_window: String,
    /// Duration; `0s` = unlimited. Default [`DEFAULT_STREAM_MAX_AGE`].
    pub(crate) max_age: String,
    /// Bytes, >= 1 or -1 = unlimited. Default [`DEFAULT_STREAM_MAX_BYTES`].
    pub(crate) max_bytes: i64,
    /// Messages kept per subject, >= 1 or -1 = unlimited. Default
    /// [`DEFAULT_STREAM_MAX_MSGS_PER_SUBJECT`].
    pub(crate) max_msgs_per_subject: i64,
    /// 1..=5. Default [`DEFAULT_STREAM_REPLICAS`].
    pub(crate) replicas: usize,
    /// `old` or `new`: what a full stream drops. Default [`DEFAULT_STREAM_DISCARD`].
    pub(crate) discard: String,
}

impl Default for RawStream {
    fn default() -> Self {
        RawStream {
            name: s(DEFAULT_STREAM_NAME),
            subjects: vec![s(DEFAULT_STREAM_SUBJECT)],
            retention: s(DEFAULT_STREAM_RETENTION.name()),
            storage: s(DEFAULT_STREAM_STORAGE.name()),
            duplicate_window: duration(DEFAULT_DUPLICATE_WINDOW),
            max_age: duration(DEFAULT_STREAM_MAX_AGE),
            max_bytes: DEFAULT_STREAM_MAX_BYTES,
            max_msgs_per_subject: DEFAULT_STREAM_MAX_MSGS_PER_SUBJECT,
            replicas: DEFAULT_STREAM_REPLICAS,
            discard: s(DEFAULT_STREAM_DISCARD.name()),
        }
    }
}

/// `[publish]`: defaults for every watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawPublish {
    /// Tokens of `[A-Za-z0-9_-]` separated by dots. Default [`DEFAULT_SUBJECT_PREFIX`].
    pub(crate) subject_prefix: String,
    /// Value of `{cluster}`; a template using `{cluster}` needs it non-empty. Default `""`.
    pub(crate) cluster: String,
    /// Subject template; `""` (the default) = [`crate::subject::DEFAULT_TEMPLATE`], or with
    /// `cluster` set [`crate::subject::DEFAULT_CLUSTER_TEMPLATE`].
    pub(crate) subject: String,
    /// `event`, `object` or `metadata`. Default [`DEFAULT_PAYLOAD`].
    pub(crate) payload: String,
    /// `native` or `cloudevents`. Default [`DEFAULT_FORMAT`].
    pub(crate) format: String,
}

impl Default for RawPublish {
    fn default() -> Self {
        RawPublish {
            subject_prefix: s(DEFAULT_SUBJECT_PREFIX),
            cluster: String::new(),
            subject: String::new(),
            payload: s(DEFAULT_PAYLOAD.name()),
            format: s(DEFAULT_FORMAT.name()),
        }
    }
}

/// `[http]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawHttp {
    /// Socket address of `/metrics`, `/healthz`, `/readyz`. Default [`DEFAULT_HTTP_LISTEN`].
    pub(crate) listen: String,
    /// 1 or more. Default [`DEFAULT_HTTP_MAX_CONNECTIONS`].
    pub(crate) max_connections: usize,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: DEFAULT_HTTP_LISTEN.to_string(),
            max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
        }
    }
}

/// `[shutdown]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawShutdown {
    /// Duration. Default [`DEFAULT_SHUTDOWN_GRACE_PERIOD`].
    pub(crate) grace_period: String,
}

impl Default for RawShutdown {
    fn default() -> Self {
        RawShutdown {
            grace_period: duration(DEFAULT_SHUTDOWN_GRACE_PERIOD),
        }
    }
}

/// `[[watches]]`: one resource to list and watch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawWatch {
    /// Required, unique, `[A-Za-z0-9_-]{1,63}`: the `watch` label of metrics.
    pub(crate) name: String,
    /// Required; kubectl-style `plural[.version][.group]`.
    pub(crate) resource: String,
    /// DNS-1123 labels; `[]` = all namespaces.
    pub(crate) namespaces: Vec<String>,
    /// With `namespaces = []`: namespaces whose objects are not published. Default `[]`.
    pub(crate) namespaces_exclude: Vec<String>,
    /// Label selector on namespaces (`team=payments`); `""` = every namespace.
    pub(crate) namespace_selector: String,
    /// Kubernetes label selector; `""` = none.
    pub(crate) label_selector: String,
    /// Kubernetes field selector; `""` = none.
    pub(crate) field_selector: String,
    /// Non-empty subset of ADDED, MODIFIED, DELETED (any case). Default all three.
    pub(crate) events: Vec<String>,
    /// `added` or `skip`. Default [`DEFAULT_INITIAL_STATE`].
    pub(crate) initial_state: String,
    /// Subject template; `""` = `publish.subject`.
    pub(crate) subject: String,
    /// `event`, `object` or `metadata`; `""` = `publish.payload`.
    pub(crate) payload: String,
    /// `native` or `cloudevents`; `""` = `publish.format`.
    pub(crate) format: String,
    /// Noise control: `any`, `generation` or `content`; `""` = `any`.
    pub(crate) changes: String,
    /// Paths `changes = "content"` ignores besides the default three.
    pub(crate) ignore_paths: Vec<String>,
    /// Paths removed from the published object.
    pub(crate) strip_paths: Vec<String>,
    /// A CEL expression over `object`: only matching objects are published; `""` = all.
    pub(crate) filter: String,
    /// Keep the watch's objects in the `[mirror]` bucket; unset = `mirror.enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mirror: Option<bool>,
}

impl Default for RawWatch {
    fn default() -> Self {
        RawWatch {
            name: String::new(),
            resource: String::new(),
            namespaces: Vec::new(),
            namespaces_exclude: Vec::new(),
            namespace_selector: String::new(),
            label_selector: String::new(),
            field_selector: String::new(),
            events: EventType::ALL.iter().map(|t| s(t.as_str())).collect(),
            initial_state: s(DEFAULT_INITIAL_STATE.name()),
            subject: String::new(),
            payload: String::new(),
            format: String::new(),
            changes: String::new(),
            ignore_paths: Vec::new(),
            strip_paths: Vec::new(),
            filter: String::new(),
            mirror: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::load_raw;
    use crate::config::testing::*;

    #[test]
    fn example_defaults_match_code_defaults() {
        // The example documents the defaults: the parts that are not watches must equal them.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let mut raw = load_raw(Some(&path), env(&[])).unwrap();
        raw.watches.clear();
        raw.nats.jetstream.stream = None;
        assert_eq!(raw, RawConfig::default());
    }
}
