//! Turning an RBAC refusal into the rule that would allow it, so an operator can fix the Role
//! from one log line.

use crate::event::ResourceInfo;

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
