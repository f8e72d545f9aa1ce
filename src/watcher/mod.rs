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
mod logged;
pub(crate) mod machine;
pub(crate) mod metrics;
pub(crate) mod namespaces;
mod refused;
pub(crate) mod restart;
mod served;
pub(crate) mod supervise;

use tokio_util::sync::CancellationToken;

use crate::config::{InitialState, PayloadMode};
use crate::dedupe::{Dedupe, Listed, Vanished, Verdict};
use crate::delivery::{written, Delivery, Sink};
use crate::event::{EventType, ObjectEvent, ResourceVersion};
use crate::filter::Filter;
use crate::kube::metadata;
use crate::leader::TermClock;
use crate::mirror::Mirror;
use crate::noise::NoiseControl;
use crate::publish::message::BuildError;
use crate::publish::{MessageBuilder, OutMessage, Outbox};
use crate::scope::Scope;
use crate::state::{Checkpoints, Journal, Loaded, Start, TargetState};
use crate::telemetry::target::TargetGauges;
use machine::{Machine, Outcome, State};
use metrics::WatchMetrics;
use refused::Refusals;

pub(crate) use list_slots::ListSlots;
pub(crate) use machine::ListReason;
pub(crate) use namespaces::NamespaceWatcher;

/// What a watch's filter left of one event ([`filtered`]).
pub(super) enum Filtered {
    /// Goes on to de-duplication and publishing (an entering object's event as ADDED).
    Pass(ObjectEvent),
    /// Handled here; `true` if the memory changed.
    Handled(bool),
}

/// One watch target's task: the machine, its memory of what was published, and its outbox.
pub(crate) struct WatchTask {
    machine: Machine,
    dedupe: Dedupe,
    /// Its messages' way to NATS, ordered with its journal's records.
    delivery: Delivery<Outbox, Journal>,
    messages: MessageBuilder,
    /// The event types published; the rest are counted as filtered.
    events: Vec<EventType>,
    /// Which MODIFIED events are news, and what is stripped from what is published.
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
    /// Objects a list found new, changed and vanished: reported after a list that followed a load.
    diff: [usize; 3],
    /// This target's share of the watch's gauges; outlives the task, so a supervisor can
    /// withdraw it when the task dies.
    gauges: TargetGauges,
    /// Which namespaces' objects are published.
    scope: Scope,
    /// `payload = "metadata"` and the server sent a full object: said once per task.
    metadata_fallback_logged: bool,
    /// The watch's side of the mirror bucket, when the watch is mirrored (docs/mirror.md).
    mirror: Option<Mirror>,
    /// Which objects are published, when the watch has a `filter` (docs/filters.md).
    filter: Option<Filter>,
    /// The replica's term: nothing is published once it is over by the clock
    /// ([`crate::leader::clock`]).
    term: TermClock,
    /// Since when the API server refuses this target's requests (403).
    refusals: Refusals,
}

/// How waiting for one step ended.
// Lives for one turn of the loop on the stack; boxing the state would allocate every step.
#[allow(clippy::large_enum_variant)]
enum Step {
    Done(Outcome, State),
    ScopeChanged,
    Shutdown,
}

/// The parts a [`WatchTask`] is made of, each built by the caller (`TaskFactory::build`).
pub(crate) struct WatchParts {
    pub(crate) machine: Machine,
    pub(crate) outbox: Outbox,
    pub(crate) messages: MessageBuilder,
    /// The event types published; the rest are counted as filtered.
    pub(crate) events: Vec<EventType>,
    pub(crate) noise: NoiseControl,
    pub(crate) initial_state: InitialState,
    pub(crate) metrics: WatchMetrics,
    /// The target's saved state, loaded when the task starts.
    pub(crate) saved: TargetState,
    pub(crate) gauges: TargetGauges,
    pub(crate) scope: Scope,
}

impl WatchTask {
    pub(crate) fn new(parts: WatchParts) -> WatchTask {
        let WatchParts {
            machine,
            outbox,
            messages,
            events,
            noise,
            initial_state,
            metrics,
            saved,
            gauges,
            scope,
        } = parts;
        WatchTask {
            machine,
            dedupe: Dedupe::new(),
            delivery: Delivery::new(outbox),
            messages,
            events,
            noise,
            initial_state,
            metrics,
            saved: Some(saved),
            listed_once: false,
            resuming: None,
            diff: [0; 3],
            gauges,
            scope,
            metadata_fallback_logged: false,
            mirror: None,
            filter: None,
            term: TermClock::unbounded(),
            refusals: Refusals::default(),
        }
    }

    /// Publishes only while `term` is in force (leader election).
    pub(crate) fn with_term(mut self, term: TermClock) -> WatchTask {
        self.term = term;
        self
    }

    /// Publishes only the objects `filter` matches (docs/filters.md).
    pub(crate) fn with_filter(mut self, filter: Option<Filter>) -> WatchTask {
        self.filter = filter;
        self
    }

    /// Keeps the target's objects in the mirror bucket: every start then lists, so that the
    /// list repairs the bucket.
    pub(crate) fn with_mirror(mut self, mirror: Option<Mirror>) -> WatchTask {
        if mirror.is_some() {
            self.machine.relist_on_move();
        }
        self.mirror = mirror;
        self
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
        let mut timer = CheckpointTimer::default();
        let mut confirm_timer = CheckpointTimer::default();
        loop {
            if matches!(state, State::Connecting { .. }) {
                // The watch resumes from a version only once everything before it is published.
                self.delivery.settle().await;
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
                    self.delivery.confirm_settled();
                    // What a shutdown now would abandon, with what the outbox reports.
                    self.gauges.set_held_back(self.delivery.held_back());
                    let due = checkpoints.due();
                    let idle = self.delivery.idle_state();
                    let confirm_due = idle.confirmations_due;
                    let (journal, sink) = self.delivery.idle_sides();
                    tokio::select! {
                        biased;
                        _ = shutdown.cancelled() => break Step::Shutdown,
                        // Before the next line: what waited for this record is due out.
                        () = written(journal), if idle.writing => {
                            self.delivery.release().await;
                        }
                        stepped = &mut step => break Step::Done(stepped.0, stepped.1),
                        // No line is ready: write what was recorded since the last write.
                        () = std::future::ready(()), if idle.recorded => {
                            self.delivery.begin_write().await;
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
                            let settled = self.delivery.settle().await;
                            checkpoints.save(settled, &self.dedupe, self.delivery.journal());
                        }
                    }
                }
            };
            match stepped {
                Step::Done(outcome, mut next) => {
                    // The line's bytes stay counted until its message is (or it is dropped).
                    self.delivery.line_read(next.take_line_charge());
                    state = next;
                    self.handle(outcome, &mut checkpoints).await;
                    self.delivery.line_done(checkpoints.position());
                }
                Step::ScopeChanged => state = self.scope_changed(),
                Step::Shutdown => break,
            }
        }
        self.checkpoint(&mut checkpoints).await;
        checkpoints.finish().await;
        if let Some(mirror) = self.mirror.take() {
            mirror.finish().await;
        }
        tracing::debug!(watch = %self.metrics.watch, namespace = self.namespace(), "watch stopped");
    }

    /// Publishes everything handled so far and takes a checkpoint of it.
    async fn checkpoint(&mut self, checkpoints: &mut Checkpoints) {
        let settled = self.delivery.settle().await;
        checkpoints.save(settled, &self.dedupe, self.delivery.journal());
    }

    /// Loads the saved state: with it the watch resumes from the saved version, without it it
    /// lists. `None` if shutdown came first.
    async fn start(&mut self, shutdown: &CancellationToken) -> Option<(State, Checkpoints)> {
        let saved = self.saved.take()?;
        let Loaded {
            start,
            mut checkpoints,
            journal,
        } = saved.load(shutdown).await?;
        self.delivery.set_journal(journal);
        match start {
            Start::Saved {
                dedupe,
                checkpointed: false,
                ..
            } if self.initial_state == InitialState::Skip => {
                // A journal alone (a crash before the first checkpoint) names the objects
                // published, not those the first list tracked silently: resumed, a 410 relist
                // would announce those as ADDED. So the start lists as a first start does,
                // diffing the journaled objects and tracking the rest silently.
                self.dedupe = *dedupe;
                self.resuming = Some(self.dedupe.len());
                self.report_tracked();
                tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), objects = self.dedupe.len(), "loaded a journal without a checkpoint: listing as at a first start (initial_state = \"skip\")");
                Some((self.machine.start(), checkpoints))
            }
            Start::Saved {
                dedupe, version, ..
            } if self.mirror.is_some() => {
                self.dedupe = *dedupe;
                self.listed_once = true;
                self.resuming = Some(self.dedupe.len());
                self.report_tracked();
                tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %version, objects = self.dedupe.len(), "loaded saved state: relisting to diff it and to repair the mirror");
                Some((self.machine.list(ListReason::Mirror), checkpoints))
            }
            Start::Saved {
                dedupe, version, ..
            } if self.scope.is_limited() => {
                self.dedupe = *dedupe;
                self.listed_once = true;
                self.resuming = Some(self.dedupe.len());
                self.report_tracked();
                tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %version, objects = self.dedupe.len(), "loaded saved state: relisting to diff it under the current namespace scope");
                Some((self.machine.list(ListReason::NamespaceScope), checkpoints))
            }
            Start::Saved {
                dedupe, version, ..
            } => {
                self.dedupe = *dedupe;
                self.listed_once = true;
                self.resuming = Some(self.dedupe.len());
                self.report_tracked();
                tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %version, objects = self.dedupe.len(), "loaded saved state: resuming the watch from the saved resourceVersion, without a list");
                checkpoints.advanced(&version);
                Some((self.machine.resume(version), checkpoints))
            }
            Start::Journaled { dedupe } => {
                // Not a first start for the journaled objects, which are diffed; the rest are
                // listed as on a first start (`initial_state` applies).
                self.dedupe = *dedupe;
                self.resuming = Some(self.dedupe.len());
                self.report_tracked();
                Some((self.machine.start(), checkpoints))
            }
            Start::Fresh => Some((self.machine.start(), checkpoints)),
        }
    }

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
                    if let Some(mirror) = &self.mirror {
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
                if self.received(event).await {
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

    fn list_started(&mut self, reason: ListReason, size_hint: Option<u64>) {
        self.diff = [0; 3];
        self.dedupe.begin_list();
        if let Some(items) = size_hint {
            self.dedupe.size_for(items);
        }
        self.metrics.relist(reason.as_str());
        self.gauges.set_synced(false);
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), reason = reason.as_str(), "listing");
    }

    /// Diffs one listed object against the memory; `true` if the memory changed.
    async fn listed(&mut self, item: ObjectEvent) -> bool {
        let mut item = match self.filter.is_some() {
            true => match self.filter_listed(item).await {
                Filtered::Pass(item) => item,
                Filtered::Handled(changed) => return changed,
            },
            false => item,
        };
        // Per-name order: a name deleted and recreated during a gap is DELETED (old uid) first.
        // (The new uid is then `Listed::New`, so the memory change is reported below.)
        if let Some(gone) = self.dedupe.superseded(&item.meta) {
            self.diff[2] += 1;
            // The old uid was gone before the new one was made.
            let by = item.meta.resource_version.clone();
            self.publish_vanished(gone, &by).await;
        }
        let mark = self.noise.mark(&item);
        let changed = match self.dedupe.listed(&item.meta, mark) {
            Listed::New if !self.listed_once && self.initial_state == InitialState::Skip => {
                self.mirror_only(item, true, Fit::Whole).await;
                true
            }
            Listed::New => {
                self.diff[0] += 1;
                let recorded = self.delivery.record(&item.meta, false);
                self.publish_as(item, true, Fit::Whole, recorded).await;
                true
            }
            Listed::Unconfirmed => {
                self.diff[0] += 1;
                self.publish(item, true).await;
                true
            }
            Listed::Changed => {
                self.diff[1] += 1;
                item.event_type = EventType::Modified;
                self.publish(item, true).await;
                true
            }
            // The mirror is written for every listed object: the writer skips the keys that
            // hold it already (or a newer version), and deletes the keys no listed object has.
            Listed::Unchanged => {
                self.mirror_only(item, true, Fit::Whole).await;
                false
            }
            Listed::SameMark => {
                self.metrics.dropped_unchanged.inc();
                self.mirror_only(item, true, Fit::Whole).await;
                true
            }
            Listed::Stale => {
                self.metrics.dropped_stale.inc();
                self.mirror_only(item, true, Fit::Whole).await;
                false
            }
        };
        self.report_tracked();
        changed
    }

    async fn list_complete(&mut self, rv: &crate::event::ResourceVersion) {
        let vanished = self.dedupe.end_list();
        self.diff[2] += vanished.len();
        for gone in vanished {
            self.publish_vanished(gone, rv).await;
        }
        if let Some(mirror) = &self.mirror {
            mirror.repair_end(rv.clone()).await;
        }
        self.report_tracked();
        self.metrics.touch();
        self.listed_once = true;
        self.gauges.set_synced(true);
        if let Some(saved) = self.resuming.take() {
            let [added, modified, deleted] = self.diff;
            tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %rv, saved_objects = saved, added, modified, deleted, "relisted and diffed against the saved objects");
        }
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %rv, objects = self.dedupe.len(), "synced");
    }

    /// The message for `event`, cut to its metadata (`Kube-Payload: truncated`) when it is larger
    /// than the NATS server accepts: subscribers still learn that the object changed.
    fn fitted_message(
        &self,
        event: &ObjectEvent,
        synthesized: bool,
    ) -> Result<OutMessage, BuildError> {
        let message = self.messages.build(event, synthesized)?;
        let Some(limit) = self.delivery.sink().max_payload() else {
            return Ok(message);
        };
        let bytes = message.wire_len();
        if bytes <= limit {
            return Ok(message);
        }
        self.metrics.truncated_max_payload.inc();
        tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), name = ?event.meta.name, bytes, max_payload = limit, "object larger than the NATS server's max_payload; publishing its metadata only (Kube-Payload: truncated)");
        self.messages.truncated(event, synthesized)
    }

    /// Announces an object that a list showed to be gone by `by` (the list's resourceVersion,
    /// or the version of the object that took its name): a synthesized DELETED at that version.
    /// Not at the last version the memory knows: after a crash the memory may not know the last
    /// messages published (those not yet confirmed), and a deletion older than them would go
    /// back behind what subscribers saw. The deletion is journaled, as a received one is, so
    /// one announced again after a crash is the same message (docs/durable-state.md).
    async fn publish_vanished(&mut self, mut gone: Vanished, by: &ResourceVersion) {
        if !gone.announced {
            gone.meta.resource_version = by.clone();
        }
        let object = self.messages.vanished_object(&gone.meta);
        let recorded = self.delivery.record(&gone.meta, true);
        let event = ObjectEvent {
            event_type: EventType::Deleted,
            meta: gone.meta,
            object,
            watch_line: None,
        };
        self.publish_as(event, true, Fit::Whole, recorded).await;
    }

    /// Judges and publishes one received event; `true` if the memory changed.
    async fn received(&mut self, event: ObjectEvent) -> bool {
        self.received_as(event, Fit::Whole).await
    }

    /// A change that arrived in a watch line over `max_line_bytes`, of which only the metadata
    /// is known: published as such (`Kube-Payload: truncated`), so subscribers learn of it.
    async fn received_oversized(&mut self, event: ObjectEvent, line_bytes: usize) -> bool {
        self.metrics.truncated_max_line.inc();
        tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), name = ?event.meta.name, uid = ?event.meta.uid, resource_version = %event.meta.resource_version, line_bytes, "watch line over kubernetes.max_line_bytes; publishing the object's metadata only (Kube-Payload: truncated)");
        self.received_as(event, Fit::MetadataOnly).await
    }

    async fn received_as(&mut self, mut event: ObjectEvent, fit: Fit) -> bool {
        self.metrics.received(event.event_type);
        self.metrics.touch();
        if !self.in_scope(&mut event) {
            return false;
        }
        // Unfiltered watches never read their objects (docs/filters.md, "What it costs").
        let event = match self.filter.is_some() {
            true => match self.filter_received(event, fit).await {
                Filtered::Pass(event) => event,
                Filtered::Handled(changed) => return changed,
            },
            false => event,
        };
        // The journal records an object's first message, so its deletion is announced even
        // after a crash; and a deletion, so that one announced again after a crash carries the
        // same version (and `Nats-Msg-Id`).
        let mark = match event.event_type {
            EventType::Deleted => 0,
            EventType::Added | EventType::Modified => self.noise.mark(&event),
        };
        let (verdict, tracked) = self
            .dedupe
            .observe_tracked(&event.meta, event.event_type, mark);
        let journaled = self.delivery.journal().is_some()
            && (event.event_type == EventType::Deleted) == tracked;
        let changed = match verdict {
            Verdict::Publish => {
                let recorded = if journaled {
                    let deleted = event.event_type == EventType::Deleted;
                    self.delivery.record(&event.meta, deleted)
                } else {
                    None
                };
                self.publish_as(event, false, fit, recorded).await;
                true
            }
            Verdict::Unchanged => {
                self.metrics.dropped_unchanged.inc();
                self.mirror_only(event, false, fit).await;
                true
            }
            Verdict::Duplicate => {
                self.metrics.dropped_duplicate.inc();
                false
            }
            Verdict::Stale => {
                self.metrics.dropped_stale.inc();
                false
            }
        };
        self.report_tracked();
        changed
    }

    /// Publishes one event unless its type is filtered out; `synthesized` marks list-derived events.
    async fn publish(&mut self, event: ObjectEvent, synthesized: bool) {
        self.publish_as(event, synthesized, Fit::Whole, None).await;
    }

    /// `recorded`: the journal position of the record the message must wait for (its object was
    /// just recorded).
    async fn publish_as(
        &mut self,
        event: ObjectEvent,
        synthesized: bool,
        fit: Fit,
        recorded: Option<u64>,
    ) {
        if !self.events.contains(&event.event_type) {
            self.metrics.dropped_filtered.inc();
            self.mirror_only(event, synthesized, fit).await;
            self.delivery.flush_if_full().await;
            return;
        }
        if synthesized {
            self.metrics.synthesized(event.event_type);
        }
        let confirm = self.delivery.confirmation(&event.meta, event.event_type);
        self.publish_confirmed(event, synthesized, fit, recorded, confirm)
            .await;
    }

    /// Publishes `event` (its type is one the watch publishes); `confirm`: what the journal
    /// confirms once the message is settled (`None`: nothing).
    async fn publish_confirmed(
        &mut self,
        event: ObjectEvent,
        synthesized: bool,
        fit: Fit,
        recorded: Option<u64>,
        confirm: Option<crate::delivery::Confirm>,
    ) {
        let key = self.mirror_key(&event);
        let message = self.message(event, synthesized, fit);
        self.in_term().await;
        if let Some(mut message) = message {
            let object = std::mem::take(&mut message.object);
            self.mirror(key, &message, object).await;
            self.delivery.submit(message, recorded, confirm).await;
        }
    }

    /// Returns at once while the replica's term is in force; past its renew deadline (the
    /// elector's timer has not run yet: the process was paused), waits until the task is
    /// stopped, so that nothing goes out beside the next holder's messages.
    async fn in_term(&mut self) {
        self.term.hold(&self.metrics.watch).await;
    }

    /// The object's message, built as published, for the mirror alone: its event is not
    /// published (filtered, or no news), but the bucket holds every object the watch sees.
    async fn mirror_only(&mut self, event: ObjectEvent, synthesized: bool, fit: Fit) {
        let Some(key) = self.mirror_key(&event) else {
            return;
        };
        self.in_term().await;
        if let Some(mut message) = self.message(event, synthesized, fit) {
            let object = std::mem::take(&mut message.object);
            self.mirror(Some(key), &message, object).await;
        }
    }

    /// The subject of the object's mirror key and its version, when the watch is mirrored.
    fn mirror_key(&self, event: &ObjectEvent) -> Option<(String, ResourceVersion)> {
        let (mirror, meta) = (self.mirror.as_ref()?, &event.meta);
        Some((mirror.subject(meta), meta.resource_version.clone()))
    }

    /// Hands the object of `message` to the mirror: a put, or for a deletion a delete. The
    /// value shares the message's bytes until the bucket acknowledges it (docs/mirror.md, "Cost").
    async fn mirror(
        &mut self,
        key: Option<(String, ResourceVersion)>,
        message: &OutMessage,
        object: bytes::Bytes,
    ) {
        let (Some(mirror), Some((key, version))) = (&self.mirror, key) else {
            return;
        };
        match message.event_type {
            EventType::Deleted => {
                mirror
                    .delete(key, version, Some(message.headers.clone()))
                    .await
            }
            EventType::Added | EventType::Modified => {
                mirror
                    .put(key, version, message.headers.clone(), object)
                    .await
            }
        }
    }

    /// The message of one event: stripped as configured, cut to its metadata where it does not
    /// fit; `None` (logged and counted) when it cannot be built.
    fn message(&mut self, event: ObjectEvent, synthesized: bool, fit: Fit) -> Option<OutMessage> {
        let (event, fit) = match self.noise.stripped(&event.object) {
            Ok(None) => (event, fit),
            Ok(Some(object)) => {
                let stripped = ObjectEvent {
                    object,
                    watch_line: None,
                    ..event
                };
                (stripped, fit)
            }
            Err(e) => {
                // Never the unstripped object: a stripped path may hold what must not leave.
                tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), name = ?event.meta.name, error = %e, "could not strip the object; publishing its metadata only");
                (event, Fit::MetadataOnly)
            }
        };
        let message = match fit {
            Fit::Whole => self.fitted_message(&event, synthesized),
            Fit::MetadataOnly => self.messages.truncated(&event, synthesized),
        };
        match message {
            Ok(message) => Some(message),
            Err(e) => {
                self.metrics.dropped_subject_too_long.inc();
                tracing::error!(watch = %self.metrics.watch, namespace = self.namespace(), name = ?event.meta.name, uid = ?event.meta.uid, error = %e, "event not published: its subject is longer than NATS accepts (shorten the subject template or the prefix)");
                None
            }
        }
    }

    /// The namespace selector's matching set changed: relist under the new set, so the memory's
    /// difference to it is published ([`crate::scope`]).
    fn scope_changed(&mut self) -> State {
        let (gained, lost) = self.scope.refresh();
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), namespaces_gained = gained, namespaces_lost = lost, "namespace scope changed: relisting");
        self.machine.list(ListReason::NamespaceScope)
    }

    /// Whether `event` is inside the namespace scope (counted as dropped if not); with
    /// `payload = "metadata"`, also cuts a full object the server sent to its metadata.
    fn in_scope(&mut self, event: &mut ObjectEvent) -> bool {
        if !self.scope.admits(event.meta.namespace.as_deref()) {
            self.metrics.dropped_namespace.inc();
            return false;
        }
        if self.messages.payload == PayloadMode::Metadata && !metadata::is_partial(&event.object) {
            self.metadata_fallback(event);
        }
        true
    }

    /// The server sent a full object to a metadata-only watch (it cannot convert this resource):
    /// kube2nats cuts it, so subscribers never see more than they asked for.
    fn metadata_fallback(&mut self, event: &mut ObjectEvent) {
        self.metrics.truncated_metadata_fallback.inc();
        if !self.metadata_fallback_logged {
            self.metadata_fallback_logged = true;
            tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), "the API server sends full objects, not PartialObjectMetadata, for this resource: kube2nats cuts them to their metadata (payloads unchanged, no bandwidth saved)");
        }
        match metadata::to_metadata(&event.object) {
            Ok(cut) => event.object = cut,
            // The object was read for its metadata already, so this cannot happen; should it,
            // the metadata kube2nats read is still all a subscriber gets.
            Err(_) => event.object = self.messages.vanished_object(&event.meta),
        }
        event.watch_line = None;
    }

    fn report_tracked(&mut self) {
        self.gauges.set_tracked(self.dedupe.len());
    }

    fn namespace(&self) -> &str {
        self.machine.target().namespace.as_deref().unwrap_or("*")
    }
}

/// How much of an object a message carries.
#[derive(Clone, Copy)]
enum Fit {
    /// All of it, unless it is over the NATS server's `max_payload`.
    Whole,
    /// Its metadata only: the rest never arrived whole.
    MetadataOnly,
}

/// A timer of the watch loop (the checkpoint's; the paced confirmations'), kept from one turn to
/// the next. A busy stream turns
/// the loop once per event; a timer made each turn is registered with the runtime's timer wheel
/// and removed again every event, which costs more than everything else durable state adds.
#[derive(Default)]
struct CheckpointTimer {
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl CheckpointTimer {
    /// Sleeps until `at`, or forever when there is nothing to wait for. The timer is moved only
    /// when `at` changes (once per checkpoint).
    async fn until(&mut self, at: Option<tokio::time::Instant>) {
        let Some(at) = at else {
            return std::future::pending().await;
        };
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        sleep.as_mut().await;
    }
}
