//! Resolving a resource named the way kubectl names it (`pods`, `deploy`, `deployments.apps`,
//! `deployments.v1.apps`, `widgets.example.com`) through API discovery.
//!
//! Discovery runs at start, again while a watch waits for a resource it does not list (a CRD not
//! installed yet: docs/troubleshooting.md), and for one group when the version a watch follows
//! answers 404 (its CRD moved to another version: docs/configuration.md). The answer fixes the request paths, whether
//! the resource is namespaced, and the `kind`/`apiVersion` that kube2nats puts on list items
//! and headers.

use serde::Deserialize;

use super::client::ApiClient;
use super::error::ApiError;
use crate::event::ResourceInfo;

#[derive(Debug, thiserror::Error)]
pub(crate) enum DiscoveryError {
    #[error("unknown resource {name:?}{}", suggestion(.close_matches))]
    Unknown {
        name: String,
        close_matches: Vec<String>,
    },
    #[error("discovery request {path} failed: {source}")]
    Request {
        path: String,
        #[source]
        source: ApiError,
    },
    #[error("discovery document {path} is malformed: {source}")]
    Malformed {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

impl DiscoveryError {
    /// Whether retrying later can help (the server was unreachable or failing), as opposed to a
    /// name that does not exist.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            DiscoveryError::Unknown { .. } => false,
            DiscoveryError::Request { source, .. } => !matches!(source, ApiError::NotFound { .. }),
            DiscoveryError::Malformed { .. } => true,
        }
    }
}

fn suggestion(close: &[String]) -> String {
    if close.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", close.join(", "))
    }
}

#[derive(Deserialize)]
struct ApiResourceList {
    resources: Vec<ApiResource>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct ApiResource {
    name: String,
    #[serde(default)]
    singular_name: String,
    namespaced: bool,
    kind: String,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    short_names: Vec<String>,
}

#[derive(Deserialize)]
struct ApiGroupList {
    groups: Vec<ApiGroup>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiGroup {
    name: String,
    versions: Vec<GroupVersion>,
    preferred_version: Option<GroupVersion>,
}

#[derive(Deserialize)]
struct GroupVersion {
    version: String,
}

/// The resources of one group version.
struct Served {
    group: String,
    version: String,
    preferred: bool,
    resources: Vec<ApiResource>,
}

/// What the server serves, fetched once and used to resolve every configured watch.
pub(crate) struct Discovery {
    served: Vec<Served>,
}

impl Discovery {
    /// Fetches what resolving `names` (as configured: `pods`, `deployments.apps`,
    /// `widgets.v1.example.com`) needs, and no more (docs/configuration.md, "Resources"):
    /// `/api/v1` when a name may be a core resource; `/apis`, as the aggregated discovery
    /// document where the server offers it (Kubernetes 1.26+: every group's versions and
    /// resources in one answer); else only the named groups' versions, or every group's for a
    /// name without a group that the core group does not serve. A start with one `pods` watch
    /// makes one request, a waiting CRD watch one per retry.
    pub(crate) async fn fetch_for(
        client: &ApiClient,
        names: &[&str],
    ) -> Result<Discovery, DiscoveryError> {
        let mut discovery = Discovery { served: Vec::new() };
        if names.iter().any(|name| may_be_core(name)) {
            discovery.served.push(core(client).await?);
        }
        let unresolved: Vec<&str> = names
            .iter()
            .copied()
            .filter(|name| discovery.resolve(name).is_err())
            .collect();
        if unresolved.is_empty() {
            return Ok(discovery);
        }
        match groups(client).await? {
            Groups::Aggregated(served) => discovery.served.extend(served),
            Groups::Listed(list) => {
                let every = unresolved.iter().any(|name| !name.contains('.'));
                for group in list.groups {
                    if every || unresolved.iter().any(|name| names_group(name, &group.name)) {
                        discovery.served.extend(group_versions(client, group).await);
                    }
                }
            }
        }
        Ok(discovery)
    }

    /// Fetches everything the server serves: the core group and every named group.
    #[cfg(test)]
    pub(crate) async fn fetch(client: &ApiClient) -> Result<Discovery, DiscoveryError> {
        // A name no group serves: the core group and every group are fetched to look for it.
        Discovery::fetch_for(client, &["no-such-resource"]).await
    }

    /// Fetches one named group's versions (`/apis/{group}` and each version's resources): what a
    /// watch that follows the group's preferred version asks when its version answers 404.
    /// `Ok(None)` when the group is not served at all (its last CRD deleted).
    pub(crate) async fn fetch_group(
        client: &ApiClient,
        group: &str,
    ) -> Result<Option<Discovery>, DiscoveryError> {
        let group = match get::<ApiGroup>(client, &format!("/apis/{group}")).await {
            Ok(group) => group,
            Err(DiscoveryError::Request {
                source: ApiError::NotFound { .. },
                ..
            }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let served = group_versions(client, group).await;
        Ok(Some(Discovery { served }))
    }

    /// Resolves `name` as kubectl would: `resource`, `resource.group` or `resource.version.group`,
    /// where `resource` may be the plural, the singular or a short name. The core group wins ties,
    /// then the first group the server lists, at its preferred version unless one is named; a
    /// group named without a version falls back to the group's other versions in the server's
    /// priority order when the preferred one does not serve the resource (a CRD of a group whose
    /// other CRDs are at a newer version).
    pub(crate) fn resolve(&self, name: &str) -> Result<ResourceInfo, DiscoveryError> {
        let (resource, rest) = name.split_once('.').unwrap_or((name, ""));
        let resource = resource.to_ascii_lowercase();
        let candidates: Vec<&Served> = if rest.is_empty() {
            self.served.iter().filter(|s| s.preferred).collect()
        } else if self.served.iter().any(|s| s.group == rest) {
            let group = self.served.iter().filter(|s| s.group == rest);
            let (mut preferred, others): (Vec<&Served>, Vec<&Served>) =
                group.partition(|s| s.preferred);
            preferred.extend(others);
            preferred
        } else {
            let (version, group) = rest.split_once('.').unwrap_or((rest, ""));
            self.served
                .iter()
                .filter(|s| s.group == group && s.version == version)
                .collect()
        };
        candidates
            .iter()
            .find_map(|served| {
                served
                    .resources
                    .iter()
                    .find(|r| matches(r, &resource))
                    .map(|r| ResourceInfo {
                        group: served.group.clone(),
                        version: served.version.clone(),
                        plural: r.name.clone(),
                        kind: r.kind.clone(),
                        namespaced: r.namespaced,
                    })
            })
            .ok_or_else(|| DiscoveryError::Unknown {
                name: name.to_owned(),
                close_matches: self.close_matches(name),
            })
    }

    /// The name a watch configured as `name`, resolved to `resource`, follows when its version
    /// moves: `name` itself, unless it pins a version (`widgets.v1beta1.example.com`) or the
    /// resource is in the core group (whose only version is `v1`).
    pub(crate) fn followed(name: &str, resource: &ResourceInfo) -> Option<String> {
        let (_, rest) = name.split_once('.').unwrap_or((name, ""));
        let pinned = format!("{}.{}", resource.version, resource.group);
        (!resource.group.is_empty() && rest != pinned).then(|| name.to_owned())
    }

    /// Qualified names (`plural.group`) within a small edit distance of `name`, or sharing its
    /// first word: what a typo most likely meant.
    fn close_matches(&self, name: &str) -> Vec<String> {
        let (resource, _) = name.split_once('.').unwrap_or((name, ""));
        let mut close: Vec<(usize, String)> = self
            .served
            .iter()
            .filter(|s| s.preferred)
            .flat_map(|s| {
                s.resources
                    .iter()
                    .filter(|r| !r.name.contains('/'))
                    .map(move |r| {
                        if s.group.is_empty() {
                            r.name.clone()
                        } else {
                            format!("{}.{}", r.name, s.group)
                        }
                    })
            })
            .filter_map(|qualified| {
                let plural = qualified.split('.').next().unwrap_or_default();
                let distance = edit_distance(name, &qualified).min(edit_distance(resource, plural));
                (distance <= 2 || plural == resource).then_some((distance, qualified))
            })
            .collect();
        close.sort();
        close.dedup_by(|a, b| a.1 == b.1);
        close.into_iter().take(5).map(|(_, q)| q).collect()
    }
}

fn matches(r: &ApiResource, name: &str) -> bool {
    !r.name.contains('/')
        && r.verbs.iter().any(|v| v == "watch")
        && (r.name == name
            || r.singular_name == name
            || r.short_names.iter().any(|s| s == name)
            || r.kind.eq_ignore_ascii_case(name))
}

/// Whether `name` may name a resource of the core group: it names no group (`pods`), or what
/// follows its resource is one word, a group or the core group's version (`pods.v1`).
fn may_be_core(name: &str) -> bool {
    name.split_once('.')
        .is_none_or(|(_, rest)| !rest.contains('.'))
}

/// Whether `name` (`resource.group` or `resource.version.group`) names `group`.
fn names_group(name: &str, group: &str) -> bool {
    let Some((_, rest)) = name.split_once('.') else {
        return false;
    };
    rest == group || rest.split_once('.').is_some_and(|(_, g)| g == group)
}

/// The core group's resources (`/api/v1`).
async fn core(client: &ApiClient) -> Result<Served, DiscoveryError> {
    Ok(Served {
        group: String::new(),
        version: "v1".into(),
        preferred: true,
        resources: get::<ApiResourceList>(client, "/api/v1").await?.resources,
    })
}

/// `Accept` of `GET /apis`: the aggregated discovery document in either of its versions
/// (apidiscovery.k8s.io v2 from Kubernetes 1.30, v2beta1 from 1.26), else the group list.
const ACCEPT_GROUPS: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// What `GET /apis` answered.
enum Groups {
    /// The aggregated document: every group version with its resources.
    Aggregated(Vec<Served>),
    /// The group list of a server without aggregated discovery (before 1.26).
    Listed(ApiGroupList),
}

async fn groups(client: &ApiClient) -> Result<Groups, DiscoveryError> {
    let path = "/apis";
    let body =
        client
            .get_as(path, ACCEPT_GROUPS)
            .await
            .map_err(|source| DiscoveryError::Request {
                path: path.into(),
                source,
            })?;
    let malformed = |source| DiscoveryError::Malformed {
        path: path.into(),
        source,
    };
    let kind: Kinded = serde_json::from_slice(&body).map_err(malformed)?;
    if kind.kind.as_deref() != Some("APIGroupDiscoveryList") {
        return serde_json::from_slice(&body)
            .map(Groups::Listed)
            .map_err(malformed);
    }
    let list: GroupDiscoveryList = serde_json::from_slice(&body).map_err(malformed)?;
    Ok(Groups::Aggregated(list.served()))
}

#[derive(Deserialize)]
struct Kinded {
    kind: Option<String>,
}

/// `APIGroupDiscoveryList` (apidiscovery.k8s.io v2 and v2beta1 read alike here).
#[derive(Deserialize)]
struct GroupDiscoveryList {
    items: Vec<GroupDiscovery>,
}

#[derive(Deserialize)]
struct GroupDiscovery {
    metadata: GroupName,
    /// In priority order: the first is the preferred version.
    versions: Vec<VersionDiscovery>,
}

#[derive(Deserialize)]
struct GroupName {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct VersionDiscovery {
    version: String,
    #[serde(default)]
    resources: Vec<ResourceDiscovery>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceDiscovery {
    resource: String,
    #[serde(default)]
    response_kind: Option<ResponseKind>,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    singular_resource: String,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    short_names: Vec<String>,
}

#[derive(Deserialize)]
struct ResponseKind {
    #[serde(default)]
    kind: String,
}

impl GroupDiscoveryList {
    fn served(self) -> Vec<Served> {
        let mut served = Vec::new();
        for group in self.items {
            for (i, version) in group.versions.into_iter().enumerate() {
                let resources = version
                    .resources
                    .into_iter()
                    .map(|r| ApiResource {
                        name: r.resource,
                        singular_name: r.singular_resource,
                        namespaced: r.scope == "Namespaced",
                        kind: r.response_kind.map(|k| k.kind).unwrap_or_default(),
                        verbs: r.verbs,
                        short_names: r.short_names,
                    })
                    .collect();
                served.push(Served {
                    group: group.metadata.name.clone(),
                    version: version.version,
                    preferred: i == 0,
                    resources,
                });
            }
        }
        served
    }
}

/// The served versions of `group`, each with its resources, in the order the server lists
/// them (its priority order).
async fn group_versions(client: &ApiClient, group: ApiGroup) -> Vec<Served> {
    let preferred = group.preferred_version.as_ref().map(|v| v.version.clone());
    let mut served = Vec::new();
    for version in &group.versions {
        let path = format!("/apis/{}/{}", group.name, version.version);
        let resources = match get::<ApiResourceList>(client, &path).await {
            Ok(list) => list.resources,
            // An aggregated API that is down answers 503 here; kubectl skips it too, and a
            // watch that needs it gets "unknown resource" below.
            Err(e) => {
                tracing::warn!(error = %e, "skipping group version that discovery could not read");
                continue;
            }
        };
        served.push(Served {
            group: group.name.clone(),
            version: version.version.clone(),
            preferred: preferred.as_deref() == Some(version.version.as_str()),
            resources,
        });
    }
    served
}

async fn get<T: serde::de::DeserializeOwned>(
    client: &ApiClient,
    path: &str,
) -> Result<T, DiscoveryError> {
    let body = client
        .get(path)
        .await
        .map_err(|source| DiscoveryError::Request {
            path: path.into(),
            source,
        })?;
    serde_json::from_slice(&body).map_err(|source| DiscoveryError::Malformed {
        path: path.into(),
        source,
    })
}

/// Levenshtein distance, for suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str, kind: &str, namespaced: bool, short: &[&str]) -> ApiResource {
        ApiResource {
            name: name.into(),
            singular_name: kind.to_ascii_lowercase(),
            namespaced,
            kind: kind.into(),
            verbs: vec!["list".into(), "watch".into()],
            short_names: short.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn discovery() -> Discovery {
        Discovery {
            served: vec![
                Served {
                    group: String::new(),
                    version: "v1".into(),
                    preferred: true,
                    resources: vec![
                        res("pods", "Pod", true, &["po"]),
                        res("namespaces", "Namespace", false, &["ns"]),
                    ],
                },
                Served {
                    group: "apps".into(),
                    version: "v1".into(),
                    preferred: true,
                    resources: vec![res("deployments", "Deployment", true, &["deploy"])],
                },
                Served {
                    group: "example.com".into(),
                    version: "v1".into(),
                    preferred: true,
                    resources: vec![res("widgets", "Widget", true, &[])],
                },
                Served {
                    group: "example.com".into(),
                    version: "v1beta1".into(),
                    preferred: false,
                    resources: vec![res("widgets", "Widget", true, &[])],
                },
            ],
        }
    }

    #[test]
    fn kubectl_style_names() {
        let d = discovery();
        let pods = d.resolve("pods").unwrap();
        assert_eq!(
            (
                pods.group.as_str(),
                pods.version.as_str(),
                pods.kind.as_str(),
                pods.namespaced
            ),
            ("", "v1", "Pod", true)
        );
        assert_eq!(d.resolve("po").unwrap().plural, "pods");
        assert!(!d.resolve("ns").unwrap().namespaced);
        assert_eq!(d.resolve("deployments.apps").unwrap().group, "apps");
        assert_eq!(d.resolve("deployments.v1.apps").unwrap().version, "v1");
        assert_eq!(d.resolve("deploy").unwrap().kind, "Deployment");
        assert_eq!(d.resolve("widgets.example.com").unwrap().version, "v1");
        assert_eq!(
            d.resolve("widgets.v1beta1.example.com").unwrap().version,
            "v1beta1"
        );
    }

    #[test]
    fn a_group_named_without_version_falls_back_in_priority_order() {
        let mut d = discovery();
        d.served.push(Served {
            group: "example.com".into(),
            version: "v1alpha1".into(),
            preferred: false,
            resources: vec![res("gizmos", "Gizmo", true, &[])],
        });
        let gizmos = d.resolve("gizmos.example.com").unwrap();
        assert_eq!(gizmos.version, "v1alpha1");
        // The preferred version wins where it serves the resource.
        assert_eq!(d.resolve("widgets.example.com").unwrap().version, "v1");
    }

    #[test]
    fn only_a_name_without_version_is_followed() {
        let d = discovery();
        let followed = |name: &str| Discovery::followed(name, &d.resolve(name).unwrap());
        assert_eq!(
            followed("widgets.example.com").as_deref(),
            Some("widgets.example.com")
        );
        assert_eq!(followed("deploy").as_deref(), Some("deploy"));
        assert_eq!(followed("widgets.v1beta1.example.com"), None);
        assert_eq!(followed("widgets.v1.example.com"), None);
        assert_eq!(followed("pods"), None);
    }

    #[test]
    fn unknown_names_list_close_matches() {
        let err = discovery()
            .resolve("deploymnets.apps")
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean deployments.apps"), "{err}");
        let err = discovery().resolve("gizmos").unwrap_err().to_string();
        assert_eq!(err, "unknown resource \"gizmos\"");
    }

    #[test]
    fn names_say_which_groups_they_may_be_in() {
        assert!(may_be_core("pods"));
        assert!(may_be_core("pods.v1"));
        assert!(may_be_core("deployments.apps"), "apps may be a version");
        assert!(!may_be_core("widgets.example.com"));
        assert!(!may_be_core("deployments.v1.apps"));
        assert!(names_group("deployments.apps", "apps"));
        assert!(names_group("deployments.v1.apps", "apps"));
        assert!(names_group("widgets.v1beta1.example.com", "example.com"));
        assert!(names_group("widgets.example.com", "example.com"));
        // Read as `resource.version.group`, as kubectl reads it when no group is `example.com`.
        assert!(names_group("widgets.example.com", "com"));
        assert!(!names_group("pods", "apps"));
    }
}
