//! kube2nats in a minute, with no cluster: `scripts/demo` (or `cargo run --example demo` with
//! `nats-server` on PATH or in `NATS_SERVER_BIN`).
//!
//! Starts a real `nats-server` on a free loopback port, the simulated kube-apiserver of the test
//! harness, and kube2nats in-process, configured from TOML text as a user would write it. A
//! subscriber prints every message that arrives on `kube.>`, with its headers, while a small
//! scripted workload runs (a Deployment rolls out, its pods start, one goes away, then the
//! Deployment and its pods); then a few lines of kube2nats' `/metrics`, and the other half of the
//! product: an informer of the Rust subscriber kit (clients/rust) started on kube2nats' mirror,
//! its synced store printed beside the simulated API server's list. Then it keeps going — a pod is created, started and
//! deleted every few seconds, and it prints the command to watch from another terminal
//! (`scripts/sub`, or the `nats` CLI) — until Ctrl-C, which stops everything cleanly. Exits non-zero if a message that should have
//! arrived did not.
//!
//! `--once` stops after the scripted workload (what scripts/check-demo runs).
//! `--binary PATH` runs that kube2nats binary as a process instead (stopped with SIGTERM, which
//! must end it with status 0): scripts/check-deploy runs the demo so with the binary the
//! container image ships.

#[path = "shared/message_print.rs"]
mod message_print;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use kube2nats_harness::nats::NatsServer;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The namespace the workload runs in.
const NAMESPACE: &str = "shop";
/// How long the demo waits for the messages it expects before it gives up.
const WAIT: Duration = Duration::from_secs(15);
/// A pause between steps of the workload, so the output reads as a story.
const STEP: Duration = Duration::from_millis(150);
/// After the scripted workload, one change every this long until Ctrl-C.
const TICK: Duration = Duration::from_secs(3);

/// What the command line asks for.
struct Args {
    binary: Option<PathBuf>,
    once: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        binary: None,
        once: false,
    };
    let mut rest = std::env::args().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--once" => args.once = true,
            "--binary" => args.binary = Some(rest.next().context("--binary needs a path")?.into()),
            _ => bail!("usage: demo [--once] [--binary PATH-OF-KUBE2NATS]"),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    // kube2nats' own log lines: errors only, so the messages stand out; RUST_LOG=info shows all.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    let nats = NatsServer::start().await.context("starting nats-server")?;
    let api = ApiServer::start(ApiServerOptions::default())
        .await
        .context("starting the simulated API server")?;
    println!("nats-server        {}", nats.url());
    println!("simulated cluster  {}", api.url());

    // Something exists before kube2nats starts: its first list publishes it as ADDED.
    api.create("pods", Some(NAMESPACE), pod("db-0", "Running"));
    api.create("pods", Some(NAMESPACE), pod("cache-0", "Running"));

    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let config_path = dir.path().join("kube2nats.toml");
    // A process needs a port known in advance; in-process, kube2nats reports the one it got.
    let listen = match args.binary {
        Some(_) => std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .to_string(),
        None => "127.0.0.1:0".to_owned(),
    };
    let config_text = config_toml(&api, &nats, &listen);
    std::fs::write(&config_path, &config_text).context("writing kube2nats.toml")?;

    let nc = async_nats::connect(nats.url())
        .await
        .context("connecting the subscriber")?;
    let sub = nc.subscribe("kube.>").await?;
    nc.flush().await?;

    let daemon = Kube2nats::start(args.binary.as_deref(), &config_path, &listen).await?;
    let http = format!("http://{}", daemon.http_addr());
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
    let mut counts: HashMap<String, usize> = HashMap::new();
    let expected = 10;

    // Ctrl-C at any point stops everything cleanly; during the first round it cuts it short.
    let stop = stop_on_signal()?;
    let first_round = async {
        wait_ready(&http).await?;
        match &args.binary {
            Some(path) => println!(
                "kube2nats          {} (pid {})",
                path.display(),
                daemon.pid()
            ),
            None => println!("kube2nats          in-process"),
        }
        println!("                   ready, metrics at {http}/metrics (its log: RUST_LOG=info)");
        println!("subscriber         on 'kube.>': each message's subject, headers and payload\n");
        // The subscriber prints every message; the event types come back here to be counted.
        let printer = tokio::spawn(print_messages(sub, arrived_tx));
        workload(&api).await;
        let deadline = tokio::time::Instant::now() + WAIT;
        while counts.values().sum::<usize>() < expected {
            match tokio::time::timeout_at(deadline, arrived.recv()).await {
                Ok(Some(event_type)) => *counts.entry(event_type).or_default() += 1,
                _ => break,
            }
        }
        print_metrics(&http).await?;
        show_informer(&api, &nats).await?;
        anyhow::Ok(printer)
    };
    let printer = tokio::select! {
        _ = stop.cancelled() => None,
        printer = first_round => Some(printer?),
    };

    if printer.is_some() && !args.once && counts.values().sum::<usize>() >= expected {
        println!(
            "\nkube2nats keeps running: a pod in namespace {NAMESPACE} changes every {}s.\n\
             Watch from another terminal: scripts/sub -s {url} 'kube.>'\n\
             or with the nats CLI (https://github.com/nats-io/natscli/releases): nats sub -s {url} 'kube.>'\n\
             Press Ctrl-C to stop everything.\n",
            TICK.as_secs(),
            url = nats.url()
        );
        keep_changing(&api, &mut arrived, &mut counts, &stop).await;
        println!();
    }

    if let Some(printer) = printer {
        printer.abort();
    }
    daemon.stop().await.context("stopping kube2nats")?;
    drop(api);
    drop(nats);
    if stop.is_cancelled() && counts.values().sum::<usize>() < expected {
        println!("\ninterrupted; everything stopped");
        return Ok(());
    }

    let count = |t: &str| counts.get(t).copied().unwrap_or(0);
    let total: usize = counts.values().sum();
    println!(
        "\n{total} messages through nats-server: {} ADDED, {} MODIFIED, {} DELETED; everything stopped",
        count("ADDED"),
        count("MODIFIED"),
        count("DELETED")
    );
    if total < expected {
        bail!("expected {expected} messages, {total} arrived within {WAIT:?}");
    }
    Ok(())
}

/// Prints each message as a subscriber sees it: the subject, the headers, the payload's start.
/// Sends each message's `Kube-Event-Type` to `arrived`.
async fn print_messages(mut sub: async_nats::Subscriber, arrived: mpsc::UnboundedSender<String>) {
    while let Some(msg) = sub.next().await {
        let event_type = message_print::print_message(&msg);
        if arrived.send(event_type).is_err() {
            return;
        }
    }
}

/// A few lines of kube2nats' own `/metrics`.
async fn print_metrics(http: &str) -> anyhow::Result<()> {
    println!("\nfrom {http}/metrics:");
    let metrics = reqwest::get(format!("{http}/metrics"))
        .await
        .context("reading /metrics")?
        .text()
        .await?;
    for line in metrics.lines().filter(|l| {
        [
            "kube2nats_events_published_total",
            "kube2nats_tracked_objects",
            "kube2nats_nats_connected",
        ]
        .iter()
        .any(|m| l.starts_with(m))
    }) {
        println!("  {line}");
    }
    Ok(())
}

/// A token cancelled by the first Ctrl-C (SIGINT) or SIGTERM.
fn stop_on_signal() -> anyhow::Result<CancellationToken> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        token.cancel();
    });
    Ok(stop)
}

/// Until `stop`: every [`TICK`], one change to a pod `job-N` (created, started, deleted, then the
/// next), counting the messages that arrive.
async fn keep_changing(
    api: &ApiServer,
    arrived: &mut mpsc::UnboundedReceiver<String>,
    counts: &mut HashMap<String, usize>,
    stop: &CancellationToken,
) {
    let ns = Some(NAMESPACE);
    let mut tick = tokio::time::interval(TICK);
    let mut step = 0_usize;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            Some(event_type) = arrived.recv() => *counts.entry(event_type).or_default() += 1,
            _ = tick.tick() => {
                let name = format!("job-{}", step / 3 + 1);
                match step % 3 {
                    0 => drop(api.create("pods", ns, pod(&name, "Pending"))),
                    1 => drop(api.update("pods", ns, &name, |p| p["status"]["phase"] = "Running".into())),
                    _ => drop(api.delete("pods", ns, &name)),
                }
                step += 1;
            }
        }
    }
}

/// kube2nats, in this process or as a child process.
enum Kube2nats {
    InProcess(kube2nats::facade::Daemon),
    Process(tokio::process::Child, String),
}

impl Kube2nats {
    async fn start(binary: Option<&Path>, config: &Path, listen: &str) -> anyhow::Result<Self> {
        let Some(binary) = binary else {
            let config = kube2nats::facade::load(Some(config), Some(HashMap::new()))
                .map_err(|e| anyhow::anyhow!("the demo's configuration is invalid:\n{e}"))?;
            let daemon = kube2nats::facade::start(config)
                .await
                .context("starting kube2nats")?;
            return Ok(Kube2nats::InProcess(daemon));
        };
        let mut command = tokio::process::Command::new(binary);
        command.arg("--config").arg(config).kill_on_drop(true);
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "error");
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Kube2nats::Process(child, listen.to_owned()))
    }

    fn http_addr(&self) -> String {
        match self {
            Kube2nats::InProcess(daemon) => daemon.http_addr.to_string(),
            Kube2nats::Process(_, listen) => listen.clone(),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Kube2nats::InProcess(_) => std::process::id(),
            Kube2nats::Process(child, _) => child.id().unwrap_or_default(),
        }
    }

    /// Stops kube2nats the way Kubernetes does (SIGTERM for a process) and waits for a clean end.
    async fn stop(self) -> anyhow::Result<()> {
        match self {
            Kube2nats::InProcess(daemon) => {
                daemon.shutdown();
                daemon.wait().await
            }
            Kube2nats::Process(mut child, _) => {
                let pid = child.id().context("kube2nats exited early")?;
                let kill = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status()?;
                anyhow::ensure!(kill.success(), "kill -TERM {pid} failed");
                let status = tokio::time::timeout(WAIT, child.wait())
                    .await
                    .context("kube2nats did not stop after SIGTERM")??;
                anyhow::ensure!(status.success(), "kube2nats exited with {status}");
                Ok(())
            }
        }
    }
}

/// A subscriber of the other kind: an informer of the pods, kept by kube-runtime's `reflector` from
/// the Rust kit's watcher on kube2nats' mirror, started after the workload, its store printed
/// beside the API server's list (they are equal once the informer has the bucket's writes).
async fn show_informer(api: &ApiServer, nats: &NatsServer) -> anyhow::Result<()> {
    let client = async_nats::connect(nats.url()).await?;
    let started = tokio::time::Instant::now();
    let (store, writer) = reflector::store::<Pod>();
    let config = kube2nats_client::Config::default().namespace(NAMESPACE);
    let mut events = reflector(writer, kube2nats_client::watcher::<Pod>(client, config)).boxed();
    let follow = async {
        while let Some(event) = events.next().await {
            if let Err(e) = event {
                println!("informer           {e}");
            }
        }
    };
    let listed = |pods: &[std::sync::Arc<Pod>]| -> Vec<(String, String)> {
        let mut listed: Vec<(String, String)> = pods
            .iter()
            .map(|p| {
                let m = &p.metadata;
                (
                    m.name.clone().unwrap_or_default(),
                    m.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect();
        listed.sort();
        listed
    };
    let compare = async {
        store.wait_until_ready().await?;
        let synced = started.elapsed();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let want = api_pods(api).await?;
            let have = listed(&store.state());
            if have == want || tokio::time::Instant::now() > deadline {
                return anyhow::Ok((synced, have, want));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (synced, have, want) = tokio::select! {
        _ = follow => bail!("the informer's watch ended"),
        compared = compare => compared?,
    };
    println!(
        "\ninformer           kube-runtime's reflector on the Rust kit's watcher (clients/rust), reading\n\
         \x20                  kube2nats' mirror (bucket kube-objects), not the API server: synced in {} ms",
        synced.as_millis()
    );
    println!(
        "    {:<16} {:<12} API server (resourceVersion)",
        "pod", "informer"
    );
    let names: std::collections::BTreeSet<&String> =
        have.iter().chain(&want).map(|(name, _)| name).collect();
    let version = |list: &[(String, String)], name: &str| {
        list.iter()
            .find(|(n, _)| n == name)
            .map_or("-".to_owned(), |(_, rv)| rv.clone())
    };
    for name in names {
        println!(
            "    {:<16} {:<12} {}",
            format!("{NAMESPACE}/{name}"),
            version(&have, name),
            version(&want, name)
        );
    }
    if have != want {
        bail!("the informer's store differs from the API server's list");
    }
    println!("    the informer's store equals the API server's list");
    Ok(())
}

/// The API server's pods in the workload's namespace: (name, resourceVersion), sorted.
async fn api_pods(api: &ApiServer) -> anyhow::Result<Vec<(String, String)>> {
    let token = std::fs::read_to_string(api.token_file())?;
    let body = reqwest::Client::new()
        .get(format!("{}/api/v1/namespaces/{NAMESPACE}/pods", api.url()))
        .bearer_auth(token.trim())
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let list: Value = serde_json::from_slice(&body)?;
    let mut pods: Vec<(String, String)> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|p| {
                    let m = &p["metadata"];
                    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                    (text(&m["name"]), text(&m["resourceVersion"]))
                })
                .collect()
        })
        .unwrap_or_default();
    pods.sort();
    Ok(pods)
}

/// kube2nats' configuration, as a user would write it, pointed at the simulator and nats-server.
fn config_toml(api: &ApiServer, nats: &NatsServer, listen: &str) -> String {
    format!(
        r#"
[kubernetes]
api_url = "{api_url}"
token_file = {token:?}

[nats]
url = "{nats_url}"

[http]
listen = "{listen}"

[mirror]
enabled = true

[[watches]]
name = "pods"
resource = "pods"
namespaces = ["{NAMESPACE}"]

[[watches]]
name = "deployments"
resource = "deployments.apps"
namespaces = ["{NAMESPACE}"]
payload = "object"
"#,
        api_url = api.url(),
        token = api.token_file().display().to_string(),
        nats_url = nats.url(),
    )
}

/// A Deployment rolls out two pods, they start, one goes away, and the Deployment and its pods go
/// away. Ten changes: ADDED db-0 and cache-0 (listed at start), then eight through the watches;
/// db-0 and cache-0 stay.
async fn workload(api: &ApiServer) {
    let ns = Some(NAMESPACE);
    api.create("deployments", ns, deployment("web", 2));
    tokio::time::sleep(STEP).await;
    for name in ["web-1", "web-2"] {
        api.create("pods", ns, pod(name, "Pending"));
    }
    tokio::time::sleep(STEP).await;
    api.update("pods", ns, "web-1", |p| {
        p["status"]["phase"] = "Running".into()
    });
    api.update("deployments", ns, "web", |d| {
        d["status"] = json!({"replicas": 2, "readyReplicas": 1})
    });
    tokio::time::sleep(STEP).await;
    api.delete("pods", ns, "web-2");
    tokio::time::sleep(STEP).await;
    api.delete("deployments", ns, "web");
    api.delete("pods", ns, "web-1");
}

fn pod(name: &str, phase: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": name.split('-').next()}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]},
        "status": {"phase": phase}
    })
}

fn deployment(name: &str, replicas: u32) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
            }
        }
    })
}

/// Polls `/readyz` until kube2nats has listed every watch and is connected to NATS.
async fn wait_ready(http: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let response = reqwest::get(format!("{http}/readyz")).await;
        match response {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) if tokio::time::Instant::now() >= deadline => {
                bail!(
                    "kube2nats not ready after {WAIT:?}: {}",
                    r.text().await.unwrap_or_default()
                )
            }
            Err(e) if tokio::time::Instant::now() >= deadline => {
                bail!("kube2nats' /readyz unreachable: {e}")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
