//! Reading kubeconfig files (the format `kubectl` uses) for running outside the cluster.
//!
//! Several files (`$KUBECONFIG=a:b`) merge as kubectl merges them: the first file to define a
//! cluster, user or context name wins, and `current-context` comes from the first file that sets
//! it. Paths inside a file are relative to that file's directory.
//!
//! Supports what a daemon can use unattended: server URL, CA (file or inline data),
//! `insecure-skip-tls-verify`, `proxy-url`, bearer token (inline or file), client certificates
//! and exec credential plugins (run by [`super::exec`]). The removed `auth-provider` plugins are
//! refused with a clear error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use super::exec::{ExecConfig, RawExecConfig};

#[derive(Debug, thiserror::Error)]
pub(crate) enum KubeconfigError {
    #[error("reading kubeconfig {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing kubeconfig {path}: {source}")]
    Parse {
        path: PathBuf,
        // Boxed: the parser's error is ~130 bytes, and every `Result` carrying this error would
        // grow to that size.
        source: Box<serde_saphyr::Error>,
    },
    #[error("none of the kubeconfig files {0:?} exists")]
    NoFile(Vec<PathBuf>),
    #[error("kubeconfig has no context {0:?}")]
    NoContext(String),
    #[error("kubeconfig has no current-context; set kubernetes.context")]
    NoCurrentContext,
    #[error("kubeconfig context {context:?} names cluster {cluster:?}, which is not defined")]
    NoCluster { context: String, cluster: String },
    #[error("kubeconfig context {context:?} names user {user:?}, which is not defined")]
    NoUser { context: String, user: String },
    #[error("kubeconfig user {0:?} uses an auth-provider plugin, which kubectl itself no longer runs; use its exec credential plugin instead")]
    AuthProvider(String),
    #[error("kubeconfig user {user:?}: {problem}")]
    Exec { user: String, problem: String },
    #[error("kubeconfig field {field}: invalid base64")]
    Base64 { field: &'static str },
}

/// The parts of one kubeconfig context that kube2nats uses. Its `Debug` shows no secret.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KubeconfigContext {
    pub(crate) server: String,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) insecure_skip_tls_verify: bool,
    /// `proxy-url` of the cluster: http, https or socks5.
    pub(crate) proxy_url: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) token_file: Option<PathBuf>,
    /// Client certificate and key PEM, concatenated as reqwest's `Identity` wants them.
    pub(crate) client_identity_pem: Option<Vec<u8>>,
    /// The user's exec credential plugin, with relative command paths already resolved.
    pub(crate) exec: Option<ExecConfig>,
    pub(crate) namespace: Option<String>,
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
            .field("proxy_url", &redacted(self.proxy_url.is_some()))
            .field("exec", &self.exec)
            .field("namespace", &self.namespace)
            .finish()
    }
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context")]
    value: T,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
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
    #[serde(rename = "proxy-url")]
    proxy_url: Option<String>,
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
    exec: Option<RawExecConfig>,
    #[serde(rename = "auth-provider")]
    auth_provider: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    user: String,
    namespace: Option<String>,
}

/// An entry of the merged view, with the directory its relative paths are resolved against.
struct Entry<'a, T> {
    value: &'a T,
    dir: &'a Path,
}

/// Every file's entries merged, first definition of a name winning.
struct Merged<'a> {
    current_context: Option<&'a str>,
    clusters: HashMap<&'a str, Entry<'a, Cluster>>,
    users: HashMap<&'a str, Entry<'a, User>>,
    contexts: HashMap<&'a str, &'a Context>,
}

/// Loads `context` (or the current context) from the kubeconfig files `paths`, merged in order.
/// Files that do not exist are skipped, as kubectl skips them in `$KUBECONFIG`; at least one
/// must exist.
pub(crate) fn load(
    paths: &[PathBuf],
    context: Option<&str>,
) -> Result<KubeconfigContext, KubeconfigError> {
    let files = read_files(paths)?;
    let merged = merge(&files);
    let context_name = match context {
        Some(c) => c,
        None => merged
            .current_context
            .ok_or(KubeconfigError::NoCurrentContext)?,
    };
    let ctx = merged
        .contexts
        .get(context_name)
        .ok_or_else(|| KubeconfigError::NoContext(context_name.to_owned()))?;
    let cluster =
        merged
            .clusters
            .get(ctx.cluster.as_str())
            .ok_or_else(|| KubeconfigError::NoCluster {
                context: context_name.to_owned(),
                cluster: ctx.cluster.clone(),
            })?;
    let user = merged
        .users
        .get(ctx.user.as_str())
        .ok_or_else(|| KubeconfigError::NoUser {
            context: context_name.to_owned(),
            user: ctx.user.clone(),
        })?;
    let mut resolved = resolve_cluster(cluster)?;
    resolve_user(&ctx.user, user, &mut resolved)?;
    resolved.namespace = ctx.namespace.clone();
    Ok(resolved)
}

fn read_files(paths: &[PathBuf]) -> Result<Vec<(PathBuf, File)>, KubeconfigError> {
    let mut files = Vec::new();
    for path in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(KubeconfigError::Read {
                    path: path.clone(),
                    source,
                })
            }
        };
        let file = parse(&text).map_err(|source| KubeconfigError::Parse {
            path: path.clone(),
            source,
        })?;
        files.push((path.clone(), file));
    }
    if files.is_empty() {
        return Err(KubeconfigError::NoFile(paths.to_vec()));
    }
    Ok(files)
}

/// One kubeconfig file's text. The error names line and column but quotes no source line: the
/// line at fault may hold a token or key, and the error is logged.
fn parse(text: &str) -> Result<File, Box<serde_saphyr::Error>> {
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { with_snippet: false })
        .map_err(Box::new)
}

fn merge(files: &[(PathBuf, File)]) -> Merged<'_> {
    let mut merged = Merged {
        current_context: None,
        clusters: HashMap::new(),
        users: HashMap::new(),
        contexts: HashMap::new(),
    };
    for (path, file) in files {
        let dir = path.parent().unwrap_or(Path::new("."));
        if merged.current_context.is_none() {
            merged.current_context = file.current_context.as_deref().filter(|c| !c.is_empty());
        }
        for c in &file.clusters {
            let entry = Entry {
                value: &c.value,
                dir,
            };
            merged.clusters.entry(&c.name).or_insert(entry);
        }
        for u in &file.users {
            let entry = Entry {
                value: &u.user,
                dir,
            };
            merged.users.entry(&u.name).or_insert(entry);
        }
        for c in &file.contexts {
            merged.contexts.entry(&c.name).or_insert(&c.value);
        }
    }
    merged
}

fn resolve_cluster(entry: &Entry<'_, Cluster>) -> Result<KubeconfigContext, KubeconfigError> {
    let cluster = entry.value;
    let ca_pem = inline_or_file(
        entry.dir,
        cluster.certificate_authority_data.as_deref(),
        cluster.certificate_authority.as_deref(),
        "certificate-authority-data",
    )?;
    Ok(KubeconfigContext {
        server: cluster.server.clone(),
        ca_pem,
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
        proxy_url: cluster.proxy_url.clone().filter(|p| !p.is_empty()),
        token: None,
        token_file: None,
        client_identity_pem: None,
        exec: None,
        namespace: None,
    })
}

/// Fills in the user's credentials. Static ones (token, certificate) and an exec plugin may be
/// combined, as in kubectl: the plugin supplies whatever the static fields leave out.
fn resolve_user(
    name: &str,
    entry: &Entry<'_, User>,
    out: &mut KubeconfigContext,
) -> Result<(), KubeconfigError> {
    let (user, dir) = (entry.value, entry.dir);
    if user.auth_provider.is_some() {
        return Err(KubeconfigError::AuthProvider(name.to_owned()));
    }
    out.token = user.token.clone().filter(|t| !t.is_empty());
    out.token_file = user.token_file.as_ref().map(|p| dir.join(p));
    let cert = inline_or_file(
        dir,
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
        "client-certificate-data",
    )?;
    let key = inline_or_file(
        dir,
        user.client_key_data.as_deref(),
        user.client_key.as_deref(),
        "client-key-data",
    )?;
    if let (Some(mut cert), Some(key)) = (cert, key) {
        cert.push(b'\n');
        cert.extend_from_slice(&key);
        out.client_identity_pem = Some(cert);
    }
    if let Some(raw) = &user.exec {
        let exec = ExecConfig::from_raw(raw, dir).map_err(|problem| KubeconfigError::Exec {
            user: name.to_owned(),
            problem,
        })?;
        out.exec = Some(exec);
    }
    Ok(())
}

/// Inline base64 data wins over a file, as in kubectl.
fn inline_or_file(
    dir: &Path,
    data: Option<&str>,
    file: Option<&Path>,
    field: &'static str,
) -> Result<Option<Vec<u8>>, KubeconfigError> {
    match (data.filter(|d| !d.is_empty()), file) {
        (Some(data), _) => base64_field(data, field).map(Some),
        (None, Some(file)) => {
            let path = dir.join(file);
            std::fs::read(&path)
                .map(Some)
                .map_err(|source| KubeconfigError::Read { path, source })
        }
        (None, None) => Ok(None),
    }
}

pub(crate) fn base64_field(data: &str, field: &'static str) -> Result<Vec<u8>, KubeconfigError> {
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
    proxy-url: socks5://127.0.0.1:1080
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
      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/get-token
      args: [--cluster, dev]
      interactiveMode: Never
- name: legacy-user
  user:
    auth-provider: {name: gcp}
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: team}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
- name: cloud
  context: {cluster: dev-cluster, user: exec-user}
- name: legacy
  context: {cluster: dev-cluster, user: legacy-user}
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
        let ctx = load(&[write(dir.path())], None).unwrap();
        assert_eq!(ctx.server, "https://127.0.0.1:6443");
        assert_eq!(ctx.ca_pem.as_deref(), Some(&b"ca-pem"[..]));
        assert_eq!(ctx.token.as_deref(), Some("abc"));
        assert_eq!(ctx.namespace.as_deref(), Some("team"));
        assert_eq!(ctx.proxy_url.as_deref(), Some("socks5://127.0.0.1:1080"));
    }

    #[test]
    fn named_context_resolves_files_relative_to_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = load(&[write(dir.path())], Some("prod")).unwrap();
        assert_eq!(ctx.ca_pem.as_deref(), Some(&b"prod-ca"[..]));
        assert_eq!(ctx.token_file, Some(dir.path().join("token")));
    }

    #[test]
    fn exec_command_with_a_path_is_relative_to_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = load(&[write(dir.path())], Some("cloud")).unwrap();
        let exec = ctx.exec.unwrap();
        assert_eq!(
            exec.command,
            dir.path().join("./bin/get-token").into_os_string()
        );
        assert_eq!(exec.args, ["--cluster", "dev"]);
    }

    #[test]
    fn unknown_context_and_auth_providers_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = [write(dir.path())];
        assert!(load(&path, Some("nope"))
            .unwrap_err()
            .to_string()
            .contains("no context \"nope\""));
        assert!(load(&path, Some("legacy"))
            .unwrap_err()
            .to_string()
            .contains("auth-provider"));
    }

    /// kubectl's rule: the first file to define a name wins, current-context from the first
    /// file that sets one, missing files skipped.
    #[test]
    fn files_merge_first_definition_wins() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("first");
        std::fs::write(
            &first,
            "clusters:\n- name: c\n  cluster: {server: https://first}\nusers:\n- name: u\n  user: {token: first}\n",
        )
        .unwrap();
        let second = dir.path().join("second");
        std::fs::write(
            &second,
            "current-context: x\nclusters:\n- name: c\n  cluster: {server: https://second}\n- name: d\n  cluster: {server: https://d}\nusers:\n- name: u\n  user: {token: second}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n- name: y\n  context: {cluster: d, user: u}\n",
        )
        .unwrap();
        let paths = [dir.path().join("missing"), first, second];
        let ctx = load(&paths, None).unwrap();
        assert_eq!(ctx.server, "https://first");
        assert_eq!(ctx.token.as_deref(), Some("first"));
        assert_eq!(load(&paths, Some("y")).unwrap().server, "https://d");
        let missing = [dir.path().join("missing")];
        assert!(matches!(
            load(&missing, None),
            Err(KubeconfigError::NoFile(_))
        ));
    }

    /// A kubeconfig as `kubectl config view --raw` and cloud CLIs write it: keys in kubectl's
    /// order, `preferences: {}`, `extensions`, an exec plugin with `env: null`.
    #[test]
    fn kubectl_written_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            r#"apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Y2EtcGVt
    extensions:
    - extension:
        last-update: Fri, 20 Nov 2026 08:14:31 UTC
        provider: minikube.sigs.k8s.io
      name: cluster_info
    insecure-skip-tls-verify: true
    server: "https://127.0.0.1:40511"
  name: kind-kind
contexts:
- context:
    cluster: kind-kind
    namespace: default
    user: eks-user
  name: kind-kind
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: eks-user
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      args:
      - --region
      - eu-west-1
      - eks
      - get-token
      command: aws
      env: null
      interactiveMode: IfAvailable
      provideClusterInfo: false
"#,
        )
        .unwrap();
        let ctx = load(&[path], None).unwrap();
        assert_eq!(ctx.server, "https://127.0.0.1:40511");
        assert_eq!(ctx.ca_pem.as_deref(), Some(&b"ca-pem"[..]));
        assert!(ctx.insecure_skip_tls_verify);
        assert_eq!(ctx.namespace.as_deref(), Some("default"));
        let exec = ctx.exec.unwrap();
        assert_eq!(exec.command, "aws");
        assert_eq!(exec.args, ["--region", "eu-west-1", "eks", "get-token"]);
    }

    /// A file that does not parse is an error naming the file and the place, and quoting none of
    /// its text: the line at fault may hold a token.
    #[test]
    fn parse_errors_name_the_place_and_quote_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        for (i, text) in [
            "users:\n- name: u\n  user:\n    token: \"s3cret-unterminated\n",
            "users:\n- name: u\n  user:\n    token: s3cret: nested\n",
            "users:\n- name: u\n  user:\n    token: [s3cret-in-a-list]\n",
            "clusters:\n- name: c\n  cluster: {server: https://k, server: s3cret-twice}\n",
        ]
        .into_iter()
        .enumerate()
        {
            let path = dir.path().join(format!("config{i}"));
            std::fs::write(&path, text).unwrap();
            let error = load(std::slice::from_ref(&path), None).unwrap_err();
            assert!(matches!(error, KubeconfigError::Parse { .. }), "{error}");
            let shown = error.to_string();
            assert!(shown.contains(&path.display().to_string()), "{shown}");
            assert!(shown.contains("line"), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
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
            proxy_url: Some("http://user:pa55@proxy".into()),
            exec: None,
            namespace: None,
        };
        let shown = format!("{context:?}");
        assert!(
            !shown.contains("t0ken") && !shown.contains("k3y") && !shown.contains("pa55"),
            "{shown}"
        );
    }
}
