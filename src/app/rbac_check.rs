//! The RBAC self-check of the watches (docs/troubleshooting.md): at start, for every watch, the
//! Lease and the cluster id; later, for a watch whose resource is served only then.

use std::future::Future;
use std::sync::Arc;

use super::plan::WatchPlan;
use crate::config::{Config, RbacCheck};
use crate::kube::ApiClient;
use crate::leader::Elector;
use crate::rbac;
use crate::scope;

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
