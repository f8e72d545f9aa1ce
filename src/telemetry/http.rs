//! The operator's HTTP endpoints on one listener: `/metrics` for Prometheus, `/healthz` for the
//! kubelet's liveness probe, `/readyz` for its readiness probe.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::IntGauge;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{Metrics, WatchSync};

/// What `/readyz` checks: every watch has completed its list and NATS is connected.
pub struct Readiness {
    nats_connected: IntGauge,
    /// Set once discovery has resolved every watch; until then nothing is ready.
    watches: OnceLock<Vec<WatchSync>>,
    shutting_down: CancellationToken,
}

impl Readiness {
    pub fn new(nats_connected: IntGauge, shutting_down: CancellationToken) -> Readiness {
        Readiness {
            nats_connected,
            watches: OnceLock::new(),
            shutting_down,
        }
    }

    /// Hands over the watches once they run.
    pub fn set_watches(&self, watches: Vec<WatchSync>) {
        let _ = self.watches.set(watches);
    }

    /// `Ok` when ready, else one short line per thing that is not.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let mut not_ready = Vec::new();
        if self.shutting_down.is_cancelled() {
            not_ready.push("shutting down".to_owned());
        }
        if self.nats_connected.get() != 1 {
            not_ready.push("NATS: not connected".to_owned());
        }
        match self.watches.get() {
            None => not_ready.push("watches: not started (API discovery pending)".to_owned()),
            Some(watches) => not_ready.extend(
                watches
                    .iter()
                    .filter(|w| !w.is_synced())
                    .map(|w| format!("watch {}: not synced", w.watch)),
            ),
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
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz_handler))
        .with_state(AppState { metrics, readiness });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
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
    match state.readiness.check() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(reasons) => (StatusCode::SERVICE_UNAVAILABLE, reasons.join("\n") + "\n"),
    }
}
