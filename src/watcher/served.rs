//! A watch whose resource stops being served: its CRD deleted. kube-apiserver deletes every
//! object of the resource first (a DELETED event each, which the watch publishes as any other),
//! then ends the watches and answers 404. Whatever the task still remembers then (a DELETED it
//! missed: the watch was down meanwhile, the API server unreachable) is announced as deleted,
//! `Kube-Synthesized: unserved`, and the task lists again with backoff until the resource is
//! back; that list announces what it holds (docs/troubleshooting.md).
//!
//! A watch that follows its resource's preferred version goes on at the new version when only
//! the version it watched stops being served (docs/configuration.md, "Versions that move"):
//! nothing is announced, and its messages name the new version from then on.

use super::machine::{Unserved, VersionMove};
use super::WatchTask;
use crate::publish::message::Synthesis;
use crate::state::Checkpoints;
use crate::telemetry::logging::human;

impl WatchTask {
    /// The collection answered 404 (reported once, until a request on it succeeds again).
    pub(super) async fn unserved(&mut self, unserved: Unserved, checkpoints: &mut Checkpoints) {
        let Unserved { error, retry_in } = unserved;
        self.gauges.set_synced(false);
        self.dedupe.begin_list();
        let vanished = self.dedupe.end_list();
        let deleted = vanished.len();
        // No list tells when they went: the deletions carry the newest version the watch saw,
        // never older than a message already published about them (see `publish_vanished`).
        let seen = checkpoints.position().cloned();
        for gone in vanished {
            let by = seen
                .clone()
                .unwrap_or_else(|| gone.meta.resource_version.clone());
            self.publish_vanished(gone, &by, Synthesis::Unserved).await;
        }
        self.report_tracked();
        if deleted > 0 {
            checkpoints.objects_changed();
        }
        let resource = &self.machine.target().resource;
        tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), group = %resource.group, version = %resource.version, resource = %resource.plural, deleted, retry_in = human(retry_in), error = %error, "resource no longer served (CRD deleted?): published DELETED for the objects left; waiting for it to return");
    }

    /// The resource moved to another version: the messages (and mirror keys) name it from now on.
    pub(super) async fn version_moved(&mut self, moved: VersionMove) {
        let VersionMove { from, to, resume } = moved;
        self.outlet.move_to(to.clone());
        self.metrics.resource.reading(&to);
        let resume = resume.as_ref().map(ToString::to_string);
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), group = %to.group, resource = %to.plural, from = %from.version, to = %to.version, resume_at = resume.as_deref().unwrap_or("(a list)"), "preferred version moved {} → {}; following it", from.version, to.version);
    }
}
