//! What operators see: logs, Prometheus metrics, health and readiness.

pub mod http;
pub mod logging;
pub mod metrics;
pub mod target;
