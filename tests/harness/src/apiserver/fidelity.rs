//! Where the simulator can do what kube-apiserver does at the cost of the tests' brevity, each
//! a choice of [`Fidelity`]. The defaults are the short forms most tests are written against:
//! a pod deleted at once, as a plain DELETED, and namespaces that need not exist. Tests that pin
//! kube-apiserver's behaviour (`tests/real_apiserver.rs`, run on both servers) ask for
//! [`Fidelity::KUBE_APISERVER`].

use serde_json::{json, Value};

use super::resources::{by_plural, ResourceType};
use super::status::ApiError;
use super::store::{now_rfc3339, Store};

/// How a pod's DELETE is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodDeletion {
    /// One DELETED event; the DELETE answers the object as deleted.
    #[default]
    Immediate,
    /// As kube-apiserver deletes a pod no kubelet runs (unscheduled, or a grace period of 0): a
    /// MODIFIED that sets `deletionTimestamp` and `deletionGracePeriodSeconds: 0`, then the
    /// DELETED; the DELETE answers the object as of that MODIFIED.
    Graceful,
}

/// Whether a namespaced object's namespace must exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Namespaces {
    /// Objects may be created in any namespace.
    #[default]
    Implicit,
    /// As kube-apiserver's `NamespaceLifecycle` admission: a create in a namespace that does not
    /// exist (neither one a cluster starts with nor a created Namespace) is 404 NotFound,
    /// `namespaces "NAME" not found`.
    MustExist,
}

/// The choices, together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fidelity {
    /// How a pod's DELETE is carried out.
    pub pod_deletion: PodDeletion,
    /// Whether a namespaced object's namespace must exist.
    pub namespaces: Namespaces,
}

impl Fidelity {
    /// Every choice as kube-apiserver makes it.
    pub const KUBE_APISERVER: Fidelity = Fidelity {
        pod_deletion: PodDeletion::Graceful,
        namespaces: Namespaces::MustExist,
    };
}

/// The namespaces every cluster starts with.
const BUILT_IN_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Store {
    /// Refuses a create of `rt` in namespace `ns` that kube-apiserver would refuse.
    pub(super) fn admit_namespace(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
    ) -> Result<(), ApiError> {
        let (Namespaces::MustExist, true, Some(ns)) = (self.fidelity.namespaces, rt.namespaced, ns)
        else {
            return Ok(());
        };
        let namespaces = by_plural("namespaces").expect("the simulator serves namespaces");
        if BUILT_IN_NAMESPACES.contains(&ns) || self.get(namespaces, None, ns).is_some() {
            return Ok(());
        }
        Err(ApiError::not_found("namespaces", "", ns))
    }

    /// Marks a pod deleted before it goes, when deletion is [`PodDeletion::Graceful`]: the pod
    /// as of that MODIFIED, or `None` when it goes at once.
    pub(super) fn mark_deleted(
        &mut self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        if self.fidelity.pod_deletion == PodDeletion::Immediate || rt.plural != "pods" {
            return Ok(None);
        }
        self.update(rt, namespace, name, |pod| {
            pod["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            pod["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(plural: &str) -> &'static ResourceType {
        by_plural(plural).expect("a known resource")
    }

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "nginx"}]}})
    }

    #[test]
    fn as_kube_apiserver_a_create_needs_its_namespace() {
        let mut store = Store::new(10, Fidelity::KUBE_APISERVER);
        let refused = store
            .create(resource("pods"), Some("nowhere"), pod("a"))
            .expect_err("no such namespace");
        assert_eq!(refused.code, 404);
        assert_eq!(refused.body["message"], "namespaces \"nowhere\" not found");
        assert_eq!(
            refused.body["details"],
            json!({"name": "nowhere", "kind": "namespaces"})
        );
        assert!(store
            .create(resource("pods"), Some("default"), pod("a"))
            .is_ok());
        let namespace = json!({"metadata": {"name": "shop"}});
        store
            .create(resource("namespaces"), None, namespace)
            .expect("a namespace");
        assert!(store
            .create(resource("pods"), Some("shop"), pod("a"))
            .is_ok());
        let mut short = Store::new(10, Fidelity::default());
        assert!(short
            .create(resource("pods"), Some("nowhere"), pod("a"))
            .is_ok());
    }

    #[test]
    fn as_kube_apiserver_a_pod_is_marked_deleted_before_it_goes() {
        let mut store = Store::new(10, Fidelity::KUBE_APISERVER);
        let pods = resource("pods");
        store
            .create(pods, Some("default"), pod("a"))
            .expect("created");
        let answer = store.delete(pods, Some("default"), "a").expect("deleted");
        let rv = |obj: &Value| {
            obj["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_owned)
        };
        assert_eq!(rv(&answer), Some((store.revision() - 1).to_string()));
        assert!(
            answer["metadata"]["deletionTimestamp"].is_string(),
            "{answer}"
        );
        assert_eq!(answer["metadata"]["deletionGracePeriodSeconds"], 0);
        assert!(store.get(pods, Some("default"), "a").is_none());
        let configmaps = resource("configmaps");
        store
            .create(
                configmaps,
                Some("default"),
                json!({"metadata": {"name": "c"}}),
            )
            .expect("created");
        let answer = store
            .delete(configmaps, Some("default"), "c")
            .expect("deleted");
        assert_eq!(
            rv(&answer),
            Some(store.revision().to_string()),
            "other kinds at once"
        );
    }
}
