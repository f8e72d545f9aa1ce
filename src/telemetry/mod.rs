//! What operators see: logs, Prometheus metrics, health and readiness.

pub(crate) mod http;
pub(crate) mod logging;
pub(crate) mod metrics;
mod server;
pub(crate) mod target;
