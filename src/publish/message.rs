//! Turning one event into one NATS message: subject, headers and payload, exactly as docs/messages.md
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
//! # Header block
//!
//! The headers of a message are serialized once, straight into the block that goes on the wire
//! ([`SerializedHeaders`]: one buffer, in a fixed order), rather than into async-nats'
//! `HeaderMap` (a `HashMap` of `Vec`s of `String`s, about twenty allocations for nine headers,
//! serialized again per publish). The values that do not change within a watch (`Kube-Kind`,
//! `Kube-Api-Version`, `Kube-Cluster`) are escaped once per watch.
//!
//! # Subject length
//!
//! nats-server closes a connection whose protocol line exceeds its `max_control_line` (4 KiB by
//! default), and every watch shares that connection. An escaped name can be several times longer
//! than the name itself, so a subject over [`MAX_SUBJECT_BYTES`] is refused here, before it can
//! reach the connection.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use async_nats::header::{SerializedHeaders, SerializedHeadersBuilder};
use async_nats::HeaderName;
use bytes::{BufMut, Bytes, BytesMut};

use crate::config::{MessageFormat, PayloadMode};
use crate::event::{EventType, ObjectEvent, ObjectMeta, ResourceInfo};
use crate::publish::cloudevents;
use crate::publish::header_block::append_header;
pub use crate::publish::header_block::{BuildError, MAX_SUBJECT_BYTES};
use crate::subject::{escape_token, BoundTemplate, ObjectFields, SubjectTemplate, WatchFields};

/// Header names: a public interface. Built at compile time, so per message only the values are
/// allocated.
pub mod header {
    use async_nats::HeaderName;

    pub(crate) const EVENT_TYPE: HeaderName = HeaderName::from_static("Kube-Event-Type");
    pub const RESOURCE_VERSION: HeaderName = HeaderName::from_static("Kube-Resource-Version");
    pub const UID: HeaderName = HeaderName::from_static("Kube-Uid");
    pub const NAMESPACE: HeaderName = HeaderName::from_static("Kube-Namespace");
    pub const NAME: HeaderName = HeaderName::from_static("Kube-Name");
    pub const KIND: HeaderName = HeaderName::from_static("Kube-Kind");
    pub const API_VERSION: HeaderName = HeaderName::from_static("Kube-Api-Version");
    pub(crate) const SYNTHESIZED: HeaderName = HeaderName::from_static("Kube-Synthesized");
    pub const MSG_ID: HeaderName = HeaderName::from_static("Nats-Msg-Id");
    pub(crate) const PAYLOAD: HeaderName = HeaderName::from_static("Kube-Payload");
    pub(crate) const CLUSTER: HeaderName = HeaderName::from_static("Kube-Cluster");
}

/// The value of `Kube-Payload` on a message whose object was cut to its metadata (too large).
pub(crate) const PAYLOAD_TRUNCATED: &str = "truncated";

/// The value of `Kube-Synthesized` on events derived from a list rather than received.
pub(crate) const SYNTHESIZED_RELIST: &str = "relist";

/// The value of `Kube-Synthesized` on the DELETED events of the objects a watch held when its
/// resource stopped being served (its CRD deleted): docs/messages.md.
pub(crate) const SYNTHESIZED_UNSERVED: &str = "unserved";

/// Where the event of a message comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A watch line: the API server reported it.
    Received,
    /// kube2nats derived it; its message says why in `Kube-Synthesized`.
    Synthesized(Synthesis),
}

/// Why kube2nats derived an event (docs/messages.md): the value of `Kube-Synthesized`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synthesis {
    /// A list showed the change: [`SYNTHESIZED_RELIST`].
    Relist,
    /// The object entered or left the watch's filter (docs/filters.md).
    Filter,
    /// The resource stopped being served: [`SYNTHESIZED_UNSERVED`].
    Unserved,
}

/// What a message's payload holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// What the watch's payload mode says.
    AsConfigured,
    /// The object's metadata only, marked `Kube-Payload: truncated`.
    Truncated,
}

impl Origin {
    /// The value of `Kube-Synthesized`; `None` for a received event.
    fn header(self) -> Option<&'static str> {
        match self {
            Origin::Received => None,
            Origin::Synthesized(Synthesis::Relist) => Some(SYNTHESIZED_RELIST),
            Origin::Synthesized(Synthesis::Filter) => Some(crate::filter::SYNTHESIZED_FILTER),
            Origin::Synthesized(Synthesis::Unserved) => Some(SYNTHESIZED_UNSERVED),
        }
    }
}

/// A header value NATS accepts, by the rule in the module docs: verbatim unless it holds `%` or
/// an ASCII control character, then escaped whole as a subject token.
pub(crate) fn header_value(raw: &str) -> Cow<'_, str> {
    if !verbatim(raw.as_bytes()) {
        let mut escaped = String::with_capacity(raw.len() + 8);
        escape_token(raw, &mut escaped);
        Cow::Owned(escaped)
    } else {
        Cow::Borrowed(raw)
    }
}

/// Whether a header value goes out as it is: it holds neither `%` nor an ASCII control
/// character (`0x00`–`0x1F`, `0x7F`). Eight bytes at a time, since nearly every value passes.
fn verbatim(value: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether any byte of `word` is zero; exact as a whole (a borrow can only flag a byte above a
    // zero byte, never invent one).
    let any_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH != 0;
    let refused = |word: u64| {
        // A byte under 0x20 borrows from its high bit, as a zero byte does from 0x01.
        word.wrapping_sub(ONES * 0x20) & !word & HIGH != 0
            || any_zero(word ^ (ONES * u64::from(b'%')))
            || any_zero(word ^ (ONES * 0x7F))
    };
    let mut words = value.chunks_exact(8);
    for chunk in &mut words {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        if refused(u64::from_ne_bytes(word)) {
            return false;
        }
    }
    // The tail, padded with a byte that passes.
    let tail = words.remainder();
    let mut word = [b'a'; 8];
    word[..tail.len()].copy_from_slice(tail);
    !refused(u64::from_ne_bytes(word))
}

/// One message ready to publish.
#[derive(Debug, Clone)]
pub struct OutMessage {
    /// Shares its bytes: publishing hands the client a reference, not a copy.
    pub subject: async_nats::Subject,
    /// Serialized once; a clone (for a JetStream retry) shares the bytes.
    pub headers: SerializedHeaders,
    pub(crate) payload: Bytes,
    pub(crate) event_type: EventType,
    /// The object as the message carries it (stripped or cut to its metadata as the payload
    /// is), for the mirror (docs/mirror.md); shares the payload's bytes.
    pub(crate) object: Bytes,
    /// Groups the messages of one name (namespace and name), so that two of them are never in
    /// flight at once: per-name order then holds through publish retries, also between a deleted
    /// object and its recreation under the same name (another uid), and per-object order with it.
    pub(crate) object_key: u64,
}

impl OutMessage {
    /// The bytes NATS counts against its `max_payload`: the payload and the header block.
    pub(crate) fn wire_len(&self) -> usize {
        self.payload.len() + self.headers.len()
    }
}

/// What a watch's messages are made from: its configuration and its resolved resource.
#[derive(Debug, Clone)]
pub struct MessageSpec {
    /// The watch's name.
    pub watch: String,
    /// `subject`, parsed.
    pub subject: SubjectTemplate,
    /// `subject_prefix`.
    pub prefix: String,
    /// `publish.cluster`; empty when not set.
    pub cluster: String,
    pub resource: ResourceInfo,
    pub payload: PayloadMode,
    pub format: MessageFormat,
}

/// How one watch names and shapes its messages; built once per watch.
#[derive(Debug, Clone)]
pub struct MessageBuilder {
    /// The configured watch's name: the first part of every `Nats-Msg-Id`.
    pub(crate) watch: String,
    pub(crate) template: SubjectTemplate,
    pub(crate) prefix: String,
    pub(crate) cluster: String,
    pub(crate) resource: ResourceInfo,
    pub(crate) api_version: String,
    pub(crate) payload: PayloadMode,
    /// `template` with the watch's own values escaped into it.
    subject: BoundTemplate,
    /// The header values that are the same for every message of the watch, escaped once.
    constant: ConstantHeaders,
    /// The watch's CloudEvents attributes when its format is `cloudevents`.
    pub(crate) cloudevents: Option<cloudevents::Attributes>,
    /// Where each message's subject is rendered before it is copied into its own bytes.
    subject_scratch: Scratch,
    /// Where each message's `Nats-Msg-Id` is written before it goes into the header block.
    id_scratch: Scratch,
}

/// A string kept from one message to the next, so that writing into it allocates only while it
/// grows: the message id, which only goes into the header block, then costs no allocation, and
/// the subject one copy of exactly its size (not a `String` of its capacity handed over whole).
///
/// A `Cell`, taken and put back: a message that fails to build just leaves it empty.
#[derive(Default)]
struct Scratch(Cell<String>);

impl Scratch {
    fn take(&self) -> String {
        let mut text = self.0.take();
        text.clear();
        text
    }

    fn put_back(&self, text: String) {
        self.0.set(text);
    }
}

impl Clone for Scratch {
    fn clone(&self) -> Scratch {
        Scratch::default()
    }
}

impl fmt::Debug for Scratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scratch")
    }
}

impl MessageBuilder {
    pub fn new(spec: MessageSpec) -> MessageBuilder {
        let MessageSpec {
            watch,
            subject: template,
            prefix,
            cluster,
            resource,
            payload,
            format,
        } = spec;
        let api_version = resource.api_version();
        let cloudevents = match format {
            MessageFormat::Native => None,
            MessageFormat::CloudEvents => Some(cloudevents::Attributes::new(&cluster, &resource)),
        };
        let constant = ConstantHeaders {
            kind: header_value(&resource.kind).into_owned(),
            api_version: header_value(&api_version).into_owned(),
            cluster: header_value(&cluster).into_owned(),
        };
        let subject = template.bind(&WatchFields {
            prefix: &prefix,
            cluster: &cluster,
            group: resource.group_token(),
            version: &resource.version,
            resource: &resource.plural,
        });
        MessageBuilder {
            watch,
            template,
            subject,
            prefix,
            cluster,
            resource,
            api_version,
            payload,
            constant,
            cloudevents,
            subject_scratch: Scratch::default(),
            id_scratch: Scratch::default(),
        }
    }

    /// The builder of the same watch once its resource is served at another version
    /// (docs/configuration.md, "Versions that move"): subjects, `Kube-Api-Version` and the
    /// CloudEvents attributes name the new version.
    pub(crate) fn with_resource(&self, resource: ResourceInfo) -> MessageBuilder {
        let format = match self.cloudevents {
            Some(_) => MessageFormat::CloudEvents,
            None => MessageFormat::Native,
        };
        MessageBuilder::new(MessageSpec {
            watch: self.watch.clone(),
            subject: self.template.clone(),
            prefix: self.prefix.clone(),
            cluster: self.cluster.clone(),
            resource,
            payload: self.payload,
            format,
        })
    }

    /// The message for `event`, marked `Kube-Synthesized` as its `origin` says. Refused when its
    /// subject would be longer than the NATS server accepts.
    pub fn build(&self, event: &ObjectEvent, origin: Origin) -> Result<OutMessage, BuildError> {
        self.build_marked(event, origin, Payload::AsConfigured)
    }

    /// As [`Self::build`]; [`Payload::Truncated`] adds `Kube-Payload: truncated`.
    fn build_marked(
        &self,
        event: &ObjectEvent,
        origin: Origin,
        payload: Payload,
    ) -> Result<OutMessage, BuildError> {
        let meta = &event.meta;
        let mut subject = self.subject_scratch.take();
        if self.subject.reads_object() {
            let object = ObjectFields::read(&event.object);
            self.subject.render_object(
                meta.namespace.as_deref(),
                &meta.name,
                event.event_type,
                Some(&object),
                &mut subject,
            );
        } else {
            self.subject.render(
                meta.namespace.as_deref(),
                &meta.name,
                event.event_type,
                &mut subject,
            );
        }
        if subject.len() > MAX_SUBJECT_BYTES {
            return Err(BuildError::SubjectTooLong {
                bytes: subject.len(),
            });
        }
        let subject_bytes = async_nats::Subject::from(subject.as_str());
        self.subject_scratch.put_back(subject);
        let mut id = self.id_scratch.take();
        write_msg_id(&mut id, &self.watch, meta, event.event_type);
        let headers = self.headers(event, &id, origin, payload);
        self.id_scratch.put_back(id);
        Ok(OutMessage {
            subject: subject_bytes,
            headers: headers?.finish(),
            payload: self.payload(event),
            event_type: event.event_type,
            object: event.object.clone(),
            object_key: name_key(meta),
        })
    }

    /// The message for an object too large to publish whole: its metadata only (as for a
    /// vanished object), in the watch's payload mode, marked `Kube-Payload: truncated`, so
    /// subscribers learn that it changed and can fetch it.
    pub(crate) fn truncated(
        &self,
        event: &ObjectEvent,
        origin: Origin,
    ) -> Result<OutMessage, BuildError> {
        let meta_only = ObjectEvent {
            event_type: event.event_type,
            meta: event.meta.clone(),
            object: self.vanished_object(&event.meta),
            watch_line: None,
        };
        self.build_marked(&meta_only, origin, Payload::Truncated)
    }

    /// The header block of one message, but for its closing line: the values from the API
    /// server escaped by [`header_value`], the watch's constants as escaped once.
    fn headers(
        &self,
        event: &ObjectEvent,
        id: &str,
        origin: Origin,
        payload: Payload,
    ) -> Result<SerializedHeadersBuilder, BuildError> {
        let meta = &event.meta;
        let event_type = event.event_type.as_str();
        let resource_version = header_value(meta.resource_version.as_str());
        let uid = header_value(&meta.uid);
        let namespace = meta.namespace.as_deref().map(header_value);
        let name = header_value(&meta.name);
        let msg_id = header_value(id);
        let constant = &self.constant;
        let truncated = (payload == Payload::Truncated).then_some(PAYLOAD_TRUNCATED);
        let cluster = Some(constant.cluster.as_str()).filter(|c| !c.is_empty());
        // Native headers in a fixed order; `None` ones are left out. Where clusters share one
        // NATS, the subject template may leave the cluster out, so `Kube-Cluster` names it.
        let native: [(&HeaderName, Option<&str>); 11] = [
            (&header::EVENT_TYPE, Some(event_type)),
            (&header::RESOURCE_VERSION, Some(&*resource_version)),
            (&header::UID, Some(&*uid)),
            (&header::NAMESPACE, namespace.as_deref()),
            (&header::NAME, Some(&*name)),
            (&header::KIND, Some(constant.kind.as_str())),
            (&header::API_VERSION, Some(constant.api_version.as_str())),
            (&header::MSG_ID, Some(&*msg_id)),
            (&header::CLUSTER, cluster),
            (&header::SYNTHESIZED, origin.header()),
            (&header::PAYLOAD, truncated),
        ];
        let lines: usize = native
            .iter()
            .filter_map(|(name, value)| Some(line_len(name, value.as_ref()?)))
            .sum();
        let attributes = self.cloudevents.as_ref().map(|attributes| {
            let received = std::time::SystemTime::now();
            attributes.values(meta, event.event_type, id, received)
        });
        let extra = attributes.as_ref().map_or(0, cloudevents::Values::wire_len);
        // Sized exactly: the block is then frozen without another allocation.
        let mut block = SerializedHeaders::builder(lines + extra);
        for (name, value) in native {
            if let Some(value) = value {
                append_header(&mut block, name, value)?;
            }
        }
        if let Some(attributes) = &attributes {
            attributes.append(&mut block)?;
        }
        Ok(block)
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
    pub(crate) fn vanished_object(&self, meta: &ObjectMeta) -> Bytes {
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

/// The header values of a watch that are the same in all its messages, fit for NATS.
#[derive(Debug, Clone)]
struct ConstantHeaders {
    kind: String,
    api_version: String,
    /// Empty when no cluster is named.
    cluster: String,
}

/// The bytes of the header line `name: value\r\n`.
fn line_len(name: &HeaderName, value: &str) -> usize {
    AsRef::<str>::as_ref(name).len() + ": ".len() + value.len() + "\r\n".len()
}

/// `Nats-Msg-Id`: `{watch}:{uid}:{resourceVersion}` for ADDED and MODIFIED, with `:DELETED`
/// appended for deletions. It names one object version as one watch publishes it, whatever the
/// type it is published with: a version re-listed after a crash (as ADDED or MODIFIED) has the same
/// id as when it was first published, so JetStream drops it within its duplicate window, even from
/// another replica. A deletion is a distinct message with the last known version.
pub(crate) fn msg_id(watch: &str, meta: &ObjectMeta, event_type: EventType) -> String {
    let mut id = String::new();
    write_msg_id(&mut id, watch, meta, event_type);
    id
}

/// Appends [`msg_id`] to `id`.
fn write_msg_id(id: &mut String, watch: &str, meta: &ObjectMeta, event_type: EventType) {
    const DELETED: &str = ":DELETED";
    let (uid, rv) = (meta.uid.as_str(), meta.resource_version.as_str());
    id.reserve(watch.len() + uid.len() + rv.len() + 2 + DELETED.len());
    id.push_str(watch);
    id.push(':');
    id.push_str(uid);
    id.push(':');
    id.push_str(rv);
    if event_type == EventType::Deleted {
        id.push_str(DELETED);
    }
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

/// The header block kube2nats published when it built an async-nats `HeaderMap` per
/// message (CloudEvents attributes included), in the map's wire form: the reference the tests
/// and `benches/message.rs` compare the serialized block with.
#[doc(hidden)]
pub fn headermap_reference(
    b: &MessageBuilder,
    event: &ObjectEvent,
    origin: Origin,
    payload: Payload,
) -> SerializedHeaders {
    let meta = &event.meta;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(header::EVENT_TYPE, event.event_type.as_str());
    let mut insert = |name, raw: &str| headers.insert(name, header_value(raw).as_ref());
    insert(header::RESOURCE_VERSION, meta.resource_version.as_str());
    insert(header::UID, &meta.uid);
    if let Some(ns) = &meta.namespace {
        insert(header::NAMESPACE, ns);
    }
    insert(header::NAME, &meta.name);
    insert(header::KIND, &b.resource.kind);
    insert(header::API_VERSION, &b.api_version);
    let id = msg_id(&b.watch, meta, event.event_type);
    insert(header::MSG_ID, &id);
    if !b.cluster.is_empty() {
        insert(header::CLUSTER, &b.cluster);
    }
    if let Some(synthesized) = origin.header() {
        headers.insert(header::SYNTHESIZED, synthesized);
    }
    if let Some(attributes) = &b.cloudevents {
        let values = attributes.values(meta, event.event_type, &id, std::time::SystemTime::now());
        let mut block = SerializedHeaders::builder(0);
        if values.append(&mut block).is_err() {
            return SerializedHeaders::from(&headers);
        }
        for (name, value) in block.finish().iter() {
            headers.insert(name, value);
        }
    }
    if payload == Payload::Truncated {
        headers.insert(header::PAYLOAD, PAYLOAD_TRUNCATED);
    }
    SerializedHeaders::from(&headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ResourceVersion;

    fn builder(payload: PayloadMode) -> MessageBuilder {
        builder_as(payload, MessageFormat::Native)
    }

    fn builder_as(payload: PayloadMode, format: MessageFormat) -> MessageBuilder {
        MessageBuilder::new(spec(payload, format))
    }

    fn spec(payload: PayloadMode, format: MessageFormat) -> MessageSpec {
        MessageSpec {
            watch: "pods".into(),
            subject: SubjectTemplate::parse(
                "{prefix}.{group}.{version}.{resource}.{namespace}.{name}.{type}",
            )
            .unwrap(),
            prefix: "kube".into(),
            cluster: String::new(),
            resource: ResourceInfo::core("pods", "Pod", true),
            payload,
            format,
        }
    }

    /// The lines of a header block, sorted, without `ce-time` (the time of the call).
    fn sorted_lines(block: &SerializedHeaders) -> Vec<(String, String)> {
        let mut lines: Vec<(String, String)> = block
            .iter()
            .filter(|(name, _)| *name != "ce-time")
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        lines.sort();
        lines
    }

    proptest::proptest! {
        /// The word-at-a-time test agrees with the byte-by-byte rule of the module docs.
        #[test]
        fn verbatim_is_the_byte_rule(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::num::u8::ANY,
                    proptest::sample::select(vec![b'%', 0x1F, 0x20, 0x7F, 0x80, 0x9F, 0xA5, 0xFF, b'a']),
                ],
                0..40,
            ),
        ) {
            let by_byte = bytes.iter().all(|&b| b != b'%' && !b.is_ascii_control());
            proptest::prop_assert_eq!(verbatim(&bytes), by_byte);
        }

        /// The serialized block holds exactly the header lines the `HeaderMap` wrote (which wrote
        /// them in hash order), whatever the metadata, cluster, format and marks; and its length
        /// is what goes on the wire.
        #[test]
        fn header_block_has_the_lines_of_the_header_map(
            name in "[a-z0-9.%\r\n é-]{1,12}",
            namespace in proptest::option::of("[a-z0-9%\t-]{1,8}"),
            uid in "[a-f0-9\r-]{1,12}",
            rv in "[0-9%]{1,6}",
            cluster in "(|prod-eu|e u%\n)",
            cloudevents in proptest::bool::ANY,
            synthesis in proptest::option::of(proptest::sample::select(vec![Synthesis::Relist, Synthesis::Filter, Synthesis::Unserved])),
            deleted in proptest::bool::ANY,
        ) {
            let format = if cloudevents { MessageFormat::CloudEvents } else { MessageFormat::Native };
            let b = MessageBuilder::new(MessageSpec { cluster, ..spec(PayloadMode::Event, format) });
            let mut e = event(None);
            e.meta.name = name.as_str().into();
            e.meta.namespace = namespace.as_deref().map(Into::into);
            e.meta.uid = uid.as_str().into();
            e.meta.resource_version = ResourceVersion::new(rv.as_str());
            if deleted {
                e.event_type = EventType::Deleted;
            }
            let origin = synthesis.map_or(Origin::Received, Origin::Synthesized);
            let message = b.build(&e, origin).unwrap();
            proptest::prop_assert_eq!(
                sorted_lines(&message.headers),
                sorted_lines(&headermap_reference(&b, &e, origin, Payload::AsConfigured))
            );
            let expected_len = headermap_reference(&b, &e, origin, Payload::AsConfigured).len();
            proptest::prop_assert_eq!(message.headers.len(), expected_len);
            let cut = b.truncated(&e, origin).unwrap();
            proptest::prop_assert_eq!(
                sorted_lines(&cut.headers),
                sorted_lines(&headermap_reference(&b, &e, origin, Payload::Truncated))
            );
        }
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
            .build(&event(None), Origin::Synthesized(Synthesis::Relist))
            .unwrap();
        assert_eq!(
            m.subject.as_str(),
            "kube.core.v1.pods.default.web_1.modified"
        );
        let h = |k: async_nats::HeaderName| m.headers.get(k).map(str::to_owned);
        assert_eq!(h(header::EVENT_TYPE).as_deref(), Some("MODIFIED"));
        assert_eq!(h(header::MSG_ID).as_deref(), Some("pods:u1:7"));
        assert_eq!(h(header::NAMESPACE).as_deref(), Some("default"));
        assert_eq!(h(header::KIND).as_deref(), Some("Pod"));
        assert_eq!(h(header::API_VERSION).as_deref(), Some("v1"));
        assert_eq!(h(header::SYNTHESIZED).as_deref(), Some("relist"));
        assert_eq!(h(header::CLUSTER), None);
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
        let whole = b.build(&big, Origin::Received).unwrap();
        let cut = b.truncated(&big, Origin::Received).unwrap();
        assert_eq!(cut.subject, whole.subject);
        assert_eq!(cut.headers.get(header::PAYLOAD), Some("truncated"));
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
        let key = |e: &ObjectEvent| b.build(e, Origin::Received).unwrap().object_key;
        assert_eq!(key(&old), key(&new));
        assert_ne!(key(&old), key(&other));
    }

    #[test]
    fn payload_modes() {
        let line: &'static [u8] = br#"{"type":"MODIFIED","object":{"metadata":{}}}"#;
        assert_eq!(
            &builder(PayloadMode::Event)
                .build(&event(Some(line)), Origin::Received)
                .unwrap()
                .payload[..],
            line
        );
        assert_eq!(
            &builder(PayloadMode::Object)
                .build(&event(Some(line)), Origin::Received)
                .unwrap()
                .payload[..],
            br#"{"metadata":{}}"#
        );
        assert!(builder(PayloadMode::Object)
            .build(&event(None), Origin::Received)
            .unwrap()
            .headers
            .get(header::SYNTHESIZED)
            .is_none());
    }

    /// A CloudEvents message keeps every native header and adds the `ce-*` attributes; its id is
    /// the message id, its payload unchanged; a native message has no `ce-*` header.
    #[test]
    fn cloudevents_format_adds_attributes_and_keeps_native_headers() {
        let native = builder(PayloadMode::Object)
            .build(&event(None), Origin::Synthesized(Synthesis::Relist))
            .unwrap();
        let ce = builder_as(PayloadMode::Object, MessageFormat::CloudEvents)
            .build(&event(None), Origin::Synthesized(Synthesis::Relist))
            .unwrap();
        let names = |m: &OutMessage| {
            let mut n: Vec<String> = m.headers.iter().map(|(k, _)| k.to_string()).collect();
            n.sort();
            n
        };
        assert!(names(&native).iter().all(|n| !n.starts_with("ce-")));
        let ce_names = names(&ce);
        for n in names(&native) {
            assert!(ce_names.contains(&n), "{n} missing");
        }
        let h = |k: async_nats::HeaderName| ce.headers.get(k).map(str::to_owned);
        assert_eq!(h(cloudevents::header::ID), h(header::MSG_ID));
        assert_eq!(
            h(cloudevents::header::TYPE).as_deref(),
            Some("io.k8s.core.v1.pods.modified")
        );
        assert_eq!(
            h(cloudevents::header::SOURCE).as_deref(),
            Some("/api/v1/namespaces/default/pods")
        );
        assert_eq!(h(cloudevents::header::SUBJECT).as_deref(), Some("web.1"));
        assert_eq!(ce.payload, native.payload);
        assert_eq!(ce.subject, native.subject);
    }

    #[test]
    fn a_builder_moved_to_another_version_names_it_everywhere() {
        let beta = ResourceInfo {
            group: "example.com".into(),
            version: "v1beta1".into(),
            plural: "widgets".into(),
            kind: "Widget".into(),
            namespaced: true,
        };
        let ga = ResourceInfo {
            version: "v1".into(),
            ..beta.clone()
        };
        let spec = spec(PayloadMode::Event, MessageFormat::CloudEvents);
        let b = MessageBuilder::new(MessageSpec {
            resource: beta,
            ..spec
        });
        let moved = b.with_resource(ga);
        let unserved = Origin::Synthesized(Synthesis::Unserved);
        let message = moved.build(&event(None), unserved).unwrap();
        assert_eq!(
            message.subject.as_str(),
            "kube.example_com.v1.widgets.default.web_1.modified"
        );
        let header = |name: &str| {
            message
                .headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_owned())
        };
        assert_eq!(
            header("Kube-Api-Version").as_deref(),
            Some("example.com/v1")
        );
        assert_eq!(
            header("Kube-Synthesized").as_deref(),
            Some(SYNTHESIZED_UNSERVED)
        );
        let ce_type = header("ce-type").unwrap_or_default();
        assert!(ce_type.contains(".v1.widgets."), "{ce_type}");
    }

    #[test]
    fn msg_id_names_the_version_whatever_its_type_and_marks_deletions() {
        let mut e = event(None);
        let b = builder(PayloadMode::Event);
        let id = |e: &ObjectEvent| {
            let message = b.build(e, Origin::Received).unwrap();
            message.headers.get(header::MSG_ID).map(str::to_owned)
        };
        e.event_type = EventType::Added;
        assert_eq!(id(&e).as_deref(), Some("pods:u1:7"));
        e.event_type = EventType::Modified;
        assert_eq!(id(&e).as_deref(), Some("pods:u1:7"));
        e.event_type = EventType::Deleted;
        assert_eq!(id(&e).as_deref(), Some("pods:u1:7:DELETED"));
    }
}
