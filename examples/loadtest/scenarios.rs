//! The other scenarios: metadata-only watches, latency at a fixed rate, a large first list, a
//! restart with durable state, and idle memory.

use super::*;

/// Large objects watched whole and metadata-only, runs interleaved.
pub(crate) async fn metadata(env: &Env) -> anyhow::Result<Vec<String>> {
    let a = &env.args;
    let payloads = ["event", "metadata"];
    let mut results: Vec<Vec<RunResult>> = vec![Vec::new(), Vec::new()];
    for run in 0..a.runs {
        for (i, payload) in payloads.into_iter().enumerate() {
            let shape = Shape {
                padding: a.object_bytes,
                payload,
            };
            let daemon = Forwarder::Kube2nats {
                bin: env.kube2nats.clone(),
                state: true,
            };
            let r = shaped_run(
                env,
                false,
                &daemon,
                "any",
                a.metadata_objects,
                a.metadata_events,
                shape,
            )
            .await?;
            eprintln!(
                "metadata scenario, payload {payload} run {}: {:.0} B/event from the API server, {:.0} B/event to NATS, kube2nats {:.3} CPU-s/100k events",
                run + 1,
                r.api_bytes_per_event,
                r.nats_bytes_per_event,
                r.kube_cpu_per_100k
            );
            results[i].push(r);
        }
    }
    let mut lines = vec![format!(
        "metadata (core, N={}, M={}, objects of ~{} B):",
        a.metadata_objects,
        a.metadata_events,
        pods::PodTemplate::shaped(0, a.object_bytes, false).approx_len()
    )];
    for (results, payload) in results.iter().zip(payloads) {
        let col = |f: fn(&RunResult) -> f64| results.iter().map(f).collect::<Vec<_>>();
        lines.extend([
            format!("  payload = {payload:?}:"),
            format!(
                "    bytes from the API server / event: {}",
                stat(&col(|r| r.api_bytes_per_event), 0)
            ),
            format!(
                "    payload bytes to NATS / event:     {}",
                stat(&col(|r| r.nats_bytes_per_event), 0)
            ),
            format!(
                "    kube2nats CPU-s per 100k events:   {}",
                stat(&col(|r| r.kube_cpu_per_100k), 3)
            ),
            format!(
                "    events/s end to end:               {}",
                stat(&col(|r| r.events_per_sec), 0)
            ),
        ]);
    }
    Ok(lines)
}

// ---------------------------------------------------------------------------------------------
// latency at a fixed rate

pub(crate) async fn latency(env: &Env) -> anyhow::Result<Vec<String>> {
    let (mut p50s, mut p99s, mut maxes, mut cpus) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..env.args.runs {
        let dir = workdir(env, "latency")?;
        let epoch = Instant::now();
        let scenario = Arc::new(Scenario::new(
            1000,
            env.args.latency_events,
            Some(env.args.rate),
            epoch,
        ));
        let expected = scenario.changes();
        let (nats, nats_url) = start_nats(env, dir.path()).await?;
        let server = Worker::start("apiserver");
        let subscriber = Worker::start("subscriber");
        let api_port = server
            .handle
            .spawn(apiserver::serve(scenario.clone()))
            .await??;
        let arrivals = Arc::new(Arrivals::default());
        subscriber
            .handle
            .spawn(subscribe(
                nats_url.clone(),
                arrivals.clone(),
                Some(scenario.clone()),
            ))
            .await??;
        let daemon = start_kube2nats(
            env,
            dir.path(),
            &DaemonCfg {
                state: env.args.state != "off",
                http_port: None,
                api_port,
                nats_url: &nats_url,
                jetstream: false,
                initial_state: "skip",
                namespaces: &[],
                watches: 1,
                watch_extra: "",
            },
        )?;
        if !wait_for_watch(&scenario).await {
            bail!("kube2nats never opened the watch");
        }
        let cpu0 = daemon.cpu();
        let secs = env.args.latency_events / env.args.rate.max(1) + 60;
        if !wait_until(Duration::from_secs(secs), || {
            arrivals.count.load(Ordering::Relaxed) >= expected
        })
        .await
        {
            bail!(
                "latency run: only {} of {expected} arrived",
                arrivals.count.load(Ordering::Relaxed)
            );
        }
        let cpu = daemon.cpu() - cpu0;
        let samples = std::mem::take(&mut *arrivals.latencies.lock().expect("not poisoned"));
        if let Some(path) = &env.args.dump_latencies {
            let text: String = samples
                .iter()
                .map(|(i, ns)| format!("{i} {}\n", ns / 1000))
                .collect();
            std::fs::write(path, text)?;
        }
        let mut lat: Vec<u64> = samples.into_iter().map(|(_, ns)| ns).collect();
        lat.sort_unstable();
        let pct =
            |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] as f64 / 1000.0;
        eprintln!(
            "latency run {}: {} samples at {}/s: p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs; kube2nats CPU {:.1}% of a core",
            run + 1,
            lat.len(),
            env.args.rate,
            pct(0.5),
            pct(0.99),
            pct(1.0),
            cpu / (env.args.latency_events as f64 / env.args.rate as f64) * 100.0
        );
        p50s.push(pct(0.5));
        p99s.push(pct(0.99));
        maxes.push(pct(1.0));
        cpus.push(cpu / (env.args.latency_events as f64 / env.args.rate as f64) * 100.0);
        daemon.stop().await;
        nats.stop().await;
        finish_dir(env, dir);
    }
    Ok(vec![
        format!(
            "latency API server → subscriber, core NATS, {} events at {}/s:",
            env.args.latency_events, env.args.rate
        ),
        format!("  p50 (µs):                           {}", stat(&p50s, 0)),
        format!(
            "  p99 (µs):                           {}  [target <= 1000]",
            stat(&p99s, 0)
        ),
        format!("  max (µs):                           {}", stat(&maxes, 0)),
        format!("  kube2nats CPU (% of one core):      {}", stat(&cpus, 1)),
    ])
}

// ---------------------------------------------------------------------------------------------
// list: peak RSS while listing

pub(crate) async fn list(env: &Env) -> anyhow::Result<Vec<String>> {
    let (mut rss, mut secs, mut cpus) = (Vec::new(), Vec::new(), Vec::new());
    let objects = env.args.list_objects;
    for run in 0..env.args.runs {
        let dir = workdir(env, "list")?;
        let scenario = Arc::new(Scenario::new(objects, 0, None, Instant::now()));
        let (nats, nats_url) = start_nats(env, dir.path()).await?;
        let server = Worker::start("apiserver");
        let subscriber = Worker::start("subscriber");
        let api_port = server
            .handle
            .spawn(apiserver::serve(scenario.clone()))
            .await??;
        let arrivals = Arc::new(Arrivals::default());
        subscriber
            .handle
            .spawn(subscribe(nats_url.clone(), arrivals.clone(), None))
            .await??;
        let t0 = Instant::now();
        let daemon = start_kube2nats(
            env,
            dir.path(),
            &DaemonCfg {
                state: env.args.state != "off",
                http_port: None,
                api_port,
                nats_url: &nats_url,
                jetstream: false,
                initial_state: "added",
                namespaces: &[],
                watches: 1,
                watch_extra: "",
            },
        )?;
        if !wait_for_watch(&scenario).await {
            bail!("kube2nats never opened the watch");
        }
        if !wait_until(Duration::from_secs(300), || {
            arrivals.count.load(Ordering::Relaxed) >= objects
        })
        .await
        {
            bail!(
                "list run: only {} of {objects} ADDED arrived",
                arrivals.count.load(Ordering::Relaxed)
            );
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let hwm = procfs::status_mib(daemon.pid, "VmHWM");
        let cpu = daemon.cpu();
        eprintln!("list run {}: {objects} pods listed and published as ADDED in {elapsed:.2} s, kube2nats CPU {cpu:.2} s, peak RSS {hwm:.1} MiB", run + 1);
        rss.push(hwm);
        secs.push(elapsed);
        cpus.push(cpu);
        daemon.stop().await;
        nats.stop().await;
        finish_dir(env, dir);
    }
    Ok(vec![
        format!("list of {objects} pods (pages of 500, each published as ADDED, core NATS):"),
        format!(
            "  kube2nats peak RSS (MiB):           {}  [target <= 64]",
            stat(&rss, 1)
        ),
        format!("  seconds from start to last ADDED:   {}", stat(&secs, 2)),
        format!("  kube2nats CPU-s (start to synced):  {}", stat(&cpus, 2)),
    ])
}

// ---------------------------------------------------------------------------------------------
// restart: durable state of many objects, stored and loaded

pub(crate) async fn restart(env: &Env) -> anyhow::Result<Vec<String>> {
    let pods = env.args.list_objects;
    let watches = env.args.restart_watches.max(1);
    let namespaces: Vec<&str> = pods::NAMESPACES
        .iter()
        .copied()
        .take(env.args.restart_namespaces)
        .collect();
    // Each target and the objects it tracks: the pods of its namespace, or all of them.
    let targets: Vec<(String, u64)> = (0..watches)
        .flat_map(|w| {
            let namespaces = &namespaces;
            let per_namespace = (0..namespaces.len()).map(move |j| {
                let n = pods::NAMESPACES.len() as u64;
                let count = pods.saturating_sub(j as u64).div_ceil(n);
                (format!("pods{w}.{}", namespaces[j]), count)
            });
            let all = namespaces
                .is_empty()
                .then(|| (format!("pods{w}._all"), pods));
            per_namespace.chain(all).collect::<Vec<_>>()
        })
        .collect();
    let objects: u64 = targets.iter().map(|(_, n)| n).sum();
    let per_watch = objects / watches as u64;
    let (mut per_object, mut stored_per_object, mut load_secs) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut held, mut restart_hwm, mut extra, mut load_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut list_hwm, mut list_cpu, mut until_loaded_secs) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..env.args.runs {
        let dir = workdir(env, "restart")?;
        let scenario = Arc::new(Scenario::new(pods, 0, None, Instant::now()));
        let (nats, nats_url) = start_nats(env, dir.path()).await?;
        let server = Worker::start("apiserver");
        let api_port = server
            .handle
            .spawn(apiserver::serve(scenario.clone()))
            .await??;
        let cfg = |http_port| DaemonCfg {
            state: true,
            http_port: Some(http_port),
            api_port,
            nats_url: &nats_url,
            jetstream: false,
            initial_state: &env.args.restart_initial_state,
            namespaces: &namespaces,
            watches,
            watch_extra: "",
        };
        let first = start_kube2nats(env, dir.path(), &cfg(free_port()?))?;
        if !wait_for_watch(&scenario).await {
            bail!("kube2nats never opened the watch");
        }
        // The first checkpoint after the list holds every object.
        let js = async_nats::jetstream::new(async_nats::connect(&nats_url).await?);
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut manifests = Vec::new();
        for (target, count) in &targets {
            let manifest = loop {
                if let Ok(kv) = js.get_key_value("kube2nats-state").await {
                    if let Ok(Some(raw)) = kv.get(format!("{target}.manifest")).await {
                        let m: kube2nats::facade::Manifest = serde_json::from_slice(&raw)?;
                        if m.objects == *count {
                            break m;
                        }
                    }
                }
                if Instant::now() > deadline {
                    bail!("no checkpoint of {count} objects of {target} within ten minutes");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            manifests.push(manifest);
        }
        let manifest = kube2nats::facade::Manifest {
            chunks: manifests.iter().map(|m| m.chunks).sum(),
            bytes: manifests.iter().map(|m| m.bytes).sum(),
            ..manifests[0].clone()
        };
        // Let the first process settle after its checkpoints, then read its peak and RSS.
        tokio::time::sleep(Duration::from_millis(500)).await;
        list_hwm.push(procfs::status_mib(first.pid, "VmHWM"));
        list_cpu.push(first.cpu());
        let bucket_bytes = js
            .get_key_value("kube2nats-state")
            .await?
            .status()
            .await?
            .info
            .state
            .bytes;
        let held_mib = procfs::status_mib(first.pid, "VmRSS");
        // kill -9, then a restart that loads the state and resumes the watch (no list).
        first.stop().await;
        let port = free_port()?;
        let t0 = Instant::now();
        let second = start_kube2nats(env, dir.path(), &cfg(port))?;
        let metrics_url = format!("http://127.0.0.1:{port}/metrics");
        let loaded_lines: Vec<String> = (0..watches)
            .map(|w| format!("kube2nats_state_objects_loaded{{watch=\"pods{w}\"}} {per_watch}"))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        let text = loop {
            if let Ok(r) = reqwest::get(&metrics_url).await {
                let text = r.text().await.unwrap_or_default();
                if loaded_lines.iter().all(|l| text.contains(l)) {
                    break text;
                }
            }
            if Instant::now() > deadline {
                bail!("the restarted kube2nats did not load {objects} objects");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let until_loaded = t0.elapsed().as_secs_f64();
        let load = text
            .lines()
            .filter(|l| l.starts_with("kube2nats_state_load_duration_seconds{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(f64::NAN, f64::max);
        until_loaded_secs.push(until_loaded);
        // Let the resumed watch open and settle, then read the peak.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let hwm = procfs::status_mib(second.pid, "VmHWM");
        let cpu = second.cpu();
        eprintln!(
            "restart run {}: {objects} objects in {} targets stored in {} chunks, {:.1} B/object encoded, {:.1} B/object in the bucket; first run peak {:.1} MiB; load {load:.3} s ({until_loaded:.2} s from exec), restart CPU {cpu:.2} s; RSS holding them before {held_mib:.1} MiB, restart peak {hwm:.1} MiB",
            run + 1,
            targets.len(),
            manifest.chunks,
            manifest.bytes as f64 / objects as f64,
            bucket_bytes as f64 / objects as f64,
            list_hwm[list_hwm.len() - 1],
        );
        per_object.push(manifest.bytes as f64 / objects as f64);
        stored_per_object.push(bucket_bytes as f64 / objects as f64);
        load_secs.push(load);
        held.push(held_mib);
        restart_hwm.push(hwm);
        extra.push(hwm - held_mib);
        load_cpu.push(cpu);
        second.stop().await;
        nats.stop().await;
        finish_dir(env, dir);
    }
    Ok(vec![
        format!("restart with durable state of {objects} objects: {pods} pods, {watches} watch(es), {} target(s), initial_state {} (core NATS, kill -9, then load and resume):", targets.len(), env.args.restart_initial_state),
        format!("  first run: list peak RSS (MiB):     {}", stat(&list_hwm, 1)),
        format!("  first run: CPU-s to checkpointed:   {}", stat(&list_cpu, 2)),
        format!("  snapshot bytes per object:          {}", stat(&per_object, 1)),
        format!("  bucket bytes per object (stored):   {}", stat(&stored_per_object, 1)),
        format!("  state load seconds (slowest target): {}  [target <= 2 at 100k, <= 10 at 1M]", stat(&load_secs, 3)),
        format!("  exec to every target loaded (s):    {}", stat(&until_loaded_secs, 2)),
        format!("  restart CPU-s (exec to resumed):    {}", stat(&load_cpu, 2)),
        format!("  RSS holding them before (MiB):      {}", stat(&held, 1)),
        format!("  restart peak RSS (MiB):             {}", stat(&restart_hwm, 1)),
        format!("  peak over the RSS before (MiB):     {}  [target <= 16]", stat(&extra, 1)),
    ])
}

// ---------------------------------------------------------------------------------------------
// idle: three idle watches

/// Drops `bin`'s pages from the page cache, as a container's first start finds its binary: a
/// page fault then reads around the page it needs, and maps what is cached of the 64 KiB around
/// it, so what stays resident depends on what was cached before the start.
fn evict_from_page_cache(bin: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd as _;
    let file = std::fs::File::open(bin).with_context(|| format!("opening {}", bin.display()))?;
    // Dirty pages (a binary just linked) are not dropped: written out first.
    file.sync_all()?;
    // SAFETY: `posix_fadvise` only reads its arguments; the descriptor is open for the call.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    anyhow::ensure!(rc == 0, "posix_fadvise of {}: error {rc}", bin.display());
    Ok(())
}

pub(crate) async fn idle(env: &Env) -> anyhow::Result<Vec<String>> {
    let (mut rss, mut hwm, mut anon, mut file) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut threads = Vec::new();
    for run in 0..env.args.runs {
        let dir = workdir(env, "idle")?;
        evict_from_page_cache(&env.kube2nats)?;
        let scenario = Arc::new(Scenario::new(100, 0, None, Instant::now()));
        let (nats, nats_url) = start_nats(env, dir.path()).await?;
        let server = Worker::start("apiserver");
        let api_port = server
            .handle
            .spawn(apiserver::serve(scenario.clone()))
            .await??;
        let daemon = start_kube2nats(
            env,
            dir.path(),
            &DaemonCfg {
                state: env.args.state != "off",
                http_port: None,
                api_port,
                nats_url: &nats_url,
                jetstream: false,
                initial_state: "added",
                namespaces: &["default"],
                watches: 3,
                watch_extra: "",
            },
        )?;
        if !wait_for_watch(&scenario).await {
            bail!("kube2nats never opened the watch");
        }
        // Let all three watches open and settle.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = procfs::status_mib(daemon.pid, "VmRSS");
        let peak = procfs::status_mib(daemon.pid, "VmHWM");
        anon.push(procfs::status_mib(daemon.pid, "RssAnon"));
        file.push(procfs::status_mib(daemon.pid, "RssFile"));
        eprintln!("idle run {}: three idle watches (100 pods listed each): RSS {now:.1} MiB (peak {peak:.1} MiB), {} threads; largest mappings (RSS KiB, anonymous KiB):", run + 1, procfs::threads(daemon.pid));
        for (rss, anon, what) in procfs::largest_mappings(daemon.pid, 8) {
            eprintln!("  {rss:>6} {anon:>6}  {what}");
        }
        threads.push(procfs::threads(daemon.pid) as f64);
        rss.push(now);
        hwm.push(peak);
        daemon.stop().await;
        nats.stop().await;
        finish_dir(env, dir);
    }
    Ok(vec![
        "idle: three watches (100 pods each), core NATS, 3 s after the watches opened, the binary evicted from the page cache before each start:".into(),
        format!(
            "  kube2nats RSS (MiB):                {}  [target <= 10]",
            stat(&rss, 1)
        ),
        format!("  kube2nats peak RSS (MiB):           {}", stat(&hwm, 1)),
        format!("  of which anonymous (heap, stacks):  {}", stat(&anon, 1)),
        format!("  of which file-backed (the binary):  {}", stat(&file, 1)),
        format!(
            "  threads:                            {}",
            stat(&threads, 0)
        ),
    ])
}
