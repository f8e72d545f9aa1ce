//! From configured watches to what runs: each watch resolved through discovery, or, while the
//! API server does not serve its resource (a CRD not installed yet), waiting for it while the
//! other watches run (docs/troubleshooting.md, "A watch waits for its resource").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::{BackoffConfig, Config, RbacCheck, WatchConfig};
use crate::event::ResourceInfo;
use crate::kube::discovery::Discovery;
use crate::kube::ApiClient;
use crate::leader::Elector;
use crate::rbac;
use crate::scope;

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
fn resolved(watch: Arc<WatchConfig>, resource: ResourceInfo) -> WatchPlan {
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
            let discovery = match Discovery::fetch(client).await {
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

/// The start-up RBAC self-check (the watches, the Lease when leader election is on, the cluster id
/// when durable state reads it from the API server); with `rbac_check = "fail"` a refusal stops
/// kube2nats.
pub(super) async fn check_rbac(
    client: &ApiClient,
    config: &Config,
    plans: &[WatchPlan],
    elector: Option<&Elector>,
) -> anyhow::Result<()> {
    let leases = rbac::lease_resource();
    let mut accesses = watch_accesses(plans);
    // A namespace selector lists and watches namespaces (asked once, for the first such watch).
    let namespaces = scope::namespaces_resource();
    let selecting = plans
        .iter()
        .find(|p| p.resource.namespaced && p.watch.namespace_selector.is_some());
    if let Some(p) = selecting {
        accesses.push(rbac::Access::watch(&p.watch.name, &namespaces, None));
    }
    if config.state.enabled && config.state.cluster_id.is_none() {
        accesses.push(rbac::Access::cluster_id(&namespaces));
    }
    if let Some(elector) = elector {
        let (namespace, name) = elector.lease();
        accesses.extend(rbac::Access::lease(&leases, namespace, name));
    }
    let refusals = rbac::self_check(client, &accesses).await;
    match config.kubernetes.rbac_check {
        RbacCheck::Fail if !refusals.is_empty() => Err(rbac::RbacDenied(refusals).into()),
        _ => Ok(()),
    }
}

/// The RBAC self-check of a watch that starts late, its resource served only now, to run as a
/// task of the term (so that a lost term stops it with the watches): a refusal is logged with
/// the rule to add, never fatal (other watches run; `rbac_check = "fail"` applies at start), and
/// the watch reports the refusals itself as it retries.
pub(super) fn check_rbac_late(
    client: &Arc<ApiClient>,
    plan: &WatchPlan,
) -> impl Future<Output = ()> + Send + 'static {
    let client = client.clone();
    let watch = plan.watch.name.clone();
    let resource = plan.resource.clone();
    let namespaces = plan.namespaces.clone();
    let selecting = resource.namespaced && plan.watch.namespace_selector.is_some();
    async move {
        let namespaces_resource = scope::namespaces_resource();
        let mut accesses: Vec<rbac::Access<'_>> = namespaces
            .iter()
            .map(|ns| rbac::Access::watch(&watch, &resource, ns.as_deref()))
            .collect();
        if selecting {
            accesses.push(rbac::Access::watch(&watch, &namespaces_resource, None));
        }
        rbac::self_check(&client, &accesses).await;
    }
}

fn watch_accesses(plans: &[WatchPlan]) -> Vec<rbac::Access<'_>> {
    plans
        .iter()
        .flat_map(|p| {
            p.namespaces
                .iter()
                .map(move |ns| rbac::Access::watch(&p.watch.name, &p.resource, ns.as_deref()))
        })
        .collect()
}
