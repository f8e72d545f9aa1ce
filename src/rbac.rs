//! The start-up RBAC self-check, and turning a refusal into the rule that would allow it, so an
//! operator can fix the Role from one log line.
//!
//! Before its watches start, kube2nats asks the API server (SelfSubjectAccessReview, which every
//! authenticated identity may create) whether it may `list` and `watch` each watched resource in
//! each namespace. A refusal is logged with the exact rule to add; depending on
//! `kubernetes.rbac_check` kube2nats then keeps running (the watch retries until the Role is
//! fixed) or exits with code 3.

use serde::Deserialize;
use serde_json::json;

use crate::event::ResourceInfo;
use crate::kube::client::Verb;
use crate::kube::{ApiClient, ApiError};

const ACCESS_REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// One permission kube2nats needs and does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub watch: String,
    pub verb: Verb,
    pub resource: ResourceInfo,
    /// `None`: all namespaces (or cluster-scoped).
    pub namespace: Option<String>,
}

impl Refusal {
    /// `add to a Role in namespace "default" …: {apiGroups: [""], resources: ["pods"], …}`.
    pub fn rule(&self) -> String {
        rule_to_add(&self.resource, self.namespace.as_deref())
    }
}

/// The start-up check found refusals and `rbac_check = "fail"`: kube2nats exits with code 3.
#[derive(Debug, thiserror::Error)]
#[error("RBAC does not allow {} required permission(s); see the log lines above for the rules to add", .0.len())]
pub struct RbacDenied(pub Vec<Refusal>);

/// What to check: one watch's resource in one namespace (or all).
pub struct Access<'a> {
    pub watch: &'a str,
    pub resource: &'a ResourceInfo,
    pub namespace: Option<&'a str>,
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

/// Asks about `list` and `watch` for each access; logs each refusal with the rule to add, and
/// returns them. A review that cannot be asked (old server, network) is logged and skipped: the
/// watches themselves will report what is wrong.
pub async fn self_check(client: &ApiClient, accesses: &[Access<'_>]) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    for access in accesses {
        for verb in [Verb::List, Verb::Watch] {
            match allowed(client, verb, access).await {
                Ok(true) => {}
                Ok(false) => {
                    let refusal = Refusal {
                        watch: access.watch.to_owned(),
                        verb,
                        resource: access.resource.clone(),
                        namespace: access.namespace.map(str::to_owned),
                    };
                    tracing::error!(
                        watch = access.watch,
                        verb = verb.as_str(),
                        resource = %access.resource.plural,
                        group = %access.resource.group,
                        namespace = access.namespace.unwrap_or("*"),
                        rule = %refusal.rule(),
                        "RBAC does not allow the request; add the rule"
                    );
                    refusals.push(refusal);
                }
                Err(e) => {
                    tracing::warn!(watch = access.watch, verb = verb.as_str(), error = %e, "cannot check RBAC with a SelfSubjectAccessReview; skipping the check");
                    return refusals;
                }
            }
        }
    }
    refusals
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
/// grants kube2nats what it needs on `resource`.
pub fn rule_to_add(resource: &ResourceInfo, namespace: Option<&str>) -> String {
    let scope = match namespace {
        Some(ns) => format!("a Role in namespace {ns:?} (bound to kube2nats' ServiceAccount)"),
        None => "a ClusterRole (bound with a ClusterRoleBinding)".to_owned(),
    };
    format!(
        "add to {scope}: {{apiGroups: [{:?}], resources: [{:?}], verbs: [\"get\", \"list\", \"watch\"]}}",
        resource.group, resource.plural
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_exact_rule() {
        let pods = ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            plural: "pods".into(),
            kind: "Pod".into(),
            namespaced: true,
        };
        assert_eq!(
            rule_to_add(&pods, Some("default")),
            r#"add to a Role in namespace "default" (bound to kube2nats' ServiceAccount): {apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"]}"#
        );
        assert!(rule_to_add(&pods, None).starts_with("add to a ClusterRole"));
    }
}
