//! The watch stage: one task per watch target that runs the list+watch state machine and drives
//! what it sees through de-duplication into the publisher.
//!
//! The task is strictly sequential: it reads the next line only after the previous event has been
//! handed to the outbox. That is the backpressure promise (a slow NATS slows the watch instead of
//! filling memory), and it makes checkpointing simple: before a watch is reopened, the outbox is
//! settled, so the version the watch resumes from is always one whose events are all published.
//! The same holds for the durable checkpoints ([`crate::state`]): when one is due, the task settles
//! the outbox while its next step waits, and snapshots its memory at that point.
//!
//! A message that makes an object known for the first time, or deletes it, waits until the
//! state's journal has recorded the object ([`crate::state::Journal`]), and later messages of the
//! same object wait behind it; every other message goes out meanwhile. The task goes on reading
//! while the next line is ready, and starts a journal write once it is not (or the batch is
//! full), one write at a time: what is recorded during a write makes the next one, so a busy
//! stream costs one journal write per round trip to JetStream, not one per event. The same
//! writes confirm the messages the outbox has settled ([`crate::delivery`]), so a crash repeats
//! at most what was in flight.

mod filtered;
pub(crate) mod list_slots;
mod listed;
mod logged;
pub(crate) mod machine;
pub(crate) mod metrics;
pub(crate) mod namespaces;
mod outlet;
mod received;
mod refused;
pub(crate) mod restart;
mod served;
mod start;
pub(crate) mod supervise;
mod timer;

use tokio_util::sync::CancellationToken;

use crate::config::InitialState;
use crate::dedupe::Dedupe;
use crate::delivery::{written, Sink};
use crate::event::ObjectEvent;
use crate::filter::Filter;
use crate::noise::NoiseControl;
use crate::scope::Scope;
use crate::state::{Checkpoints, TargetState};
use crate::telemetry::target::TargetGauges;
use machine::{Machine, Outcome, State};
use metrics::WatchMetrics;
use outlet::{Fit, Outlet};
use refused::Refusals;
use timer::LoopTimer;

pub(crate) use list_slots::ListSlots;
pub(crate) use machine::ListReason;
pub(crate) use namespaces::NamespaceWatcher;
pub(crate) use outlet::OutletParts;

/// What a watch's filter left of one event ([`filtered`]).
pub(super) enum Filtered {
    /// Goes on to de-duplication and publishing (an entering object's event as ADDED).
    Pass(ObjectEvent),
    /// Handled here; `true` if the memory changed.
    Handled(bool),
}

/// One watch target's task: a driver that steps the machine and hands each outcome, judged
/// against its memory of what was published, to its outlet.
pub(crate) struct WatchTask {
    machine: Machine,
    dedupe: Dedupe,
    /// Where each judged event becomes a message for the delivery (and the mirror).
    outlet: Outlet,
    /// Which MODIFIED events are news.
    noise: NoiseControl,
    initial_state: InitialState,
    metrics: WatchMetrics,
    /// The saved state, until it is loaded at the start of [`run`](Self::run).
    saved: Option<TargetState>,
    /// Whether a list has completed or state was loaded; until then `initial_state` applies.
    listed_once: bool,
    /// Objects loaded from saved state, until the resumed watch delivers something (the saved
    /// version was still available) or a list completes (the saved version was too old, or the
    /// start lists anyway: the mirror, a namespace scope); then the diff is reported.
    resuming: Option<usize>,
    /// What a list found, reported after a list that followed a load.
    diff: ListDiff,
    /// This target's share of the watch's gauges; outlives the task, so a supervisor can
    /// withdraw it when the task dies.
    gauges: TargetGauges,
    /// Which namespaces' objects are published.
    scope: Scope,
    /// `payload = "metadata"` and the server sent a full object: said once per task.
    metadata_fallback_logged: bool,
    /// Which objects are published, when the watch has a `filter` (docs/filters.md).
    filter: Option<Filter>,
    /// Since when the API server refuses this target's requests (403).
    refusals: Refusals,
}

/// Objects a list found new, changed and vanished.
#[derive(Clone, Copy, Default)]
pub(super) struct ListDiff {
    pub(super) added: usize,
    pub(super) modified: usize,
    pub(super) deleted: usize,
}

/// How waiting for one step ended.
// Lives for one turn of the loop on the stack; boxing the state would allocate every step.
#[allow(clippy::large_enum_variant)]
enum Step {
    Done(Outcome, State),
    ScopeChanged,
    Shutdown,
}

/// Everything a [`WatchTask`] is made of, each part built by the caller (`TaskFactory::build`).
pub(crate) struct WatchParts {
    pub(crate) machine: Machine,
    /// The outbox, the mirror and how messages are built.
    pub(crate) outlet: OutletParts,
    /// Which MODIFIED events are news.
    pub(crate) noise: NoiseControl,
    pub(crate) filter: Option<Filter>,
    pub(crate) initial_state: InitialState,
    pub(crate) metrics: WatchMetrics,
    /// The target's saved state, loaded when the task starts.
    pub(crate) saved: TargetState,
    pub(crate) gauges: TargetGauges,
    pub(crate) scope: Scope,
}

impl WatchTask {
    /// A mirrored watch lists at every start and at every move of its resource's version, so
    /// that the list repairs the bucket (docs/mirror.md).
    pub(crate) fn new(parts: WatchParts) -> WatchTask {
        let WatchParts {
            mut machine,
            outlet,
            noise,
            filter,
            initial_state,
            metrics,
            saved,
            gauges,
            scope,
        } = parts;
        if outlet.mirror.is_some() {
            machine.relist_on_move();
        }
        let namespace = machine.target().namespace.as_deref().unwrap_or("*");
        let outlet = Outlet::new(outlet, metrics.clone(), namespace.to_owned());
        WatchTask {
            machine,
            dedupe: Dedupe::new(),
            outlet,
            noise,
            initial_state,
            metrics,
            saved: Some(saved),
            listed_once: false,
            resuming: None,
            diff: ListDiff::default(),
            gauges,
            scope,
            metadata_fallback_logged: false,
            filter,
            refusals: Refusals::default(),
        }
    }

    /// Runs until `shutdown` is cancelled, then publishes what is in flight and returns.
    /// Cancellation is honoured between events, never in the middle of publishing one.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        if !self.scope.ready(&shutdown).await {
            return;
        }
        let Some((mut state, mut checkpoints)) = self.start(&shutdown).await else {
            return;
        };
        let mut timer = LoopTimer::default();
        let mut confirm_timer = LoopTimer::default();
        loop {
            if matches!(state, State::Connecting { .. }) {
                // The watch resumes from a version only once everything before it is published.
                self.outlet.delivery.settle().await;
            }
            // A busy stream always has its next line ready, so the timer below would never win:
            // a due checkpoint is taken here, between two events.
            if checkpoints
                .due()
                .is_some_and(|due| due <= tokio::time::Instant::now())
            {
                self.checkpoint(&mut checkpoints).await;
            }
            let stepped = {
                let step = self.machine.step(state);
                tokio::pin!(step);
                loop {
                    self.outlet.delivery.confirm_settled();
                    // What a shutdown now would abandon, with what the outbox reports.
                    self.gauges.set_held_back(self.outlet.delivery.held_back());
                    let due = checkpoints.due();
                    let idle = self.outlet.delivery.idle_state();
                    let confirm_due = idle.confirmations_due;
                    let (journal, sink) = self.outlet.delivery.idle_sides();
                    tokio::select! {
                        biased;
                        _ = shutdown.cancelled() => break Step::Shutdown,
                        // Before the next line: what waited for this record is due out.
                        () = written(journal), if idle.writing => {
                            self.outlet.delivery.release().await;
                        }
                        stepped = &mut step => break Step::Done(stepped.0, stepped.1),
                        // No line is ready: write what was recorded since the last write.
                        () = std::future::ready(()), if idle.recorded => {
                            self.outlet.delivery.begin_write().await;
                        }
                        // No line is ready: what the core client holds goes to the socket now,
                        // not at the next checkpoint, so a quiet watch holds no budget.
                        () = Sink::flush_idle(sink), if idle.unflushed => {}
                        () = self.scope.changed() => break Step::ScopeChanged,
                        // Confirmations alone, paced: the next turn begins their write.
                        () = confirm_timer.until(confirm_due), if confirm_due.is_some() => {}
                        () = timer.until(due) => {
                            // The step waits (a line not yet arrived): everything handled so far
                            // is a consistent point once published.
                            let settled = self.outlet.delivery.settle().await;
                            checkpoints.save(settled, &self.dedupe, self.outlet.delivery.journal());
                        }
                    }
                }
            };
            match stepped {
                Step::Done(outcome, mut next) => {
                    // The line's bytes stay counted until its message is (or it is dropped).
                    self.outlet.delivery.line_read(next.take_line_charge());
                    state = next;
                    self.handle(outcome, &mut checkpoints).await;
                    self.outlet.delivery.line_done(checkpoints.position());
                }
                Step::ScopeChanged => state = self.scope_changed(),
                Step::Shutdown => break,
            }
        }
        self.checkpoint(&mut checkpoints).await;
        checkpoints.finish().await;
        if let Some(mirror) = self.outlet.delivery.take_mirror() {
            mirror.finish().await;
        }
        tracing::debug!(watch = %self.metrics.watch, namespace = self.namespace(), "watch stopped");
    }

    /// Publishes everything handled so far and takes a checkpoint of it.
    async fn checkpoint(&mut self, checkpoints: &mut Checkpoints) {
        let settled = self.outlet.delivery.settle().await;
        checkpoints.save(settled, &self.dedupe, self.outlet.delivery.journal());
    }

    /// Judges one outcome of the machine and hands what is published to the outlet.
    async fn handle(&mut self, outcome: Outcome, checkpoints: &mut Checkpoints) {
        match outcome {
            Outcome::ListPage {
                started,
                size_hint,
                items,
                complete,
            } => {
                self.refusals.served();
                if let Some(reason) = started {
                    checkpoints.list_started();
                    self.list_started(reason, size_hint);
                    if let Some(mirror) = self.outlet.delivery.mirror() {
                        mirror.repair_begin().await;
                    }
                }
                for mut item in items {
                    if !self.in_scope(&mut item) {
                        continue;
                    }
                    if self.listed(item).await {
                        checkpoints.objects_changed();
                    }
                }
                if let Some(rv) = complete {
                    self.list_complete(&rv).await;
                    checkpoints.objects_changed();
                    checkpoints.advanced(&rv);
                }
            }
            Outcome::Event(event) => {
                self.resuming = None;
                checkpoints.advanced(&event.meta.resource_version);
                if self.received(event, Fit::Whole).await {
                    checkpoints.objects_changed();
                }
            }
            Outcome::Oversized { event, line_bytes } => {
                self.resuming = None;
                checkpoints.advanced(&event.meta.resource_version);
                if self.received_oversized(event, line_bytes).await {
                    checkpoints.objects_changed();
                }
            }
            Outcome::Bookmark(rv) => {
                self.resuming = None;
                self.metrics.touch();
                checkpoints.advanced(&rv);
                tracing::trace!(watch = %self.metrics.watch, resource_version = %rv, "bookmark");
            }
            Outcome::WatchOpened(rv) => {
                self.refusals.served();
                tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %rv, "watching from resourceVersion");
                if self.listed_once {
                    self.gauges.set_synced(true);
                }
            }
            Outcome::Restart(restart) => self.restarted(restart),
            Outcome::Unserved(unserved) => self.unserved(unserved, checkpoints).await,
            Outcome::VersionMoved(moved) => self.version_moved(moved).await,
            Outcome::Idle => {}
        }
    }

    /// The namespace selector's matching set changed: relist under the new set, so the memory's
    /// difference to it is published ([`crate::scope`]).
    fn scope_changed(&mut self) -> State {
        let (gained, lost) = self.scope.refresh();
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), namespaces_gained = gained, namespaces_lost = lost, "namespace scope changed: relisting");
        self.machine.list(ListReason::NamespaceScope)
    }

    fn report_tracked(&mut self) {
        self.gauges.set_tracked(self.dedupe.len());
    }

    fn namespace(&self) -> &str {
        self.machine.target().namespace.as_deref().unwrap_or("*")
    }
}
