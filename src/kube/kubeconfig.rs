//! Reading a kubeconfig file (the format `kubectl` uses) for running outside the cluster.
//!
//! Supports what a daemon can use unattended: server URL, CA (file or inline data),
//! `insecure-skip-tls-verify`, bearer token (inline or file) and client certificates. Exec and
//! auth-provider plugins need interactive tooling and are refused with a clear error.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("reading kubeconfig {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing kubeconfig {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    #[error("kubeconfig has no context {0:?}")]
    NoContext(String),
    #[error("kubeconfig has no current-context; set kubernetes.context")]
    NoCurrentContext,
    #[error("kubeconfig context {context:?} names cluster {cluster:?}, which is not defined")]
    NoCluster { context: String, cluster: String },
    #[error("kubeconfig context {context:?} names user {user:?}, which is not defined")]
    NoUser { context: String, user: String },
    #[error("kubeconfig user {0:?} uses an exec or auth-provider plugin, which kube2nats does not run; use a token or client certificate")]
    UnsupportedAuth(String),
    #[error("kubeconfig field {field}: invalid base64")]
    Base64 { field: &'static str },
}

/// The parts of one kubeconfig context that kube2nats uses. Its `Debug` shows no secret.
#[derive(Clone, PartialEq, Eq)]
pub struct KubeconfigContext {
    pub server: String,
    pub ca_pem: Option<Vec<u8>>,
    pub insecure_skip_tls_verify: bool,
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
    /// Client certificate and key PEM, concatenated as reqwest's `Identity` wants them.
    pub client_identity_pem: Option<Vec<u8>>,
    pub namespace: Option<String>,
}

impl std::fmt::Debug for KubeconfigContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |present: bool| present.then_some("<redacted>");
        f.debug_struct("KubeconfigContext")
            .field("server", &self.server)
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("token", &redacted(self.token.is_some()))
            .field("token_file", &self.token_file)
            .field(
                "client_identity_pem",
                &redacted(self.client_identity_pem.is_some()),
            )
            .field("namespace", &self.namespace)
            .finish()
    }
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize)]
struct Cluster {
    server: String,
    #[serde(rename = "certificate-authority")]
    certificate_authority: Option<PathBuf>,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    #[serde(rename = "client-certificate")]
    client_certificate: Option<PathBuf>,
    #[serde(rename = "client-certificate-data")]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key")]
    client_key: Option<PathBuf>,
    #[serde(rename = "client-key-data")]
    client_key_data: Option<String>,
    exec: Option<serde_yaml::Value>,
    #[serde(rename = "auth-provider")]
    auth_provider: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    user: String,
    namespace: Option<String>,
}

/// Loads `context` (or the current context) from the kubeconfig at `path`. Relative file paths
/// inside the kubeconfig are relative to its directory, as kubectl resolves them.
pub fn load(path: &Path, context: Option<&str>) -> Result<KubeconfigContext, KubeconfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| KubeconfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let file: File = serde_yaml::from_str(&text).map_err(|source| KubeconfigError::Parse {
        path: path.to_owned(),
        source,
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let context_name = match context {
        Some(c) => c.to_owned(),
        None => file
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or(KubeconfigError::NoCurrentContext)?,
    };
    let ctx = file
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .map(|c| &c.context)
        .ok_or_else(|| KubeconfigError::NoContext(context_name.clone()))?;
    let cluster = file
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .map(|c| &c.cluster)
        .ok_or_else(|| KubeconfigError::NoCluster {
            context: context_name.clone(),
            cluster: ctx.cluster.clone(),
        })?;
    let user = file
        .users
        .iter()
        .find(|u| u.name == ctx.user)
        .map(|u| &u.user)
        .ok_or_else(|| KubeconfigError::NoUser {
            context: context_name.clone(),
            user: ctx.user.clone(),
        })?;
    if user.exec.is_some() || user.auth_provider.is_some() {
        return Err(KubeconfigError::UnsupportedAuth(ctx.user.clone()));
    }
    let read = |p: &PathBuf| {
        let p = dir.join(p);
        std::fs::read(&p).map_err(|source| KubeconfigError::Read { path: p, source })
    };
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(base64_field(data, "certificate-authority-data")?),
        (None, Some(file)) => Some(read(file)?),
        (None, None) => None,
    };
    let cert = match (&user.client_certificate_data, &user.client_certificate) {
        (Some(data), _) => Some(base64_field(data, "client-certificate-data")?),
        (None, Some(file)) => Some(read(file)?),
        (None, None) => None,
    };
    let key = match (&user.client_key_data, &user.client_key) {
        (Some(data), _) => Some(base64_field(data, "client-key-data")?),
        (None, Some(file)) => Some(read(file)?),
        (None, None) => None,
    };
    let client_identity_pem = match (cert, key) {
        (Some(mut cert), Some(key)) => {
            cert.push(b'\n');
            cert.extend_from_slice(&key);
            Some(cert)
        }
        _ => None,
    };
    Ok(KubeconfigContext {
        server: cluster.server.clone(),
        ca_pem,
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
        token: user.token.clone(),
        token_file: user.token_file.as_ref().map(|p| dir.join(p)),
        client_identity_pem,
        namespace: ctx.namespace.clone(),
    })
}

fn base64_field(data: &str, field: &'static str) -> Result<Vec<u8>, KubeconfigError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|_| KubeconfigError::Base64 { field })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Y2EtcGVt
- name: prod-cluster
  cluster:
    server: https://prod:6443
    certificate-authority: ca.crt
users:
- name: dev-user
  user:
    token: abc
- name: prod-user
  user:
    tokenFile: token
- name: exec-user
  user:
    exec:
      command: aws
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: team}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
- name: cloud
  context: {cluster: dev-cluster, user: exec-user}
"#;

    fn write(dir: &Path) -> PathBuf {
        let path = dir.join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        std::fs::write(dir.join("ca.crt"), "prod-ca").unwrap();
        path
    }

    #[test]
    fn current_context_with_inline_data() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = load(&write(dir.path()), None).unwrap();
        assert_eq!(ctx.server, "https://127.0.0.1:6443");
        assert_eq!(ctx.ca_pem.as_deref(), Some(&b"ca-pem"[..]));
        assert_eq!(ctx.token.as_deref(), Some("abc"));
        assert_eq!(ctx.namespace.as_deref(), Some("team"));
    }

    #[test]
    fn named_context_resolves_files_relative_to_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = load(&write(dir.path()), Some("prod")).unwrap();
        assert_eq!(ctx.ca_pem.as_deref(), Some(&b"prod-ca"[..]));
        assert_eq!(ctx.token_file, Some(dir.path().join("token")));
    }

    #[test]
    fn unknown_context_and_exec_plugins_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path());
        assert!(load(&path, Some("nope"))
            .unwrap_err()
            .to_string()
            .contains("no context \"nope\""));
        assert!(load(&path, Some("cloud"))
            .unwrap_err()
            .to_string()
            .contains("exec"));
    }

    /// `Debug` of a context shows neither its token nor its client key.
    #[test]
    fn context_debug_shows_no_secret() {
        let context = KubeconfigContext {
            server: "https://k8s".into(),
            ca_pem: None,
            insecure_skip_tls_verify: false,
            token: Some("t0ken".into()),
            token_file: None,
            client_identity_pem: Some(b"k3y".to_vec()),
            namespace: None,
        };
        let shown = format!("{context:?}");
        assert!(
            !shown.contains("t0ken") && !shown.contains("k3y"),
            "{shown}"
        );
    }
}
