//! What a kill -9 repeats: at most what was in flight. The journal stores confirmations of the
//! messages NATS has taken (docs/durable-state.md), so a restart resumes from the last confirmed
//! position, even with no checkpoint yet (a crash loop), and publishes again only messages not
//! yet confirmed — each with the resourceVersion and `Nats-Msg-Id` it had, never an older
//! version of an object after a newer one.
//!
//! Core mode throughout: a plain subscription sees every publish, repeats included (JetStream's
//! duplicate window would hide them).

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::restart::*;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `config` with no checkpoint due while a test runs: what was published is in the journal alone.
fn without_checkpoints(config: &str) -> String {
    config.replace(
        "checkpoint_interval = \"150ms\"",
        "checkpoint_interval = \"1h\"",
    )
}

/// Waits until the journal has confirmed every event up to `rv`.
async fn confirmed_up_to(cluster: &Cluster, rv: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while stored_position(cluster, PODS_KEY).await < Some(rv) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the journal never confirmed resourceVersion {rv} (stored: {:?})",
            stored_position(cluster, PODS_KEY).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Per object (uid), across every run of the daemon: a message is either the same message
/// again (same `Nats-Msg-Id`, so same version) or a newer version; after a deletion only that
/// deletion again.
fn regressions(seen: &[Seen]) -> Vec<String> {
    let mut last: HashMap<&str, &Seen> = HashMap::new();
    let mut sent: HashSet<&str> = HashSet::new();
    let mut problems = Vec::new();
    for s in seen {
        let repeat = sent.contains(s.msg_id.as_str());
        if let Some(prev) = last.get(s.uid.as_str()) {
            let newer = !prev.deleted() && (s.rv > prev.rv || (s.deleted() && s.rv == prev.rv));
            if !repeat && !newer {
                problems.push(format!("resourceVersion went back: {s:?} after {prev:?}"));
            }
        }
        if !repeat {
            last.insert(&s.uid, s);
        }
        sent.insert(&s.msg_id);
    }
    problems
}

/// A kill -9 soon after a start that wrote no checkpoint yet, with nothing in flight: the
/// restart resumes the watch from the journal's confirmed position, without a list, and
/// publishes exactly the changes made while down — nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_before_the_first_checkpoint_repeats_nothing_that_was_confirmed_core() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    let sim = &cluster.sim;
    for i in 0..20 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = without_checkpoints(&cluster.config(PODS_WATCH, ""));
    let daemon = Process::spawn(&config);
    daemon.line_with(&["watching from resourceVersion"]);
    for i in 0..5 {
        sim.update("pods", Some(NS), &format!("p{i}"), |o| {
            o["metadata"]["labels"]["gen"] = "1".into()
        });
    }
    sim.delete("pods", Some(NS), "p5").unwrap();
    sim.create("pods", Some(NS), pod_named("p20", 1));
    converge(sim, &recording).await;
    confirmed_up_to(&cluster, sim.resource_version()).await;
    drop(daemon);
    let before_len = recording.mark().await;
    let before = recording.all()[..before_len].to_vec();
    assert!(cluster.manifest(PODS_KEY).await.is_none(), "no checkpoint");

    sim.update("pods", Some(NS), "p6", |o| {
        o["metadata"]["labels"]["gen"] = "2".into()
    });
    sim.delete("pods", Some(NS), "p7").unwrap();
    sim.create("pods", Some(NS), pod_named("p21", 2));
    sim.clear_requests();
    let daemon = Process::spawn(&config);
    let after = converge_after(sim, &recording, &before, before_len).await;
    let log = daemon.rest();
    let kinds: Vec<(&str, &str)> = after
        .iter()
        .map(|s| (s.name.as_str(), s.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("p6", "MODIFIED"), ("p7", "DELETED"), ("p21", "ADDED")],
        "after the restart exactly the changes made while down, nothing again\n--- log ---\n{log}"
    );
    assert_eq!(cluster.lists(PODS_PATH), 0, "resumed without a list");
    let all: Vec<Seen> = before.iter().chain(&after).cloned().collect();
    assert_eq!(regressions(&all), Vec::<String>::new());
}

/// A deletion found by a relist is announced with the object's last published version; after
/// a kill -9 it is never announced again with an older one (the journal knew only the version
/// the object was first published with), nor is anything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_deletion_is_never_announced_again_with_an_older_version_core() {
    let cluster = Cluster::start(Mode::Core, 10_000).await;
    let sim = &cluster.sim;
    for i in 0..3 {
        sim.create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    let config = without_checkpoints(&cluster.config(PODS_WATCH, ""));
    let daemon = Process::spawn(&config);
    daemon.line_with(&["watching from resourceVersion"]);
    sim.update("pods", Some(NS), "p0", |o| {
        o["metadata"]["labels"]["gen"] = "1".into()
    });
    converge(sim, &recording).await;
    // The deletion happens while kube2nats cannot watch, and the history is gone: the relist
    // finds p0 missing and announces it DELETED at the version last published (the MODIFIED).
    let token = std::fs::read_to_string(sim.token_file()).unwrap();
    sim.cut_off(token.trim());
    sim.drop_watches();
    sim.delete("pods", Some(NS), "p0").unwrap();
    sim.compact();
    sim.reconnect(token.trim());
    converge(sim, &recording).await;
    daemon.line_with(&["synced"]);
    drop(daemon);
    let before_len = recording.mark().await;
    let before = recording.all()[..before_len].to_vec();
    let deleted: Vec<&Seen> = before.iter().filter(|s| s.deleted()).collect();
    assert!(
        matches!(deleted[..], [d] if d.name == "p0" && d.synthesized),
        "{before:?}"
    );

    sim.update("pods", Some(NS), "p1", |o| {
        o["metadata"]["labels"]["gen"] = "2".into()
    });
    let daemon = Process::spawn(&config);
    let after = converge_after(sim, &recording, &before, before_len).await;
    let log = daemon.rest();
    let all: Vec<Seen> = before.iter().chain(&after).cloned().collect();
    let mut problems = regressions(&all);
    for s in after.iter().filter(|s| s.uid == deleted[0].uid) {
        problems.push(format!("announced again: {s:?}"));
    }
    assert!(
        problems.is_empty(),
        "{}\n--- log ---\n{log}",
        problems.join("\n")
    );
}

/// The seed of the randomized loop (`KUBE2NATS_FAULT_SEED` replays one).
fn seed() -> u64 {
    std::env::var("KUBE2NATS_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

const KILLS: usize = 15;

/// kill -9 again and again at random moments of a busy stream — two thirds of them within the
/// first second after a start or after its first message (a crash loop, before any checkpoint,
/// some before the first list completes), the
/// history compacted before some restarts (a relist). Per kill: what the restart published
/// again, each the same message (`Nats-Msg-Id`) as before, none at or below the position the
/// journal had confirmed, and no more than was published beyond it (in flight). Across the run:
/// no resourceVersion regression per object and the final state of every object announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_kill_9_loop_repeats_at_most_what_was_in_flight_core() {
    let seed = seed();
    println!("kill -9 loop: seed {seed} (replay with KUBE2NATS_FAULT_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let cluster = Cluster::start(Mode::Core, 100_000).await;
    for i in 0..NAMES / 2 {
        cluster
            .sim
            .create("pods", Some(NS), pod_named(&format!("p{i}"), 0));
    }
    let recording = Recording::start(&cluster.nats.url()).await;
    // Checkpoints every 5 s (the default): most runs are killed before their first.
    let config = cluster.config(PODS_WATCH, "").replace(
        "checkpoint_interval = \"150ms\"",
        "checkpoint_interval = \"5s\"",
    );
    // The busy stream runs throughout, while kube2nats is up and while it is down.
    let sim = &cluster.sim;
    let mut stream_rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let busy = async {
        for op in 0.. {
            random_change(sim, &mut stream_rng, op);
            // Now and then a burst back to back: a batch in flight at the kill.
            let pause = if stream_rng.random_ratio(1, 40) {
                for burst in 0..stream_rng.random_range(20..100) {
                    random_change(sim, &mut stream_rng, op * 1000 + burst);
                }
                0
            } else {
                stream_rng.random_range(0..4000)
            };
            tokio::time::sleep(Duration::from_micros(pause)).await;
        }
    };
    let mut repeats = Vec::new();
    let mut problems = Vec::new();
    let mut run_start = 0;
    // The position confirmed at the previous kill: what the restart after it resumed from.
    let mut confirmed_before = 0;
    let kills = async {
        for kill in 0..KILLS {
            if kill > 0 && rng.random_ratio(1, 4) {
                sim.compact();
            }
            let daemon = Process::spawn(&config);
            let started = tokio::time::Instant::now();
            // A third within the first second after the start, a third within the first second
            // after the run's first message, a third later.
            let up_for = match kill % 3 {
                0 => Duration::from_millis(rng.random_range(0..1000)),
                1 => {
                    let deadline = started + Duration::from_secs(30);
                    while recording.all().len() == run_start
                        && tokio::time::Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    started.elapsed() + Duration::from_millis(rng.random_range(0..1000))
                }
                _ => Duration::from_millis(rng.random_range(1000..4000)),
            };
            tokio::time::sleep_until(started + up_for).await;
            drop(daemon); // SIGKILL
            let up_for = up_for.as_millis();
            let before_len = recording.mark().await;
            let all = recording.all();
            let this_run = &all[run_start..before_len];
            if kill > 0 {
                let (n, bad) = repeats_of(&all[..run_start], this_run, confirmed_before);
                repeats.push(n);
                problems.extend(bad.into_iter().map(|p| format!("kill {}: {p}", kill - 1)));
            }
            let mut ids = HashSet::new();
            for s in this_run {
                if !ids.insert(&s.msg_id) {
                    problems.push(format!("kill {kill}: published twice in one run: {s:?}"));
                }
            }
            confirmed_before = stored_position(&cluster, PODS_KEY).await.unwrap_or(0);
            println!(
                "kill {kill}: up {up_for} ms, {} messages, confirmed up to {confirmed_before}",
                this_run.len()
            );
            run_start = before_len;
        }
    };
    tokio::select! {
        () = kills => {}
        () = busy => unreachable!("the stream runs until the kills are done"),
    }
    let daemon = Process::spawn(&config);
    let earlier = recording.all()[..run_start].to_vec();
    let last = converge_after(&cluster.sim, &recording, &earlier, run_start).await;
    let (n, bad) = repeats_of(&earlier, &last, confirmed_before);
    repeats.push(n);
    problems.extend(bad.into_iter().map(|p| format!("kill {}: {p}", KILLS - 1)));
    let log = daemon.rest();
    let all = recording.all();
    problems.extend(regressions(&all));
    problems.extend(convergence_problems(&cluster.sim, &all));

    // Every write to the state bucket (journal records and checkpoints) is one stream message.
    let state_writes = {
        let js = async_nats::jetstream::new(async_nats::connect(cluster.nats.url()).await.unwrap());
        let mut stream = js.get_stream(format!("KV_{BUCKET}")).await.unwrap();
        stream.info().await.unwrap().state.last_sequence
    };
    let mut sorted = repeats.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let max = sorted[sorted.len() - 1];
    println!(
        "seed {seed}: {KILLS} kills, {} messages, {state_writes} state bucket writes; repeats per kill {repeats:?}: median {median}, max {max}; {} resourceVersion regressions",
        all.len(),
        regressions(&all).len()
    );
    assert!(
        problems.is_empty(),
        "seed {seed}: {} problem(s):\n{}\n--- log of the last run ---\n{log}",
        problems.len(),
        problems.join("\n")
    );
}

/// The repeats a restart published (`after`) of what was published before its kill
/// (`before`), and the problems with them: a repeat of a watch event at or below the
/// `confirmed` position, and more repeats than messages in flight (published beyond it, or
/// made by a relist).
fn repeats_of(before: &[Seen], after: &[Seen], confirmed: u64) -> (usize, Vec<String>) {
    let published: HashMap<&str, &Seen> = before.iter().map(|s| (s.msg_id.as_str(), s)).collect();
    // A relist's messages carry each object's version, not the watch's position: in flight
    // whatever their version.
    let in_flight: HashSet<&str> = before
        .iter()
        .filter(|s| s.rv > confirmed || s.synthesized)
        .map(|s| s.msg_id.as_str())
        .collect();
    let mut problems = Vec::new();
    let mut n = 0;
    for s in after {
        let Some(first) = published.get(s.msg_id.as_str()) else {
            continue;
        };
        n += 1;
        // The same `Nats-Msg-Id` names the same object, version and kind (a deletion or not).
        if (first.uid.as_str(), first.rv, first.deleted()) != (s.uid.as_str(), s.rv, s.deleted()) {
            problems.push(format!("not the same message again: {s:?} after {first:?}"));
        }
        if s.rv <= confirmed && !first.synthesized {
            problems.push(format!(
                "published again although confirmed (up to {confirmed}): {s:?}"
            ));
        }
    }
    if n > in_flight.len() {
        problems.push(format!(
            "{n} repeats, more than the {} messages published beyond the confirmed position {confirmed}",
            in_flight.len()
        ));
    }
    (n, problems)
}
