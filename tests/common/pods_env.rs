//! A simulated API server, a nats-server and a free port for kube2nats' HTTP endpoints, with the
//! configuration of one pods watch in one namespace and durable state: what the tests of a
//! watch's options (noise control, filters) start from.

#![allow(dead_code)]

use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;

use std::time::Duration;

use crate::common::{free_port, kube_section, scrape_metrics, Inbox, WAIT};

/// The namespace of the pods watch.
pub const NS: &str = "default";

pub struct Env {
    pub sim: ApiServer,
    pub nats: NatsServer,
    pub http_port: u16,
}

impl Env {
    pub async fn start() -> Env {
        Env {
            sim: ApiServer::start(ApiServerOptions::default()).await.unwrap(),
            nats: NatsServer::start().await.unwrap(),
            http_port: free_port(),
        }
    }

    /// One pods watch in [`NS`] carrying `watch_extra`, durable state checkpointed every 150 ms,
    /// `nats_extra` appended to `[nats]`.
    pub fn pods_config(&self, nats_extra: &str, watch_extra: &str) -> String {
        format!(
            "{}\n[nats]\nurl = \"{}\"\n{nats_extra}[state]\ncheckpoint_interval = \"150ms\"\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"{NS}\"]\n{watch_extra}\n",
            kube_section(&self.sim, &self.sim.token_file()).replace(
                "listen = \"127.0.0.1:0\"",
                &format!("listen = \"127.0.0.1:{}\"", self.http_port)
            ),
            self.nats.url(),
        )
    }

    /// A subscription to every subject kube2nats publishes on.
    pub async fn inbox(&self) -> Inbox {
        let nc = async_nats::connect(self.nats.url()).await.unwrap();
        Inbox::subscribe(&nc, "kube.>").await
    }

    pub async fn metrics(&self) -> String {
        scrape_metrics(self.http_port).await
    }

    /// Waits until the saved state covers `rv`: the watch's manifest's resume version reached it.
    pub async fn wait_for_checkpoint(&self, rv: u64) {
        let nc = async_nats::connect(self.nats.url()).await.unwrap();
        let js = async_nats::jetstream::new(nc);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(kv) = js.get_key_value("kube2nats-state").await {
                let key = format!("{}._.pods.{NS}.manifest", self.sim.cluster_uid());
                if let Ok(Some(raw)) = kv.get(key).await {
                    let manifest: serde_json::Value = serde_json::from_slice(&raw).unwrap();
                    let saved: Option<u64> = manifest["resume_version"]
                        .as_str()
                        .and_then(|v| v.parse().ok());
                    if saved.is_some_and(|saved| saved >= rv) {
                        return;
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no checkpoint reached resourceVersion {rv}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
