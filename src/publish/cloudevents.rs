//! CloudEvents attributes for a message, so that CloudEvents consumers (Knative, Argo Events,
//! Dapr, the CloudEvents SDKs) read kube2nats' messages as events without an adapter.
//!
//! A watch with `format = "cloudevents"` adds the attributes to its native headers in the binary
//! content mode of the CloudEvents NATS protocol binding: each attribute is a header named
//! `ce-{attribute}`, the payload is the event's `data` unchanged, and the `Kube-*` headers and
//! `Nats-Msg-Id` stay, so native subscribers and JetStream's de-duplication work as they do on
//! native messages.
//!
//! | header               | value                                                                 |
//! |----------------------|-----------------------------------------------------------------------|
//! | `ce-specversion`     | `1.0`                                                                 |
//! | `ce-id`              | the `Nats-Msg-Id`: `{watch}:{uid}:{resourceVersion}[:DELETED]`        |
//! | `ce-source`          | `[/clusters/{cluster}]/api/v1/namespaces/{namespace}/pods` — the API path of the object's collection, led by `publish.cluster` when set |
//! | `ce-subject`         | the object's name                                                     |
//! | `ce-type`            | `io.k8s.{group}.{version}.{resource}.{added\|modified\|deleted}`, group `core` for the core group |
//! | `ce-time`            | when kube2nats received the change (RFC 3339, UTC, milliseconds)      |
//! | `ce-datacontenttype` | `application/json`                                                    |
//! | `content-type`       | `application/json`                                                    |
//!
//! `ce-id` is the message id on purpose: an object version published again (after a restart or a
//! relist) has the same id, so a consumer de-duplicates CloudEvents by `source` + `id` exactly as
//! JetStream de-duplicates messages by `Nats-Msg-Id`. `ce-time` is the time of receipt because a
//! watch event carries no time of its own; a re-publish therefore keeps its id but may differ in
//! time.
//!
//! The binding maps `datacontenttype` to `ce-datacontenttype`; SDKs that read binary mode the way
//! the HTTP binding does (the Go SDK's JetStream binding, the Python SDK's `from_binary`) take it
//! from `content-type` instead. Both carry the same value, so either reader gets it, and neither is
//! `application/cloudevents…`, which would mean structured mode.
//!
//! Header values are percent-encoded as the binding requires (space, `"`, `%` and everything
//! outside printable ASCII as `%XX` of the UTF-8 bytes); the common value needs no encoding and is
//! not copied. Everything that does not vary per event (`ce-type` per event type, the parts of
//! `ce-source`) is built once per watch.

use std::borrow::Cow;
use std::time::SystemTime;

use async_nats::header::SerializedHeadersBuilder;
use async_nats::HeaderName;

use crate::event::{EventType, ObjectMeta, ResourceInfo};
use crate::publish::header_block::{append_header, BuildError};

/// Header names, spelled in lower case as the binding writes them (the Go SDK matches
/// `content-type` case-sensitively).
pub mod header {
    use async_nats::HeaderName;

    pub(crate) const SPECVERSION: HeaderName = HeaderName::from_static("ce-specversion");
    pub const ID: HeaderName = HeaderName::from_static("ce-id");
    pub(crate) const SOURCE: HeaderName = HeaderName::from_static("ce-source");
    pub(crate) const TYPE: HeaderName = HeaderName::from_static("ce-type");
    pub const SUBJECT: HeaderName = HeaderName::from_static("ce-subject");
    pub(crate) const TIME: HeaderName = HeaderName::from_static("ce-time");
    pub(crate) const DATACONTENTTYPE: HeaderName = HeaderName::from_static("ce-datacontenttype");
    pub(crate) const CONTENT_TYPE: HeaderName = HeaderName::from_static("content-type");
}

/// The CloudEvents version kube2nats speaks.
pub(crate) const SPECVERSION: &str = "1.0";

/// Every payload kube2nats publishes is JSON (the watch event or the object).
pub(crate) const DATA_CONTENT_TYPE: &str = "application/json";

/// The reverse-DNS head of every `ce-type`: the events are Kubernetes' own.
pub(crate) const TYPE_PREFIX: &str = "io.k8s";

/// The per-watch parts of the attributes, built once.
#[derive(Debug, Clone)]
pub(crate) struct Attributes {
    /// `ce-type` by event type, in the order of [`EventType::ALL`].
    types: [String; 3],
    /// `ce-source` up to the namespace: the cluster and the API group and version,
    /// e.g. `/clusters/eu/apis/apps/v1`, already encoded for a header.
    source_head: String,
    /// `ce-source` after the namespace: `/{resource}`.
    source_tail: String,
}

impl Attributes {
    /// The parts for one watch of `resource` in `cluster` (`""`: no cluster named).
    pub(crate) fn new(cluster: &str, resource: &ResourceInfo) -> Attributes {
        let types = EventType::ALL.map(|t| {
            format!(
                "{TYPE_PREFIX}.{}.{}.{}.{}",
                resource.group_token(),
                resource.version,
                resource.plural,
                t.as_subject_token()
            )
        });
        let mut source_head = String::new();
        if !cluster.is_empty() {
            source_head.push_str("/clusters/");
            uri_segment(cluster, &mut source_head);
        }
        if resource.group.is_empty() {
            source_head.push_str("/api/");
        } else {
            source_head.push_str("/apis/");
            source_head.push_str(&resource.group);
            source_head.push('/');
        }
        source_head.push_str(&resource.version);
        Attributes {
            types: types.map(|t| header_value(&t).into_owned()),
            source_head: header_value(&source_head).into_owned(),
            source_tail: header_value(&format!("/{}", resource.plural)).into_owned(),
        }
    }

    /// The attributes of one event: `id` is its `Nats-Msg-Id` (unencoded), `received` the time
    /// kube2nats received it.
    pub(crate) fn values<'a>(
        &'a self,
        meta: &'a ObjectMeta,
        event_type: EventType,
        id: &'a str,
        received: SystemTime,
    ) -> Values<'a> {
        Values {
            id: header_value(id),
            source: self.source(meta.namespace.as_deref()),
            event_type: self.type_of(event_type),
            subject: header_value(&meta.name),
            time: Time::of(received),
        }
    }

    fn type_of(&self, event_type: EventType) -> &str {
        match event_type {
            EventType::Added => &self.types[0],
            EventType::Modified => &self.types[1],
            EventType::Deleted => &self.types[2],
        }
    }

    /// `ce-source` of an object in `namespace` (`None`: cluster-scoped). A namespace is a
    /// DNS-1123 label, so it needs no encoding.
    fn source(&self, namespace: Option<&str>) -> String {
        const NAMESPACES: &str = "/namespaces/";
        let ns = namespace.unwrap_or_default();
        let mut source = String::with_capacity(
            self.source_head.len() + NAMESPACES.len() + ns.len() + self.source_tail.len(),
        );
        source.push_str(&self.source_head);
        if let Some(ns) = namespace {
            source.push_str(NAMESPACES);
            source.push_str(&header_value(ns));
        }
        source.push_str(&self.source_tail);
        source
    }
}

/// The attributes of one event, encoded for headers.
pub(crate) struct Values<'a> {
    id: Cow<'a, str>,
    source: String,
    event_type: &'a str,
    subject: Cow<'a, str>,
    time: Time,
}

impl Values<'_> {
    fn headers(&self) -> [(HeaderName, &str); 8] {
        [
            (header::SPECVERSION, SPECVERSION),
            (header::ID, &self.id),
            (header::SOURCE, &self.source),
            (header::TYPE, self.event_type),
            (header::SUBJECT, &self.subject),
            (header::TIME, self.time.as_str()),
            (header::DATACONTENTTYPE, DATA_CONTENT_TYPE),
            (header::CONTENT_TYPE, DATA_CONTENT_TYPE),
        ]
    }

    /// The bytes of their header lines.
    pub(crate) fn wire_len(&self) -> usize {
        self.headers()
            .iter()
            .map(|(name, value)| {
                AsRef::<str>::as_ref(name).len() + ": ".len() + value.len() + "\r\n".len()
            })
            .sum()
    }

    /// Appends their header lines to `block`.
    pub(crate) fn append(&self, block: &mut SerializedHeadersBuilder) -> Result<(), BuildError> {
        for (name, value) in self.headers() {
            append_header(block, &name, value)?;
        }
        Ok(())
    }
}

/// `ce-time`, formatted on the stack: RFC 3339, UTC, milliseconds.
struct Time {
    bytes: [u8; 32],
    len: usize,
}

impl Time {
    fn of(at: SystemTime) -> Time {
        use std::io::Write;
        let mut bytes = [0u8; 32];
        let mut out = &mut bytes[..];
        // 24 bytes up to the year 9999, which is as far as humantime formats.
        let written = write!(out, "{}", humantime::format_rfc3339_millis(at));
        let len = if written.is_ok() { 32 - out.len() } else { 0 };
        Time { bytes, len }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// Whether the binding requires `byte` to be percent-encoded in a header value: space, `"`, `%`
/// and everything outside printable ASCII (U+0021–U+007E).
fn needs_encoding(byte: u8) -> bool {
    !(0x21..=0x7e).contains(&byte) || byte == b'"' || byte == b'%'
}

/// A header value by the binding's rule: `raw` itself when nothing needs encoding, otherwise
/// every byte that does (of the UTF-8 encoding) as `%XX`, upper-case.
pub(crate) fn header_value(raw: &str) -> Cow<'_, str> {
    if !raw.bytes().any(needs_encoding) {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 16);
    for byte in raw.bytes() {
        if needs_encoding(byte) {
            push_percent(byte, &mut out);
        } else {
            out.push(char::from(byte));
        }
    }
    Cow::Owned(out)
}

/// Appends `value` as one URI path segment: unreserved characters (RFC 3986) as they are, every
/// other byte `%XX`, so that a cluster name can never add a segment or a query.
fn uri_segment(value: &str, out: &mut String) {
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            push_percent(byte, out);
        }
    }
}

fn push_percent(byte: u8, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0xf)]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ResourceVersion;

    fn resource(group: &str, plural: &str) -> ResourceInfo {
        ResourceInfo {
            group: group.into(),
            version: "v1".into(),
            plural: plural.into(),
            kind: "Kind".into(),
            namespaced: true,
        }
    }

    fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            uid: "u1".into(),
            resource_version: ResourceVersion::new("7"),
            name: name.into(),
            namespace: namespace.map(Into::into),
            generation: None,
        }
    }

    fn headers(
        attrs: &Attributes,
        meta: &ObjectMeta,
        t: EventType,
        id: &str,
    ) -> Vec<(String, String)> {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        let values = attrs.values(meta, t, id, at);
        let mut block = async_nats::header::SerializedHeaders::builder(values.wire_len());
        values.append(&mut block).unwrap();
        let block = block.finish();
        assert_eq!(block.len(), "NATS/1.0\r\n\r\n".len() + values.wire_len());
        let mut out: Vec<(String, String)> = block
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn attributes_of_a_namespaced_core_object() {
        let attrs = Attributes::new("", &resource("", "pods"));
        let got = headers(
            &attrs,
            &meta("web-1", Some("default")),
            EventType::Modified,
            "pods:u1:7",
        );
        let want = [
            ("ce-datacontenttype", "application/json"),
            ("ce-id", "pods:u1:7"),
            ("ce-source", "/api/v1/namespaces/default/pods"),
            ("ce-specversion", "1.0"),
            ("ce-subject", "web-1"),
            ("ce-time", "2023-11-14T22:13:20.123Z"),
            ("ce-type", "io.k8s.core.v1.pods.modified"),
            ("content-type", "application/json"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(got, want);
    }

    #[test]
    fn source_names_the_cluster_and_group_and_skips_the_namespace_of_cluster_scoped_objects() {
        let attrs = Attributes::new(
            "eu west/1",
            &resource("rbac.authorization.k8s.io", "clusterroles"),
        );
        let got = headers(
            &attrs,
            &meta("system:controller:x", None),
            EventType::Deleted,
            "roles:u1:7:DELETED",
        );
        let get = |k: &str| got.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        // The cluster is one URI segment (`%20`, `%2F`), whose `%` the header rule encodes again.
        assert_eq!(
            get("ce-source"),
            Some("/clusters/eu%2520west%252F1/apis/rbac.authorization.k8s.io/v1/clusterroles")
        );
        assert_eq!(
            get("ce-type"),
            Some("io.k8s.rbac.authorization.k8s.io.v1.clusterroles.deleted")
        );
        assert_eq!(get("ce-subject"), Some("system:controller:x"));
    }

    /// Values from the API server are encoded by the binding's rule; a plain value is borrowed.
    #[test]
    fn header_values_are_percent_encoded_by_the_binding_rule() {
        for (raw, want) in [
            ("web-1", "web-1"),
            ("a b", "a%20b"),
            ("50%", "50%25"),
            ("say \"hi\"", "say%20%22hi%22"),
            ("line\r\nbreak", "line%0D%0Abreak"),
            ("Euro € 😀", "Euro%20%E2%82%AC%20%F0%9F%98%80"),
            ("~!#$&'()*+,/:;=?@[]^_`{|}", "~!#$&'()*+,/:;=?@[]^_`{|}"),
        ] {
            assert_eq!(header_value(raw), want, "{raw:?}");
        }
        assert!(matches!(header_value("web-1"), Cow::Borrowed(_)));
    }
}
