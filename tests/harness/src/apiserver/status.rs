//! `metav1.Status` error bodies, shaped byte for byte like the real kube-apiserver's.
//!
//! Clients branch on `code`, `reason` and `details`, and some log `message`; so every failure the
//! simulator can produce is built here, in one place, from the same constructors the real server
//! uses (`k8s.io/apimachinery/pkg/api/errors`).

use serde_json::{json, Value};

/// `deployments.apps`, or `pods` for the core group: how the real server names a resource in
/// messages.
fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// A failed request: the HTTP status code, the Status body, and an optional `Retry-After`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code; also the body's `code`.
    pub code: u16,
    /// The full `Status` object sent as the body.
    pub body: Value,
    /// Seconds for the `Retry-After` header, when the server asks the client to come back later.
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    /// A `Status` with the given code, reason and message, and optional `details`.
    pub fn new(
        code: u16,
        reason: &str,
        message: impl Into<String>,
        details: Option<Value>,
    ) -> Self {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message.into(),
            "reason": reason,
            "code": code,
        });
        if let Some(details) = details {
            body["details"] = details;
        }
        ApiError {
            code,
            body,
            retry_after_secs: None,
        }
    }

    /// Sets `Retry-After` and `details.retryAfterSeconds`, as the real server does for 429/503/504.
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        let details = &mut self.body["details"];
        if !details.is_object() {
            *details = json!({});
        }
        details["retryAfterSeconds"] = json!(secs);
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message, None)
    }

    /// 401 Unauthorized, exactly as the authentication filter writes it.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized", None)
    }

    /// 403 Forbidden with RBAC's message shape.
    pub fn forbidden(
        user: &str,
        verb: &str,
        resource: &str,
        group: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Self {
        let scope = match namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        let qualified = qualified(resource, group);
        let subject = match name {
            Some(name) => format!("{qualified} \"{name}\""),
            None => qualified,
        };
        let message = format!(
            "{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}"
        );
        let mut details = json!({ "group": group, "kind": resource });
        if let Some(name) = name {
            details["name"] = json!(name);
        }
        Self::new(403, "Forbidden", message, Some(details))
    }

    /// 404 NotFound for a named object.
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        let mut details = json!({ "name": name, "kind": resource });
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(resource, group)),
            Some(details),
        )
    }

    /// 404 for a path that no handler serves (the real server answers these with this Status).
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(json!({})),
        )
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
            Some(json!({})),
        )
    }

    /// 409 AlreadyExists on a duplicate create.
    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        let mut details = json!({ "name": name, "kind": resource });
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(resource, group)),
            Some(details),
        )
    }

    /// 409 Conflict on an update whose `metadata.resourceVersion` is stale.
    pub fn conflict(resource: &str, group: &str, name: &str) -> Self {
        let mut details = json!({ "name": name, "kind": resource });
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(resource, group)
            ),
            Some(details),
        )
    }

    /// 410 Expired for a `continue` token older than the compaction point.
    pub fn continue_expired() -> Self {
        Self::new(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results.",
            None,
        )
    }

    /// 410 Expired for a resourceVersion older than the oldest remembered change.
    pub fn too_old(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
            None,
        )
    }

    /// 504 Timeout with the `ResourceVersionTooLarge` cause: the client asked for a version this
    /// server has not seen yet (e.g. after failing over to a lagging API server).
    pub fn too_large(requested: u64, current: u64) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
            Some(json!({
                "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }]
            })),
        )
        .with_retry_after(1)
    }

    /// 422 Invalid, used for rejected watch-list parameter combinations.
    pub fn invalid(kind: &str, field: &str, message: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{kind}.meta.k8s.io \"\" is invalid: {field}: {message}"),
            Some(json!({
                "group": "meta.k8s.io",
                "kind": kind,
                "causes": [{ "reason": "FieldValueForbidden", "message": message, "field": field }]
            })),
        )
    }
}
