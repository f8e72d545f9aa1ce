//! `[nats]`, `[nats.jetstream]` and `[nats.jetstream.stream]`: the NATS connection, the publish
//! mode and the stream kube2nats creates or checks; the section's raw form, defaults, checks and
//! typed values together.

use std::path::PathBuf;
use std::time::Duration;

use super::checker::{non_empty, Checker};
use super::named::{Discard, Named, Retention, Storage};
use super::raw::{duration, s};

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

const NATS_SCHEMES: [&str; 4] = ["nats", "tls", "ws", "wss"];

pub(super) fn check_nats(c: &mut Checker, n: &RawNats) -> Option<NatsConfig> {
    let servers = check_nats_urls(c, &n.url);
    let name = match non_empty(&n.name) {
        Some(v) => Some(v.to_owned()),
        None => c.fail("nats.name", "must not be empty (default \"kube2nats\")"),
    };
    let auth = check_nats_auth(c, n);
    let tls = check_nats_tls(c, n);
    let connect_timeout = c.positive("nats.connect_timeout", &n.connect_timeout);
    let queue_capacity = c.range("nats.queue_capacity", n.queue_capacity, 1, None);
    let max_buffered_bytes = c.range(
        "nats.max_buffered_bytes",
        n.max_buffered_bytes,
        MIN_MAX_BUFFERED_BYTES,
        None,
    );
    let is_jetstream = c.one_of(
        "nats.mode",
        &n.mode,
        &[("core", false), ("jetstream", true)],
    );
    let jetstream = check_jetstream(c, &n.jetstream);
    let jetstream_domain = check_jetstream_domain(c, &n.jetstream.domain);
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
        jetstream_domain: jetstream_domain?,
        max_buffered_bytes: max_buffered_bytes?,
    })
}

/// A domain is one subject token of the JetStream API prefix.
fn check_jetstream_domain(c: &mut Checker, domain: &str) -> Option<Option<String>> {
    match non_empty(domain) {
        None => Some(None),
        Some(d)
            if d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
        {
            Some(Some(d.to_owned()))
        }
        Some(_) => c.fail(
            "nats.jetstream.domain",
            format!("invalid domain {domain:?} (allowed: [A-Za-z0-9_-]; \"\" = none)"),
        ),
    }
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
                let shown = crate::redact::url(u);
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
    let retention = c.one_of(&format!("{K}.retention"), &s.retention, Retention::NAMES);
    let storage = c.one_of(&format!("{K}.storage"), &s.storage, Storage::NAMES);
    let duplicate_window = c.positive(&format!("{K}.duplicate_window"), &s.duplicate_window);
    let max_age = c.duration(&format!("{K}.max_age"), &s.max_age);
    let max_bytes = c.limit(&format!("{K}.max_bytes"), s.max_bytes);
    let max_msgs_per_subject =
        c.limit(&format!("{K}.max_msgs_per_subject"), s.max_msgs_per_subject);
    let replicas = if (1..=5).contains(&s.replicas) {
        Some(s.replicas)
    } else {
        c.fail(
            format!("{K}.replicas"),
            format!("{} is out of range (allowed: 1..=5)", s.replicas),
        )
    };
    let discard = c.one_of(&format!("{K}.discard"), &s.discard, Discard::NAMES);
    Some(StreamConfig {
        name: name?,
        subjects: subjects_ok.then(|| s.subjects.clone())?,
        retention: retention?,
        storage: storage?,
        duplicate_window: duplicate_window?,
        max_age: max_age?,
        max_bytes: max_bytes?,
        max_msgs_per_subject: max_msgs_per_subject?,
        replicas: replicas?,
        discard: discard?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn stream_limits_default_bounded_and_overridable() {
        let toml = |extra: &str| {
            format!("[nats]\nmode = \"jetstream\"\n[nats.jetstream.stream]\n{extra}\n")
        };
        let c = load_str(&format!("{}{MINIMAL}", toml(""))).unwrap();
        let NatsMode::JetStream(js) = &c.nats.mode else {
            panic!("jetstream mode")
        };
        let stream = js.stream.as_ref().unwrap();
        assert_eq!(stream.max_age, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(stream.max_bytes, Some(1 << 30));
        assert_eq!(stream.max_msgs_per_subject, Some(1000));
        assert_eq!((stream.replicas, stream.discard), (1, Discard::Old));
        let overrides = "max_bytes = -1\nmax_msgs_per_subject = 5\nreplicas = 3\ndiscard = \"new\"";
        let c = load_str(&format!("{}{MINIMAL}", toml(overrides))).unwrap();
        let NatsMode::JetStream(js) = &c.nats.mode else {
            panic!("jetstream mode")
        };
        let stream = js.stream.as_ref().unwrap();
        assert_eq!(stream.max_bytes, None);
        assert_eq!(stream.max_msgs_per_subject, Some(5));
        assert_eq!((stream.replicas, stream.discard), (3, Discard::New));
        let k = "nats.jetstream.stream";
        assert_error(
            &toml("max_bytes = 0"),
            &format!("{k}.max_bytes: 0 is not >= 1 or -1"),
        );
        assert_error(
            &toml("max_msgs_per_subject = -5"),
            &format!("{k}.max_msgs_per_subject"),
        );
        assert_error(
            &toml("replicas = 7"),
            &format!("{k}.replicas: 7 is out of range"),
        );
        assert_error(&toml("discard = \"oldest\""), &format!("{k}.discard"));
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

    /// A domain moves the JetStream API prefix (of the stream and the state bucket alike).

    #[test]
    fn jetstream_domain() {
        let prefix = |extra: &str| {
            load_str(&format!("{extra}\n{MINIMAL}"))
                .unwrap()
                .nats
                .jetstream_api_prefix()
        };
        assert_eq!(prefix(""), "$JS.API");
        assert_eq!(prefix("[nats.jetstream]\ndomain = \"hub\""), "$JS.hub.API");
        assert_error(
            "[nats.jetstream]\ndomain = \"a.b\"",
            "nats.jetstream.domain: invalid domain \"a.b\" (allowed: [A-Za-z0-9_-]",
        );
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
}
