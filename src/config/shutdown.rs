//! `[shutdown]`: how long a stop may take; the section's raw form, default, check and typed value
//! together.

use std::time::Duration;

use super::checker::Checker;
use super::raw::duration;

/// `shutdown.grace_period`: below Kubernetes' default 30 s termination grace period, leaving room
/// for the pod to exit before SIGKILL.
pub(crate) const DEFAULT_SHUTDOWN_GRACE_PERIOD: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub(crate) struct ShutdownConfig {
    /// Time allowed to stop watches, publish what is in flight and drain NATS after SIGTERM.
    pub(crate) grace_period: Duration,
}

/// `[shutdown]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawShutdown {
    /// Duration. Default [`DEFAULT_SHUTDOWN_GRACE_PERIOD`].
    pub(crate) grace_period: String,
}

impl Default for RawShutdown {
    fn default() -> Self {
        RawShutdown {
            grace_period: duration(DEFAULT_SHUTDOWN_GRACE_PERIOD),
        }
    }
}

pub(super) fn check_shutdown(c: &mut Checker, raw: &RawShutdown) -> Option<ShutdownConfig> {
    let grace_period = c.duration("shutdown.grace_period", &raw.grace_period)?;
    Some(ShutdownConfig { grace_period })
}
