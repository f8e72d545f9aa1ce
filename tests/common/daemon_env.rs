//! One daemon end to end for the delivery tests: the simulated API server, a real nats-server,
//! kube2nats started in-process with a generated configuration, and a NATS client to subscribe.

use std::time::Duration;

use kube2nats::facade::Daemon;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;

use super::{config_from, kube_section, token_file, Got, WAIT};

pub struct Env {
    pub sim: ApiServer,
    /// Kept alive for the test; dropping it stops nats-server.
    pub _nats: NatsServer,
    pub daemon: Option<Daemon>,
    pub nc: async_nats::Client,
    pub _dir: tempfile::TempDir,
}

impl Env {
    /// Starts the simulator, nats-server and kube2nats with `extra` appended to the generated
    /// configuration (`[nats]` options, `[[watches]]`).
    pub async fn start(nats_section: &str, watches: &str) -> Env {
        let sim = ApiServer::start(ApiServerOptions::default())
            .await
            .expect("simulated API server");
        let nats = NatsServer::start().await.expect("nats-server");
        Env::start_with(sim, nats, nats_section, watches).await
    }

    pub async fn start_with(
        sim: ApiServer,
        nats: NatsServer,
        nats_section: &str,
        watches: &str,
    ) -> Env {
        Env::start_edited(sim, nats, nats_section, watches, |toml| toml).await
    }

    /// As [`Env::start_with`], with the generated configuration passed through `edit` (e.g. to
    /// change the watch timeout).
    pub async fn start_edited(
        sim: ApiServer,
        nats: NatsServer,
        nats_section: &str,
        watches: &str,
        edit: impl FnOnce(String) -> String,
    ) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let token = token_file(dir.path(), INITIAL_TOKEN);
        let toml = edit(format!(
            "{}\n[nats]\nurl = \"{}\"\n{nats_section}\n{watches}",
            kube_section(&sim, &token),
            nats.url()
        ));
        let config = config_from(&toml);
        let nc = async_nats::connect(nats.url())
            .await
            .expect("test subscriber connects");
        let daemon = kube2nats::facade::start(config)
            .await
            .expect("kube2nats starts");
        Env {
            sim,
            _nats: nats,
            daemon: Some(daemon),
            nc,
            _dir: dir,
        }
    }

    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("daemon running")
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let url = format!("http://{}{path}", self.daemon().http_addr);
        let response = reqwest::get(&url).await.expect("kube2nats HTTP endpoint");
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    }

    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (code, body) = self.get("/readyz").await;
            if code == 200 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "kube2nats not ready: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn metrics(&self) -> String {
        self.daemon().metrics.render()
    }

    pub async fn stop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.shutdown();
            d.wait().await.expect("kube2nats stops cleanly");
        }
    }
}

pub const PODS_WATCH: &str = r#"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["default"]
"#;

pub fn assert_headers(m: &Got, event_type: &str, obj: &serde_json::Value) {
    let meta = &obj["metadata"];
    let uid = meta["uid"].as_str().unwrap();
    let rv = meta["resourceVersion"].as_str().unwrap();
    assert_eq!(m.header("Kube-Event-Type"), Some(event_type));
    assert_eq!(m.header("Kube-Resource-Version"), Some(rv));
    assert_eq!(m.header("Kube-Uid"), Some(uid));
    assert_eq!(m.header("Kube-Namespace"), meta["namespace"].as_str());
    assert_eq!(m.header("Kube-Name"), meta["name"].as_str());
    let msg_id = match event_type {
        "DELETED" => format!("pods:{uid}:{rv}:DELETED"),
        _ => format!("pods:{uid}:{rv}"),
    };
    assert_eq!(m.header("Nats-Msg-Id"), Some(msg_id.as_str()));
}
