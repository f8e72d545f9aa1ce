//! The `peers` scenario: kube2nats measured against reference forwarders in the same run.
//!
//! Absolute figures move with the machine (a shared machine can halve them from one hour to the
//! next); ratios between forwarders measured under the same load move far less. So each round runs
//! every contender once, back to back, on the same scenario, and the ratios are taken within a
//! round before the median over rounds. The contenders:
//! - kube2nats as it ships (durable state per `--state`), core NATS and JetStream;
//! - the null forwarder (`bench/`): the same HTTP and NATS clients, raw lines published, nothing
//!   else: the floor, core NATS and JetStream;
//! - the kube-rs forwarder (`bench/`): kube-rs' `watcher` with typed pods, JSON to core NATS;
//! - optionally a second kube2nats binary (`--kube2nats-musl`, the image's), core NATS.
//!
//! The forwarders live in their own cargo workspace so kube-rs never enters kube2nats' build.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use super::{
    free_port, on_off, spawn_kube2nats, stat, throughput_run, DaemonCfg, Env, Proc, RunResult,
};

/// A process that turns the simulated API server's watch into NATS messages.
#[derive(Debug, Clone)]
pub enum Forwarder {
    Kube2nats {
        bin: PathBuf,
        state: bool,
    },
    /// `bench/src/bin/null_forwarder.rs`.
    Null(PathBuf),
    /// `bench/src/bin/kube_rs_forwarder.rs` (core NATS only).
    KubeRs(PathBuf),
}

impl Forwarder {
    pub fn name(&self) -> &'static str {
        match self {
            Forwarder::Kube2nats { .. } => "kube2nats",
            Forwarder::Null(_) => "null-forwarder",
            Forwarder::KubeRs(_) => "kube-rs-forwarder",
        }
    }

    /// Starts it against the API server on `api_port`, logging to `<name>.log` in `dir`.
    pub fn start(
        &self,
        dir: &Path,
        api_port: u16,
        nats_url: &str,
        jetstream: bool,
        format: &str,
        watch_extra: &str,
    ) -> anyhow::Result<Proc> {
        let api_url = format!("http://127.0.0.1:{api_port}");
        let log = dir.join(format!("{}.log", self.name()));
        match self {
            Forwarder::Kube2nats { bin, state } => {
                let port = free_port()?;
                let mut proc = spawn_kube2nats(
                    bin,
                    format,
                    dir,
                    &DaemonCfg {
                        state: *state,
                        http_port: Some(port),
                        api_port,
                        nats_url,
                        jetstream,
                        initial_state: "skip",
                        namespaces: &[],
                        watches: 1,
                        watch_extra,
                    },
                )?;
                proc.metrics_port = Some(port);
                Ok(proc)
            }
            // The reference forwarders have no watch settings: they run the default path only.
            Forwarder::Null(bin) => {
                let mut args = vec!["--api-url", &api_url, "--nats-url", nats_url];
                if jetstream {
                    args.push("--jetstream");
                }
                Proc::spawn(bin, &args, &log)
            }
            Forwarder::KubeRs(bin) => {
                if jetstream {
                    bail!("the kube-rs forwarder publishes to core NATS only");
                }
                Proc::spawn(bin, &["--api-url", &api_url, "--nats-url", nats_url], &log)
            }
        }
    }
}

/// One contender of a round.
struct Contender {
    label: String,
    forwarder: Forwarder,
    jetstream: bool,
    results: Vec<RunResult>,
}

pub async fn peers(env: &Env) -> anyhow::Result<Vec<String>> {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench");
    if env.args.build_peers {
        build_peers(&bench)?;
    }
    let dir = env
        .args
        .peers_dir
        .clone()
        .unwrap_or_else(|| bench.join("target/release"));
    let null = dir.join("null-forwarder");
    let kube_rs = dir.join("kube-rs-forwarder");
    for bin in [&null, &kube_rs] {
        if !bin.is_file() {
            bail!(
                "{} not found: pass --build-peers (or run `cargo build --release --manifest-path bench/Cargo.toml`)",
                bin.display()
            );
        }
    }
    let state = env.args.state != "off";
    let kube2nats = Forwarder::Kube2nats {
        bin: env.kube2nats.clone(),
        state,
    };
    let contender = |label: String, forwarder: Forwarder, jetstream: bool| Contender {
        label,
        forwarder,
        jetstream,
        results: Vec::new(),
    };
    let mut contenders = vec![
        contender(
            format!("kube2nats, core (state {})", on_off(state)),
            kube2nats.clone(),
            false,
        ),
        contender(
            "null forwarder, core".into(),
            Forwarder::Null(null.clone()),
            false,
        ),
        contender(
            "kube-rs watcher, core".into(),
            Forwarder::KubeRs(kube_rs),
            false,
        ),
    ];
    if let Some(musl) = &env.args.kube2nats_musl {
        contenders.push(contender(
            format!("kube2nats musl, core (state {})", on_off(state)),
            Forwarder::Kube2nats {
                bin: musl.clone(),
                state,
            },
            false,
        ));
    }
    contenders.extend([
        contender(
            format!("kube2nats, jetstream (state {})", on_off(state)),
            kube2nats,
            true,
        ),
        contender(
            "null forwarder, jetstream".into(),
            Forwarder::Null(null),
            true,
        ),
    ]);
    let load_before = load_average();
    for run in 0..env.args.runs {
        for c in &mut contenders {
            let events = if c.jetstream {
                env.args.jetstream_events.unwrap_or(env.args.events)
            } else {
                env.args.events
            };
            let r = throughput_run(
                env,
                c.jetstream,
                &c.forwarder,
                "any",
                env.args.objects,
                events,
            )
            .await?;
            eprintln!(
                "peers run {}: {}: {:.3} CPU-s/100k events ({:.0} events per CPU-second), {:.0} events/s end to end, peak RSS {:.1} MiB; load average {}",
                run + 1,
                c.label,
                r.kube_cpu_per_100k,
                r.events_per_cpu_sec,
                r.events_per_sec,
                r.peak_rss_mib,
                load_average()
            );
            c.results.push(r);
        }
    }
    Ok(report(env, &contenders, &load_before))
}

fn report(env: &Env, contenders: &[Contender], load_before: &str) -> Vec<String> {
    let mut lines = vec![
        format!(
            "peers, interleaved (N={}, M={}, {} rounds; load average before {load_before}, after {}):",
            env.args.objects,
            env.args.events,
            env.args.runs,
            load_average()
        ),
        "  CPU-s per 100k events of the forwarder process (user+sys), events per CPU-second, peak RSS (MiB):"
            .into(),
    ];
    for c in contenders {
        let col = |f: fn(&RunResult) -> f64| c.results.iter().map(f).collect::<Vec<_>>();
        lines.push(format!(
            "  {:<34}{}  |  {}  |  {}",
            format!("{}:", c.label),
            stat(&col(|r| r.kube_cpu_per_100k), 3),
            stat(&col(|r| r.events_per_cpu_sec), 0),
            stat(&col(|r| r.peak_rss_mib), 1),
        ));
    }
    lines.push(
        "  per 100k events: user / system CPU-s; write calls; voluntary context switches:".into(),
    );
    for c in contenders {
        let col = |f: fn(&RunResult) -> f64| c.results.iter().map(f).collect::<Vec<_>>();
        lines.push(format!(
            "  {:<34}{} / {}  |  {}  |  {}",
            format!("{}:", c.label),
            stat(&col(|r| r.counters.user_s), 3),
            stat(&col(|r| r.counters.system_s), 3),
            stat(&col(|r| r.counters.write_calls), 0),
            stat(&col(|r| r.counters.voluntary_switches), 0),
        ));
    }
    lines.push("  ratios of CPU per event, taken within each round:".into());
    let find = |prefix: &str, jetstream: bool| {
        contenders
            .iter()
            .find(|c| c.label.starts_with(prefix) && c.jetstream == jetstream)
    };
    let ratios = [
        (
            "kube2nats / null, core:",
            find("kube2nats,", false),
            find("null", false),
            "[target <= 2.0]",
        ),
        (
            "kube2nats / null, jetstream:",
            find("kube2nats,", true),
            find("null", true),
            "[target <= 2.5]",
        ),
        (
            "kube-rs / kube2nats, core:",
            find("kube-rs", false),
            find("kube2nats,", false),
            "[target >= 7]",
        ),
        (
            "kube2nats musl / glibc, core:",
            find("kube2nats musl", false),
            find("kube2nats,", false),
            "[target <= 1.10]",
        ),
    ];
    for (label, num, den, target) in ratios {
        let (Some(num), Some(den)) = (num, den) else {
            continue;
        };
        let per_round: Vec<f64> = num
            .results
            .iter()
            .zip(&den.results)
            .map(|(a, b)| a.kube_cpu_per_100k / b.kube_cpu_per_100k)
            .collect();
        lines.push(format!("  {label:<34}{}  {target}", stat(&per_round, 2)));
    }
    lines
}

/// `cargo build --release` of the bench workspace, with the cargo that runs this harness.
fn build_peers(bench: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building the reference forwarders in {}", bench.display());
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--manifest-path"])
        .arg(bench.join("Cargo.toml"))
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("building the reference forwarders failed ({status})");
    }
    Ok(())
}

/// The 1, 5 and 15 minute load averages: what else the machine was doing.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}
