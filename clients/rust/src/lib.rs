//! Subscriber kit of kube2nats for Rust: kube-runtime's `watcher`, fed from kube2nats' object
//! mirror (a NATS key-value bucket) instead of the API server, and kube2nats' event stream through
//! a durable JetStream consumer.
//!
//! - [`watcher`]: the current objects, then each change, as `kube::runtime::watcher::Event`s: a
//!   `reflector` store, a `Controller` (`Controller::for_stream`) or any `WatchStreamExt`
//!   adapter takes it as it takes the API server's watcher, while the API server serves
//!   kube2nats' one list and watch however many subscribers run.
//! - [`events`]: every change, each once, in order per object, resuming after a restart of the
//!   subscriber where it stopped: a durable consumer on kube2nats' event stream.
//! - [`key`]: the key contract of the mirror and the tokens of the event subjects.
//!
//! Which to read: docs/subscribers.md in the kube2nats repository, "Read the bucket, or follow
//! the stream?".

#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backoff;
mod cache;
mod entry;
mod error;
pub mod events;
pub mod key;
mod watcher;

pub use error::{BoxError, Error};
pub use events::{events, events_with, Change, ChangeType, EventsConfig};
pub use watcher::{watcher, watcher_with, Config};
