//! The throughput scenarios: CPU per event of kube2nats and its peers, core and JetStream, with
//! durable state and noise-control variants, in interleaved runs.

use super::*;

pub(crate) struct RunResult {
    pub(crate) events_per_sec: f64,
    pub(crate) kube_cpu_per_100k: f64,
    pub(crate) events_per_cpu_sec: f64,
    pub(crate) peak_rss_mib: f64,
    /// Peak RSS when the watch opened (the list done): what the event stream adds is the rest.
    pub(crate) listed_rss_mib: f64,
    /// kube2nats' user/system CPU, system calls and context switches per 100k events.
    pub(crate) counters: procfs::Counters,
    pub(crate) server_cpu_per_100k: f64,
    pub(crate) subscriber_cpu_per_100k: f64,
    pub(crate) nats_cpu_per_100k: f64,
    /// Bytes the API server sent (list and watch bodies) per published event.
    pub(crate) api_bytes_per_event: f64,
    /// Payload bytes the subscriber received per event.
    pub(crate) nats_bytes_per_event: f64,
    /// Durable state: journal writes, and objects recorded per write (`NaN` without state).
    pub(crate) journal_writes: f64,
    pub(crate) journal_records_per_write: f64,
}

pub(crate) async fn throughput(env: &Env, jetstream: bool) -> anyhow::Result<Vec<String>> {
    let events = if jetstream {
        env.args.jetstream_events.unwrap_or(env.args.events)
    } else {
        env.args.events
    };
    let mode = if jetstream { "jetstream" } else { "core" };
    let states: &[bool] = match env.args.state.as_str() {
        "both" => &[true, false],
        "off" => &[false],
        _ => &[true],
    };
    let noises: Vec<&str> = env.args.noise.split(',').map(str::trim).collect();
    let variants: Vec<(bool, &str)> = states
        .iter()
        .flat_map(|&state| noises.iter().map(move |&noise| (state, noise)))
        .collect();
    // Runs alternate between the variants, so a machine that gets busier or quieter over time
    // affects both alike.
    let mut results: Vec<Vec<RunResult>> = variants.iter().map(|_| Vec::new()).collect();
    for run in 0..env.args.runs {
        for (v, &(state, noise)) in variants.iter().enumerate() {
            let daemon = Forwarder::Kube2nats {
                bin: env.kube2nats.clone(),
                state,
            };
            let r =
                throughput_run(env, jetstream, &daemon, noise, env.args.objects, events).await?;
            let c = &r.counters;
            eprintln!(
                "{mode} (state {}, noise {noise}) run {}: {:.0} events/s end to end, kube2nats {:.3} CPU-s/100k events ({:.0} events per CPU-second; user {:.3}, system {:.3}; per 100k events: {:.0} read and {:.0} write calls, {:.0} voluntary and {:.0} involuntary context switches, {:.0} minor page faults, {:.1} MB written), peak RSS {:.1} MiB ({:.1} when the watch opened); CPU-s/100k: API server {:.3}, subscriber {:.3}, nats-server {:.3}; journal: {} writes, {:.1} objects each",
                on_off(state),
                run + 1,
                r.events_per_sec,
                r.kube_cpu_per_100k,
                r.events_per_cpu_sec,
                c.user_s,
                c.system_s,
                c.read_calls,
                c.write_calls,
                c.voluntary_switches,
                c.involuntary_switches,
                c.minor_faults,
                c.written_bytes / 1e6,
                r.peak_rss_mib,
                r.listed_rss_mib,
                r.server_cpu_per_100k,
                r.subscriber_cpu_per_100k,
                r.nats_cpu_per_100k,
                r.journal_writes,
                r.journal_records_per_write
            );
            results[v].push(r);
        }
    }
    let mut lines = Vec::new();
    for (results, &(state, noise)) in results.iter().zip(&variants) {
        let col = |f: fn(&RunResult) -> f64| results.iter().map(f).collect::<Vec<_>>();
        lines.extend([
            format!(
                "{mode}, state {}, noise {noise} (N={}, M={events}, ~{} B/event):",
                on_off(state),
                env.args.objects,
                pods::PodTemplate::new(0).approx_len()
            ),
            format!(
                "  events/s end to end:                {}",
                stat(&col(|r| r.events_per_sec), 0)
            ),
            format!(
                "  kube2nats CPU-s per 100k events:    {}",
                stat(&col(|r| r.kube_cpu_per_100k), 3)
            ),
            format!(
                "  kube2nats events per CPU-second:    {}  [target >= 200000]",
                stat(&col(|r| r.events_per_cpu_sec), 0)
            ),
            format!(
                "    user / system:                    {} / {}",
                stat(&col(|r| r.counters.user_s), 3),
                stat(&col(|r| r.counters.system_s), 3)
            ),
            format!(
                "  kube2nats per 100k events: read calls {}, write calls {}, MB written {}",
                stat(&col(|r| r.counters.read_calls), 0),
                stat(&col(|r| r.counters.write_calls), 0),
                stat(&col(|r| r.counters.written_bytes / 1e6), 1)
            ),
            format!(
                "  kube2nats context switches per 100k events: voluntary {}, involuntary {}; minor page faults {}",
                stat(&col(|r| r.counters.voluntary_switches), 0),
                stat(&col(|r| r.counters.involuntary_switches), 0),
                stat(&col(|r| r.counters.minor_faults), 0)
            ),
            format!(
                "  kube2nats peak RSS (MiB):           {} ({} when the watch opened)",
                stat(&col(|r| r.peak_rss_mib), 1),
                stat(&col(|r| r.listed_rss_mib), 1)
            ),
            format!(
                "  API server CPU-s per 100k events:   {}",
                stat(&col(|r| r.server_cpu_per_100k), 3)
            ),
            format!(
                "  subscriber CPU-s per 100k events:   {}",
                stat(&col(|r| r.subscriber_cpu_per_100k), 3)
            ),
            format!(
                "  nats-server CPU-s per 100k events:  {}",
                stat(&col(|r| r.nats_cpu_per_100k), 3)
            ),
        ]);
    }
    Ok(lines)
}

pub(crate) fn on_off(state: bool) -> &'static str {
    if state {
        "on"
    } else {
        "off"
    }
}

pub(crate) async fn throughput_run(
    env: &Env,
    jetstream: bool,
    forwarder: &Forwarder,
    noise: &str,
    objects: u64,
    events: u64,
) -> anyhow::Result<RunResult> {
    let shape = Shape {
        padding: 0,
        payload: "event",
    };
    shaped_run(env, jetstream, forwarder, noise, objects, events, shape).await
}

/// The objects' size and the watch's payload mode of a throughput run.
pub(crate) struct Shape {
    pub(crate) padding: usize,
    pub(crate) payload: &'static str,
}

pub(crate) async fn shaped_run(
    env: &Env,
    jetstream: bool,
    forwarder: &Forwarder,
    noise: &str,
    objects: u64,
    events: u64,
    shape: Shape,
) -> anyhow::Result<RunResult> {
    let dir = workdir(env, if jetstream { "js" } else { "core" })?;
    let epoch = Instant::now();
    let scenario = Arc::new(Scenario::shaped(
        objects,
        events,
        None,
        epoch,
        shape.padding,
    ));
    let received = scenario.changes();
    let (noise_extra, expected) = match noise {
        "any" => ("", received),
        // Every MODIFIED of the stream changes only its resourceVersion.
        "content" => (
            "changes = \"content\"\n",
            (0..events)
                .filter(|&k| {
                    matches!(
                        scenario.event_kind(k).0,
                        apiserver::Kind::Added | apiserver::Kind::Deleted
                    )
                })
                .count() as u64,
        ),
        "strip" => (
            "strip_paths = ['metadata.annotations.\"prometheus.io/port\"']\n",
            received,
        ),
        // A filter every pod of the stream matches (docs/filters.md): the same messages as
        // `any`, so the difference is what reading each object and evaluating the filter costs.
        "filter" => ("filter = \"object.status.phase == 'Running'\"\n", received),
        // A subject built from a label: the same messages, on subjects read from each object.
        "label" => (
            "subject = \"{prefix}.{label:tier}.{namespace}.{name}.{type}\"\n",
            received,
        ),
        // The watch is mirrored into the key-value bucket (docs/mirror.md): CPU per event with the
        // mirror on against `any`.
        "mirror" => ("mirror = true\n", received),
        other => bail!("unknown --noise variant {other:?} (allowed: any, content, strip, filter, label, mirror)"),
    };
    let watch_extra = format!("{noise_extra}payload = \"{}\"\n", shape.payload);
    let (nats, nats_url) = start_nats(env, dir.path()).await?;
    let server = Worker::start("apiserver");
    let subscriber = Worker::start("subscriber");
    let api_port = server
        .handle
        .spawn(apiserver::serve(scenario.clone()))
        .await??;
    let arrivals = Arc::new(Arrivals::default());
    let stream = if jetstream {
        let client = async_nats::connect(&nats_url).await?;
        let js = async_nats::jetstream::new(client);
        let stream = js
            .create_stream(async_nats::jetstream::stream::Config {
                name: "KUBE".into(),
                subjects: vec!["kube.>".into()],
                storage: async_nats::jetstream::stream::StorageType::Memory,
                max_bytes: 2 << 30,
                ..Default::default()
            })
            .await?;
        Some(stream)
    } else {
        subscriber
            .handle
            .spawn(subscribe(
                nats_url.clone(),
                arrivals.clone(),
                Some(scenario.clone()),
            ))
            .await??;
        None
    };
    let daemon = forwarder.start(
        dir.path(),
        api_port,
        &nats_url,
        jetstream,
        &env.args.format,
        &watch_extra,
    )?;
    if !wait_for_watch(&scenario).await {
        bail!(
            "{} never opened the watch; see {}",
            forwarder.name(),
            dir.path().display()
        );
    }
    let t0 = *scenario
        .watch_started_at
        .get()
        .expect("the watch has started");
    let (cpu0, srv0, sub0, nats0) = (daemon.cpu(), server.cpu(), subscriber.cpu(), nats.cpu());
    let counters0 = procfs::Counters::read(daemon.pid);
    let listed_rss_mib = procfs::status_mib(daemon.pid, "VmHWM");
    let timeout = Duration::from_secs(600);
    let done = match stream {
        Some(mut stream) => {
            let deadline = Instant::now() + timeout;
            loop {
                let info = stream.info().await?;
                arrivals
                    .count
                    .store(info.state.last_sequence, Ordering::Relaxed);
                if info.state.last_sequence >= expected {
                    break true;
                }
                if Instant::now() > deadline {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        None => {
            wait_until(timeout, || {
                arrivals.count.load(Ordering::Relaxed) >= expected
            })
            .await
        }
    };
    let elapsed = t0.elapsed().as_secs_f64();
    let (cpu1, srv1, sub1, nats1) = (daemon.cpu(), server.cpu(), subscriber.cpu(), nats.cpu());
    let counters1 = procfs::Counters::read(daemon.pid);
    let peak_rss_mib = procfs::status_mib(daemon.pid, "VmHWM");
    let journal_writes = daemon
        .metric("kube2nats_state_journal_records_count{watch=\"pods0\"}")
        .await;
    let journal_records = daemon
        .metric("kube2nats_state_journal_records_sum{watch=\"pods0\"}")
        .await;
    if !done {
        bail!(
            "only {} of {expected} messages arrived; see {}",
            arrivals.count.load(Ordering::Relaxed),
            dir.path().display()
        );
    }
    daemon.stop().await;
    nats.stop().await;
    finish_dir(env, dir);
    // Per change received: under `changes = "content"` fewer are published.
    let per100k = |cpu: f64| cpu / received as f64 * 100_000.0;
    Ok(RunResult {
        events_per_sec: received as f64 / elapsed,
        kube_cpu_per_100k: per100k(cpu1 - cpu0),
        events_per_cpu_sec: received as f64 / (cpu1 - cpu0),
        peak_rss_mib,
        listed_rss_mib,
        counters: counters1.since(&counters0, 100_000.0 / received as f64),
        server_cpu_per_100k: per100k(srv1 - srv0),
        subscriber_cpu_per_100k: per100k(sub1 - sub0),
        nats_cpu_per_100k: per100k(nats1 - nats0),
        api_bytes_per_event: scenario.bytes_sent.load(Ordering::Relaxed) as f64 / expected as f64,
        nats_bytes_per_event: arrivals.bytes.load(Ordering::Relaxed) as f64 / expected as f64,
        journal_writes,
        journal_records_per_write: journal_records / journal_writes,
    })
}
