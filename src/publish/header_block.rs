//! What every header block is built with: the one way a header is appended, and the error of a
//! message that cannot be built. Native headers ([`super::message`]) and CloudEvents attributes
//! ([`super::cloudevents`]) both sit on it, so neither depends on the other for it.

use async_nats::header::SerializedHeadersBuilder;
use async_nats::HeaderName;

/// The longest subject kube2nats publishes: nats-server's default `max_control_line` (4096 bytes)
/// less room for the rest of an `HPUB` line (verb, a JetStream reply inbox, two sizes).
pub const MAX_SUBJECT_BYTES: usize = 3840;

/// Why an event cannot become a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("subject of {bytes} bytes exceeds the limit of {MAX_SUBJECT_BYTES} (nats-server's max_control_line)")]
    SubjectTooLong { bytes: usize },
    /// Cannot happen: every value passes [`header_value`] first; kept as an error rather than a
    /// panic on data from outside.
    #[error("header {name} has a value NATS refuses")]
    HeaderValue { name: String },
}

/// Appends `name: value` to a header block; `value` must already be fit for NATS.
pub(crate) fn append_header(
    block: &mut SerializedHeadersBuilder,
    name: &HeaderName,
    value: &str,
) -> Result<(), BuildError> {
    match block.append(name, value) {
        Ok(_) => Ok(()),
        Err(_) => Err(BuildError::HeaderValue {
            name: name.to_string(),
        }),
    }
}
