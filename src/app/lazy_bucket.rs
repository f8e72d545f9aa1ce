//! The mirror bucket of a run: opened at start when a watch is mirrored, else by the first
//! reload that mirrors one (docs/mirror.md).

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::plan::Plans;
use super::shared::Shared;
use crate::mirror::MirrorBucket;

/// The mirror bucket, once a watch wants it.
pub(super) struct LazyBucket(OnceCell<MirrorBucket>);

impl LazyBucket {
    /// `opened`: the bucket opened at start (`None` when no watch is mirrored).
    pub(super) fn new(opened: Option<MirrorBucket>) -> LazyBucket {
        LazyBucket(OnceCell::new_with(opened))
    }

    pub(super) fn get(&self) -> Option<&MirrorBucket> {
        self.0.get()
    }

    /// Opens the bucket when `arrived` holds the first mirrored watch (at start it opens only
    /// if one is mirrored). Waits while NATS does not answer; a server without JetStream leaves
    /// the watches unmirrored, logged (at start it is exit code 2).
    pub(super) async fn open_for(
        &self,
        arrived: &Plans,
        shared: Shared<'_>,
        shutdown: &CancellationToken,
    ) {
        let mut watches = arrived.resolved.iter().map(|p| &p.watch);
        let wanted = watches.any(|w| w.mirror) || arrived.waiting.iter().any(|w| w.mirror);
        if !wanted || self.0.initialized() {
            return;
        }
        let config = shared.config;
        let api_prefix = config.nats.jetstream_api_prefix();
        let client = shared.nats.client();
        match crate::mirror::open(&config.mirror, &api_prefix, client, shutdown).await {
            Ok(Some(bucket)) => {
                tracing::info!(bucket = %config.mirror.bucket, "mirror bucket opened for the reloaded watches");
                let _ = self.0.set(bucket.owned_by(shared.state.owner()));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, "the mirror bucket cannot be opened: the reloaded watches run without the mirror");
            }
        }
    }
}
