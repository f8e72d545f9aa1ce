//! Where the API server is and who kube2nats is to it: in-cluster service account, an explicit URL,
//! or a kubeconfig, resolved once at start into an [`Endpoint`].
//!
//! Bound service-account tokens expire (an hour by default) and the kubelet rewrites the file
//! before then, so a file token is never cached for long: [`TokenSource`] re-reads it every
//! `token_reload_interval` and right after a 401.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use url::Url;

use super::kubeconfig::{self, KubeconfigError};
use crate::config::{ApiSource, KubernetesConfig};

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("not running in a cluster: KUBERNETES_SERVICE_HOST is not set (set kubernetes.api_url or kubernetes.kubeconfig to run outside a cluster)")]
    NotInCluster,
    #[error("invalid API server address {0:?}")]
    BadAddress(String),
    #[error("reading {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error("invalid TLS material ({what}): {source}")]
    Tls {
        what: &'static str,
        source: reqwest::Error,
    },
}

/// Everything needed to build the HTTP client. Its `Debug` shows no key material.
pub struct Endpoint {
    pub base_url: Url,
    /// PEM bundle of the CAs to trust; `None` trusts the public web PKI roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key PEM.
    pub identity_pem: Option<Vec<u8>>,
    pub token: Option<TokenSource>,
    pub insecure_skip_tls_verify: bool,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |pem: &Option<Vec<u8>>| pem.as_ref().map(|_| "<redacted>");
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url.as_str())
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| p.len()))
            .field("identity_pem", &shown(&self.identity_pem))
            .field("token", &self.token)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .finish()
    }
}

/// Resolves the configured [`ApiSource`]. `env` reads the process environment (a closure so
/// tests need not touch it).
pub fn resolve(
    cfg: &KubernetesConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Endpoint, CredentialsError> {
    let reload = cfg.token_reload_interval;
    match &cfg.source {
        ApiSource::InCluster {
            token_file,
            ca_file,
            ..
        } => {
            let host = env("KUBERNETES_SERVICE_HOST")
                .filter(|h| !h.is_empty())
                .ok_or(CredentialsError::NotInCluster)?;
            let port = env("KUBERNETES_SERVICE_PORT")
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "443".into());
            let base_url = in_cluster_url(&host, &port)?;
            Ok(Endpoint {
                base_url,
                ca_pem: Some(read("CA file", ca_file)?),
                identity_pem: None,
                token: Some(TokenSource::file(token_file.clone(), reload)),
                insecure_skip_tls_verify: cfg.insecure_skip_tls_verify,
            })
        }
        ApiSource::Url {
            url,
            token_file,
            ca_file,
        } => Ok(Endpoint {
            base_url: url.clone(),
            ca_pem: ca_file.as_ref().map(|p| read("CA file", p)).transpose()?,
            identity_pem: None,
            token: token_file
                .as_ref()
                .map(|p| TokenSource::file(p.clone(), reload)),
            insecure_skip_tls_verify: cfg.insecure_skip_tls_verify,
        }),
        ApiSource::Kubeconfig { path, context } => {
            let ctx = kubeconfig::load(path, context.as_deref())?;
            let base_url = Url::parse(&ctx.server)
                .map_err(|_| CredentialsError::BadAddress(ctx.server.clone()))?;
            let token = match (ctx.token, ctx.token_file) {
                (Some(t), _) => Some(TokenSource::fixed(t)),
                (None, Some(p)) => Some(TokenSource::file(p, reload)),
                (None, None) => None,
            };
            Ok(Endpoint {
                base_url,
                ca_pem: ctx.ca_pem,
                identity_pem: ctx.client_identity_pem,
                token,
                insecure_skip_tls_verify: cfg.insecure_skip_tls_verify
                    || ctx.insecure_skip_tls_verify,
            })
        }
    }
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

/// A bearer token, fixed or read from a file that may be rewritten at any time.
///
/// Its `Debug` never shows the token.
pub struct TokenSource {
    kind: TokenKind,
}

enum TokenKind {
    Fixed(Arc<str>),
    File {
        path: PathBuf,
        reload_interval: Duration,
        cached: Mutex<Option<(Arc<str>, Instant)>>,
    },
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            TokenKind::Fixed(_) => f.write_str("TokenSource::Fixed(<redacted>)"),
            TokenKind::File { path, .. } => write!(f, "TokenSource::File({path:?})"),
        }
    }
}

impl TokenSource {
    pub fn fixed(token: impl Into<Arc<str>>) -> TokenSource {
        TokenSource {
            kind: TokenKind::Fixed(token.into()),
        }
    }

    pub fn file(path: PathBuf, reload_interval: Duration) -> TokenSource {
        TokenSource {
            kind: TokenKind::File {
                path,
                reload_interval,
                cached: Mutex::new(None),
            },
        }
    }

    /// The token to send now: the cached one while it is fresh, else the file's content.
    pub fn current(&self) -> Result<Arc<str>, CredentialsError> {
        match &self.kind {
            TokenKind::Fixed(t) => Ok(t.clone()),
            TokenKind::File {
                path,
                reload_interval,
                cached,
            } => {
                let mut cached = cached
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some((token, read_at)) = cached.as_ref() {
                    if read_at.elapsed() < *reload_interval {
                        return Ok(token.clone());
                    }
                }
                let text =
                    std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
                        what: "token file",
                        path: path.clone(),
                        source,
                    })?;
                let token: Arc<str> = text.trim().into();
                *cached = Some((token.clone(), Instant::now()));
                Ok(token)
            }
        }
    }

    /// Forgets the cached token, so the next request reads the file again (after a 401).
    pub fn invalidate(&self) {
        if let TokenKind::File { cached, .. } = &self.kind {
            *cached
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_cluster_ipv6_host_is_bracketed() {
        assert_eq!(
            in_cluster_url("fd00::1", "443").unwrap().as_str(),
            "https://[fd00::1]/"
        );
        assert_eq!(
            in_cluster_url("10.0.0.1", "6443").unwrap().as_str(),
            "https://10.0.0.1:6443/"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn file_token_is_reread_after_the_interval_and_after_invalidate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one\n").unwrap();
        let source = TokenSource::file(path.clone(), Duration::from_secs(60));
        assert_eq!(&*source.current().unwrap(), "one");
        std::fs::write(&path, "two").unwrap();
        assert_eq!(
            &*source.current().unwrap(),
            "one",
            "cached within the interval"
        );
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(&*source.current().unwrap(), "two");
        std::fs::write(&path, "three").unwrap();
        source.invalidate();
        assert_eq!(&*source.current().unwrap(), "three");
        assert!(!format!("{source:?}").contains("three"));
    }

    /// `Debug` of an endpoint shows neither the token nor the client key.
    #[test]
    fn endpoint_debug_shows_no_secret() {
        let endpoint = Endpoint {
            base_url: Url::parse("https://k8s:6443").unwrap(),
            ca_pem: Some(b"CA".to_vec()),
            identity_pem: Some(b"-----BEGIN PRIVATE KEY----- k3y".to_vec()),
            token: Some(TokenSource::fixed("t0ken")),
            insecure_skip_tls_verify: false,
        };
        let shown = format!("{endpoint:?}");
        assert!(
            !shown.contains("k3y") && !shown.contains("PRIVATE") && !shown.contains("t0ken"),
            "{shown}"
        );
        assert!(shown.contains("https://k8s:6443"));
    }
}
