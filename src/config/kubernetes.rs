//! `[kubernetes]` and `[kubernetes.backoff]`: where the API server is, how kube2nats talks to it,
//! and the delay between a watch's failed attempts; the section's raw form, defaults, checks and
//! typed values together.

use std::path::PathBuf;
use std::time::Duration;

use super::checker::{non_empty, Checker};
use super::named::{Named, RbacCheck};
use super::raw::{duration, s};

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

pub(super) fn check_kubernetes(c: &mut Checker, k: &RawKubernetes) -> Option<KubernetesConfig> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

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
}
