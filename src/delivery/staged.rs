//! Between the watch task and its sink (the outbox): messages held back until the journal has
//! stored the records of their objects, and confirmations of the messages NATS has taken, which
//! the journal stores next (docs/durable-state.md).
//!
//! A confirmation says what the memory knew when a message was made: the object and version it
//! carried, and the watch's resourceVersion once every message made before it reached NATS (the
//! position the watch resumes from after a crash). Messages reach the outbox out of the order
//! they were made (a held one goes out after later messages of other objects), and the outbox
//! settles them in its own order; so each message carries the number it was made with, and a
//! position is confirmed only once the lowest number not yet settled is past it.

use std::collections::VecDeque;

use super::ports::{Log, MirrorSink, Sink, Sinks};
use crate::dedupe::{SavedUid, SavedVersion};
use crate::event::{EventType, ObjectMeta, ResourceVersion};
use crate::mirror::MirrorKey;
use crate::publish::OutMessage;
use crate::state::Presence;

/// The most messages held back for the journal, and the most journal entries of one write.
pub(super) const MAX_HELD: usize = 256;

/// Messages held back until the journal has stored the records of their objects, and what is
/// published but not yet confirmed.
pub(super) struct Staged<L> {
    /// `None` when state is not durable: nothing is held, nothing confirmed.
    pub(super) journal: Option<L>,
    /// In order. An object's messages are here in the order they were made, with non-decreasing
    /// positions, so releasing those whose record is stored keeps per-object order.
    held: VecDeque<HeldMessage>,
    /// Messages made so far: the next one made gets this number.
    made: u64,
    /// Messages handed to the outbox and not yet settled, in the outbox's order.
    sent: VecDeque<Sent>,
    /// The made numbers of `sent`, increasing, each the lowest of those sent after it (a queue's
    /// running minimum): the front is the lowest made number not yet settled.
    lowest: VecDeque<u64>,
    /// Watch positions not yet confirmed: each with how many messages were made when it was
    /// reached.
    positions: VecDeque<(u64, ResourceVersion)>,
}

/// A message held back, and the journal position whose record must be stored before it goes
/// out.
struct HeldMessage {
    position: u64,
    message: OutMessage,
    made: u64,
    confirm: Option<Confirm>,
}

/// A message in the outbox, until it is settled.
struct Sent {
    /// Its number in the sink ([`Sink::published`]).
    seq: u64,
    made: u64,
    confirm: Confirm,
}

/// Where one message goes: the mirror, its event's way to NATS, or both.
pub(crate) struct Route {
    /// Its object's key in the mirror (`None`: the watch is not mirrored).
    pub(crate) mirror: Option<MirrorKey>,
    /// Its event's way to NATS (`None`: only the mirror takes it).
    pub(crate) event: Option<EventRoute>,
}

/// How an event message goes to NATS.
pub(crate) struct EventRoute {
    /// The journal position of the record it waits for (its object was just recorded).
    pub(crate) recorded: Option<u64>,
    /// What the journal confirms once NATS has taken it (`None`: nothing).
    pub(crate) confirm: Option<Confirm>,
}

/// What a message's confirmation says: the object's uid and the version it carried.
pub(crate) struct Confirm {
    uid: OwnedUid,
    version: ResourceVersion,
    presence: Presence,
}

enum OwnedUid {
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Confirm {
    fn uid(&self) -> SavedUid<'_> {
        match &self.uid {
            OwnedUid::Uuid(bytes) => SavedUid::Uuid(*bytes),
            OwnedUid::Text(text) => SavedUid::Text(text),
        }
    }
}

impl<L: Log> Staged<L> {
    pub(super) fn new() -> Staged<L> {
        Staged {
            journal: None,
            held: VecDeque::new(),
            made: 0,
            sent: VecDeque::new(),
            lowest: VecDeque::new(),
            positions: VecDeque::new(),
        }
    }

    /// The object is about to be published for the first time, or its deletion:
    /// the position of the record its message waits for (`None`: state is not durable, or the
    /// journal is suspended).
    pub(super) fn record(&mut self, meta: &ObjectMeta, presence: Presence) -> Option<u64> {
        self.journal.as_mut()?.record(meta, presence)
    }

    /// What the confirmation of a message about `meta` will say (`None`: state is not durable).
    pub(super) fn confirmation(&self, meta: &ObjectMeta, event_type: EventType) -> Option<Confirm> {
        self.journal.as_ref()?;
        let uid = match SavedUid::of(&meta.uid) {
            SavedUid::Uuid(bytes) => OwnedUid::Uuid(bytes),
            SavedUid::Text(text) => OwnedUid::Text(text.into()),
        };
        Some(Confirm {
            uid,
            version: meta.resource_version.clone(),
            presence: Presence::of(event_type),
        })
    }

    /// Every event up to `position` has been handled (its messages made): confirmed once they
    /// are settled. `None`: no consistent position (a list is under way).
    pub(super) fn reached(&mut self, position: Option<&ResourceVersion>) {
        let (Some(position), Some(_)) = (position, &self.journal) else {
            return;
        };
        match self.positions.back_mut() {
            Some((made, last)) if *made == self.made => *last = position.clone(),
            _ => self.positions.push_back((self.made, position.clone())),
        }
    }

    /// Confirms, into the journal's next record, the messages among the first `settled` handed
    /// to the outbox, and the latest position every message made before is settled for.
    pub(super) fn confirm_settled(&mut self, settled: u64) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        while self.sent.front().is_some_and(|s| s.seq < settled) {
            let Some(sent) = self.sent.pop_front() else {
                break;
            };
            if self.lowest.front() == Some(&sent.made) {
                self.lowest.pop_front();
            }
            let c = &sent.confirm;
            journal.confirm(
                c.uid(),
                SavedVersion::of_text(c.version.as_str()),
                c.presence,
            );
        }
        let unsettled = [
            self.held.front().map(|h| h.made),
            self.lowest.front().copied(),
        ];
        let watermark = unsettled.into_iter().flatten().min().unwrap_or(self.made);
        let mut confirmed = None;
        while self
            .positions
            .front()
            .is_some_and(|(made, _)| *made <= watermark)
        {
            confirmed = self.positions.pop_front();
        }
        if let Some((_, position)) = confirmed {
            journal.confirm_position(position.as_str());
        }
    }

    /// Hands `message` to the outbox, noting it for its confirmation.
    async fn send<S: Sink, M>(
        &mut self,
        message: OutMessage,
        made: u64,
        confirm: Option<Confirm>,
        out: &mut Sinks<S, M>,
    ) {
        if let Some(confirm) = confirm {
            while self.lowest.back().is_some_and(|&m| m > made) {
                self.lowest.pop_back();
            }
            self.lowest.push_back(made);
            self.sent.push_back(Sent {
                seq: out.sink.published(),
                made,
                confirm,
            });
        }
        out.publish(message).await;
    }

    pub(super) fn is_writing(&self) -> bool {
        self.journal.as_ref().is_some_and(L::is_writing)
    }

    /// Records or confirmations wait and no write is under way (confirmations alone: and the
    /// pace allows it).
    pub(super) fn can_begin_write(&self) -> bool {
        self.journal.as_ref().is_some_and(L::can_begin_write)
    }

    /// When confirmations alone wait for the pace: the moment their write may begin.
    pub(super) fn confirmations_due(&self) -> Option<tokio::time::Instant> {
        self.journal.as_ref().and_then(L::confirmations_due)
    }

    /// Messages held back until the journal has stored their records.
    pub(super) fn held_back(&self) -> usize {
        self.held.len()
    }

    pub(super) fn full(&self) -> bool {
        self.held.len() >= MAX_HELD
            || self
                .journal
                .as_ref()
                .is_some_and(|j| j.pending() >= MAX_HELD)
    }

    /// Hands the object of `message` to the mirror, then publishes `message`, or holds it if it
    /// waits for the record at `route`'s position or follows a held message of its object.
    ///
    /// The mirror takes the object when the delivery does, in the order the messages are made:
    /// before the message waits for its record or goes to NATS (docs/delivery.md, "The mirror").
    /// The object leaves the message here whether or not the watch is mirrored: it shares the
    /// watch line's buffer, which a held message must not keep alive (below).
    ///
    /// A held message gets a payload of its own: the payload is a slice of the buffer the watch
    /// line was read into, and one held slice keeps that whole buffer (hundreds of KiB) alive,
    /// so the HTTP client cannot reuse it and reads every following line into fresh, cold
    /// memory. Copying the few KiB of the few messages held is far cheaper (and keeps the
    /// peak RSS at what it is without durable state).
    pub(super) async fn submit<S: Sink, M: MirrorSink>(
        &mut self,
        mut message: OutMessage,
        route: Route,
        out: &mut Sinks<S, M>,
    ) {
        let object = std::mem::take(&mut message.object);
        // Rule 7: the mirror takes the object before the message waits or goes out.
        if let (Some(mirror), Some(key)) = (&mut out.mirror, route.mirror) {
            mirror.write(key, &message, object).await;
        }
        let Some(EventRoute { recorded, confirm }) = route.event else {
            return;
        };
        let made = self.made;
        self.made += 1;
        let waits_for = recorded.or_else(|| {
            self.held
                .iter()
                .rev()
                .find(|h| h.message.object_key == message.object_key)
                .map(|h| h.position)
        });
        let Some(position) = waits_for else {
            return self.send(message, made, confirm, out).await;
        };
        message.payload = bytes::Bytes::copy_from_slice(&message.payload);
        self.held.push_back(HeldMessage {
            position,
            message,
            made,
            confirm,
        });
        if self.full() {
            self.flush(out).await;
        }
    }

    /// Starts writing what was recorded or confirmed, unless a write is under way. A deletion's
    /// record waits until the object's earlier messages are acknowledged: after a crash they
    /// would be dropped as older than the deletion.
    pub(super) async fn begin_write<S: Sink, M>(&mut self, out: &mut Sinks<S, M>) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        if !journal.can_begin_write() {
            return;
        }
        let position = journal.stored_below();
        let deleted: Vec<u64> = self
            .held
            .iter()
            .filter(|h| h.position == position && h.message.event_type == EventType::Deleted)
            .map(|h| h.message.object_key)
            .collect();
        if !deleted.is_empty() {
            out.sink.settle_objects(&deleted).await;
        }
        journal.begin_write();
    }

    /// Publishes, in order, the held messages whose records are stored.
    pub(super) async fn release<S: Sink, M>(&mut self, out: &mut Sinks<S, M>) {
        let Some(stored_below) = self.journal.as_ref().map(L::stored_below) else {
            return;
        };
        let mut index = 0;
        while index < self.held.len() {
            if self.held[index].position >= stored_below {
                index += 1;
            } else if let Some(held) = self.held.remove(index) {
                self.send(held.message, held.made, held.confirm, out).await;
            }
        }
    }

    /// Writes everything recorded, then publishes everything held, in order.
    pub(super) async fn flush<S: Sink, M>(&mut self, out: &mut Sinks<S, M>) {
        loop {
            self.begin_write(out).await;
            let Some(journal) = self.journal.as_mut().filter(|j| j.is_writing()) else {
                break;
            };
            journal.written().await;
            self.release(out).await;
        }
        debug_assert!(self.held.is_empty());
    }
}

/// Waits until the journal's write under way is stored; forever without one.
pub(crate) async fn written<L: Log>(journal: &mut Option<L>) {
    match journal {
        Some(journal) => journal.written().await,
        None => std::future::pending().await,
    }
}
