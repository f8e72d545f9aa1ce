//! What a test does to the simulator's CustomResourceDefinitions: delete and create them, change
//! the versions they serve, hold discovery behind them (the store keeps what they say:
//! [`super::resources::Crds`]).

use super::{custom_resource, ApiServer};

impl ApiServer {
    /// Deletes the CustomResourceDefinition of the custom resource `resource_name` (`widgets`,
    /// `gadgets`) as kube-apiserver does once its finalizer runs: each object is deleted (a
    /// DELETED event to every watch), then the resource's watches end cleanly, it leaves
    /// discovery (its group too, when no other resource is left in it) and its paths answer 404
    /// until [`create_crd`](Self::create_crd). Returns how many objects were deleted.
    ///
    /// # Panics
    /// If `resource_name` is not a custom resource (a bug in the test).
    pub fn delete_crd(&self, resource_name: &str) -> usize {
        let rt = custom_resource(resource_name);
        self.shared.store().delete_crd(rt)
    }

    /// Creates the CustomResourceDefinition of `resource_name` again, established at once: the
    /// resource is in discovery and served, with no objects; its watch cache starts now, so a
    /// watch from an older resourceVersion gets 410 Expired.
    ///
    /// # Panics
    /// If `resource_name` is not a custom resource.
    pub fn create_crd(&self, resource_name: &str) {
        let rt = custom_resource(resource_name);
        self.shared.store().create_crd(rt);
    }

    /// Updates the CustomResourceDefinition of `resource_name` to serve `versions` (`served:
    /// true`; every other version of it is not served and its paths answer 404), as an upgrade
    /// from `v1beta1` to `v1` does in two steps (`["v1beta1", "v1"]`, then `["v1"]`). Discovery
    /// lists the group's versions in kube-apiserver's priority order, the first preferred (`v1`
    /// before `v1beta1`). One storage backs every version: objects keep their uid and
    /// resourceVersion and read as the version asked for. The CRD's storage is rebuilt, as
    /// kube-apiserver's is: the resource's watches end, and a watch from a resourceVersion before
    /// the update gets 410 Expired.
    ///
    /// # Panics
    /// If `resource_name` is not a custom resource, or `versions` is empty.
    pub fn set_crd_versions(&self, resource_name: &str, versions: &[&'static str]) {
        let rt = custom_resource(resource_name);
        assert!(!versions.is_empty(), "a CRD serves at least one version");
        self.shared.store().set_crd_versions(rt, versions);
    }

    /// Discovery keeps showing the CRDs as they are now, while the CRDs change (`true`), or
    /// catches up (`false`): kube-apiserver's discovery follows a CRD's changes a moment after
    /// the CRD's own paths do.
    pub fn hold_discovery(&self, held: bool) {
        self.shared.store().hold_discovery(held);
    }
}
