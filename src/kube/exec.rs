//! Exec credential plugins (`client.authentication.k8s.io/v1` and `v1beta1`): the way EKS
//! (`aws eks get-token`), GKE (`gke-gcloud-auth-plugin`), AKS (`kubelogin`) and OIDC helpers hand
//! out short-lived credentials to kubectl.
//!
//! The plugin runs with the kubeconfig's args and env, plus `KUBERNETES_EXEC_INFO` describing the
//! request (never interactive: a daemon has no terminal). Its `ExecCredential` answer — a bearer
//! token, or a client certificate and key — is cached until its `expirationTimestamp` and dropped
//! after a 401, as client-go does, so the plugin runs once per credential lifetime and not once
//! per request. Neither the credential nor the plugin's output is ever logged.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// A plugin that has not answered within this time is killed; the request fails and is retried
/// with the watch's backoff. Cloud CLIs answer in a second or two, even when they refresh.
const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of the plugin's stderr an error quotes: enough for its message, bounded.
const MAX_STDERR_EXCERPT: usize = 512;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecError {
    #[error("exec credential plugin {command:?} not found{hint}")]
    NotFound { command: String, hint: String },
    #[error("running exec credential plugin {command:?}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("exec credential plugin {command:?} did not answer within {EXEC_TIMEOUT:?}")]
    Timeout { command: String },
    #[error("exec credential plugin {command:?} failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("exec credential plugin {command:?} printed an invalid ExecCredential: {problem}")]
    BadOutput { command: String, problem: String },
}

/// The API versions of the exec protocol kube2nats speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExecApiVersion {
    V1,
    V1beta1,
}

impl ExecApiVersion {
    fn as_str(self) -> &'static str {
        match self {
            ExecApiVersion::V1 => "client.authentication.k8s.io/v1",
            ExecApiVersion::V1beta1 => "client.authentication.k8s.io/v1beta1",
        }
    }
}

/// A user's `exec` section, validated. Its `Debug` shows the env's names, not their values.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ExecConfig {
    pub(crate) api_version: ExecApiVersion,
    /// The program: a name looked up in `PATH`, or a path (made absolute against the kubeconfig's
    /// directory when it was relative).
    pub(crate) command: OsString,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) install_hint: Option<String>,
    /// Pass the cluster's server and CA to the plugin in `KUBERNETES_EXEC_INFO`.
    pub(crate) provide_cluster_info: bool,
}

impl std::fmt::Debug for ExecConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env_names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ExecConfig")
            .field("api_version", &self.api_version)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &env_names)
            .finish()
    }
}

/// The `exec` section as a kubeconfig spells it.
#[derive(Debug, Deserialize)]
pub(crate) struct RawExecConfig {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Option<Vec<EnvVar>>,
    #[serde(rename = "interactiveMode", default)]
    interactive_mode: Option<String>,
    #[serde(rename = "installHint", default)]
    install_hint: Option<String>,
    #[serde(rename = "provideClusterInfo", default)]
    provide_cluster_info: bool,
}

#[derive(Debug, Deserialize)]
struct EnvVar {
    name: String,
    #[serde(default)]
    value: String,
}

impl ExecConfig {
    /// Validates a kubeconfig's `exec` section; `dir` is the kubeconfig's directory. The problem
    /// is a phrase naming the field.
    pub(crate) fn from_raw(raw: &RawExecConfig, dir: &Path) -> Result<ExecConfig, String> {
        let api_version = match raw.api_version.as_str() {
            "client.authentication.k8s.io/v1" => ExecApiVersion::V1,
            "client.authentication.k8s.io/v1beta1" => ExecApiVersion::V1beta1,
            other => {
                return Err(format!(
                    "exec.apiVersion {other:?} is not supported (allowed: client.authentication.k8s.io/v1, client.authentication.k8s.io/v1beta1)"
                ))
            }
        };
        if raw.command.is_empty() {
            return Err("exec.command is empty".into());
        }
        // v1 requires the field; v1beta1 defaults to IfAvailable. A daemon is never interactive,
        // so only a plugin that insists on a terminal is refused.
        match (api_version, raw.interactive_mode.as_deref()) {
            (_, Some("Never" | "IfAvailable")) | (ExecApiVersion::V1beta1, None) => {}
            (_, Some("Always")) => {
                return Err("exec.interactiveMode is Always: the plugin needs a terminal, which a daemon does not have".into())
            }
            (ExecApiVersion::V1, None) => return Err("exec.interactiveMode is required by client.authentication.k8s.io/v1".into()),
            (_, Some(other)) => return Err(format!("exec.interactiveMode {other:?} is not one of Never, IfAvailable, Always")),
        }
        // As kubectl: a command with a path separator is a path relative to the kubeconfig.
        let command = if raw.command.contains('/') {
            dir.join(&raw.command).into_os_string()
        } else {
            OsString::from(&raw.command)
        };
        Ok(ExecConfig {
            api_version,
            command,
            args: raw.args.clone(),
            env: raw
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone()))
                .collect(),
            install_hint: raw.install_hint.clone().filter(|h| !h.is_empty()),
            provide_cluster_info: raw.provide_cluster_info,
        })
    }
}

/// The cluster as `KUBERNETES_EXEC_INFO` describes it to a plugin that asked for it.
#[derive(Debug, Clone)]
pub(crate) struct ClusterInfo {
    pub(crate) server: String,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) insecure_skip_tls_verify: bool,
}

/// What one run of the plugin handed out. Its `Debug` never shows the secrets.
#[derive(Clone)]
pub(crate) struct Issued {
    pub(crate) token: Option<Arc<str>>,
    /// Client certificate and key PEM, concatenated; a new `Arc` per run, so a client can tell
    /// a fresh certificate from the one it already uses.
    pub(crate) identity_pem: Option<Arc<[u8]>>,
    /// `None`: valid until the server answers 401.
    pub(crate) expires: Option<SystemTime>,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field(
                "identity",
                &self.identity_pem.as_ref().map(|_| "<redacted>"),
            )
            .field("expires", &self.expires)
            .finish()
    }
}

impl Issued {
    fn is_fresh(&self, now: SystemTime) -> bool {
        self.expires.is_none_or(|at| now < at)
    }
}

/// One plugin and its cached answer, shared by every request of the client.
#[derive(Debug)]
pub(crate) struct ExecPlugin {
    config: ExecConfig,
    cluster: ClusterInfo,
    /// An async mutex: requests that need a credential while the plugin runs wait for its answer
    /// instead of starting it again.
    cached: tokio::sync::Mutex<Option<Issued>>,
}

impl ExecPlugin {
    pub(crate) fn new(config: ExecConfig, cluster: ClusterInfo) -> ExecPlugin {
        ExecPlugin {
            config,
            cluster,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The cached credential while it has not expired, else a fresh one from the plugin.
    pub(crate) async fn current(&self) -> Result<Issued, ExecError> {
        let mut cached = self.cached.lock().await;
        if let Some(issued) = cached.as_ref().filter(|i| i.is_fresh(SystemTime::now())) {
            return Ok(issued.clone());
        }
        let issued = self.run().await?;
        *cached = Some(issued.clone());
        Ok(issued)
    }

    /// Forgets the cached credential (after a 401), so the next request runs the plugin again.
    pub(crate) async fn invalidate(&self) {
        *self.cached.lock().await = None;
    }

    fn command_name(&self) -> String {
        self.config.command.to_string_lossy().into_owned()
    }

    async fn run(&self) -> Result<Issued, ExecError> {
        let command = self.command_name();
        tracing::debug!(command = %command, "running the exec credential plugin");
        let mut cmd = tokio::process::Command::new(&self.config.command);
        cmd.args(&self.config.args)
            .envs(self.config.env.iter().map(|(k, v)| (k, v)))
            .env("KUBERNETES_EXEC_INFO", self.exec_info().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => ExecError::NotFound {
                command: command.clone(),
                hint: self
                    .config
                    .install_hint
                    .as_ref()
                    .map(|h| format!(": {}", h.trim()))
                    .unwrap_or_default(),
            },
            _ => ExecError::Spawn {
                command: command.clone(),
                source,
            },
        })?;
        let output = tokio::time::timeout(EXEC_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| ExecError::Timeout {
                command: command.clone(),
            })?
            .map_err(|source| ExecError::Spawn {
                command: command.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(ExecError::Failed {
                command,
                status: output.status,
                stderr: stderr_excerpt(&output.stderr),
            });
        }
        parse_credential(&output.stdout, self.config.api_version)
            .map_err(|problem| ExecError::BadOutput { command, problem })
    }

    /// `KUBERNETES_EXEC_INFO`: an `ExecCredential` whose spec says the run is not interactive
    /// and, when the kubeconfig asks for it, which cluster the credential is for.
    fn exec_info(&self) -> serde_json::Value {
        let mut spec = serde_json::json!({ "interactive": false });
        if self.config.provide_cluster_info {
            let mut cluster = serde_json::json!({
                "server": self.cluster.server,
                "insecure-skip-tls-verify": self.cluster.insecure_skip_tls_verify,
            });
            if let Some(ca) = &self.cluster.ca_pem {
                use base64::Engine;
                cluster["certificate-authority-data"] =
                    base64::engine::general_purpose::STANDARD.encode(ca).into();
            }
            spec["cluster"] = cluster;
        }
        serde_json::json!({
            "apiVersion": self.config.api_version.as_str(),
            "kind": "ExecCredential",
            "spec": spec,
        })
    }
}

fn stderr_excerpt(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(&stderr[..stderr.len().min(MAX_STDERR_EXCERPT)]);
    let text = text.trim();
    if text.is_empty() {
        "no output on stderr".into()
    } else {
        text.to_owned()
    }
}

#[derive(Deserialize)]
struct ExecCredential {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    status: Option<ExecCredentialStatus>,
}

#[derive(Deserialize)]
struct ExecCredentialStatus {
    token: Option<String>,
    #[serde(rename = "clientCertificateData")]
    client_certificate_data: Option<String>,
    #[serde(rename = "clientKeyData")]
    client_key_data: Option<String>,
    #[serde(rename = "expirationTimestamp")]
    expiration_timestamp: Option<String>,
}

/// Reads the plugin's stdout. The problem is a phrase naming the field; it never quotes the
/// output, which holds the secret.
fn parse_credential(stdout: &[u8], expected: ExecApiVersion) -> Result<Issued, String> {
    let credential: ExecCredential =
        serde_json::from_slice(stdout).map_err(|e| format!("not JSON ({})", e.classify_name()))?;
    if credential.kind != "ExecCredential" {
        return Err(format!("kind is {:?}, not ExecCredential", credential.kind));
    }
    if credential.api_version != expected.as_str() {
        return Err(format!(
            "apiVersion is {:?}, the kubeconfig asked for {:?}",
            credential.api_version,
            expected.as_str()
        ));
    }
    let status = credential.status.ok_or("status is missing")?;
    let token = status.token.filter(|t| !t.is_empty()).map(Arc::from);
    let identity_pem = match (status.client_certificate_data, status.client_key_data) {
        (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => {
            Some(Arc::from(format!("{cert}\n{key}").into_bytes()))
        }
        (None, None) => None,
        _ => return Err("status has only one of clientCertificateData and clientKeyData".into()),
    };
    if token.is_none() && identity_pem.is_none() {
        return Err("status has neither token nor clientCertificateData/clientKeyData".into());
    }
    let expires = status
        .expiration_timestamp
        .filter(|t| !t.is_empty())
        .map(|t| {
            humantime::parse_rfc3339_weak(&t)
                .map_err(|e| format!("status.expirationTimestamp {t:?}: {e}"))
        })
        .transpose()?;
    Ok(Issued {
        token,
        identity_pem,
        expires,
    })
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    /// The kind of a JSON error without its position's text: a serde message can quote input.
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected field types",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Issued, String> {
        parse_credential(json.as_bytes(), ExecApiVersion::V1)
    }

    #[test]
    fn token_with_expiry() {
        let issued = parse(r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"s3cret","expirationTimestamp":"2030-01-02T03:04:05Z"}}"#).unwrap();
        assert_eq!(issued.token.as_deref(), Some("s3cret"));
        let at = humantime::parse_rfc3339("2030-01-02T03:04:05Z").unwrap();
        assert_eq!(issued.expires, Some(at));
        assert!(issued.is_fresh(at - Duration::from_secs(1)));
        assert!(!issued.is_fresh(at));
        assert!(!format!("{issued:?}").contains("s3cret"));
    }

    #[test]
    fn client_certificate_without_expiry() {
        let issued = parse(r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"CERT","clientKeyData":"KEY"}}"#).unwrap();
        assert_eq!(issued.identity_pem.as_deref(), Some(&b"CERT\nKEY"[..]));
        assert!(issued.token.is_none());
        assert!(issued.is_fresh(SystemTime::now()));
    }

    #[test]
    fn bad_answers_name_the_field_and_never_quote_the_secret() {
        let cases = [
            (
                r#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"s3cret"}}"#,
                "apiVersion",
            ),
            (
                r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#,
                "status is missing",
            ),
            (
                r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientKeyData":"s3cret"}}"#,
                "only one of",
            ),
            (
                r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"s3cret","expirationTimestamp":"soon"}}"#,
                "expirationTimestamp",
            ),
            ("token: s3cret", "not JSON"),
        ];
        for (json, expected) in cases {
            let problem = parse(json).unwrap_err();
            assert!(problem.contains(expected), "{json}: {problem}");
            assert!(!problem.contains("s3cret"), "{problem}");
        }
    }

    #[test]
    fn interactive_mode_rules() {
        let raw = |version: &str, mode: Option<&str>| RawExecConfig {
            api_version: version.into(),
            command: "get-token".into(),
            args: vec![],
            env: None,
            interactive_mode: mode.map(str::to_owned),
            install_hint: None,
            provide_cluster_info: false,
        };
        let v1 = "client.authentication.k8s.io/v1";
        let v1beta1 = "client.authentication.k8s.io/v1beta1";
        let dir = Path::new("/k");
        assert!(ExecConfig::from_raw(&raw(v1, Some("Never")), dir).is_ok());
        assert!(ExecConfig::from_raw(&raw(v1beta1, None), dir).is_ok());
        assert!(ExecConfig::from_raw(&raw(v1, None), dir)
            .unwrap_err()
            .contains("required"));
        assert!(ExecConfig::from_raw(&raw(v1, Some("Always")), dir)
            .unwrap_err()
            .contains("terminal"));
        assert!(
            ExecConfig::from_raw(&raw("client.authentication.k8s.io/v1alpha1", None), dir)
                .unwrap_err()
                .contains("not supported")
        );
    }
}
