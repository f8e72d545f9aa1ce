//! kube2nats, the real binary, configured for one of the servers.

use std::time::Duration;

use crate::common::{self, free_port, Process};
use crate::server::{Server, NS};
use kube2nats_harness::nats::NatsServer;

/// The widgets watch, beside the pods watch every test daemon has; its resource names no
/// version, so it follows the preferred one.
pub const WIDGETS_WATCH: &str = r#"
[[watches]]
name = "widgets"
resource = "widgets.example.com"
namespaces = ["default"]
"#;

/// kube2nats (the real binary) watching the pods of [`NS`], publishing into the `KUBE` stream,
/// with its state checkpointed to the NATS bucket every 150 ms.
pub struct Daemon {
    config: String,
    http_port: u16,
    process: Option<Process>,
}

impl Daemon {
    pub fn config(
        server: &Server,
        nats: &NatsServer,
        http_port: u16,
        ns: &str,
        token_file: &std::path::Path,
    ) -> String {
        format!(
            r#"
[kubernetes]
api_url = "{url}"
token_file = {token:?}
ca_file = {ca:?}
watch_timeout = "30s"
[kubernetes.backoff]
initial = "50ms"
max = "1s"
jitter = 0.0
[http]
listen = "127.0.0.1:{http_port}"
[shutdown]
grace_period = "5s"
[nats]
url = "{nats}"
mode = "jetstream"
[nats.jetstream]
ack_timeout = "1s"
[nats.jetstream.stream]
name = "KUBE"
subjects = ["kube.>"]
[state]
checkpoint_interval = "150ms"
[[watches]]
name = "pods"
resource = "pods"
namespaces = ["{ns}"]
"#,
            url = server.url(),
            token = token_file.display().to_string(),
            ca = server.ca_file().display().to_string(),
            nats = nats.url(),
        )
    }

    pub async fn start(server: &Server, nats: &NatsServer) -> Daemon {
        Daemon::start_as(server, nats, NS, &server.token_file()).await
    }

    /// Watching the pods of [`NS`], with `more` configuration appended (watches, sections).
    pub async fn start_with(server: &Server, nats: &NatsServer, more: &str) -> Daemon {
        Daemon::start_edited(server, nats, |config| config + more).await
    }

    /// Watching the pods of [`NS`], its configuration changed by `edit`.
    pub async fn start_edited(
        server: &Server,
        nats: &NatsServer,
        edit: impl FnOnce(String) -> String,
    ) -> Daemon {
        let http_port = free_port();
        let token_file = server.token_file();
        let mut daemon = Daemon {
            config: edit(Daemon::config(server, nats, http_port, NS, &token_file)),
            http_port,
            process: None,
        };
        daemon.restart().await;
        daemon
    }

    /// Watching the pods of `ns` with the token in `token_file`.
    pub async fn start_as(
        server: &Server,
        nats: &NatsServer,
        ns: &str,
        token_file: &std::path::Path,
    ) -> Daemon {
        let http_port = free_port();
        let mut daemon = Daemon {
            config: Daemon::config(server, nats, http_port, ns, token_file),
            http_port,
            process: None,
        };
        daemon.restart().await;
        daemon
    }

    /// Starts the process (again) and waits until `/readyz` answers 200, or says that all it
    /// waits for is a resource not served yet.
    pub async fn restart(&mut self) {
        self.process = Some(Process::spawn(&self.config));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let url = format!("http://127.0.0.1:{}/readyz", self.http_port);
            if let Ok(answer) = reqwest::get(url).await {
                let status = answer.status();
                let body = answer.text().await.unwrap_or_default();
                let only_waiting = body.contains("resource not served")
                    && !["not connected", "not started", "not synced", "repairing"]
                        .iter()
                        .any(|reason| body.contains(reason));
                if status == 200 || only_waiting {
                    return;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let log = self.process.as_ref().map(Process::rest).unwrap_or_default();
                panic!("kube2nats not ready within 30 s; log:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        common::scrape_metrics(self.http_port).await
    }

    /// Waits until `/readyz` answers 200: every watch listed and watching.
    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let url = format!("http://127.0.0.1:{}/readyz", self.http_port);
        loop {
            let ready = reqwest::get(&url).await;
            if ready.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "kube2nats not ready within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the metric `name{labels}` reads `value`.
    pub async fn metric_becomes(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = common::metric(&self.metrics().await, name, labels);
            if got == Some(value) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                let log = self.process.as_ref().map(Process::rest).unwrap_or_default();
                panic!("{name}{labels:?} never became {value}: {got:?}; log:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }
}
