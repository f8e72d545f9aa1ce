//! Helpers of the tests that talk to the simulated API server (`kube2nats-harness`): an API
//! client pointed at it, authenticated with a token file as a pod's service account is, a pod to
//! create there, and retries short enough for a test.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube2nats_harness::apiserver::ApiServer;
use serde_json::{json, Value};

use super::client::register_api_requests;
use super::credentials::{AuthSource, Endpoint};
use super::ApiClient;
use crate::config::BackoffConfig;

/// A file holding `token`, as a mounted service-account token.
pub(crate) fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, token).expect("writing the test token file");
    path
}

/// A client for `sim` that reads its token from `token_file` (re-read every `reload`).
pub(crate) fn client(
    sim: &ApiServer,
    token_file: Option<PathBuf>,
    reload: Duration,
) -> Arc<ApiClient> {
    api_client(Endpoint {
        base_url: sim.url().parse().expect("simulator URL"),
        ca_pem: sim
            .ca_file()
            .map(|p| std::fs::read(p).expect("reading the simulator CA")),
        identity_pem: None,
        auth: token_file.map(|p| AuthSource::file(p, reload)),
        insecure_skip_tls_verify: false,
        proxy_url: None,
    })
}

/// A client for `endpoint`, counting its requests into a throwaway counter.
pub(crate) fn api_client(endpoint: Endpoint) -> Arc<ApiClient> {
    let counter = register_api_requests(&prometheus::Registry::new()).expect("counter");
    Arc::new(ApiClient::new(endpoint, Duration::from_secs(5), counter).expect("API client"))
}

/// Backoff short enough for tests, with no jitter so delays are predictable.
pub(crate) const FAST_BACKOFF: BackoffConfig = BackoffConfig::checked(
    Duration::from_millis(50),
    Duration::from_secs(2),
    2.0,
    0.0,
    Duration::from_secs(120),
);

pub(crate) fn pod(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    })
}
