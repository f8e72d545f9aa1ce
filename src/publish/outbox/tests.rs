//! The outboxes' rules, each run against a fake NATS whose publishes, flushes and
//! acknowledgements the test completes, in any order or with a failure; and every await
//! dropped half-way. `scripts/check-delivery-rules` plants a bug per rule and checks that the
//! tests named for it fail.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use async_nats::client::{FlushError, PublishError};

use crate::delivery::ports::Sink;
use async_nats::header::SerializedHeaders;
use async_nats::jetstream::context::{PublishError as JsPublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::HeaderName;
use prometheus::{IntCounter, IntGauge, Registry};
use tokio::sync::oneshot;

use super::link::{Ack, CoreLink, JetStreamLink};
use super::{CoreOutbox, JetStreamOutbox};
use crate::budget::Budget;
use crate::event::EventType;
use crate::leader::TermClock;
use crate::publish::message::OutMessage;
use crate::publish::metrics::PublishFamilies;
use crate::telemetry::metrics::WatchSync;
use crate::telemetry::target::TargetGauges;

/// One publish the fake JetStream took.
struct Sent {
    tag: String,
    msg_id: String,
    key: u64,
    /// Until the test acknowledges or fails it; closed once the outbox gave up waiting for it.
    ack: Option<oneshot::Sender<Result<PublishAck, JsPublishError>>>,
}

impl Sent {
    fn outstanding(&self) -> bool {
        self.ack.as_ref().is_some_and(|ack| !ack.is_closed())
    }
}

#[derive(Default)]
struct JsState {
    sent: Vec<Sent>,
    /// While set, a send waits (the client's queue is full).
    blocked: bool,
    disconnected: bool,
    /// The most sends outstanding at once, and whether two of one object ever were.
    most_outstanding: usize,
    same_object_outstanding: bool,
}

#[derive(Clone, Default)]
struct FakeJetStream(Arc<Mutex<JsState>>);

impl FakeJetStream {
    fn state(&self) -> MutexGuard<'_, JsState> {
        self.0.lock().unwrap()
    }

    fn answer(&self, send: usize, result: Result<PublishAck, JsPublishError>) {
        let ack = self.state().sent[send].ack.take().expect("answered once");
        let _ = ack.send(result);
    }

    fn ack(&self, send: usize) {
        let reply = PublishAck {
            stream: "s".into(),
            sequence: send as u64,
            domain: String::new(),
            duplicate: false,
            value: None,
        };
        self.answer(send, Ok(reply));
    }

    fn fail(&self, send: usize) {
        self.answer(send, Err(JsPublishError::new(PublishErrorKind::TimedOut)));
    }

    /// Acknowledges every send still awaited.
    fn ack_all(&self) {
        let open: Vec<usize> = {
            let s = self.state();
            (0..s.sent.len())
                .filter(|&n| s.sent[n].outstanding())
                .collect()
        };
        open.into_iter().for_each(|n| self.ack(n));
    }

    fn tags(&self) -> Vec<String> {
        self.state().sent.iter().map(|s| s.tag.clone()).collect()
    }

    fn msg_ids(&self) -> Vec<String> {
        self.state().sent.iter().map(|s| s.msg_id.clone()).collect()
    }
}

impl JetStreamLink for FakeJetStream {
    async fn send(&self, msg: &OutMessage) -> Result<Ack, JsPublishError> {
        std::future::poll_fn(|_| match self.state().blocked {
            true => Poll::Pending,
            false => Poll::Ready(()),
        })
        .await;
        let (tx, rx) = oneshot::channel();
        let mut s = self.state();
        let outstanding: Vec<u64> = s
            .sent
            .iter()
            .filter(|s| s.outstanding())
            .map(|s| s.key)
            .collect();
        s.same_object_outstanding |= outstanding.contains(&msg.object_key);
        s.most_outstanding = s.most_outstanding.max(outstanding.len() + 1);
        s.sent.push(Sent {
            tag: String::from_utf8_lossy(&msg.payload).into_owned(),
            msg_id: msg
                .headers
                .get("Nats-Msg-Id")
                .unwrap_or_default()
                .to_owned(),
            key: msg.object_key,
            ack: Some(tx),
        });
        Ok(Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err(JsPublishError::new(PublishErrorKind::Other)))
        }))
    }

    fn connected(&self) -> bool {
        !self.state().disconnected
    }

    fn max_payload(&self) -> usize {
        1024 * 1024
    }
}

#[derive(Default)]
struct CoreState {
    /// Tags of the messages handed to the client, in order.
    handed: Vec<String>,
    /// Flushes begun: how many messages were handed over when each began, and whether the test
    /// has let it return.
    flushes: Vec<(usize, bool)>,
    blocked: bool,
    disconnected: bool,
}

#[derive(Clone, Default)]
struct FakeCore(Arc<Mutex<CoreState>>);

impl FakeCore {
    fn state(&self) -> MutexGuard<'_, CoreState> {
        self.0.lock().unwrap()
    }

    /// Lets flush number `n` return.
    fn complete_flush(&self, n: usize) {
        self.state().flushes[n].1 = true;
    }
}

impl CoreLink for FakeCore {
    async fn publish(&self, msg: &OutMessage) -> Result<(), PublishError> {
        std::future::poll_fn(|_| match self.state().blocked {
            true => Poll::Pending,
            false => Poll::Ready(()),
        })
        .await;
        let tag = msg.subject.trim_start_matches("k.").to_owned();
        self.state().handed.push(tag);
        Ok(())
    }

    fn flush(&self) -> impl Future<Output = Result<(), FlushError>> + Send + 'static {
        let state = self.0.clone();
        let mut begun = None;
        std::future::poll_fn(move |_| {
            let mut s = state.lock().unwrap();
            let n = *begun.get_or_insert_with(|| {
                let handed = s.handed.len();
                s.flushes.push((handed, false));
                s.flushes.len() - 1
            });
            match s.flushes[n].1 {
                true => Poll::Ready(Ok(())),
                false => Poll::Pending,
            }
        })
    }

    fn connected(&self) -> bool {
        !self.state().disconnected
    }

    fn max_payload(&self) -> usize {
        1024 * 1024
    }
}

fn metrics() -> (crate::publish::metrics::PublishMetrics, TargetGauges) {
    let families = PublishFamilies::register(&Registry::new()).unwrap();
    let dropped = IntCounter::new("dropped", "dropped").unwrap();
    let sync = WatchSync::new("w".into(), IntGauge::new("s", "s").unwrap(), 1);
    let gauge = |name: &str| IntGauge::new(name, name).unwrap();
    let gauges = TargetGauges::new(sync, gauge("tracked"), gauge("queued"));
    (families.for_watch("w", dropped), gauges)
}

fn jetstream(max_in_flight: usize) -> (JetStreamOutbox<FakeJetStream>, FakeJetStream, Budget) {
    let (metrics, gauges) = metrics();
    let (fake, budget) = (FakeJetStream::default(), Budget::unlimited());
    let outbox = JetStreamOutbox::new(fake.clone(), max_in_flight, metrics, gauges, budget.clone());
    (outbox, fake, budget)
}

fn core() -> (CoreOutbox<FakeCore>, FakeCore, Budget) {
    let (metrics, gauges) = metrics();
    let (fake, budget) = (FakeCore::default(), Budget::unlimited());
    (
        CoreOutbox::new(fake.clone(), metrics, gauges, budget.clone()),
        fake,
        budget,
    )
}

/// A message tagged `tag` (its payload) of the object `key`, with `Nats-Msg-Id: id-{tag}`.
fn message(tag: &str, key: u64) -> OutMessage {
    let mut headers = SerializedHeaders::builder(0);
    headers
        .append(
            &HeaderName::from_static("Nats-Msg-Id"),
            &format!("id-{tag}"),
        )
        .unwrap();
    OutMessage {
        subject: async_nats::Subject::from(format!("k.{tag}")),
        headers: headers.finish(),
        payload: bytes::Bytes::from(tag.to_owned()),
        event_type: EventType::Modified,
        object: bytes::Bytes::new(),
        object_key: key,
    }
}

fn tags(tags: &[&str]) -> Vec<String> {
    tags.iter().map(|t| (*t).to_owned()).collect()
}

fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    let waker = futures_util::task::noop_waker();
    future.poll(&mut std::task::Context::from_waker(&waker))
}

/// Polls `future` until it is done or waits for something only the test can give: between
/// polls the (paused) clock moves on, past any retry pause.
async fn drive<F: Future>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    for _ in 0..60 {
        if let Poll::Ready(out) = poll_once(future.as_mut()) {
            return Poll::Ready(out);
        }
        tokio::time::advance(Duration::from_millis(500)).await;
    }
    Poll::Pending
}

/// Runs `future` to its end, which must not need anything from the test.
async fn run<F: Future>(future: F) -> F::Output {
    match drive(pin!(future)).await {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("waits for something the test has not given"),
    }
}

/// Starts `future` and drops it where it waits for the test.
async fn drop_waiting<F: Future>(future: F) {
    assert!(drive(pin!(future)).await.is_pending(), "did not wait");
}

async fn publish_js(outbox: &mut JetStreamOutbox<FakeJetStream>, tag: &str, key: u64) {
    let charge = outbox.charge(message(tag, key).payload.len());
    run(outbox.publish(message(tag, key), charge)).await;
}

async fn publish_core(outbox: &mut CoreOutbox<FakeCore>, tag: &str) {
    let charge = outbox.charge(tag.len());
    run(outbox.publish(message(tag, 1), charge)).await;
}

// JetStream: never two messages of one object in flight.
#[tokio::test(start_paused = true)]
async fn second_message_of_an_object_waits_for_the_first_ack() {
    let (mut outbox, js, _) = jetstream(10);
    publish_js(&mut outbox, "a1", 1).await;
    publish_js(&mut outbox, "b1", 2).await;
    {
        let charge = outbox.charge(2);
        let mut a2 = pin!(outbox.publish(message("a2", 1), charge));
        assert!(drive(a2.as_mut()).await.is_pending(), "a2 waits for a1");
        assert_eq!(js.tags(), tags(&["a1", "b1"]));
        js.ack(1);
        assert!(
            drive(a2.as_mut()).await.is_pending(),
            "b1's ack is not a1's"
        );
        js.ack(0);
        assert!(drive(a2.as_mut()).await.is_ready());
    }
    // Another object's message does not wait for any acknowledgement.
    publish_js(&mut outbox, "c1", 3).await;
    drop_waiting(outbox.flush_idle()).await;
    assert_eq!(js.tags(), tags(&["a1", "b1", "a2", "c1"]));
    js.ack_all();
    assert!(run(outbox.settle()).await);
    assert!(!js.state().same_object_outstanding);
    assert_eq!(outbox.settled(), 4);
}

// JetStream: the window never holds more than max_in_flight.
#[tokio::test(start_paused = true)]
async fn window_never_holds_more_than_max_in_flight() {
    let (mut outbox, js, _) = jetstream(3);
    for n in 0..3 {
        publish_js(&mut outbox, &format!("m{n}"), n).await;
    }
    {
        let charge = outbox.charge(2);
        let mut fourth = pin!(outbox.publish(message("m3", 3), charge));
        assert!(
            drive(fourth.as_mut()).await.is_pending(),
            "no room for a fourth"
        );
        js.ack(0);
        assert!(drive(fourth.as_mut()).await.is_ready());
    }
    for n in 4..12 {
        let mut next = pin!(outbox.publish(message(&format!("m{n}"), n), outbox.charge(2)));
        while drive(next.as_mut()).await.is_pending() {
            js.ack_all();
        }
    }
    drop_waiting(outbox.settle()).await;
    js.ack_all();
    run(outbox.settle()).await;
    assert_eq!(js.state().most_outstanding, 3);
    assert_eq!(js.tags().len(), 12);
    assert_eq!(outbox.settled(), 12);
}

// JetStream: a failed ack sends it and the rest of the window again, in order, same Msg-Id.
#[tokio::test(start_paused = true)]
async fn failed_ack_resends_the_window_in_order() {
    let (mut outbox, js, _) = jetstream(10);
    for (n, tag) in ["m0", "m1", "m2"].iter().enumerate() {
        publish_js(&mut outbox, tag, n as u64).await;
    }
    {
        let mut settle = pin!(outbox.settle());
        assert!(drive(settle.as_mut()).await.is_pending());
        js.ack(1);
        js.fail(0);
        assert!(
            drive(settle.as_mut()).await.is_pending(),
            "resent, awaiting acks"
        );
        assert_eq!(js.tags(), tags(&["m0", "m1", "m2", "m0", "m1", "m2"]));
        let ids = js.msg_ids();
        assert_eq!(ids[..3], ids[3..], "the same Nats-Msg-Id");
        js.ack_all();
        assert_eq!(drive(settle.as_mut()).await, Poll::Ready(true));
    }
    assert_eq!(outbox.settled(), 3);
    assert!(!js.state().same_object_outstanding);
}

// JetStream: settled() counts only a prefix of acknowledged messages.
#[tokio::test(start_paused = true)]
async fn settled_counts_an_acknowledged_prefix() {
    let (mut outbox, js, _) = jetstream(10);
    for (n, tag) in ["m0", "m1", "m2"].iter().enumerate() {
        publish_js(&mut outbox, tag, n as u64).await;
    }
    drop_waiting(outbox.flush_idle()).await;
    js.ack(2);
    js.ack(1);
    drop_waiting(outbox.flush_idle()).await;
    assert_eq!(outbox.settled(), 0, "m0 is not acknowledged");
    js.ack(0);
    run(outbox.flush_idle()).await;
    assert_eq!(outbox.settled(), 3);
    assert!(!outbox.unflushed());
}

// JetStream, cancellation: a publish dropped while it waits for room keeps its message.
#[tokio::test(start_paused = true)]
async fn dropped_publish_keeps_its_message() {
    let (mut outbox, js, budget) = jetstream(1);
    publish_js(&mut outbox, "m0", 0).await;
    drop_waiting(outbox.publish(message("m1", 1), budget.charge(2))).await;
    assert_eq!((outbox.published(), outbox.settled()), (2, 0));
    js.ack(0);
    {
        let mut next = pin!(outbox.publish(message("m2", 2), budget.charge(2)));
        assert!(drive(next.as_mut()).await.is_pending(), "m1 goes first");
        js.ack(1);
        assert!(drive(next.as_mut()).await.is_ready());
    }
    drop_waiting(outbox.settle()).await;
    js.ack_all();
    run(outbox.settle()).await;
    assert_eq!(js.tags(), tags(&["m0", "m1", "m2"]));
    assert_eq!(outbox.settled(), 3);
    assert_eq!(budget.used(), 0);
}

// JetStream, cancellation: a send dropped while the client's queue is full, and a settle
// dropped while it waits to retry, lose nothing.
#[tokio::test(start_paused = true)]
async fn dropped_send_and_retry_lose_nothing() {
    let (mut outbox, js, budget) = jetstream(10);
    publish_js(&mut outbox, "m0", 0).await;
    publish_js(&mut outbox, "m1", 1).await;
    js.state().blocked = true;
    drop_waiting(outbox.flush_idle()).await;
    drop_waiting(outbox.settle()).await;
    assert_eq!((outbox.published(), outbox.settled()), (2, 0));
    js.state().blocked = false;
    drop_waiting(outbox.settle()).await;
    assert_eq!(js.tags(), tags(&["m0", "m1"]));
    js.fail(0);
    js.state().blocked = true;
    drop_waiting(outbox.settle()).await;
    js.state().blocked = false;
    {
        let mut settle = pin!(outbox.settle());
        assert!(drive(settle.as_mut()).await.is_pending());
        js.ack_all();
        assert_eq!(drive(settle.as_mut()).await, Poll::Ready(true));
    }
    assert_eq!(js.tags(), tags(&["m0", "m1", "m0", "m1"]));
    assert_eq!(outbox.settled(), 2);
    assert_eq!(budget.used(), 0);
}

// JetStream: a message's bytes stay charged until it is acknowledged.
#[tokio::test(start_paused = true)]
async fn jetstream_charge_is_released_at_the_ack() {
    let (mut outbox, js, budget) = jetstream(10);
    publish_js(&mut outbox, "m0", 0).await;
    drop_waiting(outbox.flush_idle()).await;
    assert_eq!(js.tags(), tags(&["m0"]));
    assert_eq!(budget.used(), 2, "sent, not acknowledged");
    js.ack(0);
    run(outbox.flush_idle()).await;
    assert_eq!(budget.used(), 0);
}

// Core: settled moves only after a flush that began after the hand-over.
#[tokio::test(start_paused = true)]
async fn core_settles_after_a_flush_begun_after_the_hand_over() {
    let (mut outbox, core, _) = core();
    publish_core(&mut outbox, "m0").await;
    drop_waiting(outbox.flush_idle()).await;
    assert_eq!(core.state().flushes, vec![(1, false)]);
    // Handed over at once while disconnected: after the flush under way began.
    core.state().disconnected = true;
    publish_core(&mut outbox, "m1").await;
    core.state().disconnected = false;
    assert_eq!(core.state().handed, tags(&["m0", "m1"]));
    core.complete_flush(0);
    run(outbox.flush_idle()).await;
    assert_eq!(
        outbox.settled(),
        1,
        "m1 was handed over after the flush began"
    );
    drop_waiting(outbox.flush_idle()).await;
    core.complete_flush(1);
    run(outbox.flush_idle()).await;
    assert_eq!(outbox.settled(), 2);
    assert!(!outbox.unflushed());
}

// Core: a message's bytes stay charged until the flush after its hand-over returned.
#[tokio::test(start_paused = true)]
async fn core_charge_is_released_at_the_flush() {
    let (mut outbox, core, budget) = core();
    publish_core(&mut outbox, "m0").await;
    drop_waiting(outbox.flush_idle()).await;
    assert_eq!(core.state().handed, tags(&["m0"]));
    assert_eq!(budget.used(), 2, "handed over, not flushed");
    core.complete_flush(0);
    run(outbox.flush_idle()).await;
    assert_eq!(budget.used(), 0);
}

// Core, cancellation: a publish dropped while the batch ahead of it is handed over keeps its
// message, and it goes before the next one.
#[tokio::test(start_paused = true)]
async fn core_dropped_publish_keeps_its_message() {
    let (mut outbox, core, budget) = core();
    publish_core(&mut outbox, "m0").await;
    core.state().blocked = true;
    // Too large to join the batch: the batch is handed over first, and the client waits.
    let mut large = message("m1", 1);
    large.payload = bytes::Bytes::from(vec![b'x'; super::batch::HANDOVER_BYTES]);
    drop_waiting(outbox.publish(large, budget.charge(2))).await;
    assert_eq!((outbox.published(), outbox.settled()), (2, 0));
    drop_waiting(outbox.publish(message("m2", 1), budget.charge(2))).await;
    assert_eq!((outbox.published(), outbox.settled()), (3, 0));
    core.state().blocked = false;
    {
        let mut settle = pin!(outbox.settle());
        assert!(drive(settle.as_mut()).await.is_pending());
        core.complete_flush(0);
        assert_eq!(drive(settle.as_mut()).await, Poll::Ready(true));
    }
    assert_eq!(core.state().handed, tags(&["m0", "m1", "m2"]));
    assert_eq!(outbox.settled(), 3);
    assert_eq!(budget.used(), 0);
}

/// A term of two seconds from now, for the outbox's batch to be handed over in.
fn term_of_two_seconds() -> TermClock {
    let term = TermClock::ended();
    term.hold_until(tokio::time::Instant::now() + Duration::from_secs(2));
    term
}

// Core: a batch held when the term lapses (the holder was paused) is not handed to the client
// until the term is renewed.
#[tokio::test(start_paused = true)]
async fn core_hands_nothing_over_past_the_term() {
    let (mut outbox, core, _) = core();
    let term = term_of_two_seconds();
    outbox.set_term(term.clone());
    publish_core(&mut outbox, "m0").await;
    tokio::time::advance(Duration::from_secs(3)).await;
    drop_waiting(outbox.flush_idle()).await;
    drop_waiting(outbox.settle()).await;
    assert!(core.state().handed.is_empty(), "handed over past the term");
    term.hold_until(tokio::time::Instant::now() + Duration::from_secs(60));
    drop_waiting(outbox.flush_idle()).await;
    assert_eq!(core.state().handed, tags(&["m0"]), "renewed");
}

// Core: the term is checked before each message of a hand-over: a hand-over that waited for room
// in the client's queue across the end of the term hands nothing more over.
#[tokio::test(start_paused = true)]
async fn core_checks_the_term_before_each_message_it_hands_over() {
    let (mut outbox, core, _) = core();
    let term = term_of_two_seconds();
    outbox.set_term(term.clone());
    publish_core(&mut outbox, "m0").await;
    publish_core(&mut outbox, "m1").await;
    core.state().blocked = true;
    {
        let mut flush = pin!(outbox.flush_idle());
        assert!(drive(flush.as_mut()).await.is_pending(), "waits for room");
        tokio::time::advance(Duration::from_secs(3)).await;
        core.state().blocked = false;
        assert!(drive(flush.as_mut()).await.is_pending(), "waits for a term");
    }
    assert_eq!(
        core.state().handed,
        tags(&["m0"]),
        "handed over past the term"
    );
    term.hold_until(tokio::time::Instant::now() + Duration::from_secs(60));
    drop_waiting(outbox.flush_idle()).await;
    assert_eq!(core.state().handed, tags(&["m0", "m1"]), "renewed");
}

// JetStream: a message held, or to be sent again, when the term lapses is not sent until the
// term is renewed.
#[tokio::test(start_paused = true)]
async fn jetstream_sends_nothing_past_the_term() {
    let (mut outbox, js, _) = jetstream(10);
    let term = term_of_two_seconds();
    outbox.set_term(term.clone());
    publish_js(&mut outbox, "m0", 0).await;
    drop_waiting(outbox.flush_idle()).await;
    publish_js(&mut outbox, "m1", 1).await;
    js.fail(0);
    tokio::time::advance(Duration::from_secs(3)).await;
    drop_waiting(outbox.flush_idle()).await;
    drop_waiting(outbox.settle()).await;
    assert_eq!(js.tags(), tags(&["m0"]), "sent past the term");
    term.hold_until(tokio::time::Instant::now() + Duration::from_secs(60));
    drop_waiting(outbox.settle()).await;
    assert_eq!(js.tags(), tags(&["m0", "m1", "m0", "m1"]), "renewed");
}
