//! Stage two, the meaning: `Config::try_from(RawConfig)` checks every value section by section and
//! builds the typed tree, recording every problem in a [`Checker`] rather than stopping at the
//! first. `[[watches]]` and selectors have their own files.

use std::path::PathBuf;
use std::time::Duration;

use super::checker::{non_empty, Checker};
use super::coverage::check_stream_covers_watches;
use super::error::ConfigErrors;
use super::named::{Discard, LogFormat, Named, RbacCheck, Retention, Storage};
use super::raw::{
    RawBackoff, RawConfig, RawJetStream, RawKubernetes, RawLog, RawNats, RawStream,
    DEFAULT_CA_FILE, DEFAULT_NAMESPACE_FILE, DEFAULT_TOKEN_FILE, MAX_LIST_PAGE_SIZE,
    MIN_MAX_LINE_BYTES,
};
use super::root::Config;
use super::values::{
    ApiSource, BackoffConfig, InClusterFiles, JetStreamConfig, KubernetesConfig, LogConfig,
    NatsAuth, NatsConfig, NatsMode, NatsTls, ShutdownConfig, StreamConfig,
};
use super::watches::check_watches;

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
            state,
            leader_election,
            mirror,
            watches,
        } = raw;
        let mut c = Checker::default();
        let log = check_log(&mut c, &log);
        let kubernetes = check_kubernetes(&mut c, &kubernetes);
        let nats = check_nats(&mut c, &nats);
        let mirrored: Vec<Option<bool>> = watches.iter().map(|w| w.mirror).collect();
        let watches = check_watches(&mut c, &publish, &watches);
        if let (Some(NatsMode::JetStream(js)), Some(watches)) =
            (nats.as_ref().map(|n| &n.mode), &watches)
        {
            if let Some(stream) = &js.stream {
                check_stream_covers_watches(&mut c, stream, watches);
            }
        }
        let http = super::http::check_http(&mut c, &http);
        let grace_period = c.duration("shutdown.grace_period", &shutdown.grace_period);
        let state = super::state::check_state(&mut c, &state);
        let leader_election = super::leader::check_leader_election(&mut c, &leader_election);
        let mirror = super::mirror::check_mirror(&mut c, &mirror);
        if let (Some(nats), Some(state), Some(election)) = (&nats, &state, &leader_election) {
            super::leader::check_replay_window(&mut c, &nats.mode, state, election);
        }
        match (
            log,
            kubernetes,
            nats,
            watches,
            http,
            grace_period,
            state,
            leader_election,
            mirror,
        ) {
            (
                Some(log),
                Some(kubernetes),
                Some(nats),
                Some(watches),
                Some(http),
                Some(grace_period),
                Some(state),
                Some(leader_election),
                Some(mirror),
            ) if c.errors.is_empty() => Ok(Config {
                log,
                kubernetes,
                nats,
                http,
                shutdown: ShutdownConfig { grace_period },
                state,
                leader_election,
                watches: super::mirror::resolve_watches(watches, &mirrored, &mirror),
                mirror,
            }),
            _ => Err(ConfigErrors(c.errors)),
        }
    }
}

fn check_log(c: &mut Checker, log: &RawLog) -> Option<LogConfig> {
    let format = c.one_of("log.format", &log.format, LogFormat::NAMES);
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
    let max_concurrent_lists = c.range(
        "kubernetes.max_concurrent_lists",
        k.max_concurrent_lists,
        1,
        None,
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
    let rbac_check = c.one_of("kubernetes.rbac_check", &k.rbac_check, RbacCheck::NAMES);
    let backoff = check_backoff(c, &k.backoff);
    Some(KubernetesConfig {
        source: source?,
        insecure_skip_tls_verify: k.insecure_skip_tls_verify,
        token_reload_interval: token_reload_interval?,
        request_timeout: request_timeout?,
        list_page_size: list_page_size?,
        max_concurrent_lists: max_concurrent_lists?,
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
        (Some(u), None) if crate::redact::has_credentials(u) => c.fail(
            "kubernetes.api_url",
            format!(
                "credentials in the URL {:?} are never sent (kube2nats authenticates with \
                 kubernetes.token_file or the service account); remove them",
                crate::redact::url(u)
            ),
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
                format!(
                    "invalid URL {:?}: {why} ({EXAMPLES})",
                    crate::redact::url(u)
                ),
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
    let multiplier = c.valid(
        "kubernetes.backoff.multiplier",
        b.multiplier,
        BackoffConfig::valid_multiplier,
        ">= 1",
    );
    let jitter = c.valid(
        "kubernetes.backoff.jitter",
        b.jitter,
        BackoffConfig::valid_jitter,
        "0..=1",
    );
    // Every invariant was checked above with a message naming its key.
    BackoffConfig::new(initial?, max?, multiplier?, jitter?, reset_after?).ok()
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
    let max_buffered_bytes = c.range(
        "nats.max_buffered_bytes",
        n.max_buffered_bytes,
        super::raw::MIN_MAX_BUFFERED_BYTES,
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
            "[kubernetes]\nmax_concurrent_lists = 0",
            "kubernetes.max_concurrent_lists: 0 is out of range (allowed: >= 1)",
        );
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
            "[nats]\nmax_buffered_bytes = 1000",
            "nats.max_buffered_bytes: 1000 is out of range (allowed: >= 1048576)",
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
            "publish.payload: invalid value \"raw\" (allowed: event, object, metadata)",
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
