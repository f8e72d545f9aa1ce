//! The ports of a delivery, as traits: the [`Sink`] event messages go to, the [`Log`] records
//! are stored in and the [`MirrorSink`] objects are kept in; and the [`Sinks`] a message fans out
//! to, with the handoff of a watch line's budget charge to its message.

use std::future::Future;

use tokio::time::Instant;

use crate::budget::Charge;
use crate::dedupe::{SavedUid, SavedVersion};
use crate::event::ObjectMeta;
use crate::mirror::MirrorKey;
use crate::publish::message::OutMessage;
use crate::state::Presence;

/// Where messages go: publishes them in order and says how many it has settled (flushed to the
/// server in core mode, acknowledged in JetStream mode). Implemented by the outboxes
/// (`src/publish/outbox/`).
pub(crate) trait Sink {
    /// Messages handed to [`publish`](Self::publish) so far: the next one is number
    /// `published()` (from 0).
    fn published(&self) -> u64;
    /// How many of the first messages published NATS has taken: what a crash can no longer
    /// lose.
    fn settled(&self) -> u64;
    /// A charge of `bytes` against the budget the sink holds messages against.
    fn charge(&self, bytes: usize) -> Charge;
    /// Takes one message with its budget charge (held until NATS has taken it); returns once
    /// the sink has room for the next. The message counts in [`published`](Self::published)
    /// from the first poll, and is in the sink from then on: cancel-safe, a publish dropped
    /// while it waits (for room, or for a retry) loses nothing, and the sink places its message
    /// before any later one at its next call (the outboxes' cancellation tests are in
    /// `src/publish/outbox/tests.rs`, the delivery's in `src/delivery/tests.rs`).
    fn publish(&mut self, message: OutMessage, charge: Charge) -> impl Future<Output = ()>;
    /// Waits until no message of the objects `keys` is held or unacknowledged, so a JetStream
    /// write made afterwards is stored after them. Cancel-safe.
    fn settle_objects(&mut self, keys: &[u64]) -> impl Future<Output = ()>;
    /// Whether [`flush_idle`](Self::flush_idle) has something to do.
    fn unflushed(&self) -> bool;
    /// For while the watch waits for its next line. Cancel-safe.
    fn flush_idle(&mut self) -> impl Future<Output = ()>;
    /// Waits until everything published is settled; `true` when it is. Cancel-safe.
    fn settle(&mut self) -> impl Future<Output = bool>;
}

/// Where objects are recorded before their first message goes out, and confirmations of
/// settled messages are stored: one write at a time. Implemented by the state's journal.
pub(crate) trait Log {
    /// Records an object about to be published for the first time (or deleted); the position of
    /// the record, `None` when messages need not wait (the journal is suspended).
    fn record(&mut self, meta: &ObjectMeta, presence: Presence) -> Option<u64>;
    /// The message of `uid` at `version` reached NATS.
    fn confirm(&mut self, uid: SavedUid<'_>, version: SavedVersion<'_>, presence: Presence);
    /// Every event up to `position` reached NATS.
    fn confirm_position(&mut self, position: &str);
    /// Objects recorded and not yet being written.
    fn pending(&self) -> usize;
    /// Records or confirmations wait and no write is under way.
    fn can_begin_write(&self) -> bool;
    /// When confirmations alone wait for the pace: the moment their write may begin.
    fn confirmations_due(&self) -> Option<Instant>;
    fn is_writing(&self) -> bool;
    /// Every record at a position below this is stored.
    fn stored_below(&self) -> u64;
    fn begin_write(&mut self);
    /// Waits until the write under way is stored (forever without one). Cancel-safe.
    fn written(&mut self) -> impl Future<Output = ()>;
}

/// Where each object's current state is kept besides its events: the mirror bucket
/// (docs/mirror.md). Implemented by [`crate::mirror::Mirror`].
pub(crate) trait MirrorSink {
    /// The object's key, and the version a write of it carries.
    fn key(&self, meta: &ObjectMeta) -> MirrorKey;
    /// Takes the write of `object` under `key`: a put with `message`'s headers, or for a DELETED
    /// a delete. Returns once the write is queued, in order after the earlier ones.
    fn write(
        &mut self,
        key: MirrorKey,
        message: &OutMessage,
        object: bytes::Bytes,
    ) -> impl Future<Output = ()>;
}

/// The sinks a message fans out to: the event sink, with the budget charge of the watch line
/// being handled, and the mirror. The first message sent while the line is handled takes the
/// line's charge over (made its own size), so the line's bytes are counted without a gap between
/// the stream that read them and the sink.
pub(crate) struct Sinks<S, M> {
    pub(super) sink: S,
    pub(super) line: Charge,
    /// `None`: the watch is not mirrored.
    pub(super) mirror: Option<M>,
}

impl<S: Sink, M> Sinks<S, M> {
    /// Hands `message` to the sink, with the line's charge if the line still has one.
    /// The charge is settled when this is called, which is when the caller awaits it.
    pub(super) fn publish(&mut self, message: OutMessage) -> impl Future<Output = ()> + '_ {
        let charge = match std::mem::take(&mut self.line) {
            mut line if line.bytes() > 0 => {
                line.set(message.wire_len());
                line
            }
            _ => self.sink.charge(message.wire_len()),
        };
        self.sink.publish(message, charge)
    }
}
