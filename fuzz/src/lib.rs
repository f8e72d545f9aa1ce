//! The properties the fuzz targets check, shared with the proptest suite (`tests/fuzz_props.rs`
//! includes this file), so CI checks on every run what cargo-fuzz checks for hours.
//!
//! - [`check_watch_stream`]: a watch body cut into arbitrary chunks and read through the real
//!   [`LineStream`] (framing) and [`decode_line`] gives exactly what a line-by-line reference
//!   gives for the whole body, and nothing panics.
//! - [`check_escape_pair`]: subject token escaping is injective, uses only the allowed
//!   characters and decodes back to its input.
//! - [`check_message`]: the message builder turns any metadata into a valid subject (or refuses
//!   one that is too long) and header values NATS accepts, each decoding back to its input.
//!
//! Dependencies are limited to what the root crate's tests can also reach (`kube2nats`, `bytes`,
//! `futures-util`, `tokio`, `reqwest`, and `axum::http` for building a response), so the file
//! compiles in both places.

use bytes::Bytes;
use kube2nats::facade::escape_token;
use kube2nats::facade::{decode_line, decode_line_prefix};
use kube2nats::facade::{FrameError, OVERSIZED_PREFIX_BYTES};
use kube2nats::facade::{LineStream, StreamError};

/// What reading a watch body yields, item by item, in a form two runs can be compared by.
/// The list ends at the first framing error (the watcher drops the stream there).
pub type Items = Vec<String>;

/// Cuts `data` into chunks at the offsets given by `cuts` (each taken modulo the remaining
/// length, so any input is a valid chunking; a zero gives an empty chunk).
pub fn chunks(data: &[u8], cuts: &[u16]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut rest = data;
    for &cut in cuts {
        if rest.is_empty() {
            break;
        }
        let at = usize::from(cut) % (rest.len() + 1);
        out.push(Bytes::copy_from_slice(&rest[..at]));
        rest = &rest[at..];
    }
    out.push(Bytes::copy_from_slice(rest));
    out
}

/// The production path: the body delivered chunk by chunk to a [`LineStream`] (the watcher's
/// reader), each line decoded as `Machine::read_line` does — including its rule that an
/// unterminated last line that does not decode is a truncation, not garbage.
pub fn read_chunked(body: Vec<Bytes>, max_line_bytes: usize) -> Items {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async move {
        let stream = futures_util::stream::iter(body.into_iter().map(Ok::<_, std::io::Error>));
        let response = axum::http::Response::new(reqwest::Body::wrap_stream(stream));
        let mut lines = LineStream::new(reqwest::Response::from(response), max_line_bytes);
        let mut items = Vec::new();
        loop {
            match lines.next_line().await {
                Ok(Some(line)) => items.push(match line.oversized {
                    Some(line_bytes) => oversized(&line.bytes, line_bytes),
                    None => describe(&line.bytes, line.terminated),
                }),
                Ok(None) => return items,
                Err(StreamError::Frame(e)) => {
                    items.push(format!("frame error: {e}"));
                    return items;
                }
                Err(e @ (StreamError::Transport(_) | StreamError::BudgetSpent)) => {
                    panic!("no transport or budget in play: {e}")
                }
            }
        }
    })
}

/// The reference: the whole body split on `\n`; a line longer than `max_line_bytes` (counting
/// everything before its `\n`, as the limit protects the buffer) is reported by its first
/// `min(max_line_bytes, OVERSIZED_PREFIX_BYTES)` bytes and its length, and the stream goes on;
/// an unterminated tail over the limit ends it as a truncation; trailing `\r`s
/// are trimmed; empty lines are skipped; the part after the last `\n` is a final unterminated
/// line unless it is only whitespace.
pub fn read_reference(data: &[u8], max_line_bytes: usize) -> Items {
    let mut items = Vec::new();
    let mut parts: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    // `split` always yields one more part than there are newlines: the unterminated tail.
    let tail = parts.pop().unwrap_or_default();
    for raw in parts {
        if raw.len() > max_line_bytes {
            let cap = max_line_bytes.min(OVERSIZED_PREFIX_BYTES);
            items.push(oversized(&raw[..cap], raw.len()));
            continue;
        }
        let line = trim_cr(raw);
        if !line.is_empty() {
            items.push(describe(&Bytes::copy_from_slice(line), true));
        }
    }
    if tail.len() > max_line_bytes {
        let cut = FrameError::Truncated {
            leftover_bytes: tail.len(),
        };
        items.push(format!("frame error: {cut}"));
        return items;
    }
    let line = trim_cr(tail);
    if line.iter().any(|b| !b.is_ascii_whitespace()) {
        items.push(describe(&Bytes::copy_from_slice(line), false));
    }
    items
}

/// An over-long line as the watcher sees it: its length, its kept prefix, and the change that
/// prefix shows.
fn oversized(prefix: &[u8], line_bytes: usize) -> String {
    format!(
        "oversized {line_bytes} bytes: {:?} -> {:?}",
        String::from_utf8_lossy(prefix),
        decode_line_prefix(prefix, true)
    )
}

fn trim_cr(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\r'] = line {
        line = rest;
    }
    line
}

/// One line as the watcher sees it: the decoded event (type, metadata, the object's exact bytes,
/// the whole line) or the error, with `Machine::read_line`'s truncation rule applied.
fn describe(line: &Bytes, terminated: bool) -> String {
    match decode_line(line) {
        Ok(decoded) => format!("{decoded:?}"),
        Err(_) if !terminated => format!(
            "truncated: {}",
            FrameError::Truncated {
                leftover_bytes: line.len()
            }
        ),
        Err(e) => format!("decode error: {e}"),
    }
}

/// Checks the stream property for one body, chunking and limit; panics with both sides on a
/// difference.
pub fn check_watch_stream(data: &[u8], cuts: &[u16], max_line_bytes: usize) {
    let expected = read_reference(data, max_line_bytes);
    let got = read_chunked(chunks(data, cuts), max_line_bytes);
    assert_eq!(
        got, expected,
        "chunked read differs from the line-by-line reference\n  body: {:?}\n  cuts: {cuts:?}\n  max_line_bytes: {max_line_bytes}",
        String::from_utf8_lossy(data)
    );
}

pub fn escape(token: &str) -> String {
    let mut out = String::new();
    escape_token(token, &mut out);
    out
}

/// The decoder the subject documentation describes (`_` is `.`, `%XX` one byte, a lone `%` the
/// empty string, anything else itself); `None` if `token` is not something `escape` produces.
pub fn unescape(token: &str) -> Option<String> {
    if token == "%" {
        return Some(String::new());
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'_' => out.push(b'.'),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F')) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Checks one token: non-empty output made only of `[A-Za-z0-9-:_%]` (so no dot, wildcard or
/// whitespace can reach the subject), and it decodes back to the input.
pub fn check_escape(token: &str) -> String {
    let escaped = escape(token);
    assert!(!escaped.is_empty(), "{token:?} escapes to an empty token");
    if let Some(bad) = escaped
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | ':' | '_' | '%')))
    {
        panic!("{token:?} escapes to {escaped:?}, which holds {bad:?}");
    }
    assert_eq!(
        unescape(&escaped).as_deref(),
        Some(token),
        "{token:?} escapes to {escaped:?}, which does not decode back"
    );
    escaped
}

/// Injectivity on a pair: different tokens never escape alike (and equal ones do).
pub fn check_escape_pair(a: &str, b: &str) {
    let (ea, eb) = (check_escape(a), check_escape(b));
    assert_eq!(
        a == b,
        ea == eb,
        "{a:?} and {b:?} escape to {ea:?} and {eb:?}"
    );
}

/// A straightforward serde_json decoder of watch lines, the reference the single-pass scanner
/// must agree with (the decode unit tests, the proptests and the `decode_line` fuzz target all use
/// this one copy). One departure from plain derived structs: those accept a JSON array in place of
/// an object (`["ADDED",{…}]`), which no API server sends and kube2nats rejects as malformed; so
/// does this reference.
pub mod serde_reference {
    use std::borrow::Cow;

    use bytes::Bytes;
    use kube2nats::facade::{DecodeError, WatchLine, INITIAL_EVENTS_END_ANNOTATION};
    use kube2nats::facade::{EventType, ObjectEvent, ObjectMeta, ResourceVersion};
    use serde::Deserialize;
    use serde_json::value::RawValue;

    #[derive(Deserialize)]
    struct RawLine<'a> {
        #[serde(rename = "type")]
        event_type: &'a str,
        #[serde(borrow)]
        object: Option<&'a RawValue>,
    }

    #[derive(Deserialize)]
    struct ObjectHead<'a> {
        #[serde(borrow, default)]
        kind: Option<&'a str>,
        #[serde(borrow)]
        metadata: Option<MetaFields<'a>>,
    }

    /// What `#[derive(Deserialize)]` on these four `Option<Cow<str>>` fields did — unknown keys
    /// ignored (their values skipped as serde skips them), a repeated known key an error, `null`
    /// as absent — except that only a JSON object is accepted, not an array. (Reading `metadata`
    /// as a `RawValue` first would reject arrays too, but it also validates the UTF-8 of skipped
    /// strings, which the derived decoder does not.)
    struct MetaFields<'a> {
        uid: Option<Cow<'a, str>>,
        resource_version: Option<Cow<'a, str>>,
        name: Option<Cow<'a, str>>,
        namespace: Option<Cow<'a, str>>,
        /// The last `generation`, where it is an integer in `i64` range (anything else, or a
        /// repeat, is not an error: it only decides whether a change is news).
        generation: Option<i64>,
    }

    impl<'de: 'a, 'a> Deserialize<'de> for MetaFields<'a> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(MetaVisitor(std::marker::PhantomData))
        }
    }

    struct MetaVisitor<'a>(std::marker::PhantomData<&'a ()>);

    impl<'de: 'a, 'a> serde::de::Visitor<'de> for MetaVisitor<'a> {
        type Value = MetaFields<'a>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("object metadata")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            type Field<'a> = Option<Option<Cow<'a, str>>>;
            let (mut uid, mut rv, mut name, mut namespace): (Field, Field, Field, Field) =
                (None, None, None, None);
            let mut generation = None;
            while let Some(key) = map.next_key::<String>()? {
                let (slot, field) = match key.as_str() {
                    "generation" => {
                        generation = map.next_value::<serde_json::Value>()?.as_i64();
                        continue;
                    }
                    "uid" => (&mut uid, "uid"),
                    "resourceVersion" => (&mut rv, "resourceVersion"),
                    "name" => (&mut name, "name"),
                    "namespace" => (&mut namespace, "namespace"),
                    _ => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        continue;
                    }
                };
                if slot.is_some() {
                    return Err(serde::de::Error::duplicate_field(field));
                }
                *slot = Some(map.next_value::<Option<Cow<'a, str>>>()?);
            }
            Ok(MetaFields {
                uid: uid.flatten(),
                resource_version: rv.flatten(),
                name: name.flatten(),
                namespace: namespace.flatten(),
                generation,
            })
        }
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

    /// A JSON array where a struct is expected: malformed here, as in kube2nats.
    fn array_error(json: &[u8]) -> Option<DecodeError> {
        let first = json.iter().find(|b| !b.is_ascii_whitespace())?;
        (*first == b'[').then(|| {
            DecodeError::Malformed(serde::de::Error::custom("an array where an object belongs"))
        })
    }

    pub fn decode_line(line: &Bytes) -> Result<WatchLine, DecodeError> {
        let raw: RawLine = serde_json::from_slice(line).map_err(DecodeError::Malformed)?;
        if let Some(e) = array_error(line) {
            return Err(e);
        }
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

    pub fn decode_object_meta(object: &[u8]) -> Result<(ObjectMeta, bool), DecodeError> {
        let head: ObjectHead = serde_json::from_slice(object).map_err(DecodeError::Malformed)?;
        if let Some(e) = array_error(object) {
            return Err(e);
        }
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
                generation: meta.generation,
            },
            head.kind.is_some(),
        ))
    }
}

/// What a decode came to, comparable across decoders: the whole result, except that malformed
/// JSON is one outcome whatever the parser's message.
fn outcome(result: Result<kube2nats::facade::WatchLine, kube2nats::facade::DecodeError>) -> String {
    use kube2nats::facade::DecodeError;
    match result {
        Ok(line) => format!("{line:?}"),
        Err(DecodeError::Malformed(_)) => "malformed".into(),
        Err(e) => e.to_string(),
    }
}

/// Differential check of one line: kube2nats' `decode_line` and `decode_object_meta` agree with
/// the serde reference.
pub fn check_decode_line(line: &[u8]) {
    let bytes = Bytes::copy_from_slice(line);
    assert_eq!(
        outcome(decode_line(&bytes)),
        outcome(serde_reference::decode_line(&bytes)),
        "decode_line differs from the serde reference on {:?}",
        String::from_utf8_lossy(line)
    );
    let ours = kube2nats::facade::decode_object_meta(line);
    let reference = serde_reference::decode_object_meta(line);
    let meta = |r: Result<
        (kube2nats::facade::ObjectMeta, bool),
        kube2nats::facade::DecodeError,
    >| match r {
        Ok(m) => format!("{m:?}"),
        Err(kube2nats::facade::DecodeError::Malformed(_)) => "malformed".into(),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        meta(ours),
        meta(reference),
        "decode_object_meta differs from the serde reference on {:?}",
        String::from_utf8_lossy(line)
    );
}

// ---------------------------------------------------------------------------------------------
// The message builder: subject and headers from hostile metadata.

/// Object metadata as an API server (or something pretending to be one) may send it: any string
/// in every field.
#[derive(Debug, Clone)]
pub struct HostileMeta {
    pub name: String,
    pub namespace: Option<String>,
    pub uid: String,
    pub resource_version: String,
    pub kind: String,
    pub group: String,
}

/// Builds the message for `meta` with the default template and checks what a subscriber and the
/// NATS protocol rely on, without panicking anywhere:
/// - a message is refused only for a subject over `MAX_SUBJECT_BYTES`, and never built with one;
/// - the subject is a valid publish subject with exactly the template's 7 tokens, none empty,
///   no wildcard or whitespace, and its name token decodes back to the name;
/// - every header value is accepted by NATS (no CR/LF) and decodes back to its input by the
///   documented header rule (decode exactly when it holds `%`);
/// - every CloudEvents header value is printable ASCII without space or `"`, and `ce-subject`
///   and `ce-id` percent-decode back to the name and the unescaped message id.
pub fn check_message(meta: &HostileMeta) {
    use kube2nats::facade::SubjectTemplate;
    use kube2nats::facade::{
        header, BuildError, MessageBuilder, MessageSpec, Origin, Synthesis, MAX_SUBJECT_BYTES,
    };
    use kube2nats::facade::{EventType, ObjectEvent, ObjectMeta, ResourceInfo, ResourceVersion};
    use kube2nats::facade::{MessageFormat, PayloadMode};

    let builder = MessageBuilder::new(MessageSpec {
        watch: "widgets".into(),
        subject: SubjectTemplate::default(),
        prefix: "kube".into(),
        cluster: String::new(),
        resource: ResourceInfo {
            group: meta.group.clone(),
            version: "v1".into(),
            plural: "widgets".into(),
            kind: meta.kind.clone(),
            namespaced: meta.namespace.is_some(),
        },
        payload: PayloadMode::Object,
        format: MessageFormat::CloudEvents,
    });
    let event = ObjectEvent {
        event_type: EventType::Modified,
        meta: ObjectMeta {
            uid: meta.uid.as_str().into(),
            resource_version: ResourceVersion::new(meta.resource_version.as_str()),
            name: meta.name.as_str().into(),
            namespace: meta.namespace.as_deref().map(Into::into),
            generation: None,
        },
        object: Bytes::from_static(b"{}"),
        watch_line: None,
    };
    let message = match builder.build(&event, Origin::Synthesized(Synthesis::Relist)) {
        Ok(message) => message,
        Err(BuildError::SubjectTooLong { bytes }) => {
            assert!(
                bytes > MAX_SUBJECT_BYTES,
                "refused a subject of {bytes} bytes"
            );
            return;
        }
        Err(e @ BuildError::HeaderValue { .. }) => panic!("{e}"),
    };
    let subject = message.subject.as_str();
    assert!(
        subject.len() <= MAX_SUBJECT_BYTES,
        "{subject:?} is too long"
    );
    assert!(
        !subject.contains(|c: char| c.is_whitespace() || c.is_control() || c == '*' || c == '>'),
        "{subject:?} holds whitespace or a wildcard"
    );
    let tokens: Vec<&str> = subject.split('.').collect();
    assert_eq!(
        tokens.len(),
        7,
        "{subject:?} does not have the template's tokens"
    );
    assert!(
        tokens.iter().all(|t| !t.is_empty()),
        "{subject:?} has an empty token"
    );
    assert_eq!(
        unescape(tokens[5]).as_deref(),
        Some(meta.name.as_str()),
        "{subject:?}"
    );

    // Each header, and the input it must decode back to (`None`: composed, any value).
    let expected = [
        (header::NAME, Some(&meta.name)),
        (header::UID, Some(&meta.uid)),
        (header::RESOURCE_VERSION, Some(&meta.resource_version)),
        (header::KIND, Some(&meta.kind)),
        (header::NAMESPACE, meta.namespace.as_ref()),
        (header::MSG_ID, None),
        (header::API_VERSION, None),
    ];
    for (name, want) in expected {
        let Some(value) = message.headers.get(&name).map(str::to_owned) else {
            assert!(want.is_none(), "no header {name:?}");
            continue;
        };
        assert!(
            !value.bytes().any(|b| b.is_ascii_control()),
            "{name:?} = {value:?} holds a control character NATS refuses"
        );
        let decoded = if value.contains('%') {
            unescape(&value).unwrap_or_else(|| panic!("{name:?} = {value:?} does not decode"))
        } else {
            value.clone()
        };
        if let Some(want) = want {
            assert_eq!(&decoded, want, "{name:?} = {value:?}");
        }
    }
    check_cloudevents_headers(&message, meta);
}

/// The CloudEvents part of [`check_message`].
fn check_cloudevents_headers(message: &kube2nats::facade::OutMessage, meta: &HostileMeta) {
    use kube2nats::facade::cloudevents_header as ce;
    for (name, value) in message.headers.iter() {
        if !name.starts_with("ce-") {
            continue;
        }
        assert!(
            value
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b'"'),
            "{name} = {value:?} is not encoded by the binding's rule"
        );
    }
    let decoded = |name| {
        let value = message
            .headers
            .get(name)
            .unwrap_or_else(|| panic!("missing CloudEvents header"))
            .to_owned();
        percent_decode(&value).unwrap_or_else(|| panic!("{value:?} does not percent-decode"))
    };
    assert_eq!(decoded(ce::SUBJECT), meta.name);
    let id = format!("widgets:{}:{}", meta.uid, meta.resource_version);
    assert_eq!(decoded(ce::ID), id);
}

/// One round of percent-decoding into UTF-8, as a CloudEvents reader does.
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
