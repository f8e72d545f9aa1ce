//! The fixed set of resources the simulated API server serves, and their discovery documents.
//!
//! A real cluster learns its resources from compiled-in types and CRDs; the simulator has a
//! small static table instead, covering each case a client must handle: core group (`pods`,
//! `configmaps`), cluster-scoped (`namespaces`), a named group (`apps/v1 deployments`) and custom
//! resources, namespaced (`widgets`) and cluster-scoped (`gadgets`); and `coordination.k8s.io/v1 leases`,
//! the lock of leader election. The custom resources' CRDs are installed at start; a test can
//! delete and create them again ([`super::ApiServer::delete_crd`]) and change the versions they
//! serve ([`super::ApiServer::set_crd_versions`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};

/// What the CRDs of the custom resources say now: which are not installed (left out of
/// discovery, their paths answer 404: [`super::ApiServer::delete_crd`]) and which versions each
/// serves ([`super::ApiServer::set_crd_versions`]; by default the one in [`RESOURCES`]).
#[derive(Debug, Default, Clone)]
pub struct Crds {
    pub unserved: HashSet<&'static str>,
    pub versions: HashMap<&'static str, Vec<&'static str>>,
}

impl Crds {
    /// Whether `r` is served at all.
    pub fn serves(&self, r: &ResourceType) -> bool {
        !self.unserved.contains(r.plural)
    }

    /// The versions `r` is served at (none while its CRD is deleted).
    pub fn versions(&self, r: &ResourceType) -> Vec<&'static str> {
        if !self.serves(r) {
            return Vec::new();
        }
        match self.versions.get(r.plural) {
            Some(versions) => versions.clone(),
            None => vec![r.version],
        }
    }
}

/// kube-apiserver's version priority: GA before beta before alpha, higher numbers first; a version
/// of another shape sorts after them all, alphabetically (apimachinery `CompareKubeAwareVersionStrings`).
pub fn by_kube_priority(versions: &mut [&'static str]) {
    /// (stage: 3 GA, 2 beta, 1 alpha, 0 other; major; minor).
    fn rank(v: &str) -> (u8, u32, u32) {
        let Some(rest) = v.strip_prefix('v') else {
            return (0, 0, 0);
        };
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let Ok(major) = rest[..digits].parse::<u32>() else {
            return (0, 0, 0);
        };
        let tail = &rest[digits..];
        let (stage, minor) = if tail.is_empty() {
            (3, "0")
        } else if let Some(minor) = tail.strip_prefix("beta") {
            (2, minor)
        } else if let Some(minor) = tail.strip_prefix("alpha") {
            (1, minor)
        } else {
            return (0, 0, 0);
        };
        match minor.parse() {
            Ok(minor) => (stage, major, minor),
            Err(_) => (0, 0, 0),
        }
    }
    versions.sort_by(|a, b| {
        let (ra, rb) = (rank(a), rank(b));
        match (ra.0, rb.0) {
            (0, 0) => a.cmp(b),
            _ => rb.cmp(&ra),
        }
    });
}

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

/// The resource served at `group/version/plural`, if any: as [`RESOURCES`] has it, at another
/// version its CRD serves (`version` then names that one), or `None`.
pub fn lookup(
    group: &str,
    version: &str,
    plural: &str,
    crds: &Crds,
) -> Option<&'static ResourceType> {
    let r = RESOURCES
        .iter()
        .find(|r| r.group == group && r.plural == plural)?;
    crds.versions(r)
        .into_iter()
        .find(|v| *v == version)
        .map(|v| at_version(r, v))
}

/// `r` served at `version`: one value per resource and version, kept for the run (so that it is
/// `'static` as every [`ResourceType`]).
fn at_version(r: &'static ResourceType, version: &'static str) -> &'static ResourceType {
    if r.version == version {
        return r;
    }
    static VERSIONS: OnceLock<Mutex<HashMap<(&str, &str), &'static ResourceType>>> =
        OnceLock::new();
    let mut versions = VERSIONS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    versions
        .entry((r.plural, version))
        .or_insert_with(|| Box::leak(Box::new(ResourceType { version, ..*r })))
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

/// Named (non-core) groups, in discovery order, each with its versions in kube-apiserver's
/// priority order (the first is the preferred one); the SelfSubjectAccessReview group is included
/// because clients discover it before checking their permissions. A group whose every resource
/// is a deleted CRD's is not listed, as kube-apiserver drops it once the last CRD goes.
fn groups(crds: &Crds) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        for version in crds.versions(r) {
            match groups.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) if versions.contains(&version) => {}
                Some((_, versions)) => versions.push(version),
                None => groups.push((r.group, vec![version])),
            }
        }
    }
    for (_, versions) in &mut groups {
        by_kube_priority(versions);
    }
    groups.push(("authorization.k8s.io", vec!["v1"]));
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

fn group_json(name: &str, versions: &[&str]) -> Value {
    let gv =
        |version: &str| json!({ "groupVersion": format!("{name}/{version}"), "version": version });
    let all: Vec<Value> = versions.iter().map(|v| gv(v)).collect();
    json!({ "name": name, "versions": all, "preferredVersion": gv(versions[0]) })
}

/// `GET /apis`: every named group with its preferred version.
pub fn api_group_list(crds: &Crds) -> Value {
    let groups: Vec<Value> = groups(crds)
        .into_iter()
        .map(|(g, v)| group_json(g, &v))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /apis` asked for aggregated discovery: every named group, each version (in priority
/// order, the preferred first) with its resources, in one `APIGroupDiscoveryList`.
pub fn api_group_discovery_list(crds: &Crds) -> Value {
    let items: Vec<Value> = groups(crds)
        .into_iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    let resources: Vec<Value> = RESOURCES
                        .iter()
                        .filter(|r| r.group == group && crds.versions(r).contains(version))
                        .map(|r| {
                            let subresources: Vec<Value> = r
                                .subresources
                                .iter()
                                .map(|(sub, verbs)| json!({ "subresource": sub, "verbs": verbs }))
                                .collect();
                            json!({
                                "resource": r.plural,
                                "responseKind": { "group": group, "version": version, "kind": r.kind },
                                "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": r.singular,
                                "verbs": ALL_VERBS,
                                "shortNames": r.short_names,
                                "subresources": subresources,
                            })
                        })
                        .collect();
                    json!({ "version": version, "resources": resources, "freshness": "Current" })
                })
                .collect();
            json!({ "metadata": { "name": group }, "versions": versions })
        })
        .collect();
    json!({ "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items })
}

/// `GET /apis/{group}`: one APIGroup.
pub fn api_group(group: &str, crds: &Crds) -> Option<Value> {
    let (name, versions) = groups(crds).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_json(name, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`: the APIResourceList, subresources included.
pub fn api_resource_list(group: &str, version: &str, crds: &Crds) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && crds.versions(r).contains(&version))
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
