//! kube2nats turns the Kubernetes watch API into NATS messages.
//!
//! Every module is private and every item `pub(crate)` or narrower unless it is reachable
//! through [`facade`]: code outside the library (the binary, the integration tests, the
//! benchmarks, the fuzz properties, the examples) uses only what the facade re-exports, which is
//! not a stable library API (docs/development.md, "Visibility").
//!
//! The modules, one stage each, in the order an event flows through them:
//!
//! - `config`: the TOML file and `KUBE2NATS__…` environment, validated once into typed values.
//! - `kube`: the API server: credentials, HTTP, discovery, list pages, watch framing and decoding.
//! - `rbac`: the start-up self-check of the permissions every watch needs.
//! - `scope`: which namespaces' objects a watch publishes (exclusions, namespace selectors).
//! - `watcher`: one task per watch: the list+watch state machine and the driver acting on it.
//! - `backoff`: the delay between failed attempts, of a watch or of a publish.
//! - `budget`: the one byte budget for data held between the API server and NATS.
//! - `event`: the typed values passed from the watch stage to the publish stage.
//! - `noise`: per watch, which MODIFIED events are news and which paths are stripped
//!   (`json_path` parses the paths).
//! - `dedupe`: what each watch has published, so no change is published twice or missed.
//! - `subject`: subject templates and the token escaping rule.
//! - `target`: what one watch target watches (resource, namespace, selectors, limits).
//! - `publish`: headers, payloads, and publishing to core NATS or JetStream.
//! - `state`: durable checkpoints of each watch's memory in JetStream, loaded at start.
//! - `leader`: with several replicas, the Lease that lets only one of them publish.
//! - `telemetry`: logs, Prometheus metrics, health and readiness.
//! - `app`: builds every stage from the configuration, runs them, and stops them in order.

#![forbid(unsafe_code)]
// A `pub` item must be reachable through `facade`; anything else is `pub(crate)` or narrower, so
// the compiler reports an item nothing uses (docs/development.md, "Visibility").
#![warn(unreachable_pub)]

// The fuzz properties (`fuzz/src/lib.rs`) hold the one reference decoder of watch lines and of
// escaped subject tokens; the unit tests use them too. They name this crate `kube2nats`, as the
// fuzz crate and the integration tests do. The file is the fuzz crate's root: its `pub` items
// are what the fuzz targets call, so they stay `pub`.
#[cfg(test)]
extern crate self as kube2nats;
#[cfg(test)]
#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code, unreachable_pub)]
mod fuzz_props;

mod app;
mod backoff;
mod budget;
mod config;
mod dedupe;
mod delivery;
mod event;
pub mod facade;
mod filter;
mod json_path;
mod kube;
mod leader;
mod mirror;
mod noise;
mod publish;
mod rbac;
mod redact;
mod scope;
mod state;
mod subject;
mod target;
mod telemetry;
mod watcher;
