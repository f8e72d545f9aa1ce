//! Turning one event into one NATS message: subject, headers and payload, exactly as DESIGN.md
//! promises subscribers.
//!
//! # Header values
//!
//! Header values come from the API server (names, namespaces, uids, versions, kinds), and NATS
//! refuses a value holding CR or LF (async-nats panics on one; RBAC object names may hold both).
//! So a value holding `%` or any ASCII control character is escaped as a whole by the subject
//! token rule ([`escape_token`]: `.` → `_`, bytes outside `[A-Za-z0-9-:]` → `%XX`); every other
//! value is sent verbatim. A subscriber decodes a header value exactly when it contains `%`:
//! verbatim values never do, escaped ones always do, so the rule stays injective.
//!
//! # Subject length
//!
//! nats-server closes a connection whose protocol line exceeds its `max_control_line` (4 KiB by
//! default), and every watch shares that connection. An escaped name can be several times longer
//! than the name itself, so a subject over [`MAX_SUBJECT_BYTES`] is refused here, before it can
//! reach the connection.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

use crate::config::PayloadMode;
use crate::event::{EventType, ObjectEvent, ObjectMeta, ResourceInfo};
use crate::subject::{escape_token, SubjectFields, SubjectTemplate};

/// Header names: a public interface. Built at compile time, so per message only the values are
/// allocated.
pub mod header {
    use async_nats::HeaderName;

    pub const EVENT_TYPE: HeaderName = HeaderName::from_static("Kube-Event-Type");
    pub const RESOURCE_VERSION: HeaderName = HeaderName::from_static("Kube-Resource-Version");
    pub const UID: HeaderName = HeaderName::from_static("Kube-Uid");
    pub const NAMESPACE: HeaderName = HeaderName::from_static("Kube-Namespace");
    pub const NAME: HeaderName = HeaderName::from_static("Kube-Name");
    pub const KIND: HeaderName = HeaderName::from_static("Kube-Kind");
    pub const API_VERSION: HeaderName = HeaderName::from_static("Kube-Api-Version");
    pub const SYNTHESIZED: HeaderName = HeaderName::from_static("Kube-Synthesized");
    pub const MSG_ID: HeaderName = HeaderName::from_static("Nats-Msg-Id");
    pub const PAYLOAD: HeaderName = HeaderName::from_static("Kube-Payload");
}

/// The value of `Kube-Payload` on a message whose object was cut to its metadata (too large).
pub const PAYLOAD_TRUNCATED: &str = "truncated";

/// The value of `Kube-Synthesized` on events derived from a list rather than received.
pub const SYNTHESIZED_RELIST: &str = "relist";

/// The longest subject kube2nats publishes: nats-server's default `max_control_line` (4096 bytes)
/// less room for the rest of an `HPUB` line (verb, a JetStream reply inbox, two sizes).
pub const MAX_SUBJECT_BYTES: usize = 3840;

/// Why an event cannot become a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("subject of {bytes} bytes exceeds the limit of {MAX_SUBJECT_BYTES} (nats-server's max_control_line)")]
    SubjectTooLong { bytes: usize },
}

/// A header value NATS accepts, by the rule in the module docs: verbatim unless it holds `%` or
/// an ASCII control character, then escaped whole as a subject token.
pub fn header_value(raw: &str) -> Cow<'_, str> {
    if raw.bytes().any(|b| b == b'%' || b.is_ascii_control()) {
        let mut escaped = String::with_capacity(raw.len() + 8);
        escape_token(raw, &mut escaped);
        Cow::Owned(escaped)
    } else {
        Cow::Borrowed(raw)
    }
}

/// One message ready to publish.
#[derive(Debug, Clone)]
pub struct OutMessage {
    pub subject: String,
    pub headers: async_nats::HeaderMap,
    pub payload: Bytes,
    pub event_type: EventType,
    /// Groups the messages of one name (namespace and name), so that two of them are never in
    /// flight at once: per-name order then holds through publish retries, also between a deleted
    /// object and its recreation under the same name (another uid), and per-object order with it.
    pub object_key: u64,
}

impl OutMessage {
    /// The bytes NATS counts against its `max_payload`: the payload and the header block.
    pub fn wire_len(&self) -> usize {
        const FRAMING: usize = "NATS/1.0\r\n".len() + "\r\n".len();
        let headers: usize = self
            .headers
            .iter()
            .map(|(name, values)| {
                values
                    .iter()
                    .map(|v| {
                        AsRef::<str>::as_ref(name).len()
                            + ": ".len()
                            + v.as_str().len()
                            + "\r\n".len()
                    })
                    .sum::<usize>()
            })
            .sum();
        self.payload.len() + FRAMING + headers
    }
}

/// How one watch names and shapes its messages; built once per watch.
#[derive(Debug, Clone)]
pub struct MessageBuilder {
    /// The configured watch's name: the first part of every `Nats-Msg-Id`.
    pub watch: String,
    pub template: SubjectTemplate,
    pub prefix: String,
    pub cluster: String,
    pub resource: ResourceInfo,
    pub api_version: String,
    pub payload: PayloadMode,
}

impl MessageBuilder {
    pub fn new(
        watch: String,
        template: SubjectTemplate,
        prefix: String,
        cluster: String,
        resource: ResourceInfo,
        payload: PayloadMode,
    ) -> MessageBuilder {
        let api_version = resource.api_version();
        MessageBuilder {
            watch,
            template,
            prefix,
            cluster,
            resource,
            api_version,
            payload,
        }
    }

    /// The message for `event`; `synthesized` marks events derived from a list. Refused when its
    /// subject would be longer than the NATS server accepts.
    pub fn build(&self, event: &ObjectEvent, synthesized: bool) -> Result<OutMessage, BuildError> {
        let meta = &event.meta;
        let mut subject = String::with_capacity(96);
        self.template.render(
            &SubjectFields {
                prefix: &self.prefix,
                cluster: &self.cluster,
                group: self.resource.group_token(),
                version: &self.resource.version,
                resource: &self.resource.plural,
                namespace: meta.namespace.as_deref(),
                name: &meta.name,
                event_type: event.event_type,
            },
            &mut subject,
        );
        if subject.len() > MAX_SUBJECT_BYTES {
            return Err(BuildError::SubjectTooLong {
                bytes: subject.len(),
            });
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(header::EVENT_TYPE, event.event_type.as_str());
        // Every value from outside the process goes through `header_value`.
        let mut insert = |name, raw: &str| headers.insert(name, header_value(raw).as_ref());
        insert(header::RESOURCE_VERSION, meta.resource_version.as_str());
        insert(header::UID, &meta.uid);
        if let Some(ns) = &meta.namespace {
            insert(header::NAMESPACE, ns);
        }
        insert(header::NAME, &meta.name);
        insert(header::KIND, &self.resource.kind);
        insert(header::API_VERSION, &self.api_version);
        insert(header::MSG_ID, &msg_id(&self.watch, meta, event.event_type));
        if synthesized {
            headers.insert(header::SYNTHESIZED, SYNTHESIZED_RELIST);
        }
        Ok(OutMessage {
            subject,
            headers,
            payload: self.payload(event),
            event_type: event.event_type,
            object_key: name_key(meta),
        })
    }

    /// The message for an object too large to publish whole: its metadata only (as for a
    /// vanished object), in the watch's payload mode, marked `Kube-Payload: truncated`, so
    /// subscribers learn that it changed and can fetch it.
    pub fn truncated(
        &self,
        event: &ObjectEvent,
        synthesized: bool,
    ) -> Result<OutMessage, BuildError> {
        let meta_only = ObjectEvent {
            event_type: event.event_type,
            meta: event.meta.clone(),
            object: self.vanished_object(&event.meta),
            watch_line: None,
        };
        let mut message = self.build(&meta_only, synthesized)?;
        message.headers.insert(header::PAYLOAD, PAYLOAD_TRUNCATED);
        Ok(message)
    }

    fn payload(&self, event: &ObjectEvent) -> Bytes {
        match (self.payload, &event.watch_line) {
            (PayloadMode::Object, _) => event.object.clone(),
            (PayloadMode::Event | PayloadMode::Metadata, Some(line)) => line.clone(),
            (PayloadMode::Event | PayloadMode::Metadata, None) => {
                wrap_event(event.event_type, &event.object)
            }
        }
    }

    /// The minimal object announced for an object that vanished during a gap: `apiVersion`,
    /// `kind` and the metadata kube2nats remembers.
    pub fn vanished_object(&self, meta: &ObjectMeta) -> Bytes {
        let mut metadata = serde_json::json!({
            "name": meta.name,
            "uid": meta.uid,
            "resourceVersion": meta.resource_version.as_str(),
        });
        if let Some(ns) = &meta.namespace {
            metadata["namespace"] = ns.as_str().into();
        }
        let object = serde_json::json!({
            "apiVersion": self.api_version,
            "kind": self.resource.kind,
            "metadata": metadata,
        });
        Bytes::from(object.to_string())
    }
}

/// `Nats-Msg-Id`: `{watch}:{uid}:{resourceVersion}` for ADDED and MODIFIED, with `:DELETED`
/// appended for deletions. It names one object version as one watch publishes it, whatever the
/// type it is published with: a version re-listed after a crash (as ADDED or MODIFIED) has the same
/// id as when it was first published, so JetStream drops it within its duplicate window, even from
/// another replica. A deletion is a distinct message with the last known version.
pub fn msg_id(watch: &str, meta: &ObjectMeta, event_type: EventType) -> String {
    const DELETED: &str = ":DELETED";
    let (uid, rv) = (meta.uid.as_str(), meta.resource_version.as_str());
    let mut id = String::with_capacity(watch.len() + uid.len() + rv.len() + 2 + DELETED.len());
    id.push_str(watch);
    id.push(':');
    id.push_str(uid);
    id.push(':');
    id.push_str(rv);
    if event_type == EventType::Deleted {
        id.push_str(DELETED);
    }
    id
}

/// `{"type":"ADDED","object":…}` around an object that did not arrive as a watch line.
fn wrap_event(event_type: EventType, object: &[u8]) -> Bytes {
    const HEAD: &[u8] = b"{\"type\":\"";
    const MID: &[u8] = b"\",\"object\":";
    let t = event_type.as_str().as_bytes();
    let mut out = BytesMut::with_capacity(HEAD.len() + t.len() + MID.len() + object.len() + 1);
    out.put_slice(HEAD);
    out.put_slice(t);
    out.put_slice(MID);
    out.put_slice(object);
    out.put_u8(b'}');
    out.freeze()
}

fn name_key(meta: &ObjectMeta) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    if let Some(ns) = &meta.namespace {
        h.write(ns.as_bytes());
    }
    // A separator no name holds, so ("ab", "c") and ("a", "bc") differ.
    h.write_u8(0xff);
    h.write(meta.name.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ResourceVersion;

    fn builder(payload: PayloadMode) -> MessageBuilder {
        MessageBuilder::new(
            "pods".into(),
            SubjectTemplate::parse(
                "{prefix}.{group}.{version}.{resource}.{namespace}.{name}.{type}",
            )
            .unwrap(),
            "kube".into(),
            String::new(),
            ResourceInfo {
                group: String::new(),
                version: "v1".into(),
                plural: "pods".into(),
                kind: "Pod".into(),
                namespaced: true,
            },
            payload,
        )
    }

    fn event(line: Option<&'static [u8]>) -> ObjectEvent {
        ObjectEvent {
            event_type: EventType::Modified,
            meta: ObjectMeta {
                uid: "u1".into(),
                resource_version: ResourceVersion::new("7"),
                name: "web.1".into(),
                namespace: Some("default".into()),
                generation: None,
            },
            object: Bytes::from_static(br#"{"metadata":{}}"#),
            watch_line: line.map(Bytes::from_static),
        }
    }

    #[test]
    fn subject_and_headers() {
        let m = builder(PayloadMode::Event)
            .build(&event(None), true)
            .unwrap();
        assert_eq!(m.subject, "kube.core.v1.pods.default.web_1.modified");
        let h = |k: async_nats::HeaderName| m.headers.get(k).map(|v| v.as_str().to_owned());
        assert_eq!(h(header::EVENT_TYPE).as_deref(), Some("MODIFIED"));
        assert_eq!(h(header::MSG_ID).as_deref(), Some("pods:u1:7"));
        assert_eq!(h(header::NAMESPACE).as_deref(), Some("default"));
        assert_eq!(h(header::KIND).as_deref(), Some("Pod"));
        assert_eq!(h(header::API_VERSION).as_deref(), Some("v1"));
        assert_eq!(h(header::SYNTHESIZED).as_deref(), Some("relist"));
        assert_eq!(
            &m.payload[..],
            br#"{"type":"MODIFIED","object":{"metadata":{}}}"#
        );
    }

    /// A truncated message keeps subject and headers, adds `Kube-Payload: truncated`, and carries
    /// only the metadata; `wire_len` counts what NATS counts.
    #[test]
    fn truncated_messages_carry_metadata_only() {
        let b = builder(PayloadMode::Event);
        let mut big = event(None);
        big.object = Bytes::from(format!(
            r#"{{"metadata":{{}},"data":"{}"}}"#,
            "x".repeat(4096)
        ));
        let whole = b.build(&big, false).unwrap();
        let cut = b.truncated(&big, false).unwrap();
        assert_eq!(cut.subject, whole.subject);
        assert_eq!(
            cut.headers.get(header::PAYLOAD).map(|v| v.as_str()),
            Some("truncated")
        );
        assert_eq!(
            cut.headers.get(header::MSG_ID),
            whole.headers.get(header::MSG_ID)
        );
        let payload: serde_json::Value = serde_json::from_slice(&cut.payload).unwrap();
        assert_eq!(payload["type"], "MODIFIED");
        assert_eq!(payload["object"]["metadata"]["name"], "web.1");
        assert_eq!(payload["object"]["metadata"]["resourceVersion"], "7");
        assert_eq!(payload["object"]["kind"], "Pod");
        assert!(cut.wire_len() < 1024 && whole.wire_len() > 4096);
    }

    /// The DELETED of an old uid and the ADDED of a new uid under the same name share a key, so
    /// the outbox never has both in flight and a retry cannot put the ADDED first.
    #[test]
    fn a_recreated_name_shares_the_key_of_the_deleted_object() {
        let b = builder(PayloadMode::Event);
        let old = event(None);
        let mut new = event(None);
        new.meta.uid = "u2".into();
        new.event_type = EventType::Added;
        let mut other = event(None);
        other.meta.name = "web.2".into();
        let key = |e: &ObjectEvent| b.build(e, false).unwrap().object_key;
        assert_eq!(key(&old), key(&new));
        assert_ne!(key(&old), key(&other));
    }

    #[test]
    fn payload_modes() {
        let line: &'static [u8] = br#"{"type":"MODIFIED","object":{"metadata":{}}}"#;
        assert_eq!(
            &builder(PayloadMode::Event)
                .build(&event(Some(line)), false)
                .unwrap()
                .payload[..],
            line
        );
        assert_eq!(
            &builder(PayloadMode::Object)
                .build(&event(Some(line)), false)
                .unwrap()
                .payload[..],
            br#"{"metadata":{}}"#
        );
        assert!(builder(PayloadMode::Object)
            .build(&event(None), false)
            .unwrap()
            .headers
            .get(header::SYNTHESIZED)
            .is_none());
    }

    #[test]
    fn msg_id_names_the_version_whatever_its_type_and_marks_deletions() {
        let mut e = event(None);
        let b = builder(PayloadMode::Event);
        let id = |e: &ObjectEvent| {
            let message = b.build(e, false).unwrap();
            message
                .headers
                .get(header::MSG_ID)
                .map(|v| v.as_str().to_owned())
        };
        e.event_type = EventType::Added;
        assert_eq!(id(&e).as_deref(), Some("pods:u1:7"));
        e.event_type = EventType::Modified;
        assert_eq!(id(&e).as_deref(), Some("pods:u1:7"));
        e.event_type = EventType::Deleted;
        assert_eq!(id(&e).as_deref(), Some("pods:u1:7:DELETED"));
    }
}
