//! The bucket's answers to one writer's writes (docs/mirror.md, "Exactly in step").
//!
//! Each write is published with a reply subject of the writer's own, `{inbox}.{token}`, and the
//! answers are read from one subscription to `{inbox}.*`, matched to their writes by token. A
//! JetStream request future per write would cost a fresh inbox, a oneshot channel, a timer and
//! a boxed future apiece (docs/performance.md, "Mirror"). One timer, ticking once a second, lets
//! the writer fail the writes whose answer is overdue.

use std::borrow::Cow;
use std::time::Duration;

use async_nats::jetstream::ErrorCode;
use async_nats::{StatusCode, Subject};
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::time::{Interval, MissedTickBehavior};

use crate::backoff::{Backoff, NATS_WRITE_RETRY};
use crate::telemetry::logging::human;

/// The bucket's answer to one write.
#[derive(Debug, PartialEq)]
pub(super) enum Outcome {
    /// Stored: the key's revision now.
    Stored(u64),
    /// Refused: the key is not at the revision the write expected.
    Fenced,
    /// Not stored: the bucket said why.
    Failed(String),
    /// No answer within [`Acks::timeout`]: lost with a connection, or not made.
    Unanswered,
}

/// Where the bucket's answers to one writer's writes arrive.
pub(super) struct Acks {
    subscriber: async_nats::Subscriber,
    /// `{inbox}.`
    prefix: String,
    next_token: u64,
    /// How long an answer may take; checked once a second by `watchdog`.
    timeout: Duration,
    watchdog: Interval,
}

/// How often overdue answers are looked for.
const WATCHDOG_PERIOD: Duration = Duration::from_secs(1);

/// What [`Acks::next`] found.
pub(super) enum Answer {
    /// The answer to the write sent with this token.
    Ack(u64, Outcome),
    /// The watchdog's turn: time to look for overdue answers.
    Watchdog,
}

impl Acks {
    /// Subscribes to a fresh inbox of `client` (retried until the subscription is made); answers
    /// may take up to `timeout`.
    pub(super) async fn subscribe(
        client: &async_nats::Client,
        watch: &str,
        timeout: Duration,
    ) -> Acks {
        let mut retry = Backoff::new(NATS_WRITE_RETRY);
        let inbox = client.new_inbox();
        let subscriber = loop {
            match client.subscribe(format!("{inbox}.*")).await {
                Ok(subscriber) => break subscriber,
                Err(e) => {
                    let delay = retry.next_delay();
                    tracing::warn!(watch = %watch, error = %e, retry_in = human(delay), "subscribing to the mirror's acknowledgements failed; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        };
        let mut watchdog = tokio::time::interval(WATCHDOG_PERIOD);
        watchdog.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Acks {
            subscriber,
            prefix: format!("{inbox}."),
            next_token: 0,
            timeout,
            watchdog,
        }
    }

    /// How long an answer may take.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A token for the next write, and the reply subject its answer goes to.
    pub(super) fn next_reply(&mut self) -> (u64, Subject) {
        let token = self.next_token;
        self.next_token += 1;
        (token, reply_subject(&self.prefix, token))
    }

    /// The next answer, or the watchdog's tick. A subscription that ended (the client is gone:
    /// kube2nats is stopping) leaves the watchdog, which lets the writer fail what is in
    /// flight. Cancel-safe.
    pub(super) async fn next(&mut self) -> Answer {
        loop {
            let message = tokio::select! {
                biased;
                Some(message) = self.subscriber.next() => message,
                _ = self.watchdog.tick() => return Answer::Watchdog,
            };
            if let Some((token, outcome)) = read_ack(&self.prefix, &message) {
                return Answer::Ack(token, outcome);
            }
        }
    }
}

/// `{prefix}{token}`: where the answer to the write sent with `token` goes.
fn reply_subject(prefix: &str, token: u64) -> Subject {
    let mut digits = [0u8; 20];
    let mut subject = String::with_capacity(prefix.len() + digits.len());
    subject.push_str(prefix);
    subject.push_str(decimal(token, &mut digits));
    Subject::from(subject)
}

/// `n` in decimal, written into `digits` without an allocation.
pub(super) fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &str {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&digits[at..]).unwrap_or("0")
}

/// The token of an answer on the acknowledgements' subscription and what it says; `None` for a
/// message that is not one (its subject carries no token).
fn read_ack(prefix: &str, message: &async_nats::Message) -> Option<(u64, Outcome)> {
    let token = message.subject.strip_prefix(prefix)?.parse().ok()?;
    Some((token, outcome(message)))
}

/// A JetStream publish acknowledgement (`{"stream":…,"seq":…}`) or its error
/// (`{"error":{"err_code":…,"description":…}}`), read without copying the stream's name.
#[derive(Deserialize)]
struct AckBody<'a> {
    seq: Option<u64>,
    #[serde(borrow)]
    error: Option<AckError<'a>>,
}

#[derive(Deserialize)]
struct AckError<'a> {
    #[serde(default)]
    err_code: u64,
    #[serde(borrow, default)]
    description: Cow<'a, str>,
}

fn outcome(message: &async_nats::Message) -> Outcome {
    if message.status == Some(StatusCode::NO_RESPONDERS) {
        return Outcome::Failed("no stream answers for the bucket's subjects".to_owned());
    }
    match serde_json::from_slice::<AckBody>(&message.payload) {
        Ok(AckBody {
            error: Some(error), ..
        }) if ErrorCode(error.err_code) == ErrorCode::STREAM_WRONG_LAST_SEQUENCE => Outcome::Fenced,
        Ok(AckBody {
            error: Some(error), ..
        }) => Outcome::Failed(format!("{} (error {})", error.description, error.err_code)),
        Ok(AckBody { seq: Some(seq), .. }) => Outcome::Stored(seq),
        Ok(AckBody { .. }) | Err(_) => Outcome::Failed(format!(
            "unreadable acknowledgement: {}",
            String::from_utf8_lossy(&message.payload)
        )),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn answer(subject: &str, payload: &str, status: Option<StatusCode>) -> async_nats::Message {
        async_nats::Message {
            subject: subject.into(),
            reply: None,
            payload: Bytes::copy_from_slice(payload.as_bytes()),
            headers: None,
            status,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn answers_are_matched_by_token_and_read_as_the_bucket_meant_them() {
        let prefix = "_INBOX.abc.";
        assert_eq!(reply_subject(prefix, 0).as_str(), "_INBOX.abc.0");
        assert_eq!(
            reply_subject(prefix, u64::MAX).as_str(),
            "_INBOX.abc.18446744073709551615"
        );
        let read = |subject: &str, payload: &str| read_ack(prefix, &answer(subject, payload, None));
        assert_eq!(
            read("_INBOX.abc.7", r#"{"stream":"KV_objects","seq":42}"#),
            Some((7, Outcome::Stored(42)))
        );
        assert_eq!(
            read(
                "_INBOX.abc.8",
                r#"{"stream":"KV_objects","domain":"hub","seq":43,"duplicate":true}"#
            ),
            Some((8, Outcome::Stored(43)))
        );
        assert_eq!(
            read(
                "_INBOX.abc.9",
                r#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}"#
            ),
            Some((9, Outcome::Fenced))
        );
        assert_eq!(
            read(
                "_INBOX.abc.10",
                r#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}"#
            ),
            Some((
                10,
                Outcome::Failed("maximum messages exceeded (error 10077)".into())
            ))
        );
        assert!(matches!(
            read("_INBOX.abc.11", "not json"),
            Some((11, Outcome::Failed(_)))
        ));
        assert_eq!(read("_INBOX.other.7", r#"{"seq":1}"#), None, "not ours");
        assert_eq!(read("_INBOX.abc.x", r#"{"seq":1}"#), None, "no token");
        assert!(matches!(
            read_ack(
                prefix,
                &answer("_INBOX.abc.12", "", Some(StatusCode::NO_RESPONDERS))
            ),
            Some((12, Outcome::Failed(_)))
        ));
    }
}
