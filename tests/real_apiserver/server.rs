//! The two API servers behind one interface: what the test bodies do to the cluster.

use std::path::PathBuf;
use std::time::Duration;

use kube2nats_harness::apiserver::{
    ApiServer, ApiServerOptions, Fidelity, InitialEvents, Rule, INITIAL_TOKEN,
};
use kube2nats_harness::real_apiserver::AuditedRequest;
use kube2nats_harness::real_apiserver::{RealApiServer, RealApiServerOptions};
use serde_json::{json, Value};

/// The namespace the tests' pods live in, unless a test names its own.
pub const NS: &str = "default";

/// The namespace and name of the ServiceAccount the manifests in deploy/ run kube2nats as.
pub const SA_NAMESPACE: &str = "kube2nats";
pub const SA_NAME: &str = "kube2nats";

/// The collection path of the pods of `ns`.
pub fn pods(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods")
}

/// The custom resource the CRD tests install: `widgets.example.com`, namespaced, kind `Widget`
/// (as the simulator serves it).
pub const WIDGETS: &str = "widgets";

/// The collection path of the widgets in [`NS`] at `version`.
pub fn widgets(version: &str) -> String {
    format!("/apis/example.com/{version}/namespaces/{NS}/widgets")
}

/// The version the tests write widgets at: served from the CRD's install to its deletion.
pub const WRITE_VERSION: &str = "v1";

/// The CustomResourceDefinition of widgets serving `versions`, the first the storage version.
/// No conversion webhook: an object reads the same at every version, but for its `apiVersion`.
fn widget_crd(versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .enumerate()
        .map(|(i, name)| {
            json!({
                "name": name, "served": true, "storage": i == 0,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true
                }}
            })
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": versions
        }
    })
}

/// One request kube2nats made, as the server recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// `GET`, `POST`, …: `get`, `list` and `watch` are all `GET`.
    pub method: String,
    pub path: String,
    /// Whether it asked for `sendInitialEvents`.
    pub initial_events: bool,
    pub status: u16,
}

impl Asked {
    fn from_audit(r: &AuditedRequest) -> Asked {
        let method = match r.verb.as_str() {
            "get" | "list" | "watch" => "GET",
            "create" => "POST",
            "update" => "PUT",
            "patch" => "PATCH",
            "delete" | "deletecollection" => "DELETE",
            other => other,
        };
        Asked {
            method: method.to_owned(),
            path: r.path().to_owned(),
            initial_events: r.param("sendInitialEvents").is_some(),
            status: r.code,
        }
    }

    /// A discovery request: `GET /api/v1`, `/apis`, `/apis/{group}` or `/apis/{group}/{version}`.
    pub fn is_discovery(&self) -> bool {
        let segments = self.path.split('/').filter(|s| !s.is_empty()).count();
        self.method == "GET"
            && (self.path == "/api"
                || self.path == "/api/v1"
                || (self.path.starts_with("/apis") && segments <= 3))
    }
}

/// Which API server a test body runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Simulated,
    Real,
    /// The simulator as kube-apiserver 1.20 answers a client: `sendInitialEvents` refused (422,
    /// no WatchList feature), no aggregated discovery, pods deleted through a MODIFIED, creates
    /// only in namespaces that exist ([`Fidelity::KUBE_APISERVER`]).
    SimulatedLike120,
    /// The real server with `--watch-cache=false`: watches served from etcd, whose compaction
    /// answers an old resourceVersion with 410.
    RealWithoutWatchCache,
}

/// The two servers behind the few operations the test bodies need.
pub enum Server {
    Simulated(ApiServer),
    Real(Box<RealApiServer>),
}

impl Server {
    /// Starts the server, with no CustomResourceDefinition installed.
    pub async fn start(kind: Kind) -> Server {
        match kind {
            Kind::Simulated | Kind::SimulatedLike120 => {
                let sim = ApiServer::start(ApiServerOptions {
                    tls: true,
                    aggregated_discovery: kind == Kind::Simulated,
                    fidelity: match kind {
                        Kind::SimulatedLike120 => Fidelity::KUBE_APISERVER,
                        _ => Fidelity::default(),
                    },
                    ..Default::default()
                })
                .await
                .expect("simulated API server");
                if kind == Kind::SimulatedLike120 {
                    sim.set_initial_events(InitialEvents::Rejected);
                }
                sim.delete_crd(WIDGETS);
                sim.delete_crd("gadgets");
                Server::Simulated(sim)
            }
            Kind::Real => Server::Real(Box::new(
                RealApiServer::start().await.expect("real API server"),
            )),
            Kind::RealWithoutWatchCache => Server::Real(Box::new(
                RealApiServer::start_with(RealApiServerOptions {
                    watch_cache: false,
                    compaction_interval: Duration::from_secs(2),
                    ..Default::default()
                })
                .await
                .expect("real API server"),
            )),
        }
    }

    pub fn url(&self) -> String {
        match self {
            Server::Simulated(sim) => sim.url(),
            Server::Real(real) => real.url(),
        }
    }

    pub fn ca_file(&self) -> PathBuf {
        match self {
            Server::Simulated(sim) => sim.ca_file().expect("the simulator serves TLS"),
            Server::Real(real) => real.ca_file(),
        }
    }

    /// A token allowed everything.
    pub fn token_file(&self) -> PathBuf {
        match self {
            Server::Simulated(sim) => sim.token_file(),
            Server::Real(real) => real.admin_token_file(),
        }
    }

    pub async fn create_pod(&self, name: &str) -> Value {
        self.create_pod_in(NS, name).await
    }

    pub async fn create_pod_in(&self, ns: &str, name: &str) -> Value {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
        });
        match self {
            Server::Simulated(sim) => sim.create("pods", Some(ns), pod),
            Server::Real(real) => real.create(&pods(ns), &pod).await.expect("create pod"),
        }
    }

    pub async fn label_pod(&self, name: &str, value: &str) -> Value {
        self.label_pod_in(NS, name, value).await
    }

    pub async fn label_pod_in(&self, ns: &str, name: &str, value: &str) -> Value {
        let change = |pod: &mut Value| pod["metadata"]["labels"]["step"] = value.into();
        match self {
            Server::Simulated(sim) => sim.update("pods", Some(ns), name, change),
            Server::Real(real) => real
                .update(&pods(ns), name, change)
                .await
                .expect("update pod"),
        }
    }

    pub async fn delete_pod(&self, name: &str) -> Value {
        self.delete_pod_in(NS, name).await
    }

    /// Deletes the pod; the server's answer.
    pub async fn delete_pod_in(&self, ns: &str, name: &str) -> Value {
        match self {
            Server::Simulated(sim) => sim.delete("pods", Some(ns), name).expect("pod to delete"),
            Server::Real(real) => real.delete(&pods(ns), name).await.expect("delete pod"),
        }
    }

    /// `POST`s `body` to `path` as the admin, over HTTP on either server: the status and the
    /// answer.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let token = std::fs::read_to_string(self.token_file()).unwrap();
        let response = client(&self.ca_file())
            .post(format!("{}{path}", self.url()))
            .bearer_auth(token.trim())
            .json(body)
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON answer"))
    }

    /// Installs the CustomResourceDefinition of widgets serving `versions` (the first the
    /// storage version, [`WRITE_VERSION`] among them) and returns once they are served.
    pub async fn install_widgets(&self, versions: &[&'static str]) {
        assert!(versions.contains(&WRITE_VERSION));
        match self {
            Server::Simulated(sim) => {
                sim.create_crd(WIDGETS);
                if versions != [WRITE_VERSION] {
                    sim.set_crd_versions(WIDGETS, versions);
                }
            }
            Server::Real(real) => {
                real.create_crd(&widget_crd(versions))
                    .await
                    .expect("the widgets CRD");
            }
        }
    }

    /// Updates the CustomResourceDefinition of widgets to serve `versions`, the first staying
    /// the storage version.
    pub async fn serve_widgets_at(&self, versions: &[&'static str]) {
        match self {
            Server::Simulated(sim) => sim.set_crd_versions(WIDGETS, versions),
            Server::Real(real) => {
                let spec = widget_crd(versions)["spec"]["versions"].clone();
                real.update_crd("widgets.example.com", |crd| crd["spec"]["versions"] = spec)
                    .await
                    .expect("the widgets CRD updated");
            }
        }
    }

    /// Deletes the CustomResourceDefinition of widgets and returns once every widget is deleted
    /// and the resource is no longer served.
    pub async fn uninstall_widgets(&self) {
        match self {
            Server::Simulated(sim) => {
                sim.delete_crd(WIDGETS);
            }
            Server::Real(real) => real
                .delete_crd("widgets.example.com")
                .await
                .expect("the widgets CRD deleted"),
        }
    }

    pub async fn create_widget(&self, name: &str) -> Value {
        let widget = json!({
            "apiVersion": format!("example.com/{WRITE_VERSION}"), "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": 1}
        });
        match self {
            Server::Simulated(sim) => sim.create(WIDGETS, Some(NS), widget),
            Server::Real(real) => real
                .create(&widgets(WRITE_VERSION), &widget)
                .await
                .expect("create widget"),
        }
    }

    pub async fn resize_widget(&self, name: &str, size: u64) -> Value {
        let change = |widget: &mut Value| widget["spec"]["size"] = size.into();
        match self {
            Server::Simulated(sim) => sim.update(WIDGETS, Some(NS), name, change),
            Server::Real(real) => real
                .update(&widgets(WRITE_VERSION), name, change)
                .await
                .expect("update widget"),
        }
    }

    pub async fn delete_widget(&self, name: &str) {
        match self {
            Server::Simulated(sim) => {
                sim.delete(WIDGETS, Some(NS), name)
                    .expect("widget to delete");
            }
            Server::Real(real) => {
                real.delete(&widgets(WRITE_VERSION), name)
                    .await
                    .expect("delete widget");
            }
        }
    }

    /// The requests kube2nats made so far, in the order the server answered them (the
    /// simulator's request log; the real server's audit log, by kube2nats' User-Agent).
    pub fn asked(&self) -> Vec<Asked> {
        match self {
            Server::Simulated(sim) => sim
                .requests()
                .into_iter()
                .map(|r| Asked {
                    initial_events: r.param("sendInitialEvents").is_some(),
                    method: r.method,
                    path: r.path,
                    status: r.status,
                })
                .collect(),
            Server::Real(real) => real
                .requests()
                .iter()
                .filter(|r| r.user_agent.starts_with("kube2nats/"))
                .map(Asked::from_audit)
                .collect(),
        }
    }

    /// Waits until a watch of widgets is registered with the server (the one kube2nats opened:
    /// the test has none): the simulator's open watches (the pods watch and it), kube-apiserver's
    /// `apiserver_registered_watchers` of the widgets' watch cache.
    pub async fn wait_watching_widgets(&self) {
        match self {
            Server::Simulated(sim) => assert!(
                sim.wait_for_watches(2, Duration::from_secs(30)).await,
                "kube2nats never watched widgets"
            ),
            Server::Real(real) => {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                loop {
                    let text = real.metrics().await.expect("kube-apiserver's metrics");
                    let watchers: f64 = text
                        .lines()
                        .filter(|l| l.starts_with("apiserver_registered_watchers{"))
                        .filter(|l| l.to_ascii_lowercase().contains("widget"))
                        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                        .sum();
                    if watchers >= 1.0 {
                        return;
                    }
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "kube2nats never watched widgets: {:?}",
                        text.lines()
                            .filter(|l| l.starts_with("apiserver_registered_watchers{"))
                            .collect::<Vec<_>>()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// The objects of the collection at `path` (e.g. [`pods`]`(NS)`): `(name, resourceVersion)`,
    /// sorted by name.
    pub async fn list(&self, path: &str) -> Vec<(String, String)> {
        let list = match self {
            Server::Simulated(_) => {
                let client = client(&self.ca_file());
                let token = std::fs::read_to_string(self.token_file()).unwrap();
                client
                    .get(format!("{}{path}", self.url()))
                    .bearer_auth(token.trim())
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .expect("list")
                    .json::<Value>()
                    .await
                    .expect("a list")
            }
            Server::Real(real) => real
                .request(reqwest::Method::GET, path, None)
                .await
                .expect("list"),
        };
        let mut objects: Vec<(String, String)> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (
                    text(&o["metadata"]["name"]),
                    text(&o["metadata"]["resourceVersion"]),
                )
            })
            .collect();
        objects.sort();
        objects
    }

    /// Grants the ServiceAccount of the manifests exactly the RBAC objects deploy/base/rbac.yaml
    /// ships (the RoleBinding's subject in [`SA_NAMESPACE`], as kustomize's `namespace` sets it)
    /// and returns a token of that account: from the TokenRequest API on the real server; on
    /// the simulator, a token given the Roles' rules (it has no bindings of its own).
    pub async fn shipped_rbac_token(&self) -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/rbac.yaml");
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
        match self {
            Server::Simulated(sim) => {
                let token = "kube2nats-service-account-token";
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .map(|x| x.as_str().unwrap().to_owned())
                        .collect()
                };
                let mut rules = Vec::new();
                for doc in &docs {
                    let namespaces = match doc["kind"].as_str() {
                        Some("Role") => vec![SA_NAMESPACE.to_owned()],
                        Some("ClusterRole") => Vec::new(),
                        _ => continue,
                    };
                    for rule in doc["rules"].as_array().unwrap() {
                        rules.push(Rule {
                            verbs: strings(&rule["verbs"]),
                            api_groups: strings(&rule["apiGroups"]),
                            resources: strings(&rule["resources"]),
                            namespaces: namespaces.clone(),
                            resource_names: strings(&rule["resourceNames"]),
                        });
                    }
                }
                sim.set_valid_tokens(&[INITIAL_TOKEN, token]);
                sim.set_rules(token, rules);
                token.to_owned()
            }
            Server::Real(real) => {
                let create = |path: String, obj: Value| async move {
                    real.create(&path, &obj)
                        .await
                        .unwrap_or_else(|e| panic!("creating {obj}: {e:#}"))
                };
                create(
                    "/api/v1/namespaces".into(),
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SA_NAMESPACE}}),
                )
                .await;
                create(
                    format!("/api/v1/namespaces/{SA_NAMESPACE}/serviceaccounts"),
                    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA_NAME}}),
                )
                .await;
                let rbac = "/apis/rbac.authorization.k8s.io/v1";
                for mut doc in docs {
                    let path = match doc["kind"].as_str().unwrap() {
                        "Role" => format!("{rbac}/namespaces/{SA_NAMESPACE}/roles"),
                        "RoleBinding" => {
                            for subject in doc["subjects"].as_array_mut().unwrap() {
                                subject["namespace"] = SA_NAMESPACE.into();
                            }
                            format!("{rbac}/namespaces/{SA_NAMESPACE}/rolebindings")
                        }
                        "ClusterRole" => format!("{rbac}/clusterroles"),
                        "ClusterRoleBinding" => format!("{rbac}/clusterrolebindings"),
                        other => panic!("rbac.yaml holds a {other}"),
                    };
                    create(path, doc).await;
                }
                let answer = create(
                    format!("/api/v1/namespaces/{SA_NAMESPACE}/serviceaccounts/{SA_NAME}/token"),
                    json!({
                        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                        "spec": {"expirationSeconds": 3600}
                    }),
                )
                .await;
                answer["status"]["token"].as_str().unwrap().to_owned()
            }
        }
    }

    /// Makes every watch that resumes from a resourceVersion older than now get 410 Expired:
    /// the simulator forgets its history; a real kube-apiserver serving watches from etcd waits
    /// for its periodic compaction to pass now; one with the watch cache restarts, since its
    /// cache keeps every event of the last 75 s whatever etcd compacts, and starts over from
    /// etcd's current revision.
    pub async fn expire_history(&mut self) {
        match self {
            Server::Simulated(sim) => sim.compact(),
            Server::Real(real) if real.watch_cache() => real
                .restart_apiserver()
                .await
                .expect("kube-apiserver restarts"),
            Server::Real(real) => {
                let list = real
                    .request(reqwest::Method::GET, &pods(NS), None)
                    .await
                    .expect("list");
                let now: u64 = list["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                real.wait_compacted_past(now).await.expect("compaction");
            }
        }
    }
}

/// An HTTP client trusting only the CA in `ca_file`.
pub fn client(ca_file: &std::path::Path) -> reqwest::Client {
    let pem = std::fs::read(ca_file).unwrap();
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap()
}
