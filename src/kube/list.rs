//! Decoding one page of a list response.
//!
//! The page is parsed once with its items left as raw slices of the body; each item is read for
//! its metadata only and handed on as bytes. Items inside a list carry no `apiVersion` and `kind`
//! (the list does), so kube2nats adds them: a published object looks the same whether it came
//! from a list or a watch.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::decode::{decode_object_meta, DecodeError};
use crate::event::{EventType, ObjectEvent, ResourceInfo, ResourceVersion};

/// One page of a list.
#[derive(Debug)]
pub(crate) struct ListPage {
    /// The version of the whole list (the same on every page of it).
    pub(crate) resource_version: ResourceVersion,
    /// Present when more pages follow.
    pub(crate) continue_token: Option<String>,
    /// How many items the pages after this one hold, when the server says (it does when it
    /// can count them: no field or label selector that only etcd's scan can apply).
    pub(crate) remaining_items: Option<u64>,
    /// The items as ADDED events with no watch line.
    pub(crate) items: Vec<ObjectEvent>,
}

#[derive(Deserialize)]
struct RawList<'a> {
    metadata: ListMeta,
    #[serde(borrow)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    continue_token: String,
    /// Only a hint: whatever else stands there is ignored, not an error.
    #[serde(rename = "remainingItemCount", default)]
    remaining_item_count: Option<serde_json::Value>,
}

/// Parses a list page; `resource` supplies the `apiVersion` and `kind` added to each item.
pub(crate) fn parse_list_page(
    body: &Bytes,
    resource: &ResourceInfo,
) -> Result<ListPage, DecodeError> {
    let list: RawList = serde_json::from_slice(body).map_err(DecodeError::Malformed)?;
    if list.metadata.resource_version.is_empty() {
        return Err(DecodeError::MissingField("list metadata.resourceVersion"));
    }
    let type_prefix = format!(
        "\"apiVersion\":\"{}\",\"kind\":\"{}\"",
        resource.api_version(),
        resource.kind
    );
    let items = list
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|raw| {
            let item = body.slice_ref(raw.get().as_bytes());
            let (meta, has_kind) = decode_object_meta(&item)?;
            let object = if has_kind {
                item
            } else {
                with_type_fields(&item, &type_prefix)
            };
            Ok(ObjectEvent {
                event_type: EventType::Added,
                meta,
                object,
                watch_line: None,
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    Ok(ListPage {
        resource_version: ResourceVersion::new(list.metadata.resource_version),
        continue_token: Some(list.metadata.continue_token).filter(|c| !c.is_empty()),
        remaining_items: list
            .metadata
            .remaining_item_count
            .and_then(|count| count.as_u64()),
        items,
    })
}

/// `{"metadata":…}` becomes `{"apiVersion":"v1","kind":"Pod","metadata":…}`. The item is known to
/// be a JSON object with metadata, so it starts with `{` (after optional whitespace) and is not empty.
fn with_type_fields(item: &[u8], type_fields: &str) -> Bytes {
    let open = item.iter().position(|&b| b == b'{').map_or(0, |i| i + 1);
    let mut out = BytesMut::with_capacity(item.len() + type_fields.len() + 1);
    out.put_u8(b'{');
    out.put_slice(type_fields.as_bytes());
    out.put_u8(b',');
    out.put_slice(&item[open..]);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> ResourceInfo {
        ResourceInfo::core("pods", "Pod", true)
    }

    #[test]
    fn items_get_api_version_and_kind() {
        let body = Bytes::from_static(br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"10","continue":"abc"},"items":[{"metadata":{"name":"a","namespace":"d","uid":"u1","resourceVersion":"5"},"spec":{}}]}"#);
        let page = parse_list_page(&body, &pods()).unwrap();
        assert_eq!(page.resource_version.as_str(), "10");
        assert_eq!(page.continue_token.as_deref(), Some("abc"));
        assert_eq!(page.items.len(), 1);
        let obj: serde_json::Value = serde_json::from_slice(&page.items[0].object).unwrap();
        assert_eq!(obj["kind"], "Pod");
        assert_eq!(obj["apiVersion"], "v1");
        assert_eq!(obj["metadata"]["uid"], "u1");
    }

    #[test]
    fn empty_list_and_last_page() {
        let body = Bytes::from_static(
            br#"{"metadata":{"resourceVersion":"3","continue":""},"items":null}"#,
        );
        let page = parse_list_page(&body, &pods()).unwrap();
        assert!(page.items.is_empty());
        assert_eq!(page.continue_token, None);
    }

    #[test]
    fn the_remaining_item_count_is_read_and_anything_odd_there_ignored() {
        let page = |meta: &str| {
            let body = format!(
                r#"{{"metadata":{{"resourceVersion":"3","continue":"t"{meta}}},"items":[]}}"#
            );
            parse_list_page(&Bytes::from(body), &pods())
                .unwrap()
                .remaining_items
        };
        assert_eq!(page(r#","remainingItemCount":1499500"#), Some(1_499_500));
        assert_eq!(page(""), None);
        assert_eq!(page(r#","remainingItemCount":-1"#), None);
        assert_eq!(page(r#","remainingItemCount":"many""#), None);
    }

    #[test]
    fn html_from_a_proxy_is_an_error() {
        let body = Bytes::from_static(b"<html>login</html>");
        assert!(parse_list_page(&body, &pods()).is_err());
    }
}
