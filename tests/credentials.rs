//! Where the API server is, as the daemon finds it: an API server unreachable at start is
//! retried, and the real binary outside a pod finds `~/.kube/config` as kubectl does. How each
//! source of credentials is read is tested in the crate (`src/kube/credentials/tests.rs`).

mod common;

use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Auth};

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
    let daemon = kube2nats::facade::start(config_from(&toml)).await.unwrap();
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

/// The README's from-source command on a workstation: the real binary with no `[kubernetes]` section,
/// not in a pod, finds `~/.kube/config` as kubectl does and publishes.
#[tokio::test]
async fn binary_outside_a_pod_uses_home_kube_config() {
    let sim = tls_sim(Auth::Tokens).await;
    let home = home_with_kube_config(&sim);
    let nats = kube2nats_harness::nats::NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let config = format!(
        "[nats]\nurl = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n",
        nats.url()
    );
    // Empty is unset, as client-go reads them.
    let home_dir = home.path().display().to_string();
    let env = [
        ("KUBERNETES_SERVICE_HOST", ""),
        ("KUBECONFIG", ""),
        ("HOME", home_dir.as_str()),
    ];
    let _daemon = Process::spawn_env(&config, &[], &env);
    assert_eq!(inbox.next().await.short(), "ADDED a");
}
