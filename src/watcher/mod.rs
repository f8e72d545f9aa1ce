//! The watch stage: one task per watch target that runs the list+watch state machine and drives
//! what it sees through de-duplication into the publisher.
//!
//! The task is strictly sequential: it reads the next line only after the previous event has been
//! handed to the outbox. That is the backpressure promise (a slow NATS slows the watch instead of
//! filling memory), and it makes checkpointing simple: before a watch is reopened, the outbox is
//! settled, so the version the watch resumes from is always one whose events are all published.

pub mod machine;
pub mod metrics;
pub mod supervise;

use tokio_util::sync::CancellationToken;

use crate::config::InitialState;
use crate::dedupe::{Dedupe, Listed, Vanished, Verdict};
use crate::event::{EventType, ObjectEvent};
use crate::kube::client::Verb;
use crate::publish::message::BuildError;
use crate::publish::{MessageBuilder, OutMessage, Outbox};
use crate::rbac;
use crate::telemetry::target::TargetGauges;
use machine::{Machine, Outcome, Restart, RestartReason, State};
use metrics::WatchMetrics;

pub use machine::{ListReason, Target};

/// One watch target's task: the machine, its memory of what was published, and its outbox.
pub struct WatchTask {
    machine: Machine,
    dedupe: Dedupe,
    outbox: Outbox,
    messages: MessageBuilder,
    /// The event types published; the rest are counted as filtered.
    events: Vec<EventType>,
    initial_state: InitialState,
    metrics: WatchMetrics,
    /// Whether a list has completed; until then `initial_state` applies.
    listed_once: bool,
    /// This target's share of the watch's gauges; outlives the task, so a supervisor can
    /// withdraw it when the task dies.
    gauges: TargetGauges,
}

impl WatchTask {
    pub fn new(
        machine: Machine,
        outbox: Outbox,
        messages: MessageBuilder,
        events: Vec<EventType>,
        initial_state: InitialState,
        metrics: WatchMetrics,
        gauges: TargetGauges,
    ) -> WatchTask {
        WatchTask {
            machine,
            dedupe: Dedupe::new(),
            outbox,
            messages,
            events,
            initial_state,
            metrics,
            listed_once: false,
            gauges,
        }
    }

    /// Runs until `shutdown` is cancelled, then publishes what is in flight and returns.
    /// Cancellation is honoured between events, never in the middle of publishing one.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut state = self.machine.start();
        loop {
            if matches!(state, State::Connecting { .. }) {
                // Checkpoint: the watch resumes from a version only once everything before it is published.
                self.outbox.settle().await;
            }
            let (outcome, next) = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                stepped = self.machine.step(state) => stepped,
            };
            state = next;
            self.handle(outcome).await;
        }
        self.outbox.settle().await;
        tracing::debug!(watch = %self.metrics.watch, namespace = self.namespace(), "watch stopped");
    }

    async fn handle(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::ListPage {
                started,
                items,
                complete,
            } => {
                if let Some(reason) = started {
                    self.list_started(reason);
                }
                for item in items {
                    self.listed(item).await;
                }
                if let Some(rv) = complete {
                    self.list_complete(rv).await;
                }
            }
            Outcome::Event(event) => self.received(event).await,
            Outcome::Bookmark(rv) => {
                self.metrics.touch();
                tracing::trace!(watch = %self.metrics.watch, resource_version = %rv, "bookmark");
            }
            Outcome::WatchOpened(rv) => {
                tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), resource_version = %rv, "watching from resourceVersion");
                if self.listed_once {
                    self.gauges.set_synced(true);
                }
            }
            Outcome::Restart(restart) => self.restarted(restart),
            Outcome::Idle => {}
        }
    }

    fn list_started(&mut self, reason: ListReason) {
        self.dedupe.begin_list();
        self.metrics.relist(reason.as_str());
        self.gauges.set_synced(false);
        tracing::info!(watch = %self.metrics.watch, namespace = self.namespace(), reason = reason.as_str(), "listing");
    }

    async fn listed(&mut self, mut item: ObjectEvent) {
        // Per-name order: a name deleted and recreated during a gap is DELETED (old uid) first.
        if let Some(gone) = self.dedupe.superseded(&item.meta) {
            self.publish_vanished(gone).await;
        }
        match self.dedupe.listed(&item.meta) {
            Listed::New if !self.listed_once && self.initial_state == InitialState::Skip => {}
            Listed::New => self.publish(item, true).await,
            Listed::Changed => {
                item.event_type = EventType::Modified;
                self.publish(item, true).await;
            }
            Listed::Unchanged => {}
            Listed::Stale => self.metrics.dropped_stale.inc(),
        }
        self.report_tracked();
    }

    async fn list_complete(&mut self, rv: crate::event::ResourceVersion) {
        let vanished = self.dedupe.end_list();
        for gone in vanished {
            self.publish_vanished(gone).await;
        }
        self.report_tracked();
        self.metrics.touch();
        self.listed_once = true;
        self.gauges.set_synced(true);
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
        let Some(limit) = self.outbox.max_payload() else {
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

    /// Announces an object that a list showed to be gone: a synthesized DELETED.
    async fn publish_vanished(&mut self, gone: Vanished) {
        let object = self.messages.vanished_object(&gone.meta);
        let event = ObjectEvent {
            event_type: EventType::Deleted,
            meta: gone.meta,
            object,
            watch_line: None,
        };
        self.publish(event, true).await;
    }

    async fn received(&mut self, event: ObjectEvent) {
        self.metrics.received(event.event_type);
        self.metrics.touch();
        match self.dedupe.observe(&event.meta, event.event_type) {
            Verdict::Publish => self.publish(event, false).await,
            Verdict::Duplicate => self.metrics.dropped_duplicate.inc(),
            Verdict::Stale => self.metrics.dropped_stale.inc(),
        }
        self.report_tracked();
    }

    /// Publishes one event unless its type is filtered out; `synthesized` marks list-derived events.
    async fn publish(&mut self, event: ObjectEvent, synthesized: bool) {
        if !self.events.contains(&event.event_type) {
            self.metrics.dropped_filtered.inc();
            return;
        }
        if synthesized {
            self.metrics.synthesized(event.event_type);
        }
        match self.fitted_message(&event, synthesized) {
            Ok(message) => self.outbox.publish(message).await,
            Err(e) => {
                self.metrics.dropped_subject_too_long.inc();
                tracing::error!(watch = %self.metrics.watch, namespace = self.namespace(), name = ?event.meta.name, uid = ?event.meta.uid, error = %e, "event not published: its subject is longer than NATS accepts (shorten the subject template or the prefix)");
            }
        }
    }

    fn restarted(&mut self, restart: Restart) {
        let Restart {
            reason,
            verb,
            error,
            retry_in,
        } = restart;
        self.metrics.restart(reason.as_str());
        if reason == RestartReason::Forbidden {
            self.gauges.set_synced(false);
        }
        let watch = &*self.metrics.watch;
        let namespace = self.namespace();
        let error = error.as_ref().map(ToString::to_string).unwrap_or_default();
        let list_failed = verb == Some(Verb::List);
        let verb = verb.map_or("", Verb::as_str);
        match reason {
            RestartReason::StreamEnded => {
                tracing::debug!(watch, namespace, "watch ended by the server; resuming")
            }
            RestartReason::Forbidden => {
                let rule = rbac::rule_to_add(
                    &self.machine.target().resource,
                    self.machine.target().namespace.as_deref(),
                );
                tracing::error!(watch, namespace, verb, resource = %self.machine.target().resource.plural, retry_in = ?retry_in, error, rule = %rule, "RBAC refused the request; add the rule");
            }
            RestartReason::Unauthorized => {
                tracing::warn!(watch, namespace, verb, retry_in = ?retry_in, "the API server rejected the token (401); re-reading the token file and retrying");
            }
            // A list page that does not parse is retried as a list, not "resumed": say so.
            RestartReason::DecodeError if list_failed => {
                self.metrics.decode_errors.inc();
                tracing::warn!(watch, namespace, verb, retry_in = ?retry_in, error, "malformed list response; retrying the list");
            }
            RestartReason::DecodeError => {
                self.metrics.decode_errors.inc();
                tracing::warn!(watch, namespace, retry_in = ?retry_in, error, "malformed watch data; resuming from the last good resourceVersion");
            }
            RestartReason::Expired | RestartReason::TooLargeResourceVersion => {
                tracing::info!(
                    watch,
                    namespace,
                    reason = reason.as_str(),
                    error,
                    "relisting"
                );
            }
            _ => {
                tracing::info!(watch, namespace, verb, reason = reason.as_str(), retry_in = ?retry_in, error, "backing off")
            }
        }
    }

    fn report_tracked(&mut self) {
        self.gauges.set_tracked(self.dedupe.len());
    }

    fn namespace(&self) -> &str {
        self.machine.target().namespace.as_deref().unwrap_or("*")
    }
}
