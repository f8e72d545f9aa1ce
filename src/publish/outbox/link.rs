//! The NATS calls the outboxes make, as two small traits: so the rules of each outbox run in
//! unit tests against a fake whose publishes, flushes and acknowledgements the test completes
//! (in any order, or with a failure), and at run time against the real client, with no vtable.

use std::future::Future;
use std::pin::Pin;

use async_nats::client::{FlushError, PublishError};
use async_nats::connection::State;
use async_nats::jetstream;
use async_nats::jetstream::publish::PublishAck;
use async_nats::Client;

use crate::publish::message::OutMessage;

/// A JetStream acknowledgement being awaited (its timeout starts at the first wait).
pub(crate) type Ack =
    Pin<Box<dyn Future<Output = Result<PublishAck, jetstream::context::PublishError>> + Send>>;

/// Core NATS as the core outbox uses it.
pub(crate) trait CoreLink {
    /// Hands one message to the client, which queues it for its connection.
    fn publish(&self, msg: &OutMessage) -> impl Future<Output = Result<(), PublishError>>;
    /// A flush round trip: once it returns, every message handed over before it began is on
    /// the server. Owns what it needs, so it can outlive the call that started it.
    fn flush(&self) -> impl Future<Output = Result<(), FlushError>> + Send + 'static;
    fn connected(&self) -> bool;
    /// The server's `max_payload`; 0 before the first connection has told.
    fn max_payload(&self) -> usize;
}

/// JetStream as its outbox uses it.
pub(crate) trait JetStreamLink {
    /// Sends one publish; once the client has taken it, its acknowledgement to await.
    fn send(
        &self,
        msg: &OutMessage,
    ) -> impl Future<Output = Result<Ack, jetstream::context::PublishError>>;
    fn connected(&self) -> bool;
    /// The server's `max_payload`; 0 before the first connection has told.
    fn max_payload(&self) -> usize;
}

impl CoreLink for Client {
    fn publish(&self, msg: &OutMessage) -> impl Future<Output = Result<(), PublishError>> {
        // Clones share the message's bytes.
        self.publish_with_serialized_headers(
            msg.subject.clone(),
            msg.headers.clone(),
            msg.payload.clone(),
        )
    }

    fn flush(&self) -> impl Future<Output = Result<(), FlushError>> + Send + 'static {
        let client = self.clone();
        async move { client.flush().await }
    }

    fn connected(&self) -> bool {
        self.connection_state() == State::Connected
    }

    fn max_payload(&self) -> usize {
        Client::max_payload(self)
    }
}

/// The client and its JetStream context.
pub(crate) struct JetStreamClient {
    pub(crate) client: Client,
    /// Boxed: a JetStream context is several times the size of a client.
    pub(crate) context: Box<jetstream::Context>,
}

impl JetStreamLink for JetStreamClient {
    async fn send(&self, msg: &OutMessage) -> Result<Ack, jetstream::context::PublishError> {
        let publish = jetstream::message::PublishMessage::build()
            .payload(msg.payload.clone())
            .serialized_headers(msg.headers.clone());
        let ack = self
            .context
            .send_publish(msg.subject.clone(), publish)
            .await?;
        Ok(std::future::IntoFuture::into_future(ack))
    }

    fn connected(&self) -> bool {
        self.client.connection_state() == State::Connected
    }

    fn max_payload(&self) -> usize {
        self.client.max_payload()
    }
}
