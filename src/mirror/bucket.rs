//! Setting up the mirror's bucket at start: created with history 1, file storage and per-message
//! TTLs (limit markers) when missing; an existing one is checked. Without JetStream on the server,
//! or with a bucket whose delete markers would pile up, kube2nats refuses to start (exit 2,
//! naming the key): the mirror was asked for and cannot be kept.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use async_nats::Client;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, NATS_SETUP_RETRY};
use crate::config::MirrorConfig;
use crate::state::{bucket_config, find_or_create, jetstream_context, BucketError};
use crate::telemetry::logging::human;

/// The bucket, ready for the watch targets' writers.
#[derive(Clone)]
pub(crate) struct MirrorBucket {
    pub name: String,
    pub context: jetstream::Context,
    pub stream: stream::Stream,
    pub delete_marker_ttl: Duration,
    pub max_in_flight: usize,
    /// `{cluster}.{instance}` of the durable state ([`crate::state::owner`]), written on every
    /// key as `Kube2nats-Owner`, so that a deployment never overwrites or deletes another's keys
    /// (docs/mirror.md); `None` without durable state.
    pub owner: Option<String>,
}

impl MirrorBucket {
    /// The bucket, its keys written as `owner`'s.
    pub(crate) fn owned_by(self, owner: Option<String>) -> MirrorBucket {
        MirrorBucket { owner, ..self }
    }
}

/// The mirror was asked for and cannot be kept: a configuration problem (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct MirrorUnavailable {
    key: &'static str,
    reason: String,
}

/// Creates or checks the bucket, retrying while NATS does not answer; `Ok(None)` if shutdown
/// came first. `api_prefix` is the JetStream API's (`$JS.API`, or a domain's).
pub(crate) async fn open(
    config: &MirrorConfig,
    api_prefix: &str,
    client: &Client,
    shutdown: &CancellationToken,
) -> Result<Option<MirrorBucket>, MirrorUnavailable> {
    let context = jetstream_context(api_prefix, client);
    let wanted = kv::Config {
        max_bytes: config
            .max_bytes
            .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)),
        limit_markers: Some(config.delete_marker_ttl),
        ..bucket_config(
            &config.bucket,
            "kube2nats: the current objects of the mirrored watches",
            config.replicas,
        )
    };
    let mut backoff = Backoff::new(NATS_SETUP_RETRY);
    loop {
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            attempt = ensure(&context, &wanted) => attempt,
        };
        let error = match attempt {
            Ok(store) => {
                return Ok(Some(MirrorBucket {
                    name: config.bucket.clone(),
                    context,
                    stream: store.stream,
                    delete_marker_ttl: config.delete_marker_ttl,
                    max_in_flight: config.max_in_flight,
                    owner: None,
                }))
            }
            Err(Setup::Refused(refused)) => return Err(refused),
            Err(Setup::Unavailable(e)) => e,
        };
        let delay = backoff.next_delay();
        tracing::warn!(bucket = %config.bucket, error, retry_in = human(delay), "cannot set up the mirror bucket yet; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(delay) => {}
        }
    }
}

enum Setup {
    Refused(MirrorUnavailable),
    Unavailable(String),
}

async fn ensure(context: &jetstream::Context, wanted: &kv::Config) -> Result<kv::Store, Setup> {
    let (store, existed) = find_or_create(context, wanted, "mirror")
        .await
        .map_err(|e| match e {
            BucketError::NoJetStream => Setup::Refused(MirrorUnavailable {
                key: "mirror.enabled",
                reason: "the NATS server has no JetStream, which the mirror needs (enable JetStream on the server, or turn the mirror off)".into(),
            }),
            BucketError::Unavailable(e) => Setup::Unavailable(e),
        })?;
    if existed {
        check_existing(&store, wanted)?;
        tracing::info!(bucket = %wanted.bucket, "using the existing mirror bucket");
    }
    Ok(store)
}

/// Refuses an existing bucket whose delete markers could not expire; warns about other
/// differences (kube2nats does not change existing buckets).
fn check_existing(store: &kv::Store, wanted: &kv::Config) -> Result<(), Setup> {
    let config = &store.stream.cached_info().config;
    if !config.allow_message_ttl {
        return Err(Setup::Refused(MirrorUnavailable {
            key: "mirror.bucket",
            reason: format!("the existing bucket {:?} does not allow per-message TTLs, so its delete markers would pile up; recreate it (delete it and let kube2nats create it) or name another bucket", wanted.bucket),
        }));
    }
    if config.max_messages_per_subject != 1 {
        tracing::warn!(bucket = %wanted.bucket, history = config.max_messages_per_subject, "the existing mirror bucket keeps more than one revision per key (storage grows by that factor)");
    }
    if config.num_replicas != wanted.num_replicas {
        tracing::warn!(bucket = %wanted.bucket, replicas = config.num_replicas, configured = wanted.num_replicas, "the existing mirror bucket has another replica count than mirror.replicas; kube2nats does not change existing buckets");
    }
    Ok(())
}
