//! A real kube-apiserver and its etcd, supervised for one test.
//!
//! The simulated API server ([`crate::apiserver`]) is written alongside kube2nats, so a misreading
//! of kube-apiserver's behaviour would be shared by the daemon and its tests. [`RealApiServer`]
//! runs the real thing: `kube-apiserver` v1.20.2 (built from Debian's source package by
//! `scripts/realapi`) over an `etcd` 3.4, both on free loopback ports, with the settings a
//! cluster has where they matter to a watcher: TLS with a CA file, bearer tokens, RBAC, the
//! watch cache, and a short etcd compaction interval.
//!
//! No controller-manager or kubelet runs, so the server starts with the `ServiceAccount`
//! admission plugin off (pods would wait for a token controller) and no endpoint reconciler;
//! pods stay Pending and a deleted namespace stays Terminating.
//!
//! Every request of the user `admin` (the tests and a kube2nats given the admin token) is written
//! to an audit log ([`RealApiServer::requests`]): kube-apiserver's own account of what a client
//! asked, as the simulator's request log is.
//!
//! The binaries come from `KUBE_APISERVER_BIN` and `ETCD_BIN`, which `scripts/install-test-tools`
//! prints. A missing binary is an error that says so: a skipped test proves nothing.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context as _};
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

/// Environment variable naming the `kube-apiserver` binary.
pub const KUBE_APISERVER_BIN_ENV: &str = "KUBE_APISERVER_BIN";
/// Environment variable naming the `etcd` binary.
pub const ETCD_BIN_ENV: &str = "ETCD_BIN";

/// The error text when a binary is missing.
pub const NOT_FOUND_MESSAGE: &str = "the real-server tests need kube-apiserver and etcd: run `scripts/install-test-tools realapi` (it builds kube-apiserver v1.20.2 once, about 7 minutes, and installs etcd) and export the KUBE_APISERVER_BIN and ETCD_BIN lines it prints";

/// The admin's bearer token (user `admin`, group `system:masters`), in the static token file.
pub const ADMIN_TOKEN: &str = "harness-admin-token";

/// How long to wait for etcd and kube-apiserver to become ready. kube-apiserver takes about
/// 8 s on an idle machine; the test machine may be compiling.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The collection of CustomResourceDefinitions.
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// The service-account issuer, as in a kubeadm cluster.
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// How [`RealApiServer::start_with`] sets the server up.
#[derive(Debug, Clone)]
pub struct RealApiServerOptions {
    /// How often kube-apiserver compacts etcd's history (`--etcd-compaction-interval`).
    pub compaction_interval: Duration,
    /// Extra static tokens: `(token, user, groups)`, e.g. a token for a service account's user
    /// name, which RBAC bindings of that service account then apply to.
    pub extra_tokens: Vec<(String, String, Vec<String>)>,
    /// Serve lists and watches from the watch cache (`--watch-cache`, on in every cluster).
    /// Without it watches are served from etcd, so a watch from a resourceVersion that etcd's
    /// compaction removed is answered 410 Expired.
    pub watch_cache: bool,
}

impl Default for RealApiServerOptions {
    fn default() -> Self {
        RealApiServerOptions {
            compaction_interval: Duration::from_secs(10),
            extra_tokens: Vec::new(),
            watch_cache: true,
        }
    }
}

/// A running kube-apiserver over its own etcd. Dropping it kills both (each in its own process
/// group, so nothing they started outlives them) and removes their data directory.
pub struct RealApiServer {
    apiserver_bin: PathBuf,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    etcd_port: u16,
    port: u16,
    options: RealApiServerOptions,
    client: reqwest::Client,
    /// etcd's data, the PKI, the token files and both logs.
    dir: tempfile::TempDir,
}

/// `(kube-apiserver, etcd)`: from the environment, else an error saying how to get them.
fn find_binaries() -> anyhow::Result<(PathBuf, PathBuf)> {
    find_binaries_in(
        std::env::var_os(KUBE_APISERVER_BIN_ENV),
        std::env::var_os(ETCD_BIN_ENV),
    )
}

/// [`find_binaries`] over given variable values, so tests need not touch the process environment.
fn find_binaries_in(
    apiserver: Option<std::ffi::OsString>,
    etcd: Option<std::ffi::OsString>,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let file = |var: &str, value: Option<std::ffi::OsString>| -> anyhow::Result<PathBuf> {
        let path = value
            .map(PathBuf::from)
            .with_context(|| format!("{var} is not set; {NOT_FOUND_MESSAGE}"))?;
        anyhow::ensure!(
            path.is_file(),
            "{var}={} is not a file; {NOT_FOUND_MESSAGE}",
            path.display()
        );
        Ok(path)
    };
    Ok((
        file(KUBE_APISERVER_BIN_ENV, apiserver)?,
        file(ETCD_BIN_ENV, etcd)?,
    ))
}

/// A port that was free a moment ago (see [`crate::nats`]: the same small race, reported at
/// start if lost).
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")
        .context("binding 127.0.0.1:0 to find a free port")?
        .local_addr()?
        .port())
}

/// Spawns `binary` with `args` in a process group of its own, output appended to `log`.
fn spawn(binary: &Path, args: &[String], log: &Path) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("duplicating the log handle")?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawning {}", binary.display()))
}

/// SIGKILL to the child's whole process group, then reaps the child.
async fn kill_group(child: &mut Child) {
    kill_group_now(child);
    let _ = child.wait().await;
}

fn kill_group_now(child: &mut Child) {
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.start_kill();
}

/// The last `n` lines of a log file, for error messages.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl RealApiServer {
    /// Starts etcd and kube-apiserver with the default options and returns once `/readyz`
    /// answers `ok`.
    pub async fn start() -> anyhow::Result<RealApiServer> {
        Self::start_with(RealApiServerOptions::default()).await
    }

    /// Starts etcd and kube-apiserver with `options` and returns once `/readyz` answers `ok`.
    pub async fn start_with(options: RealApiServerOptions) -> anyhow::Result<RealApiServer> {
        let (apiserver_bin, etcd_bin) = find_binaries()?;
        let dir = tempfile::tempdir().context("creating the real API server's temp dir")?;
        write_pki(dir.path())?;
        write_tokens(dir.path(), &options.extra_tokens)?;
        std::fs::write(dir.path().join("audit-policy.yaml"), AUDIT_POLICY)
            .context("writing the audit policy")?;
        let client = admin_client(&dir.path().join("ca.crt"))?;
        let (etcd_port, etcd_peer_port, port) = (free_port()?, free_port()?, free_port()?);
        let etcd_log = dir.path().join("etcd.log");
        let etcd = spawn(
            &etcd_bin,
            &etcd_args(dir.path(), etcd_port, etcd_peer_port),
            &etcd_log,
        )?;
        let mut server = RealApiServer {
            apiserver_bin,
            etcd: Some(etcd),
            apiserver: None,
            etcd_port,
            port,
            options,
            client,
            dir,
        };
        server.wait_for_etcd().await?;
        server.start_apiserver().await?;
        Ok(server)
    }

    /// `https://127.0.0.1:PORT` (the certificate is valid for `127.0.0.1` and `localhost`).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// PEM file of the CA that signed the serving certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// File holding [`ADMIN_TOKEN`], as a mounted token file.
    pub fn admin_token_file(&self) -> PathBuf {
        self.dir.path().join("admin-token")
    }

    /// `http://127.0.0.1:PORT` of etcd's client port (its v3 JSON gateway included).
    pub fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    /// The process ids of kube-apiserver and etcd (each leads its own process group).
    pub fn pids(&self) -> Vec<u32> {
        [self.apiserver.as_ref(), self.etcd.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(Child::id)
            .collect()
    }

    /// kube-apiserver's log so far, for diagnosing a failed test.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }

    /// A request as the admin to `path` (e.g. `/api/v1/namespaces/default/pods`); the answer's
    /// JSON, or an error with the status and body unless it is a 2xx.
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.url()))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            bail!("{method} {path}: {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {path}: not JSON: {text}"))
    }

    /// Creates `obj` in the collection at `collection` (e.g. `/api/v1/namespaces/default/pods`);
    /// the stored object.
    pub async fn create(&self, collection: &str, obj: &Value) -> anyhow::Result<Value> {
        self.request(reqwest::Method::POST, collection, Some(obj))
            .await
    }

    /// Reads the object `name` of `collection`, changes it with `change` and writes it back
    /// (a PUT with the read resourceVersion); the stored object.
    pub async fn update(
        &self,
        collection: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> anyhow::Result<Value> {
        let path = format!("{collection}/{name}");
        let mut obj = self.request(reqwest::Method::GET, &path, None).await?;
        change(&mut obj);
        self.request(reqwest::Method::PUT, &path, Some(&obj)).await
    }

    /// Deletes the object `name` of `collection`; the server's answer (the object, or a Status
    /// for some kinds).
    pub async fn delete(&self, collection: &str, name: &str) -> anyhow::Result<Value> {
        self.request(
            reqwest::Method::DELETE,
            &format!("{collection}/{name}"),
            None,
        )
        .await
    }

    /// The admin's requests answered so far, in order (kube-apiserver's audit log); a watch is
    /// there once it has ended. [`metrics`](Self::metrics) counts the watches open.
    pub fn requests(&self) -> Vec<AuditedRequest> {
        audited_requests(
            &std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default(),
        )
    }

    /// kube-apiserver's own metrics (`GET /metrics`, Prometheus text), as the admin.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let response = self
            .client
            .get(format!("{}/metrics", self.url()))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .context("GET /metrics")?
            .error_for_status()
            .context("GET /metrics")?;
        Ok(response.text().await?)
    }

    /// Creates the CustomResourceDefinition `crd` and waits until it is established and each
    /// version it serves is in discovery and lists (kube-apiserver serves a new CRD a moment
    /// after accepting it).
    pub async fn create_crd(&self, crd: &Value) -> anyhow::Result<Value> {
        let created = self.create(CRDS, crd).await?;
        self.wait_crd_served(&created).await?;
        Ok(created)
    }

    /// Changes the CustomResourceDefinition `name` with `change` and waits as
    /// [`create_crd`](Self::create_crd) does.
    pub async fn update_crd(
        &self,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> anyhow::Result<Value> {
        let updated = self.update(CRDS, name, change).await?;
        self.wait_crd_served(&updated).await?;
        Ok(updated)
    }

    /// Deletes the CustomResourceDefinition `name` and waits until it is gone: its finalizer has
    /// deleted every object of it (a DELETED event each) and its resource is no longer served.
    pub async fn delete_crd(&self, name: &str) -> anyhow::Result<()> {
        self.delete(CRDS, name).await?;
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        while self
            .request(reqwest::Method::GET, &format!("{CRDS}/{name}"), None)
            .await
            .is_ok()
        {
            if tokio::time::Instant::now() >= deadline {
                bail!("the CRD {name} was not gone within {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Waits until the CRD `crd` (as stored) is Established, and each version it serves lists
    /// its objects and is in its group's discovery document.
    async fn wait_crd_served(&self, crd: &Value) -> anyhow::Result<()> {
        let name = crd["metadata"]["name"].as_str().context("the CRD's name")?;
        let group = crd["spec"]["group"].as_str().context("the CRD's group")?;
        let plural = crd["spec"]["names"]["plural"]
            .as_str()
            .context("the CRD's plural")?;
        let served: Vec<&str> = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["served"] == true)
            .filter_map(|v| v["name"].as_str())
            .collect();
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if self.crd_serves(name, group, plural, &served).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the CRD {name} did not serve {served:?} within {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn crd_serves(&self, name: &str, group: &str, plural: &str, served: &[&str]) -> bool {
        let get =
            |path: String| async move { self.request(reqwest::Method::GET, &path, None).await };
        let Ok(crd) = get(format!("{CRDS}/{name}")).await else {
            return false;
        };
        let established = crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        let Ok(discovery) = get(format!("/apis/{group}")).await else {
            return false;
        };
        let listed: Vec<&str> = discovery["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["version"].as_str())
            .collect();
        if !established || !served.iter().all(|v| listed.contains(v)) {
            return false;
        }
        for version in served {
            if get(format!("/apis/{group}/{version}/{plural}?limit=1"))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Deletes `key` (e.g. `/registry/pods/default/web`) straight in etcd, behind
    /// kube-apiserver's back, through etcd's v3 JSON gateway; the number of keys deleted.
    pub async fn delete_in_etcd(&self, key: &str) -> anyhow::Result<u64> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/v3/kv/deleterange", self.etcd_url()))
            .json(&json!({ "key": b64.encode(key) }))
            .send()
            .await
            .context("etcd deleterange")?
            .error_for_status()?
            .json()
            .await?;
        // The gateway renders int64 fields as strings and leaves zero values out.
        Ok(answer["deleted"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// Waits until kube-apiserver's periodic compaction has removed etcd's history before
    /// `revision` (a watch from an older resourceVersion served from etcd then gets 410).
    pub async fn wait_compacted_past(&self, revision: u64) -> anyhow::Result<()> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let deadline =
            tokio::time::Instant::now() + 3 * self.options.compaction_interval + READY_TIMEOUT;
        loop {
            // A read at a revision that compaction removed fails with "required revision has been
            // compacted".
            let answer = reqwest::Client::new()
                .post(format!("{}/v3/kv/range", self.etcd_url()))
                .json(&json!({ "key": b64.encode("/registry/"), "revision": revision.saturating_sub(1).to_string(), "count_only": true }))
                .send()
                .await
                .context("etcd range")?
                .text()
                .await?;
            if answer.contains("compacted") {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("etcd was not compacted past revision {revision}: {answer}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether watches are served from the watch cache ([`RealApiServerOptions::watch_cache`]).
    pub fn watch_cache(&self) -> bool {
        self.options.watch_cache
    }

    /// Stops kube-apiserver (SIGKILL) and starts it again with the same flags and port; etcd
    /// keeps running. Its watch cache starts over from etcd's current revision, so a watch that
    /// resumes from an older resourceVersion is answered 410 Expired.
    pub async fn restart_apiserver(&mut self) -> anyhow::Result<()> {
        self.stop_apiserver().await;
        self.start_apiserver().await
    }

    /// Stops kube-apiserver (SIGKILL, its process group); etcd keeps running.
    pub async fn stop_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            kill_group(&mut child).await;
        }
    }

    /// Starts kube-apiserver (retrying while its port is not free yet) and waits for `/readyz`
    /// and the `default` namespace.
    pub async fn start_apiserver(&mut self) -> anyhow::Result<()> {
        let log = self.dir.path().join("kube-apiserver.log");
        let args = apiserver_args(self.dir.path(), self.etcd_port, self.port, &self.options);
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        let mut child = spawn(&self.apiserver_bin, &args, &log)?;
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "kube-apiserver exited with {status} before it was ready; log:\n{}",
                    tail(&log, 40)
                );
            }
            if self.readyz().await {
                self.apiserver = Some(child);
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                kill_group(&mut child).await;
                bail!(
                    "kube-apiserver was not ready within {READY_TIMEOUT:?}; log:\n{}",
                    tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn readyz(&self) -> bool {
        let answer = self
            .client
            .get(format!("{}/readyz", self.url()))
            .bearer_auth(ADMIN_TOKEN)
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        let ready = match answer {
            Ok(response) if response.status().is_success() => {
                response.text().await.is_ok_and(|t| t.trim() == "ok")
            }
            _ => false,
        };
        // `/readyz` can say ok before the bootstrap controller has created the `default`
        // namespace, where the tests create their objects (a create then answers 404).
        ready && self.default_namespace_exists().await
    }

    async fn default_namespace_exists(&self) -> bool {
        let answer = self
            .client
            .get(format!("{}/api/v1/namespaces/default", self.url()))
            .bearer_auth(ADMIN_TOKEN)
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        answer.is_ok_and(|response| response.status().is_success())
    }

    async fn wait_for_etcd(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        let log = self.dir.path().join("etcd.log");
        loop {
            if let Some(etcd) = self.etcd.as_mut() {
                if let Some(status) = etcd.try_wait()? {
                    bail!("etcd exited with {status}; log:\n{}", tail(&log, 40));
                }
            }
            let health = reqwest::get(format!("{}/health", self.etcd_url())).await;
            if let Ok(response) = health {
                if let Ok(body) = response.json::<Value>().await {
                    if body["health"] == "true" {
                        return Ok(());
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "etcd was not healthy within {READY_TIMEOUT:?}; log:\n{}",
                    tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for RealApiServer {
    fn drop(&mut self) {
        // Drop cannot await: SIGKILL both groups now; tokio reaps the processes in the background.
        for child in [self.apiserver.as_mut(), self.etcd.as_mut()]
            .into_iter()
            .flatten()
        {
            kill_group_now(child);
        }
    }
}

/// A reqwest client trusting only `ca_file`.
fn admin_client(ca_file: &Path) -> anyhow::Result<reqwest::Client> {
    let pem = std::fs::read(ca_file).context("reading the CA")?;
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem)?)
        .build()
        .context("building the admin client")
}

/// The CA (`ca.crt`, also trusted for client certificates), the serving certificate
/// (`server.crt`, `server.key`) and the service-account signing key (`sa.key`) with its public
/// half (`sa.pub`), written into `dir`.
fn write_pki(dir: &Path) -> anyhow::Result<()> {
    let pki = crate::pki::ServerPki::generate("kube-apiserver")?;
    let sa_key = rcgen::KeyPair::generate().context("generating the service-account key")?;
    for (name, text) in [
        ("ca.crt", pki.ca_pem),
        ("server.crt", pki.cert_pem),
        ("server.key", pki.key_pem),
        ("sa.key", sa_key.serialize_pem()),
        ("sa.pub", sa_key.public_key_pem()),
    ] {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    Ok(())
}

/// The admin's requests, each once when answered (a watch when it ends: this server logs no
/// `ResponseStarted` stage for a watch even when asked to), without bodies; the server's own
/// loopback requests and other users' are not logged.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [admin]
- level: None
";

/// One request as kube-apiserver's audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedRequest {
    /// The API verb: `get`, `list`, `watch`, `create`, `update`, `delete`, …
    pub verb: String,
    /// The path and query, as sent.
    pub request_uri: String,
    /// The client's `User-Agent`.
    pub user_agent: String,
    /// The response's status code.
    pub code: u16,
}

impl AuditedRequest {
    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.request_uri.split('?').next().unwrap_or_default()
    }

    /// The value of the query parameter `name`, if sent.
    pub fn param(&self, name: &str) -> Option<&str> {
        let query = self.request_uri.split_once('?')?.1;
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    }
}

/// The requests in an audit log's JSON lines; a line cut short at the end is left out.
fn audited_requests(log: &str) -> Vec<AuditedRequest> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|event| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            AuditedRequest {
                verb: text(&event["verb"]),
                request_uri: text(&event["requestURI"]),
                user_agent: text(&event["userAgent"]),
                code: event["responseStatus"]["code"]
                    .as_u64()
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(0),
            }
        })
        .collect()
}

/// `--token-auth-file` (CSV: token, user, uid, "group,group") and the admin's token file.
fn write_tokens(dir: &Path, extra: &[(String, String, Vec<String>)]) -> anyhow::Result<()> {
    let mut csv = format!("{ADMIN_TOKEN},admin,admin-uid,\"system:masters\"\n");
    for (i, (token, user, groups)) in extra.iter().enumerate() {
        csv.push_str(&format!(
            "{token},{user},extra-{i},\"{}\"\n",
            groups.join(",")
        ));
    }
    std::fs::write(dir.join("tokens.csv"), csv).context("writing tokens.csv")?;
    std::fs::write(dir.join("admin-token"), ADMIN_TOKEN).context("writing the admin token")
}

fn etcd_args(dir: &Path, port: u16, peer_port: u16) -> Vec<String> {
    let client = format!("http://127.0.0.1:{port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    vec![
        "--name=harness".into(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=harness={peer}"),
        "--logger=zap".into(),
        "--log-level=warn".into(),
    ]
}

fn apiserver_args(
    dir: &Path,
    etcd_port: u16,
    port: u16,
    options: &RealApiServerOptions,
) -> Vec<String> {
    let file = |name: &str| dir.join(name).display().to_string();
    vec![
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--insecure-port=0".into(),
        format!("--cert-dir={}", file("certs")),
        format!("--tls-cert-file={}", file("server.crt")),
        format!("--tls-private-key-file={}", file("server.key")),
        format!("--client-ca-file={}", file("ca.crt")),
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        format!(
            "--etcd-compaction-interval={}s",
            options.compaction_interval.as_secs().max(1)
        ),
        format!("--watch-cache={}", options.watch_cache),
        format!("--token-auth-file={}", file("tokens.csv")),
        format!("--audit-policy-file={}", file("audit-policy.yaml")),
        format!("--audit-log-path={}", file("audit.log")),
        // Each event written before the response is sent: counted as soon as answered.
        "--audit-log-mode=blocking".into(),
        "--anonymous-auth=false".into(),
        "--authorization-mode=RBAC".into(),
        format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
        format!("--service-account-key-file={}", file("sa.pub")),
        format!("--service-account-signing-key-file={}", file("sa.key")),
        "--service-cluster-ip-range=10.96.0.0/24".into(),
        // No token controller runs: with this plugin every pod create would wait for the
        // `default` service account and its secret.
        "--disable-admission-plugins=ServiceAccount".into(),
        // No node runs kube-apiserver's own Service endpoints; the loopback address would be
        // rejected as one anyway.
        "--endpoint-reconciler-type=none".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_say_how_to_build_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let present = dir.path().join("etcd");
        std::fs::write(&present, "").expect("a file");
        let err =
            find_binaries_in(None, Some(present.clone().into())).expect_err("no kube-apiserver");
        assert!(
            err.to_string()
                .starts_with("KUBE_APISERVER_BIN is not set; "),
            "{err}"
        );
        assert!(err.to_string().contains("scripts/install-test-tools"));
        let err = find_binaries_in(
            Some(present.clone().into()),
            Some(dir.path().join("nope").into()),
        )
        .expect_err("etcd is not a file");
        assert!(err.to_string().starts_with("ETCD_BIN="), "{err}");
        assert!(err.to_string().contains("scripts/install-test-tools"));
        let found = find_binaries_in(Some(present.clone().into()), Some(present.clone().into()));
        assert_eq!(found.expect("both present"), (present.clone(), present));
    }

    #[test]
    fn audit_log_lines_are_read_as_requests() {
        let log = concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/pods?limit=500&sendInitialEvents=true","verb":"list","userAgent":"kube2nats/0.1.0","responseStatus":{"metadata":{},"code":422}}"#,
            "\n",
            r#"{"kind":"Event","stage":"ResponseComplete","requestURI":"/apis","verb":"get","userAgent":"kube2nats/0.1.0","responseStatus":{"code":200}}"#,
            "\n",
            r#"{"kind":"Event","stage":"Respon"#,
        );
        let requests = audited_requests(log);
        assert_eq!(requests.len(), 2, "{requests:?}");
        assert_eq!(requests[0].path(), "/api/v1/namespaces/default/pods");
        assert_eq!(requests[0].param("sendInitialEvents"), Some("true"));
        assert_eq!(requests[0].param("watch"), None);
        assert_eq!((requests[0].verb.as_str(), requests[0].code), ("list", 422));
        assert_eq!(requests[1].path(), "/apis");
        assert_eq!(requests[1].user_agent, "kube2nats/0.1.0");
    }

    #[test]
    fn tokens_file_lists_the_admin_and_extra_users() {
        let dir = tempfile::tempdir().expect("temp dir");
        let extra = vec![(
            "sa-token".to_string(),
            "system:serviceaccount:kube2nats:kube2nats".to_string(),
            vec![
                "system:serviceaccounts".to_string(),
                "system:authenticated".to_string(),
            ],
        )];
        write_tokens(dir.path(), &extra).expect("written");
        let csv = std::fs::read_to_string(dir.path().join("tokens.csv")).expect("read");
        assert_eq!(
            csv,
            format!("{ADMIN_TOKEN},admin,admin-uid,\"system:masters\"\nsa-token,system:serviceaccount:kube2nats:kube2nats,extra-0,\"system:serviceaccounts,system:authenticated\"\n")
        );
    }
}
