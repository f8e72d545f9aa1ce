//! The list+watch state machine of one watch target (one resource in one namespace, or in all).
//!
//! One enum of states, one [`Machine::step`] that performs exactly one transition and says what
//! it saw in an [`Outcome`]. `step` only talks to the API server; the driver
//! ([`super::WatchTask`]) de-duplicates, publishes, counts and logs. Every edge case of
//! docs/design.md's edge-case table is one arm below.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prometheus::IntGauge;
use rand::Rng;
use tokio::time::Instant;

use super::list_slots::{ListSlot, ListSlots};
pub(crate) use super::restart::{
    ListReason, Restart, RestartError, RestartReason, StreamingRefusal, VersionMove,
};
use crate::backoff::Backoff;
use crate::budget::{Budget, Charge};
use crate::config::BackoffConfig;
use crate::event::{EventType, ObjectEvent, ObjectMeta, ResourceVersion};
use crate::kube::client::{collection_path, Verb};
use crate::kube::decode::{decode_line, decode_line_prefix, WatchLine};
use crate::kube::error::body_excerpt;
use crate::kube::framing::FrameError;
use crate::kube::list::parse_list_page;
use crate::kube::metadata;
use crate::kube::status::Status;
use crate::kube::stream::{LineStream, StreamError};
use crate::kube::{ApiClient, ApiError};
pub(crate) use crate::target::Target;

mod follow;

/// Added to the server-side watch timeout to get the client-side deadline: a watch that has not
/// ended by then is a half-open connection (the server would have closed it). Capped by the
/// timeout itself so short test timeouts stay short.
const WATCH_DEADLINE_MARGIN: Duration = Duration::from_secs(30);
/// A watch that ends sooner than this without a single line is a "very short watch" (client-go's
/// term): something is wrong, so back off before the next one instead of spinning.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);
/// The pace of the lists that look for a resource no longer served: soon at first (a CRD is
/// created again, or comes back at another version, within seconds), every 8 s at most.
const UNSERVED_BACKOFF: BackoffConfig = BackoffConfig::checked(
    Duration::from_secs(1),
    Duration::from_secs(8),
    2.0,
    0.2,
    Duration::from_secs(60),
);

/// What one step saw.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Part of a list. `started` is set on the first page of a new list; `complete` on the last,
    /// with the list's version: every object not listed since `started` has vanished.
    ListPage {
        started: Option<ListReason>,
        /// On a list's first page, how many items the whole list has, when the server says.
        size_hint: Option<u64>,
        items: Vec<ObjectEvent>,
        complete: Option<ResourceVersion>,
    },
    /// A change received on the watch.
    Event(ObjectEvent),
    /// A change received on the watch in a line over `max_line_bytes`: only its metadata is
    /// known (`object` is empty); it is published as such.
    Oversized {
        event: ObjectEvent,
        line_bytes: usize,
    },
    /// The watch has seen everything up to this version.
    Bookmark(ResourceVersion),
    /// A watch opened from this version.
    WatchOpened(ResourceVersion),
    Restart(Restart),
    /// The collection answered 404: the resource is no longer served (its CRD deleted, or not
    /// installed yet). Reported once; the lists that look for it again stay quiet.
    Unserved(Unserved),
    /// The version watched answered 404 and discovery serves the resource at another preferred
    /// version: the watch goes on there, from where it was ([`follow`]).
    VersionMoved(VersionMove),
    /// Nothing to report (a backoff elapsed).
    Idle,
}

/// A collection that answered 404, and when it is listed again.
#[derive(Debug)]
pub(crate) struct Unserved {
    pub(crate) error: ApiError,
    pub(crate) retry_in: Duration,
}

/// Where one watch target stands.
pub(crate) enum State {
    /// Next step fetches one list page; `continue_token: None` starts a new list. Lists always
    /// read the latest state (`resourceVersion` unset: a consistent read), which is what client-go
    /// falls back to after Expired/TooLarge; kube2nats lists only at start and after those, so it
    /// never needs the cheaper read-from-cache rung.
    Listing {
        reason: ListReason,
        continue_token: Option<String>,
    },
    /// Next step opens a streaming list (`sendInitialEvents=true`).
    StreamListing { reason: ListReason },
    /// Next step reads one line of a streaming list's initial events: ADDED events up to the
    /// bookmark that ends them, after which the same stream goes on as a watch.
    ReceivingInitialEvents {
        reason: ListReason,
        watching: Box<Watching>,
    },
    /// Next step opens a watch from `rv`.
    Connecting { rv: ResourceVersion },
    /// Next step reads one line from the open watch.
    Watching(Box<Watching>),
    /// Next step sleeps `delay`, then becomes `then`.
    Backoff { delay: Duration, then: Box<State> },
}

impl State {
    /// Whether the next step is part of a list (a page, or a streaming list's initial events).
    fn is_list(&self) -> bool {
        matches!(
            self,
            State::Listing { .. }
                | State::StreamListing { .. }
                | State::ReceivingInitialEvents { .. }
        )
    }

    /// The byte-budget charge of the line the last step read (none if it read no line), for the
    /// delivery that publishes what the line held to take over (`crate::delivery`).
    pub(crate) fn take_line_charge(&mut self) -> Charge {
        match self {
            State::Watching(watching) | State::ReceivingInitialEvents { watching, .. } => {
                std::mem::take(&mut watching.line_charge)
            }
            _ => Charge::none(),
        }
    }
}

/// An open watch.
pub(crate) struct Watching {
    /// The version to resume from: the last event or bookmark received.
    rv: ResourceVersion,
    stream: LineStream,
    opened_at: Instant,
    /// The client-side deadline, one timer for the watch's life: a timer made for each line
    /// would be registered with the runtime and removed again for every event.
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    received_any: bool,
    /// What the last line read holds of the byte budget, until taken (or the next line).
    line_charge: Charge,
}

/// What reading one line of an open watch gave.
enum Read {
    Line(WatchLine),
    /// A line over `max_line_bytes`: the change its first bytes show, if they show one.
    Oversized {
        change: Option<(EventType, ObjectMeta)>,
        line_bytes: usize,
    },
    /// The server closed the body cleanly.
    Ended,
    /// The stream broke.
    Lost(RestartReason, RestartError),
}

/// Steps one watch target through its states.
pub(crate) struct Machine {
    client: Arc<ApiClient>,
    target: Arc<Target>,
    path: String,
    backoff: Backoff,
    /// Cleared for good once the server shows it does not support streaming lists.
    streaming_list: bool,
    /// Bytes held between the API server and NATS, shared by every target.
    budget: Budget,
    /// Set when the watch let go for the budget: it reopens in turn ([`Budget::resume_slot`]).
    resume_after_budget: bool,
    /// Whether PartialObjectMetadata is asked for; cleared for good by a 406.
    metadata_only: bool,
    /// Shared by every target: how many list at once.
    list_slots: ListSlots,
    /// Held from the first request of a list until it completes or backs off.
    list_slot: Option<ListSlot>,
    /// While the resource is not served: the pace of the lists that look for it.
    unserved: Option<Backoff>,
    /// `kube2nats_watch_served` of the target's watch: 0 while its collection answers 404.
    served: Option<IntGauge>,
    /// A followed watch was ended by the server: discovery is asked before it reopens.
    recheck_version: bool,
    /// A move to another version lists (the mirror's keys name the version: the list repairs
    /// them) instead of resuming.
    relist_on_move: bool,
    /// 404s in a row while discovery still listed the followed version ([`follow`]).
    discovery_lag: u32,
}

impl Machine {
    pub(crate) fn new(client: Arc<ApiClient>, target: Arc<Target>, backoff: Backoff) -> Machine {
        let path = collection_path(&target.resource, target.namespace.as_deref());
        let streaming_list = target.streaming_list;
        let metadata_only = target.metadata_only;
        Machine {
            client,
            target,
            path,
            backoff,
            streaming_list,
            budget: Budget::unlimited(),
            resume_after_budget: false,
            metadata_only,
            list_slots: ListSlots::unlimited(),
            list_slot: None,
            unserved: None,
            served: None,
            recheck_version: false,
            relist_on_move: false,
            discovery_lag: 0,
        }
    }

    /// Reports in `served` whether the resource is served (`kube2nats_watch_served`).
    pub(crate) fn with_served(mut self, served: Option<IntGauge>) -> Machine {
        self.served = served;
        self
    }

    fn accept(&self, verb: Verb) -> &'static str {
        match (self.metadata_only, verb) {
            (false, _) => metadata::ACCEPT_JSON,
            (true, Verb::List) => metadata::ACCEPT_LIST,
            (true, _) => metadata::ACCEPT_WATCH,
        }
    }

    /// Charges what the watch streams buffer to `budget`, and waits for room before reading.
    pub(crate) fn with_budget(mut self, budget: Budget) -> Machine {
        self.budget = budget;
        self
    }

    /// Lists only while holding one of `slots`.
    pub(crate) fn with_list_slots(mut self, slots: ListSlots) -> Machine {
        self.list_slots = slots;
        self
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// The first state: a list.
    pub(crate) fn start(&self) -> State {
        self.list(ListReason::Initial)
    }

    /// The first state when saved state exists: a watch from the saved version, which the server
    /// answers with the changes since (or 410, and then a relist).
    pub(crate) fn resume(&self, rv: ResourceVersion) -> State {
        State::Connecting { rv }
    }

    /// A new list (streaming where enabled); also where the driver starts over when what the
    /// target publishes changed under it.
    pub(crate) fn list(&self, reason: ListReason) -> State {
        if self.streaming_list {
            State::StreamListing { reason }
        } else {
            State::Listing {
                reason,
                continue_token: None,
            }
        }
    }

    /// Performs one transition. A list waits for a slot before its first request and gives it
    /// back once the next state is no longer part of it (watching, or backing off).
    pub(crate) async fn step(&mut self, state: State) -> (Outcome, State) {
        if state.is_list() && self.list_slot.is_none() {
            self.list_slot = Some(self.list_slots.take().await);
        }
        let (outcome, next) = self.transition(state).await;
        if !next.is_list() {
            self.list_slot = None;
        }
        (outcome, next)
    }

    async fn transition(&mut self, state: State) -> (Outcome, State) {
        match state {
            State::Listing {
                reason,
                continue_token,
            } => self.fetch_page(reason, continue_token).await,
            State::StreamListing { reason } => self.open_streaming_list(reason).await,
            State::ReceivingInitialEvents { reason, watching } => {
                self.read_initial_event(reason, *watching).await
            }
            State::Connecting { rv } if std::mem::take(&mut self.recheck_version) => {
                self.reopen_followed(rv).await
            }
            State::Connecting { rv } => self.open_watch(rv).await,
            State::Watching(watching) => self.read_event(watching).await,
            State::Backoff { delay, then } => {
                tokio::time::sleep(delay).await;
                (Outcome::Idle, *then)
            }
        }
    }

    async fn fetch_page(
        &mut self,
        reason: ListReason,
        continue_token: Option<String>,
    ) -> (Outcome, State) {
        let body = match self.request_page(continue_token.as_deref()).await {
            Ok(body) => {
                self.served_again();
                body
            }
            Err(ApiError::Gone { message }) if continue_token.is_some() => {
                return self.continue_expired(message)
            }
            Err(e) => {
                let retry = State::Listing {
                    reason,
                    continue_token,
                };
                return self.failed(Verb::List, e, retry).await;
            }
        };
        let page = match parse_list_page(&body, &self.target.resource) {
            Ok(page) => page,
            Err(cause) => {
                let error = RestartError::NotAList {
                    cause,
                    excerpt: body_excerpt(&body),
                };
                let retry = State::Listing {
                    reason,
                    continue_token,
                };
                return self.back_off(RestartReason::DecodeError, Verb::List, error, None, retry);
            }
        };
        let started = continue_token.is_none().then_some(reason);
        let size_hint = started
            .and(page.remaining_items)
            .map(|remaining| remaining.saturating_add(page.items.len() as u64));
        match page.continue_token {
            Some(next) => (
                Outcome::ListPage {
                    started,
                    size_hint,
                    items: page.items,
                    complete: None,
                },
                State::Listing {
                    reason,
                    continue_token: Some(next),
                },
            ),
            None => {
                let rv = page.resource_version;
                (
                    Outcome::ListPage {
                        started,
                        size_hint,
                        items: page.items,
                        complete: Some(rv.clone()),
                    },
                    State::Connecting { rv },
                )
            }
        }
    }

    /// GET one list page: `limit` items, after `continue_token`.
    async fn request_page(&self, continue_token: Option<&str>) -> Result<Bytes, ApiError> {
        let limit = self.target.page_size.to_string();
        let mut query = vec![("limit", limit.as_str())];
        self.add_selectors(&mut query);
        if let Some(token) = continue_token {
            query.push(("continue", token));
        }
        let accept = self.accept(Verb::List);
        self.client.list_as(&self.path, &query, accept).await
    }

    /// The `continue` token expired between two pages: the list starts over, at once.
    fn continue_expired(&mut self, message: String) -> (Outcome, State) {
        Self::paged_list_now(
            RestartReason::Expired,
            Verb::List,
            RestartError::ContinueExpired(message),
            ListReason::ContinueExpired,
        )
    }

    /// A restart that needs no pause: a new paged list, at once.
    fn paged_list_now(
        reason: RestartReason,
        verb: Verb,
        error: RestartError,
        list_reason: ListReason,
    ) -> (Outcome, State) {
        let restart = Restart {
            reason,
            verb,
            error: Some(error),
            retry_in: None,
        };
        (
            Outcome::Restart(restart),
            State::Listing {
                reason: list_reason,
                continue_token: None,
            },
        )
    }

    async fn open_streaming_list(&mut self, reason: ListReason) -> (Outcome, State) {
        let initial_events = [
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("resourceVersion", ""),
        ];
        let from = ResourceVersion::new("");
        match self.request_watch(from, &initial_events).await {
            Ok(watching) => (
                Outcome::ListPage {
                    started: Some(reason),
                    size_hint: None,
                    items: Vec::new(),
                    complete: None,
                },
                State::ReceivingInitialEvents {
                    reason,
                    watching: Box::new(watching),
                },
            ),
            Err(e @ (ApiError::Status { .. } | ApiError::UnexpectedBody(_))) => {
                self.streaming_unsupported(StreamingRefusal::Rejected(e))
            }
            Err(e) => {
                self.failed(Verb::Watch, e, State::StreamListing { reason })
                    .await
            }
        }
    }

    /// The server refused or ignored `sendInitialEvents`: use paged lists from now on.
    fn streaming_unsupported(&mut self, why: StreamingRefusal) -> (Outcome, State) {
        self.streaming_list = false;
        Self::paged_list_now(
            RestartReason::UnexpectedResponse,
            Verb::Watch,
            RestartError::StreamingUnsupported(why),
            ListReason::StreamingUnsupported,
        )
    }

    async fn open_watch(&mut self, rv: ResourceVersion) -> (Outcome, State) {
        // A watch opened while the budget is spent could not be read.
        let resume_slot = if std::mem::take(&mut self.resume_after_budget) {
            self.budget.resume_slot().await
        } else {
            self.budget.room().await;
            None
        };
        let from = [("resourceVersion", rv.as_str())];
        match self.request_watch(rv.clone(), &from).await {
            Ok(mut watching) => {
                watching.stream.hold_resume_slot(resume_slot);
                (
                    Outcome::WatchOpened(rv),
                    State::Watching(Box::new(watching)),
                )
            }
            Err(e) => self.failed(Verb::Watch, e, State::Connecting { rv }).await,
        }
    }

    /// Opens a watch from `from` with the request's own `parameters` (besides `watch`,
    /// bookmarks, the timeout and the selectors every watch request carries): the stream to
    /// read once the server answered.
    async fn request_watch(
        &mut self,
        from: ResourceVersion,
        parameters: &[(&str, &str)],
    ) -> Result<Watching, ApiError> {
        let timeout = self.server_timeout();
        let timeout_secs = timeout.as_secs().to_string();
        let mut query = vec![("watch", "1")];
        query.extend_from_slice(parameters);
        query.extend([
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_secs.as_str()),
        ]);
        self.add_selectors(&mut query);
        let accept = self.accept(Verb::Watch);
        let response = self.client.watch_as(&self.path, &query, accept).await?;
        self.served_again();
        Ok(self.watching(from, response, timeout))
    }

    fn watching(
        &self,
        rv: ResourceVersion,
        response: reqwest::Response,
        server_timeout: Duration,
    ) -> Watching {
        let opened_at = Instant::now();
        Watching {
            rv,
            stream: LineStream::with_budget(
                response,
                self.target.max_line_bytes,
                self.budget.clone(),
            ),
            opened_at,
            deadline: Box::pin(tokio::time::sleep_until(
                opened_at + server_timeout + WATCH_DEADLINE_MARGIN.min(self.target.watch_timeout),
            )),
            received_any: false,
            line_charge: Charge::none(),
        }
    }

    /// Reads and decodes the next line, waiting no longer than the watch's deadline.
    async fn next_line(w: &mut Watching, namespaced: bool) -> Read {
        let next = loop {
            tokio::select! {
                biased;
                next = w.stream.next_line() => break Ok(next),
                () = w.deadline.as_mut() => {
                    // Waiting for the byte budget is not a silent server: the deadline starts
                    // over.
                    if !w.stream.waiting_for_room() {
                        break Err(());
                    }
                    w.deadline.as_mut().reset(Instant::now() + WATCH_DEADLINE_MARGIN);
                }
            }
        };
        let mut line = match next {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => return Read::Ended,
            Err(_deadline) => {
                return Read::Lost(RestartReason::IdleTimeout, RestartError::IdleTimeout)
            }
            Ok(Err(e @ StreamError::Frame(_))) => {
                return Read::Lost(RestartReason::DecodeError, e.into())
            }
            Ok(Err(e @ StreamError::Transport(_))) => {
                return Read::Lost(RestartReason::Transport, e.into())
            }
            Ok(Err(e @ StreamError::BudgetSpent)) => {
                return Read::Lost(RestartReason::BufferFull, e.into())
            }
        };
        w.received_any = true;
        w.line_charge = std::mem::take(&mut line.charge);
        if let Some(line_bytes) = line.oversized {
            let change = decode_line_prefix(&line.bytes, namespaced);
            return Read::Oversized { change, line_bytes };
        }
        match decode_line(&line.bytes) {
            Ok(decoded) => Read::Line(decoded),
            Err(_) if !line.terminated => {
                let e = FrameError::Truncated {
                    leftover_bytes: line.bytes.len(),
                };
                Read::Lost(RestartReason::DecodeError, e.into())
            }
            Err(e) => Read::Lost(RestartReason::DecodeError, e.into()),
        }
    }

    /// One line of a streaming list's initial events. Anything that breaks the stream before
    /// the closing bookmark starts the list again.
    async fn read_initial_event(
        &mut self,
        reason: ListReason,
        mut w: Watching,
    ) -> (Outcome, State) {
        match Self::next_line(&mut w, self.target.resource.namespaced).await {
            Read::Line(WatchLine::Change(event)) if event.event_type == EventType::Added => (
                Outcome::ListPage {
                    started: None,
                    size_hint: None,
                    items: vec![event],
                    complete: None,
                },
                State::ReceivingInitialEvents {
                    reason,
                    watching: Box::new(w),
                },
            ),
            Read::Line(WatchLine::Bookmark {
                resource_version,
                initial_events_end: true,
            }) => {
                w.rv = resource_version.clone();
                (
                    Outcome::ListPage {
                        started: None,
                        size_hint: None,
                        items: Vec::new(),
                        complete: Some(resource_version),
                    },
                    State::Watching(Box::new(w)),
                )
            }
            Read::Line(WatchLine::Change(_) | WatchLine::Bookmark { .. }) => {
                self.streaming_unsupported(StreamingRefusal::LiveEventsFirst)
            }
            Read::Line(WatchLine::Error(status)) => {
                let relist = self.list(reason);
                self.error_event(status, relist)
            }
            // A paged list reads whole pages, without a line limit.
            Read::Oversized { line_bytes, .. } => Self::paged_list_now(
                RestartReason::LineTooLong,
                Verb::Watch,
                self.line_too_long(line_bytes),
                reason,
            ),
            Read::Ended => self.streaming_unsupported(StreamingRefusal::EndedEarly),
            Read::Lost(restart, error) => {
                let relist = self.list(reason);
                self.back_off(restart, Verb::Watch, error, None, relist)
            }
        }
    }

    /// One line of an open watch. A broken stream resumes from the last version after a pause.
    /// The watch stays in its box from one line to the next (re-boxing it cost an allocation
    /// and a copy per event).
    async fn read_event(&mut self, mut w: Box<Watching>) -> (Outcome, State) {
        match Self::next_line(&mut w, self.target.resource.namespaced).await {
            Read::Line(WatchLine::Change(event)) => {
                w.rv = event.meta.resource_version.clone();
                (Outcome::Event(event), State::Watching(w))
            }
            Read::Oversized {
                change: Some((event_type, meta)),
                line_bytes,
            } => {
                w.rv = meta.resource_version.clone();
                let event = ObjectEvent {
                    event_type,
                    meta,
                    object: Bytes::new(),
                    watch_line: None,
                };
                let outcome = Outcome::Oversized { event, line_bytes };
                (outcome, State::Watching(w))
            }
            // Resuming would receive the same line again: only a list can move past it.
            Read::Oversized {
                change: None,
                line_bytes,
            } => {
                let error = self.line_too_long(line_bytes);
                self.relist(RestartReason::LineTooLong, ListReason::LineTooLong, error)
            }
            Read::Line(WatchLine::Bookmark {
                resource_version, ..
            }) => {
                w.rv = resource_version.clone();
                (Outcome::Bookmark(resource_version), State::Watching(w))
            }
            Read::Line(WatchLine::Error(status)) => {
                self.error_event(status, State::Connecting { rv: w.rv })
            }
            Read::Ended => self.stream_ended(*w),
            // No pause: the watch reopens in turn once there is room (see `open_watch`).
            Read::Lost(reason @ RestartReason::BufferFull, error) => {
                self.resume_after_budget = true;
                let restart = Restart {
                    reason,
                    verb: Verb::Watch,
                    error: Some(error),
                    retry_in: None,
                };
                (Outcome::Restart(restart), State::Connecting { rv: w.rv })
            }
            Read::Lost(reason, error) => {
                let then = State::Connecting { rv: w.rv };
                self.back_off(reason, Verb::Watch, error, None, then)
            }
        }
    }

    fn line_too_long(&self, line_bytes: usize) -> RestartError {
        RestartError::LineTooLong {
            line_bytes,
            max_line_bytes: self.target.max_line_bytes,
        }
    }

    /// An ERROR event: a relist when the version is outside the server's history, else `then`
    /// after a pause.
    fn error_event(&mut self, status: Status, then: State) -> (Outcome, State) {
        if status.is_expired() {
            self.relist(
                RestartReason::Expired,
                ListReason::Expired,
                RestartError::Outdated(status),
            )
        } else if status.is_too_large_resource_version() {
            self.relist(
                RestartReason::TooLargeResourceVersion,
                ListReason::TooLargeResourceVersion,
                RestartError::Outdated(status),
            )
        } else {
            let error = RestartError::ErrorEvent(status);
            self.back_off(RestartReason::ErrorEvent, Verb::Watch, error, None, then)
        }
    }

    /// The server closed the body cleanly.
    fn stream_ended(&mut self, w: Watching) -> (Outcome, State) {
        self.recheck_version = self.target.follow.is_some();
        if !w.received_any && w.opened_at.elapsed() < VERY_SHORT_WATCH {
            let then = State::Connecting { rv: w.rv };
            return self.back_off(
                RestartReason::VeryShortWatch,
                Verb::Watch,
                RestartError::VeryShortWatch,
                None,
                then,
            );
        }
        let restart = Restart {
            reason: RestartReason::StreamEnded,
            verb: Verb::Watch,
            error: None,
            retry_in: None,
        };
        (Outcome::Restart(restart), State::Connecting { rv: w.rv })
    }

    /// The watch cannot go on from its version (outside the history, ahead of the server, or a
    /// line too long to name its object): a list, after a pause.
    fn relist(
        &mut self,
        reason: RestartReason,
        list_reason: ListReason,
        error: RestartError,
    ) -> (Outcome, State) {
        let then = self.list(list_reason);
        self.back_off(reason, Verb::Watch, error, None, then)
    }

    /// Maps a failed request to the next state: a relist for an outdated watch version, else
    /// `retry` after a pause (the server's `Retry-After`, where it sent one).
    async fn failed(&mut self, verb: Verb, error: ApiError, retry: State) -> (Outcome, State) {
        if let ApiError::NotFound { .. } = error {
            return self.not_found(verb, error, retry).await;
        }
        if self.metadata_only && matches!(error, ApiError::Status { code: 406, .. }) {
            self.metadata_only = false;
            let restart = Restart {
                reason: RestartReason::UnexpectedResponse,
                verb,
                error: Some(RestartError::MetadataRefused(error)),
                retry_in: None,
            };
            return (Outcome::Restart(restart), retry);
        }
        let retry_after = match &error {
            ApiError::Throttled { retry_after } | ApiError::ServerError { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        };
        let reason = match &error {
            ApiError::Gone { .. } => RestartReason::Expired,
            ApiError::TooLargeResourceVersion { .. } => RestartReason::TooLargeResourceVersion,
            ApiError::Throttled { .. } => RestartReason::Throttled,
            ApiError::ServerError { .. } => RestartReason::ServerError,
            ApiError::Unauthorized | ApiError::Credentials(_) => RestartReason::Unauthorized,
            ApiError::Forbidden { .. } => RestartReason::Forbidden,
            ApiError::Transport(_) => RestartReason::Transport,
            ApiError::NotFound { .. } | ApiError::Status { .. } | ApiError::UnexpectedBody(_) => {
                RestartReason::UnexpectedResponse
            }
        };
        let error = RestartError::Api(error);
        match (reason, verb) {
            (RestartReason::Expired, Verb::Watch) => {
                self.relist(reason, ListReason::Expired, error)
            }
            (RestartReason::TooLargeResourceVersion, Verb::Watch) => {
                self.relist(reason, ListReason::TooLargeResourceVersion, error)
            }
            // A list does not ask for a version, so neither can be outdated there.
            (RestartReason::Expired | RestartReason::TooLargeResourceVersion, _) => {
                self.back_off(RestartReason::UnexpectedResponse, verb, error, None, retry)
            }
            _ => self.back_off(reason, verb, error, retry_after, retry),
        }
    }

    /// The collection is not found: the resource is not served (its CRD deleted with every
    /// object, or not installed yet; docs/troubleshooting.md). Every request is on the
    /// collection's path, where kube-apiserver answers 404 for nothing else. A list follows
    /// after a pause, until one succeeds: the resource is served again, and that list announces
    /// what it holds.
    fn not_served(&mut self, error: ApiError) -> (Outcome, State) {
        let first = self.unserved.is_none();
        let retry_in = self
            .unserved
            .get_or_insert_with(|| Backoff::new(UNSERVED_BACKOFF))
            .next_delay();
        if let Some(served) = &self.served {
            served.set(0);
        }
        let outcome = match first {
            true => Outcome::Unserved(Unserved { error, retry_in }),
            false => Outcome::Idle,
        };
        let then = Box::new(self.list(ListReason::Initial));
        (
            outcome,
            State::Backoff {
                delay: retry_in,
                then,
            },
        )
    }

    /// A request on the collection succeeded: it is served (again).
    fn served_again(&mut self) {
        self.discovery_lag = 0;
        if self.unserved.take().is_some() {
            if let Some(served) = &self.served {
                served.set(1);
            }
        }
    }

    fn back_off(
        &mut self,
        reason: RestartReason,
        verb: Verb,
        error: RestartError,
        retry_after: Option<Duration>,
        then: State,
    ) -> (Outcome, State) {
        let delay = self.backoff.next_delay_with_hint(retry_after);
        let restart = Restart {
            reason,
            verb,
            error: Some(error),
            retry_in: Some(delay),
        };
        (
            Outcome::Restart(restart),
            State::Backoff {
                delay,
                then: Box::new(then),
            },
        )
    }

    /// `timeoutSeconds` for the next watch: whole seconds, uniform in [T, 2T).
    fn server_timeout(&self) -> Duration {
        let t = self.target.watch_timeout.as_secs().max(1);
        Duration::from_secs(rand::rng().random_range(t..2 * t))
    }

    fn add_selectors<'a>(&'a self, query: &mut Vec<(&'a str, &'a str)>) {
        if let Some(labels) = &self.target.label_selector {
            query.push(("labelSelector", labels));
        }
        if let Some(fields) = &self.target.field_selector {
            query.push(("fieldSelector", fields));
        }
    }
}

#[cfg(test)]
mod tests;
