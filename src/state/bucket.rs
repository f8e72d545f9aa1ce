//! The state bucket: finding or creating it, the layout of its keys, and purging a target's
//! records. Below the store, the journal and the checkpoints, which all write through it.
//!
//! Setting up a bucket ([`jetstream_context`], [`bucket_config`], [`find_or_create`]) is shared
//! with the mirror's bucket (`crate::mirror::bucket`), which adds its own checks.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use async_nats::Client;

/// Timeout of one request to JetStream (a put, a get, a bucket lookup).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest chunk: far below NATS' default `max_payload` (1 MiB), and small enough that
/// loading holds little more than the memory being rebuilt.
pub(crate) const MAX_CHUNK_BYTES: usize = 256 * 1024;
/// Room left under the server's `max_payload` for subject and headers.
pub(crate) const PAYLOAD_HEADROOM: usize = 4 * 1024;

/// Where the state is kept: nowhere beyond the memory, or in the bucket.
#[derive(Clone)]
pub(crate) enum Backend {
    /// `state.enabled = false`.
    Disabled,
    /// The NATS server has no JetStream.
    MemoryOnly,
    Durable(Arc<Bucket>),
}

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

/// A JetStream context on the API at `api_prefix` (`$JS.API`, or a domain's), each request timing
/// out after [`REQUEST_TIMEOUT`].
pub(crate) fn jetstream_context(api_prefix: &str, client: &Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .api_prefix(api_prefix)
        .timeout(REQUEST_TIMEOUT)
        .build(client.clone())
}

/// A bucket as kube2nats creates it: one revision per key (only the latest is read), file
/// storage (it must outlive a NATS restart).
pub(crate) fn bucket_config(bucket: &str, description: &str, replicas: usize) -> kv::Config {
    kv::Config {
        bucket: bucket.to_owned(),
        description: description.to_owned(),
        history: 1,
        storage: jetstream::stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// At start: finds the bucket or creates it. An existing bucket is checked, never changed.
pub(crate) async fn open_bucket(
    context: &jetstream::Context,
    wanted: &kv::Config,
) -> Result<kv::Store, BucketError> {
    let (store, existed) = find_or_create(context, wanted, "state").await?;
    if existed {
        check_bucket(&store, wanted);
    }
    Ok(store)
}

/// Finds the bucket or creates it again (after it was deleted while kube2nats ran).
pub(crate) async fn ensure_bucket(
    context: &jetstream::Context,
    wanted: &kv::Config,
) -> Result<kv::Store, BucketError> {
    find_or_create(context, wanted, "state")
        .await
        .map(|(store, _)| store)
}

/// The bucket `wanted` names, and whether it existed; created as `wanted` when missing. `kind`
/// (`state`, `mirror`) names the bucket in the error and the log line of a creation.
pub(crate) async fn find_or_create(
    context: &jetstream::Context,
    wanted: &kv::Config,
    kind: &str,
) -> Result<(kv::Store, bool), BucketError> {
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
        return Ok((store, true));
    }
    let store = context
        .create_key_value(wanted.clone())
        .await
        .map_err(|e| BucketError::Unavailable(format!("creating the {kind} bucket: {e}")))?;
    let ttls = if wanted.limit_markers.is_some() {
        ", per-message TTLs"
    } else {
        ""
    };
    tracing::info!(bucket = %wanted.bucket, replicas = wanted.num_replicas, "created the {kind} bucket (file storage, history 1{ttls})");
    Ok((store, false))
}

/// Warns about an existing bucket that differs from what kube2nats would create, or whose limits
/// can make writes fail (a full bucket degrades durability, see [`super::durability`]). Limits
/// are the operator's choice, so none stops kube2nats; the chunk size follows `max_value_size`
/// ([`chunk_limit`]).
fn check_bucket(store: &kv::Store, wanted: &kv::Config) {
    let info = store.stream.cached_info();
    let config = &info.config;
    let bucket = &wanted.bucket;
    if config.max_messages_per_subject != 1 {
        tracing::warn!(bucket, history = config.max_messages_per_subject, "the existing state bucket keeps more than one revision per key; kube2nats needs only one and does not change existing buckets (storage grows by that factor)");
    }
    if config.storage != jetstream::stream::StorageType::File {
        tracing::warn!(bucket, "the existing state bucket uses memory storage: state is lost when the NATS server restarts; kube2nats does not change existing buckets");
    }
    if config.num_replicas != wanted.num_replicas {
        tracing::warn!(bucket, replicas = config.num_replicas, configured = wanted.num_replicas, "the existing state bucket has another replica count than state.replicas; kube2nats does not change existing buckets");
    }
    if config.max_bytes > 0 {
        let (max_bytes, stored) = (config.max_bytes as u64, info.state.bytes);
        if max_bytes < MIN_ROOM || stored > max_bytes / 2 {
            tracing::warn!(bucket, max_bytes, stored, "the existing state bucket has little room (max_bytes): a checkpoint writes a whole snapshot before the previous one is removed, so it needs twice the largest watch's state (kube2nats_state_stored_bytes) plus the journal; when it is full, kube2nats publishes without durable state (kube2nats_state_degraded)");
        } else {
            tracing::info!(bucket, max_bytes, stored, "the existing state bucket is limited in size (max_bytes); when it is full, kube2nats publishes without durable state (kube2nats_state_degraded)");
        }
    }
    if config.max_age > Duration::ZERO {
        tracing::warn!(bucket, max_age = ?config.max_age, "the existing state bucket expires its keys (max_age): a target whose checkpoint is not rewritten within that time loses it and starts fresh, announcing every object again");
    }
    if config.discard == jetstream::stream::DiscardPolicy::Old
        && (config.max_bytes > 0 || config.max_messages > 0)
    {
        tracing::warn!(bucket, "the existing state bucket discards old keys at its limits (discard old): a full bucket then drops saved chunks, and the next start finds the state damaged and starts fresh");
    }
    if config.max_message_size > 0 && (config.max_message_size as usize) < MIN_VALUE_SIZE {
        tracing::warn!(bucket, max_value_size = config.max_message_size, "the existing state bucket's max_value_size is too small for a checkpoint's manifest and chunks: every checkpoint will fail");
    }
    tracing::info!(bucket, "using the existing state bucket");
}

/// Below this `max_bytes`, a bucket cannot hold two checkpoints of even a small watch: two
/// chunks of [`MAX_CHUNK_BYTES`] and a journal record.
const MIN_ROOM: u64 = 1024 * 1024;
/// The smallest `max_value_size` that holds a manifest and a useful chunk.
const MIN_VALUE_SIZE: usize = 8 * 1024;

/// The largest chunk to write: at most `max_chunk`, and room left for subject and headers under
/// the server's `max_payload` and the bucket's `max_value_size` (0 or less: unlimited).
pub(crate) fn chunk_limit(
    max_chunk: usize,
    headroom: usize,
    max_payload: usize,
    max_value_size: i32,
) -> usize {
    let mut limit = max_chunk;
    for cap in [max_payload, usize::try_from(max_value_size).unwrap_or(0)] {
        if cap > 2 * headroom {
            limit = limit.min(cap - headroom);
        }
    }
    limit
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

#[cfg(test)]
mod tests {
    use super::chunk_limit;

    #[test]
    fn chunks_fit_the_payload_and_the_value_size() {
        let kib = 1024;
        assert_eq!(chunk_limit(256 * kib, 4 * kib, 1024 * kib, -1), 256 * kib);
        assert_eq!(chunk_limit(256 * kib, 4 * kib, 64 * kib, -1), 60 * kib);
        assert_eq!(
            chunk_limit(256 * kib, 4 * kib, 1024 * kib, 32 * 1024),
            28 * kib
        );
        // Too small to leave room: the limit stays, and the start warns (check_bucket).
        assert_eq!(chunk_limit(256 * kib, 4 * kib, 1024 * kib, 4096), 256 * kib);
    }
}
