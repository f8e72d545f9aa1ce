//! The state bucket: finding or creating it, the layout of its keys, and purging a target's
//! records. Below the store, the journal and the checkpoints, which all write through it.

use std::time::Duration;

use async_nats::jetstream::{self, kv};

use crate::config::BackoffConfig;

/// Retries of setting up the bucket, loading and writing: quick at first, capped low so a
/// recovered NATS is used within seconds.
pub(crate) const RETRY_BACKOFF: BackoffConfig = BackoffConfig::checked(
    Duration::from_millis(100),
    Duration::from_secs(2),
    2.0,
    0.2,
    Duration::from_secs(60),
);

/// The bucket, and what is needed to create it again should it vanish.
pub(crate) struct Bucket {
    pub(crate) context: jetstream::Context,
    pub(crate) config: kv::Config,
    /// The bucket as found at start; a writer that finds it gone looks it up (or creates it)
    /// again for itself.
    pub(crate) store: kv::Store,
    pub(crate) chunk_limit: usize,
}

/// Why the bucket could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BucketError {
    #[error("the NATS server has no JetStream")]
    NoJetStream,
    #[error("{0}")]
    Unavailable(String),
}

/// Finds the bucket or creates it. An existing bucket is checked, never changed.
pub(crate) async fn ensure_bucket(
    context: &jetstream::Context,
    wanted: &kv::Config,
) -> Result<kv::Store, BucketError> {
    use jetstream::context::AccountErrorKind;
    use jetstream::ErrorCode;
    if let Err(e) = context.query_account().await {
        return Err(match e.kind() {
            AccountErrorKind::JetStreamUnavailable => BucketError::NoJetStream,
            AccountErrorKind::JetStream(api)
                if api.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED
                    || api.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
            {
                BucketError::NoJetStream
            }
            _ => BucketError::Unavailable(e.to_string()),
        });
    }
    if let Ok(store) = context.get_key_value(&wanted.bucket).await {
        check_bucket(&store, wanted);
        return Ok(store);
    }
    let store = context
        .create_key_value(wanted.clone())
        .await
        .map_err(|e| BucketError::Unavailable(format!("creating the state bucket: {e}")))?;
    tracing::info!(bucket = %wanted.bucket, replicas = wanted.num_replicas, "created the state bucket (file storage, history 1)");
    Ok(store)
}

/// Warns about an existing bucket that differs from what kube2nats would create.
fn check_bucket(store: &kv::Store, wanted: &kv::Config) {
    let config = &store.stream.cached_info().config;
    if config.max_messages_per_subject != 1 {
        tracing::warn!(bucket = %wanted.bucket, history = config.max_messages_per_subject, "the existing state bucket keeps more than one revision per key; kube2nats needs only one and does not change existing buckets (storage grows by that factor)");
    }
    if config.storage != jetstream::stream::StorageType::File {
        tracing::warn!(bucket = %wanted.bucket, "the existing state bucket uses memory storage: state is lost when the NATS server restarts; kube2nats does not change existing buckets");
    }
    if config.num_replicas != wanted.num_replicas {
        tracing::warn!(bucket = %wanted.bucket, replicas = config.num_replicas, configured = wanted.num_replicas, "the existing state bucket has another replica count than state.replicas; kube2nats does not change existing buckets");
    }
    tracing::info!(bucket = %wanted.bucket, "using the existing state bucket");
}

pub(crate) fn manifest_key(target: &str) -> String {
    format!("{target}.manifest")
}

pub(crate) fn journal_key(target: &str, sequence: u64) -> String {
    format!("{target}.j.{sequence}")
}

/// The stream subjects of a target's journal records.
pub(crate) fn journal_subjects(store: &kv::Store, target: &str) -> String {
    format!("{}{target}.j.>", store.prefix)
}

/// Removes the messages on `subjects` (below stream sequence `below`, if given) from the
/// bucket's stream: unlike a key-value purge, which leaves a marker per key, nothing stays.
pub(crate) async fn purge(
    store: &kv::Store,
    subjects: &str,
    below: Option<u64>,
) -> Result<(), String> {
    let request = store.stream.purge().filter(subjects);
    let purged = match below {
        Some(sequence) => request.sequence(sequence).await,
        None => request.await,
    };
    purged.map(|_| ()).map_err(|e| e.to_string())
}
