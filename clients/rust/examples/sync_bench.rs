//! Time until synced and memory per cached object: a kube-runtime `reflector` store of pods fed
//! by kube-rs' own watcher on the API server (`direct`), or by this kit's watcher on kube2nats'
//! mirror (`nats`). One mode per process, so that each process' memory is its own.
//!
//! ```text
//! sync_bench direct API_URL TOKEN      or      sync_bench nats NATS_URL BUCKET
//! ```
//!
//! Prints one JSON line: `{"mode","objects","seconds","rss_before_kib","rss_after_kib",
//! "bytes_per_object"}`. RSS is read from /proc/self/status once connected (before the watch) and
//! once the store is synced. docs/subscribers.md has the figures and the command that drives it
//! against `sim-cluster --pods N`.

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{reflector, watcher, WatchStreamExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (reader, writer) = reflector::store::<Pod>();
    let (mode, events) = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["direct", url, token] => {
            let mut config = kube::Config::new(url.parse()?);
            config.auth_info.token = Some(token.to_owned().into());
            let client = kube::Client::try_from(config)?;
            let api = kube::Api::<Pod>::all(client);
            ("direct", watcher(api, watcher::Config::default()).boxed())
        }
        ["nats", url, bucket] => {
            let client = async_nats::connect(url).await?;
            let config = kube2nats_client::Config::default().bucket(bucket);
            (
                "nats",
                kube2nats_client::watcher::<Pod>(client, config).boxed(),
            )
        }
        _ => return Err("usage: sync_bench direct API_URL TOKEN | nats NATS_URL BUCKET".into()),
    };
    let before = rss_kib();
    let started = tokio::time::Instant::now();
    let follow = reflector(writer, events)
        .default_backoff()
        .for_each(|_| async {});
    tokio::select! {
        _ = follow => return Err("the watch ended".into()),
        ready = reader.wait_until_ready() => ready?,
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = rss_kib();
    let objects = reader.state().len();
    println!(
        "{}",
        serde_json::json!({
            "mode": mode,
            "objects": objects,
            "seconds": seconds,
            "rss_before_kib": before,
            "rss_after_kib": after,
            "bytes_per_object": (after.saturating_sub(before) * 1024) / objects.max(1) as u64,
        })
    );
    Ok(())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
