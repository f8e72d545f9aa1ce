//! The Kubernetes `Status` object: how the API server explains a failure, both as an HTTP error
//! body and inside a watch stream as an `ERROR` event.

use serde::Deserialize;

/// The parts of a `metav1.Status` that kube2nats branches on or logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Status {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<StatusDetails>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct StatusDetails {
    pub causes: Vec<StatusCause>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct StatusCause {
    pub reason: String,
    pub message: String,
}

impl Status {
    /// Parses a Status body; anything else (an HTML page from a proxy, say) gives `None`.
    pub fn from_body(body: &[u8]) -> Option<Status> {
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
    pub fn is_expired(&self) -> bool {
        self.code == 410 || self.reason == "Expired" || self.reason == "Gone"
    }

    /// A 504 whose cause is `ResourceVersionTooLarge`: the server (say, a lagging replica after a
    /// fail-over) has not yet seen the requested version.
    pub fn is_too_large_resource_version(&self) -> bool {
        self.details.as_ref().is_some_and(|d| {
            d.causes
                .iter()
                .any(|c| c.reason == "ResourceVersionTooLarge")
        }) || self.message.contains("Too large resource version")
    }
}
