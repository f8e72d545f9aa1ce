//! The NATS side: subjects, headers and payloads, and publishing to core NATS or JetStream with
//! backpressure and retries.

pub mod cloudevents;
pub mod connect;
pub mod header_block;
pub mod message;
pub mod metrics;
pub mod outbox;

pub use message::{MessageBuilder, MessageSpec, OutMessage};
pub use outbox::{Nats, Outbox};
