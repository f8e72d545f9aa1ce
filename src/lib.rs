//! kube2nats turns the Kubernetes watch API into NATS messages.

#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod event;
pub mod publish;
pub mod telemetry;
