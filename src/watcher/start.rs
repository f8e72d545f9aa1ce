//! The start of a watch task: its saved state loaded, and where the watch begins with it (a
//! resume from the saved version, or a list that diffs the saved objects: docs/durable-state.md).

use tokio_util::sync::CancellationToken;

use super::machine::State;
use super::{ListReason, WatchTask};
use crate::config::InitialState;
use crate::dedupe::Dedupe;
use crate::event::ResourceVersion;
use crate::state::{Checkpoints, Loaded, Start};

impl WatchTask {
    /// Loads the saved state: with it the watch resumes from the saved version, without it it
    /// lists. `None` if shutdown came first.
    pub(super) async fn start(
        &mut self,
        shutdown: &CancellationToken,
    ) -> Option<(State, Checkpoints)> {
        let saved = self.saved.take()?;
        let Loaded {
            start,
            mut checkpoints,
            journal,
        } = saved.load(shutdown).await?;
        self.outlet.delivery.set_journal(journal);
        let state = match start {
            Start::Saved {
                dedupe,
                checkpointed: false,
                ..
            } if self.initial_state == InitialState::Skip => {
                // A journal alone (a crash before the first checkpoint) names the objects
                // published, not those the first list tracked silently: resumed, a 410 relist
                // would announce those as ADDED. So the start lists as a first start does,
                // diffing the journaled objects and tracking the rest silently.
                self.remember(*dedupe);
                tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), objects = self.dedupe.len(), "loaded a journal without a checkpoint: listing as at a first start (initial_state = \"skip\")");
                self.machine.start()
            }
            Start::Saved {
                dedupe, version, ..
            } => {
                self.remember(*dedupe);
                self.listed_once = true;
                self.resume_or_list(version, &mut checkpoints)
            }
            Start::Journaled { dedupe } => {
                // Not a first start for the journaled objects, which are diffed; the rest are
                // listed as on a first start (`initial_state` applies).
                self.remember(*dedupe);
                self.machine.start()
            }
            Start::Fresh => self.machine.start(),
        };
        Some((state, checkpoints))
    }

    /// The saved objects are the memory; the diff against them is reported once the watch
    /// delivers something or a list completes.
    fn remember(&mut self, dedupe: Dedupe) {
        self.dedupe = dedupe;
        self.resuming = Some(self.dedupe.len());
        self.report_tracked();
    }

    /// Where a watch with a checkpoint begins: at the saved version, unless the mirror or a
    /// namespace scope needs a list.
    fn resume_or_list(&mut self, version: ResourceVersion, checkpoints: &mut Checkpoints) -> State {
        let objects = self.dedupe.len();
        if self.outlet.delivery.mirror().is_some() {
            tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %version, objects, "loaded saved state: relisting to diff it and to repair the mirror");
            return self.machine.list(ListReason::Mirror);
        }
        if self.scope.is_limited() {
            tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %version, objects, "loaded saved state: relisting to diff it under the current namespace scope");
            return self.machine.list(ListReason::NamespaceScope);
        }
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %version, objects, "loaded saved state: resuming the watch from the saved resourceVersion, without a list");
        checkpoints.advanced(&version);
        self.machine.resume(version)
    }
}
