//! Why a watch restarts, lists again or moves to another version: the reasons the metrics label, and the errors the log
//! names. The state machine ([`super::machine`]) produces them; the driver counts and logs them.

use std::time::Duration;

use crate::event::{ResourceInfo, ResourceVersion};
use crate::kube::client::Verb;
use crate::kube::decode::DecodeError;
use crate::kube::discovery::DiscoveryError;
use crate::kube::framing::FrameError;
use crate::kube::status::Status;
use crate::kube::stream::StreamError;
use crate::kube::ApiError;

/// The watch moved from one version of its resource to another.
#[derive(Debug)]
pub(crate) struct VersionMove {
    pub(crate) from: ResourceInfo,
    pub(crate) to: ResourceInfo,
    /// Where the watch resumes, when it was watching (a list starts over instead).
    pub(crate) resume: Option<ResourceVersion>,
}

/// Why a list starts; the `reason` label of `relists_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListReason {
    Initial,
    /// The watch's version fell out of the server's history (410 Expired / Gone).
    Expired,
    /// The server has not caught up with the watch's version (a lagging replica after fail-over).
    TooLargeResourceVersion,
    /// The `continue` token of a paged list expired between two pages.
    ContinueExpired,
    /// The server does not support streaming lists; a paged list replaces it.
    StreamingUnsupported,
    /// A watch line over `max_line_bytes` did not show which object changed: only a list (whose
    /// pages have no line limit) can tell.
    LineTooLong,
    /// The namespaces matching the watch's `namespace_selector` changed (or state was loaded):
    /// the list is diffed against the memory under the new scope.
    NamespaceScope,
    /// Saved state was loaded for a mirrored watch, or a mirrored watch moved to another version
    /// of its resource: the list repairs the mirror bucket.
    Mirror,
}

impl ListReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ListReason::Initial => "initial",
            ListReason::Expired => "expired",
            ListReason::TooLargeResourceVersion => "too_large_resource_version",
            ListReason::ContinueExpired => "continue_expired",
            ListReason::StreamingUnsupported => "streaming_unsupported",
            ListReason::LineTooLong => "line_too_long",
            ListReason::NamespaceScope => "namespace_scope",
            ListReason::Mirror => "mirror",
        }
    }
}

/// Why a watch (or a list request) ended or failed; the `reason` label of `watch_restarts_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartReason {
    /// The server ended the body cleanly (its `timeoutSeconds`, or a restart): resume, no relist.
    StreamEnded,
    /// Ended within a second and without a line: resume after a backoff.
    VeryShortWatch,
    /// Nothing arrived by the client-side deadline: a half-open connection.
    IdleTimeout,
    Expired,
    TooLargeResourceVersion,
    /// 429: resume after `Retry-After`.
    Throttled,
    /// 5xx (or no response headers in time).
    ServerError,
    /// 401, or no credentials to send: the token is re-read (the plugin re-run) before the retry.
    Unauthorized,
    /// 403: RBAC refuses; retried with capped backoff until someone fixes the Role.
    Forbidden,
    /// Connection refused, reset, TLS failure.
    Transport,
    /// A malformed or truncated line.
    DecodeError,
    /// A line over `max_line_bytes` whose first bytes do not say which object changed.
    LineTooLong,
    /// The byte budget could not take what arrived: reopened from the last version in turn,
    /// once there is room ([`crate::budget`]).
    BufferFull,
    /// An ERROR event other than 410 inside the stream.
    ErrorEvent,
    /// A response kube2nats cannot use (a 4xx other than 404, which means the resource is not
    /// served: [`super::machine::Outcome::Unserved`]; a non-JSON body).
    UnexpectedResponse,
}

impl RestartReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RestartReason::StreamEnded => "stream_ended",
            RestartReason::VeryShortWatch => "very_short_watch",
            RestartReason::IdleTimeout => "idle_timeout",
            RestartReason::Expired => "expired",
            RestartReason::TooLargeResourceVersion => "too_large_resource_version",
            RestartReason::Throttled => "throttled",
            RestartReason::ServerError => "server_error",
            RestartReason::Unauthorized => "unauthorized",
            RestartReason::Forbidden => "forbidden",
            RestartReason::Transport => "transport",
            RestartReason::DecodeError => "decode_error",
            RestartReason::LineTooLong => "line_too_long",
            RestartReason::BufferFull => "buffer_full",
            RestartReason::ErrorEvent => "error_event",
            RestartReason::UnexpectedResponse => "unexpected_response",
        }
    }
}

/// A restart, with what the driver needs to log it.
#[derive(Debug)]
pub(crate) struct Restart {
    pub(crate) reason: RestartReason,
    /// The request that failed or ended: a list page, or the watch (a streaming list's too).
    pub(crate) verb: Verb,
    /// What went wrong; `None` for a watch the server ended cleanly.
    pub(crate) error: Option<RestartError>,
    /// The pause before the next attempt.
    pub(crate) retry_in: Option<Duration>,
}

/// What ended a watch or failed a list, kept typed until the driver logs it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestartError {
    /// A request failed: an error status, or the transport.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The open watch broke off, or sent a line longer than the limit.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The body ended inside a line that does not decode.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A line that is not a watch event.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A list page that is not a list. The start of the body says what answered (a proxy's HTML
    /// page, an empty body), which the JSON error alone ("expected value at line 1 column 1")
    /// does not show.
    #[error("{}; the body starts with {excerpt:?}", not_a_list(.cause))]
    NotAList { cause: DecodeError, excerpt: String },
    /// The `continue` token of a paged list expired; the server's message.
    #[error("{0}")]
    ContinueExpired(String),
    /// An ERROR event saying the watch's version is outside the server's history; its message
    /// names the version.
    #[error("{}", .0.message)]
    Outdated(Status),
    /// Any other ERROR event.
    #[error("{} ({}): {}", .0.code, .0.reason, .0.message)]
    ErrorEvent(Status),
    #[error("no data before the watch deadline: connection presumed half-open")]
    IdleTimeout,
    #[error("watch ended within a second without a line")]
    VeryShortWatch,
    #[error("watch line of {line_bytes} bytes, over max_line_bytes ({max_line_bytes}), without the object's metadata in its first bytes")]
    LineTooLong {
        line_bytes: usize,
        max_line_bytes: usize,
    },
    #[error("streaming list not usable, falling back to paged lists: {0}")]
    StreamingUnsupported(StreamingRefusal),
    /// The version watched answered 404 and asking discovery where the resource went failed.
    #[error("the resource's version answered 404 and its group's discovery failed: {0}")]
    Discovery(DiscoveryError),
    /// The version watched answered 404 while discovery still lists it (catching up with a CRD
    /// change): asked again before the resource is taken as no longer served.
    #[error("the resource's version answered 404 but discovery still lists it; asking again: {0}")]
    DiscoveryBehind(ApiError),
    /// 406 to a request for PartialObjectMetadata: full objects are asked for from now on.
    #[error("the server refused PartialObjectMetadata: {0}")]
    MetadataRefused(ApiError),
}

fn not_a_list(cause: &DecodeError) -> String {
    match cause {
        DecodeError::Malformed(json) => format!("not a JSON list ({json})"),
        other => other.to_string(),
    }
}

/// How a server shows that it cannot serve streaming lists.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamingRefusal {
    /// 400/422 from servers that know the parameter but have the feature off.
    #[error(transparent)]
    Rejected(ApiError),
    /// Initial events are all ADDED and end with the annotated bookmark; anything else means the
    /// server ignored `sendInitialEvents` (servers before 1.27 do).
    #[error("the server sent live events before the initial-events-end bookmark")]
    LiveEventsFirst,
    #[error("the stream ended before the initial-events-end bookmark")]
    EndedEarly,
}
