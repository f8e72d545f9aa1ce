//! From configured watches to what runs: each watch resolved through discovery, or, while the
//! API server does not serve its resource (a CRD not installed yet), waiting for it while the
//! other watches run (docs/troubleshooting.md, "A watch waits for its resource").

use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::{BackoffConfig, WatchConfig};
use crate::event::ResourceInfo;
use crate::kube::discovery::Discovery;
use crate::kube::ApiClient;

/// One configured watch, resolved: what it watches and in which namespaces (`None`: all, or
/// cluster-scoped).
#[derive(Clone)]
pub(super) struct WatchPlan {
    pub(super) watch: Arc<WatchConfig>,
    pub(super) resource: ResourceInfo,
    pub(super) namespaces: Vec<Option<String>>,
}

/// Every configured watch: resolved, or waiting for the API server to serve its resource.
#[derive(Clone, Default)]
pub(super) struct Plans {
    pub(super) resolved: Vec<WatchPlan>,
    pub(super) waiting: Vec<Arc<WatchConfig>>,
}

/// Resolves every watch through discovery. A resource discovery does not list is not fatal: a
/// CRD applied in the same sync as kube2nats may not be established yet. Its watch waits (one
/// warning, `kube2nats_watch_served` 0, `/readyz` names it) and the others run; a name that
/// will never exist (a typo) stays visible the same way, the warning naming close matches.
pub(super) fn plan(watches: &[Arc<WatchConfig>], discovery: &Discovery) -> Plans {
    let mut plans = Plans::default();
    for watch in watches {
        match discovery.resolve(&watch.resource) {
            Ok(resource) => plans.resolved.push(resolved(watch.clone(), resource)),
            Err(e) => {
                tracing::warn!(watch = %watch.name, resource = %watch.resource, error = %e, "resource not served yet (CRD not installed?); waiting");
                plans.waiting.push(watch.clone());
            }
        }
    }
    plans
}

/// The plan of `watch`, whose resource discovery found.
pub(super) fn resolved(watch: Arc<WatchConfig>, resource: ResourceInfo) -> WatchPlan {
    if !resource.namespaced && !watch.namespaces.is_empty() {
        tracing::warn!(watch = %watch.name, resource = %resource.plural, "resource is cluster-scoped; ignoring the configured namespaces");
    }
    if !resource.namespaced
        && (!watch.namespaces_exclude.is_empty() || watch.namespace_selector.is_some())
    {
        tracing::warn!(watch = %watch.name, resource = %resource.plural, "resource is cluster-scoped; ignoring namespaces_exclude and namespace_selector");
    }
    let namespaces = if !resource.namespaced || watch.namespaces.is_empty() {
        vec![None]
    } else {
        watch.namespaces.iter().cloned().map(Some).collect()
    };
    tracing::info!(watch = %watch.name, group = %resource.group, version = %resource.version, resource = %resource.plural, kind = %resource.kind, namespaced = resource.namespaced, "resolved");
    WatchPlan {
        watch,
        resource,
        namespaces,
    }
}

/// How often discovery runs again while a watch waits for its resource: a CRD established is
/// picked up within about a second at first, and within 8 s (plus one discovery) however long it
/// took, its objects published within 10 s (docs/troubleshooting.md). Discovery needs no RBAC
/// beyond what every service account has (docs/deploy.md).
const WAITING_BACKOFF: BackoffConfig = BackoffConfig::checked(
    Duration::from_secs(1),
    Duration::from_secs(8),
    2.0,
    0.2,
    Duration::from_secs(600),
);

/// The watches of one term still waiting for their resource.
pub(super) struct Waiting {
    watches: Vec<Arc<WatchConfig>>,
    backoff: Backoff,
}

impl Waiting {
    pub(super) fn new(watches: &[Arc<WatchConfig>]) -> Waiting {
        Waiting {
            watches: watches.to_vec(),
            backoff: Backoff::new(WAITING_BACKOFF),
        }
    }

    /// Waits for these watches too (added by a reload): discovery runs again within about a
    /// second, then backs off as at start.
    pub(super) fn add(&mut self, watches: &[Arc<WatchConfig>]) {
        if !watches.is_empty() {
            self.watches.extend(watches.iter().cloned());
            self.backoff = Backoff::new(WAITING_BACKOFF);
        }
    }

    /// No longer waits for the watches named (removed or changed by a reload).
    pub(super) fn forget(&mut self, names: &[&str]) {
        self.watches.retain(|w| !names.contains(&w.name.as_str()));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    /// Runs discovery again with backoff until it serves the resource of one or more waiting
    /// watches; returns their plans. Cancel-safe: nothing is lost if dropped while waiting.
    pub(super) async fn resolved(&mut self, client: &ApiClient) -> Vec<WatchPlan> {
        loop {
            tokio::time::sleep(self.backoff.next_delay()).await;
            let names: Vec<&str> = self.watches.iter().map(|w| w.resource.as_str()).collect();
            let discovery = match Discovery::fetch_for(client, &names).await {
                Ok(discovery) => discovery,
                Err(e) => {
                    tracing::debug!(error = %e, "API discovery for the waiting watches failed; retrying");
                    continue;
                }
            };
            let mut plans = Vec::new();
            self.watches
                .retain(|watch| match discovery.resolve(&watch.resource) {
                    Ok(resource) => {
                        tracing::info!(watch = %watch.name, "resource now served; starting the watch");
                        plans.push(resolved(watch.clone(), resource));
                        false
                    }
                    Err(_) => true,
                });
            if !plans.is_empty() {
                return plans;
            }
        }
    }
}
