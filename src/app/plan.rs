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

impl WatchPlan {
    /// Where this plan's mirror keys and `other`'s meet: both mirrored, under one cluster prefix,
    /// the same resource (at any version: keys move with the version), in a namespace both
    /// watch. `Some` names that namespace (`None` inside: every namespace, or cluster-scoped).
    fn mirror_keys_meet<'a>(&'a self, other: &'a WatchPlan) -> Option<Option<&'a str>> {
        let same_keys = self.watch.mirror
            && other.watch.mirror
            && self.watch.cluster == other.watch.cluster
            && self.resource.group == other.resource.group
            && self.resource.plural == other.resource.plural;
        if !same_keys {
            return None;
        }
        self.namespaces.iter().find_map(|mine| {
            other
                .namespaces
                .iter()
                .find_map(|theirs| match (mine, theirs) {
                    (Some(a), Some(b)) if a != b => None,
                    (Some(ns), _) | (_, Some(ns)) => Some(Some(ns.as_str())),
                    (None, None) => Some(None),
                })
        })
    }
}

/// Two mirrored watches whose bucket keys overlap: at each list, one's repair would delete the
/// keys of the other's objects (docs/mirror.md, "Limits"). A configuration problem at start (exit
/// code 2); a watch added later (a reload, a resource served later) runs without the mirror.
#[derive(Debug, thiserror::Error)]
#[error("watches[{index}].mirror: watch \"{watch}\" would mirror {resource}{scope} as watch \"{other}\" does, and each one's repair deletes the keys of objects its own list does not show; mirror one watch per resource and namespace (or set mirror = false on one)")]
pub struct MirrorsOverlap {
    index: usize,
    watch: String,
    other: String,
    resource: String,
    scope: String,
}

impl MirrorsOverlap {
    /// `plan`'s overlap with the first of `running` its keys meet; `index`: `plan`'s place
    /// among the configured watches.
    pub(super) fn find<'a>(
        plan: &WatchPlan,
        running: impl IntoIterator<Item = &'a WatchPlan>,
        index: usize,
    ) -> Option<Self> {
        running
            .into_iter()
            .filter(|other| other.watch.name != plan.watch.name)
            .find_map(|other| {
                let namespace = plan.mirror_keys_meet(other)?;
                Some(MirrorsOverlap {
                    index,
                    watch: plan.watch.name.clone(),
                    other: other.watch.name.clone(),
                    resource: plan.resource.plural.clone(),
                    scope: namespace.map_or(String::new(), |ns| format!(" in namespace \"{ns}\"")),
                })
            })
    }

    /// The first mirrored watch of `plans` whose keys meet an earlier one's.
    pub(super) fn first(plans: &[WatchPlan], watches: &[Arc<WatchConfig>]) -> Result<(), Self> {
        for (i, plan) in plans.iter().enumerate() {
            let index = watches
                .iter()
                .position(|w| w.name == plan.watch.name)
                .unwrap_or(i);
            if let Some(overlap) = MirrorsOverlap::find(plan, &plans[..i], index) {
                return Err(overlap);
            }
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::load_str;

    /// The plans of `watches` (TOML lines of one `[[watches]]` each, mirrored unless they say
    /// otherwise), every resource resolved as `resource`.
    fn plans(watches: &[&str], resource: &ResourceInfo) -> Vec<WatchPlan> {
        let toml: String = watches
            .iter()
            .enumerate()
            .map(|(i, extra)| {
                let mirror = if extra.contains("mirror") {
                    ""
                } else {
                    "mirror = true\n"
                };
                format!("[[watches]]\nname = \"w{i}\"\nresource = \"x\"\n{mirror}{extra}\n")
            })
            .collect();
        let config = load_str(&format!("[mirror]\nenabled = true\n{toml}")).unwrap();
        config
            .watches
            .into_iter()
            .map(|w| resolved(Arc::new(w), resource.clone()))
            .collect()
    }

    fn overlap(watches: &[&str], resource: &ResourceInfo) -> Option<String> {
        let plans = plans(watches, resource);
        let configured: Vec<_> = plans.iter().map(|p| p.watch.clone()).collect();
        MirrorsOverlap::first(&plans, &configured)
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn mirrored_watches_overlap_where_their_keys_meet() {
        let pods = ResourceInfo::core("pods", "Pod", true);
        let one = |ns: &str| format!("namespaces = [\"{ns}\"]");
        assert_eq!(overlap(&[&one("a"), &one("b")], &pods), None);
        let shared = overlap(&[&one("a"), "namespaces = [\"b\", \"a\"]"], &pods).unwrap();
        assert!(
            shared.starts_with("watches[1].mirror: watch \"w1\" would mirror pods in namespace \"a\" as watch \"w0\" does"),
            "{shared}"
        );
        let all = overlap(&[&one("a"), ""], &pods).unwrap();
        assert!(all.contains("in namespace \"a\""), "{all}");
        assert!(overlap(&["", ""], &pods)
            .unwrap()
            .contains("mirror pods as watch"));
        // Not both mirrored: only one writes keys.
        assert_eq!(overlap(&["", "mirror = false"], &pods), None);
        // Cluster-scoped: one set of keys.
        let nodes = ResourceInfo::core("nodes", "Node", false);
        assert!(overlap(&[&one("a"), &one("b")], &nodes).is_some());
    }

    #[test]
    fn the_same_resource_at_another_version_overlaps_another_resource_does_not() {
        let pods = plans(&[""], &ResourceInfo::core("pods", "Pod", true));
        let mut beta = ResourceInfo::core("pods", "Pod", true);
        beta.version = "v1beta1".into();
        let later = &plans(&["", ""], &beta)[1];
        assert!(MirrorsOverlap::find(later, &pods, 1).is_some());
        let configmaps = &plans(
            &["", ""],
            &ResourceInfo::core("configmaps", "ConfigMap", true),
        )[1];
        assert!(MirrorsOverlap::find(configmaps, &pods, 1).is_none());
    }
}
