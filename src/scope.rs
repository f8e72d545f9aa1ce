//! Namespace scope: which namespaces' objects a watch publishes, beyond `namespaces`.
//!
//! - `namespaces_exclude`: one cluster-wide watch whose objects in the listed namespaces are
//!   dropped here, right after decoding (the namespace is read in the metadata scan), counted as
//!   `events_dropped_total{reason="namespace"}`. Never N watches, and no field selector either:
//!   `metadata.namespace!=x` works on built-in resources and CRDs, but aggregated APIs may refuse
//!   it, and the filter must never be the reason a watch cannot start. Where the excluded
//!   namespaces carry most of the traffic, add the field selector yourself to save the bandwidth.
//! - `namespace_selector`: the objects of namespaces whose labels match. One
//!   [`crate::watcher::NamespaceWatcher`]
//!   per distinct selector lists and watches `namespaces` with it as label selector (the API
//!   server then reports a namespace relabelled out of the selector as DELETED, into it as ADDED)
//!   and shares the matching set with the watch targets.
//!
//! When the set changes, each target relists and diffs against its memory under the new set
//! ([`crate::watcher`]): the objects of a namespace that started matching are published as
//! ADDED, and those of a namespace that stopped matching as DELETED (synthesized, as for any
//! object that left the watch's view: a label-selector watch of the API server does the same when
//! an object is relabelled out of it), so subscribers that mirror the scope converge. The same
//! diff runs at start when state was saved, so a namespace that started or stopped matching while
//! kube2nats was down is reported as if it had been watching. A scoped watch therefore lists at
//! every start instead of resuming from the saved version; the saved memory still keeps it from
//! publishing anything unchanged.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::event::ResourceInfo;
use tokio::sync::watch;

/// Namespace names currently matching a selector; `None` until the first list completed.
pub(crate) type Selected = Option<Arc<BTreeSet<String>>>;

/// `namespaces` in the core API group: what a namespace selector lists and watches.
pub(crate) fn namespaces_resource() -> ResourceInfo {
    ResourceInfo::core("namespaces", "Namespace", false)
}

/// One watch target's namespace scope.
pub(crate) struct Scope {
    exclude: Arc<[String]>,
    selector: Option<Selector>,
}

/// A selector's matching namespaces: the set the target's memory was listed under, and where
/// the newest set arrives.
struct Selector {
    updates: watch::Receiver<Selected>,
    current: Arc<BTreeSet<String>>,
}

impl Scope {
    /// `exclude`: namespaces whose objects are dropped; `selected`: the matching namespaces of
    /// a `namespace_selector`, if the watch has one.
    pub(crate) fn new(
        exclude: Arc<[String]>,
        selected: Option<watch::Receiver<Selected>>,
    ) -> Scope {
        Scope {
            exclude,
            selector: selected.map(|updates| Selector {
                updates,
                current: Arc::default(),
            }),
        }
    }

    /// Whether the scope can change what a saved memory covers (and so a start must relist).
    pub(crate) fn is_limited(&self) -> bool {
        !self.exclude.is_empty() || self.selector.is_some()
    }

    /// Whether an object in `namespace` is published; cluster-scoped objects always are.
    pub(crate) fn admits(&self, namespace: Option<&str>) -> bool {
        let Some(ns) = namespace else { return true };
        !self.exclude.iter().any(|x| x == ns)
            && self
                .selector
                .as_ref()
                .is_none_or(|s| s.current.contains(ns))
    }

    /// Waits for the selector's first set (at once without a selector); `false` if shutdown
    /// came first.
    pub(crate) async fn ready(&mut self, shutdown: &CancellationToken) -> bool {
        let Some(selector) = &mut self.selector else {
            return true;
        };
        let first = tokio::select! {
            _ = shutdown.cancelled() => return false,
            first = selector.updates.wait_for(Option::is_some) => first,
        };
        match first.as_deref() {
            Ok(Some(set)) => {
                selector.current = set.clone();
                true
            }
            // The namespace watcher is gone: the term is ending.
            _ => false,
        }
    }

    /// Resolves when the matching set changed since [`refresh`](Self::refresh); never without a
    /// selector (or once its watcher is gone).
    pub(crate) async fn changed(&mut self) {
        let gone = match &mut self.selector {
            Some(s) => s.updates.changed().await.is_err(),
            None => true,
        };
        if gone {
            std::future::pending::<()>().await;
        }
    }

    /// Takes the newest set; returns how many namespaces it gained and lost.
    pub(crate) fn refresh(&mut self) -> (usize, usize) {
        let Some(s) = &mut self.selector else {
            return (0, 0);
        };
        let Some(newest) = s.updates.borrow_and_update().clone() else {
            return (0, 0);
        };
        let gained = newest.difference(&s.current).count();
        let lost = s.current.difference(&newest).count();
        s.current = newest;
        (gained, lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_and_selection() {
        let scope = Scope::new(Arc::from(["kube-system".to_owned()]), None);
        assert!(scope.is_limited());
        assert!(scope.admits(Some("default")));
        assert!(!scope.admits(Some("kube-system")));
        assert!(scope.admits(None));
        assert!(!Scope::new(Arc::from([]), None).is_limited());

        let (tx, rx) = watch::channel(None);
        let mut scope = Scope::new(Arc::from([]), Some(rx));
        assert!(
            !scope.admits(Some("payments")),
            "nothing matches before the first list"
        );
        tx.send_replace(Some(Arc::new(BTreeSet::from(["payments".to_owned()]))));
        assert_eq!(scope.refresh(), (1, 0));
        assert!(scope.admits(Some("payments")));
        assert!(!scope.admits(Some("default")));
        tx.send_replace(Some(Arc::new(BTreeSet::from(["default".to_owned()]))));
        assert!(
            scope.admits(Some("payments")),
            "the old set holds until refreshed"
        );
        assert_eq!(scope.refresh(), (1, 1));
        assert!(!scope.admits(Some("payments")));
    }
}
