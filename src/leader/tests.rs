//! The elector against the simulated API server, in process: it never trusts another machine's
//! clock, two candidates for a free Lease never both win, and a holder whose Lease was taken over
//! ends its term at its next renewal; a slow read or a deleted Lease never makes two holders.

//!
//! And, without an API server: who a candidate is and in which namespace it runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::LeaderElectionConfig;
use crate::kube::credentials::{AuthSource, Endpoint};
use crate::kube::testing::{client, token_file};
use crate::kube::ApiClient;

/// How long a test waits for something that should happen promptly.
const WAIT: Duration = Duration::from_secs(10);

const LEASE: Duration = Duration::from_secs(3);

fn election(lease_duration: Duration, renew_deadline: Duration) -> LeaderElectionConfig {
    LeaderElectionConfig {
        enabled: true,
        lease_name: "kube2nats".into(),
        namespace: Some("default".into()),
        lease_duration,
        renew_deadline,
        retry_period: Duration::from_millis(200),
    }
}

/// Short timings: lease 3 s, renew deadline 2 s, retry 0.2 s.
fn short() -> LeaderElectionConfig {
    election(LEASE, Duration::from_secs(2))
}

/// What a running elector reports: when each term started, and when it ended.
enum Term {
    Started(Instant),
    Lost(Instant),
}

/// Runs an elector named `identity` with `config` until `shutdown`; each term lasts until it is
/// lost.
fn run(
    sim: &ApiServer,
    identity: &str,
    config: LeaderElectionConfig,
    shutdown: CancellationToken,
) -> mpsc::UnboundedReceiver<Term> {
    let client = client(sim, Some(sim.token_file()), Duration::from_secs(60));
    run_with(client, identity, config, shutdown)
}

/// [`run`] with a client of its own.
fn run_with(
    client: Arc<ApiClient>,
    identity: &str,
    config: LeaderElectionConfig,
    shutdown: CancellationToken,
) -> mpsc::UnboundedReceiver<Term> {
    let metrics = LeaderMetrics::register(&prometheus::Registry::new()).unwrap();
    let candidate = Candidate {
        identity: identity.into(),
        namespace: "default".into(),
        lease_name: "kube2nats".into(),
    };
    let elector = Elector::new(client, candidate, config, metrics);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let lead = |lost: CancellationToken| {
            let tx = tx.clone();
            let shutdown = shutdown.clone();
            async move {
                let _ = tx.send(Term::Started(Instant::now()));
                tokio::select! {
                    _ = lost.cancelled() => { let _ = tx.send(Term::Lost(Instant::now())); }
                    _ = shutdown.cancelled() => {}
                }
                Ok(())
            }
        };
        let _ = elector.run(&shutdown.clone(), lead).await;
    });
    rx
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Term>, within: Duration) -> Option<Term> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

fn lease_held_by(holder: &str, renew_time: &str) -> serde_json::Value {
    json!({
        "metadata": { "name": "kube2nats" },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 3,
            "acquireTime": renew_time,
            "renewTime": renew_time,
            "leaseTransitions": 4
        }
    })
}

/// A Lease renewed "in 1999" or "in 2100" by another machine's clock is treated alike: held until
/// it has gone unchanged for its duration *as this replica observed it*, then taken over (with
/// one more transition). An elector trusting the remote timestamp would take the first at once
/// and never take the second.
#[tokio::test]
async fn remote_timestamps_are_never_compared_with_the_local_clock() {
    for renew_time in ["1999-01-01T00:00:00.000000Z", "2100-01-01T00:00:00.000000Z"] {
        let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
        sim.create(
            "leases",
            Some("default"),
            lease_held_by("other", renew_time),
        );
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        let mut terms = run(&sim, "me", short(), shutdown.clone());
        let Some(Term::Started(at)) = next(&mut terms, WAIT).await else {
            panic!("never acquired the abandoned Lease (renewTime {renew_time})");
        };
        assert!(
            at.duration_since(started) >= LEASE,
            "took the Lease after {:?}, before it went unrenewed for {LEASE:?} (renewTime {renew_time})",
            at.duration_since(started)
        );
        let lease = sim.get("leases", Some("default"), "kube2nats").unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], "me");
        assert_eq!(lease["spec"]["leaseTransitions"], 5);
        shutdown.cancel();
    }
}

/// Two candidates, one free Lease (released: no holder): exactly one wins, by the API server's
/// compare-and-swap, and the other keeps standing by while the winner renews.
#[tokio::test]
async fn two_candidates_never_both_acquire() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    sim.create(
        "leases",
        Some("default"),
        lease_held_by("", "2026-01-01T00:00:00.000000Z"),
    );
    let shutdown = CancellationToken::new();
    let mut one = run(&sim, "one", short(), shutdown.clone());
    let mut two = run(&sim, "two", short(), shutdown.clone());
    let (first, second) = tokio::join!(next(&mut one, LEASE * 2), next(&mut two, LEASE * 2));
    let winners = [&first, &second]
        .iter()
        .filter(|t| matches!(t, Some(Term::Started(_))))
        .count();
    assert_eq!(winners, 1, "exactly one candidate holds the Lease");
    let holder = sim.get("leases", Some("default"), "kube2nats").unwrap()["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_owned();
    let expected = if first.is_some() { "one" } else { "two" };
    assert_eq!(holder, expected);
    shutdown.cancel();
}

/// A holder that finds, at a renewal, that someone else wrote the Lease (409 on its optimistic
/// update, then another holder on reading) ends its term then (every 0.2 s), not at its renew
/// deadline (8 s here).
#[tokio::test]
async fn a_holder_whose_lease_was_taken_ends_its_term_at_the_next_renewal() {
    let sim = Arc::new(ApiServer::start(ApiServerOptions::default()).await.unwrap());
    let shutdown = CancellationToken::new();
    let long_deadline = election(Duration::from_secs(10), Duration::from_secs(8));
    let mut terms = run(&sim, "me", long_deadline, shutdown.clone());
    assert!(matches!(
        next(&mut terms, WAIT).await,
        Some(Term::Started(_))
    ));
    sim.update("leases", Some("default"), "kube2nats", |lease| {
        lease["spec"]["holderIdentity"] = json!("intruder");
    });
    let taken = Instant::now();
    let Some(Term::Lost(at)) = next(&mut terms, WAIT).await else {
        panic!("the term did not end");
    };
    assert!(
        at.duration_since(taken) < Duration::from_secs(4),
        "ended {:?} after the takeover: at the renew deadline, not at the next renewal",
        at.duration_since(taken)
    );
    // Back to standby: it does not take the intruder's Lease while the intruder's record is fresh.
    assert!(next(&mut terms, Duration::from_secs(2)).await.is_none());
    shutdown.cancel();
}

/// A standby's read of the Lease is slowed 2.5 s on its way in (more than lease duration − renew
/// deadline, 1 s here), and the holder renews until just before the store is read, then stops.
/// The holder may publish until its renew deadline after that renewal, so the standby must not
/// take over sooner than a lease duration after it: it counts from when its read *returned*
/// (client-go's observedTime). Counting from when the read was sent, it took over about 1 s
/// after the last renewal, while the holder still had a second to go.
#[tokio::test]
async fn a_slow_read_counts_the_lease_from_when_it_returned() {
    let sim = Arc::new(ApiServer::start(ApiServerOptions::default()).await.unwrap());
    sim.create(
        "leases",
        Some("default"),
        lease_held_by("holder", "2026-01-01T00:00:00.000000Z"),
    );
    let renew = |sim: &ApiServer, step: u32| {
        sim.update("leases", Some("default"), "kube2nats", |lease| {
            lease["spec"]["renewTime"] =
                json!(format!("2026-01-01T00:00:{:02}.000000Z", step % 60));
        });
        Instant::now()
    };
    let shutdown = CancellationToken::new();
    let mut terms = run(&sim, "standby", short(), shutdown.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let slow = Duration::from_millis(2500);
    sim.slow_lease_reads(1, slow);
    let mut step = 0;
    let mut last_renewal = renew(&sim, step);
    while sim.slow_lease_reads_arrived() == 0 {
        step += 1;
        last_renewal = renew(&sim, step);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let read_sent = Instant::now();
    while read_sent.elapsed() < slow - Duration::from_millis(200) {
        step += 1;
        last_renewal = renew(&sim, step);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(Term::Started(at)) = next(&mut terms, WAIT).await else {
        panic!("the standby never took over");
    };
    let after = at.duration_since(last_renewal);
    eprintln!("slow read: took over {after:?} after the holder's last renewal");
    assert!(
        after >= LEASE,
        "took over {after:?} after the holder's last renewal, before the lease duration ({LEASE:?}): the holder may still publish until its renew deadline"
    );
    shutdown.cancel();
}

/// The Lease is deleted while held (by a person, or a namespace clean-up racing a rollout). The
/// holder finds it gone at its next renewal and ends its term at once; the standby, which saw the
/// holder, does not create a new Lease until a lease duration has passed since it first found it
/// missing. So no term starts before the holder's has ended, and the Lease is held again
/// afterwards. Before, the standby created it at once and led while the holder kept
/// publishing until its next renewal failed, or the holder recreated it and kept its term.
#[tokio::test]
async fn a_lease_deleted_while_held_is_waited_out_and_ends_the_holders_term() {
    let sim = Arc::new(ApiServer::start(ApiServerOptions::default()).await.unwrap());
    let shutdown = CancellationToken::new();
    let mut holder = run(&sim, "holder", short(), shutdown.clone());
    assert!(matches!(
        next(&mut holder, WAIT).await,
        Some(Term::Started(_))
    ));
    let mut standby = run(&sim, "standby", short(), shutdown.clone());
    // The standby has seen the holder's record (and some renewals).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(next(&mut standby, Duration::ZERO).await.is_none());
    sim.delete("leases", Some("default"), "kube2nats")
        .expect("the Lease exists");
    let deleted = Instant::now();
    let Some(Term::Lost(lost)) = next(&mut holder, Duration::from_secs(2)).await else {
        panic!("the holder kept its term after its Lease was deleted");
    };
    eprintln!(
        "deleted Lease: the holder ended its term {:?} after the deletion",
        lost.duration_since(deleted)
    );
    // Whoever holds the Lease next started after the old term ended, once the lease duration
    // since the holder's last renewal (at most one retry period before the deletion) had passed.
    let next_term = tokio::select! {
        t = next(&mut holder, WAIT) => t,
        t = next(&mut standby, WAIT) => t,
    };
    let Some(Term::Started(started)) = next_term else {
        panic!("nobody took the Lease again");
    };
    let after = started.duration_since(deleted);
    eprintln!("deleted Lease: held again {after:?} after the deletion");
    assert!(started > lost, "a term started before the holder's ended");
    // The last renewal either saw came at most two retry periods before the deletion.
    assert!(
        after >= LEASE - Duration::from_millis(600),
        "the Lease was created again {after:?} after its deletion, before the holder's lease ran out"
    );
    shutdown.cancel();
}

/// A standby whose reads stopped for longer than a lease duration (its process starved of CPU,
/// its requests held by a partition) finds, at its first read after, the Lease deleted meanwhile:
/// it does not take it at once, since the holder renews until its next attempt (a retry period
/// after its last), but a lease duration from when it found it missing. Counted from when it last
/// saw the holder's record change, the wait was over before it began: it took the Lease at its
/// next attempt and led beside the holder until the holder's next renewal.
#[tokio::test]
async fn a_standby_that_stopped_reading_waits_out_a_lease_deleted_meanwhile() {
    let sim = Arc::new(ApiServer::start(ApiServerOptions::default()).await.unwrap());
    sim.set_valid_tokens(&["test-token", "standby-token"]);
    let shutdown = CancellationToken::new();
    // The holder renews every 1.5 s; the standby tries every 0.2 s.
    let slow_renewals = LeaderElectionConfig {
        retry_period: Duration::from_millis(1500),
        ..short()
    };
    let mut holder = run(&sim, "holder", slow_renewals, shutdown.clone());
    assert!(matches!(
        next(&mut holder, WAIT).await,
        Some(Term::Started(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let standby_token = token_file(dir.path(), "standby-token");
    let standby_client = client(&sim, Some(standby_token), Duration::from_secs(60));
    let mut standby = run_with(standby_client, "standby", short(), shutdown.clone());
    tokio::time::sleep(Duration::from_millis(800)).await;
    sim.cut_off("standby-token");
    tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
    // Right after one of the holder's renewals, so its next comes a retry period later.
    let renew_time = |sim: &ApiServer| {
        sim.get("leases", Some("default"), "kube2nats")
            .map(|lease| lease["spec"]["renewTime"].clone())
    };
    let renewed = renew_time(&sim);
    let deadline = Instant::now() + WAIT;
    while renew_time(&sim) == renewed {
        assert!(Instant::now() < deadline, "the holder stopped renewing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim.delete("leases", Some("default"), "kube2nats")
        .expect("the Lease exists");
    let deleted = Instant::now();
    sim.reconnect("standby-token");
    let Some(Term::Lost(lost)) = next(&mut holder, WAIT).await else {
        panic!("the holder kept its term after its Lease was deleted");
    };
    let next_term = tokio::select! {
        t = next(&mut holder, WAIT) => t,
        t = next(&mut standby, WAIT) => t,
    };
    let Some(Term::Started(started)) = next_term else {
        panic!("nobody took the Lease again");
    };
    eprintln!(
        "deleted while the standby was not reading: the holder ended its term {:?} after the deletion, the next began {:?} after it",
        lost.duration_since(deleted),
        started.duration_since(deleted)
    );
    assert!(
        started > lost,
        "a term started {:?} after the deletion, before the holder's ended ({:?} after it)",
        started.duration_since(deleted),
        lost.duration_since(deleted)
    );
    shutdown.cancel();
}

/// The holder loses the API server: its renewals get no answer. Whether its client gives a
/// request up sooner (0.3 s) or later (30 s) than the time left before the renew deadline, the
/// term ends within the renew deadline of the last renewal that succeeded, not when a hung
/// request finally times out.
#[tokio::test]
async fn a_hung_renewal_ends_the_term_at_the_renew_deadline_whatever_the_request_timeout() {
    let renew_deadline = Duration::from_secs(2);
    for request_timeout in [Duration::from_millis(300), Duration::from_secs(30)] {
        let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
        sim.set_valid_tokens(&["test-token", "holder-token"]);
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Endpoint {
            base_url: sim.url().parse().unwrap(),
            ca_pem: sim.ca_file().map(|p| std::fs::read(p).unwrap()),
            identity_pem: None,
            auth: Some(AuthSource::file(
                token_file(dir.path(), "holder-token"),
                Duration::from_secs(60),
            )),
            insecure_skip_tls_verify: false,
            proxy_url: None,
        };
        let counter =
            crate::kube::client::register_api_requests(&prometheus::Registry::new()).unwrap();
        let client = Arc::new(ApiClient::new(endpoint, request_timeout, counter).unwrap());
        let shutdown = CancellationToken::new();
        let mut terms = run_with(client, "holder", short(), shutdown.clone());
        assert!(matches!(
            next(&mut terms, WAIT).await,
            Some(Term::Started(_))
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
        sim.cut_off("holder-token");
        // The last renewal that succeeded was sent before the cut.
        let cut = Instant::now();
        let Some(Term::Lost(at)) = next(&mut terms, WAIT).await else {
            panic!("the term did not end (request timeout {request_timeout:?})");
        };
        let after = at.duration_since(cut);
        eprintln!("request timeout {request_timeout:?}: term ended {after:?} after the cut");
        assert!(
            after <= renew_deadline + Duration::from_millis(300),
            "the term ended {after:?} after the cut, past the renew deadline ({renew_deadline:?}) (request timeout {request_timeout:?})"
        );
        shutdown.cancel();
    }
}

fn config(extra: &str) -> Config {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!("{extra}\n[[watches]]\nname = \"pods\"\nresource = \"pods\"\n"),
    )
    .unwrap();
    crate::config::load(Some(&path), Some(HashMap::new())).unwrap()
}

fn resolve(
    c: &Config,
    env: &[(&str, &str)],
    files: &[(&str, &str)],
) -> Result<Candidate, NoNamespace> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let files: HashMap<String, String> = files
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Candidate::resolve(c, |k| env.get(k).cloned(), |p| files.get(p).cloned())
}

/// `name` followed by `_` and 8 hex digits.
fn assert_named(identity: &str, name: &str) {
    let suffix = identity
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('_'))
        .unwrap_or_else(|| panic!("{identity:?} is not {name:?} plus a suffix"));
    assert!(
        suffix.len() == 8 && suffix.chars().all(|c| c.is_ascii_hexdigit()),
        "{identity:?}"
    );
}

#[test]
fn identity_is_the_pod_name_then_the_hostname_with_a_random_suffix() {
    let c = config("[leader_election]\nnamespace = \"ops\"");
    let got = resolve(&c, &[("POD_NAME", "k2n-7d9f-abc"), ("HOSTNAME", "h")], &[]).unwrap();
    assert_named(&got.identity, "k2n-7d9f-abc");
    assert_eq!(got.namespace, "ops");
    let got = resolve(&c, &[], &[(HOSTNAME_FILE, "node-host\n")]).unwrap();
    assert_named(&got.identity, "node-host");
    assert_named(&resolve(&c, &[], &[]).unwrap().identity, "kube2nats");
}

/// Two processes with one hostname and no POD_NAME (hostNetwork pods, two on a laptop) are
/// two candidates: with one identity each would take the other's Lease for its own.
#[test]
fn two_processes_with_one_hostname_have_different_identities() {
    let c = config("[leader_election]\nnamespace = \"ops\"");
    let env = [("HOSTNAME", "shared-host")];
    let identities: std::collections::HashSet<String> = (0..8)
        .map(|_| resolve(&c, &env, &[]).unwrap().identity)
        .collect();
    assert_eq!(identities.len(), 8, "{identities:?}");
}

#[test]
fn namespace_is_configured_then_pod_namespace_then_service_account_file() {
    let c = config("");
    let sa = crate::config::DEFAULT_NAMESPACE_FILE;
    let got = resolve(&c, &[("POD_NAMESPACE", "env-ns")], &[(sa, "file-ns")]).unwrap();
    assert_eq!(got.namespace, "env-ns");
    let in_pod = [("KUBERNETES_SERVICE_HOST", "10.0.0.1")];
    let got = resolve(&c, &in_pod, &[(sa, "file-ns\n")]).unwrap();
    assert_eq!(got.namespace, "file-ns");
    // Outside a pod the credentials come from a kubeconfig: no service-account file.
    assert!(resolve(&c, &[], &[(sa, "file-ns\n")]).is_err());
    let err = resolve(&c, &in_pod, &[]).unwrap_err().to_string();
    assert!(
        err.starts_with("leader_election.namespace: not set"),
        "{err}"
    );
}
