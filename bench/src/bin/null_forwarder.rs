//! The floor: the least a Kubernetes-to-NATS forwarder can do.
//!
//! It connects to the API server the way kube2nats does (reqwest with rustls, a paged list for the
//! resourceVersion, then one watch from it) and publishes with the same NATS client (async-nats).
//! Between the two it only finds line ends (memchr) and publishes each raw watch line to one
//! subject: no decoding, no validation, no headers, no de-duplication, no metrics, no resume.
//! BOOKMARK lines are recognised by their prefix and skipped, so it publishes exactly the changes
//! kube2nats publishes and the load harness can count them the same way.
//!
//! In JetStream mode it keeps a window of unacknowledged publishes and awaits the oldest when the
//! window is full, as kube2nats' outbox does (without its retries and per-object ordering).
//! Like kube2nats it runs on one thread (a current-thread tokio runtime).
//!
//! ```sh
//! null-forwarder --api-url http://127.0.0.1:8001 --nats-url nats://127.0.0.1:4222 [--jetstream]
//! ```

use std::collections::VecDeque;

use anyhow::Context as _;
use bytes::BytesMut;
use clap::Parser;
use futures_util::StreamExt;

/// Publishes every watch line of one resource to NATS, and nothing else.
#[derive(Debug, Parser)]
struct Args {
    /// The API server's base URL.
    #[arg(long)]
    api_url: String,
    /// The resource's collection path.
    #[arg(long, default_value = "/api/v1/pods")]
    path: String,
    /// Objects per list page (kube2nats' `list_page_size`).
    #[arg(long, default_value_t = 500)]
    page_size: u32,
    /// The NATS server.
    #[arg(long)]
    nats_url: String,
    /// The subject every line is published to.
    #[arg(long, default_value = "kube.null.pods")]
    subject: String,
    /// Publish to JetStream and await acknowledgements (the subject must be in a stream).
    #[arg(long)]
    jetstream: bool,
    /// Unacknowledged JetStream publishes (kube2nats' `max_ack_inflight` default).
    #[arg(long, default_value_t = 256)]
    max_ack_inflight: usize,
}

/// The part of a list page the forwarder needs.
#[derive(serde::Deserialize)]
struct ListPage {
    metadata: ListMeta,
}

#[derive(serde::Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

const BOOKMARK_PREFIX: &[u8] = br#"{"type":"BOOKMARK""#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let http = reqwest::Client::builder()
        .use_rustls_tls()
        .user_agent("null-forwarder")
        .build()?;
    let nats = async_nats::ConnectOptions::new()
        .connect(&args.nats_url)
        .await
        .context("connecting to NATS")?;
    let mut sink = Sink::new(nats, &args);
    let rv = list_resource_version(&http, &args).await?;
    let url = format!(
        "{}{}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true",
        args.api_url, args.path
    );
    let response = http.get(url).send().await?.error_for_status()?;
    let mut body = response.bytes_stream();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk?);
        while let Some(end) = memchr::memchr(b'\n', &buf) {
            let line = buf.split_to(end + 1).freeze().slice(..end);
            if !line.starts_with(BOOKMARK_PREFIX) {
                sink.publish(line).await?;
            }
        }
    }
    sink.settle().await
}

/// Pages through the list only for its resourceVersion; the items are not published.
async fn list_resource_version(http: &reqwest::Client, args: &Args) -> anyhow::Result<String> {
    let mut continue_token: Option<String> = None;
    loop {
        let mut url = format!("{}{}?limit={}", args.api_url, args.path, args.page_size);
        if let Some(token) = &continue_token {
            url.push_str("&continue=");
            url.push_str(token);
        }
        let body = http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        let page: ListPage = serde_json::from_slice(&body).context("list page")?;
        match page.metadata.continue_token.filter(|t| !t.is_empty()) {
            Some(token) => continue_token = Some(token),
            None => return Ok(page.metadata.resource_version),
        }
    }
}

/// Core NATS, or JetStream with a window of unacknowledged publishes.
enum Sink {
    Core {
        client: async_nats::Client,
        subject: async_nats::Subject,
    },
    JetStream {
        context: async_nats::jetstream::Context,
        subject: async_nats::Subject,
        in_flight: VecDeque<async_nats::jetstream::context::PublishAckFuture>,
        window: usize,
    },
}

impl Sink {
    fn new(client: async_nats::Client, args: &Args) -> Sink {
        let subject = async_nats::Subject::from(args.subject.as_str());
        if args.jetstream {
            Sink::JetStream {
                context: async_nats::jetstream::new(client),
                subject,
                in_flight: VecDeque::with_capacity(args.max_ack_inflight),
                window: args.max_ack_inflight.max(1),
            }
        } else {
            Sink::Core { client, subject }
        }
    }

    async fn publish(&mut self, line: bytes::Bytes) -> anyhow::Result<()> {
        match self {
            Sink::Core { client, subject } => client.publish(subject.clone(), line).await?,
            Sink::JetStream {
                context,
                subject,
                in_flight,
                window,
            } => {
                if in_flight.len() >= *window {
                    if let Some(oldest) = in_flight.pop_front() {
                        oldest.await?;
                    }
                }
                in_flight.push_back(context.publish(subject.clone(), line).await?);
            }
        }
        Ok(())
    }

    /// Waits until everything published has reached the server (core) or is acknowledged.
    async fn settle(self) -> anyhow::Result<()> {
        match self {
            Sink::Core { client, .. } => client.flush().await?,
            Sink::JetStream { in_flight, .. } => {
                for ack in in_flight {
                    ack.await?;
                }
            }
        }
        Ok(())
    }
}
