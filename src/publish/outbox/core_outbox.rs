//! Publishing one watch's messages to core NATS: handed to the client in batches, once each,
//! and settled by a flush round trip that began after they were handed over.
//!
//! Core NATS acknowledges nothing: a message is handed to the client once (it queues messages
//! while disconnected) and the outbox flushes before a checkpoint, whenever the byte budget is
//! spent, and whenever the watch waits for its next line ([`CoreOutbox::flush_idle`]): so a
//! quiet watch holds nothing against the budget, and `publish_queue_depth` counts the messages
//! the client holds (all of them while NATS is away). A message's bytes stay charged against the
//! budget until the flush after its hand-over has returned.

use crate::delivery::ports::Sink;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_nats::client::{FlushError, PublishErrorKind};

use super::batch::{Batch, BatchedMessage};
use super::link::CoreLink;
use crate::budget::{Budget, Charge};
use crate::leader::TermClock;
use crate::publish::message::OutMessage;
use crate::publish::metrics::PublishMetrics;
use crate::telemetry::target::TargetGauges;

/// Pause before flushing again after a flush failed (the client is closed).
const FLUSH_RETRY: Duration = Duration::from_secs(1);

/// A flush started while the watch was idle, and the messages handed to the client before it.
struct IdleFlush {
    done: Pin<Box<dyn Future<Output = Result<(), FlushError>> + Send>>,
    charge: Charge,
    messages: usize,
    /// Messages handed to the client before the flush started: settled once it returns.
    handed: u64,
}

/// The core NATS publishing side of one watch target.
pub(crate) struct CoreOutbox<C> {
    link: C,
    batch: Batch,
    /// The bytes handed to the client since its last flush began, and how many messages.
    unflushed: Charge,
    unflushed_messages: usize,
    /// The flush started while the watch was idle, and what was handed over before it.
    flushing: Option<IdleFlush>,
    /// How many of the first messages published have been flushed to the server (the client
    /// hands them over in the order published).
    settled: u64,
    /// Messages handed to the client (or refused by it) so far.
    handed_over: u64,
}

impl<C: CoreLink> CoreOutbox<C> {
    pub(crate) fn new(
        link: C,
        metrics: PublishMetrics,
        gauges: TargetGauges,
        budget: Budget,
    ) -> CoreOutbox<C> {
        CoreOutbox {
            link,
            unflushed: budget.charge(0),
            batch: Batch::new(metrics, gauges, budget),
            unflushed_messages: 0,
            flushing: None,
            settled: 0,
            handed_over: 0,
        }
    }

    /// Hands messages to the client only while `term` is in force (before the first publish).
    pub(crate) fn set_term(&mut self, term: TermClock) {
        self.batch.term = term;
    }

    pub(crate) fn link(&self) -> &C {
        &self.link
    }

    /// Holds the waiting messages, in order.
    async fn place_waiting(&mut self) {
        while !self.batch.waiting.is_empty() {
            if self.batch.waiting_overflows() {
                self.hand_over().await;
            }
            self.batch.hold_waiting();
            self.report();
            // While disconnected there is nothing to batch for: the client queues what it gets
            // until NATS is back, and its queue (`nats.queue_capacity`) is what stops the watch.
            if !self.link.connected() {
                self.hand_over().await;
            }
        }
    }

    /// Hands the held messages to the client, in order. A core publish fails only for a message
    /// over `max_payload`, an invalid subject or a closed client, and retrying helps none of
    /// them; so each message is handed over once. (While NATS is disconnected the client queues
    /// them; a full queue makes this wait.) Cancel-safe: a message leaves the batch only once
    /// the client has taken it (the client gets clones of its shared bytes).
    async fn hand_over(&mut self) {
        if self.batch.held.is_empty() {
            return;
        }
        // Before each message, not once a batch: a publish that waits for room in the client's
        // queue can span a pause of the process past the term.
        while let Some(front) = self.batch.held.front() {
            self.batch.in_term().await;
            let handed = self.link.publish(&front.msg).await;
            let Some(held) = self.batch.pop_held() else {
                break;
            };
            self.handed_over += 1;
            match handed {
                Ok(()) => {
                    let metrics = &self.batch.metrics;
                    self.unflushed.absorb(held.charge);
                    self.unflushed_messages += 1;
                    metrics.published(held.msg.event_type);
                    metrics
                        .publish_duration
                        .observe(held.published_at.elapsed().as_secs_f64());
                }
                Err(e) => {
                    // Not for the socket: its bytes are given back now.
                    let BatchedMessage { msg, charge, .. } = held;
                    drop(charge);
                    if e.kind() == PublishErrorKind::MaxPayloadExceeded {
                        self.batch.too_large(&msg.subject, msg.payload.len(), &e);
                    } else {
                        self.batch.metrics.publish_errors.inc();
                        tracing::error!(watch = %self.batch.metrics.watch, subject = %msg.subject, error = %e, "NATS refused the message; not published");
                    }
                }
            }
        }
        self.report();
    }

    /// Hands the held messages over, then a flush round trip. `true` when it returned.
    async fn flush(&mut self) -> bool {
        self.place_waiting().await;
        self.hand_over().await;
        let handed = self.handed_over;
        match self.link.flush().await {
            Ok(()) => {
                self.settled = self.settled.max(handed);
                self.unflushed.set(0);
                self.unflushed_messages = 0;
                self.flushing = None;
                self.report();
                true
            }
            Err(e) => {
                tracing::debug!(watch = %self.batch.metrics.watch, error = %e, "flush to NATS failed; messages stay queued in the client");
                false
            }
        }
    }

    fn report(&self) {
        let flushing = self.flushing.as_ref().map_or(0, |f| f.messages);
        self.batch.report(self.unflushed_messages + flushing);
    }
}

impl<C: CoreLink> Sink for CoreOutbox<C> {
    fn published(&self) -> u64 {
        self.batch.published
    }

    fn settled(&self) -> u64 {
        self.settled
    }

    fn charge(&self, bytes: usize) -> Charge {
        self.batch.budget.charge(bytes)
    }

    /// Holds a message for the next batch (after handing the batch over if the message would
    /// take it over the limit, and at once while NATS is not connected); then, while the budget
    /// is spent, flushes until this target holds nothing. Cancel-safe: from the first poll the
    /// message waits in the batch until it is held, and the next call places it first.
    async fn publish(&mut self, msg: OutMessage, charge: Charge) {
        self.batch.take_in(msg, charge);
        self.place_waiting().await;
        while self.batch.budget.exhausted() && self.unflushed() {
            if !self.flush().await {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Messages held, handed to the client but not yet flushed, or being flushed.
    fn unflushed(&self) -> bool {
        self.batch.unplaced() > 0 || self.unflushed_messages > 0 || self.flushing.is_some()
    }

    /// Hands the held messages to the client, then a flush round trip; once it returns, what
    /// was published before it is out of the process. `true` when it did.
    async fn settle(&mut self) -> bool {
        self.flush().await
    }

    /// Hands the held messages to the client. Nothing else to wait for: the client sends its
    /// messages in the order it was handed them and the server handles one connection's
    /// messages in order, so a JetStream write acknowledged afterwards is stored after them.
    async fn settle_objects(&mut self, _keys: &[u64]) {
        self.place_waiting().await;
        self.hand_over().await;
    }

    /// For while the watch waits for its next line: hands the held messages to the client, once
    /// it has yielded and no line came; then flushes what was handed over, and gives its bytes
    /// back to the budget once they are on the socket (while NATS is away, once it is back).
    /// Cancel-safe: the flush goes on in the outbox, and the next call awaits the same one.
    async fn flush_idle(&mut self) {
        let to_hand_over = self.batch.unplaced() > 0 || self.unflushed_messages > 0;
        if self.flushing.is_none() && to_hand_over {
            // The line may only be on its way: hyper hands a read over one body chunk at a
            // time, and the next chunk comes when its connection task has run. Yielding once
            // lets it (and every other ready task) run first; the watch goes on with the line
            // if one came, and the batch grows.
            tokio::task::yield_now().await;
            self.place_waiting().await;
            self.hand_over().await;
        }
        let flushing = match &mut self.flushing {
            Some(flushing) => flushing,
            None if self.unflushed_messages == 0 => return,
            None => self.flushing.insert(IdleFlush {
                done: Box::pin(self.link.flush()),
                charge: std::mem::replace(&mut self.unflushed, self.batch.budget.charge(0)),
                messages: std::mem::take(&mut self.unflushed_messages),
                handed: self.handed_over,
            }),
        };
        let flushed = (&mut flushing.done).await;
        if let Some(IdleFlush {
            charge,
            messages,
            handed,
            ..
        }) = self.flushing.take()
        {
            match flushed {
                Ok(()) => self.settled = self.settled.max(handed),
                Err(e) => {
                    // The client is closed (shutdown): the messages are still not out.
                    tracing::debug!(watch = %self.batch.metrics.watch, error = %e, "flush to NATS failed; messages stay queued in the client");
                    self.unflushed.absorb(charge);
                    self.unflushed_messages += messages;
                    self.report();
                    tokio::time::sleep(FLUSH_RETRY).await;
                    return;
                }
            }
        }
        self.report();
    }
}
