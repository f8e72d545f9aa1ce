//! The NATS side: subjects, headers and payloads, and publishing to core NATS or JetStream with
//! backpressure and retries.

pub(crate) mod cloudevents;
pub(crate) mod connect;
pub(crate) mod header_block;
pub(crate) mod message;
pub(crate) mod metrics;
pub(crate) mod outbox;

pub(crate) use message::{MessageBuilder, MessageSpec, OutMessage};
pub(crate) use outbox::{Nats, Outbox, OutboxParts};
