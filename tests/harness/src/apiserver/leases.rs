//! What is particular to `coordination.k8s.io/v1` Leases, the lock of leader election.
//!
//! Storage, optimistic concurrency (409 Conflict on a stale `metadata.resourceVersion`), 409
//! AlreadyExists on a second create, RBAC and watches are the same as for every resource. What a
//! Lease adds is its spec, which kube-apiserver decodes strictly and validates: a client that
//! writes a timestamp in the wrong format, a string where a number belongs, or a non-positive
//! duration is refused, as it would be by a real cluster.
//!
//! Fault injection: slow reads ([`SlowReads`]), the case where a Lease read carries a renewal
//! made long after the request was sent. Deleting a held Lease is `ApiServer::delete`.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use super::lock;
use super::resources::ResourceType;
use super::status::ApiError;

/// Lease GETs held `delay` on their way in: the store is read only when the delay is over, as
/// when a request is slowed by a congested network or queued by API priority and fairness. What
/// the client gets is then newer than anything it knew when it sent the request.
#[derive(Default)]
pub struct SlowReads {
    state: Mutex<SlowReadsState>,
}

#[derive(Default)]
struct SlowReadsState {
    /// How many more Lease GETs are slowed.
    remaining: usize,
    delay: Duration,
    /// How many slowed GETs have arrived so far.
    arrived: usize,
}

impl SlowReads {
    pub fn set(&self, n: usize, delay: Duration) {
        let mut state = lock(&self.state);
        state.remaining = n;
        state.delay = delay;
    }

    pub fn arrived(&self) -> usize {
        lock(&self.state).arrived
    }

    /// Holds a Lease GET for the delay, if it is one of those to slow.
    pub async fn hold(&self) {
        let delay = {
            let mut state = lock(&self.state);
            if state.remaining == 0 {
                return;
            }
            state.remaining -= 1;
            state.arrived += 1;
            state.delay
        };
        tokio::time::sleep(delay).await;
    }
}

/// Refuses a Lease whose spec kube-apiserver would refuse; other resources pass unchecked.
pub fn validate(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    if rt.plural != "leases" {
        return Ok(());
    }
    let Some(spec) = obj.get("spec") else {
        return Ok(());
    };
    let decode_error = |field: &str, why: &str| {
        ApiError::bad_request(format!(
            "Lease in version \"v1\" cannot be handled as a Lease: spec.{field}: {why}"
        ))
    };
    let invalid =
        |field: &str, why: &str| ApiError::invalid("Lease", &format!("spec.{field}"), why);
    if let Some(v) = present(spec, "holderIdentity") {
        if !v.is_string() {
            return Err(decode_error("holderIdentity", "expected a string"));
        }
    }
    for field in ["leaseDurationSeconds", "leaseTransitions"] {
        if let Some(v) = present(spec, field) {
            let n = v
                .as_i64()
                .filter(|n| i32::try_from(*n).is_ok())
                .ok_or_else(|| decode_error(field, "expected an int32"))?;
            if field == "leaseDurationSeconds" && n <= 0 {
                return Err(invalid(field, "must be greater than 0"));
            }
            if field == "leaseTransitions" && n < 0 {
                return Err(invalid(field, "must be greater than or equal to 0"));
            }
        }
    }
    for field in ["acquireTime", "renewTime"] {
        if let Some(v) = present(spec, field) {
            let ok = v.as_str().is_some_and(is_micro_time);
            if !ok {
                return Err(decode_error(
                    field,
                    "expected a MicroTime (RFC 3339 with microseconds, e.g. 2026-01-02T15:04:05.000000Z)",
                ));
            }
        }
    }
    Ok(())
}

/// A field that is set (JSON `null` is the same as absent, as Go decodes it).
fn present<'a>(spec: &'a Value, field: &str) -> Option<&'a Value> {
    spec.get(field).filter(|v| !v.is_null())
}

/// `metav1.MicroTime`'s wire form: `2006-01-02T15:04:05.000000Z07:00`, exactly six fractional
/// digits, `Z` or a numeric offset.
fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let body = digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19)
        && at(19, b'.')
        && digits(20..26);
    let zone = &s[26.min(s.len())..];
    let zone_ok = zone == "Z"
        || (zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && digits(27..29)
            && at(29, b':')
            && digits(30..32));
    body && zone_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_is_strict() {
        assert!(is_micro_time("2026-11-23T10:50:00.123456Z"));
        assert!(is_micro_time("2026-11-23T10:50:00.123456+01:00"));
        assert!(!is_micro_time("2026-11-23T10:50:00Z"));
        assert!(!is_micro_time("2026-11-23T10:50:00.123Z"));
        assert!(!is_micro_time("2026-11-23 10:50:00.123456Z"));
        assert!(!is_micro_time(""));
    }
}
