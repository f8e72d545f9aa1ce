//! Decoding one watch line without parsing the object.
//!
//! A watch event is `{"type":…,"object":{…}}`. kube2nats needs only the type and four metadata
//! fields; the object stays the bytes received (a zero-copy slice of the line), which is what keeps
//! CPU and memory per event small. `BOOKMARK` and `ERROR` lines are not changes and come out as
//! their own variants.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::status::Status;
use crate::event::{EventType, ObjectEvent, ObjectMeta, ResourceVersion};

/// The annotation on the bookmark that ends the initial events of a streaming list.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// One decoded line of a watch stream.
#[derive(Debug, Clone)]
pub enum WatchLine {
    /// ADDED, MODIFIED or DELETED.
    Change(ObjectEvent),
    /// Progress without a change: the watch has seen everything up to `resource_version`.
    Bookmark {
        resource_version: ResourceVersion,
        /// Set on the bookmark that closes the initial events of a streaming list.
        initial_events_end: bool,
    },
    /// The server reports a failure inside the stream (a 410 Expired, typically) and will end it.
    Error(Status),
}

/// Why a line could not be decoded. Every variant ends the stream: the watch resumes from the last
/// good resourceVersion.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed watch line: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error("unknown watch event type {0:?}")]
    UnknownType(String),
    #[error("watch event without {0}")]
    MissingField(&'static str),
}

#[derive(Deserialize)]
struct RawLine<'a> {
    #[serde(rename = "type")]
    event_type: &'a str,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
}

/// The top of an object: `kind` (absent in list items) and the metadata fields we route by.
#[derive(Deserialize)]
struct ObjectHead<'a> {
    #[serde(borrow, default)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    metadata: Option<MetaFields<'a>>,
}

#[derive(Deserialize)]
struct MetaFields<'a> {
    #[serde(borrow, default)]
    uid: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "resourceVersion", borrow, default)]
    resource_version: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct BookmarkObject {
    metadata: Option<BookmarkMeta>,
}

#[derive(Deserialize)]
struct BookmarkMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: std::collections::HashMap<String, String>,
}

/// Decodes one line (without its newline).
pub fn decode_line(line: &Bytes) -> Result<WatchLine, DecodeError> {
    let raw: RawLine = serde_json::from_slice(line).map_err(DecodeError::Malformed)?;
    let object = raw.object.ok_or(DecodeError::MissingField("object"))?;
    let event_type = match raw.event_type {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => return decode_bookmark(object),
        "ERROR" => {
            let status = serde_json::from_str(object.get()).map_err(DecodeError::Malformed)?;
            return Ok(WatchLine::Error(status));
        }
        other => return Err(DecodeError::UnknownType(other.to_owned())),
    };
    let object = line.slice_ref(object.get().as_bytes());
    let (meta, _) = decode_object_meta(&object)?;
    Ok(WatchLine::Change(ObjectEvent {
        event_type,
        meta,
        object,
        watch_line: Some(line.clone()),
    }))
}

fn decode_bookmark(object: &RawValue) -> Result<WatchLine, DecodeError> {
    let bookmark: BookmarkObject =
        serde_json::from_str(object.get()).map_err(DecodeError::Malformed)?;
    let meta = bookmark
        .metadata
        .ok_or(DecodeError::MissingField("metadata"))?;
    let rv = meta
        .resource_version
        .filter(|rv| !rv.is_empty())
        .ok_or(DecodeError::MissingField("metadata.resourceVersion"))?;
    Ok(WatchLine::Bookmark {
        resource_version: ResourceVersion::new(rv),
        initial_events_end: meta
            .annotations
            .get(INITIAL_EVENTS_END_ANNOTATION)
            .is_some_and(|v| v == "true"),
    })
}

/// Reads the metadata of one object; the second value says whether the object carries `kind`
/// (list items do not).
pub fn decode_object_meta(object: &[u8]) -> Result<(ObjectMeta, bool), DecodeError> {
    let head: ObjectHead = serde_json::from_slice(object).map_err(DecodeError::Malformed)?;
    let meta = head.metadata.ok_or(DecodeError::MissingField("metadata"))?;
    let uid = meta
        .uid
        .filter(|s| !s.is_empty())
        .ok_or(DecodeError::MissingField("metadata.uid"))?;
    let rv = meta
        .resource_version
        .filter(|s| !s.is_empty())
        .ok_or(DecodeError::MissingField("metadata.resourceVersion"))?;
    let name = meta
        .name
        .filter(|s| !s.is_empty())
        .ok_or(DecodeError::MissingField("metadata.name"))?;
    Ok((
        ObjectMeta {
            uid: uid.into_owned(),
            resource_version: ResourceVersion::new(rv.into_owned()),
            name: name.into_owned(),
            namespace: meta
                .namespace
                .filter(|s| !s.is_empty())
                .map(|s| s.into_owned()),
        },
        head.kind.is_some(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn change_keeps_the_object_bytes_and_reads_metadata() {
        let l = line(
            r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default","uid":"u-1","resourceVersion":"42","labels":{"a":"b"}},"spec":{"x":[1,2]}}}"#,
        );
        let WatchLine::Change(ev) = decode_line(&l).unwrap() else {
            panic!("not a change")
        };
        assert_eq!(ev.event_type, EventType::Modified);
        assert_eq!(ev.meta.uid, "u-1");
        assert_eq!(ev.meta.resource_version.as_str(), "42");
        assert_eq!(ev.meta.name, "web");
        assert_eq!(ev.meta.namespace.as_deref(), Some("default"));
        assert!(ev.object.starts_with(br#"{"kind":"Pod""#));
        assert!(ev.object.ends_with(br#"{"x":[1,2]}}"#));
        assert_eq!(ev.watch_line.as_ref(), Some(&l));
    }

    #[test]
    fn cluster_scoped_object_has_no_namespace() {
        let l = line(
            r#"{"type":"ADDED","object":{"metadata":{"name":"n1","uid":"u","resourceVersion":"1"}}}"#,
        );
        let WatchLine::Change(ev) = decode_line(&l).unwrap() else {
            panic!()
        };
        assert_eq!(ev.meta.namespace, None);
    }

    #[test]
    fn error_event_with_410_inside_a_200_stream() {
        let l = line(
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (10)","reason":"Expired","code":410}}"#,
        );
        let WatchLine::Error(status) = decode_line(&l).unwrap() else {
            panic!()
        };
        assert!(status.is_expired());
        assert_eq!(status.message, "too old resource version: 5 (10)");
    }

    #[test]
    fn bookmark_and_initial_events_end() {
        let l = line(
            r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"77","creationTimestamp":null}}}"#,
        );
        let WatchLine::Bookmark {
            resource_version,
            initial_events_end,
        } = decode_line(&l).unwrap()
        else {
            panic!()
        };
        assert_eq!(resource_version.as_str(), "77");
        assert!(!initial_events_end);
        let l = line(
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"78","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
        );
        let WatchLine::Bookmark {
            initial_events_end, ..
        } = decode_line(&l).unwrap()
        else {
            panic!()
        };
        assert!(initial_events_end);
    }

    #[test]
    fn missing_fields_and_garbage_are_errors() {
        let cases = [
            (r#"<html>oops</html>"#, "malformed"),
            (r#"{"type":"ADDED"}"#, "without object"),
            (
                r#"{"type":"ADDED","object":{"spec":{}}}"#,
                "without metadata",
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}"#,
                "without metadata.uid",
            ),
            (
                r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u"}}}"#,
                "without metadata.resourceVersion",
            ),
            (
                r#"{"type":"BOOKMARK","object":{"metadata":{}}}"#,
                "without metadata.resourceVersion",
            ),
            (
                r#"{"type":"RENAMED","object":{}}"#,
                "unknown watch event type",
            ),
            (r#"{"type":"ADDED","object":{"metadata":{"na"#, "malformed"),
        ];
        for (input, expected) in cases {
            let err = decode_line(&line(input)).unwrap_err().to_string();
            assert!(err.contains(expected), "{input}: {err}");
        }
        let non_utf8 = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\xff\xfe\",\"uid\":\"u\",\"resourceVersion\":\"1\"}}}");
        assert!(matches!(
            decode_line(&non_utf8),
            Err(DecodeError::Malformed(_))
        ));
    }
}
