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
//!   [`kube2nats::facade::Dedupe`], heap bytes counted by this binary's allocator;
//! - `core`, `jetstream`: N objects listed, then M watch events as fast as the socket takes them;
//!   events/s end to end, kube2nats CPU seconds per 100k events, peak RSS;
//! - `latency`: events paced at `--rate` per second; API server → subscriber latency p50/p99;
//! - `list`: peak RSS while listing (and publishing) `--list-objects` pods;
//! - `idle`: RSS with three idle watches, the binary evicted from the page cache before each start.
//! - `restart`: durable state of `--list-objects` pods: bytes stored per object, then a kill -9
//!   and a restart that loads it (load seconds, peak RSS against the RSS holding them before).
//! - `mirror-lag` (only on request): events paced at `--rate` with the watch mirrored into the
//!   key-value bucket; API server → bucket watcher p50/p99 and the daemon's write lag metric.
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
//! every object has, so every published object is trimmed, a copy each), `filter` (a `filter`
//! every object matches, docs/filters.md: the same messages, each object read and judged),
//! `label` (a subject built from `{label:tier}`: each object's labels read) and `mirror` (the watch
//! is mirrored into the key-value bucket, docs/mirror.md; needs JetStream, so core runs publish
//! events to core NATS and the mirror to JetStream).
//!
//! `LOADTEST_WATCH_CHUNK_BYTES=N` gathers watch events into HTTP chunks of at least N bytes
//! (262144 for the coalesced figures of docs/performance.md); unset, each event is a chunk of its
//! own, as kube-apiserver sends them.
//!
//! Every scenario runs `--runs` times; the report gives the median (and min–max).

// A benchmark measures real time: tokio's pausable clock (which the crate's lint asks for) has
// no place here.
#![allow(clippy::disallowed_types)]

mod apiserver;
mod mirror_lag;
mod peers;
mod pods;
mod procfs;
mod scenarios;
mod throughput;

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
use scenarios::{idle, latency, list, metadata, restart};
use throughput::{on_off, shaped_run, throughput, throughput_run, RunResult, Shape};

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
    /// Events per second of the latency and mirror-lag scenarios.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Events of the latency and mirror-lag scenarios.
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
            "mirror-lag" => runtime.block_on(mirror_lag::mirror_lag(&env))?,
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
    use kube2nats::facade::Dedupe;
    use kube2nats::facade::{EventType, ObjectMeta, ResourceVersion};
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

/// The allocator settings of the image (the Dockerfile's `ENV`), so that the image's binary
/// (mimalloc) runs here as it does there; glibc's malloc and nats-server ignore them.
const IMAGE_ENV: [(&str, &str); 2] = [("MIMALLOC_ALLOW_THP", "0"), ("MIMALLOC_PURGE_DELAY", "0")];

impl Proc {
    fn spawn(bin: &Path, args: &[&str], log: &Path) -> anyhow::Result<Proc> {
        let log = std::fs::File::create(log)?;
        let child = tokio::process::Command::new(bin)
            .args(args)
            .envs(IMAGE_ENV)
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
        self.metrics_text()
            .await
            .lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }

    /// The process's `/metrics` (empty if unavailable).
    async fn metrics_text(&self) -> String {
        let Some(port) = self.metrics_port else {
            return String::new();
        };
        let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
            return String::new();
        };
        response.text().await.unwrap_or_default()
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
    // `state.cluster_id` named: the harness' API server serves no kube-system Namespace, where
    // kube2nats otherwise reads the cluster's id.
    let mut toml = format!(
        "[log]\nfilter = \"info\"\n\n[kubernetes]\napi_url = \"http://127.0.0.1:{}\"\nlist_page_size = 500\n\n[nats]\nurl = \"{}\"\nmode = \"{}\"\n\n[http]\nlisten = \"127.0.0.1:{}\"\n\n[state]\nenabled = {}\ncluster_id = \"loadtest\"\n\n[publish]\nformat = {:?}\n",
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

impl Arrivals {
    /// Counts one message and, in a paced run, records its latency from the API server's send of
    /// its version.
    fn record(&self, scenario: &Scenario, headers: Option<&async_nats::HeaderMap>) {
        let now = scenario.epoch.elapsed().as_nanos() as u64;
        self.count.fetch_add(1, Ordering::Relaxed);
        self.last_ns.store(now, Ordering::Relaxed);
        self.time(scenario, scenario.list_rv(), now, headers);
    }

    /// Records the latency of a message whose `Kube-Resource-Version` the paced stream sent
    /// (after the list's version `base`), received at `now`.
    fn time(
        &self,
        scenario: &Scenario,
        base: u64,
        now: u64,
        headers: Option<&async_nats::HeaderMap>,
    ) {
        let rv = headers
            .and_then(|h| h.get("Kube-Resource-Version"))
            .and_then(|v| v.as_str().parse::<u64>().ok());
        if let Some(rv) = rv.filter(|rv| *rv > base) {
            let idx = (rv - base - 1) as usize;
            if let Some(sent) = scenario.sent_ns.get(idx) {
                let sent = sent.load(Ordering::Relaxed);
                if sent > 0 {
                    self.latencies
                        .lock()
                        .expect("not poisoned")
                        .push((idx as u64, now.saturating_sub(sent)));
                }
            }
        }
    }
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
            if s.rate.is_some() {
                arrivals.time(s, base, now, msg.headers.as_ref());
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
