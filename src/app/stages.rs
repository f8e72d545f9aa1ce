//! Every stage's metric families, registered once into the one registry and shared by the
//! terms of watching.

use crate::kube::client::register_api_requests;
use crate::leader::LeaderMetrics;
use crate::mirror::metrics::MirrorFamilies;
use crate::publish::metrics::PublishFamilies;
use crate::state::StateMetrics;
use crate::watcher::metrics::WatchFamilies;

/// Every stage's metric families, registered into the one registry.
pub(super) struct StageMetrics {
    pub(super) watch: WatchFamilies,
    pub(super) publish: PublishFamilies,
    pub(super) api_requests: prometheus::IntCounterVec,
    pub(super) state: StateMetrics,
    pub(super) leader: LeaderMetrics,
    pub(super) mirror: MirrorFamilies,
}

impl StageMetrics {
    pub(super) fn register(registry: &prometheus::Registry) -> prometheus::Result<StageMetrics> {
        Ok(StageMetrics {
            watch: WatchFamilies::register(registry)?,
            publish: PublishFamilies::register(registry)?,
            api_requests: register_api_requests(registry)?,
            state: StateMetrics::register(registry)?,
            leader: LeaderMetrics::register(registry)?,
            mirror: MirrorFamilies::register(registry)?,
        })
    }
}
