//! The NATS side: subjects, headers and payloads, and publishing to core NATS or JetStream.

pub mod subject;
