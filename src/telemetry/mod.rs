//! What operators see: logs, Prometheus metrics, health and readiness.
pub mod logging;
