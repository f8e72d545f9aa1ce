//! The delivery rules (see the module documentation), each run against in-memory fakes of the
//! sink, the journal and the mirror whose progress the test decides: which message NATS has
//! taken and acknowledged (in any order), and when a journal write is stored.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;

use async_nats::header::SerializedHeaders;
use futures_util::FutureExt;
use tokio::time::Instant;

use super::{written, Confirm, Delivery, EventRoute, Log, MirrorSink, Route, Sink};
use crate::budget::{Budget, Charge};
use crate::dedupe::{SavedUid, SavedVersion};
use crate::event::{EventType, ObjectMeta, ResourceVersion};
use crate::mirror::MirrorKey;
use crate::publish::OutMessage;
use crate::state::Presence;

/// "NATS" as the fake sink lets the test run it.
#[derive(Default)]
struct SinkState {
    /// Tags of the messages in the order they reached NATS.
    taken: Vec<String>,
    /// Messages taken and not yet acknowledged: number, object key, budget charge.
    unacked: Vec<(u64, u64, Charge)>,
    acked: BTreeSet<u64>,
    published: u64,
    /// While set, a publish takes its message and then waits (no room in the window).
    blocked: bool,
    budget: Option<Budget>,
}

struct FakeSink(Rc<RefCell<SinkState>>);

impl Sink for FakeSink {
    fn published(&self) -> u64 {
        self.0.borrow().published
    }

    /// A prefix, as the sink's contract says: acknowledgements that come out of order count
    /// once every earlier one has come.
    fn settled(&self) -> u64 {
        let state = self.0.borrow();
        (0..).take_while(|n| state.acked.contains(n)).count() as u64
    }

    fn charge(&self, bytes: usize) -> Charge {
        self.0
            .borrow()
            .budget
            .as_ref()
            .map_or_else(Charge::none, |b| b.charge(bytes))
    }

    fn publish(&mut self, message: OutMessage, charge: Charge) -> impl Future<Output = ()> {
        let state = self.0.clone();
        async move {
            {
                let mut s = state.borrow_mut();
                let seq = s.published;
                s.published += 1;
                s.taken
                    .push(String::from_utf8_lossy(&message.payload).into_owned());
                s.unacked.push((seq, message.object_key, charge));
            }
            std::future::poll_fn(|_| match state.borrow().blocked {
                true => Poll::Pending,
                false => Poll::Ready(()),
            })
            .await;
        }
    }

    fn settle_objects(&mut self, keys: &[u64]) -> impl Future<Output = ()> {
        let (state, keys) = (self.0.clone(), keys.to_vec());
        std::future::poll_fn(move |_| {
            let s = state.borrow();
            match s.unacked.iter().any(|(_, key, _)| keys.contains(key)) {
                true => Poll::Pending,
                false => Poll::Ready(()),
            }
        })
    }

    fn unflushed(&self) -> bool {
        !self.0.borrow().unacked.is_empty()
    }

    /// Waits for acknowledgements that the test has not given: never completes.
    fn flush_idle(&mut self) -> impl Future<Output = ()> {
        std::future::pending()
    }

    fn settle(&mut self) -> impl Future<Output = bool> {
        let state = self.0.clone();
        std::future::poll_fn(move |_| match state.borrow().unacked.is_empty() {
            true => Poll::Ready(true),
            false => Poll::Pending,
        })
    }
}

/// The journal as the fake log lets the test run it.
#[derive(Default)]
struct LogState {
    next: u64,
    /// Names recorded (and whether as deleted) since the last write began.
    batch: Vec<(String, bool)>,
    writing: Option<Vec<(String, bool)>>,
    /// Set by the test: the write under way is stored at the next wait.
    complete: bool,
    /// `uid@version` of each confirmation, in order.
    confirmed: Vec<String>,
    positions: Vec<String>,
}

struct FakeLog(Rc<RefCell<LogState>>);

impl Log for FakeLog {
    fn record(&mut self, meta: &ObjectMeta, presence: Presence) -> Option<u64> {
        let mut s = self.0.borrow_mut();
        s.batch
            .push((meta.name.clone(), presence == Presence::Deleted));
        Some(s.next + u64::from(s.writing.is_some()))
    }

    fn confirm(&mut self, uid: SavedUid<'_>, version: SavedVersion<'_>, _: Presence) {
        let uid = match uid {
            SavedUid::Text(text) => text.to_owned(),
            SavedUid::Uuid(bytes) => format!("{bytes:?}"),
        };
        let confirmation = format!("{uid}@{}", version.to_text());
        self.0.borrow_mut().confirmed.push(confirmation);
    }

    fn confirm_position(&mut self, position: &str) {
        self.0.borrow_mut().positions.push(position.to_owned());
    }

    fn pending(&self) -> usize {
        self.0.borrow().batch.len()
    }

    fn can_begin_write(&self) -> bool {
        let s = self.0.borrow();
        s.writing.is_none() && !s.batch.is_empty()
    }

    fn confirmations_due(&self) -> Option<Instant> {
        None
    }

    fn is_writing(&self) -> bool {
        self.0.borrow().writing.is_some()
    }

    fn stored_below(&self) -> u64 {
        self.0.borrow().next
    }

    fn begin_write(&mut self) {
        let mut s = self.0.borrow_mut();
        if s.writing.is_none() && !s.batch.is_empty() {
            s.writing = Some(std::mem::take(&mut s.batch));
        }
    }

    fn written(&mut self) -> impl Future<Output = ()> {
        let state = self.0.clone();
        std::future::poll_fn(move |_| {
            let mut s = state.borrow_mut();
            if s.writing.is_none() || !s.complete {
                return Poll::Pending;
            }
            s.writing = None;
            s.complete = false;
            s.next += 1;
            Poll::Ready(())
        })
    }
}

/// The mirror bucket as the fake mirror sees it: the tags (`name` and `version`) of the writes
/// it took, in order, each a put or (`-` before it) a delete.
struct FakeMirror(Rc<RefCell<Vec<String>>>);

impl MirrorSink for FakeMirror {
    fn key(&self, meta: &ObjectMeta) -> MirrorKey {
        MirrorKey {
            subject: meta.name.clone(),
            version: meta.resource_version.clone(),
        }
    }

    fn write(
        &mut self,
        key: MirrorKey,
        message: &OutMessage,
        _object: bytes::Bytes,
    ) -> impl Future<Output = ()> {
        let delete = match message.event_type {
            EventType::Deleted => "-",
            EventType::Added | EventType::Modified => "",
        };
        let tag = format!("{delete}{}{}", key.subject, key.version.as_str());
        self.0.borrow_mut().push(tag);
        std::future::ready(())
    }
}

/// A delivery with a durable journal and a mirror, over fakes the test drives.
struct Rig {
    delivery: Delivery<FakeSink, FakeLog, FakeMirror>,
    sink: Rc<RefCell<SinkState>>,
    log: Rc<RefCell<LogState>>,
    mirror: Rc<RefCell<Vec<String>>>,
    budget: Budget,
}

/// NATS acknowledges message `seq`: the sink gives its bytes back.
fn ack(sink: &RefCell<SinkState>, seq: u64) {
    let mut s = sink.borrow_mut();
    s.acked.insert(seq);
    s.unacked.retain(|(n, _, _)| *n != seq);
}

/// Runs `future` to its end; the rules never need to wait for what the test has not given.
fn run<F: Future>(future: F) -> F::Output {
    future.now_or_never().expect("finished without waiting")
}

/// Polls a future once more, after the test changed what it waits for.
fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    let waker = futures_util::task::noop_waker();
    future.poll(&mut std::task::Context::from_waker(&waker))
}

impl Rig {
    fn new() -> Rig {
        let budget = Budget::unlimited();
        let sink = Rc::new(RefCell::new(SinkState {
            budget: Some(budget.clone()),
            ..SinkState::default()
        }));
        let log = Rc::new(RefCell::new(LogState::default()));
        let mirror = Rc::new(RefCell::new(Vec::new()));
        let mut delivery = Delivery::new(FakeSink(sink.clone()), Some(FakeMirror(mirror.clone())));
        delivery.set_journal(Some(FakeLog(log.clone())));
        Rig {
            delivery,
            sink,
            log,
            mirror,
            budget,
        }
    }

    /// A message of `name` at `version` (its tag: `name` and `version`), recorded in the
    /// journal first when `record`; submitted, as far as it goes without waiting.
    fn event(&mut self, name: &str, version: u64, event_type: EventType, record: bool) {
        let (meta, message) = object(name, version, event_type);
        let recorded = match record {
            true => self.delivery.record(&meta, Presence::of(event_type)),
            false => None,
        };
        let confirm = self.delivery.confirmation(&meta, event_type);
        let route = self.route(&meta, Some(EventRoute { recorded, confirm }));
        run(self.delivery.submit(message, route));
    }

    /// A message of `name` at `version` for the mirror alone (no news to publish).
    fn mirror_only(&mut self, name: &str, version: u64, event_type: EventType) {
        let (meta, message) = object(name, version, event_type);
        let route = self.route(&meta, None);
        run(self.delivery.submit(message, route));
    }

    fn route(&self, meta: &ObjectMeta, event: Option<EventRoute>) -> Route {
        Route {
            mirror: self.delivery.mirror_key(meta),
            event,
        }
    }

    /// The writes the mirror took so far.
    fn mirrored(&self) -> Vec<String> {
        self.mirror.borrow().clone()
    }

    /// The journal stores the write under way; the held messages whose record it is go out.
    fn store_write(&mut self) {
        self.log.borrow_mut().complete = true;
        run(written(self.delivery.idle_sides().0));
        run(self.delivery.release());
    }

    fn ack(&self, seq: u64) {
        ack(&self.sink, seq);
    }

    fn taken(&self) -> Vec<String> {
        self.sink.borrow().taken.clone()
    }

    /// The positions confirmed so far, after confirming what is settled (as the watch loop
    /// does each turn).
    fn positions(&mut self) -> Vec<String> {
        self.delivery.confirm_settled();
        self.log.borrow().positions.clone()
    }

    /// Bytes the sink holds against the budget.
    fn sink_bytes(&self) -> usize {
        let s = self.sink.borrow();
        s.unacked.iter().map(|(_, _, c)| c.bytes()).sum()
    }
}

fn object(name: &str, version: u64, event_type: EventType) -> (ObjectMeta, OutMessage) {
    let meta = ObjectMeta {
        uid: format!("uid-{name}"),
        resource_version: ResourceVersion::new(version.to_string()),
        name: name.to_owned(),
        namespace: None,
        generation: None,
    };
    let tag = format!("{name}{version}");
    let message = OutMessage {
        subject: async_nats::Subject::from(format!("k.{tag}")),
        headers: SerializedHeaders::builder(0).finish(),
        payload: bytes::Bytes::from(tag.into_bytes()),
        event_type,
        object: bytes::Bytes::new(),
        object_key: name.bytes().map(u64::from).sum(),
    };
    (meta, message)
}

/// The route of a message published without waiting for a record, in an unmirrored watch.
fn published(confirm: Option<Confirm>) -> Route {
    Route {
        mirror: None,
        event: Some(EventRoute {
            recorded: None,
            confirm,
        }),
    }
}

fn tags(tags: &[&str]) -> Vec<String> {
    tags.iter().map(|t| (*t).to_owned()).collect()
}

// Rule 1.
#[test]
fn message_waits_for_its_record() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    assert!(
        rig.taken().is_empty(),
        "went out before its record was written"
    );
    run(rig.delivery.begin_write());
    assert!(rig.log.borrow().writing.is_some());
    run(rig.delivery.release());
    assert!(
        rig.taken().is_empty(),
        "went out while its record was being written"
    );
    rig.store_write();
    assert_eq!(rig.taken(), tags(&["a1"]));
    assert_eq!(rig.log.borrow().next, 1);
}

// Rule 2.
#[test]
fn deletion_record_waits_for_earlier_messages() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    run(rig.delivery.begin_write());
    rig.store_write();
    rig.event("a", 2, EventType::Modified, false);
    rig.event("a", 3, EventType::Deleted, true);
    assert_eq!(rig.taken(), tags(&["a1", "a2"]));
    {
        let mut write = pin!(rig.delivery.begin_write());
        assert!(poll_once(write.as_mut()).is_pending());
        assert!(
            rig.log.borrow().writing.is_none(),
            "the deletion's record was written while its object's messages were unacknowledged"
        );
        ack(&rig.sink, 0);
        assert!(
            poll_once(write.as_mut()).is_pending(),
            "a2 is not acknowledged yet"
        );
        assert!(rig.log.borrow().writing.is_none());
        ack(&rig.sink, 1);
        assert!(poll_once(write.as_mut()).is_ready());
    }
    let writing = rig.log.borrow().writing.clone();
    assert_eq!(writing, Some(vec![("a".to_owned(), true)]));
    rig.store_write();
    assert_eq!(rig.taken(), tags(&["a1", "a2", "a3"]));
}

// Rule 3: a message held for its record is not settled, whatever went out after it.
#[test]
fn confirmed_position_never_covers_unsettled() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    rig.event("b", 2, EventType::Modified, false);
    rig.delivery.line_done(Some(&ResourceVersion::new("2")));
    assert_eq!(rig.taken(), tags(&["b2"]));
    rig.ack(0);
    assert!(
        rig.positions().is_empty(),
        "a1 is still held for its record"
    );
    assert_eq!(rig.log.borrow().confirmed, tags(&["uid-b@2"]));
    run(rig.delivery.begin_write());
    rig.store_write();
    assert!(rig.positions().is_empty(), "a1 is not acknowledged yet");
    rig.ack(1);
    assert_eq!(rig.positions(), tags(&["2"]));
    assert_eq!(rig.log.borrow().confirmed, tags(&["uid-b@2", "uid-a@1"]));
}

// Rule 3, with acknowledgements out of order and messages reaching the sink out of the order
// they were made.
#[test]
fn out_of_order_acks_confirm_in_order() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    rig.delivery.line_done(Some(&ResourceVersion::new("1")));
    rig.event("b", 2, EventType::Modified, false);
    rig.delivery.line_done(Some(&ResourceVersion::new("2")));
    rig.event("c", 3, EventType::Modified, false);
    rig.delivery.line_done(Some(&ResourceVersion::new("3")));
    run(rig.delivery.begin_write());
    rig.store_write();
    // Sink order: b2 (0), c3 (1), a1 (2); a1 was made first.
    assert_eq!(rig.taken(), tags(&["b2", "c3", "a1"]));
    assert!(rig.positions().is_empty(), "nothing is acknowledged");
    rig.ack(2);
    rig.ack(1);
    assert!(rig.positions().is_empty(), "b2 is not acknowledged");
    rig.ack(0);
    assert_eq!(rig.positions(), tags(&["3"]));
}

// Rule 3, the other way round: the first made is the first settled.
#[test]
fn position_follows_the_lowest_unsettled_message() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    rig.delivery.line_done(Some(&ResourceVersion::new("1")));
    rig.event("b", 2, EventType::Modified, false);
    rig.delivery.line_done(Some(&ResourceVersion::new("2")));
    run(rig.delivery.begin_write());
    rig.store_write();
    assert_eq!(rig.taken(), tags(&["b2", "a1"]));
    assert!(rig.positions().is_empty(), "nothing is acknowledged");
    rig.ack(0);
    assert!(
        rig.positions().is_empty(),
        "a1, made before position 1, is not settled"
    );
    rig.ack(1);
    assert_eq!(rig.positions(), tags(&["2"]));
}

// Rule 4.
#[test]
fn later_message_of_held_object_waits() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    rig.event("a", 2, EventType::Modified, false);
    rig.event("b", 3, EventType::Modified, false);
    assert_eq!(
        rig.taken(),
        tags(&["b3"]),
        "a2 overtook a1, held for its record"
    );
    run(rig.delivery.begin_write());
    rig.store_write();
    assert_eq!(rig.taken(), tags(&["b3", "a1", "a2"]));
}

// Rule 5: a submit dropped while the sink waits for room.
#[test]
fn cancelled_submit_keeps_counts() {
    let mut rig = Rig::new();
    rig.sink.borrow_mut().blocked = true;
    let (meta, message) = object("b", 5, EventType::Modified);
    let confirm = rig.delivery.confirmation(&meta, EventType::Modified);
    {
        let route = published(confirm);
        let mut submit = pin!(rig.delivery.submit(message, route));
        assert!(poll_once(submit.as_mut()).is_pending());
    }
    rig.delivery.line_done(Some(&ResourceVersion::new("5")));
    assert_eq!(rig.taken(), tags(&["b5"]));
    assert!(rig.positions().is_empty(), "b5 is not acknowledged");
    assert_eq!(rig.budget.used(), rig.sink_bytes());
    rig.sink.borrow_mut().blocked = false;
    rig.event("c", 6, EventType::Modified, false);
    rig.delivery.line_done(Some(&ResourceVersion::new("6")));
    rig.ack(1);
    assert!(rig.positions().is_empty(), "b5 is not acknowledged");
    rig.ack(0);
    assert_eq!(rig.positions(), tags(&["6"]));
    assert_eq!(rig.log.borrow().confirmed, tags(&["uid-b@5", "uid-c@6"]));
    assert_eq!(rig.budget.used(), 0);
}

// Rule 5: the waits of an idle watch, a write waiting for a deletion's object and a release
// waiting for the sink, each dropped.
#[test]
fn cancelled_idle_wait_keeps_counts() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    rig.delivery.line_done(Some(&ResourceVersion::new("1")));
    run(rig.delivery.begin_write());
    {
        let (mut written, mut flush) = {
            let (journal, sink) = rig.delivery.idle_sides();
            (Box::pin(written(journal)), Box::pin(sink.flush_idle()))
        };
        assert!(poll_once(written.as_mut()).is_pending());
        assert!(poll_once(flush.as_mut()).is_pending());
    }
    assert!(rig.taken().is_empty());
    rig.sink.borrow_mut().blocked = true;
    rig.log.borrow_mut().complete = true;
    run(written(rig.delivery.idle_sides().0));
    {
        let mut release = pin!(rig.delivery.release());
        assert!(poll_once(release.as_mut()).is_pending());
    }
    rig.sink.borrow_mut().blocked = false;
    run(rig.delivery.release());
    assert_eq!(rig.taken(), tags(&["a1"]), "released once, in order");
    rig.event("a", 2, EventType::Deleted, true);
    {
        let mut write = pin!(rig.delivery.begin_write());
        assert!(poll_once(write.as_mut()).is_pending());
    }
    assert!(rig.log.borrow().writing.is_none());
    rig.ack(0);
    assert_eq!(rig.positions(), tags(&["1"]));
    run(rig.delivery.begin_write());
    rig.store_write();
    assert_eq!(rig.taken(), tags(&["a1", "a2"]));
    assert_eq!(rig.budget.used(), rig.sink_bytes());
}

// Rule 6.
#[test]
fn line_charge_moves_to_its_message() {
    let mut rig = Rig::new();
    rig.delivery.line_read(rig.budget.charge(1000));
    rig.event("b", 1, EventType::Modified, false);
    let b = rig.sink_bytes();
    assert!(b > 0 && b < 1000);
    assert_eq!(
        rig.budget.used(),
        b,
        "the line's charge is the message's now"
    );
    rig.delivery.line_done(None);
    assert_eq!(rig.budget.used(), b);
    rig.ack(0);
    assert_eq!(rig.budget.used(), 0);
    // A line whose message is held: its charge is given back when it is done.
    rig.delivery.line_read(rig.budget.charge(1000));
    rig.event("a", 2, EventType::Added, true);
    rig.delivery.line_done(None);
    assert_eq!(rig.budget.used(), 0, "the line's charge outlived the line");
}

// Rule 6: after the line's charge is taken, the next message (of the line, or released on the
// idle path) is charged its own bytes.
#[test]
fn line_charge_is_not_handed_over_twice() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    rig.delivery.line_read(rig.budget.charge(3));
    rig.event("b", 2, EventType::Modified, false);
    rig.event("c", 3, EventType::Modified, false);
    rig.delivery.line_done(None);
    let held = rig.sink_bytes();
    assert_eq!(rig.sink.borrow().unacked.len(), 2);
    assert!(rig
        .sink
        .borrow()
        .unacked
        .iter()
        .all(|(_, _, c)| c.bytes() > 3));
    assert_eq!(rig.budget.used(), held);
    run(rig.delivery.begin_write());
    rig.store_write();
    assert_eq!(rig.taken(), tags(&["b2", "c3", "a1"]));
    assert!(rig
        .sink
        .borrow()
        .unacked
        .iter()
        .all(|(_, _, c)| c.bytes() > 3));
    assert_eq!(rig.budget.used(), rig.sink_bytes());
    for seq in 0..3 {
        rig.ack(seq);
    }
    assert_eq!(rig.budget.used(), 0);
}

// Rule 7.
#[test]
fn mirror_writes_go_in_the_order_messages_are_made() {
    let mut rig = Rig::new();
    rig.event("a", 1, EventType::Added, true);
    rig.event("a", 2, EventType::Modified, false);
    rig.mirror_only("b", 3, EventType::Modified);
    rig.event("c", 4, EventType::Deleted, false);
    assert_eq!(rig.taken(), tags(&["c4"]), "a1 waits for its record");
    assert_eq!(
        rig.mirrored(),
        tags(&["a1", "a2", "b3", "-c4"]),
        "the mirror takes each write when the delivery takes its message"
    );
    run(rig.delivery.begin_write());
    rig.store_write();
    assert_eq!(rig.taken(), tags(&["c4", "a1", "a2"]));
    assert_eq!(
        rig.mirrored(),
        tags(&["a1", "a2", "b3", "-c4"]),
        "a message sent once its record is stored is not mirrored again"
    );
}
