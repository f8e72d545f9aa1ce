//! Publishing one watch's messages, in order, with a bounded window of unacknowledged ones.
//!
//! The outbox is where backpressure comes from: [`Outbox::publish`] returns only when the message
//! is in the batch it holds or accepted by the client (core NATS) or when the window has room
//! (JetStream), so a slow or absent NATS stops the watch from reading the API server instead of
//! filling memory.
//!
//! In JetStream mode two invariants keep the delivery promise:
//! - a message that fails is published again, with the same `Nats-Msg-Id`, until it succeeds;
//! - two messages of the same object are never in flight together, so a retry can never put an
//!   older version of an object behind a newer one.
//!
//! Core NATS acknowledges nothing: a message is handed to the client once (it queues messages
//! while disconnected) and the outbox flushes before a checkpoint, whenever the byte budget is
//! spent, and whenever the watch waits for its next line ([`Outbox::flush_idle`]): so a quiet
//! watch holds nothing against the budget, and `publish_queue_depth` counts the messages the
//! client holds (all of them while NATS is away). In JetStream mode the same wait collects the
//! acknowledgements that arrive, so a quiet watch's last messages are counted as published and
//! leave the window without waiting for its next event.
//!
//! Messages (core and JetStream) are handed to the client in batches of up to
//! [`HANDOVER_BYTES`], not one by one: the client's connection task writes whatever it has each
//! time it runs, and it runs whenever the watch task waits, which is after every body chunk hyper
//! hands over (one read of the watch connection is several chunks: one per HTTP chunk it holds a
//! part of). Handed one by one, a read's messages went out in one `writev` per chunk; held until
//! the watch is really idle (it has yielded once and no line came) or a batch is full, they go
//! out in one. A held JetStream message already counts against the ack window and for per-object
//! order, as if it were in flight.
//!
//! Every message holds its bytes against the process's byte budget ([`crate::budget`]) until NATS
//! has taken it: acknowledged (JetStream) or flushed to the socket (core). While the budget is
//! spent, [`Outbox::publish`] first waits for this target's own messages to be taken, so the
//! watch stops reading.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_nats::jetstream::context::{PublishAckFuture, PublishError};
use async_nats::jetstream::publish::PublishAck;
use async_nats::{jetstream, Client};
use futures_util::future::MaybeDone;
use tokio::time::Instant;

use super::message::OutMessage;
use super::metrics::PublishMetrics;
use crate::backoff::Backoff;
use crate::budget::{Budget, Charge};
use crate::config::BackoffConfig;
use crate::telemetry::target::TargetGauges;

/// Pauses between publish retries: short, since NATS usually comes back quickly, and capped so
/// a recovered NATS is used within seconds.
const RETRY_BACKOFF: BackoffConfig = BackoffConfig::checked(
    Duration::from_millis(100),
    Duration::from_secs(5),
    2.0,
    0.2,
    Duration::from_secs(30),
);

/// Pause before flushing again after a flush failed (the client is closed).
const FLUSH_RETRY: Duration = Duration::from_secs(1);

/// The most bytes (payloads and header blocks) of messages held back to be handed to the client
/// together. Under async-nats' 65,535-byte write buffer limit (at which its
/// connection task writes and takes no more) with room for the `HPUB` lines and subjects of
/// ~15 typical messages, so one batch is one `writev`.
const HANDOVER_BYTES: usize = 60 * 1024;

/// The connection in the configured mode; cheap to clone.
#[derive(Clone)]
pub(crate) enum Nats {
    Core(Client),
    JetStream {
        client: Client,
        /// Boxed: a JetStream context is several times the size of a client.
        context: Box<jetstream::Context>,
    },
}

impl Nats {
    pub(crate) fn client(&self) -> &Client {
        match self {
            Nats::Core(client) | Nats::JetStream { client, .. } => client,
        }
    }
}

/// A JetStream acknowledgement being awaited.
type Ack = Pin<Box<dyn Future<Output = Result<PublishAck, PublishError>> + Send>>;

struct InFlight {
    msg: OutMessage,
    /// Awaited in place (the oldest only), so a wait that is given up loses nothing; it then
    /// holds the result until the message is taken out of the window.
    ack: MaybeDone<Ack>,
    sent_at: Instant,
    /// The message's bytes, held against the budget until it is acknowledged.
    charge: Charge,
}

/// A message waiting in the outbox to be handed to the client with the next batch.
struct BatchedMessage {
    msg: OutMessage,
    /// When it was published, for `publish_duration`.
    published_at: Instant,
    /// The message's bytes, held against the budget until NATS has taken it.
    charge: Charge,
}

/// Core mode: a flush under way, and the messages handed to the client before it started.
struct IdleFlush {
    done: Pin<Box<dyn Future<Output = Result<(), async_nats::client::FlushError>> + Send>>,
    charge: Charge,
    messages: usize,
    /// Messages handed to the client before the flush started: settled once it returns.
    handed: u64,
}

/// The publishing side of one watch target.
pub(crate) struct Outbox {
    /// The connection, only ever borrowed: kept apart from the mutable state so the hot path
    /// never clones it.
    nats: Nats,
    window: Window,
}

/// What publishing changes: the unacknowledged messages and the retry pacing.
struct Window {
    in_flight: VecDeque<InFlight>,
    max_in_flight: usize,
    metrics: PublishMetrics,
    /// Where `publish_queue_depth` gets this target's share.
    gauges: TargetGauges,
    retry: Backoff,
    budget: Budget,
    /// Core mode: the bytes handed to the client since its last flush, and how many messages.
    unflushed: Charge,
    unflushed_messages: usize,
    /// Messages published but not yet handed to the client, oldest first, and their bytes
    /// ([`OutMessage::wire_len`]); at most [`HANDOVER_BYTES`] unless one message is larger.
    held: VecDeque<BatchedMessage>,
    held_bytes: usize,
    /// Core mode: the flush started while the watch was idle, and what was handed over before it.
    flushing: Option<IdleFlush>,
    /// Messages taken out of `in_flight` (or not yet in it) while they are being sent.
    in_hand: usize,
    /// Messages handed to [`Outbox::publish`] so far.
    published: u64,
    /// Core mode: how many of the first messages published have been flushed to the server
    /// (the client hands them over in the order published).
    settled: u64,
    /// Core mode: messages handed to the client (or refused by it) so far.
    handed_over: u64,
}

impl Outbox {
    /// `max_in_flight` bounds unacknowledged JetStream publishes (unused in core mode).
    pub(crate) fn new(
        nats: Nats,
        max_in_flight: usize,
        metrics: PublishMetrics,
        gauges: TargetGauges,
    ) -> Outbox {
        Outbox {
            nats,
            window: Window {
                in_flight: VecDeque::new(),
                max_in_flight: max_in_flight.max(1),
                metrics,
                gauges,
                retry: Backoff::new(RETRY_BACKOFF),
                budget: Budget::unlimited(),
                unflushed: Charge::none(),
                unflushed_messages: 0,
                held: VecDeque::new(),
                held_bytes: 0,
                flushing: None,
                in_hand: 0,
                published: 0,
                settled: 0,
                handed_over: 0,
            },
        }
    }

    /// Holds every message's bytes against `budget` until NATS has taken it.
    pub(crate) fn with_budget(mut self, budget: Budget) -> Outbox {
        self.window.unflushed = budget.charge(0);
        self.window.budget = budget;
        self
    }

    /// The largest message (payload and headers) the connected server accepts; `None` before
    /// the first connection has told.
    pub(crate) fn max_payload(&self) -> Option<usize> {
        Some(self.nats.client().max_payload()).filter(|&n| n > 0)
    }

    /// Hands one message to NATS; returns once it is held for the next batch (JetStream: with
    /// room for it in the ack window) or accepted by the client, and the byte budget is not
    /// spent by this target's messages.
    ///
    /// `charge` holds the message's bytes against the budget until NATS has taken it (the
    /// watch line's charge taken over, or [`charge`](Self::charge)).
    pub(crate) async fn publish(&mut self, msg: OutMessage, charge: Charge) {
        self.window.published += 1;
        match &self.nats {
            Nats::Core(client) => {
                self.window.publish_core(client, msg, charge).await;
                while self.window.budget.exhausted() && self.window.core_pending() {
                    if !self.window.flush(client).await {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            Nats::JetStream { client, context } => {
                self.window
                    .publish_jetstream(client, context, msg, charge)
                    .await;
                while self.window.budget.exhausted()
                    && !(self.window.held.is_empty() && self.window.in_flight.is_empty())
                {
                    self.window.send_held(client, context).await;
                    self.window.complete_oldest(client, context).await;
                }
            }
        }
    }

    /// Waits until everything handed over is acknowledged (JetStream) or has reached the server
    /// (core: a flush round trip). `true` when it has: then the watch may checkpoint.
    pub(crate) async fn settle(&mut self) -> bool {
        match &self.nats {
            Nats::JetStream { client, context } => {
                self.window.send_held(client, context).await;
                while !self.window.in_flight.is_empty() {
                    self.window.complete_oldest(client, context).await;
                }
                true
            }
            Nats::Core(client) => self.window.flush(client).await,
        }
    }
}

impl Outbox {
    /// Messages published so far: the next one published is number `published()` (from 0).
    pub(crate) fn published(&self) -> u64 {
        self.window.published
    }

    /// How many of the first messages published NATS has taken (flushed to the server in core
    /// mode, acknowledged in JetStream mode): what a crash can no longer lose.
    pub(crate) fn settled(&self) -> u64 {
        let w = &self.window;
        match &self.nats {
            Nats::Core(_) => w.settled,
            // Held, in flight or in hand are the last ones published, in order; the rest are
            // acknowledged (or could never be published).
            Nats::JetStream { .. } => w
                .published
                .saturating_sub((w.held.len() + w.in_flight.len() + w.in_hand) as u64),
        }
    }

    /// A charge of `bytes` against the budget this outbox holds messages against.
    pub(crate) fn charge(&self, bytes: usize) -> Charge {
        self.window.budget.charge(bytes)
    }

    /// Whether [`flush_idle`](Self::flush_idle) has something to do: held messages, messages
    /// handed to the core client and not yet known to be on the socket, or a JetStream
    /// acknowledgement that may still arrive.
    pub(crate) fn unflushed(&self) -> bool {
        match &self.nats {
            Nats::Core(_) => self.window.core_pending(),
            Nats::JetStream { .. } => {
                !self.window.held.is_empty()
                    || self
                        .window
                        .in_flight
                        .front()
                        .is_some_and(|oldest| !matches!(oldest.ack, MaybeDone::Done(Err(_))))
            }
        }
    }

    /// For while the watch waits for its next line: hands the held messages to the client, once
    /// it has yielded and no line came. Core mode: then flushes what was handed to the client,
    /// and gives its bytes back to the budget once they are on the socket (while NATS is away,
    /// once it is back). JetStream: then takes acknowledged messages out of the window, oldest
    /// first, until one is not acknowledged yet or has failed (a failure is retried by the next
    /// publish or settle, which may wait). Cancel-safe: the flush goes on in the outbox, and the
    /// next call awaits the same one; an acknowledgement is awaited where it stays.
    pub(crate) async fn flush_idle(&mut self) {
        let window = &mut self.window;
        let to_hand_over = !window.held.is_empty() || window.unflushed_messages > 0;
        if window.flushing.is_none() && to_hand_over {
            // The line may only be on its way: hyper hands a read over one body chunk at a
            // time, and the next chunk comes when its connection task has run. Yielding once
            // lets it (and every other ready task) run first; the watch goes on with the line
            // if one came, and the batch grows.
            tokio::task::yield_now().await;
            window.hand_over_held(&self.nats).await;
        }
        let client = match &self.nats {
            Nats::Core(client) => client,
            Nats::JetStream { .. } => return window.collect_acknowledged().await,
        };
        let flushing = match &mut window.flushing {
            Some(flushing) => flushing,
            None if window.unflushed_messages == 0 => return,
            None => window.flushing.insert(IdleFlush {
                done: Box::pin(flush_owned(client.clone())),
                charge: std::mem::replace(&mut window.unflushed, window.budget.charge(0)),
                messages: std::mem::take(&mut window.unflushed_messages),
                handed: window.handed_over,
            }),
        };
        let flushed = (&mut flushing.done).await;
        if let Some(IdleFlush {
            charge,
            messages,
            handed,
            ..
        }) = window.flushing.take()
        {
            if flushed.is_ok() {
                window.settled = window.settled.max(handed);
            }
            if let Err(e) = flushed {
                // The client is closed (shutdown): the messages are still not out.
                tracing::debug!(watch = %window.metrics.watch, error = %e, "flush to NATS failed; messages stay queued in the client");
                window.unflushed.absorb(charge);
                window.unflushed_messages += messages;
                window.report();
                tokio::time::sleep(FLUSH_RETRY).await;
                return;
            }
        }
        window.report();
    }

    /// Waits until no message of the objects `keys` (their `object_key`s) is held or
    /// unacknowledged (JetStream), so that a JetStream write made afterwards on the same
    /// connection is stored only after them. Core mode has nothing to wait for: the client sends
    /// its messages in the order it was handed them, and the server handles one connection's
    /// messages in order, so by the time such a write is acknowledged the server has every
    /// message handed over before. (Both modes first hand the held messages to the client, so
    /// they are in that order.)
    pub(crate) async fn settle_objects(&mut self, keys: &[u64]) {
        self.window.hand_over_held(&self.nats).await;
        if let Nats::JetStream { client, context } = &self.nats {
            while self
                .window
                .in_flight
                .iter()
                .any(|f| keys.contains(&f.msg.object_key))
            {
                self.window.complete_oldest(client, context).await;
            }
        }
    }
}

impl Window {
    /// Core mode: messages held, handed to the client but not yet flushed, or being flushed.
    fn core_pending(&self) -> bool {
        !self.held.is_empty() || self.unflushed_messages > 0 || self.flushing.is_some()
    }

    /// Holds a message for the next batch, after handing the batch over if the message would
    /// take it over [`HANDOVER_BYTES`]; `true` if the caller should hand the batch over at once
    /// (NATS is not connected).
    fn hold(
        &mut self,
        client: &Client,
        msg: OutMessage,
        charge: Charge,
        published_at: Instant,
    ) -> bool {
        self.held_bytes += msg.wire_len();
        self.held.push_back(BatchedMessage {
            msg,
            published_at,
            charge,
        });
        self.report();
        // While disconnected there is nothing to batch for: the client queues what it gets until
        // NATS is back, and its queue (`nats.queue_capacity`) is what stops the watch.
        client.connection_state() != async_nats::connection::State::Connected
    }

    /// Whether `msg` would take the held batch over [`HANDOVER_BYTES`].
    fn batch_full(&self, msg: &OutMessage) -> bool {
        self.held_bytes + msg.wire_len() > HANDOVER_BYTES
    }

    /// Hands the held messages to the client, in order.
    async fn hand_over_held(&mut self, nats: &Nats) {
        match nats {
            Nats::Core(client) => self.hand_over_core(client).await,
            Nats::JetStream { client, context } => self.send_held(client, context).await,
        }
    }

    /// Holds a core message for the next batch. Its bytes stay charged until the flush after it
    /// is handed over.
    async fn publish_core(&mut self, client: &Client, msg: OutMessage, charge: Charge) {
        let published_at = Instant::now();
        if self.batch_full(&msg) {
            self.hand_over_core(client).await;
        }
        if self.hold(client, msg, charge, published_at) {
            self.hand_over_core(client).await;
        }
    }

    /// Core mode: hands the held messages to the client, in order. A core publish fails only for
    /// a message over `max_payload`, an invalid subject or a closed client, and retrying helps
    /// none of them; so each message is handed over once. (While NATS is disconnected the client
    /// queues them; a full queue makes this wait.) Cancel-safe: a message leaves `held` only once
    /// the client has taken it (the client gets clones of its shared bytes).
    async fn hand_over_core(&mut self, client: &Client) {
        if self.held.is_empty() {
            return;
        }
        while let Some(front) = self.held.front() {
            let handed = client
                .publish_with_serialized_headers(
                    front.msg.subject.clone(),
                    front.msg.headers.clone(),
                    front.msg.payload.clone(),
                )
                .await;
            let Some(held) = self.pop_held() else {
                break;
            };
            self.handed_over += 1;
            match handed {
                Ok(()) => {
                    self.unflushed.absorb(held.charge);
                    self.unflushed_messages += 1;
                    self.metrics.published(held.msg.event_type);
                    self.metrics
                        .publish_duration
                        .observe(held.published_at.elapsed().as_secs_f64());
                }
                Err(e) => {
                    // Not for the socket: its bytes are given back now.
                    let BatchedMessage { msg, charge, .. } = held;
                    drop(charge);
                    if e.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded {
                        self.too_large(&msg.subject, msg.payload.len(), &e);
                    } else {
                        self.metrics.publish_errors.inc();
                        tracing::error!(watch = %self.metrics.watch, subject = %msg.subject, error = %e, "NATS refused the message; not published");
                    }
                }
            }
        }
        self.report();
    }

    /// Takes the oldest held message out of the batch (once the client has taken it).
    fn pop_held(&mut self) -> Option<BatchedMessage> {
        let held = self.held.pop_front()?;
        self.held_bytes -= held.msg.wire_len();
        Some(held)
    }

    /// Core mode: hands the held messages over, then a flush round trip; once it returns, what
    /// was published before it is out of the process. `true` when it did.
    async fn flush(&mut self, client: &Client) -> bool {
        self.hand_over_core(client).await;
        let handed = self.handed_over;
        match client.flush().await {
            Ok(()) => {
                self.settled = self.settled.max(handed);
                self.unflushed.set(0);
                self.unflushed_messages = 0;
                self.flushing = None;
                self.report();
                true
            }
            Err(e) => {
                tracing::debug!(watch = %self.metrics.watch, error = %e, "flush to NATS failed; messages stay queued in the client");
                false
            }
        }
    }

    /// Reports what this target holds: `publish_queue_depth` (held messages, and unacknowledged
    /// JetStream publishes or core messages the client holds unflushed) and, for the count
    /// abandoned at shutdown, everything not yet taken by NATS.
    fn report(&self) {
        let queued = self.held.len()
            + self.in_flight.len()
            + self.unflushed_messages
            + self.flushing.as_ref().map_or(0, |f| f.messages);
        self.gauges.set_queued(queued);
        self.gauges.set_unconfirmed(queued + self.in_hand);
    }

    /// Holds a JetStream message for the next batch once the window has room for it and no
    /// message of its object is held or in flight (for that, sends the batch first and awaits
    /// acknowledgements).
    async fn publish_jetstream(
        &mut self,
        client: &Client,
        context: &jetstream::Context,
        msg: OutMessage,
        charge: Charge,
    ) {
        let object_key = msg.object_key;
        let same_object = |window: &Window| {
            window.held.iter().any(|h| h.msg.object_key == object_key)
                || window
                    .in_flight
                    .iter()
                    .any(|f| f.msg.object_key == object_key)
        };
        if self.held.len() + self.in_flight.len() >= self.max_in_flight
            || same_object(self)
            || self.batch_full(&msg)
        {
            self.in_hand += 1;
            self.report();
            self.send_held(client, context).await;
            while self.in_flight.len() >= self.max_in_flight || same_object(self) {
                self.complete_oldest(client, context).await;
            }
            self.in_hand -= 1;
        }
        if self.hold(client, msg, charge, Instant::now()) {
            self.send_held(client, context).await;
        }
    }

    /// JetStream: publishes the held messages, in order, back to back (so the connection task
    /// writes them together), and puts them in the window. Cancel-safe: a message leaves `held`
    /// only once the client has taken it (or it can never be published).
    async fn send_held(&mut self, client: &Client, context: &jetstream::Context) {
        if self.held.is_empty() {
            return;
        }
        while let Some(front) = self.held.front() {
            // A clone shares the bytes; the original stays held until the client has taken it.
            let msg = front.msg.clone();
            let ack = self.send(client, context, &msg).await;
            let Some(held) = self.pop_held() else {
                break;
            };
            if let Some(ack) = ack {
                self.in_flight.push_back(InFlight {
                    msg: held.msg,
                    ack: awaitable(ack),
                    sent_at: held.published_at,
                    charge: held.charge,
                });
            }
        }
        self.report();
    }

    /// JetStream, while the watch is idle: takes the acknowledged messages out of the window.
    async fn collect_acknowledged(&mut self) {
        while let Some(oldest) = self.in_flight.front_mut() {
            (&mut oldest.ack).await;
            if let MaybeDone::Done(Err(_)) = oldest.ack {
                return;
            }
            if let Some(InFlight {
                msg,
                mut ack,
                sent_at,
                charge,
            }) = self.in_flight.pop_front()
            {
                if let Some(Ok(reply)) = Pin::new(&mut ack).take_output() {
                    self.acknowledged(&msg, &reply, sent_at);
                }
                drop(charge);
                self.report();
            }
        }
    }

    fn acknowledged(&mut self, msg: &OutMessage, reply: &PublishAck, sent_at: Instant) {
        if reply.duplicate {
            self.metrics.jetstream_duplicates.inc();
        }
        self.metrics.published(msg.event_type);
        self.metrics
            .publish_duration
            .observe(sent_at.elapsed().as_secs_f64());
        self.retry.reset();
    }

    /// Sends one JetStream publish, retrying until the client accepts it; `None` for a message
    /// that can never be published (larger than the server's `max_payload`).
    async fn send(
        &mut self,
        client: &Client,
        context: &jetstream::Context,
        msg: &OutMessage,
    ) -> Option<PublishAckFuture> {
        loop {
            let publish = jetstream::message::PublishMessage::build()
                .payload(msg.payload.clone())
                .serialized_headers(msg.headers.clone());
            match context.send_publish(msg.subject.clone(), publish).await {
                Ok(ack) => return Some(ack),
                Err(e) if e.kind() == jetstream::context::PublishErrorKind::MaxPayloadExceeded => {
                    self.too_large(&msg.subject, msg.payload.len(), &e);
                    return None;
                }
                Err(e) => self.pause_after_failure(client, msg, &e).await,
            }
        }
    }

    /// Awaits the oldest acknowledgement; on failure publishes it, and the rest of the window,
    /// again until it is acknowledged.
    async fn complete_oldest(&mut self, client: &Client, context: &jetstream::Context) {
        let Some(oldest) = self.in_flight.front_mut() else {
            return;
        };
        (&mut oldest.ack).await;
        let Some(InFlight {
            msg,
            mut ack,
            sent_at,
            charge,
        }) = self.in_flight.pop_front()
        else {
            return;
        };
        self.in_hand += 1;
        let mut result = Pin::new(&mut ack).take_output().unwrap_or_else(|| {
            Err(PublishError::new(
                jetstream::context::PublishErrorKind::Other,
            ))
        });
        loop {
            match result {
                Ok(reply) => {
                    self.acknowledged(&msg, &reply, sent_at);
                    break;
                }
                Err(e) => {
                    self.pause_after_failure(client, &msg, &e).await;
                    let Some(again) = self.send(client, context, &msg).await else {
                        break;
                    };
                    self.resend_window(client, context).await;
                    result = again.await;
                }
            }
        }
        drop(charge);
        self.in_hand -= 1;
        self.report();
    }

    /// After a failed acknowledgement the rest of the window has most likely failed too (NATS
    /// restarted, the stream was not there yet): publish all of it again now, in order, so one
    /// outage costs one pause rather than one per message. Messages the stream already holds come
    /// back flagged duplicate and are not stored twice.
    async fn resend_window(&mut self, client: &Client, context: &jetstream::Context) {
        let window = std::mem::take(&mut self.in_flight);
        for InFlight {
            msg,
            sent_at,
            charge,
            ..
        } in window
        {
            if let Some(ack) = self.send(client, context, &msg).await {
                self.in_flight.push_back(InFlight {
                    msg,
                    ack: awaitable(ack),
                    sent_at,
                    charge,
                });
            }
        }
    }

    /// A message over the server's `max_payload` can never be published: counted, logged, skipped.
    fn too_large(&self, subject: &str, bytes: usize, error: &dyn std::error::Error) {
        self.metrics.publish_errors.inc();
        self.metrics.dropped_too_large.inc();
        tracing::error!(watch = %self.metrics.watch, subject, bytes, error = %error, "message exceeds the NATS server's max_payload; not published (raise max_payload, or publish objects with a smaller payload mode)");
    }

    /// Counts and logs a failed attempt, then waits before the next: until the connection is
    /// back if it is down, else a growing backoff.
    async fn pause_after_failure(
        &mut self,
        client: &Client,
        msg: &OutMessage,
        error: &(dyn std::error::Error + Send + Sync),
    ) {
        self.metrics.publish_errors.inc();
        let delay = self.retry.next_delay();
        let error = error.to_string();
        tracing::warn!(watch = %self.metrics.watch, subject = %msg.subject, error, retry_in = ?delay, "publish to NATS failed; retrying with the same Nats-Msg-Id");
        tokio::time::sleep(delay).await;
        while client.connection_state() != async_nats::connection::State::Connected {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An acknowledgement that can be awaited where it is kept (its timeout starts at the first wait).
fn awaitable(ack: PublishAckFuture) -> MaybeDone<Ack> {
    MaybeDone::Future(std::future::IntoFuture::into_future(ack))
}

/// A flush that owns its client, so it can outlive the call that started it.
async fn flush_owned(client: Client) -> Result<(), async_nats::client::FlushError> {
    client.flush().await
}
