//! The Kubernetes `Status` object: how the API server explains a failure, both as an HTTP error
//! body and inside a watch stream as an `ERROR` event.

use serde::Deserialize;

/// The parts of a `metav1.Status` that kube2nats branches on or logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Status {
    pub(crate) code: u16,
    pub(crate) reason: String,
    pub(crate) message: String,
    pub(crate) details: Option<StatusDetails>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct StatusDetails {
    pub(crate) causes: Vec<StatusCause>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct StatusCause {
    pub(crate) reason: String,
    pub(crate) message: String,
}

impl Status {
    /// Parses a Status body; anything else (an HTML page from a proxy, say) gives `None`.
    pub(crate) fn from_body(body: &[u8]) -> Option<Status> {
        #[derive(Deserialize)]
        struct Kind<'a> {
            kind: Option<&'a str>,
        }
        match serde_json::from_slice::<Kind>(body) {
            Ok(Kind {
                kind: Some("Status"),
            }) => serde_json::from_slice(body).ok(),
            _ => None,
        }
    }

    /// 410 Gone, reason `Expired` (or `Gone` on old servers): the requested version is no longer
    /// in the server's history; only a fresh list can continue.
    pub(crate) fn is_expired(&self) -> bool {
        self.code == 410 || self.reason == "Expired" || self.reason == "Gone"
    }

    /// A 504 whose cause is `ResourceVersionTooLarge`: the server (say, a lagging replica after a
    /// fail-over) has not yet seen the requested version.
    pub(crate) fn is_too_large_resource_version(&self) -> bool {
        self.details.as_ref().is_some_and(|d| {
            d.causes
                .iter()
                .any(|c| c.reason == "ResourceVersionTooLarge")
        }) || self.message.contains("Too large resource version")
    }
}
