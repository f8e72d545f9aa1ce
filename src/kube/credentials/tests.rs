//! Where the API server is and how kube2nats authenticates, as kubectl and client-go decide it:
//! in-cluster service account, `$KUBECONFIG` (a merged list), `~/.kube/config`, an explicit URL,
//! exec credential plugins, client certificates (mTLS), `proxy-url`, and the explicit opt-out of
//! TLS verification — each against the simulated API server. And, without one: how an in-cluster
//! address is written.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Auth};
use serde_json::json;

use super::*;
use crate::config::RbacCheck;
use crate::kube::testing::{api_client, pod, FAST_BACKOFF};
use crate::kube::{ApiClient, ApiError};

fn kubernetes(source: ApiSource, insecure: bool) -> KubernetesConfig {
    KubernetesConfig {
        source,
        insecure_skip_tls_verify: insecure,
        token_reload_interval: Duration::from_secs(60),
        request_timeout: Duration::from_secs(5),
        list_page_size: 500,
        max_concurrent_lists: 2,
        watch_timeout: Duration::from_secs(60),
        streaming_list: false,
        max_line_bytes: 1 << 20,
        backoff: FAST_BACKOFF,
        rbac_check: RbacCheck::Warn,
    }
}

fn client_for(
    cfg: &KubernetesConfig,
    env: &[(&str, String)],
) -> Result<Arc<ApiClient>, CredentialsError> {
    let endpoint = resolve(cfg, |name| {
        env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
    })?;
    Ok(api_client(endpoint))
}

/// The client lists the pods of `default`: the one pod `a` every test here creates.
async fn lists_pods(client: Arc<ApiClient>) {
    let names = list_pods(&client).await.expect("listing pods");
    assert_eq!(names, ["a"]);
}

/// The names of the pods in `default`, as the client lists them.
async fn list_pods(client: &ApiClient) -> Result<Vec<String>, ApiError> {
    let body = client.get("/api/v1/namespaces/default/pods").await?;
    let list: serde_json::Value = serde_json::from_slice(&body).expect("a JSON list");
    Ok(list["items"]
        .as_array()
        .expect("a list has items")
        .iter()
        .map(|pod| {
            pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect())
}

/// In a pod: KUBERNETES_SERVICE_HOST/PORT, and the mounted token and CA files.
#[tokio::test]
async fn in_cluster_service_account() {
    let sim = ApiServer::start(ApiServerOptions {
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let source = auto(&sim);
    // A kubeconfig in HOME does not matter in a pod: the service account wins.
    let home = tempfile::tempdir().unwrap();
    write_file(&home.path().join(".kube/config"), "garbage: [");
    let env = [
        ("KUBERNETES_SERVICE_HOST", "localhost".to_owned()),
        ("KUBERNETES_SERVICE_PORT", sim.addr().port().to_string()),
        ("HOME", home.path().display().to_string()),
    ];
    lists_pods(client_for(&kubernetes(source.clone(), false), &env).unwrap()).await;

    let empty_home = tempfile::tempdir().unwrap();
    let env = [("HOME", empty_home.path().display().to_string())];
    let Err(err) = client_for(&kubernetes(source, false), &env) else {
        panic!("no pod and no kubeconfig must fail")
    };
    let err = err.to_string();
    assert!(err.contains("KUBERNETES_SERVICE_HOST is not set"), "{err}");
    assert!(err.contains(".kube/config"), "names where it looked: {err}");
}

/// The default source: in-cluster files of `sim`, kubeconfig found from the environment.
fn auto(sim: &ApiServer) -> ApiSource {
    ApiSource::Auto {
        in_cluster: InClusterFiles {
            token_file: sim.token_file(),
            ca_file: sim.ca_file().unwrap(),
            namespace_file: PathBuf::from("/nonexistent/namespace"),
        },
        context: None,
    }
}

fn write_file(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A home directory whose `.kube/config` points at `sim`.
fn home_with_kube_config(sim: &ApiServer) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".kube")).unwrap();
    std::fs::copy(
        sim.write_kubeconfig().unwrap(),
        home.path().join(".kube/config"),
    )
    .unwrap();
    home
}

/// A workstation: not in a pod, no KUBECONFIG, `~/.kube/config` used as kubectl uses it.
#[tokio::test]
async fn home_kube_config_outside_a_pod() {
    let sim = tls_sim(Auth::Tokens).await;
    let home = home_with_kube_config(&sim);
    let env = [("HOME", home.path().display().to_string())];
    lists_pods(client_for(&kubernetes(auto(&sim), false), &env).unwrap()).await;
}

/// `KUBECONFIG=a:b`: merged as kubectl merges it. The first file to define a cluster name wins
/// (here the one with the right server), current-context comes from the first file that sets
/// it, and the user and context come from the second file.
#[tokio::test]
async fn kubeconfig_list_merges_first_definition_wins() {
    let sim = tls_sim(Auth::Tokens).await;
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.yaml");
    let cluster = json!({
        "server": sim.url(),
        "certificate-authority": sim.ca_file().unwrap(),
    });
    let first_doc = json!({
        "current-context": "harness",
        "clusters": [{ "name": "harness", "cluster": cluster }],
    });
    write_file(&first, &first_doc.to_string());
    let second = dir.path().join("second.yaml");
    let second_doc = json!({
        "current-context": "elsewhere",
        "clusters": [{ "name": "harness", "cluster": { "server": "https://127.0.0.1:1" } }],
        "users": [{ "name": "harness", "user": { "tokenFile": sim.token_file() } }],
        "contexts": [
            { "name": "harness", "context": { "cluster": "harness", "user": "harness" } },
            { "name": "elsewhere", "context": { "cluster": "nowhere", "user": "harness" } },
        ],
    });
    write_file(&second, &second_doc.to_string());
    let missing = dir.path().join("missing.yaml");
    let list = std::env::join_paths([&missing, &first, &second]).unwrap();
    let env = [("KUBECONFIG", list.to_string_lossy().into_owned())];
    lists_pods(client_for(&kubernetes(auto(&sim), false), &env).unwrap()).await;
}

async fn tls_sim(auth: Auth) -> ApiServer {
    let sim = ApiServer::start(ApiServerOptions {
        tls: true,
        auth,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.create("pods", Some("default"), pod("a"));
    sim
}

/// Outside the cluster: a kubeconfig's current context (server, CA file, token file).
#[tokio::test]
async fn kubeconfig_current_context() {
    let sim = ApiServer::start(ApiServerOptions {
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let path = sim.write_kubeconfig().unwrap();
    let source = ApiSource::Kubeconfig {
        paths: vec![path],
        context: None,
    };
    lists_pods(client_for(&kubernetes(source, false), &[]).unwrap()).await;
}

/// TLS verification is on unless explicitly turned off: without the CA the connection fails;
/// with `insecure_skip_tls_verify` it succeeds.
#[tokio::test]
async fn insecure_skip_tls_verify_is_explicit() {
    let sim = ApiServer::start(ApiServerOptions {
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let source = ApiSource::Url {
        url: sim.url().parse().unwrap(),
        token_file: Some(sim.token_file()),
        ca_file: None,
    };
    let refused = list_pods(&client_for(&kubernetes(source.clone(), false), &[]).unwrap()).await;
    assert!(
        matches!(refused, Err(ApiError::Transport(_))),
        "{refused:?}"
    );
    lists_pods(client_for(&kubernetes(source, true), &[]).unwrap()).await;
}

/// A kubeconfig whose user authenticates with `user` (JSON), against `sim` with its CA.
fn kubeconfig_with_user(
    sim: &ApiServer,
    dir: &std::path::Path,
    user: serde_json::Value,
) -> PathBuf {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{ "name": "c", "cluster": {
            "server": sim.url(),
            "certificate-authority": sim.ca_file().unwrap(),
        } }],
        "users": [{ "name": "u", "user": user }],
        "contexts": [{ "name": "c", "context": { "cluster": "c", "user": "u" } }],
    });
    let path = dir.join("kubeconfig");
    write_file(&path, &doc.to_string());
    path
}

fn from_kubeconfig(path: PathBuf) -> KubernetesConfig {
    kubernetes(
        ApiSource::Kubeconfig {
            paths: vec![path],
            context: None,
        },
        false,
    )
}

/// mTLS: a server that demands client certificates accepts the kubeconfig's
/// `client-certificate`/`client-key` and refuses a client without them.
#[tokio::test]
async fn client_certificate_mtls() {
    let sim = tls_sim(Auth::ClientCertificates).await;
    let (cert, key) = sim.client_cert_files().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let with_cert = kubeconfig_with_user(
        &sim,
        dir.path(),
        json!({ "client-certificate": cert, "client-key": key }),
    );
    lists_pods(client_for(&from_kubeconfig(with_cert), &[]).unwrap()).await;

    let other = tempfile::tempdir().unwrap();
    let without = kubeconfig_with_user(&sim, other.path(), json!({ "token": "x" }));
    let client = client_for(&from_kubeconfig(without), &[]).unwrap();
    let err = client.get(PODS).await.unwrap_err();
    assert!(matches!(err, ApiError::Transport(_)), "{err}");
}

const PODS: &str = "/api/v1/namespaces/default/pods";

/// An exec credential plugin written by the test: a shell script that counts its runs, records
/// its arguments and environment, and prints the ExecCredential the test left in `answer.json`.
struct Plugin {
    dir: tempfile::TempDir,
}

impl Plugin {
    fn new() -> Plugin {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"echo run >> "$PLUGIN_DIR/runs"
printf '%s|%s|%s\n' "$1" "$GREETING" "$KUBERNETES_EXEC_INFO" > "$PLUGIN_DIR/seen"
cat "$PLUGIN_DIR/answer.json"
"#;
        write_file(&dir.path().join("plugin.sh"), script);
        Plugin { dir }
    }

    /// The kubeconfig `exec` section. The command is `/bin/sh` with the script as argument: a
    /// script written and then executed by a multi-threaded test process can fail with
    /// ETXTBSY when another thread forks meanwhile.
    fn exec(&self, api_version: &str) -> serde_json::Value {
        json!({
            "apiVersion": api_version,
            "command": "/bin/sh",
            "args": [self.dir.path().join("plugin.sh"), "--region=test"],
            "env": [
                { "name": "PLUGIN_DIR", "value": self.dir.path() },
                { "name": "GREETING", "value": "hello" },
            ],
            "interactiveMode": "Never",
            "installHint": "install it with: apt-get install test-plugin",
        })
    }

    fn answer(&self, api_version: &str, status: serde_json::Value) {
        let credential =
            json!({ "apiVersion": api_version, "kind": "ExecCredential", "status": status });
        write_file(
            &self.dir.path().join("answer.json"),
            &credential.to_string(),
        );
    }

    fn runs(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("runs"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    fn seen(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("seen")).unwrap()
    }
}

const V1: &str = "client.authentication.k8s.io/v1";
const V1BETA1: &str = "client.authentication.k8s.io/v1beta1";

/// An exec plugin's token is sent as the bearer token; the plugin runs with its args, env and
/// `KUBERNETES_EXEC_INFO`; its answer is cached until `expirationTimestamp` (an expired one makes
/// every request run it again) and dropped after a 401 (the next request runs it again).
#[tokio::test]
async fn exec_plugin_token_cached_until_expiry_and_rerun_after_401() {
    let sim = tls_sim(Auth::Tokens).await;
    let plugin = Plugin::new();
    let dir = tempfile::tempdir().unwrap();
    let path = kubeconfig_with_user(&sim, dir.path(), json!({ "exec": plugin.exec(V1) }));
    let client = client_for(&from_kubeconfig(path), &[]).unwrap();

    plugin.answer(
        V1,
        json!({ "token": "test-token", "expirationTimestamp": "2000-01-01T00:00:00Z" }),
    );
    client.get(PODS).await.unwrap();
    client.get(PODS).await.unwrap();
    assert_eq!(plugin.runs(), 2, "an expired credential is not reused");
    let seen = plugin.seen();
    assert!(seen.starts_with("--region=test|hello|"), "{seen}");
    let info: serde_json::Value =
        serde_json::from_str(seen.splitn(3, '|').nth(2).unwrap()).unwrap();
    assert_eq!(info["apiVersion"], V1);
    assert_eq!(info["kind"], "ExecCredential");
    assert_eq!(info["spec"]["interactive"], false);

    plugin.answer(
        V1,
        json!({ "token": "test-token", "expirationTimestamp": "2999-01-01T00:00:00Z" }),
    );
    for _ in 0..3 {
        client.get(PODS).await.unwrap();
    }
    assert_eq!(plugin.runs(), 3, "cached until it expires");

    sim.set_valid_tokens(&["rotated"]);
    plugin.answer(V1, json!({ "token": "rotated" }));
    let err = client.get(PODS).await.unwrap_err();
    assert!(matches!(err, ApiError::Unauthorized), "{err}");
    assert_eq!(plugin.runs(), 3);
    client.get(PODS).await.unwrap();
    client.get(PODS).await.unwrap();
    assert_eq!(plugin.runs(), 4, "run again after the 401, then cached");
}

/// The v1beta1 protocol works too; a plugin may hand out a client certificate instead of a
/// token, which the client then presents to a server that demands one.
#[tokio::test]
async fn exec_plugin_v1beta1_client_certificate() {
    let sim = tls_sim(Auth::ClientCertificates).await;
    let (cert, key) = sim.client_cert_files().unwrap();
    let plugin = Plugin::new();
    plugin.answer(
        V1BETA1,
        json!({
            "clientCertificateData": std::fs::read_to_string(cert).unwrap(),
            "clientKeyData": std::fs::read_to_string(key).unwrap(),
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut exec = plugin.exec(V1BETA1);
    exec.as_object_mut().unwrap().remove("interactiveMode");
    let path = kubeconfig_with_user(&sim, dir.path(), json!({ "exec": exec }));
    let client = client_for(&from_kubeconfig(path), &[]).unwrap();
    client.get(PODS).await.unwrap();
    client.get(PODS).await.unwrap();
    assert_eq!(plugin.runs(), 1);
    assert!(plugin.seen().contains(V1BETA1));
}

/// A plugin that is missing or fails gives an error naming the command (and the install hint,
/// or the plugin's stderr), and never the token of an earlier answer.
#[tokio::test]
async fn exec_plugin_missing_or_failing_is_a_clear_error() {
    let sim = tls_sim(Auth::Tokens).await;
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::new();
    let mut exec = plugin.exec(V1);
    exec["command"] = json!("kube2nats-test-no-such-plugin");
    let path = kubeconfig_with_user(&sim, dir.path(), json!({ "exec": exec }));
    let client = client_for(&from_kubeconfig(path), &[]).unwrap();
    let err = client.get(PODS).await.unwrap_err().to_string();
    assert!(err.contains("kube2nats-test-no-such-plugin"), "{err}");
    assert!(err.contains("not found"), "{err}");
    assert!(err.contains("apt-get install test-plugin"), "{err}");

    write_file(
        &plugin.dir.path().join("plugin.sh"),
        "echo 'error: SSO session expired; run aws sso login' >&2\nexit 3\n",
    );
    let path = kubeconfig_with_user(&sim, dir.path(), json!({ "exec": plugin.exec(V1) }));
    let client = client_for(&from_kubeconfig(path), &[]).unwrap();
    let err = client.get(PODS).await.unwrap_err().to_string();
    assert!(err.contains("/bin/sh"), "{err}");
    assert!(err.contains("SSO session expired"), "{err}");

    write_file(
        &plugin.dir.path().join("plugin.sh"),
        "echo '{\"token\": \"s3cret\"'\n",
    );
    let err = client.get(PODS).await.unwrap_err().to_string();
    assert!(err.contains("invalid ExecCredential"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// `proxy-url`: every request goes through the proxy named by the kubeconfig's cluster. The
/// proxy here is a TCP relay that counts connections (an HTTP proxy receives a plain-HTTP
/// request in absolute form, which the simulator serves as is).
#[tokio::test]
async fn proxy_url_carries_the_requests() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("a"));
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    let upstream = sim.addr();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = relay.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let doc = json!({
        "current-context": "c",
        "clusters": [{ "name": "c", "cluster": {
            "server": sim.url(),
            "proxy-url": format!("http://{relay_addr}"),
        } }],
        "users": [{ "name": "u", "user": { "tokenFile": sim.token_file() } }],
        "contexts": [{ "name": "c", "context": { "cluster": "c", "user": "u" } }],
    });
    let path = dir.path().join("kubeconfig");
    write_file(&path, &doc.to_string());
    let client = client_for(&from_kubeconfig(path), &[("NO_PROXY", "".into())]).unwrap();
    client.get(PODS).await.unwrap();
    assert!(connections.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

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
    let source = AuthSource::file(path.clone(), Duration::from_secs(60));
    let token = || async { source.current().await.unwrap().token.unwrap() };
    assert_eq!(&*token().await, "one");
    std::fs::write(&path, "two").unwrap();
    assert_eq!(&*token().await, "one", "cached within the interval");
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(&*token().await, "two");
    std::fs::write(&path, "three").unwrap();
    source.invalidate().await;
    assert_eq!(&*token().await, "three");
    assert!(!format!("{source:?}").contains("three"));
}

/// `Debug` of an endpoint shows neither the token nor the client key.
#[test]
fn endpoint_debug_shows_no_secret() {
    let endpoint = Endpoint {
        base_url: Url::parse("https://k8s:6443").unwrap(),
        ca_pem: Some(b"CA".to_vec()),
        identity_pem: Some(b"-----BEGIN PRIVATE KEY----- k3y".to_vec()),
        auth: Some(AuthSource::fixed("t0ken")),
        insecure_skip_tls_verify: false,
        proxy_url: Some(Url::parse("http://user:pa55@proxy:3128").unwrap()),
    };
    let shown = format!("{endpoint:?}");
    assert!(
        !shown.contains("k3y")
            && !shown.contains("PRIVATE")
            && !shown.contains("t0ken")
            && !shown.contains("pa55"),
        "{shown}"
    );
    assert!(shown.contains("https://k8s:6443"));
}
