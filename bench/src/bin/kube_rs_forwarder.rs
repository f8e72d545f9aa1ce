//! A peer: the forwarder most Rust users would write, with kube-rs and async-nats.
//!
//! kube-rs' `watcher` lists and watches typed `Pod`s (deserialising every event into
//! `k8s_openapi::api::core::v1::Pod`), and each change is serialised back to JSON and published to
//! core NATS on `<prefix>.<namespace>.<name>`. The changes of the initial list are not published
//! (as kube2nats with `initial_state = "skip"`). It runs on one thread, as kube2nats does.
//!
//! ```sh
//! kube-rs-forwarder --api-url http://127.0.0.1:8001 --nats-url nats://127.0.0.1:4222
//! ```

use anyhow::Context as _;
use clap::Parser;
use futures_util::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client, Config, ResourceExt};

/// Watches all pods with kube-rs and publishes each change as JSON to core NATS.
#[derive(Debug, Parser)]
struct Args {
    /// The API server's base URL.
    #[arg(long)]
    api_url: String,
    /// Objects per list page.
    #[arg(long, default_value_t = 500)]
    page_size: u32,
    /// The NATS server.
    #[arg(long)]
    nats_url: String,
    /// Subjects are `<prefix>.<namespace>.<name>`.
    #[arg(long, default_value = "kube.peer.pods")]
    subject_prefix: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let nats = async_nats::connect(&args.nats_url)
        .await
        .context("connecting to NATS")?;
    let uri: http::Uri = args.api_url.parse().context("--api-url")?;
    let client = Client::try_from(Config::new(uri))?;
    let pods: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().page_size(args.page_size);
    let mut events = std::pin::pin!(watcher(pods, config));
    while let Some(event) = events.try_next().await? {
        let pod = match event {
            watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => pod,
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {
                continue
            }
        };
        let subject = format!(
            "{}.{}.{}",
            args.subject_prefix,
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        );
        let payload = serde_json::to_vec(&pod)?;
        nats.publish(subject, payload.into()).await?;
    }
    Ok(())
}
