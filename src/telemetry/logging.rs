//! Logging set-up: one `tracing` subscriber for the whole process, text or JSON lines on stderr.
//!
//! The filter comes from `log.filter`, unless the `RUST_LOG` environment variable is set: an
//! operator debugging a pod can raise the level by changing the environment alone, without
//! editing the ConfigMap. Stdout stays free for command output such as `--check-config`.

use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::Context as _;
use tracing::field::DisplayValue;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The environment variable that, when set and not empty, replaces the configured filter.
pub(crate) const RUST_LOG: &str = "RUST_LOG";

/// Installs the global subscriber. `filter` is a `RUST_LOG`-style directive list (`info`,
/// `kube2nats=debug,info`); `RUST_LOG` wins when set.
///
/// `Json` writes one object per line with the event's fields flattened next to `timestamp`,
/// `level` and `target`, as log pipelines (Loki, Elasticsearch) expect.
///
/// Fails if the filter does not parse or a global subscriber is already installed.
pub fn init(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = effective_filter(filter, std::env::var(RUST_LOG).ok().as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour only for a person at a terminal: `kubectl logs` and log pipelines read stderr
        // as a file, where escape codes are noise inside every line.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            // The watch task's span (watch, resource, namespace) rides along as "span".
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    result
        .map_err(|e| anyhow::anyhow!(e))
        .context("installing the log subscriber")
}

/// A duration as a person reads it in a log line, to the millisecond: `retry_in = human(delay)`
/// logs `10s 447ms`, not `10.447332254s`. For an optional one, `retry_in = delay.map(human)`
/// leaves the field out when there is none.
pub(crate) fn human(duration: Duration) -> DisplayValue<humantime::FormattedDuration> {
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    tracing::field::display(humantime::format_duration(Duration::from_millis(millis)))
}

/// `rust_log` when set and not empty, else the configured filter.
fn effective_filter(configured: &str, rust_log: Option<&str>) -> anyhow::Result<EnvFilter> {
    match rust_log.filter(|v| !v.trim().is_empty()) {
        Some(v) => EnvFilter::builder()
            .parse(v)
            .with_context(|| format!("invalid {RUST_LOG} {v:?}")),
        None => EnvFilter::builder()
            .parse(configured)
            .with_context(|| format!("invalid log.filter {configured:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_over_config() {
        let f = effective_filter("info", Some("kube2nats=trace")).unwrap();
        assert_eq!(f.to_string(), "kube2nats=trace");
        let f = effective_filter("warn", None).unwrap();
        assert_eq!(f.to_string(), "warn");
        let f = effective_filter("warn", Some("  ")).unwrap();
        assert_eq!(f.to_string(), "warn");
    }

    #[test]
    fn durations_read_as_a_person_writes_them() {
        let text = |d: Duration| human(d).to_string();
        assert_eq!(text(Duration::from_nanos(10_447_332_254)), "10s 447ms");
        assert_eq!(text(Duration::from_millis(50)), "50ms");
        assert_eq!(text(Duration::from_secs(90)), "1m 30s");
        assert_eq!(text(Duration::from_micros(400)), "0s");
    }

    #[test]
    fn bad_filter_is_an_error() {
        assert!(effective_filter("info", Some("x=notalevel")).is_err());
    }
}
