//! Publishing one watch's messages to JetStream, with a bounded window of unacknowledged ones.
//!
//! Two invariants keep the delivery promise:
//! - a message that fails is published again, with the same `Nats-Msg-Id`, until it succeeds;
//!   the rest of the window goes again with it, in order;
//! - two messages of the same object are never in flight together, so a retry can never put an
//!   older version of an object behind a newer one.
//!
//! Held messages (the batch not yet handed to the client) count against the window and for
//! per-object order as if they were in flight. Every message keeps its place in the outbox
//! while it waits or is retried (the waiting one in the batch, a retried one at the front of
//! the window), so a call dropped at any await loses nothing and the next call goes on from
//! where it stopped.

use crate::delivery::ports::Sink;
use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use futures_util::future::MaybeDone;
use tokio::time::Instant;

use super::batch::Batch;
use super::link::{Ack, JetStreamLink};
use crate::backoff::{Backoff, NATS_WRITE_RETRY};
use crate::budget::{Budget, Charge};
use crate::leader::TermClock;
use crate::publish::message::OutMessage;
use crate::publish::metrics::PublishMetrics;
use crate::telemetry::logging::human;
use crate::telemetry::target::TargetGauges;

/// A message in the window: sent and unacknowledged, or to be sent again.
struct InFlight {
    msg: OutMessage,
    /// Awaited in place (the oldest only), so a wait that is given up loses nothing; it then
    /// holds the result until the message is taken out of the window. `None`: to be sent
    /// (again), after an earlier message of the window failed.
    ack: Option<MaybeDone<Ack>>,
    sent_at: Instant,
    /// The message's bytes, held against the budget until it is acknowledged.
    charge: Charge,
}

/// The JetStream publishing side of one watch target.
pub(crate) struct JetStreamOutbox<J> {
    link: J,
    batch: Batch,
    /// Sent and unacknowledged (or to be sent again), oldest first.
    in_flight: VecDeque<InFlight>,
    max_in_flight: usize,
    retry: Backoff,
    /// After a failure: when the next publish may go. Kept here so a call dropped during the
    /// pause does not cut it short.
    paused_until: Option<Instant>,
}

impl<J: JetStreamLink> JetStreamOutbox<J> {
    /// `max_in_flight` bounds the messages held or unacknowledged.
    pub(crate) fn new(
        link: J,
        max_in_flight: usize,
        metrics: PublishMetrics,
        gauges: TargetGauges,
        budget: Budget,
    ) -> JetStreamOutbox<J> {
        JetStreamOutbox {
            link,
            batch: Batch::new(metrics, gauges, budget),
            in_flight: VecDeque::new(),
            max_in_flight: max_in_flight.max(1),
            retry: Backoff::new(NATS_WRITE_RETRY),
            paused_until: None,
        }
    }

    /// Hands messages to the client only while `term` is in force (before the first publish).
    pub(crate) fn set_term(&mut self, term: TermClock) {
        self.batch.term = term;
    }

    pub(crate) fn link(&self) -> &J {
        &self.link
    }

    /// Holds the waiting messages, in order, each once there is room for it.
    async fn place_waiting(&mut self) {
        while let Some(next) = self.batch.waiting.front() {
            let key = next.msg.object_key;
            let full = self.batch.held.len() + self.in_flight.len() >= self.max_in_flight;
            let held_same = self.batch.held.iter().any(|h| h.msg.object_key == key);
            let blocked_by_held = full || held_same || self.batch.waiting_overflows();
            if blocked_by_held && !self.batch.held.is_empty() {
                self.send_held().await;
                continue;
            }
            if self.in_flight.len() >= self.max_in_flight
                || self.in_flight.iter().any(|f| f.msg.object_key == key)
            {
                self.complete_oldest().await;
                continue;
            }
            self.batch.hold_waiting();
            if let Some(held) = self.batch.held.back_mut() {
                // Timed from here: the wait for room is the watch's, not NATS'.
                held.published_at = Instant::now();
            }
            self.report();
            // While disconnected there is nothing to batch for: the client queues what it gets
            // until NATS is back, and its queue (`nats.queue_capacity`) is what stops the watch.
            if !self.link.connected() {
                self.send_held().await;
            }
        }
    }

    /// Publishes the window's messages to be sent again, then the held ones, in order, back to
    /// back (so the connection task writes them together), and puts them in the window.
    /// Cancel-safe: a message leaves the batch only once the client has taken it (or it can
    /// never be published).
    async fn send_held(&mut self) {
        self.resend_window().await;
        if self.batch.held.is_empty() {
            return;
        }
        while let Some(front) = self.batch.held.front() {
            // A clone shares the bytes; the original stays held until the client has taken it.
            let msg = front.msg.clone();
            let ack = self.send(&msg).await;
            let Some(held) = self.batch.pop_held() else {
                break;
            };
            if let Some(ack) = ack {
                self.in_flight.push_back(InFlight {
                    msg: held.msg,
                    ack: Some(MaybeDone::Future(ack)),
                    sent_at: held.published_at,
                    charge: held.charge,
                });
            }
        }
        self.report();
    }

    /// Sends again, in order, the messages of the window marked for it after a failure.
    /// Cancel-safe: a message is marked sent only once the client has taken it.
    async fn resend_window(&mut self) {
        let mut index = 0;
        while index < self.in_flight.len() {
            if self.in_flight[index].ack.is_some() {
                index += 1;
                continue;
            }
            let msg = self.in_flight[index].msg.clone();
            match self.send(&msg).await {
                Some(ack) => {
                    self.in_flight[index].ack = Some(MaybeDone::Future(ack));
                    index += 1;
                }
                None => {
                    self.in_flight.remove(index);
                    self.report();
                }
            }
        }
    }

    /// Sends one JetStream publish, retrying until the client accepts it; `None` for a message
    /// that can never be published (larger than the server's `max_payload`).
    async fn send(&mut self, msg: &OutMessage) -> Option<Ack> {
        loop {
            self.pause().await;
            self.batch.in_term().await;
            match self.link.send(msg).await {
                Ok(ack) => return Some(ack),
                Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded => {
                    self.batch.too_large(&msg.subject, msg.payload.len(), &e);
                    return None;
                }
                Err(e) => self.failed(msg, &e),
            }
        }
    }

    /// Awaits the oldest acknowledgement and takes the message out of the window; on failure
    /// publishes it, and the rest of the window, again until it is acknowledged.
    async fn complete_oldest(&mut self) {
        loop {
            self.resend_window().await;
            let Some(oldest) = self.in_flight.front_mut() else {
                return;
            };
            let Some(ack) = &mut oldest.ack else {
                continue;
            };
            (&mut *ack).await;
            if let MaybeDone::Done(Err(e)) = ack {
                let e = std::mem::replace(e, PublishError::new(PublishErrorKind::Other));
                let msg = oldest.msg.clone();
                self.failed(&msg, &e);
                // The rest of the window has most likely failed too (NATS restarted, the stream
                // was not there yet): all of it goes again, in order, so one outage costs one
                // pause rather than one per message. Messages the stream already holds come
                // back flagged duplicate and are not stored twice.
                for message in &mut self.in_flight {
                    message.ack = None;
                }
                continue;
            }
            self.take_acknowledged();
            return;
        }
    }

    /// Takes the oldest message, acknowledged, out of the window; its bytes go back to the
    /// budget.
    fn take_acknowledged(&mut self) {
        let Some(InFlight {
            msg,
            ack,
            sent_at,
            charge,
        }) = self.in_flight.pop_front()
        else {
            return;
        };
        drop(charge);
        if let Some(mut ack) = ack {
            if let Some(Ok(reply)) = Pin::new(&mut ack).take_output() {
                self.acknowledged(&msg, &reply, sent_at);
            }
        }
        self.report();
    }

    fn acknowledged(&mut self, msg: &OutMessage, reply: &PublishAck, sent_at: Instant) {
        let metrics = &self.batch.metrics;
        if reply.duplicate {
            metrics.jetstream_duplicates.inc();
        }
        metrics.published(msg.event_type);
        metrics
            .publish_duration
            .observe(sent_at.elapsed().as_secs_f64());
        self.retry.reset();
    }

    /// Counts and logs a failed attempt, and pauses the next: a growing backoff, and until the
    /// connection is back if it is down.
    fn failed(&mut self, msg: &OutMessage, error: &(dyn std::error::Error + Send + Sync)) {
        self.batch.metrics.publish_errors.inc();
        let delay = self.retry.next_delay();
        let error = error.to_string();
        tracing::warn!(watch = %self.batch.metrics.watch, subject = %msg.subject, error, retry_in = human(delay), "publish to NATS failed; retrying with the same Nats-Msg-Id");
        self.paused_until = Some(Instant::now() + delay);
    }

    /// Waits out the pause after a failure, if one is due.
    async fn pause(&mut self) {
        let Some(until) = self.paused_until else {
            return;
        };
        tokio::time::sleep_until(until).await;
        while !self.link.connected() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.paused_until = None;
    }

    fn report(&self) {
        self.batch.report(self.in_flight.len());
    }
}

impl<J: JetStreamLink> Sink for JetStreamOutbox<J> {
    fn published(&self) -> u64 {
        self.batch.published
    }

    /// Waiting, held or in the window are the last ones published, in order; the rest are
    /// acknowledged (or could never be published).
    fn settled(&self) -> u64 {
        let unsettled = self.batch.unplaced() + self.in_flight.len();
        self.batch.published.saturating_sub(unsettled as u64)
    }

    fn charge(&self, bytes: usize) -> Charge {
        self.batch.budget.charge(bytes)
    }

    /// Holds a message for the next batch once the window has room for it and no message of
    /// its object is held or in flight (for that, sends the batch and awaits acknowledgements);
    /// then, while the budget is spent, awaits acknowledgements until this target holds
    /// nothing. Cancel-safe: from the first poll the message waits in the batch until it is
    /// held, and the next call places it first.
    async fn publish(&mut self, msg: OutMessage, charge: Charge) {
        self.batch.take_in(msg, charge);
        self.report();
        self.place_waiting().await;
        while self.batch.budget.exhausted()
            && !(self.batch.held.is_empty() && self.in_flight.is_empty())
        {
            self.send_held().await;
            self.complete_oldest().await;
        }
    }

    /// Whether [`flush_idle`](Self::flush_idle) has something to do: held messages, or an
    /// acknowledgement that may still arrive.
    fn unflushed(&self) -> bool {
        self.batch.unplaced() > 0
            || self.in_flight.front().is_some_and(|oldest| {
                matches!(&oldest.ack, Some(ack) if !matches!(ack, MaybeDone::Done(Err(_))))
            })
    }

    /// Waits until everything published is acknowledged. Always `true`.
    async fn settle(&mut self) -> bool {
        self.place_waiting().await;
        self.send_held().await;
        while !self.in_flight.is_empty() {
            self.complete_oldest().await;
        }
        true
    }

    /// Waits until no message of the objects `keys` (their `object_key`s) is held or
    /// unacknowledged, so that a JetStream write made afterwards on the same connection is
    /// stored only after them.
    async fn settle_objects(&mut self, keys: &[u64]) {
        self.place_waiting().await;
        self.send_held().await;
        while self
            .in_flight
            .iter()
            .any(|f| keys.contains(&f.msg.object_key))
        {
            self.complete_oldest().await;
        }
    }

    /// For while the watch waits for its next line: sends the held messages, once it has
    /// yielded and no line came; then takes acknowledged messages out of the window, oldest
    /// first, until one is not acknowledged yet or has failed (a failure is retried by the next
    /// publish or settle, which may wait). Cancel-safe: an acknowledgement is awaited where it
    /// stays.
    async fn flush_idle(&mut self) {
        if self.batch.unplaced() > 0 {
            // The line may only be on its way (see the core outbox's `flush_idle`): yielding
            // once lets it come first, and the batch grows.
            tokio::task::yield_now().await;
            self.place_waiting().await;
            self.send_held().await;
        }
        while let Some(oldest) = self.in_flight.front_mut() {
            let Some(ack) = &mut oldest.ack else {
                return;
            };
            (&mut *ack).await;
            if let MaybeDone::Done(Err(_)) = ack {
                return;
            }
            self.take_acknowledged();
        }
    }
}
