//! Where the API server is and who kube2nats is to it, resolved once at start into an
//! [`Endpoint`] the way client-go and kubectl resolve it: an explicit URL or kubeconfig when
//! configured; otherwise the pod's service account when `KUBERNETES_SERVICE_HOST` is set, else
//! the files of `$KUBECONFIG`, else `~/.kube/config`.
//!
//! Bound service-account tokens expire (an hour by default) and the kubelet rewrites the file
//! before then, so a file token is never cached for long: [`AuthSource`] re-reads it every
//! `token_reload_interval` and right after a 401. Exec plugins' credentials are cached until
//! they expire, and also dropped after a 401.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use url::Url;

use super::exec::{ClusterInfo, ExecError, ExecPlugin};
use super::kubeconfig::{self, KubeconfigError};
use crate::config::{ApiSource, InClusterFiles, KubernetesConfig};

#[derive(Debug, thiserror::Error)]
pub(crate) enum CredentialsError {
    #[error("no Kubernetes API server found: KUBERNETES_SERVICE_HOST is not set (not in a pod) and no kubeconfig exists (looked for {looked_for}; set KUBECONFIG, kubernetes.kubeconfig or kubernetes.api_url)")]
    NothingFound { looked_for: String },
    #[error("not running in a cluster: KUBERNETES_SERVICE_HOST is not set (set kubernetes.api_url or kubernetes.kubeconfig to run outside a cluster)")]
    NotInCluster,
    #[error("invalid API server address {0:?}")]
    BadAddress(String),
    #[error("invalid proxy-url {0:?} (allowed: http://, https://, socks5://)")]
    BadProxy(String),
    /// Shown redacted: the kubeconfig's user credentials are what kube2nats sends.
    #[error("the kubeconfig's server URL {0:?} holds credentials, which are never sent (the kubeconfig's user entry is); remove them")]
    CredentialsInServer(String),
    #[error("reading {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("invalid TLS material ({what}): {source}")]
    Tls {
        what: &'static str,
        source: reqwest::Error,
    },
}

/// Everything needed to build the HTTP client. Its `Debug` shows no key material.
pub(crate) struct Endpoint {
    pub(crate) base_url: Url,
    /// PEM bundle of the CAs to trust; `None` trusts the public web PKI roots.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// Client certificate and key PEM.
    pub(crate) identity_pem: Option<Vec<u8>>,
    pub(crate) auth: Option<AuthSource>,
    pub(crate) insecure_skip_tls_verify: bool,
    /// A proxy for every request (kubeconfig `proxy-url`); `None` follows `HTTPS_PROXY`/`NO_PROXY`.
    pub(crate) proxy_url: Option<Url>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |pem: &Option<Vec<u8>>| pem.as_ref().map(|_| "<redacted>");
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url.as_str())
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| p.len()))
            .field("identity_pem", &shown(&self.identity_pem))
            .field("auth", &self.auth)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("proxy_host", &self.proxy_url.as_ref().map(|u| u.host_str()))
            .finish()
    }
}

/// Resolves the configured [`ApiSource`]. `env` reads the process environment (a closure so
/// tests need not touch it).
pub(crate) fn resolve(
    cfg: &KubernetesConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Endpoint, CredentialsError> {
    let insecure = cfg.insecure_skip_tls_verify;
    let reload = cfg.token_reload_interval;
    match &cfg.source {
        ApiSource::Auto {
            in_cluster,
            context,
        } => {
            let in_pod = env("KUBERNETES_SERVICE_HOST").is_some_and(|h| !h.is_empty());
            // A named context asks for a kubeconfig even in a pod.
            if in_pod && context.is_none() {
                return from_service_account(in_cluster, insecure, reload, &env);
            }
            let paths = default_kubeconfig_paths(&env);
            if !paths.iter().any(|p| p.exists()) && context.is_none() {
                let looked_for: Vec<String> =
                    paths.iter().map(|p| p.display().to_string()).collect();
                return Err(CredentialsError::NothingFound {
                    looked_for: looked_for.join(", "),
                });
            }
            from_kubeconfig(&paths, context.as_deref(), insecure, reload)
        }
        ApiSource::Url {
            url,
            token_file,
            ca_file,
        } => Ok(Endpoint {
            base_url: url.clone(),
            ca_pem: ca_file.as_ref().map(|p| read("CA file", p)).transpose()?,
            identity_pem: None,
            auth: token_file
                .as_ref()
                .map(|p| AuthSource::file(p.clone(), reload)),
            insecure_skip_tls_verify: insecure,
            proxy_url: None,
        }),
        ApiSource::Kubeconfig { paths, context } => {
            from_kubeconfig(paths, context.as_deref(), insecure, reload)
        }
    }
}

/// `$KUBECONFIG` split as the OS splits `PATH` (empty entries skipped), else `$HOME/.kube/config`.
fn default_kubeconfig_paths(env: &impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    if let Some(list) = env("KUBECONFIG").filter(|l| !l.is_empty()) {
        let paths: Vec<PathBuf> = std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            return paths;
        }
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| vec![PathBuf::from(home).join(".kube").join("config")])
        .unwrap_or_default()
}

/// The pod's service account: `KUBERNETES_SERVICE_HOST`/`PORT` and the mounted files.
fn from_service_account(
    files: &InClusterFiles,
    insecure: bool,
    reload: Duration,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Endpoint, CredentialsError> {
    let host = env("KUBERNETES_SERVICE_HOST")
        .filter(|h| !h.is_empty())
        .ok_or(CredentialsError::NotInCluster)?;
    let port = env("KUBERNETES_SERVICE_PORT")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "443".into());
    Ok(Endpoint {
        base_url: in_cluster_url(&host, &port)?,
        ca_pem: Some(read("CA file", &files.ca_file)?),
        identity_pem: None,
        auth: Some(AuthSource::file(files.token_file.clone(), reload)),
        insecure_skip_tls_verify: insecure,
        proxy_url: None,
    })
}

fn from_kubeconfig(
    paths: &[PathBuf],
    context: Option<&str>,
    insecure: bool,
    reload: Duration,
) -> Result<Endpoint, CredentialsError> {
    let ctx = kubeconfig::load(paths, context)?;
    let base_url = Url::parse(&ctx.server)
        .map_err(|_| CredentialsError::BadAddress(crate::redact::url(&ctx.server)))?;
    if crate::redact::has_credentials(&ctx.server) {
        return Err(CredentialsError::CredentialsInServer(crate::redact::url(
            &ctx.server,
        )));
    }
    let proxy_url = ctx
        .proxy_url
        .as_deref()
        .map(|p| {
            Url::parse(p)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https" | "socks5" | "socks5h"))
                .ok_or_else(|| CredentialsError::BadProxy(crate::redact::url(p)))
        })
        .transpose()?;
    // A static token wins over a plugin, as in client-go.
    let auth = match (ctx.token, ctx.token_file, ctx.exec) {
        (Some(t), _, _) => Some(AuthSource::fixed(t)),
        (None, Some(p), _) => Some(AuthSource::file(p, reload)),
        (None, None, Some(exec)) => Some(AuthSource::exec(ExecPlugin::new(
            exec,
            ClusterInfo {
                server: ctx.server.clone(),
                ca_pem: ctx.ca_pem.clone(),
                insecure_skip_tls_verify: ctx.insecure_skip_tls_verify,
            },
        ))),
        (None, None, None) => None,
    };
    Ok(Endpoint {
        base_url,
        ca_pem: ctx.ca_pem,
        identity_pem: ctx.client_identity_pem,
        auth,
        insecure_skip_tls_verify: insecure || ctx.insecure_skip_tls_verify,
        proxy_url,
    })
}

/// `https://host:port`, with an IPv6 host in brackets as `rest.InClusterConfig` does.
fn in_cluster_url(host: &str, port: &str) -> Result<Url, CredentialsError> {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let text = format!("https://{host}:{port}");
    Url::parse(&text).map_err(|_| CredentialsError::BadAddress(text))
}

fn read(what: &'static str, path: &PathBuf) -> Result<Vec<u8>, CredentialsError> {
    std::fs::read(path).map_err(|source| CredentialsError::Read {
        what,
        path: path.clone(),
        source,
    })
}

/// What to present on one request: a bearer token and/or a client certificate that replaces the
/// one the client was built with.
#[derive(Default)]
pub(crate) struct Credential {
    pub(crate) token: Option<Arc<str>>,
    /// Certificate and key PEM from an exec plugin; the same `Arc` until the plugin runs again.
    pub(crate) identity_pem: Option<Arc<[u8]>>,
}

/// Where request credentials come from: a fixed token, a token file that may be rewritten at any
/// time, or an exec plugin.
///
/// Its `Debug` never shows a credential.
pub(crate) struct AuthSource {
    kind: AuthKind,
}

enum AuthKind {
    Fixed(Arc<str>),
    File {
        path: PathBuf,
        reload_interval: Duration,
        cached: Mutex<Option<(Arc<str>, Instant)>>,
    },
    Exec(ExecPlugin),
}

impl std::fmt::Debug for AuthSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            AuthKind::Fixed(_) => f.write_str("AuthSource::Fixed(<redacted>)"),
            AuthKind::File { path, .. } => write!(f, "AuthSource::File({path:?})"),
            AuthKind::Exec(plugin) => write!(f, "AuthSource::Exec({plugin:?})"),
        }
    }
}

impl AuthSource {
    pub(crate) fn fixed(token: impl Into<Arc<str>>) -> AuthSource {
        AuthSource {
            kind: AuthKind::Fixed(token.into()),
        }
    }

    pub(crate) fn file(path: PathBuf, reload_interval: Duration) -> AuthSource {
        AuthSource {
            kind: AuthKind::File {
                path,
                reload_interval,
                cached: Mutex::new(None),
            },
        }
    }

    pub(crate) fn exec(plugin: ExecPlugin) -> AuthSource {
        AuthSource {
            kind: AuthKind::Exec(plugin),
        }
    }

    /// The credential to send now: the cached one while it is fresh, else the file's content or
    /// the plugin's new answer.
    pub(crate) async fn current(&self) -> Result<Credential, CredentialsError> {
        match &self.kind {
            AuthKind::Fixed(t) => Ok(Credential {
                token: Some(t.clone()),
                identity_pem: None,
            }),
            AuthKind::File {
                path,
                reload_interval,
                cached,
            } => Ok(Credential {
                token: Some(file_token(path, *reload_interval, cached)?),
                identity_pem: None,
            }),
            AuthKind::Exec(plugin) => {
                let issued = plugin.current().await?;
                Ok(Credential {
                    token: issued.token,
                    identity_pem: issued.identity_pem,
                })
            }
        }
    }

    /// Forgets the cached credential, so the next request reads the file or runs the plugin
    /// again (after a 401).
    pub(crate) async fn invalidate(&self) {
        match &self.kind {
            AuthKind::Fixed(_) => {}
            AuthKind::File { cached, .. } => {
                *cached
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
            }
            AuthKind::Exec(plugin) => plugin.invalidate().await,
        }
    }
}

fn file_token(
    path: &PathBuf,
    reload_interval: Duration,
    cached: &Mutex<Option<(Arc<str>, Instant)>>,
) -> Result<Arc<str>, CredentialsError> {
    let mut cached = cached
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((token, read_at)) = cached.as_ref() {
        if read_at.elapsed() < reload_interval {
            return Ok(token.clone());
        }
    }
    let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
        what: "token file",
        path: path.clone(),
        source,
    })?;
    let token: Arc<str> = text.trim().into();
    *cached = Some((token.clone(), Instant::now()));
    Ok(token)
}

#[cfg(test)]
mod tests;
