//! Metadata-only lists and watches (`payload = "metadata"`): the API server is asked for
//! PartialObjectMetadata, so a large object (a Secret, a ConfigMap, a custom resource) costs
//! only its metadata on the wire, in kube2nats and in NATS.
//!
//! The request offers plain JSON as a fallback (`…, application/json`), as client-go's metadata
//! client does: a server that cannot convert the resource (an aggregated API, an old server)
//! then sends full objects instead of refusing. kube2nats recognises those by their `kind` and
//! cuts them to their metadata itself ([`to_metadata`]), so subscribers always get the same
//! shape and never the data of a Secret they chose not to receive; only the bandwidth saving is
//! lost. A server or proxy that answers 406 regardless makes the watch ask for plain JSON.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::decode::DecodeError;

/// `Accept` of a metadata-only list: PartialObjectMetadataList, else the full list.
pub(crate) const ACCEPT_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json";
/// `Accept` of a metadata-only watch (streaming lists included): each event's object is a
/// PartialObjectMetadata, else the full object.
pub(crate) const ACCEPT_WATCH: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json";
/// `Accept` of every other request.
pub(crate) const ACCEPT_JSON: &str = "application/json";

/// How kube-apiserver (Go's encoder, type fields first) starts a PartialObjectMetadata: the
/// cheap test that passes for every object of a metadata-only watch.
const PARTIAL_PREFIX: &[u8] = br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","#;
const PARTIAL_KIND: &str = "PartialObjectMetadata";

/// Whether `object` is a PartialObjectMetadata (and not a full object).
pub(crate) fn is_partial(object: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    object.starts_with(PARTIAL_PREFIX)
        || serde_json::from_slice::<Kind>(object)
            .is_ok_and(|k| k.kind.as_deref() == Some(PARTIAL_KIND))
}

/// The PartialObjectMetadata the server would have sent for a full `object`: its `metadata`
/// unchanged, under kind `PartialObjectMetadata`, apiVersion `meta.k8s.io/v1`.
pub(crate) fn to_metadata(object: &[u8]) -> Result<Bytes, DecodeError> {
    #[derive(Deserialize)]
    struct Full<'a> {
        #[serde(borrow)]
        metadata: Option<&'a RawValue>,
    }
    let full: Full = serde_json::from_slice(object).map_err(DecodeError::Malformed)?;
    let metadata = full.metadata.ok_or(DecodeError::MissingField("metadata"))?;
    let metadata = metadata.get().as_bytes();
    let mut out = BytesMut::with_capacity(PARTIAL_PREFIX.len() + 12 + metadata.len());
    out.put_slice(PARTIAL_PREFIX);
    out.put_slice(b"\"metadata\":");
    out.put_slice(metadata);
    out.put_u8(b'}');
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_partial_objects_however_serialized() {
        assert!(is_partial(
            br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a"}}"#
        ));
        assert!(is_partial(
            br#"{"metadata":{"name":"a"},"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata"}"#
        ));
        assert!(!is_partial(
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","annotations":{"x":"{\"kind\":\"PartialObjectMetadata\"}"}},"data":{"k":"v"}}"#
        ));
        assert!(!is_partial(b"not json"));
    }

    #[test]
    fn cuts_a_full_object_to_its_metadata() {
        let cut = to_metadata(
            br#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","uid":"u","resourceVersion":"3"},"data":{"password":"aHVudGVyMg=="}}"#,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&cut).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"s","uid":"u","resourceVersion":"3"}})
        );
        assert!(is_partial(&cut));
        assert!(to_metadata(br#"{"kind":"Secret"}"#).is_err());
        assert!(to_metadata(b"{").is_err());
    }
}
