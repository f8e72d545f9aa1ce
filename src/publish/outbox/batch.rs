//! What the two outboxes share: the message a publish has taken and not yet placed, the batch of
//! messages held back to be handed to the client together, the count of messages published, the
//! byte budget, and the metrics and gauges they report to.

use std::collections::VecDeque;

use tokio::time::Instant;

use crate::budget::{Budget, Charge};
use crate::leader::TermClock;
use crate::publish::message::OutMessage;
use crate::publish::metrics::PublishMetrics;
use crate::telemetry::target::TargetGauges;

/// The most bytes (payloads and header blocks) of messages held back to be handed to the client
/// together. Under async-nats' 65,535-byte write buffer limit (at which its connection task
/// writes and takes no more) with room for the `HPUB` lines and subjects of ~15 typical
/// messages, so one batch is one `writev`.
pub(crate) const HANDOVER_BYTES: usize = 60 * 1024;

/// A message in the outbox, not yet handed to the client.
pub(crate) struct BatchedMessage {
    pub(crate) msg: OutMessage,
    /// When it was published (JetStream: when it was held), for `publish_duration`.
    pub(crate) published_at: Instant,
    /// The message's bytes, held against the budget until NATS has taken it.
    pub(crate) charge: Charge,
}

pub(crate) struct Batch {
    /// Messages published that wait before they can be held (for the batch to be handed over,
    /// or for room in the JetStream window): the one of the publish under way, and those of
    /// publishes dropped while they waited. Kept here rather than in the publish's future, so a
    /// publish dropped while it waits loses nothing: every later call places them first.
    pub(crate) waiting: VecDeque<BatchedMessage>,
    /// Messages published but not yet handed to the client, oldest first, and their bytes
    /// ([`OutMessage::wire_len`]); at most [`HANDOVER_BYTES`] unless one message is larger.
    pub(crate) held: VecDeque<BatchedMessage>,
    held_bytes: usize,
    /// Messages published so far.
    pub(crate) published: u64,
    pub(crate) budget: Budget,
    /// The replica's term: a message is handed to the client only while it is in force
    /// ([`Batch::in_term`]).
    pub(crate) term: TermClock,
    pub(crate) metrics: PublishMetrics,
    /// Where `publish_queue_depth` gets this target's share.
    gauges: TargetGauges,
}

impl Batch {
    pub(crate) fn new(metrics: PublishMetrics, gauges: TargetGauges, budget: Budget) -> Batch {
        Batch {
            waiting: VecDeque::new(),
            held: VecDeque::new(),
            held_bytes: 0,
            published: 0,
            budget,
            term: TermClock::unbounded(),
            metrics,
            gauges,
        }
    }

    /// Returns once the replica's term is in force. Checked at every hand-over to the client,
    /// the last step a message takes inside the process: a holder paused with a batch held
    /// (docs/replicas.md, "A paused holder") resumes past its renew deadline, and its idle
    /// flush would otherwise hand the batch over beside the next holder's messages before the
    /// elector's timer has run. Cancel-safe: the batch keeps every message while it waits.
    pub(crate) async fn in_term(&self) {
        self.term.hold(&self.metrics.watch).await;
    }

    /// Takes a message in as published: it waits until the outbox places it.
    pub(crate) fn take_in(&mut self, msg: OutMessage, charge: Charge) {
        self.published += 1;
        self.waiting.push_back(BatchedMessage {
            msg,
            published_at: Instant::now(),
            charge,
        });
    }

    /// Whether holding the next waiting message would take a non-empty batch over
    /// [`HANDOVER_BYTES`] (so the batch is handed over first).
    pub(crate) fn waiting_overflows(&self) -> bool {
        self.waiting.front().is_some_and(|next| {
            !self.held.is_empty() && self.held_bytes + next.msg.wire_len() > HANDOVER_BYTES
        })
    }

    /// Moves the next waiting message to the end of the batch.
    pub(crate) fn hold_waiting(&mut self) {
        if let Some(next) = self.waiting.pop_front() {
            self.held_bytes += next.msg.wire_len();
            self.held.push_back(next);
        }
    }

    /// Takes the oldest held message out of the batch (once the client has taken it).
    pub(crate) fn pop_held(&mut self) -> Option<BatchedMessage> {
        let held = self.held.pop_front()?;
        self.held_bytes -= held.msg.wire_len();
        Some(held)
    }

    /// Messages published and not yet handed to the client.
    pub(crate) fn unplaced(&self) -> usize {
        self.held.len() + self.waiting.len()
    }

    /// Reports what this target holds: `publish_queue_depth` (held messages and `beyond`: the
    /// ones handed to the client that NATS has not taken yet) and, for the count abandoned at
    /// shutdown, everything not yet taken by NATS.
    pub(crate) fn report(&self, beyond: usize) {
        let queued = self.held.len() + beyond;
        self.gauges.set_queued(queued);
        self.gauges.set_unconfirmed(queued + self.waiting.len());
    }

    /// A message over the server's `max_payload` can never be published: counted, logged, skipped.
    pub(crate) fn too_large(&self, subject: &str, bytes: usize, error: &dyn std::error::Error) {
        self.metrics.publish_errors.inc();
        self.metrics.dropped_too_large.inc();
        tracing::error!(watch = %self.metrics.watch, subject, bytes, error = %error, "message exceeds the NATS server's max_payload; not published (raise max_payload, or publish objects with a smaller payload mode)");
    }
}
