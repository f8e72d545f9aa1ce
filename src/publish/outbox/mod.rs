//! Publishing one watch's messages, in order, with a bounded window of unacknowledged ones: the
//! [`Outbox`], which is one of two outboxes by the configured mode, [`CoreOutbox`] (core NATS:
//! handed over once, settled by a flush) and [`JetStreamOutbox`] (acknowledged, retried, one
//! message of an object in flight at a time). docs/design.md ("Ordering rules") states the promise
//! they keep.
//!
//! The outbox is where backpressure comes from: a publish returns only when the message is in
//! the batch it holds or accepted by the client (core NATS) or when the window has room
//! (JetStream), so a slow or absent NATS stops the watch from reading the API server instead of
//! filling memory.
//!
//! Messages (core and JetStream) are handed to the client in batches of up to
//! [`batch::HANDOVER_BYTES`], not one by one ([`batch`]): the client's connection task writes
//! whatever it has each time it runs, and it runs whenever the watch task waits, which is after
//! every body chunk hyper hands over (one read of the watch connection is several chunks: one
//! per HTTP chunk it holds a part of). Handed one by one, a read's messages would go out in one
//! `writev` per chunk; held until the watch is really idle (it has yielded once and no line
//! came) or a batch is full, they go out in one.
//!
//! Every message holds its bytes against the process's byte budget ([`crate::budget`]) until NATS
//! has taken it: acknowledged (JetStream) or flushed to the socket (core). While the budget is
//! spent, a publish first waits for this target's own messages to be taken, so the watch stops
//! reading.
//!
//! Each outbox reaches NATS through a small trait ([`link`]), implemented by the real client
//! and, in the unit tests (`tests.rs`), by fakes whose publishes, flushes and acknowledgements
//! the test completes. Every await of either outbox is cancel-safe: a message keeps its place in
//! the outbox while it waits or is retried, so a call dropped anywhere loses nothing and the
//! next call goes on from where it stopped. The watch task holds the [`Outbox`] (a match per
//! call) rather than being generic over the two, which would compile the whole task twice.
//!
//! # The rules and their tests
//!
//! Each rule has a unit test in `tests.rs` that fails with a mutation of the real code planted
//! (`scripts/check-delivery-rules` plants each in turn, as rules O1–O7):
//!
//! - O1: a second message of an object waits until the first is acknowledged; other objects'
//!   messages go meanwhile (`second_message_of_an_object_waits_for_the_first_ack`; mutations:
//!   a held, or an in-flight, message of the object does not hold the next back).
//! - O2: the window never holds more than `max_in_flight` messages
//!   (`window_never_holds_more_than_max_in_flight`; mutation: `>` for `>=`).
//! - O3: a failed acknowledgement sends the message and the rest of the window again, in order,
//!   with the same `Nats-Msg-Id`, losing and reordering nothing
//!   (`failed_ack_resends_the_window_in_order`; mutation: only the failed one is sent again).
//! - O4: `settled()` counts a prefix of acknowledged messages, also when acknowledgements come
//!   out of order (`settled_counts_an_acknowledged_prefix`; mutation: the window left out).
//! - O5: a publish, settle or `flush_idle` dropped at any await loses no message and leaves the
//!   counts right (`dropped_publish_keeps_its_message`, `core_dropped_publish_keeps_its_message`:
//!   mutation: a publish forgets the messages of dropped ones; `dropped_send_and_retry_lose_nothing`:
//!   mutation: a message leaves the batch before the client has taken it).
//! - O6: a message's bytes go back to the budget when NATS has taken it, not before
//!   (`jetstream_charge_is_released_at_the_ack`, `core_charge_is_released_at_the_flush`;
//!   mutations: given back when sent, when handed over).
//! - O7: core: `settled()` moves only by a flush that began after the hand-over
//!   (`core_settles_after_a_flush_begun_after_the_hand_over`; mutation: a flush settles what was
//!   handed over when it returned).
//! - O8: with leader election, nothing is handed to the client once the replica's term has
//!   lapsed by the clock, also what was held or sent before, and the rest of a hand-over that
//!   waited for room in the client's queue (`core_hands_nothing_over_past_the_term`,
//!   `core_checks_the_term_before_each_message_it_hands_over`,
//!   `jetstream_sends_nothing_past_the_term`; mutations: the check left out of the core
//!   hand-over, made once a hand-over, left out of the JetStream send).

mod batch;
mod core_outbox;
mod jetstream_outbox;
mod link;
#[cfg(test)]
mod tests;

use crate::delivery::ports::Sink;
use async_nats::{jetstream, Client};

use crate::budget::{Budget, Charge};
use crate::leader::TermClock;
use crate::publish::message::OutMessage;
use crate::publish::metrics::PublishMetrics;
use crate::telemetry::target::TargetGauges;
pub(crate) use core_outbox::CoreOutbox;
pub(crate) use jetstream_outbox::JetStreamOutbox;
pub(crate) use link::{CoreLink, JetStreamClient, JetStreamLink};

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

/// The publishing side of one watch target: the outbox of the configured mode.
pub(crate) struct Outbox(Mode);

enum Mode {
    Core(CoreOutbox<Client>),
    JetStream(JetStreamOutbox<JetStreamClient>),
}

/// Calls `$call` on the outbox of the configured mode.
macro_rules! each_mode {
    ($outbox:expr, $inner:ident => $call:expr) => {
        match $outbox {
            Mode::Core($inner) => $call,
            Mode::JetStream($inner) => $call,
        }
    };
}

/// What an [`Outbox`] is made of, besides its connection.
pub(crate) struct OutboxParts {
    /// Bounds unacknowledged JetStream publishes (unused in core mode).
    pub(crate) max_in_flight: usize,
    pub(crate) metrics: PublishMetrics,
    pub(crate) gauges: TargetGauges,
    /// Holds every message's bytes until NATS has taken it.
    pub(crate) budget: Budget,
    /// Messages go to the client only while it is in force (leader election).
    pub(crate) term: TermClock,
}

impl Outbox {
    pub(crate) fn new(nats: Nats, parts: OutboxParts) -> Outbox {
        let OutboxParts {
            max_in_flight,
            metrics,
            gauges,
            budget,
            term,
        } = parts;
        let mut outbox = Outbox(match nats {
            Nats::Core(client) => Mode::Core(CoreOutbox::new(client, metrics, gauges, budget)),
            Nats::JetStream { client, context } => Mode::JetStream(JetStreamOutbox::new(
                JetStreamClient { client, context },
                max_in_flight,
                metrics,
                gauges,
                budget,
            )),
        });
        each_mode!(&mut outbox.0, inner => inner.set_term(term));
        outbox
    }

    /// The largest message (payload and headers) the connected server accepts; `None` before
    /// the first connection has told.
    pub(crate) fn max_payload(&self) -> Option<usize> {
        let max = match &self.0 {
            Mode::Core(core) => CoreLink::max_payload(core.link()),
            Mode::JetStream(js) => JetStreamLink::max_payload(js.link()),
        };
        Some(max).filter(|&n| n > 0)
    }
}

impl Sink for Outbox {
    /// Messages published so far: the next one published is number `published()` (from 0).
    fn published(&self) -> u64 {
        each_mode!(&self.0, outbox => outbox.published())
    }

    /// How many of the first messages published NATS has taken (flushed to the server in core
    /// mode, acknowledged in JetStream mode): what a crash can no longer lose.
    fn settled(&self) -> u64 {
        each_mode!(&self.0, outbox => outbox.settled())
    }

    /// A charge of `bytes` against the budget this outbox holds messages against.
    fn charge(&self, bytes: usize) -> Charge {
        each_mode!(&self.0, outbox => outbox.charge(bytes))
    }

    /// Hands one message to NATS; returns once it is held for the next batch (JetStream: with
    /// room for it in the ack window) or accepted by the client, and the byte budget is not
    /// spent by this target's messages. Cancel-safe.
    ///
    /// `charge` holds the message's bytes against the budget until NATS has taken it (the
    /// watch line's charge taken over, or [`charge`](Self::charge)).
    async fn publish(&mut self, msg: OutMessage, charge: Charge) {
        each_mode!(&mut self.0, outbox => outbox.publish(msg, charge).await);
    }

    /// Whether [`flush_idle`](Self::flush_idle) has something to do: held messages, messages
    /// handed to the core client and not yet known to be on the socket, or a JetStream
    /// acknowledgement that may still arrive.
    fn unflushed(&self) -> bool {
        each_mode!(&self.0, outbox => outbox.unflushed())
    }

    /// Waits until everything handed over is acknowledged (JetStream) or has reached the server
    /// (core: a flush round trip). `true` when it has: then the watch may checkpoint.
    async fn settle(&mut self) -> bool {
        each_mode!(&mut self.0, outbox => outbox.settle().await)
    }

    /// Waits until no message of the objects `keys` (their `object_key`s) is held or
    /// unacknowledged (JetStream), so that a JetStream write made afterwards on the same
    /// connection is stored only after them. Both modes first hand the held messages to the
    /// client, so they are in that order.
    async fn settle_objects(&mut self, keys: &[u64]) {
        each_mode!(&mut self.0, outbox => outbox.settle_objects(keys).await);
    }

    /// For while the watch waits for its next line: hands the held messages to the client once
    /// it has yielded and no line came, then flushes them (core) or collects the
    /// acknowledgements that arrive (JetStream). Cancel-safe.
    async fn flush_idle(&mut self) {
        each_mode!(&mut self.0, outbox => outbox.flush_idle().await);
    }
}
