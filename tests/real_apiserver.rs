//! kube2nats against a real kube-apiserver (v1.20.2 over etcd: `kube2nats_harness::real_apiserver`)
//! and, from the same test bodies, against the simulated one. The simulator is written alongside
//! the daemon, so a misreading of kube-apiserver would be shared by both; here a difference shows
//! as one test failing on one server.
//!
//! Each test runs the real binary against a real nats-server and compares what kube2nats published
//! with the test's own watch on the same server: the server's own account of what happened.
//!
//! Layout: `server` (the two servers behind one interface), `daemon` (the binary and its
//! configuration), `observe` (the test's own watch and what kube2nats published), then the
//! scenarios: `pods`, `crds`, `mirror`, `requests` (what kube2nats asks of the server) and
//! `differences` (where the simulator's defaults differ from kube-apiserver, pinned).

mod common;

#[path = "real_apiserver/crds.rs"]
mod crds;
#[path = "real_apiserver/daemon.rs"]
mod daemon;
#[path = "real_apiserver/differences.rs"]
mod differences;
#[path = "real_apiserver/mirror.rs"]
mod mirror;
#[path = "real_apiserver/observe.rs"]
mod observe;
#[path = "real_apiserver/pods.rs"]
mod pods;
#[path = "real_apiserver/requests.rs"]
mod requests;
#[path = "real_apiserver/server.rs"]
mod server;
