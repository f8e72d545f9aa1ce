//! Test harness for kube2nats: the two outside systems it talks to, under a test's control.
//!
//! kube2nats is only as good as its behaviour when the API server or NATS misbehave, and neither
//! a real cluster nor a shared NATS can be made to misbehave on cue. This crate provides:
//!
//! - [`apiserver`]: an in-process simulated kube-apiserver that speaks the real wire protocol
//!   (discovery, paged lists, watches, bookmarks, 410 Expired, auth, RBAC, TLS) and can inject
//!   faults (dropped and truncated streams, garbage lines, 429/5xx with Retry-After);
//! - [`nats`]: a supervisor for a real `nats-server` process on a free loopback port, which can
//!   be stopped and restarted on the same port with its JetStream store intact.
//!
//! Both are used by kube2nats' integration tests and by the demo.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apiserver;
pub mod nats;
