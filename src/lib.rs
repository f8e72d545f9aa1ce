//! kube2nats turns the Kubernetes watch API into NATS messages.
//!
//! Every module is private and every item `pub(crate)` or narrower unless it is reachable
//! through [`facade`]: code outside the library (the binary, the integration tests, the
//! benchmarks, the fuzz properties, the examples) uses only what the facade re-exports, which is
//! not a stable library API (docs/development.md, "Visibility").
//!
//! The stages, in the order an event flows through them:
//!
//! - `config`: the TOML file and `KUBE2NATS__…` environment, validated once into typed values.
//! - `kube`: the API server: credentials, HTTP, discovery, list pages, watch framing and the
//!   decoding of each watch line into an event.
//! - `scope`: which namespaces' objects a watch publishes (exclusions, namespace selectors).
//! - `watcher`: one task per watch target: the list+watch state machine, and the driver that
//!   hands each of its outcomes on.
//! - `event`: the typed values passed from the watch stage to the publish stage.
//! - `filter`: a watch's CEL `filter`: which objects it publishes.
//! - `noise`: per watch, which MODIFIED events are news and which paths are stripped.
//! - `dedupe`: what each watch has published, so no change is published twice or missed.
//! - `subject`: subject templates and the token escaping rule.
//! - `publish`: the message (headers, payload, subject) and publishing it to core NATS or
//!   JetStream.
//! - `delivery`: the order in which one watch's messages reach NATS and its journal records
//!   reach the state bucket.
//! - `state`: durable checkpoints and the journal of each watch's memory in JetStream, loaded at
//!   start.
//! - `mirror`: the current objects of the mirrored watches in a JetStream key-value bucket.
//!
//! Beside the path:
//!
//! - `target`: what one watch target watches (resource, namespace, selectors, limits).
//! - `rbac`: the start-up self-check of the permissions every watch needs.
//! - `leader`: with several replicas, the Lease that lets only one of them publish.
//! - `backoff`: the delay between failed attempts, of a watch or of a publish.
//! - `budget`: the one byte budget for data held between the API server and NATS.
//! - `json_path`: the paths `noise` strips and compares, parsed at start.
//! - `redact`: credentials kept out of every log line, error and printed configuration.
//! - `telemetry`: logs, Prometheus metrics, health and readiness.
//! - `app`: builds every stage from the configuration, runs them, and stops them in order.
//! - `facade`: what code outside the library (binary, tests, benchmarks) reaches.

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
