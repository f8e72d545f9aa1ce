//! The less kind side of kube-apiserver: behaviour a real server (or a proxy in front of it)
//! shows under load, after a fail-over or across versions, which a client must survive.
//!
//! - a watch resumed from a resourceVersion first replays the last few events before it, as a
//!   lagging replica or a caching proxy can ([`ApiServer::replay_on_resume`]);
//! - watches that go silent without closing, a half-open connection ([`ApiServer::hang_watches`]);
//! - `sendInitialEvents` refused (the WatchList feature off) or ignored (a server or proxy that
//!   predates it) ([`ApiServer::set_initial_events`]);
//! - a bounded buffer per watch: a watcher that does not keep up is terminated, as the watch
//!   cache terminates unresponsive watchers ([`ApiServer::limit_watch_backlog`]);
//! - a watch cache behind the client's resourceVersion, answered 504 with the
//!   `ResourceVersionTooLarge` cause ([`ApiServer::set_watch_cache_revision`]).
//!
//! Each is off by default, so the simulator stays as kind as before unless a test asks.

use std::sync::atomic::Ordering;

use super::store::{WatchFault, WatchMsg};
use super::{lock, ApiServer};

/// What a server does with a watch that asks for `sendInitialEvents=true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialEvents {
    /// Streams the current state as ADDED events, then a bookmark annotated
    /// `k8s.io/initial-events-end` (Kubernetes 1.27+ with the WatchList feature).
    #[default]
    Honoured,
    /// 422 Invalid: the feature gate is off.
    Rejected,
    /// The parameters are ignored and the request is served as a plain watch from "now": the
    /// current state as ADDED events, then live events, and never the initial-events-end
    /// bookmark (servers before 1.27, some proxies).
    Ignored,
}

/// The knobs of this module, shared by the request handlers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// Events before the requested version replayed at the start of a resumed watch.
    pub replay_on_resume: usize,
    pub initial_events: InitialEvents,
    /// Undelivered changes a watch may hold before it is terminated; `None`: unbounded.
    pub watch_backlog_limit: Option<usize>,
    /// The newest revision the watch cache has seen; `None`: it is current.
    pub watch_cache_revision: Option<u64>,
    /// How requests for PartialObjectMetadata are answered.
    pub partial_metadata: super::partial::PartialMetadata,
}

/// Attached to a list or watch response so the request log can say what was served.
#[derive(Debug, Clone, Copy, Default)]
pub struct Served {
    /// The revision a list was served at, or after which a watch's events start.
    pub revision: Option<u64>,
    /// The request was answered 410 Expired (as a status, or as a watch's ERROR event).
    pub expired: bool,
}

impl ApiServer {
    fn unkind(&self) -> std::sync::MutexGuard<'_, Settings> {
        lock(&self.shared.unkind)
    }

    /// Makes every watch resumed from a resourceVersion (not 0) start by replaying up to `k` of
    /// the events it would have seen just before that version, as a lagging API server or a
    /// proxy that re-sends what it buffered can. A client must drop them as already seen (or as
    /// older than what it has). 0 turns it off.
    pub fn replay_on_resume(&self, k: usize) {
        self.unkind().replay_on_resume = k;
    }

    /// Makes every open watch go silent without closing: no events, no bookmarks, no end at its
    /// `timeoutSeconds`; the connection stays up until the client gives up on it (its idle
    /// deadline). Watches opened later behave normally.
    pub fn hang_watches(&self) {
        self.shared
            .store()
            .broadcast(WatchMsg::Fault(WatchFault::Hang));
    }

    /// Sets how `sendInitialEvents=true` watches are answered, from the next request on.
    pub fn set_initial_events(&self, mode: InitialEvents) {
        self.unkind().initial_events = mode;
    }

    /// Bounds the changes a watch may have queued and not yet written to a client that does not
    /// read: past `limit`, the watch is terminated, the queue discarded and the body ended
    /// cleanly, as kube-apiserver's watch cache does with unresponsive watchers. Applies to
    /// watches opened from now on; `None` removes the bound.
    pub fn limit_watch_backlog(&self, limit: Option<usize>) {
        self.unkind().watch_backlog_limit = limit;
    }

    /// Watches terminated so far for holding more than the backlog limit.
    pub fn terminated_watches(&self) -> usize {
        self.shared.store().terminated_watches()
    }

    /// Serves watches from a watch cache that has seen revisions up to `revision` only (a
    /// replica behind the one the client used before a fail-over): a watch from a later version
    /// is answered 504 "Too large resource version" with the `ResourceVersionTooLarge` cause.
    /// Lists without a resourceVersion are consistent reads and stay current. `None`: caught up.
    pub fn set_watch_cache_revision(&self, revision: Option<u64>) {
        self.unkind().watch_cache_revision = revision;
    }

    /// TCP connections accepted so far (HTTP/2 clients multiplex their requests over one).
    pub fn connections_accepted(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}
