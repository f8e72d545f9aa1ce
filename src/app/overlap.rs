//! Mirrored watches whose bucket keys meet (docs/mirror.md, "Limits"): refused at start, and
//! run without the mirror when they arrive later.

use std::sync::Arc;

use super::plan::WatchPlan;
use crate::config::WatchConfig;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::plan::resolved;
    use crate::config::testing::load_str;
    use crate::event::ResourceInfo;

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
