//! `mirror-lag`: the mirror's write lag at a fixed event rate (docs/mirror.md, "Cost"). Events
//! paced at `--rate` go to core NATS, the watch mirrored into the key-value bucket; a consumer of
//! the bucket's stream (as a KV watch reads it: after the server stored the write) times each
//! write from the API server's send, and the daemon's own `kube2nats_mirror_write_lag_seconds`
//! (handed over → acknowledged) is read for the same writes.

use async_nats::jetstream::consumer;

use super::*;

/// The bucket the daemons' mirror writes (`mirror.bucket`'s default).
const BUCKET: &str = "kube-objects";

/// The daemon's write lag histogram.
const LAG_METRIC: &str = "kube2nats_mirror_write_lag_seconds_bucket{watch=\"pods0\",le=\"";

pub(crate) async fn mirror_lag(env: &Env) -> anyhow::Result<Vec<String>> {
    let a = &env.args;
    let objects = 1000;
    let mut figures: [Vec<f64>; 6] = Default::default();
    for run in 0..a.runs {
        let dir = workdir(env, "mirror-lag")?;
        let scenario = Arc::new(Scenario::new(
            objects,
            a.latency_events,
            Some(a.rate),
            Instant::now(),
        ));
        let changes = scenario.changes();
        let (nats, nats_url) = start_nats(env, dir.path()).await?;
        let server = Worker::start("apiserver");
        let subscriber = Worker::start("subscriber");
        let api_port = server
            .handle
            .spawn(apiserver::serve(scenario.clone()))
            .await??;
        let events = Arc::new(Arrivals::default());
        subscriber
            .handle
            .spawn(subscribe(
                nats_url.clone(),
                events.clone(),
                Some(scenario.clone()),
            ))
            .await??;
        let http_port = free_port()?;
        let mut daemon = start_kube2nats(
            env,
            dir.path(),
            &DaemonCfg {
                state: a.state != "off",
                http_port: Some(http_port),
                api_port,
                nats_url: &nats_url,
                jetstream: false,
                initial_state: "skip",
                namespaces: &[],
                watches: 1,
                watch_extra: "mirror = true\n",
            },
        )?;
        daemon.metrics_port = Some(http_port);
        if !wait_for_watch(&scenario).await {
            bail!(
                "kube2nats never opened the watch; see {}",
                dir.path().display()
            );
        }
        // Every write, the list's puts first (their versions are not timed).
        let writes = Arc::new(Arrivals::default());
        subscriber
            .handle
            .spawn(watch_bucket(
                nats_url.clone(),
                writes.clone(),
                scenario.clone(),
            ))
            .await??;
        let secs = a.latency_events / a.rate.max(1) + 60;
        // The list's puts are acknowledged before the first paced write (acknowledgements are
        // taken in order): the histogram is read then, and again once the last change is in
        // the bucket (a key's earlier writes may be gone by then: the bucket keeps one each).
        let timed = |arrivals: &Arrivals, index: u64| {
            let latencies = arrivals.latencies.lock().expect("not poisoned");
            latencies.iter().any(|(i, _)| *i >= index)
        };
        let started = wait_until(Duration::from_secs(secs), || timed(&writes, 0)).await;
        let before = lag_buckets(&daemon).await;
        let all = wait_until(Duration::from_secs(secs), || {
            events.count.load(Ordering::Relaxed) >= changes && timed(&writes, changes - 1)
        })
        .await;
        if !(started && all) {
            bail!(
                "mirror-lag run: {} of {changes} events and {} bucket writes arrived; see {}",
                events.count.load(Ordering::Relaxed),
                writes.count.load(Ordering::Relaxed),
                dir.path().display()
            );
        }
        let after = lag_buckets(&daemon).await;
        let (event_p50, event_p99) = percentiles(&events);
        let (write_p50, write_p99) = percentiles(&writes);
        let (metric_p50, metric_p99) = (
            histogram_quantile(&before, &after, 0.5),
            histogram_quantile(&before, &after, 0.99),
        );
        eprintln!(
            "mirror-lag run {}: {changes} events at {}/s; API server → event subscriber p50 {event_p50:.0} µs, p99 {event_p99:.0} µs; API server → bucket watcher p50 {write_p50:.0} µs, p99 {write_p99:.0} µs; mirror_write_lag_seconds p50 ≤ {:.1} ms, p99 ≤ {:.1} ms",
            run + 1,
            a.rate,
            metric_p50 * 1000.0,
            metric_p99 * 1000.0
        );
        for (figure, value) in figures.iter_mut().zip([
            event_p50,
            event_p99,
            write_p50,
            write_p99,
            metric_p50 * 1000.0,
            metric_p99 * 1000.0,
        ]) {
            figure.push(value);
        }
        daemon.stop().await;
        nats.stop().await;
        finish_dir(env, dir);
    }
    let [event_p50, event_p99, write_p50, write_p99, metric_p50, metric_p99] = &figures;
    Ok(vec![
        format!(
            "mirror write lag, events to core NATS, {} events at {}/s:",
            a.latency_events, a.rate
        ),
        format!(
            "  API server → event subscriber p50 / p99 (µs): {} / {}",
            stat(event_p50, 0),
            stat(event_p99, 0)
        ),
        format!(
            "  API server → bucket watcher p50 / p99 (µs):   {} / {}",
            stat(write_p50, 0),
            stat(write_p99, 0)
        ),
        format!(
            "  mirror_write_lag_seconds p50 / p99 (ms, bucket bounds): {} / {}",
            stat(metric_p50, 1),
            stat(metric_p99, 1)
        ),
    ])
}

/// Receives every message of the bucket's stream, stored, as a KV watch does, and times it.
async fn watch_bucket(
    url: String,
    writes: Arc<Arrivals>,
    scenario: Arc<Scenario>,
) -> anyhow::Result<()> {
    let client = async_nats::connect(url).await?;
    let js = async_nats::jetstream::new(client.clone());
    let stream = js.get_stream(format!("KV_{BUCKET}")).await?;
    let consumer = stream
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            writes.record(&scenario, message.headers.as_ref());
        }
        drop(client);
    });
    Ok(())
}

/// p50 and p99 of the timed arrivals, in µs.
fn percentiles(arrivals: &Arrivals) -> (f64, f64) {
    let mut lat: Vec<u64> = arrivals
        .latencies
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|(_, ns)| *ns)
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| match lat.len() {
        0 => f64::NAN,
        n => lat[((n as f64 * p) as usize).min(n - 1)] as f64 / 1000.0,
    };
    (pct(0.5), pct(0.99))
}

/// The write lag histogram's cumulative buckets: (upper bound in seconds, count).
async fn lag_buckets(daemon: &Proc) -> Vec<(f64, f64)> {
    let text = daemon.metrics_text().await;
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(LAG_METRIC)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.parse().ok()?))
        })
        .collect()
}

/// The upper bound of the bucket holding quantile `q` of the writes between two readings.
fn histogram_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> f64 {
    let counts: Vec<(f64, f64)> = after
        .iter()
        .map(|&(le, n)| {
            let earlier = before
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, n)| *n);
            (le, n - earlier)
        })
        .collect();
    let total = counts.last().map_or(0.0, |(_, n)| *n);
    counts
        .iter()
        .find(|(_, n)| *n >= q * total && total > 0.0)
        .map_or(f64::NAN, |(le, _)| *le)
}
