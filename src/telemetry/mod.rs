//! What operators see: logs, Prometheus metrics, health and readiness.
