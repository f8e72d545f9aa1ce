//! What operators see: logs, Prometheus metrics, health and readiness.

pub mod http;
pub mod logging;
pub mod metrics;
mod server;
pub mod target;
