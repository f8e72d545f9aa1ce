//! The start-up RBAC self-check, and turning a refusal into the rule that would allow it, so an
//! operator can fix the Role from one log line.
//!
//! Before its watches start, kube2nats asks the API server (SelfSubjectAccessReview, which every
//! authenticated identity may create) whether it may `list` and `watch` each watched resource in
//! each namespace, and, with leader election on, `get` and `update` its Lease and `create` leases
//! in the Lease's namespace, and, when durable state takes its cluster id from the API server,
//! `get` the `kube-system` Namespace. A refusal is logged with the exact rule to add; depending on
//! `kubernetes.rbac_check` kube2nats then keeps running (the watch or the election retries until
//! the Role is fixed) or exits with code 3.

use serde::Deserialize;
use serde_json::json;

use crate::event::ResourceInfo;
use crate::kube::client::Verb;
use crate::kube::{ApiClient, ApiError};

const ACCESS_REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// Who needs a permission: one watch, leader election, or durable state's cluster id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose<'a> {
    Watch(&'a str),
    LeaderElection,
    ClusterId,
}

/// One permission kube2nats needs and does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The watch's name, `leader election` or `state cluster id`.
    pub(crate) needed_by: String,
    pub(crate) verb: Verb,
    pub(crate) resource: ResourceInfo,
    /// `None`: all namespaces (or cluster-scoped).
    pub(crate) namespace: Option<String>,
    /// The one object the permission is needed on (`resourceNames` in the rule).
    pub(crate) name: Option<String>,
    /// The verbs of the rule to add (a watch also needs `get`, which the check does not ask).
    pub(crate) grant: Vec<Verb>,
}

impl Refusal {
    /// `add to a Role in namespace "default" …: {apiGroups: [""], resources: ["pods"], …}`.
    pub(crate) fn rule(&self) -> String {
        rule_for(
            &self.resource,
            self.namespace.as_deref(),
            self.name.as_deref(),
            &self.grant,
        )
    }
}

/// The start-up check found refusals and `rbac_check = "fail"`: kube2nats exits with code 3.
#[derive(Debug, thiserror::Error)]
#[error("RBAC does not allow {} required permission(s); see the log lines above for the rules to add", .0.len())]
pub struct RbacDenied(pub Vec<Refusal>);

/// What to check: `check` on one resource in one namespace (or all), on one object by name or on
/// the collection; `grant` is what the rule to add allows.
pub(crate) struct Access<'a> {
    pub(crate) purpose: Purpose<'a>,
    pub(crate) resource: &'a ResourceInfo,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
    pub(crate) check: &'static [Verb],
    pub(crate) grant: &'static [Verb],
}

impl<'a> Access<'a> {
    /// A watch lists and watches its resource (and the rule grants `get` too, as kubectl's
    /// "read" roles do).
    pub(crate) fn watch(
        watch: &'a str,
        resource: &'a ResourceInfo,
        namespace: Option<&'a str>,
    ) -> Self {
        Access {
            purpose: Purpose::Watch(watch),
            resource,
            namespace,
            name: None,
            check: &[Verb::List, Verb::Watch],
            grant: &[Verb::Get, Verb::List, Verb::Watch],
        }
    }

    /// Leader election reads and renews one Lease by name, and creates it when it does not exist
    /// yet: `create` cannot be limited to a name (the object has none until created), so it is a
    /// rule of its own. `leases` comes from [`lease_resource`].
    pub(crate) fn lease(leases: &'a ResourceInfo, namespace: &'a str, name: &'a str) -> [Self; 2] {
        let access = |name, check, grant| Access {
            purpose: Purpose::LeaderElection,
            resource: leases,
            namespace: Some(namespace),
            name,
            check,
            grant,
        };
        [
            access(
                Some(name),
                &[Verb::Get, Verb::Update],
                &[Verb::Get, Verb::Update],
            ),
            access(None, &[Verb::Create], &[Verb::Create]),
        ]
    }
}

impl<'a> Access<'a> {
    /// Durable state keys its saved state by the cluster's id, the `kube-system` Namespace's uid
    /// (see docs/durable-state.md): one `get` on that Namespace. `namespaces` comes from
    /// `scope::namespaces_resource`.
    pub(crate) fn cluster_id(namespaces: &'a ResourceInfo) -> Self {
        Access {
            purpose: Purpose::ClusterId,
            resource: namespaces,
            namespace: None,
            name: Some(CLUSTER_ID_NAMESPACE),
            check: &[Verb::Get],
            grant: &[Verb::Get],
        }
    }
}

/// The Namespace whose uid is the cluster's id.
pub(crate) const CLUSTER_ID_NAMESPACE: &str = "kube-system";

/// `leases.coordination.k8s.io/v1`, the resource leader election uses.
pub(crate) fn lease_resource() -> ResourceInfo {
    ResourceInfo {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        plural: "leases".into(),
        kind: "Lease".into(),
        namespaced: true,
    }
}

#[derive(Deserialize)]
struct Review {
    status: Option<ReviewStatus>,
}

#[derive(Deserialize)]
struct ReviewStatus {
    #[serde(default)]
    allowed: bool,
}

/// Asks about each verb of each access; logs each refusal with the rule to add, and returns them.
/// A review that cannot be asked (old server, network) is logged and skipped: the watches and the
/// election themselves will report what is wrong.
pub(crate) async fn self_check(client: &ApiClient, accesses: &[Access<'_>]) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    for access in accesses {
        for &verb in access.check {
            match allowed(client, verb, access).await {
                Ok(true) => {}
                Ok(false) => {
                    let refusal = refused(access, verb);
                    log_refusal(access, &refusal);
                    refusals.push(refusal);
                }
                Err(e) => {
                    tracing::warn!(verb = verb.as_str(), resource = %access.resource.plural, error = %e, "cannot check RBAC with a SelfSubjectAccessReview; skipping the check");
                    return refusals;
                }
            }
        }
    }
    refusals
}

fn refused(access: &Access<'_>, verb: Verb) -> Refusal {
    Refusal {
        needed_by: match access.purpose {
            Purpose::Watch(watch) => watch.to_owned(),
            Purpose::LeaderElection => "leader election".to_owned(),
            Purpose::ClusterId => "state cluster id".to_owned(),
        },
        verb,
        resource: access.resource.clone(),
        namespace: access.namespace.map(str::to_owned),
        name: access.name.map(str::to_owned),
        grant: access.grant.to_vec(),
    }
}

fn log_refusal(access: &Access<'_>, refusal: &Refusal) {
    let resource = &access.resource;
    let namespace = access.namespace.unwrap_or("*");
    let rule = refusal.rule();
    match access.purpose {
        Purpose::Watch(watch) => tracing::error!(
            watch,
            verb = refusal.verb.as_str(),
            resource = %resource.plural,
            group = %resource.group,
            namespace,
            rule = %rule,
            "RBAC does not allow the request; add the rule"
        ),
        Purpose::LeaderElection => tracing::error!(
            verb = refusal.verb.as_str(),
            resource = %resource.plural,
            group = %resource.group,
            namespace,
            name = access.name.unwrap_or("*"),
            rule = %rule,
            "RBAC does not allow leader election's request on its Lease (the replica cannot acquire or renew it); add the rule"
        ),
        Purpose::ClusterId => tracing::error!(
            verb = refusal.verb.as_str(),
            resource = %resource.plural,
            name = access.name.unwrap_or("*"),
            rule = %rule,
            "RBAC does not allow reading the kube-system Namespace, whose uid keys durable state as the cluster id; add the rule or set state.cluster_id"
        ),
    }
}

async fn allowed(client: &ApiClient, verb: Verb, access: &Access<'_>) -> Result<bool, ApiError> {
    let mut attributes = json!({
        "verb": verb.as_str(),
        "group": access.resource.group,
        "resource": access.resource.plural,
    });
    if let Some(ns) = access.namespace {
        attributes["namespace"] = ns.into();
    }
    if let Some(name) = access.name {
        attributes["name"] = name.into();
    }
    let body = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    });
    let answer = client.create(ACCESS_REVIEW_PATH, &body).await?;
    let review: Review = serde_json::from_slice(&answer)
        .map_err(|e| ApiError::UnexpectedBody(format!("access review answer: {e}")))?;
    Ok(review.status.is_some_and(|s| s.allowed))
}

/// The Role (one namespace) or ClusterRole (all namespaces, or a cluster-scoped resource) rule that
/// grants kube2nats what a watch needs on `resource`.
pub(crate) fn rule_to_add(resource: &ResourceInfo, namespace: Option<&str>) -> String {
    rule_for(
        resource,
        namespace,
        None,
        &[Verb::Get, Verb::List, Verb::Watch],
    )
}

/// The rule granting `verbs` on `resource` in `namespace` (a ClusterRole for all namespaces),
/// limited to the object `name` if given.
fn rule_for(
    resource: &ResourceInfo,
    namespace: Option<&str>,
    name: Option<&str>,
    verbs: &[Verb],
) -> String {
    let scope = match namespace {
        Some(ns) => format!("a Role in namespace {ns:?} (bound to kube2nats' ServiceAccount)"),
        None => "a ClusterRole (bound with a ClusterRoleBinding)".to_owned(),
    };
    let verbs: Vec<String> = verbs.iter().map(|v| format!("{:?}", v.as_str())).collect();
    let names = name.map_or(String::new(), |n| format!(", resourceNames: [{n:?}]"));
    format!(
        "add to {scope}: {{apiGroups: [{:?}], resources: [{:?}], verbs: [{}]{names}}}",
        resource.group,
        resource.plural,
        verbs.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_exact_rule() {
        let pods = ResourceInfo::core("pods", "Pod", true);
        assert_eq!(
            rule_to_add(&pods, Some("default")),
            r#"add to a Role in namespace "default" (bound to kube2nats' ServiceAccount): {apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"]}"#
        );
        assert!(rule_to_add(&pods, None).starts_with("add to a ClusterRole"));
    }

    #[test]
    fn the_lease_rules_name_the_lease_except_for_create() {
        let leases = lease_resource();
        let [named, create] = Access::lease(&leases, "ops", "kube2nats");
        let rule = |a: &Access<'_>| refused(a, a.check[0]).rule();
        assert_eq!(
            rule(&named),
            r#"add to a Role in namespace "ops" (bound to kube2nats' ServiceAccount): {apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "update"], resourceNames: ["kube2nats"]}"#
        );
        assert_eq!(
            rule(&create),
            r#"add to a Role in namespace "ops" (bound to kube2nats' ServiceAccount): {apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"]}"#
        );
    }

    #[test]
    fn the_cluster_id_rule_names_the_kube_system_namespace() {
        let namespaces = ResourceInfo::core("namespaces", "Namespace", false);
        let access = Access::cluster_id(&namespaces);
        assert_eq!(
            refused(&access, Verb::Get).rule(),
            r#"add to a ClusterRole (bound with a ClusterRoleBinding): {apiGroups: [""], resources: ["namespaces"], verbs: ["get"], resourceNames: ["kube-system"]}"#
        );
    }
}
