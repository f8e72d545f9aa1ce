//! `sim-cluster`: a [`MirrorCluster`] for test runners that are not Rust's — the subscriber kits'
//! pytest and `node --test` suites run their informers against the real kube2nats through it.
//!
//! ```text
//! sim-cluster [--kube2nats PATH] [--pods N]
//!     --kube2nats  the binary (default: kube2nats beside this one, e.g. target/debug/)
//!     --pods       N more pods of a production size in namespace `bench` (for measurements)
//! ```
//!
//! Once the bucket equals the API server it prints one JSON line,
//! `{"api_url","api_token","nats_url","bucket"}` (`nats_url` through the gate subscribers use),
//! then answers each command on stdin with one JSON line on stdout:
//!
//! | command | answer |
//! | --- | --- |
//! | `create NS NAME` | `{"line":"ADDED NS/NAME RV"}` |
//! | `update NS NAME IMAGE` | `{"line":"MODIFIED NS/NAME RV"}` |
//! | `delete NS NAME` | `{"line":"DELETED NS/NAME RV"}`, the version before the deletion |
//! | `pods` | `{"pods":{"NS/NAME":"RV",…}}`, the API server's |
//! | `converged` | `{"ok":true}` once the bucket equals the API server |
//! | `converged markers` | the same, and once no delete marker is left in the bucket |
//! | `kill` / `start` | kube2nats killed with SIGKILL / started again, `{"ok":true}` |
//! | `cut` / `restore` | subscribers' NATS connections cut off (and refused) / let through |
//! | `requests` | `{"pod_lists","pod_watches","requests","response_bytes"}`: what the API server served |
//!
//! A command that fails answers `{"error":"…"}`. End of input, SIGTERM or SIGINT stops everything
//! (kube2nats and nats-server included).

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use kube2nats_harness::apiserver::INITIAL_TOKEN;
use kube2nats_harness::cluster::{pod_requests, MirrorCluster, BUCKET};
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("sim-cluster: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    const USAGE: &str = "usage: sim-cluster [--kube2nats PATH] [--pods N]";
    let mut kube2nats = std::env::current_exe()?.with_file_name("kube2nats");
    let mut bench_pods = 0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().context(USAGE)?;
        match arg.as_str() {
            "--kube2nats" => kube2nats = PathBuf::from(value),
            "--pods" => bench_pods = value.parse().context(USAGE)?,
            _ => anyhow::bail!(USAGE),
        }
    }
    anyhow::ensure!(
        kube2nats.is_file(),
        "{} is not there: build it (cargo build) or name it with --kube2nats",
        kube2nats.display()
    );
    let mut cluster = MirrorCluster::start_with(&kube2nats, bench_pods).await?;
    say(&json!({
        "api_url": cluster.api.url(),
        "api_token": INITIAL_TOKEN,
        "nats_url": cluster.subscriber_url(),
        "bucket": BUCKET,
    }));
    let (tx, mut commands) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    loop {
        let command = tokio::select! {
            command = commands.recv() => command,
            _ = terminate.recv() => None,
            _ = interrupt.recv() => None,
        };
        let Some(command) = command else {
            // Dropping the cluster stops kube2nats and nats-server.
            return Ok(());
        };
        let answer = match answer(&mut cluster, &command).await {
            Ok(answer) => answer,
            Err(e) => json!({"error": format!("{e:#}")}),
        };
        say(&answer);
    }
}

async fn answer(cluster: &mut MirrorCluster, command: &str) -> anyhow::Result<Value> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let ok = json!({"ok": true});
    Ok(match words.as_slice() {
        ["create", ns, name] => json!({"line": cluster.create(ns, name)}),
        ["update", ns, name, image] => json!({"line": cluster.update(ns, name, image)}),
        ["delete", ns, name] => match cluster.delete(ns, name) {
            Some(line) => json!({"line": line}),
            None => anyhow::bail!("no pod {ns}/{name}"),
        },
        ["pods"] => json!({"pods": cluster.pods()}),
        ["converged"] => {
            cluster.converged(false).await?;
            ok
        }
        ["converged", "markers"] => {
            cluster.converged(true).await?;
            ok
        }
        ["kill"] => {
            cluster.kill_daemon();
            ok
        }
        ["start"] => {
            cluster.start_daemon()?;
            ok
        }
        ["cut"] => {
            cluster.gate.close();
            ok
        }
        ["restore"] => {
            cluster.gate.open();
            ok
        }
        ["requests"] => pod_requests(&cluster.api),
        _ => anyhow::bail!("unknown command {command:?} (see sim-cluster's doc)"),
    })
}

fn say(value: &Value) {
    let mut out = std::io::stdout().lock();
    // A reader that went away ends the run at the next read of stdin.
    let _ = writeln!(out, "{value}").and_then(|()| out.flush());
}
