//! What can go wrong talking to the API server, as the watch state machine needs to tell it apart.
//!
//! Each variant is one row of the edge-case table in docs/design.md: the watcher's `match` on an
//! [`ApiError`] decides between resuming, relisting and backing off.

use std::time::Duration;

use super::status::Status;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// 410: the version asked for (or a `continue` token) is older than the server's history.
    #[error("resource version expired: {message}")]
    Gone { message: String },
    /// 504 with cause `ResourceVersionTooLarge`: the server has not caught up with the version asked for.
    #[error("resource version too large: {message}")]
    TooLargeResourceVersion { message: String },
    /// 429: the server (API priority and fairness) asks us to slow down.
    #[error("throttled by the API server (429)")]
    Throttled { retry_after: Option<Duration> },
    /// 5xx: the server (or a proxy) failed; worth retrying after a pause.
    #[error("API server error {code}: {message}")]
    ServerError {
        code: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// 401: the token is missing, wrong or expired.
    #[error("unauthorized (401): the API server rejected the credentials")]
    Unauthorized,
    /// 403: RBAC refuses the request.
    #[error("forbidden (403): {message}")]
    Forbidden { message: String },
    #[error("not found (404): {message}")]
    NotFound { message: String },
    /// Any other status.
    #[error("unexpected response {code}: {message}")]
    Status { code: u16, message: String },
    /// A 2xx response whose body is not what the API returns (an HTML page from a proxy, say).
    #[error("unexpected response body: {0}")]
    UnexpectedBody(String),
    /// No credentials to send: the token file is unreadable, or the exec plugin failed. Not sent.
    #[error("no credentials for the API server: {0}")]
    Credentials(#[source] super::credentials::CredentialsError),
    /// Connection refused or reset, TLS failure, request timeout.
    #[error("request failed: {}", with_causes(.0))]
    Transport(#[source] reqwest::Error),
}

/// `error` followed by its causes, `: `-separated. reqwest's own message names only the URL
/// ("error sending request for url (…)"); what an operator must act on — `Connection refused`,
/// `connection reset`, `invalid peer certificate: UnknownIssuer` — is in the sources, and a log
/// line shows only `Display`: without the causes a TLS failure would log no hint of TLS.
pub(crate) fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Wrappers often repeat their inner error's message; say each thing once.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl ApiError {
    /// Classifies a non-success response from its status, headers and body.
    pub(crate) fn from_response(code: u16, retry_after: Option<Duration>, body: &[u8]) -> ApiError {
        let status = Status::from_body(body);
        let message = match &status {
            Some(s) if !s.message.is_empty() => s.message.clone(),
            _ => body_excerpt(body),
        };
        if status
            .as_ref()
            .is_some_and(Status::is_too_large_resource_version)
        {
            return ApiError::TooLargeResourceVersion { message };
        }
        match code {
            410 => ApiError::Gone { message },
            429 => ApiError::Throttled { retry_after },
            401 => ApiError::Unauthorized,
            403 => ApiError::Forbidden { message },
            404 => ApiError::NotFound { message },
            500..=599 => ApiError::ServerError {
                code,
                message,
                retry_after,
            },
            _ => ApiError::Status { code, message },
        }
    }
}

/// The start of a body, for error messages: enough to recognise an HTML error page.
pub(crate) fn body_excerpt(body: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX)]);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if body.len() > MAX {
        format!("{text}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_statuses() {
        let too_large = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 20, current: 10","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}]},"code":504}"#;
        assert!(matches!(
            ApiError::from_response(504, None, too_large),
            ApiError::TooLargeResourceVersion { .. }
        ));
        let gone =
            br#"{"kind":"Status","code":410,"reason":"Expired","message":"continue too old"}"#;
        assert!(
            matches!(ApiError::from_response(410, None, gone), ApiError::Gone { message } if message == "continue too old")
        );
        let e = ApiError::from_response(
            503,
            Some(Duration::from_secs(3)),
            b"<html><body>Service Unavailable</body></html>",
        );
        assert!(
            matches!(e, ApiError::ServerError { code: 503, retry_after: Some(_), ref message } if message.contains("Service Unavailable"))
        );
        assert!(matches!(
            ApiError::from_response(429, None, b""),
            ApiError::Throttled { .. }
        ));
    }

    /// An error's causes are part of its message, each said once.
    #[test]
    fn causes_are_shown_once() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<Box<Layer>>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|l| l as _)
            }
        }
        let tls = Layer("invalid peer certificate: UnknownIssuer", None);
        let repeated = Layer(
            "invalid peer certificate: UnknownIssuer",
            Some(Box::new(tls)),
        );
        let connect = Layer("client error (Connect)", Some(Box::new(repeated)));
        let top = Layer(
            "error sending request for url (https://k8s/)",
            Some(Box::new(connect)),
        );
        assert_eq!(
            with_causes(&top),
            "error sending request for url (https://k8s/): client error (Connect): invalid peer certificate: UnknownIssuer"
        );
    }
}
