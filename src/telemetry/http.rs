//! The operator's HTTP endpoints on one listener: `/metrics` for Prometheus, `/healthz` for the
//! kubelet's liveness probe, `/readyz` for its readiness probe.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::IntGauge;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{Metrics, WatchSync};
use super::server;

/// What `/readyz` checks: NATS is connected and every watch has completed its list (a watch
/// whose resource is not served has not: docs/troubleshooting.md) — or, for a standby replica with leader election, that it is warm (discovery done, NATS connected), since
/// a standby that is not ready would block rollouts and nothing routes traffic to kube2nats.
pub(crate) struct Readiness {
    nats_connected: IntGauge,
    phase: Mutex<Phase>,
    shutting_down: CancellationToken,
    /// Watch targets repairing the mirror bucket after a list (docs/mirror.md).
    mirror_repairs: Mutex<Option<IntGauge>>,
    /// Targets publishing while their saved state does not keep up: said in the body, without
    /// changing the status (delivery goes on; docs/durable-state.md).
    state: Mutex<Option<crate::state::StateMetrics>>,
}

/// Where the watches stand, for readiness.
enum Phase {
    /// Discovery has not resolved every watch yet; nothing is ready.
    Starting,
    /// Warm, waiting for the Lease; runs no watch.
    Standby,
    /// The watches run; ready once each is synced.
    Watching(Vec<WatchSync>),
}

impl Readiness {
    pub(crate) fn new(nats_connected: IntGauge, shutting_down: CancellationToken) -> Readiness {
        Readiness {
            nats_connected,
            phase: Mutex::new(Phase::Starting),
            shutting_down,
            mirror_repairs: Mutex::new(None),
            state: Mutex::new(None),
        }
    }

    /// The body of `/readyz` also says which targets' saved state does not keep up.
    pub(crate) fn set_state(&self, state: crate::state::StateMetrics) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
    }

    /// Lines for `/readyz`'s body that do not change its status.
    pub(crate) fn notes(&self) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .as_ref()
            .map(crate::state::StateMetrics::not_durable)
            .unwrap_or_default()
            .into_iter()
            .map(|reason| format!("state: not durable ({reason})"))
            .collect()
    }

    /// Readiness also waits for the mirror's repairs: `repairs` counts the targets under way.
    pub(crate) fn set_mirror_repairs(&self, repairs: IntGauge) {
        *self
            .mirror_repairs
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(repairs);
    }

    /// Hands over the watches once they run.
    pub(crate) fn set_watches(&self, watches: Vec<WatchSync>) {
        *self.phase() = Phase::Watching(watches);
    }

    /// This replica is warm and waits for the Lease.
    pub(crate) fn set_standby(&self) {
        *self.phase() = Phase::Standby;
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        // Every writer leaves the phase whole, so a poisoned lock still holds a valid one.
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Ok` when ready, else one short line per thing that is not.
    pub(crate) fn check(&self) -> Result<(), Vec<String>> {
        let mut not_ready = Vec::new();
        if self.shutting_down.is_cancelled() {
            not_ready.push("shutting down".to_owned());
        }
        if self.nats_connected.get() != 1 {
            not_ready.push("NATS: not connected".to_owned());
        }
        match &*self.phase() {
            Phase::Starting => {
                not_ready.push("watches: not started (API discovery pending)".to_owned())
            }
            Phase::Standby => {}
            Phase::Watching(watches) => not_ready.extend(watches.iter().filter_map(|w| match () {
                () if !w.is_served() => Some(format!(
                    "watch {}: resource not served (CRD not installed or deleted?); waiting for it",
                    w.watch
                )),
                () if !w.is_synced() => Some(format!("watch {}: not synced", w.watch)),
                () => None,
            })),
        }
        let repairs = self
            .mirror_repairs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, IntGauge::get);
        if repairs > 0 {
            not_ready.push(format!(
                "mirror: {repairs} watch target(s) repairing the bucket"
            ));
        }
        if not_ready.is_empty() {
            Ok(())
        } else {
            Err(not_ready)
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    readiness: Arc<Readiness>,
}

/// Binds the listener; returns the bound address (the port may have been 0).
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until `shutdown` is cancelled, with at most `max_connections` connections (lowered to
/// keep file descriptors in reserve; [`super::server`]); then gives the open connections
/// [`super::server::CLOSE_GRACE`].
pub(crate) async fn serve(
    listener: TcpListener,
    max_connections: usize,
    metrics: Metrics,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let router = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz_handler))
        .with_state(AppState { metrics, readiness });
    let limit = server::open_files_limit();
    let cap = server::connection_cap(max_connections, limit);
    if cap < max_connections {
        tracing::warn!(
            max_connections,
            open_files_limit = limit,
            lowered_to = cap,
            reserve = server::FD_RESERVE,
            "http.max_connections lowered to keep file descriptors for the watches and NATS"
        );
    }
    server::serve(listener, router, cap, shutdown).await;
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

async fn readyz_handler(State(state): State<AppState>) -> impl IntoResponse {
    let (status, mut lines) = match state.readiness.check() {
        Ok(()) => (StatusCode::OK, vec!["ready".to_owned()]),
        Err(reasons) => (StatusCode::SERVICE_UNAVAILABLE, reasons),
    };
    lines.extend(state.readiness.notes());
    (status, lines.join("\n") + "\n")
}
