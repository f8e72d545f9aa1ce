//! The `kube2nats` command: parses flags, loads the configuration, installs logging and signal
//! handling, and runs [`kube2nats::facade::run_reloading`] until SIGTERM or SIGINT, reloading the
//! configuration on SIGHUP and when its file changes.
//!
//! Exit codes: `0` clean stop (or a valid `--check-config`), `1` runtime error (the error chain is
//! printed), `2` invalid configuration or command line (one line per problem on stderr, printed
//! before anything starts).
//!
//! The library's `lib.rs` is the map of the stages (docs/design.md draws the data flow).

#![forbid(unsafe_code)]

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use kube2nats::facade::{Config, ConfigErrors, LogFormat, RawConfig};
use kube2nats::facade::{ConfigSource, Reload};

/// The static musl build (the container image) allocates through mimalloc: musl's malloc is slow
/// on the many small allocations of each message, glibc's is not, so other builds keep it.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code of an invalid configuration, as for a command-line usage error.
const EXIT_CONFIG: u8 = 2;
/// Exit code of an error at run time.
const EXIT_RUNTIME: u8 = 1;
/// The start-up RBAC self-check found a missing permission and `kubernetes.rbac_check = "fail"`.
const EXIT_RBAC: u8 = 3;

/// Turns the Kubernetes watch API into NATS messages.
#[derive(Debug, Parser)]
#[command(name = "kube2nats", version, about)]
struct Cli {
    /// The TOML configuration file; without it, defaults and KUBE2NATS__* variables only.
    #[arg(long, value_name = "PATH", env = "KUBE2NATS_CONFIG")]
    config: Option<PathBuf>,
    /// Validate the configuration (the file given here, or --config), print it with secrets
    /// redacted and exit: 0 if valid, 2 if not.
    #[arg(long, value_name = "PATH")]
    check_config: Option<Option<PathBuf>>,
    /// Overrides log.format.
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `--check-config FILE` names the file to check; a bare `--check-config` checks `--config`.
    let path = match &cli.check_config {
        Some(Some(file)) => Some(file.as_path()),
        _ => cli.config.as_deref(),
    };
    let source = ConfigSource {
        path: path.map(PathBuf::from),
        // The flag wins over the file and the environment; clap has checked its value.
        log_format: cli.log_format.as_deref().map(|format| match format {
            "json" => LogFormat::Json,
            _ => LogFormat::Text,
        }),
    };
    let content = source.content();
    let (raw, config) = match source.load() {
        Ok(loaded) => loaded,
        Err(errors) => return config_error(path, &errors),
    };
    if cli.check_config.is_some() {
        print!("{}", raw.to_redacted_toml());
        return ExitCode::SUCCESS;
    }
    let config_format = config.log.format;
    match run(
        config,
        Loaded {
            source,
            raw,
            content,
        },
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            stopped_on(&e, config_format);
            if e.downcast_ref::<kube2nats::facade::RbacDenied>().is_some() {
                ExitCode::from(EXIT_RBAC)
            } else if e.downcast_ref::<kube2nats::facade::NoNamespace>().is_some()
                || e.downcast_ref::<kube2nats::facade::MirrorUnavailable>()
                    .is_some()
                || e.downcast_ref::<kube2nats::facade::MirrorsOverlap>()
                    .is_some()
            {
                ExitCode::from(EXIT_CONFIG)
            } else {
                ExitCode::from(EXIT_RUNTIME)
            }
        }
    }
}

/// Says, once, why kube2nats stopped: one JSON record for a log pipeline, else one sentence on
/// stderr (a log line repeating it would say the same thing twice). Before logging is installed
/// only the sentence can be seen.
fn stopped_on(error: &anyhow::Error, format: LogFormat) {
    match format {
        LogFormat::Json if tracing::dispatcher::has_been_set() => {
            tracing::error!(
                error = format!("{error:#}"),
                "kube2nats stopped on an error"
            );
        }
        _ => eprintln!("kube2nats: error: {error:#}"),
    }
}

/// Prints every problem, one line each, and returns exit code 2.
fn config_error(path: Option<&std::path::Path>, errors: &ConfigErrors) -> ExitCode {
    match path {
        Some(p) => eprintln!("kube2nats: invalid configuration ({}):", p.display()),
        None => eprintln!("kube2nats: invalid configuration:"),
    }
    eprintln!("{errors}");
    ExitCode::from(EXIT_CONFIG)
}

/// Where the configuration in force came from, and what it was read as.
struct Loaded {
    source: ConfigSource,
    raw: RawConfig,
    content: Option<Vec<u8>>,
}

fn run(config: Config, loaded: Loaded) -> anyhow::Result<()> {
    kube2nats::facade::init_logging(&config.log.filter, config.log.format)?;
    // A panicking watch task is reported by its supervisor in one log line.
    kube2nats::facade::install_panic_hook();
    // One thread does all the work. Every stage is I/O-bound or a few microseconds of CPU per
    // event, so one core carries ~100k events/s, far beyond what an API server sends; and a single
    // thread saves the cross-thread wake-ups, the allocator contention and the idle worker stacks
    // a multi-threaded runtime costs (measured with the load harness: 17% less CPU per event).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let result = runtime.block_on(async {
        let shutdown = shutdown_signal().context("installing signal handlers")?;
        // SIGHUP reloads the configuration (docs/configuration.md); without a handler it would
        // end the process.
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("installing signal handlers")?;
        let reload = Reload {
            source: loaded.source,
            raw: loaded.raw,
            content: loaded.content,
            hangup: Some(hangup),
        };
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            revision = kube2nats::facade::REVISION,
            watches = config.watches.len(),
            "kube2nats starting"
        );
        kube2nats::facade::run_reloading(config, Some(reload), shutdown).await
    });
    // Blocking work still running (a file read, a name lookup) must not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    result
}

/// A future that resolves on SIGTERM (what Kubernetes sends to stop a pod) or SIGINT (Ctrl-C),
/// logging which. The handlers are installed before this returns, so a signal arriving before the
/// future is first polled is not lost (nor does it kill the process). A second signal during the
/// graceful shutdown exits at once with code 1: an operator who asks twice does not want to wait.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutdown requested");
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::error!(
                signal = name,
                "second signal during shutdown: exiting at once; what was in flight is abandoned"
            );
            std::process::exit(i32::from(EXIT_RUNTIME));
        });
    })
}
