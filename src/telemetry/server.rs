//! The accept loop of the HTTP endpoints, with the limits a probe port open to the cluster needs
//! (docs/reliability.md, "The HTTP endpoints"): a client has [`HEADER_READ_TIMEOUT`] to send a
//! request's headers, and as long again between two requests on a kept-alive connection; at most
//! `http.max_connections` connections are open, lowered at start so that [`FD_RESERVE`] file
//! descriptors stay free for the watches and NATS; at the cap the idle connection open longest is
//! closed for the new one; at shutdown, connections get [`CLOSE_GRACE`] to finish.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Time a client has to send a request's headers, counted from the connection's opening or from
/// the end of its previous response: a client that stops mid-header, or keeps a connection idle,
/// loses it.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// File descriptors kept free for the watches, the NATS connection and the files kube2nats reads
/// (tokens, certificates): the connection cap is lowered so that HTTP clients never take them.
pub(crate) const FD_RESERVE: u64 = 256;
/// Time the open connections have at shutdown to finish the request they serve.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_millis(250);
/// Pause after a failed `accept` (out of file descriptors, most likely) before the next one.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The connection cap in force: `configured`, lowered so that [`FD_RESERVE`] descriptors stay
/// free under `open_files_limit` (the soft `RLIMIT_NOFILE`, when known); at least 1.
pub(crate) fn connection_cap(configured: usize, open_files_limit: Option<u64>) -> usize {
    let room = open_files_limit.map_or(u64::MAX, |limit| limit.saturating_sub(FD_RESERVE));
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    configured.min(room).max(1)
}

/// The soft limit on open files of this process (`Max open files` in `/proc/self/limits`);
/// `None` where unknown or unlimited.
pub(crate) fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_files_limit(&limits)
}

fn parse_open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// One open connection: how many of its requests are being answered, and how to close it.
struct Open {
    in_flight: Arc<AtomicUsize>,
    close: CancellationToken,
}

/// The open connections by the order they were accepted (ids only grow).
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: BTreeMap<u64, Open>,
}

impl Registry {
    /// Makes room for one more connection under `cap`: closes the idle connection open longest.
    /// `false` if every connection is answering a request.
    fn make_room(&mut self, cap: usize) -> bool {
        if self.open.len() < cap {
            return true;
        }
        let idle = self
            .open
            .iter()
            .find(|(_, c)| c.in_flight.load(Ordering::Relaxed) == 0)
            .map(|(id, _)| *id);
        match idle.and_then(|id| self.open.remove(&id)) {
            Some(evicted) => {
                evicted.close.cancel();
                true
            }
            None => false,
        }
    }

    fn insert(&mut self, open: Open) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(id, open);
        id
    }
}

/// Serves `router` on `listener` with at most `cap` connections until `shutdown` is cancelled;
/// then gives the open connections [`CLOSE_GRACE`] and drops them.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    cap: usize,
    shutdown: CancellationToken,
) {
    let registry = Arc::new(Mutex::new(Registry::default()));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "accepting an HTTP connection failed");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                }
            }
        };
        let in_flight = Arc::new(AtomicUsize::new(0));
        let close = CancellationToken::new();
        let id = {
            let mut registry = lock(&registry);
            if !registry.make_room(cap) {
                tracing::debug!(
                    max_connections = cap,
                    "HTTP connection refused: every connection is answering a request"
                );
                continue;
            }
            registry.insert(Open {
                in_flight: in_flight.clone(),
                close: close.clone(),
            })
        };
        let registry = registry.clone();
        let (router, shutdown) = (router.clone(), shutdown.clone());
        connections.spawn(async move {
            connection(stream, router, in_flight, close, shutdown).await;
            lock(&registry).open.remove(&id);
        });
    }
    drop(listener);
    let closed = tokio::time::timeout(CLOSE_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if closed.is_err() {
        tracing::debug!(
            open = connections.len(),
            "HTTP connections still open at shutdown: closed"
        );
    }
}

fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    // Every writer leaves the registry whole, so a poisoned lock still holds a valid one.
    registry.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serves one connection until the client closes it, the header-read timeout closes it, the
/// cap evicts it (`close`), or shutdown, which lets the request in progress finish.
async fn connection(
    stream: TcpStream,
    router: Router,
    in_flight: Arc<AtomicUsize>,
    close: CancellationToken,
    shutdown: CancellationToken,
) {
    let router = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |request| {
        let answer = router.call(request);
        let busy = Busy::new(&in_flight);
        async move {
            let response: Result<_, Infallible> = answer.await;
            drop(busy);
            response
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = &mut connection => return,
        _ = close.cancelled() => return,
        _ = shutdown.cancelled() => {}
    }
    connection.as_mut().graceful_shutdown();
    tokio::select! {
        _ = connection => {}
        _ = close.cancelled() => {}
    }
}

/// A request being answered: its connection is not idle.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn new(in_flight: &Arc<AtomicUsize>) -> Busy {
        in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(in_flight.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_file_descriptors_in_reserve() {
        assert_eq!(connection_cap(64, None), 64);
        assert_eq!(connection_cap(64, Some(1024)), 64);
        assert_eq!(connection_cap(1000, Some(1024)), 768);
        assert_eq!(connection_cap(64, Some(300)), 44);
        assert_eq!(connection_cap(64, Some(100)), 1);
    }

    #[test]
    fn reads_the_soft_open_files_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63704                63704                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_open_files_limit(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_open_files_limit(unlimited), None);
    }

    #[test]
    fn the_cap_evicts_the_idle_connection_open_longest() {
        let mut registry = Registry::default();
        let opens: Vec<_> = (0..3)
            .map(|_| (Arc::new(AtomicUsize::new(0)), CancellationToken::new()))
            .collect();
        for (in_flight, close) in &opens {
            registry.insert(Open {
                in_flight: in_flight.clone(),
                close: close.clone(),
            });
        }
        opens[0].0.store(1, Ordering::Relaxed);
        assert!(registry.make_room(4));
        assert!(registry.make_room(3));
        assert!(!opens[0].1.is_cancelled(), "busy: kept");
        assert!(opens[1].1.is_cancelled(), "the oldest idle one is closed");
        assert!(!opens[2].1.is_cancelled());
        opens[2].0.store(1, Ordering::Relaxed);
        assert!(!registry.make_room(2), "every connection busy");
    }
}
