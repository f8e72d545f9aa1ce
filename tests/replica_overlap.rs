//! Never two publishers: the three ways replicas once led at the same time, each with real
//! binaries, nats-server and the simulated API server, measured on the subscriber (messages of
//! the old holder after the new one's first) and on every replica's `kube2nats_leader` gauge
//! (sampled every ~20 ms, see `LeaderGauges`):
//! - a standby's slow read of the Lease, which carries a renewal made long after it was sent;
//! - the Lease deleted while held;
//! - two replicas with one hostname and no `POD_NAME`;
//! - and one that never did, kept so: the holder paused (SIGSTOP) for longer than a lease.
//!
//! Timings as in `replicas.rs`: lease 3 s, renew deadline 2 s, retry 0.5 s. docs/replicas.md
//! explains the rules these tests hold the elector to.

mod common;
mod replica_kit;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::ApiServer;
use kube2nats_harness::nats::NatsServer;
use replica_kit::*;
use tokio::time::Instant;

/// How long the slowed read is held: more than lease duration − renew deadline (1 s).
const SLOW_READ: Duration = Duration::from_millis(2500);

/// Two replicas on a busy stream, `a` holding the Lease, `b` standing by; gauges sampled.
struct Pair {
    sim: Arc<ApiServer>,
    _nats: NatsServer,
    subscriber: Subscriber,
    a: Replica,
    b: Replica,
    producer: Producer,
    gauges: LeaderGauges,
}

impl Pair {
    async fn start(start: fn(&ApiServer, &NatsServer, &'static str, &str) -> Replica) -> Pair {
        let sim = simulator().await;
        let nats = NatsServer::start().await.unwrap();
        let subscriber = Subscriber::start(&nats).await;
        let changes = seed_pods(&sim, 20);
        let a = start(&sim, &nats, "a", CORE);
        a.line(&["acquired the Lease"]);
        a.line(&["synced"]);
        let b = start(&sim, &nats, "b", CORE);
        // `b` has read the Lease at least once (whatever it concluded: the gauges tell).
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let producer = Producer::start(sim.clone(), changes);
        let gauges = LeaderGauges::start(&[a.port, b.port]);
        subscriber
            .first_from("a", WAIT)
            .await
            .expect("the holder publishes");
        Pair {
            sim,
            _nats: nats,
            subscriber,
            a,
            b,
            producer,
            gauges,
        }
    }

    /// Stops the stream and the sampling; asserts that the publishers took turns on the
    /// subscriber and on the gauges, and returns what was measured.
    async fn finish(self, what: &str) {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        self.producer.stop().await;
        let (overlapping, sampled) = self.gauges.stop().await;
        let got = self.subscriber.all();
        // One handover per test: the old holder's messages after the new one's first, and for
        // how long they went on.
        let old = got.first().map_or("", |r| r.publisher.as_str());
        let new_first = got.iter().find(|r| r.publisher != old).map(|r| r.at);
        let late: Vec<Duration> = got
            .iter()
            .filter(|r| r.publisher == old)
            .filter_map(|r| r.at.checked_duration_since(new_first?))
            .filter(|d| !d.is_zero())
            .collect();
        let overlap = late.iter().max().copied().unwrap_or_default();
        eprintln!(
            "{what}: gauges showed two publishers in {overlapping} of {sampled} sampling rounds; subscriber: {} messages, {} from the old holder after the new one's first (over {overlap:?})",
            got.len(),
            late.len()
        );
        assert!(
            late.is_empty(),
            "{what}: two publishers at once for {overlap:?}"
        );
        assert_eq!(
            overlapping, 0,
            "{what}: two kube2nats_leader gauges were 1 at once"
        );
    }
}

/// `b`'s read of the Lease is slowed 2.5 s on its way in; `a` renews until just before that read
/// reaches the store, then loses the API server (its watch keeps delivering, so it publishes
/// until its renew deadline, 2 s after that last renewal). `b` must count the lease from when
/// its read returned: counting from when it was sent, it took over about 1 s before `a` stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_of_the_lease_never_makes_two_publishers() {
    let pair = Pair::start(Replica::start).await;
    let sim = &pair.sim;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sim.slow_lease_reads(1, SLOW_READ);
    let deadline = Instant::now() + WAIT;
    while sim.slow_lease_reads_arrived() == 0 {
        assert!(
            Instant::now() < deadline,
            "the standby never read the Lease"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(SLOW_READ - Duration::from_millis(200)).await;
    sim.cut_off(&Replica::token("a"));
    let cut = Instant::now();
    let first_b = pair
        .subscriber
        .first_from("b", LEASE_DURATION + Duration::from_secs(5))
        .await
        .expect("the standby takes over");
    let last_a = pair
        .subscriber
        .all()
        .into_iter()
        .rfind(|r| r.publisher == "a")
        .expect("a published");
    eprintln!(
        "slow read: b's first message {:?} after a was cut off; a's last {:?} after the cut",
        first_b.at.duration_since(cut),
        last_a.at.saturating_duration_since(cut)
    );
    pair.finish("slow read").await;
}

/// The Lease is deleted while `a` holds it. `a` finds it gone at its next renewal and stops
/// publishing at once; `b`, which saw `a` hold it, creates a new one only once a lease duration
/// has passed since it first found the Lease missing. Whoever holds it next starts after `a`
/// stopped. Before, `b` created it at once and both published until `a`'s next renewal failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_while_held_never_makes_two_publishers() {
    let pair = Pair::start(Replica::start).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    pair.sim
        .delete("leases", Some("default"), "kube2nats")
        .expect("the Lease exists");
    let deleted = Instant::now();
    let mut stood_down = None;
    while deleted.elapsed() < LEASE_DURATION {
        if pair.a.metric("kube2nats_leader").await == Some(0.0) {
            stood_down = Some(deleted.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let identities = [pair.a.identity.as_str(), pair.b.identity.as_str()];
    let next = wait_for_holder(&pair.sim, &identities, None, WAIT).await;
    let held_again = deleted.elapsed();
    let mark = pair.subscriber.all().len();
    let name = ["a", "b"][next];
    let first = pair
        .subscriber
        .first_from_after(name, mark, WAIT)
        .await
        .expect("the next holder publishes");
    eprintln!(
        "deleted Lease: a stood down after {stood_down:?}; {name} held it again after {held_again:?} and published {:?} after the deletion",
        first.at.duration_since(deleted)
    );
    pair.finish("deleted Lease").await;
    assert!(
        held_again >= LEASE_DURATION - Duration::from_millis(1100),
        "the Lease was created again {held_again:?} after its deletion, before the holder's lease ran out"
    );
    assert!(
        stood_down.is_some(),
        "the holder kept publishing after its Lease was deleted"
    );
}

/// The holder paused (SIGSTOP: a container's CPU throttled, a node under memory pressure, a
/// debugger) for longer than a lease duration while its watch keeps delivering: `b` takes the
/// Lease over, and when `a` runs again, the changes waiting in its socket must not go out, though
/// its elector has not yet noticed that its renew deadline passed long ago.
///
/// `a` is paused once it has published every change so far: what its NATS client already held
/// at a pause goes out at the resume, and only the server could fence that (docs/replicas.md,
/// "A paused holder"); the changes made during the pause are the ones kube2nats must hold back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_never_publishes_after_its_term() {
    let pair = Pair::start(Replica::start).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let last = pair.producer.pause().await;
    eventually_async(
        &format!("change {last} published by the holder"),
        || async { pair.subscriber.all().iter().any(|r| r.rv >= last) },
    )
    .await;
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &pair.a.process.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill {name}");
    };
    signal("-STOP");
    let paused = Instant::now();
    pair.producer.resume();
    let first_b = pair
        .subscriber
        .first_from("b", LEASE_DURATION + Duration::from_secs(5))
        .await
        .expect("the standby takes over");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    signal("-CONT");
    eprintln!(
        "paused holder: b's first message {:?} after a was paused, a resumed {:?} after",
        first_b.at.duration_since(paused),
        paused.elapsed()
    );
    pair.a.line(&["stopped publishing; back to standby"]);
    pair.finish("paused holder").await;
}

/// Two replicas without `POD_NAME` on one host (hostNetwork pods, or two processes on a laptop):
/// one publishes, the other stands by, and after a kill -9 of the holder the other takes over.
/// With the hostname alone as identity, each took the other's Lease for its own and both led for
/// good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_sharing_a_hostname_never_both_publish() {
    let mut pair = Pair::start(Replica::start_on_shared_host).await;
    let identities = [pair.a.identity.clone(), pair.b.identity.clone()];
    tokio::time::sleep(Duration::from_secs(2)).await;
    pair.a.process.kill();
    let killed = Instant::now();
    let first_b = pair
        .subscriber
        .first_from("b", LEASE_DURATION + Duration::from_secs(5))
        .await
        .expect("the standby takes over after a kill -9");
    eprintln!(
        "shared hostname: b's first message {:?} after the kill",
        first_b.at.duration_since(killed)
    );
    pair.finish("shared hostname").await;
    assert_ne!(identities[0], identities[1]);
    assert!(
        identities[0].starts_with(&format!("{SHARED_HOST}_")),
        "{identities:?}"
    );
}
