//! Test harness for kube2nats: the two outside systems it talks to, under a test's control.
//!
//! kube2nats is only as good as its behaviour when the API server or NATS misbehave, and neither
//! a real cluster nor a shared NATS can be made to misbehave on cue. This crate provides:
//!
//! - [`apiserver`]: an in-process simulated kube-apiserver that speaks the real wire protocol
//!   (discovery, paged lists, watches, bookmarks, 410 Expired, auth, RBAC, TLS) and can inject
//!   faults (dropped and truncated streams, garbage lines, 429/5xx with Retry-After);
//! - [`nats`]: a supervisor for a real `nats-server` process on a free loopback port, which can
//!   be stopped and restarted on the same port with its JetStream store intact;
//! - [`gate`]: a loopback TCP proxy a test can close, to cut one client off a server;
//! - [`real_apiserver`]: a real kube-apiserver (v1.20.2, built by `scripts/realapi`) over its own
//!   etcd, on free loopback ports, for the tests that check the simulator's reading of the real
//!   server;
//! - [`cluster`]: the three together with the real kube2nats mirroring pods into a bucket, for the
//!   subscriber tests (and, as the `sim-cluster` binary, for the kits' own test runners).
//!
//! Both are used by kube2nats' integration tests and by the demo.
//!
//! ```no_run
//! use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, Failure};
//! use kube2nats_harness::nats::NatsServer;
//! use serde_json::json;
//!
//! # async fn example() -> anyhow::Result<()> {
//! let api = ApiServer::start(ApiServerOptions { tls: true, ..Default::default() }).await?;
//! let nats = NatsServer::start().await?;
//! // Point kube2nats at api.url() with api.ca_file() and api.token_file() (or
//! // api.write_kubeconfig()), and at nats.url(); then drive the cluster:
//! api.create("pods", Some("default"), json!({ "metadata": { "name": "web" } }));
//! api.drop_watches_mid_line();
//! api.update("pods", Some("default"), "web", |pod| pod["spec"] = json!({ "nodeName": "n1" }));
//! api.fail_next(2, Failure::TooManyRequests { retry_after_secs: 1 });
//! api.compact();
//! // ...and assert on what kube2nats asked for:
//! let resumed = api.requests().iter().any(|r| r.is_watch() && r.param("resourceVersion").is_some());
//! # let _ = (resumed, nats);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apiserver;
pub mod cluster;
pub mod gate;
pub mod nats;
pub mod pki;
pub mod real_apiserver;
