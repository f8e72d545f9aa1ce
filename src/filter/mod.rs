//! The filter stage: which objects a watch publishes, judged by its `filter`, a CEL expression
//! over the object (docs/filters.md).
//!
//! Membership is the de-duplication memory ([`crate::dedupe`]): an object outside the filter is
//! never remembered, so one that starts matching is news (ADDED), a change while it matches is a
//! MODIFIED, and one remembered that stops matching is announced DELETED
//! (`Kube-Synthesized: filter`) and forgotten. A relist and the durable state compare against
//! that memory as for any watch, so a restart publishes what entered or left meanwhile.
//!
//! Only watches with a filter read the object beyond the metadata the decode step takes: the
//! object's JSON is read into a CEL value once per event ([`value`]).

pub(crate) mod expression;
mod value;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::IntCounter;

use crate::event::{EventType, ObjectEvent};
pub(crate) use expression::FilterExpr;

/// The value of `Kube-Synthesized` on the DELETED of an object that stopped matching its watch's
/// filter (it is still in the cluster).
pub(crate) const SYNTHESIZED_FILTER: &str = "filter";

/// One watch's compiled filter, shared by its namespaces' tasks.
#[derive(Clone)]
pub(crate) struct Filter {
    expr: FilterExpr,
    env: Arc<cel::Env>,
    /// `kube2nats_filter_errors_total` of the watch.
    errors: IntCounter,
    /// Set once a run-time error was logged: once per watch, never per event.
    logged: Arc<AtomicBool>,
    watch: Arc<str>,
}

/// What the filter makes of one event, given whether its object is remembered (published and
/// matching so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Published as it is: a change of a matching object, or the deletion of one.
    Publish,
    /// The object starts matching: published as ADDED.
    Enter,
    /// The object stopped matching: announced DELETED and forgotten.
    Leave,
    /// Outside the filter, and was: nothing to publish.
    Outside,
}

impl Filter {
    pub(crate) fn new(expr: FilterExpr, watch: Arc<str>, errors: IntCounter) -> Filter {
        Filter {
            expr,
            env: Arc::new(cel::Env::stdlib()),
            errors,
            logged: Arc::new(AtomicBool::new(false)),
            watch,
        }
    }

    /// Judges `event`; `tracked`: whether its object is remembered. A deletion is published when
    /// the object was; an ADDED or MODIFIED by whether the object matches now and matched before.
    pub(crate) fn admit(&self, event: &ObjectEvent, tracked: bool) -> Admission {
        if event.event_type == EventType::Deleted {
            return Self::by_membership(tracked);
        }
        match (self.matches(event), tracked) {
            (true, true) => Admission::Publish,
            (true, false) => Admission::Enter,
            (false, true) => Admission::Leave,
            (false, false) => Admission::Outside,
        }
    }

    /// An event whose object is not known (a watch line over `max_line_bytes`): it stays what it
    /// was, inside if remembered, outside if not.
    pub(crate) fn by_membership(tracked: bool) -> Admission {
        if tracked {
            Admission::Publish
        } else {
            Admission::Outside
        }
    }

    /// Whether the object of `event` matches. An expression that fails on it (a missing field
    /// read without `has()`, a function applied to the wrong type, a result that is not a bool)
    /// does not match: counted in `kube2nats_filter_errors_total`, logged once per watch.
    pub(crate) fn matches(&self, event: &ObjectEvent) -> bool {
        match self.evaluate(&event.object) {
            Ok(matches) => matches,
            Err(error) => {
                self.errors.inc();
                if !self.logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(watch = %self.watch, namespace = ?event.meta.namespace, name = %event.meta.name, filter = self.expr.as_str(), %error, "the filter failed on an object, which counts as not matching (kube2nats_filter_errors_total counts them; logged once per watch; guard optional fields with has())");
                }
                false
            }
        }
    }

    fn evaluate(&self, object: &[u8]) -> Result<bool, String> {
        let object = value::object_value(object, self.expr.members())
            .map_err(|e| format!("object not read: {e}"))?;
        let mut context = cel::Context::with_env(self.env.clone());
        context.add_variable_as_val(expression::OBJECT, object);
        match self.expr.program().execute(&context) {
            Ok(cel::Value::Bool(matches)) => Ok(matches),
            Ok(other) => Err(format!(
                "the expression gave {:?}, not a bool",
                other.type_of()
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::event::{ObjectMeta, ResourceVersion};

    fn filter(source: &str) -> Filter {
        let errors = IntCounter::new("filter_errors", "test").unwrap();
        Filter::new(FilterExpr::compile(source).unwrap(), "pods".into(), errors)
    }

    fn event(event_type: EventType, object: &str) -> ObjectEvent {
        ObjectEvent {
            event_type,
            meta: ObjectMeta {
                uid: "u-1".into(),
                resource_version: ResourceVersion::new("1".to_owned()),
                name: "web".into(),
                namespace: Some("default".into()),
                generation: None,
            },
            object: Bytes::copy_from_slice(object.as_bytes()),
            watch_line: None,
        }
    }

    const FAILED: &str = r#"{"kind":"Pod","metadata":{"name":"web","labels":{"team":"a"}},"spec":{"replicas":4},"status":{"phase":"Failed"}}"#;
    const RUNNING: &str = r#"{"kind":"Pod","metadata":{"name":"web"},"spec":{"replicas":2},"status":{"phase":"Running"}}"#;

    #[test]
    fn matches_the_examples_of_the_docs() {
        let failed = event(EventType::Modified, FAILED);
        let running = event(EventType::Modified, RUNNING);
        let phase = filter("object.status.phase == 'Failed'");
        assert!(phase.matches(&failed));
        assert!(!phase.matches(&running));
        // has() on a field of a missing map is an error in CEL: an object without labels
        // fails the issue's example (no match, counted) ...
        let team =
            filter("has(object.metadata.labels.team) && object.metadata.labels.team in ['a','b']");
        assert!(team.matches(&failed));
        assert!(!team.matches(&running));
        assert_eq!(team.errors.get(), 1);
        // ... and not one that tests the map first.
        let guarded = filter("has(object.metadata.labels) && has(object.metadata.labels.team) && object.metadata.labels.team in ['a','b']");
        assert!(guarded.matches(&failed));
        assert!(!guarded.matches(&running));
        let replicas = filter("object.spec.replicas > 3");
        assert!(replicas.matches(&failed));
        assert!(!replicas.matches(&running));
        assert_eq!(
            phase.errors.get() + guarded.errors.get() + replicas.errors.get(),
            0
        );
    }

    /// The examples of docs/filters.md run without error on an object that has their fields.
    #[test]
    fn the_documented_examples_run() {
        let job = event(
            EventType::Modified,
            r#"{"metadata":{"name":"web-12","creationTimestamp":"2026-03-01T10:00:00Z","labels":{"team":"a"}},"spec":{"replicas":4,"containers":[{"image":"docker.io/nginx"}]},"status":{"phase":"Failed","succeeded":0}}"#,
        );
        for source in [
            "object.status.phase == 'Failed'",
            "object.spec.replicas > 3",
            "has(object.status.succeeded) && object.status.succeeded == 0",
            "object.spec.containers.exists(c, !c.image.startsWith('registry.example.com/'))",
            "object.metadata.name.matches('^web-[0-9]+$')",
            "object.metadata.creationTimestamp >= '2026-01-01T00:00:00Z'",
            "has(object.metadata.labels) && has(object.metadata.labels.team) && object.spec.replicas > 3",
        ] {
            let f = filter(source);
            assert!(f.matches(&job), "{source}");
            assert_eq!(f.errors.get(), 0, "{source}");
        }
    }

    /// The crate is built without chrono (docs/filters.md): `timestamp()` is no function, which
    /// shows per object, not at start.
    #[test]
    fn timestamps_are_not_there() {
        let f = filter(
            "timestamp(object.metadata.creationTimestamp) > timestamp('2026-01-01T00:00:00Z')",
        );
        assert!(!f.matches(&event(EventType::Added, FAILED)));
        assert_eq!(f.errors.get(), 1);
    }

    #[test]
    fn an_error_is_no_match_and_counted() {
        let labels = filter("object.metadata.labels.team == 'a'");
        assert!(labels.matches(&event(EventType::Added, FAILED)));
        // No labels at all: no_such_key.
        assert!(!labels.matches(&event(EventType::Added, RUNNING)));
        assert!(!labels.matches(&event(EventType::Added, "not json")));
        assert_eq!(labels.errors.get(), 2);
        assert!(labels.logged.load(Ordering::Relaxed));
        let not_bool = filter("object.metadata.name");
        assert!(!not_bool.matches(&event(EventType::Added, FAILED)));
        assert_eq!(not_bool.errors.get(), 1);
    }

    #[test]
    fn admission_follows_membership() {
        let f = filter("object.status.phase == 'Failed'");
        let failed = event(EventType::Modified, FAILED);
        let running = event(EventType::Modified, RUNNING);
        assert_eq!(f.admit(&failed, false), Admission::Enter);
        assert_eq!(f.admit(&failed, true), Admission::Publish);
        assert_eq!(f.admit(&running, true), Admission::Leave);
        assert_eq!(f.admit(&running, false), Admission::Outside);
        // A deletion goes out if the object was published, whatever its last state.
        assert_eq!(
            f.admit(&event(EventType::Deleted, RUNNING), true),
            Admission::Publish
        );
        assert_eq!(
            f.admit(&event(EventType::Deleted, FAILED), false),
            Admission::Outside
        );
    }
}
