//! The Lease object (`coordination.k8s.io/v1`) as leader election reads and writes it: the
//! record in its spec, and get / create / update against the API server.
//!
//! Updates carry the `metadata.resourceVersion` last read, so the API server applies them only if
//! nobody wrote in between (409 Conflict otherwise): that compare-and-swap is what makes one
//! holder at a time, whatever the clocks say. Fields kube2nats does not know (labels, newer spec
//! fields) are kept, because an update replaces the whole object.

use std::time::SystemTime;

use serde_json::{json, Value};

use crate::kube::{ApiClient, ApiError};

/// What the Lease's spec says about who holds it (client-go's `LeaderElectionRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Record {
    /// Empty when nobody holds it (after a release).
    pub(crate) holder_identity: String,
    pub(crate) lease_duration_seconds: i64,
    /// `MicroTime`s as written; informational only: they come from another machine's clock and
    /// are never compared with the local one.
    pub(crate) acquire_time: Option<String>,
    pub(crate) renew_time: Option<String>,
    pub(crate) lease_transitions: i64,
}

impl Record {
    fn from_spec(spec: &Value) -> Record {
        let text = |k: &str| spec.get(k).and_then(Value::as_str).map(str::to_owned);
        let number = |k: &str| spec.get(k).and_then(Value::as_i64).unwrap_or(0);
        Record {
            holder_identity: text("holderIdentity").unwrap_or_default(),
            lease_duration_seconds: number("leaseDurationSeconds"),
            acquire_time: text("acquireTime"),
            renew_time: text("renewTime"),
            lease_transitions: number("leaseTransitions"),
        }
    }

    fn write_into(&self, spec: &mut Value) {
        spec["holderIdentity"] = json!(self.holder_identity);
        spec["leaseDurationSeconds"] = json!(self.lease_duration_seconds);
        spec["acquireTime"] = json!(self.acquire_time);
        spec["renewTime"] = json!(self.renew_time);
        spec["leaseTransitions"] = json!(self.lease_transitions);
    }
}

/// `metav1.MicroTime` on the wire: RFC 3339, UTC, six fractional digits.
pub(crate) fn micro_time(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// One Lease as last read or written.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    /// The whole object, so an update keeps what kube2nats does not know.
    object: Value,
    pub(crate) record: Record,
}

impl Lease {
    fn from_object(object: Value) -> Result<Lease, LeaseError> {
        if !object.get("spec").is_none_or(Value::is_object) {
            return Err(LeaseError::Malformed("spec is not an object".into()));
        }
        let record = Record::from_spec(object.get("spec").unwrap_or(&Value::Null));
        Ok(Lease { object, record })
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseError {
    /// Somebody else wrote the Lease (or created it) since it was read.
    #[error("the Lease was changed by another writer (409)")]
    Conflict,
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("malformed Lease: {0}")]
    Malformed(String),
}

/// The Lease's address, and the client that reaches it.
pub(crate) struct LeaseApi {
    client: std::sync::Arc<ApiClient>,
    collection: String,
    name: String,
    namespace: String,
}

impl LeaseApi {
    pub(crate) fn new(client: std::sync::Arc<ApiClient>, namespace: &str, name: &str) -> LeaseApi {
        LeaseApi {
            client,
            collection: format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// The Lease's namespace and name.
    pub(crate) fn lease(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }

    /// `namespace/name`, for log lines.
    pub(crate) fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The Lease, or `None` if it does not exist yet.
    pub(crate) async fn get(&self) -> Result<Option<Lease>, LeaseError> {
        match self
            .client
            .get(&format!("{}/{}", self.collection, self.name))
            .await
        {
            Ok(body) => Ok(Some(Lease::from_object(parse(&body)?)?)),
            Err(ApiError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the Lease with `record`; [`LeaseError::Conflict`] if another replica was first.
    pub(crate) async fn create(&self, record: &Record) -> Result<Lease, LeaseError> {
        let mut object = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": self.name, "namespace": self.namespace },
            "spec": {},
        });
        record.write_into(&mut object["spec"]);
        let body = self
            .client
            .create(&self.collection, &object)
            .await
            .map_err(conflict)?;
        Lease::from_object(parse(&body)?)
    }

    /// Writes `record` over `lease`, if the Lease is still at `lease`'s resourceVersion.
    pub(crate) async fn update(&self, lease: &Lease, record: &Record) -> Result<Lease, LeaseError> {
        let mut object = lease.object.clone();
        if !object["spec"].is_object() {
            object["spec"] = json!({});
        }
        record.write_into(&mut object["spec"]);
        let body = self
            .client
            .update(&format!("{}/{}", self.collection, self.name), &object)
            .await
            .map_err(conflict)?;
        Lease::from_object(parse(&body)?)
    }
}

fn parse(body: &[u8]) -> Result<Value, LeaseError> {
    serde_json::from_slice(body).map_err(|e| LeaseError::Malformed(e.to_string()))
}

/// 409 is both AlreadyExists (create) and Conflict (update): either way another writer won.
fn conflict(e: ApiError) -> LeaseError {
    match e {
        ApiError::Status { code: 409, .. } => LeaseError::Conflict,
        other => LeaseError::Api(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_has_six_fractional_digits() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_763_895_000_123_456);
        assert_eq!(micro_time(t), "2025-11-23T10:50:00.123456Z");
    }

    #[test]
    fn record_round_trips_and_keeps_unknown_fields() {
        let object = json!({"metadata": {"name": "k", "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "leaseTransitions": 2,
                     "renewTime": "2026-01-01T00:00:00.000000Z", "strategy": "OldestEmulationVersion"}});
        let lease = Lease::from_object(object).unwrap();
        assert_eq!(lease.object["metadata"]["resourceVersion"], "7");
        assert_eq!(lease.record.holder_identity, "pod-a");
        assert_eq!(lease.record.lease_transitions, 2);
        assert_eq!(lease.record.acquire_time, None);
        let mut written = lease.object.clone();
        let record = Record {
            holder_identity: "pod-b".into(),
            ..lease.record.clone()
        };
        record.write_into(&mut written["spec"]);
        assert_eq!(written["spec"]["strategy"], "OldestEmulationVersion");
        assert_eq!(written["metadata"]["labels"]["a"], "b");
        assert_eq!(Record::from_spec(&written["spec"]), record);
    }

    #[test]
    fn a_spec_that_is_not_an_object_is_malformed() {
        assert!(Lease::from_object(json!({"spec": 3})).is_err());
        assert_eq!(
            Lease::from_object(json!({"metadata": {}})).unwrap().record,
            Record::default()
        );
    }
}
