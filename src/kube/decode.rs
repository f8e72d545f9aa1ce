//! Decoding one watch line without parsing the object.
//!
//! A watch event is `{"type":…,"object":{…}}`. kube2nats needs only the type and four metadata
//! fields; the object stays the bytes received (a zero-copy slice of the line), which is what keeps
//! CPU and memory per event small. `BOOKMARK` and `ERROR` lines are not changes and come out as
//! their own variants.

mod scan;

use bytes::Bytes;
use serde::Deserialize;

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
///
/// One pass over the line (see [`scan`]) validates it as JSON and reads the event type, where the
/// object is, and the object's metadata; the object is handed on as a slice of `line`.
pub fn decode_line(line: &Bytes) -> Result<WatchLine, DecodeError> {
    let parts = scan::watch_line(line).map_err(DecodeError::Malformed)?;
    let range = parts.object.ok_or(DecodeError::MissingField("object"))?;
    let event_type = match parts.event_type {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => return decode_bookmark(&line[range]),
        "ERROR" => {
            let status = serde_json::from_slice(&line[range]).map_err(DecodeError::Malformed)?;
            return Ok(WatchLine::Error(status));
        }
        other => return Err(DecodeError::UnknownType(other.to_owned())),
    };
    let head = parts.head.map_err(DecodeError::Malformed)?;
    let (meta, _) = object_meta(head)?;
    Ok(WatchLine::Change(ObjectEvent {
        event_type,
        meta,
        object: line.slice(range),
        watch_line: Some(line.clone()),
    }))
}

/// Reads the change a watch line reports from its first bytes only (the line was too long to
/// keep): the event type and the object's metadata, when they come before the cut.
/// kube-apiserver writes `type` first and an object's `kind`, `apiVersion` and `metadata` before
/// its body, so they usually do; nothing guarantees it, hence the `None`. `namespaced` says
/// whether the object must have a namespace: a cut before it leaves the object unknown.
pub fn decode_line_prefix(prefix: &[u8], namespaced: bool) -> Option<(EventType, ObjectMeta)> {
    let parts = scan::watch_line_prefix(prefix);
    let event_type = match parts.event_type? {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        _ => return None,
    };
    let text = |field: Option<std::borrow::Cow<'_, str>>| {
        field.filter(|s| !s.is_empty()).map(|s| s.into_owned())
    };
    let meta = parts.meta;
    let namespace = text(meta.namespace);
    if namespaced && namespace.is_none() && !parts.metadata_complete {
        return None;
    }
    Some((
        event_type,
        ObjectMeta {
            uid: text(meta.uid)?,
            resource_version: ResourceVersion::new(text(meta.resource_version)?),
            name: text(meta.name)?,
            namespace,
            generation: meta.generation,
        },
    ))
}

/// Bookmarks are one in hundreds of lines: serde reads them.
fn decode_bookmark(object: &[u8]) -> Result<WatchLine, DecodeError> {
    let bookmark: BookmarkObject =
        serde_json::from_slice(object).map_err(DecodeError::Malformed)?;
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
    object_meta(scan::object_head(object).map_err(DecodeError::Malformed)?)
}

fn object_meta(head: scan::Head<'_>) -> Result<(ObjectMeta, bool), DecodeError> {
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
            resource_version: ResourceVersion::new(rv),
            name: name.into_owned(),
            namespace: meta
                .namespace
                .filter(|s| !s.is_empty())
                .map(|s| s.into_owned()),
            generation: meta.generation,
        },
        head.has_kind,
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
            r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default","uid":"u-1","resourceVersion":"42","generation":4,"labels":{"a":"b"}},"spec":{"x":[1,2]}}}"#,
        );
        let WatchLine::Change(ev) = decode_line(&l).unwrap() else {
            panic!("not a change")
        };
        assert_eq!(ev.event_type, EventType::Modified);
        assert_eq!(ev.meta.uid, "u-1");
        assert_eq!(ev.meta.resource_version.as_str(), "42");
        assert_eq!(ev.meta.name, "web");
        assert_eq!(ev.meta.namespace.as_deref(), Some("default"));
        assert_eq!(ev.meta.generation, Some(4));
        assert!(ev.object.starts_with(br#"{"kind":"Pod""#));
        assert!(ev.object.ends_with(br#"{"x":[1,2]}}"#));
        assert_eq!(ev.watch_line.as_ref(), Some(&l));
    }

    #[test]
    fn a_prefix_gives_the_metadata_written_before_the_cut() {
        let line = br#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default","uid":"u-1","resourceVersion":"42","labels":{"a":"b"}},"spec":{"x":"#;
        for cut in 0..=line.len() {
            let got = decode_line_prefix(&line[..cut], true);
            // Everything is known once `resourceVersion` has been read whole.
            let known = std::str::from_utf8(&line[..cut])
                .unwrap()
                .contains(r#""42""#);
            assert_eq!(got.is_some(), known, "cut at {cut}");
        }
        let (event_type, meta) = decode_line_prefix(line, true).unwrap();
        assert_eq!(event_type, EventType::Modified);
        assert_eq!(meta.uid, "u-1");
        assert_eq!(meta.resource_version.as_str(), "42");
        assert_eq!(meta.name, "web");
        assert_eq!(meta.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn a_prefix_without_metadata_or_with_it_late_gives_nothing() {
        let late = br#"{"type":"ADDED","object":{"data":{"k":"xxxxxxxx"#;
        assert!(decode_line_prefix(late, true).is_none());
        let no_ns =
            br#"{"type":"ADDED","object":{"metadata":{"name":"n","uid":"u","resourceVersion":"1","#;
        assert!(
            decode_line_prefix(no_ns, true).is_none(),
            "the namespace may follow"
        );
        assert!(decode_line_prefix(no_ns, false).is_some(), "cluster-scoped");
        let closed = br#"{"type":"ADDED","object":{"metadata":{"name":"n","uid":"u","resourceVersion":"1"},"spec":"#;
        assert!(decode_line_prefix(closed, true).is_some());
        let bookmark = br#"{"type":"BOOKMARK","object":{"metadata":{"name":"n","uid":"u","resourceVersion":"1"},"#;
        assert!(decode_line_prefix(bookmark, false).is_none());
        assert!(decode_line_prefix(b"\xff\xfe garbage", false).is_none());
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

    /// What a decode came to, comparable across the two implementations.
    fn outcome(result: Result<WatchLine, DecodeError>) -> String {
        match result {
            Ok(WatchLine::Change(ev)) => format!(
                "change {:?} {:?} object={:?} line={:?}",
                ev.event_type, ev.meta, ev.object, ev.watch_line
            ),
            Ok(other) => format!("{other:?}"),
            Err(DecodeError::Malformed(_)) => "malformed".into(),
            Err(e) => e.to_string(),
        }
    }

    fn same_as_serde(input: &[u8]) {
        let line = Bytes::copy_from_slice(input);
        assert_eq!(
            outcome(decode_line(&line)),
            outcome(crate::fuzz_props::serde_reference::decode_line(&line)),
            "line {:?}",
            String::from_utf8_lossy(input)
        );
    }

    fn pod_line() -> String {
        let mut line = String::from(
            r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-7d4b9c8f6d-x2k9p","generateName":"web-7d4b9c8f6d-","namespace":"payments","uid":"0b8e6c3a-1f2d-4e5f-9a0b-1c2d3e4f5a6b","resourceVersion":"48213377","generation":2,"creationTimestamp":"2026-11-20T08:14:31Z","labels":{"app":"web","pod-template-hash":"7d4b9c8f6d"},"annotations":{"prometheus.io/scrape":"true"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d4b9c8f6d","uid":"1c2d3e4f-1f2d-4e5f-9a0b-1c2d3e4f5a6b","controller":true,"blockOwnerDeletion":true}]},"spec":{"containers":[{"name":"web","image":"registry.example.com/web:1.2","ports":[{"containerPort":8080,"protocol":"TCP"}],"env":[{"name":"A","value":"x\"y\u00e9"}],"resources":{"limits":{"cpu":"2","memory":"1Gi"}}}],"priority":0,"terminationGracePeriodSeconds":30,"x":[1.5e3,-0.25,null,true,false,{}]},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastProbeTime":null}]}}}"#,
        );
        line.push(' ');
        line
    }

    const SEEDS: &[&str] = &[
        r#"{"type":"ADDED","object":{"metadata":{"name":"n1","uid":"u","resourceVersion":"1"}}}"#,
        r#"{"object":{"metadata":{"namespace":"d","resourceVersion":"7","uid":"u\u0031","name":"a\/b"},"kind":null},"type":"DELETED","extra":[{"a":"\ud83d\ude00"}]}"#,
        r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"77","creationTimestamp":null}}}"#,
        r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (10)","reason":"Expired","code":410}}"#,
        r#" {"type":"RENAMED","object":{}} "#,
    ];

    #[test]
    fn agrees_with_serde_on_tricky_lines() {
        let cases = [
            r#"{"type":"ADDED","type":"ADDED","object":{}}"#,
            r#"{"type":"ADDED","object":{},"object":{}}"#,
            r#"{"type":"ADDED","object":null}"#,
            r#"{"type":null,"object":{}}"#,
            r#"{"type":"ADD\u0045D","object":{}}"#,
            r#"{"typ\u0065":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"kind":"P\u006fd","metadata":{"name":"a","uid":"u","resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"kind":5,"metadata":{"name":"a","uid":"u","resourceVersion":"1"}}}"#,
            r#"{"type":"BOOKMARK","object":{"kind":5,"metadata":{"resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","uid":"v","resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":null,"uid":"v","resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":5,"resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"\ud800","uid":"u","resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"\ud83d\ude00","uid":"u","resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"\ud800":1,"name":"a","uid":"u","resourceVersion":"1"}}}"#,
            r#"{"type":"RENAMED","object":{"metadata":{"\ud800":1}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"metadata":{}}}"#,
            r#"{"type":"ADDED","object":{"metadata":null}}"#,
            r#"{"type":"ADDED","object":{"metadata":"x"}}"#,
            r#"{"type":"ADDED","object":"x"}"#,
            r#"{"type":"ADDED","object":5}"#,
            r#"{"type":"BOOKMARK","object":5}"#,
            r#"{"type":"RENAMED","object":5}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":3}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":"3"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":-0}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":-7}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":1.0}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":1e2}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":null}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":99999999999999999999}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":9223372036854775807}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":9223372036854775808}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":{}}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":3,"generation":4}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","generation":[1]}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"","resourceVersion":"1"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1","namespace":""}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1"}}} x"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1"}},}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1"}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1"},"spec":{"a":01}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u","resourceVersion":"1"},"spec":"\q"}}"#,
            r#""ADDED""#,
            r#"{}"#,
            "",
            "   ",
            "\t{\"type\":\"ADDED\",\"object\":{}}",
        ];
        for case in cases {
            same_as_serde(case.as_bytes());
        }
        same_as_serde(pod_line().as_bytes());
        same_as_serde(b"{\"type\":\"ADDED\",\"x\":\"\xff\",\"object\":{\"metadata\":{\"name\":\"a\",\"uid\":\"u\",\"resourceVersion\":\"1\"}}}");
        same_as_serde(b"{\"type\":\"ADDED\",\"object\":{\"spec\":\"\xff\",\"metadata\":{\"name\":\"a\",\"uid\":\"u\",\"resourceVersion\":\"1\"}}}");
        same_as_serde(b"{\"type\":\"ADD\xffED\",\"object\":{}}");
    }

    #[test]
    fn object_meta_agrees_with_serde() {
        for object in [
            r#"{"metadata":{"name":"a","namespace":"d","uid":"u1","resourceVersion":"5"},"spec":{}}"#,
            r#"{"kind":"Pod","metadata":{"name":"a","uid":"u1","resourceVersion":"5"}}"#,
            r#"{"kind":null,"metadata":{"name":"a","uid":"u1","resourceVersion":"5"}}"#,
            r#"{"metadata":{"name":"a","uid":"u1"}}"#,
            r#"{"metadata":{"name":"a","uid":"u1","resourceVersion":"5"}} {}"#,
            r#"{"spec":"\xff","metadata":{"name":"a","uid":"u1","resourceVersion":"5"}}"#,
        ] {
            let ours = decode_object_meta(object.as_bytes()).map_err(|e| e.to_string());
            let theirs = crate::fuzz_props::serde_reference::decode_object_meta(object.as_bytes())
                .map_err(|e| e.to_string());
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{object}"),
                (Err(a), Err(b)) => assert_eq!(
                    a.starts_with("malformed"),
                    b.starts_with("malformed"),
                    "{object}: {a} / {b}"
                ),
                _ => panic!("{object}: {ours:?} / {theirs:?}"),
            }
        }
    }

    /// Bytes that matter to JSON, and some that break UTF-8 or strings.
    const MUTATION_BYTES: &[u8] =
        b"{}[]\",:\\ \t\n0123456789-+.eEtrufalsn/u\x01\x1f\x7f\xff\xc3azAZ";

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Mutated lines (bytes replaced, inserted, deleted) decode the same as with serde.
        #[test]
        fn mutated_lines_decode_as_with_serde(
            seed in 0..SEEDS.len() + 1,
            edits in proptest::collection::vec((0.0f64..1.0, 0u8..3, 0..MUTATION_BYTES.len()), 1..4),
        ) {
            let pod = pod_line();
            let mut line = if seed == SEEDS.len() { pod.into_bytes() } else { SEEDS[seed].as_bytes().to_vec() };
            for (at, op, byte) in edits {
                let i = ((line.len() as f64) * at) as usize;
                let byte = MUTATION_BYTES[byte];
                match op {
                    0 if i < line.len() => line[i] = byte,
                    1 => line.insert(i.min(line.len()), byte),
                    _ if i < line.len() => {
                        line.remove(i);
                    }
                    _ => {}
                }
            }
            same_as_serde(&line);
        }

        /// Generated JSON of every shape (nesting, escapes, non-ASCII and broken UTF-8, numbers
        /// at the edges, whitespace) in an object's body and metadata decodes as with serde, and
        /// so does the same line with one byte changed.
        #[test]
        fn generated_lines_decode_as_with_serde(
            spec in json_value(),
            label in json_value(),
            ws in proptest::sample::select(vec!["", " ", "\t", "\r\n "]),
            edit in proptest::option::of((0.0f64..1.0, 0..MUTATION_BYTES.len())),
        ) {
            let mut line = format!(
                r#"{{"type":"ADDED",{ws}"object":{{"metadata":{{"name":"a","uid":"u","resourceVersion":"1","labels":{ws}"#
            ).into_bytes();
            line.extend_from_slice(&label);
            line.extend_from_slice(format!(r#"{ws}}},"spec":"#).as_bytes());
            line.extend_from_slice(&spec);
            line.extend_from_slice(b"}}");
            same_as_serde(&line);
            if let Some((at, byte)) = edit {
                let i = ((line.len() as f64) * at) as usize;
                line[i] = MUTATION_BYTES[byte];
                same_as_serde(&line);
            }
        }
    }

    /// Bytes of a JSON value: literals, numbers (valid and at the edges of what serde reads),
    /// strings with escapes and UTF-8 (valid or not), arrays and objects nested a few deep.
    fn json_value() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let number = proptest::sample::select(vec![
            "0",
            "-0",
            "7",
            "-12",
            "1.5",
            "-0.25e-3",
            "1E400",
            "99999999999999999999",
            "2e+2",
        ])
        .prop_map(|n| n.as_bytes().to_vec());
        let valid: &[&[u8]] = &[
            b"a",
            b"Z",
            b" ",
            b"\\\"",
            b"\\\\",
            b"\\/",
            b"\\n",
            b"\\u00e9",
            b"\\ud83d\\ude00",
            b"\\ud800",
            "é".as_bytes(),
            "日本".as_bytes(),
            "😀".as_bytes(),
            b"abcdefgh",
        ];
        // Rare, so that most generated lines are valid and the rest fail in different places.
        let broken: &[&[u8]] = &[
            b"\xff",
            b"\xc3",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xe0\x80\x80",
            b"\x01",
        ];
        let piece = prop_oneof![
            40 => proptest::sample::select(valid.to_vec()),
            1 => proptest::sample::select(broken.to_vec()),
        ];
        let string = proptest::collection::vec(piece, 0..12).prop_map(|pieces| {
            let mut s = b"\"".to_vec();
            pieces.iter().for_each(|p| s.extend_from_slice(p));
            s.push(b'"');
            s
        });
        let leaf = prop_oneof![
            Just(b"null".to_vec()),
            Just(b"true".to_vec()),
            Just(b"false".to_vec()),
            number,
            string.clone(),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(|items| {
                    let mut s = b"[".to_vec();
                    s.extend_from_slice(&items.join(&b","[..]));
                    s.push(b']');
                    s
                }),
                proptest::collection::vec((string.clone(), inner), 0..6).prop_map(|members| {
                    let members: Vec<Vec<u8>> = members
                        .into_iter()
                        .map(|(k, v)| [k, b" : ".to_vec(), v].concat())
                        .collect();
                    let mut s = b"{".to_vec();
                    s.extend_from_slice(&members.join(&b","[..]));
                    s.push(b'}');
                    s
                }),
            ]
        })
    }
}
