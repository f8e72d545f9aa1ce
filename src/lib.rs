//! kube2nats turns the Kubernetes watch API into NATS messages.

#![forbid(unsafe_code)]

pub mod app;
pub mod backoff;
pub mod config;
pub mod dedupe;
pub mod event;
pub mod kube;
pub mod publish;
pub mod rbac;
pub mod subject;
pub mod telemetry;
pub mod watcher;
