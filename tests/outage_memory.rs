//! Memory bounded in bytes during a NATS outage and the catch-up after it. A test binary of its
//! own: it measures the daemon's peak resident memory, which depends on how far its watches get
//! before the byte budget stops them, so it must not share the machine with the other tests
//! (cargo runs test binaries one after another).

mod common;

use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;

/// Watch targets (namespaces) and object size of the outage tests: 300 MiB in all.
const NAMESPACES: usize = 300;
const OBJECT_BYTES: usize = 1 << 20;
/// `nats.max_buffered_bytes` in the outage test.
const BUDGET_MIB: u64 = 16;
/// What the process may hold beyond the budget, over its RSS once synced. Over HTTP/1.1 each
/// watch connection has hyper's own read buffer, which the budget cannot see and reqwest cannot
/// cap: up to 408 KiB each once data floods in on all 300 (120 MiB), kept while the connection
/// lives (over TLS too: watches use HTTP/1.1 there, a connection each). The rest (80 MiB) is for
/// lines assembled in buffers grown by doubling (up to twice what the budget counts), the one
/// line a stream may finish past the budget, TLS buffers, and the allocator's slack. Measured:
/// peak +172 MiB plain, +179 MiB over TLS (during the catch-up; 74 MiB at the end of the
/// outage); before idle watches let go of their last line, +258..+354 MiB during the catch-up.
const OVERHEAD_MIB: u64 = 120 + 80;

/// How the daemon reaches the simulated API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// Plain HTTP/1.1.
    Plain,
    /// TLS, where the server offers HTTP/2 (ALPN) like kube-apiserver.
    Tls,
}

/// The tests of this binary measure one daemon's memory each: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How far `buffered_bytes` may go past the budget: the one line a watch may finish past it (an
/// object of the test and its event's framing, headers and subject).
const OVERDRAFT_BYTES: u64 = OBJECT_BYTES as u64 + 64 * 1024;

/// `kube2nats_*` samples of a running binary's `/metrics`.
async fn scrape(http: &reqwest::Client, url: &str, name: &str) -> f64 {
    let text = match http.get(url).send().await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    metric(&text, name, &[]).unwrap_or(0.0)
}

/// What the outage scenario measured of the kube2nats process, in MiB.
#[derive(Debug)]
struct OutageMemory {
    /// RSS once all targets were synced, before the outage.
    synced: u64,
    /// Peak of `kube2nats_buffered_bytes` during the outage, in bytes.
    peak_buffered: f64,
    /// From NATS back to every object stored.
    catch_up: Duration,
    /// Peak RSS (VmHWM) at the end of the outage, and after the catch-up.
    outage_peak: u64,
    peak: u64,
}

/// 300 namespaces, each receiving an object of 1 MiB while NATS (JetStream) is down, then NATS
/// back: asserts the budget of `budget_mib` is spent and reported, and that afterwards every
/// object is in the stream exactly once; returns what the process held.
async fn outage_and_recovery(budget_mib: u64, api: Api) -> OutageMemory {
    use futures_util::StreamExt;
    let _alone = ONE_AT_A_TIME.lock().await;
    let sim = ApiServer::start(ApiServerOptions {
        tls: api == Api::Tls,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut nats = NatsServer::start_with(kube2nats_harness::nats::NatsOptions {
        max_payload: Some(4 << 20),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    let http_port = free_port();
    let namespaces: Vec<String> = (0..NAMESPACES).map(|i| format!("\"ns-{i}\"")).collect();
    let budget_bytes = budget_mib << 20;
    let text = format!(
        "{}\n[nats]\nurl = \"{}\"\nmode = \"jetstream\"\nmax_buffered_bytes = {budget_bytes}\n\
         [nats.jetstream]\nack_timeout = \"2s\"\n[nats.jetstream.stream]\nname = \"KUBE\"\nsubjects = [\"kube.>\"]\n\
         [state]\nenabled = false\n\
         [[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [{}]\n",
        kube_section(&sim, &token).replace("127.0.0.1:0", &format!("127.0.0.1:{http_port}")),
        nats.url(),
        namespaces.join(", ")
    );
    let daemon = Process::spawn(&text);
    let http = reqwest::Client::new();
    let metrics_url = format!("http://127.0.0.1:{http_port}/metrics");
    let deadline = tokio::time::Instant::now() + WAIT * 12;
    while scrape(&http, &metrics_url, "kube2nats_watch_synced").await != 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "300 targets synced");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let synced_kib = rss_kib(daemon.pid());

    nats.stop().await;
    let blob = "x".repeat(OBJECT_BYTES);
    for i in 0..NAMESPACES {
        let mut big = pod("big");
        big["spec"]["blob"] = blob.as_str().into();
        sim.create("pods", Some(&format!("ns-{i}")), big);
    }
    // Until the budget is spent, then a while longer.
    let mut peak_buffered = 0.0f64;
    let mut spent_at = None;
    let deadline = tokio::time::Instant::now() + WAIT * 12;
    loop {
        let buffered = scrape(&http, &metrics_url, "kube2nats_buffered_bytes").await;
        peak_buffered = peak_buffered.max(buffered);
        if buffered >= budget_bytes as f64 && spent_at.is_none() {
            spent_at = Some(tokio::time::Instant::now());
        }
        let done = spent_at.is_some_and(|at| at.elapsed() > Duration::from_secs(5));
        if done || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        spent_at.is_some(),
        "the byte budget was never spent (buffered_bytes peaked at {peak_buffered})"
    );
    let outage_peak_kib = peak_rss_kib(daemon.pid());

    // NATS back: every object reaches the stream, once.
    nats.restart().await.unwrap();
    let back_at = tokio::time::Instant::now();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc);
    let deadline = tokio::time::Instant::now() + WAIT * 30;
    loop {
        let stored = match js.get_stream("KUBE").await {
            Ok(mut stream) => stream.info().await.map_or(0, |i| i.state.messages),
            Err(_) => 0,
        };
        if stored >= NAMESPACES as u64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {stored} of {NAMESPACES} objects stored after NATS came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let catch_up = back_at.elapsed();
    let peak_kib = peak_rss_kib(daemon.pid());
    let stream = js.get_stream("KUBE").await.unwrap();
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            headers_only: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer
        .fetch()
        .max_messages(1000)
        .messages()
        .await
        .unwrap();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    while seen.values().sum::<usize>() < NAMESPACES {
        let message = tokio::time::timeout(WAIT, messages.next())
            .await
            .expect("a stored message")
            .expect("a stored message")
            .unwrap();
        let headers = message.headers.clone().unwrap_or_default();
        let field = |name: &str| headers.get(name).map(|v| v.to_string()).unwrap_or_default();
        assert_eq!(field("Kube-Event-Type"), "ADDED");
        assert_eq!(field("Kube-Payload"), "", "published whole");
        *seen.entry(field("Kube-Namespace")).or_default() += 1;
    }
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
    assert!(repeated.is_empty(), "repeated: {repeated:?}");
    assert_eq!(seen.len(), NAMESPACES, "each namespace's object once");
    let stored = js
        .get_stream("KUBE")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages;
    assert_eq!(stored, NAMESPACES as u64, "nothing else in the stream");
    let memory = OutageMemory {
        synced: synced_kib / 1024,
        peak_buffered,
        catch_up,
        outage_peak: outage_peak_kib / 1024,
        peak: peak_kib / 1024,
    };
    println!(
        "{api:?}: RSS {} MiB synced, peak {} MiB in the outage, {} MiB after; buffered_bytes peak {:.1} MiB; caught up in {:.1?}",
        memory.synced,
        memory.outage_peak,
        memory.peak,
        memory.peak_buffered / (1 << 20) as f64,
        memory.catch_up
    );
    memory
}

/// 300 namespaces, each receiving an object of 1 MiB while NATS (JetStream) is down, over plain
/// HTTP/1.1 (one connection per watch, each with hyper's own read buffer): the process's peak
/// resident memory (VmHWM) across the outage and across the catch-up after it stays within the
/// byte budget plus those buffers and a fixed slack over what it held once synced (it would
/// otherwise hold all 300 MiB, and did during the catch-up while each idle watch kept its last
/// line's buffer). Once NATS is back every object is in the stream exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_outage_and_catch_up_with_300_targets_of_1_mib_objects_stay_within_the_byte_budget()
{
    let memory = outage_and_recovery(BUDGET_MIB, Api::Plain).await;
    assert_within_bounds(&memory);
}

/// The same outage over TLS, where the API server offers HTTP/2: if the watches shared one
/// HTTP/2 connection, the 300 large objects would arrive interleaved on it, and a watch that
/// may not read would hold its share of the connection's flow-control window, starving the one
/// finishing its line (this stalled for good with 5 MiB buffered). Delivery must not stall:
/// once NATS is back every object is in the stream exactly once; the budget is held within one
/// line, and the process's peak memory within the budget plus the connections' buffers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_outage_over_tls_with_300_targets_of_1_mib_objects_catches_up_within_the_byte_budget(
) {
    let memory = outage_and_recovery(BUDGET_MIB, Api::Tls).await;
    assert_within_bounds(&memory);
}

/// `buffered_bytes` never went past the budget by more than the one line a watch may finish
/// past it (sampled every 50 ms), and the peak RSS stayed within the budget and the overhead
/// over what the process held once synced.
fn assert_within_bounds(memory: &OutageMemory) {
    let buffered_bound = (BUDGET_MIB << 20) + OVERDRAFT_BYTES;
    assert!(
        memory.peak_buffered <= buffered_bound as f64,
        "buffered_bytes peaked at {:.1} MiB: more than the budget ({BUDGET_MIB} MiB) and one line",
        memory.peak_buffered / (1 << 20) as f64
    );
    let bound = memory.synced + BUDGET_MIB + OVERHEAD_MIB;
    assert!(
        memory.outage_peak <= bound && memory.peak <= bound,
        "peak RSS {} MiB at the end of the outage, {} MiB after the catch-up: more than the {} MiB once synced, the budget ({BUDGET_MIB} MiB) and the overhead ({OVERHEAD_MIB} MiB)",
        memory.outage_peak,
        memory.peak,
        memory.synced
    );
}
