//! The namespace watcher of a `namespace_selector`: lists and watches `namespaces` with the
//! selector as label selector and shares the matching set with the watch targets through
//! [`crate::scope`]. It is a watch like the others, driven by the same state machine, so it lives
//! with them; the scope module only holds the set and what a target does with it.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::machine::{Machine, Outcome, Restart, RestartReason, Target};
use super::refused::{Refusal, Refusals};

use crate::event::EventType;
use crate::scope::{namespaces_resource, Selected};
use crate::telemetry::logging::human;

/// Lists and watches the namespaces matching one selector and publishes the matching set.
pub(crate) struct NamespaceWatcher {
    selector: String,
    machine: Machine,
    updates: watch::Sender<Selected>,
    /// The set being listed, between a list's first and last page.
    listing: Option<BTreeSet<String>>,
    /// Since when the API server refuses the watcher's requests (403).
    refusals: Refusals,
}

impl NamespaceWatcher {
    /// Where a selector's matching set is published: the sender outlives each watcher (a
    /// supervisor builds a new one after a crash), so the targets never see it closed.
    pub(crate) fn channel() -> (watch::Sender<Selected>, watch::Receiver<Selected>) {
        watch::channel(None)
    }

    /// `machine` lists and watches [`NamespaceWatcher::target`]; `updates` from
    /// [`NamespaceWatcher::channel`].
    pub(crate) fn new(machine: Machine, updates: watch::Sender<Selected>) -> NamespaceWatcher {
        let selector = machine.target().label_selector.clone().unwrap_or_default();
        NamespaceWatcher {
            selector,
            machine,
            updates,
            listing: None,
            refusals: Refusals::default(),
        }
    }

    /// The target a selector's watcher lists and watches.
    pub(crate) fn target(selector: &str, template: &Target) -> Target {
        Target {
            resource: namespaces_resource(),
            namespace: None,
            label_selector: Some(selector.to_owned()),
            field_selector: None,
            metadata_only: true,
            follow: None,
            ..template.clone()
        }
    }

    /// Runs until `shutdown`. A new watcher (after a crash) lists afresh and republishes the
    /// set; targets relist only if it changed meanwhile.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut state = self.machine.start();
        loop {
            let (outcome, next) = tokio::select! {
                _ = shutdown.cancelled() => return,
                stepped = self.machine.step(state) => stepped,
            };
            state = next;
            self.handle(outcome);
        }
    }

    fn handle(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::ListPage {
                started,
                items,
                complete,
                ..
            } => {
                self.refusals.served();
                let listing = match (started, self.listing.take()) {
                    (Some(_), _) | (None, None) => self.listing.insert(BTreeSet::new()),
                    (None, Some(partial)) => self.listing.insert(partial),
                };
                listing.extend(items.into_iter().map(|item| item.meta.name));
                if complete.is_some() {
                    let listed = self.listing.take().unwrap_or_default();
                    self.publish(|_| listed);
                }
            }
            // A namespace over the line limit still names itself: its metadata was read.
            Outcome::Event(event) | Outcome::Oversized { event, .. } => {
                let name = event.meta.name;
                self.publish(|current| {
                    let mut set = current.clone();
                    match event.event_type {
                        EventType::Added | EventType::Modified => set.insert(name),
                        EventType::Deleted => set.remove(&name),
                    };
                    set
                });
            }
            Outcome::Restart(restart) => self.restarted(&restart),
            Outcome::WatchOpened(_) => self.refusals.served(),
            Outcome::Bookmark(_)
            | Outcome::Unserved(_)
            | Outcome::VersionMoved(_)
            | Outcome::Idle => {}
        }
    }

    /// Replaces the set by `next(current)`; logs each namespace that starts or stops matching
    /// and wakes the targets only if the set changed.
    fn publish(&self, next: impl FnOnce(&BTreeSet<String>) -> BTreeSet<String>) {
        let selector = &self.selector;
        self.updates.send_if_modified(|selected| {
            let first = selected.is_none();
            let current = selected.as_deref().cloned().unwrap_or_default();
            let next = next(&current);
            if !first && next == current {
                return false;
            }
            if first {
                tracing::info!(namespace_selector = %selector, namespaces = ?next, "namespaces matching the selector");
            } else {
                for ns in next.difference(&current) {
                    tracing::info!(namespace_selector = %selector, namespace = %ns, "namespace now matches namespace_selector: its objects are listed and published as ADDED");
                }
                for ns in current.difference(&next) {
                    tracing::info!(namespace_selector = %selector, namespace = %ns, "namespace no longer matches namespace_selector: its objects are dropped and published as DELETED");
                }
            }
            *selected = Some(Arc::new(next));
            true
        });
    }

    /// Logs a restart; a refusal (403) names the rule to add once it persists, as a watch's does
    /// ([`super::refused`]).
    fn restarted(&mut self, restart: &Restart) {
        let error = restart
            .error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let reason = restart.reason.as_str();
        let retry_in = restart.retry_in.map(human);
        let selector = &self.selector;
        if restart.reason != RestartReason::Forbidden {
            tracing::info!(namespace_selector = %selector, reason, retry_in, error, "namespace watch restarting");
            return;
        }
        match self.refusals.refused() {
            Refusal::First => {
                tracing::warn!(namespace_selector = %selector, retry_in, error, "the API server refused listing or watching namespaces (403); retrying (the rule to add is named if the refusal persists)")
            }
            Refusal::Again => {
                tracing::debug!(namespace_selector = %selector, retry_in, error, "the API server refused listing or watching namespaces again (403); retrying")
            }
            Refusal::Persisting(refused_for) => {
                let rule = crate::rbac::rule_to_add(&namespaces_resource(), None);
                tracing::error!(namespace_selector = %selector, refused_for = human(refused_for), retry_in, error, rule = %rule, "RBAC refused listing or watching namespaces; add the rule");
            }
        }
    }
}
