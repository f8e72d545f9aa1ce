//! Turning one event into one NATS message: subject, headers and payload, exactly as DESIGN.md
//! promises subscribers.

use bytes::{BufMut, Bytes, BytesMut};

use crate::config::PayloadMode;
use crate::event::{EventType, ObjectEvent, ObjectMeta, ResourceInfo};
use crate::subject::{SubjectFields, SubjectTemplate};

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
}

/// The value of `Kube-Synthesized` on events derived from a list rather than received.
pub const SYNTHESIZED_RELIST: &str = "relist";

/// One message ready to publish.
#[derive(Debug, Clone)]
pub struct OutMessage {
    pub subject: String,
    pub headers: async_nats::HeaderMap,
    pub payload: Bytes,
    pub event_type: EventType,
    /// Groups the messages of one object, so that two of them are never in flight at once.
    pub object_key: u64,
}

/// How one watch names and shapes its messages; built once per watch.
#[derive(Debug, Clone)]
pub struct MessageBuilder {
    pub template: SubjectTemplate,
    pub prefix: String,
    pub cluster: String,
    pub resource: ResourceInfo,
    pub api_version: String,
    pub payload: PayloadMode,
}

impl MessageBuilder {
    pub fn new(
        template: SubjectTemplate,
        prefix: String,
        cluster: String,
        resource: ResourceInfo,
        payload: PayloadMode,
    ) -> MessageBuilder {
        let api_version = resource.api_version();
        MessageBuilder {
            template,
            prefix,
            cluster,
            resource,
            api_version,
            payload,
        }
    }

    /// The message for `event`; `synthesized` marks events derived from a list.
    pub fn build(&self, event: &ObjectEvent, synthesized: bool) -> OutMessage {
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
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(header::EVENT_TYPE, event.event_type.as_str());
        headers.insert(header::RESOURCE_VERSION, meta.resource_version.as_str());
        headers.insert(header::UID, meta.uid.as_str());
        if let Some(ns) = &meta.namespace {
            headers.insert(header::NAMESPACE, ns.as_str());
        }
        headers.insert(header::NAME, meta.name.as_str());
        headers.insert(header::KIND, self.resource.kind.as_str());
        headers.insert(header::API_VERSION, self.api_version.as_str());
        headers.insert(header::MSG_ID, msg_id(meta, event.event_type));
        if synthesized {
            headers.insert(header::SYNTHESIZED, SYNTHESIZED_RELIST);
        }
        OutMessage {
            subject,
            headers,
            payload: self.payload(event),
            event_type: event.event_type,
            object_key: object_key(&meta.uid),
        }
    }

    fn payload(&self, event: &ObjectEvent) -> Bytes {
        match (self.payload, &event.watch_line) {
            (PayloadMode::Object, _) => event.object.clone(),
            (PayloadMode::Event, Some(line)) => line.clone(),
            (PayloadMode::Event, None) => wrap_event(event.event_type, &event.object),
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

/// `Nats-Msg-Id`: deterministic per (uid, resourceVersion, type), so JetStream drops a repeat
/// within its duplicate window, even from another replica.
pub fn msg_id(meta: &ObjectMeta, event_type: EventType) -> String {
    let (uid, rv, t) = (
        meta.uid.as_str(),
        meta.resource_version.as_str(),
        event_type.as_str(),
    );
    let mut id = String::with_capacity(uid.len() + rv.len() + t.len() + 2);
    id.push_str(uid);
    id.push(':');
    id.push_str(rv);
    id.push(':');
    id.push_str(t);
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

fn object_key(uid: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(uid.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ResourceVersion;

    fn builder(payload: PayloadMode) -> MessageBuilder {
        MessageBuilder::new(
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
            },
            object: Bytes::from_static(br#"{"metadata":{}}"#),
            watch_line: line.map(Bytes::from_static),
        }
    }

    #[test]
    fn subject_and_headers() {
        let m = builder(PayloadMode::Event).build(&event(None), true);
        assert_eq!(m.subject, "kube.core.v1.pods.default.web_1.modified");
        let h = |k: async_nats::HeaderName| m.headers.get(k).map(|v| v.as_str().to_owned());
        assert_eq!(h(header::EVENT_TYPE).as_deref(), Some("MODIFIED"));
        assert_eq!(h(header::MSG_ID).as_deref(), Some("u1:7:MODIFIED"));
        assert_eq!(h(header::NAMESPACE).as_deref(), Some("default"));
        assert_eq!(h(header::KIND).as_deref(), Some("Pod"));
        assert_eq!(h(header::API_VERSION).as_deref(), Some("v1"));
        assert_eq!(h(header::SYNTHESIZED).as_deref(), Some("relist"));
        assert_eq!(
            &m.payload[..],
            br#"{"type":"MODIFIED","object":{"metadata":{}}}"#
        );
    }

    #[test]
    fn payload_modes() {
        let line: &'static [u8] = br#"{"type":"MODIFIED","object":{"metadata":{}}}"#;
        assert_eq!(
            &builder(PayloadMode::Event)
                .build(&event(Some(line)), false)
                .payload[..],
            line
        );
        assert_eq!(
            &builder(PayloadMode::Object)
                .build(&event(Some(line)), false)
                .payload[..],
            br#"{"metadata":{}}"#
        );
        assert!(builder(PayloadMode::Object)
            .build(&event(None), false)
            .headers
            .get(header::SYNTHESIZED)
            .is_none());
    }
}
