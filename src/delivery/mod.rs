//! Delivery: the order in which one watch's messages reach NATS and its journal records reach
//! the state bucket, and what a checkpoint or a resume may count as delivered
//! (docs/durable-state.md, docs/delivery.md).
//!
//! The watch task's outlet ([`crate::watcher`]) hands every message it makes to a [`Delivery`],
//! with its [`Route`]: the object's mirror key, the journal position of the record the message
//! waits for; the watch task drives the delivery while it waits for its next line
//! ([`Delivery::idle_sides`], [`Delivery::begin_write`], [`Delivery::release`]). The delivery
//! owns the messages held behind a journal record ([`staged`]), the confirmations of the
//! messages the sink has settled, the budget charge of the watch line being handled, and the
//! three sinks it fans each message out to and orders: the [`Sink`] of event messages (the
//! outbox, [`crate::publish::Outbox`]), the [`Log`] (the state's journal,
//! [`crate::state::Journal`]) and the [`MirrorSink`] (the mirror bucket's writer,
//! [`crate::mirror::Mirror`]). All three are traits so the rules run against in-memory fakes in
//! the unit tests; at run time the delivery is generic over the real types, so no call goes
//! through a vtable.
//!
//! # The rules and their tests
//!
//! Each rule has unit tests in `src/delivery/tests.rs`, and each test fails with a one-line
//! mutation of the real code planted (`scripts/check-delivery-rules` plants each in turn and
//! names the tests that catch it):
//!
//! 1. A message never goes out before its object's journal record is stored
//!    (`message_waits_for_its_record`; caught mutations: `Staged::release` compares `>` instead
//!    of `>=` with `stored_below`; `submit` ignores `recorded`).
//! 2. A DELETED's record waits until its object's earlier messages are settled
//!    (`deletion_record_waits_for_earlier_messages`; mutation: `Staged::begin_write` skips
//!    `settle_objects`).
//! 3. A confirmed position (what a checkpoint or a resume uses) never covers a message not yet
//!    settled, also when messages reach the sink out of the order they were made and
//!    acknowledgements come out of order (`confirmed_position_never_covers_unsettled`:
//!    mutation: `confirm_settled` leaves held messages out of the watermark;
//!    `out_of_order_acks_confirm_in_order`, `position_follows_the_lowest_unsettled_message`:
//!    mutation: `send` keeps `lowest` as a plain queue instead of a running minimum).
//! 4. Per-object order: a later message of an object waits behind its held one
//!    (`later_message_of_held_object_waits`; mutation: `submit` does not look for a held
//!    message of the same object). The JetStream window's own rule (two messages of one object
//!    never in flight together) is the outbox's, unit-tested with its other rules in
//!    `src/publish/outbox/tests.rs` (the mutations for them are in the same script) and checked
//!    end to end in `tests/delivery.rs` and `tests/jetstream.rs`.
//! 5. Cancellation at any await of the delivery leaves its counts right: a submit dropped while
//!    the sink waits for room, and idle waits, a release and a write dropped half-way, lose no
//!    message, send none twice, confirm nothing unsettled and keep the budget's bytes equal to
//!    what the sink holds (`cancelled_submit_keeps_counts`: mutation: `send` notes the message
//!    for confirmation after awaiting the sink; `cancelled_idle_wait_keeps_counts`: mutation:
//!    `begin_write` begins the journal write before awaiting `settle_objects`).
//! 6. The budget charge of a watch line is taken over by its first message sent (made the
//!    message's size), given back when the line is done, and an emptied charge is never handed
//!    over again (`line_charge_moves_to_its_message`: mutations: `Sinks::publish` leaves the
//!    line's charge in place; `line_done` keeps it; `line_charge_is_not_handed_over_twice`:
//!    mutation: `Sinks::publish` takes the line's charge even when it is empty).
//! 7. The mirror takes an object's write when the delivery takes its message, in the order the
//!    messages are made, before the message waits for its journal record or goes to NATS; a
//!    write for the mirror alone (no event message) goes the same way
//!    (`mirror_writes_go_in_the_order_messages_are_made`: mutation: `submit` hands the object to
//!    the mirror only once its message is sent). So the bucket may show a version before NATS has
//!    taken its event, never a version older than one it showed (docs/delivery.md, "The mirror").

mod adapters;
pub(crate) mod ports;
mod staged;
#[cfg(test)]
mod tests;

use std::future::Future;

use tokio::time::Instant;

use crate::budget::Charge;
use crate::event::{EventType, ObjectMeta, ResourceVersion};
use crate::mirror::MirrorKey;
use crate::publish::OutMessage;
use crate::state::Presence;
use ports::Sinks;
use staged::Staged;

pub(crate) use ports::{Log, MirrorSink, Sink};
pub(crate) use staged::written;

pub(crate) use staged::{Confirm, EventRoute, Route};

/// One watch's delivery: its event sink, its journal (when state is durable), its mirror (when
/// the watch is mirrored) and the rules between them (see the module documentation).
pub(crate) struct Delivery<S, L, M> {
    out: Sinks<S, M>,
    staged: Staged<L>,
}

impl<S: Sink, L: Log, M: MirrorSink> Delivery<S, L, M> {
    pub(crate) fn new(sink: S, mirror: Option<M>) -> Delivery<S, L, M> {
        Delivery {
            out: Sinks {
                sink,
                line: Charge::none(),
                mirror,
            },
            staged: Staged::new(),
        }
    }

    /// The mirror, when the watch is mirrored.
    pub(crate) fn mirror(&self) -> Option<&M> {
        self.out.mirror.as_ref()
    }

    pub(crate) fn mirror_mut(&mut self) -> Option<&mut M> {
        self.out.mirror.as_mut()
    }

    /// Takes the mirror out, for the end of the watch.
    pub(crate) fn take_mirror(&mut self) -> Option<M> {
        self.out.mirror.take()
    }

    /// The object's key in the mirror, when the watch is mirrored.
    pub(crate) fn mirror_key(&self, meta: &ObjectMeta) -> Option<MirrorKey> {
        Some(self.out.mirror.as_ref()?.key(meta))
    }

    /// Makes the delivery durable with `journal` (`None`: state is not durable).
    pub(crate) fn set_journal(&mut self, journal: Option<L>) {
        self.staged.journal = journal;
    }

    pub(crate) fn journal(&self) -> Option<&L> {
        self.staged.journal.as_ref()
    }

    pub(crate) fn sink(&self) -> &S {
        &self.out.sink
    }

    /// The object is about to be published for the first time, or its deletion:
    /// the position of the record its message waits for (`None`: it need not wait).
    pub(crate) fn record(&mut self, meta: &ObjectMeta, presence: Presence) -> Option<u64> {
        self.staged.record(meta, presence)
    }

    /// What the confirmation of a message about `meta` will say (`None`: state is not durable).
    pub(crate) fn confirmation(&self, meta: &ObjectMeta, event_type: EventType) -> Option<Confirm> {
        self.staged.confirmation(meta, event_type)
    }

    /// A watch line was read: its budget charge goes to its first message sent.
    pub(crate) fn line_read(&mut self, charge: Charge) {
        self.out.line = charge;
    }

    /// The line is handled: every event up to `position` has its messages made (`None`: no
    /// consistent position). Whatever of the line's charge no message took is given back.
    pub(crate) fn line_done(&mut self, position: Option<&ResourceVersion>) {
        self.staged.reached(position);
        self.out.line = Charge::none();
    }

    /// Fans `message` out as its `route` says: its object to the mirror, then the message to
    /// the sink, or held until the record it waits for (or the held message of its object it
    /// follows) is stored.
    ///
    /// Returns the staging's own future rather than wrapping it in one more (a wrapper's state
    /// would be copied on every event).
    pub(crate) fn submit(
        &mut self,
        message: OutMessage,
        route: Route,
    ) -> impl Future<Output = ()> + '_ {
        self.staged.submit(message, route, &mut self.out)
    }

    /// Messages held back until the journal has stored their objects' records.
    pub(crate) fn held_back(&self) -> usize {
        self.staged.held_back()
    }

    /// Writes and publishes what is held once as much is held as one write takes.
    pub(crate) async fn flush_if_full(&mut self) {
        if self.staged.full() {
            self.staged.flush(&mut self.out).await;
        }
    }

    /// Writes everything recorded, publishes everything held, then waits until the sink has
    /// settled all of it; `true` when it has (then a checkpoint may be taken).
    pub(crate) async fn settle(&mut self) -> bool {
        self.staged.flush(&mut self.out).await;
        self.out.sink.settle().await
    }

    /// Confirms, into the journal's next record, what the sink has settled.
    pub(crate) fn confirm_settled(&mut self) {
        self.staged.confirm_settled(self.out.sink.settled());
    }

    /// The state of the waits, for the watch loop's select; read before
    /// [`idle_sides`](Self::idle_sides).
    pub(crate) fn idle_state(&self) -> IdleState {
        let recorded = self.staged.can_begin_write();
        IdleState {
            writing: self.staged.is_writing(),
            recorded,
            confirmations_due: self.staged.confirmations_due().filter(|_| !recorded),
            unflushed: self.out.sink.unflushed(),
        }
    }

    /// The journal and the sink, for the two waits of a watch waiting for its next line, each
    /// cancel-safe: [`written`] (then [`release`](Self::release)) and the sink's idle flush.
    /// The watch loop builds both futures in place in its select: futures built here and
    /// returned would be copied on every turn of the loop, which is once per event.
    pub(crate) fn idle_sides(&mut self) -> (&mut Option<L>, &mut S) {
        (&mut self.staged.journal, &mut self.out.sink)
    }

    /// Publishes, in order, the held messages whose records are stored.
    pub(crate) async fn release(&mut self) {
        self.staged.release(&mut self.out).await;
    }

    /// Starts writing what was recorded or confirmed (a deletion's record once its object's
    /// earlier messages are settled).
    pub(crate) async fn begin_write(&mut self) {
        self.staged.begin_write(&mut self.out).await;
    }
}

/// What the watch loop may wait for while no line is ready.
#[derive(Clone, Copy)]
pub(crate) struct IdleState {
    /// A journal write is under way.
    pub(crate) writing: bool,
    /// A write may begin now.
    pub(crate) recorded: bool,
    /// Confirmations alone wait for the pace until then.
    pub(crate) confirmations_due: Option<Instant>,
    /// The sink's idle flush has something to do.
    pub(crate) unflushed: bool,
}
