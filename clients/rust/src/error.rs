//! What can go wrong reading the mirror or the event stream. Every error is retryable: the
//! watcher and the event stream start again by themselves after a pause, and the caller sees each
//! error as an item of the stream (a watcher's as kube-runtime's `watcher::Error`, so that
//! `reflector` and `Controller` take it as they take the API server's).

use std::time::Duration;

/// A boxed error of the NATS client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error of the watcher or the event stream, each retried by the stream itself.
///
/// ```
/// let e = kube2nats_client::Error::Key("pods.web-0".into());
/// assert_eq!(e.to_string(), "pods.web-0: not a key of the mirror's contract");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The watch or consumer could not be opened: no JetStream yet after a NATS restart, no
    /// such bucket or stream, a timeout.
    #[error("opening {what}: {source}")]
    Open {
        /// The stream or consumer.
        what: String,
        /// The NATS client's error.
        source: BoxError,
    },
    /// A watch that still expected initial values received none for this long: NATS went away
    /// while it began.
    #[error("no initial value for {0:?}")]
    InitialValuesStalled(Duration),
    /// The watch or consumer failed, or ended, while it was followed.
    #[error("following {what}: {source}")]
    Follow {
        /// The stream or consumer.
        what: String,
        /// The NATS client's error.
        source: BoxError,
    },
    /// A value of the bucket or an event's payload is not the resource's JSON. The entry is
    /// skipped; the stream goes on.
    #[error("{subject}: not a {kind}: {source}")]
    Decode {
        /// The key, or the event's subject.
        subject: String,
        /// The resource's kind.
        kind: String,
        /// Why it did not parse.
        source: serde_json::Error,
    },
    /// A key under the watch's filter that no object's key can be (the key contract).
    #[error("{0}: not a key of the mirror's contract")]
    Key(String),
    /// An event message without a `Kube-Event-Type` header kube2nats always sets.
    #[error("{0}: no Kube-Event-Type header")]
    NoEventType(String),
    /// Acknowledging an event failed: it will be delivered again.
    #[error("acknowledging {subject}: {source}")]
    Ack {
        /// The event's subject.
        subject: String,
        /// The NATS client's error.
        source: BoxError,
    },
}

impl Error {
    pub(crate) fn open(what: impl Into<String>, source: impl Into<BoxError>) -> Error {
        Error::Open {
            what: what.into(),
            source: source.into(),
        }
    }

    pub(crate) fn follow(what: impl Into<String>, source: impl Into<BoxError>) -> Error {
        Error::Follow {
            what: what.into(),
            source: source.into(),
        }
    }

    /// As kube-runtime's watcher reports it: a failure to begin is `WatchStartFailed`, the rest
    /// `WatchFailed`.
    pub(crate) fn into_watcher_error(self) -> kube::runtime::watcher::Error {
        use kube::runtime::watcher::Error as W;
        let starting = matches!(self, Error::Open { .. } | Error::InitialValuesStalled(_));
        let inner = kube::Error::Service(Box::new(self));
        if starting {
            W::WatchStartFailed(inner)
        } else {
            W::WatchFailed(inner)
        }
    }
}
