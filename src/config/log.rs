//! `[log]`: the log filter and format; the section's raw form, defaults, check and typed value
//! together.

use super::checker::Checker;
use super::named::{LogFormat, Named};
use super::raw::s;

/// `log.filter`: `info` shows start-up, reconnects that need attention and errors, without the
/// per-event chatter of `debug`.
pub(crate) const DEFAULT_LOG_FILTER: &str = "info";
/// `log.format`: text reads well in `kubectl logs`; use `json` for log pipelines.
pub(crate) const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Text;

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// A `RUST_LOG`-style filter (`info`, `kube2nats=debug,info`).
    pub filter: String,
    /// Text for people, JSON lines for log pipelines.
    pub format: LogFormat,
}

/// `[log]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawLog {
    /// A `RUST_LOG`-style filter; the `RUST_LOG` environment variable, when set, wins.
    /// Default [`DEFAULT_LOG_FILTER`].
    pub(crate) filter: String,
    /// `text` or `json`. Default [`DEFAULT_LOG_FORMAT`].
    pub(crate) format: String,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            filter: s(DEFAULT_LOG_FILTER),
            format: s(DEFAULT_LOG_FORMAT.name()),
        }
    }
}

pub(super) fn check_log(c: &mut Checker, log: &RawLog) -> Option<LogConfig> {
    let format = c.one_of("log.format", &log.format, LogFormat::NAMES);
    let filter = match tracing_subscriber::EnvFilter::builder().parse(&log.filter) {
        Ok(_) => Some(log.filter.clone()),
        Err(e) => {
            let why = format!(
                "invalid filter {:?}: {e} (expected RUST_LOG syntax, e.g. info or kube2nats=debug,info)",
                log.filter
            );
            c.fail("log.filter", why)
        }
    };
    Some(LogConfig {
        filter: filter?,
        format: format?,
    })
}
