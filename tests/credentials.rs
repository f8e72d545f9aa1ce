//! Where the API server is and how kube2nats authenticates: in-cluster service account, kubeconfig,
//! an explicit URL, and the explicit opt-out of TLS verification — each against the simulator.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use kube2nats::config::{ApiSource, KubernetesConfig};
use kube2nats::kube::credentials::{self, CredentialsError};
use kube2nats::kube::ApiClient;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};

fn kubernetes(source: ApiSource, insecure: bool) -> KubernetesConfig {
    KubernetesConfig {
        source,
        insecure_skip_tls_verify: insecure,
        token_reload_interval: Duration::from_secs(60),
        request_timeout: Duration::from_secs(5),
        list_page_size: 500,
        watch_timeout: Duration::from_secs(60),
        streaming_list: false,
        max_line_bytes: 1 << 20,
        backoff: FAST_BACKOFF,
        rbac_check: kube2nats::config::RbacCheck::Warn,
    }
}

fn client_for(
    cfg: &KubernetesConfig,
    env: &[(&str, String)],
) -> Result<std::sync::Arc<ApiClient>, CredentialsError> {
    let endpoint = credentials::resolve(cfg, |name| {
        env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
    })?;
    Ok(api_client(endpoint))
}

async fn lists_pods(client: std::sync::Arc<ApiClient>) {
    let mut rec = Recorder::start(client, target(pods(), Some("default")));
    let first = rec.next().await;
    assert!(first.starts_with("list start:initial [a]"), "{first}");
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
    let source = ApiSource::InCluster {
        token_file: sim.token_file(),
        ca_file: sim.ca_file().unwrap(),
        namespace_file: PathBuf::from("/nonexistent/namespace"),
    };
    let env = [
        ("KUBERNETES_SERVICE_HOST", "localhost".to_owned()),
        ("KUBERNETES_SERVICE_PORT", sim.addr().port().to_string()),
    ];
    lists_pods(client_for(&kubernetes(source.clone(), false), &env).unwrap()).await;

    let Err(err) = client_for(&kubernetes(source, false), &[]) else {
        panic!("in-cluster without the environment must fail")
    };
    let err = err.to_string();
    assert!(err.contains("KUBERNETES_SERVICE_HOST is not set"), "{err}");
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
        path,
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
    let mut rec = Recorder::start(
        client_for(&kubernetes(source.clone(), false), &[]).unwrap(),
        target(pods(), Some("default")),
    );
    assert_eq!(rec.next().await, "restart transport");
    lists_pods(client_for(&kubernetes(source, true), &[]).unwrap()).await;
}

/// An API server unreachable at start is retried with backoff, not a reason to exit: once it
/// answers, the watches sync and publish.
#[tokio::test]
async fn unreachable_api_server_at_start_is_retried() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create("pods", Some("default"), pod("early"));
    sim.stop_serving().await;
    let nats = kube2nats_harness::nats::NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let toml = format!(
        "{}\n[nats]\nurl = \"{}\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        kube_section(&sim, &sim.token_file()),
        nats.url()
    );
    let daemon = kube2nats::app::start(config_from(&toml)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    sim.resume_serving().await.unwrap();
    assert_eq!(inbox.next().await.short(), "ADDED early");
    let discovery_failures = metric(
        &daemon.metrics.render(),
        "kube2nats_api_requests_total",
        &[("verb", "get"), ("code", "0")],
    )
    .unwrap_or(0.0);
    assert!(
        discovery_failures >= 2.0,
        "discovery was retried ({discovery_failures})"
    );
    daemon.shutdown();
    daemon.wait().await.unwrap();
}
