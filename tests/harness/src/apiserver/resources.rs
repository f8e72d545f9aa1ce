//! The fixed set of resources the simulated API server serves, and their discovery documents.
//!
//! A real cluster learns its resources from compiled-in types and CRDs; the simulator has a
//! small static table instead, covering each case a client must handle: core group (`pods`,
//! `configmaps`), cluster-scoped (`namespaces`), a named group (`apps/v1 deployments`) and custom
//! resources, namespaced (`widgets`) and cluster-scoped (`gadgets`); and `coordination.k8s.io/v1 leases`,
//! the lock of leader election. The custom resources' CRDs are installed at start; a test can
//! delete and create them again ([`super::ApiServer::delete_crd`]).

use std::collections::HashSet;

use serde_json::{json, Value};

/// The plurals of the custom resources whose CRD is not installed: left out of discovery, and
/// their paths answer 404 (docs: [`super::ApiServer::delete_crd`]).
pub type Unserved = HashSet<&'static str>;

/// One servable resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceType {
    /// Plural, lower-case name used in paths (`pods`).
    pub plural: &'static str,
    /// Singular name (`pod`).
    pub singular: &'static str,
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version (`v1`).
    pub version: &'static str,
    /// Kind of one object (`Pod`).
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// kubectl short names.
    pub short_names: &'static [&'static str],
    /// Subresources listed in discovery (`status`, `log`, ...), with their verbs.
    pub subresources: &'static [(&'static str, &'static [&'static str])],
}

impl ResourceType {
    /// `v1` for the core group, `group/version` otherwise: the objects' `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// Every resource the simulator serves.
pub const RESOURCES: &[ResourceType] = &[
    ResourceType {
        plural: "pods",
        singular: "pod",
        group: "",
        version: "v1",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        subresources: &[
            ("status", STATUS_VERBS),
            ("log", &["get"]),
            ("exec", &["create", "get"]),
        ],
    },
    ResourceType {
        plural: "configmaps",
        singular: "configmap",
        group: "",
        version: "v1",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        subresources: &[],
    },
    ResourceType {
        plural: "namespaces",
        singular: "namespace",
        group: "",
        version: "v1",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        subresources: &[("status", STATUS_VERBS), ("finalize", &["update"])],
    },
    ResourceType {
        plural: "deployments",
        singular: "deployment",
        group: "apps",
        version: "v1",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        subresources: &[("status", STATUS_VERBS), ("scale", STATUS_VERBS)],
    },
    ResourceType {
        plural: "widgets",
        singular: "widget",
        group: "example.com",
        version: "v1",
        kind: "Widget",
        namespaced: true,
        short_names: &["wd"],
        subresources: &[("status", STATUS_VERBS)],
    },
    ResourceType {
        plural: "gadgets",
        singular: "gadget",
        group: "example.com",
        version: "v1",
        kind: "Gadget",
        namespaced: false,
        short_names: &[],
        subresources: &[],
    },
    // Leader election's lock; its spec is validated by `leases`.
    ResourceType {
        plural: "leases",
        singular: "lease",
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        subresources: &[],
    },
];

/// The resource served at `group/version/plural`, if any.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource with this plural name (plural names are unique in the simulator).
pub fn by_plural(plural: &str) -> Option<&'static ResourceType> {
    RESOURCES.iter().find(|r| r.plural == plural)
}

/// Whether `r` is a custom resource: one a CustomResourceDefinition defines, which
/// [`super::ApiServer::delete_crd`] can take away (the built-in groups cannot be).
pub fn is_custom(r: &ResourceType) -> bool {
    r.group.contains('.') && !r.group.ends_with(".k8s.io")
}

/// Named (non-core) groups, in discovery order; the SelfSubjectAccessReview group is included
/// because clients discover it before checking their permissions. A group whose every resource
/// is a deleted CRD's is not listed, as kube-apiserver drops it once the last CRD goes.
fn groups(unserved: &Unserved) -> Vec<(&'static str, &'static str)> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| !r.group.is_empty() && !unserved.contains(r.plural))
    {
        if !groups.contains(&(r.group, r.version)) {
            groups.push((r.group, r.version));
        }
    }
    groups.push(("authorization.k8s.io", "v1"));
    groups
}

/// `GET /api`: the core group's versions.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }]
    })
}

fn group_json(name: &str, version: &str) -> Value {
    let gv = json!({ "groupVersion": format!("{name}/{version}"), "version": version });
    json!({ "name": name, "versions": [gv.clone()], "preferredVersion": gv })
}

/// `GET /apis`: every named group with its preferred version.
pub fn api_group_list(unserved: &Unserved) -> Value {
    let groups: Vec<Value> = groups(unserved)
        .into_iter()
        .map(|(g, v)| group_json(g, v))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /apis/{group}`: one APIGroup.
pub fn api_group(group: &str, unserved: &Unserved) -> Option<Value> {
    let (name, version) = groups(unserved).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_json(name, version);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`: the APIResourceList, subresources included.
pub fn api_resource_list(group: &str, version: &str, unserved: &Unserved) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version && !unserved.contains(r.plural))
    {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ALL_VERBS,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if r.plural == "pods" || r.plural == "deployments" {
            entry["categories"] = json!(["all"]);
        }
        resources.push(entry);
        for (sub, verbs) in r.subresources {
            resources.push(json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": if *sub == "scale" { "Scale" } else { r.kind },
                "verbs": verbs,
            }));
        }
    }
    if group == "authorization.k8s.io" && version == "v1" {
        resources.push(json!({
            "name": "selfsubjectaccessreviews",
            "singularName": "selfsubjectaccessreview",
            "namespaced": false,
            "kind": "SelfSubjectAccessReview",
            "verbs": ["create"],
        }));
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut doc =
        json!({ "kind": "APIResourceList", "groupVersion": group_version, "resources": resources });
    // The real server omits apiVersion on the core list but sets it on named groups.
    if !group.is_empty() {
        doc["apiVersion"] = json!("v1");
    }
    Some(doc)
}
