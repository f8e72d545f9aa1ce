//! kube2nats load harness: measures the release binary end to end.
//!
//! ```sh
//! cargo build --release && cargo run --release --example loadtest -- --objects 10000 --events 1000000
//! ```
//!
//! Each run spawns a real `nats-server` and the real `kube2nats` binary (with a generated config)
//! against a fast simulated API server in this process, and a subscriber in this process that
//! counts what arrives. The simulated server and the subscriber each run on their own thread, so
//! their CPU time is measured apart from each other and from kube2nats'.
//!
//! Scenarios (all by default, or pick with `--only`):
//! - `state`: bytes of de-duplication state per tracked object: 100k realistic objects fed to
//!   [`kube2nats::dedupe::Dedupe`], heap bytes counted by this binary's allocator;
//! - `core`, `jetstream`: N objects listed, then M watch events as fast as the socket takes them;
//!   events/s end to end, kube2nats CPU seconds per 100k events, peak RSS;
//! - `latency`: events paced at `--rate` per second; API server → subscriber latency p50/p99;
//! - `list`: peak RSS while listing (and publishing) `--list-objects` pods;
//! - `idle`: RSS with three idle watches.
//! - `restart`: durable state of `--list-objects` pods: bytes stored per object, then a kill -9
//!   and a restart that loads it (load seconds, peak RSS against the RSS holding them before).
//! - `peers` (not in the default set): the `core`/`jetstream` load through kube2nats and through
//!   the reference forwarders of `bench/` (a null forwarder, the floor; a kube-rs watcher, a peer),
//!   interleaved, with the ratios of their CPU per event. `--build-peers` builds them first.
//!
//! - `metadata` (only on request): `--metadata-objects` pods padded with `--object-bytes` of data
//!   (a large ConfigMap or Secret in all but name), `--metadata-events` watch events, published
//!   whole (`payload = "event"`) and metadata-only (`payload = "metadata"`), runs interleaved:
//!   bytes from the API server and to NATS per event, kube2nats CPU per event.
//!
//! `--state on|off|both` sets `state.enabled` for the daemons; with `both`, the `core` and
//! `jetstream` scenarios alternate runs with state on and off and report each. `--noise` does the
//! same for noise control: `any` (the default path), `content` (`changes = "content"`: every
//! MODIFIED of the stream changes only its resourceVersion, so only ADDED and DELETED are
//! published; CPU is still per event received), `strip` (`strip_paths` names an annotation
//! every object has, so every published object is trimmed, a copy each) and `mirror` (the watch
//! is mirrored into the key-value bucket, docs/mirror.md; needs JetStream, so core runs publish
//! events to core NATS and the mirror to JetStream).
//!
//! Every scenario runs `--runs` times; the report gives the median (and min–max).

// A benchmark measures real time: tokio's pausable clock (which the crate's lint asks for) has
// no place here.
#![allow(clippy::disallowed_types)]

mod apiserver;
mod peers;
mod pods;
mod procfs;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Parser;
use futures_util::StreamExt;

use apiserver::Scenario;
use peers::Forwarder;

/// Counts live heap bytes, so the `state` scenario can weigh the de-duplication map exactly.
struct CountingAlloc;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Live bytes as glibc malloc actually spends them: 8 bytes of header, 16-byte granules, 32 at least.
static LIVE_MALLOC_BYTES: AtomicUsize = AtomicUsize::new(0);

fn malloc_cost(size: usize) -> usize {
    ((size + 8 + 15) & !15).max(32)
}

// SAFETY: every call forwards to the system allocator unchanged; the counters are only statistics.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        LIVE_MALLOC_BYTES.fetch_add(malloc_cost(layout.size()), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE_MALLOC_BYTES.fetch_sub(malloc_cost(layout.size()), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE_MALLOC_BYTES.fetch_add(malloc_cost(new_size), Ordering::Relaxed);
        LIVE_MALLOC_BYTES.fetch_sub(malloc_cost(layout.size()), Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Load harness for kube2nats.
#[derive(Debug, Parser, Clone)]
struct Args {
    /// Objects listed before the watch (N).
    #[arg(long, default_value_t = 10_000)]
    objects: u64,
    /// Watch events after the list (M), a BOOKMARK every 1000th.
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Runs of each scenario; the report gives the median.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Scenarios to run, comma-separated: state, core, jetstream, latency, list, idle, restart.
    #[arg(long, default_value = "state,core,jetstream,latency,list,idle,restart")]
    only: String,
    /// Durable state of the daemons: on, off, or both (core/jetstream alternate runs).
    #[arg(long, default_value = "on")]
    state: String,
    /// `publish.format` of the daemons: native or cloudevents.
    #[arg(long, default_value = "native")]
    format: String,
    /// Variants of core/jetstream, comma-separated, alternated: any, content, strip, mirror.
    #[arg(long, default_value = "any")]
    noise: String,
    /// Watch events in JetStream mode (stored in a memory stream; default: --events).
    #[arg(long)]
    jetstream_events: Option<u64>,
    /// Events per second of the latency scenario.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Events of the latency scenario.
    #[arg(long, default_value_t = 10_000)]
    latency_events: u64,
    /// Objects of the list scenario.
    #[arg(long, default_value_t = 100_000)]
    list_objects: u64,
    /// Bytes of data outside the metadata of each object of the metadata scenario.
    #[arg(long, default_value_t = 16_384)]
    object_bytes: usize,
    /// Objects of the metadata scenario.
    #[arg(long, default_value_t = 1000)]
    metadata_objects: u64,
    /// Watch events of the metadata scenario.
    #[arg(long, default_value_t = 20_000)]
    metadata_events: u64,
    /// Objects of the state scenario.
    #[arg(long, default_value_t = 100_000)]
    state_objects: u64,
    /// `state`: stores the objects are split across, as that many watch targets hold them.
    #[arg(long, default_value_t = 1)]
    state_targets: usize,
    /// `restart`: watches of the same pods (each tracks them all).
    #[arg(long, default_value_t = 1)]
    restart_watches: usize,
    /// `restart`: namespaces each watch lists, one target each (0: one cluster-wide target).
    #[arg(long, default_value_t = 0)]
    restart_namespaces: usize,
    /// `restart`: `initial_state` of the first run's list (`added` publishes every pod).
    #[arg(long, default_value = "skip")]
    restart_initial_state: String,
    /// The kube2nats binary (default: target/release/kube2nats of this workspace).
    #[arg(long)]
    kube2nats: Option<PathBuf>,
    /// The nats-server binary (default: $NATS_SERVER_BIN, else nats-server on PATH).
    #[arg(long)]
    nats_server: Option<PathBuf>,
    /// Write every latency sample of the latency scenario (`change-index latency-µs`) to this file.
    #[arg(long)]
    dump_latencies: Option<PathBuf>,
    /// Keep the work directory (configs, logs) for inspection.
    #[arg(long)]
    keep: bool,
    /// `peers`: where the reference forwarders are (default: bench/target/release).
    #[arg(long)]
    peers_dir: Option<PathBuf>,
    /// `peers`: build the reference forwarders first (`cargo build --release` of bench/).
    #[arg(long)]
    build_peers: bool,
    /// `peers`: a second kube2nats binary (the image's static musl one) measured in core mode too.
    #[arg(long)]
    kube2nats_musl: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scenarios: Vec<&str> = args.only.split(',').map(str::trim).collect();
    let kube2nats = args
        .kube2nats
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/kube2nats"));
    if scenarios.iter().any(|s| *s != "state") && !kube2nats.is_file() {
        bail!(
            "{} not found: run `cargo build --release` first (or pass --kube2nats)",
            kube2nats.display()
        );
    }
    self_check()?;
    let nats_bin = find_nats_server(args.nats_server.clone())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut report = Vec::new();
    for scenario in &scenarios {
        let env = Env {
            args: args.clone(),
            kube2nats: kube2nats.clone(),
            nats_bin: nats_bin.clone(),
        };
        let lines = match *scenario {
            "state" => state_size(args.state_objects, args.state_targets.max(1)),
            "core" => runtime.block_on(throughput(&env, false))?,
            "jetstream" => runtime.block_on(throughput(&env, true))?,
            "latency" => runtime.block_on(latency(&env))?,
            "list" => runtime.block_on(list(&env))?,
            "idle" => runtime.block_on(idle(&env))?,
            "restart" => runtime.block_on(restart(&env))?,
            "peers" => runtime.block_on(peers::peers(&env))?,
            "metadata" => runtime.block_on(metadata(&env))?,
            other => bail!("unknown scenario {other:?}"),
        };
        for line in &lines {
            eprintln!("{line}");
        }
        report.extend(lines);
    }
    println!(
        "\n==== kube2nats load harness: summary ({} runs each, median [min–max]) ====",
        args.runs
    );
    for line in report {
        println!("{line}");
    }
    Ok(())
}

/// The generated objects are valid JSON of the intended size, and the event mix is as documented.
fn self_check() -> anyhow::Result<()> {
    let pod = pods::PodTemplate::new(12);
    let mut out = Vec::new();
    pod.write(&pods::uuid(12), 12_345_678, &mut out);
    let v: serde_json::Value = serde_json::from_slice(&out).context("generated pod is not JSON")?;
    anyhow::ensure!(v["metadata"]["resourceVersion"] == "12345678");
    anyhow::ensure!(
        (3300..3800).contains(&out.len()),
        "pod is {} bytes",
        out.len()
    );
    let mut item = Vec::new();
    pod.write_list_item(&pods::uuid(12), 1, &mut item);
    let v: serde_json::Value = serde_json::from_slice(&item).context("list item is not JSON")?;
    anyhow::ensure!(v.get("kind").is_none() && v["metadata"]["name"] == *pod.name);
    for (padding, partial) in [(4096, false), (0, true)] {
        let mut out = Vec::new();
        pods::PodTemplate::shaped(12, padding, partial).write(&pods::uuid(12), 7, &mut out);
        let v: serde_json::Value =
            serde_json::from_slice(&out).context("shaped pod is not JSON")?;
        anyhow::ensure!(
            v["metadata"]["resourceVersion"] == "7" && v.get("spec").is_none() == partial
        );
    }
    let s = Scenario::new(10, 2000, None, Instant::now());
    let kinds: Vec<apiserver::Kind> = (0..2000).map(|k| s.event_kind(k).0).collect();
    anyhow::ensure!(
        kinds
            .iter()
            .filter(|k| **k == apiserver::Kind::Bookmark)
            .count()
            == 2
    );
    anyhow::ensure!(
        kinds
            .iter()
            .filter(|k| **k == apiserver::Kind::Deleted)
            .count()
            == 20
    );
    anyhow::ensure!(s.changes() == 1998);
    Ok(())
}

struct Env {
    args: Args,
    kube2nats: PathBuf,
    nats_bin: PathBuf,
}

/// Median, min and max of a sample, formatted.
fn stat(values: &[f64], decimals: usize) -> String {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let median = if v.is_empty() {
        f64::NAN
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    format!(
        "{median:.decimals$} [{:.decimals$}–{:.decimals$}]",
        v.first().copied().unwrap_or(f64::NAN),
        v.last().copied().unwrap_or(f64::NAN)
    )
}

// ---------------------------------------------------------------------------------------------
// state: bytes per tracked object

fn state_size(objects: u64, targets: usize) -> Vec<String> {
    use kube2nats::dedupe::Dedupe;
    use kube2nats::event::{EventType, ObjectMeta, ResourceVersion};
    // The ObjectMetas are built first, so only the map's own allocations are counted.
    let metas: Vec<ObjectMeta> = (0..objects)
        .map(|i| {
            let pod = pods::PodTemplate::new(i);
            ObjectMeta {
                uid: pods::uuid(i),
                resource_version: ResourceVersion::new((40_000_000 + i * 7).to_string()),
                name: pod.name,
                namespace: Some(pod.namespace),
                generation: None,
            }
        })
        .collect();
    let name_bytes: usize = metas.iter().map(|m| m.name.len()).sum();
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    let before_malloc = LIVE_MALLOC_BYTES.load(Ordering::SeqCst);
    // Each target holds an equal share, in turn, as their lists would fill them.
    let mut stores: Vec<Dedupe> = (0..targets).map(|_| Dedupe::new()).collect();
    for (i, meta) in metas.iter().enumerate() {
        stores[i * targets / metas.len()].observe(meta, EventType::Added, 0);
    }
    let bytes = LIVE_BYTES.load(Ordering::SeqCst) - before;
    let malloc_bytes = LIVE_MALLOC_BYTES.load(Ordering::SeqCst) - before_malloc;
    assert_eq!(
        stores.iter().map(Dedupe::len).sum::<usize>() as u64,
        objects
    );
    drop(stores);
    // The same objects in stores sized ahead, as a list's `remainingItemCount` sizes them.
    let before_sized = LIVE_BYTES.load(Ordering::SeqCst);
    let mut stores: Vec<Dedupe> = (0..targets).map(|_| Dedupe::new()).collect();
    for (t, store) in stores.iter_mut().enumerate() {
        let share = (t + 1) * metas.len() / targets - t * metas.len() / targets;
        store.size_for(share as u64);
    }
    for (i, meta) in metas.iter().enumerate() {
        stores[i * targets / metas.len()].observe(meta, EventType::Added, 0);
    }
    let sized_bytes = LIVE_BYTES.load(Ordering::SeqCst) - before_sized;
    drop(stores);
    vec![format!(
        "state: {:.1} bytes/object requested from the allocator ({:.1} with glibc malloc headers; {:.1} sized ahead as a list sizes it) for {objects} objects in {targets} target(s) (names average {:.1} bytes) [target <= 100]",
        bytes as f64 / objects as f64,
        malloc_bytes as f64 / objects as f64,
        sized_bytes as f64 / objects as f64,
        name_bytes as f64 / objects as f64,
    )]
}

// ---------------------------------------------------------------------------------------------
// processes

fn find_nats_server(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit.or_else(|| std::env::var_os("NATS_SERVER_BIN").map(PathBuf::from)) {
        return Ok(p);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
        .context("nats-server not found: run scripts/install-test-tools, or pass --nats-server")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A child process killed on drop.
struct Proc {
    child: tokio::process::Child,
    pid: u32,
    /// Where a kube2nats serves `/metrics`, when the harness reads them.
    metrics_port: Option<u16>,
}

impl Proc {
    fn spawn(bin: &Path, args: &[&str], log: &Path) -> anyhow::Result<Proc> {
        let log = std::fs::File::create(log)?;
        let child = tokio::process::Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("child has no pid")?;
        Ok(Proc {
            child,
            pid,
            metrics_port: None,
        })
    }

    fn cpu(&self) -> f64 {
        procfs::process_cpu(self.pid)
    }

    /// The value of one sample of the process's `/metrics` (`NaN` if unavailable).
    async fn metric(&self, sample: &str) -> f64 {
        let Some(port) = self.metrics_port else {
            return f64::NAN;
        };
        let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
            return f64::NAN;
        };
        let text = response.text().await.unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }

    /// SIGKILL; with `LOADTEST_GRACEFUL_STOP` set, SIGTERM first and up to a minute to exit (a
    /// process run under `valgrind --tool=callgrind` writes its profile only when it exits).
    async fn stop(mut self) {
        if std::env::var_os("LOADTEST_GRACEFUL_STOP").is_some() {
            let pid = self.pid.to_string();
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status();
            let _ = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        }
        let _ = self.child.kill().await;
    }
}

/// One nats-server with a temporary store. `max_pending` is raised so a subscriber that falls
/// behind for a moment is not cut off as a slow consumer.
async fn start_nats(env: &Env, dir: &Path) -> anyhow::Result<(Proc, String)> {
    let port = free_port()?;
    let store = dir.join("js");
    std::fs::create_dir_all(&store)?;
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "listen: \"127.0.0.1:{port}\"\nmax_pending: 1GB\nwrite_deadline: \"30s\"\njetstream {{\n  store_dir: {:?}\n  max_memory_store: 8GB\n}}\n",
            store.to_string_lossy()
        ),
    )?;
    let proc = Proc::spawn(
        &env.nats_bin,
        &["-c", conf.to_str().unwrap_or_default()],
        &dir.join("nats.log"),
    )?;
    let url = format!("nats://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!(
                "nats-server did not start: {}",
                std::fs::read_to_string(dir.join("nats.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((proc, url))
}

struct DaemonCfg<'a> {
    /// `state.enabled`.
    state: bool,
    /// Where `/metrics` is served (`None`: any free port).
    http_port: Option<u16>,
    api_port: u16,
    nats_url: &'a str,
    jetstream: bool,
    initial_state: &'a str,
    namespaces: &'a [&'a str],
    watches: usize,
    /// Lines added to every `[[watches]]` table.
    watch_extra: &'a str,
}

fn start_kube2nats(env: &Env, dir: &Path, cfg: &DaemonCfg<'_>) -> anyhow::Result<Proc> {
    spawn_kube2nats(&env.kube2nats, &env.args.format, dir, cfg)
}

/// Starts `bin` with `publish.format = format`.
fn spawn_kube2nats(
    bin: &Path,
    format: &str,
    dir: &Path,
    cfg: &DaemonCfg<'_>,
) -> anyhow::Result<Proc> {
    let mut toml = format!(
        "[log]\nfilter = \"info\"\n\n[kubernetes]\napi_url = \"http://127.0.0.1:{}\"\nlist_page_size = 500\n\n[nats]\nurl = \"{}\"\nmode = \"{}\"\n\n[http]\nlisten = \"127.0.0.1:{}\"\n\n[state]\nenabled = {}\n\n[publish]\nformat = {:?}\n",
        cfg.api_port,
        cfg.nats_url,
        if cfg.jetstream { "jetstream" } else { "core" },
        cfg.http_port.unwrap_or(0),
        cfg.state,
        format,
    );
    for w in 0..cfg.watches {
        let namespaces = cfg
            .namespaces
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        toml.push_str(&format!(
            "\n[[watches]]\nname = \"pods{w}\"\nresource = \"pods\"\nnamespaces = [{namespaces}]\ninitial_state = \"{}\"\n{}",
            cfg.initial_state, cfg.watch_extra
        ));
    }
    let path = dir.join("kube2nats.toml");
    std::fs::write(&path, toml)?;
    Proc::spawn(
        bin,
        &["--config", path.to_str().unwrap_or_default()],
        &dir.join("kube2nats.log"),
    )
}

/// A thread with its own single-threaded runtime, so its CPU time can be read apart.
struct Worker {
    stat: PathBuf,
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Worker {
    fn start(name: &str) -> Worker {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds");
                let _ = tx.send((procfs::this_thread_stat(), rt.handle().clone()));
                rt.block_on(async {
                    let _ = stop_rx.await;
                });
            })
            .expect("spawning a worker thread");
        let (stat, handle) = rx.recv().expect("worker thread reports its handle");
        Worker {
            stat,
            handle,
            _stop: stop_tx,
        }
    }

    fn cpu(&self) -> f64 {
        procfs::cpu_seconds(&self.stat).unwrap_or(f64::NAN)
    }
}

/// What the subscriber has seen.
#[derive(Default)]
struct Arrivals {
    count: AtomicU64,
    /// Payload bytes received.
    bytes: AtomicU64,
    last_ns: AtomicU64,
    /// Latency samples (change index, ns), paced runs only.
    latencies: std::sync::Mutex<Vec<(u64, u64)>>,
}

async fn subscribe(
    url: String,
    arrivals: Arc<Arrivals>,
    scenario: Option<Arc<Scenario>>,
) -> anyhow::Result<()> {
    let client = async_nats::ConnectOptions::new()
        .subscription_capacity(1 << 20)
        .connect(url)
        .await?;
    let mut sub = client.subscribe("kube.>").await?;
    client.flush().await?;
    let base = scenario.as_ref().map_or(0, |s| s.list_rv());
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let now = match &scenario {
                Some(s) => s.epoch.elapsed().as_nanos() as u64,
                None => 0,
            };
            arrivals.count.fetch_add(1, Ordering::Relaxed);
            arrivals
                .bytes
                .fetch_add(msg.payload.len() as u64, Ordering::Relaxed);
            let Some(s) = &scenario else { continue };
            arrivals.last_ns.store(now, Ordering::Relaxed);
            if s.rate.is_none() {
                continue;
            }
            let rv = msg
                .headers
                .as_ref()
                .and_then(|h| h.get("Kube-Resource-Version"))
                .and_then(|v| v.as_str().parse::<u64>().ok());
            if let Some(rv) = rv.filter(|rv| *rv > base) {
                let idx = (rv - base - 1) as usize;
                if let Some(sent) = s.sent_ns.get(idx) {
                    let sent = sent.load(Ordering::Relaxed);
                    if sent > 0 {
                        arrivals
                            .latencies
                            .lock()
                            .expect("not poisoned")
                            .push((idx as u64, now.saturating_sub(sent)));
                    }
                }
            }
        }
        drop(client);
    });
    Ok(())
}

/// Waits (up to two minutes) until kube2nats has listed and opened its watch.
async fn wait_for_watch(scenario: &Scenario) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    while scenario.watch_started_at.get().is_none() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// Waits until `done()` or `timeout`; false on timeout.
async fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

fn workdir(env: &Env, name: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("kube2nats-load-{name}-"))
        .tempdir()?;
    if env.args.keep {
        eprintln!("work directory: {}", dir.path().display());
    }
    Ok(dir)
}

fn finish_dir(env: &Env, dir: tempfile::TempDir) {
    if env.args.keep {
        let _ = dir.keep();
    }
}

// ---------------------------------------------------------------------------------------------
// core / jetstream throughput

struct RunResult {
    events_per_sec: f64,
    kube_cpu_per_100k: f64,
    events_per_cpu_sec: f64,
    peak_rss_mib: f64,
    /// Peak RSS when the watch opened (the list done): what the event stream adds is the rest.
    listed_rss_mib: f64,
    /// kube2nats' user/system CPU, system calls and context switches per 100k events.
    counters: procfs::Counters,
    server_cpu_per_100k: f64,
    subscriber_cpu_per_100k: f64,
    nats_cpu_per_100k: f64,
    /// Bytes the API server sent (list and watch bodies) per published event.
    api_bytes_per_event: f64,
    /// Payload bytes the subscriber received per event.
    nats_bytes_per_event: f64,
    /// Durable state: journal writes, and objects recorded per write (`NaN` without state).
    journal_writes: f64,
    journal_records_per_write: f64,
}

async fn throughput(env: &Env, jetstream: bool) -> anyhow::Result<Vec<String>> {
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

fn on_off(state: bool) -> &'static str {
    if state {
        "on"
    } else {
        "off"
    }
}

async fn throughput_run(
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
struct Shape {
    padding: usize,
    payload: &'static str,
}

async fn shaped_run(
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
        // The watch is mirrored into the key-value bucket (docs/mirror.md): CPU per event with the
        // mirror on against `any`.
        "mirror" => ("mirror = true\n", received),
        other => bail!("unknown --noise variant {other:?} (allowed: any, content, strip, mirror)"),
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

/// Large objects watched whole and metadata-only, runs interleaved.
async fn metadata(env: &Env) -> anyhow::Result<Vec<String>> {
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

async fn latency(env: &Env) -> anyhow::Result<Vec<String>> {
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

async fn list(env: &Env) -> anyhow::Result<Vec<String>> {
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

async fn restart(env: &Env) -> anyhow::Result<Vec<String>> {
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
                        let m: kube2nats::state::codec::Manifest = serde_json::from_slice(&raw)?;
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
        let manifest = kube2nats::state::codec::Manifest {
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

async fn idle(env: &Env) -> anyhow::Result<Vec<String>> {
    let (mut rss, mut hwm, mut anon, mut file) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut threads = Vec::new();
    for run in 0..env.args.runs {
        let dir = workdir(env, "idle")?;
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
        "idle: three watches (100 pods each), core NATS, 3 s after the watches opened:".into(),
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
