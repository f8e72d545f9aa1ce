//! Metadata-only responses, as kube-apiserver serves them to a client whose `Accept` asks for
//! `application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` (lists) or
//! `…;as=PartialObjectMetadata;…` (watches): each object cut to `kind: PartialObjectMetadata`,
//! `apiVersion: meta.k8s.io/v1` and its `metadata`; a list becomes a `PartialObjectMetadataList`.
//!
//! Content negotiation follows the real server: the media types of `Accept` are tried in order;
//! one the server cannot produce is skipped, so a plain `application/json` after it gets the full
//! objects, and without such a fallback the answer is 406 NotAcceptable. Two knobs model servers
//! that cannot convert a resource ([`PartialMetadata::Unsupported`]: an aggregated API, an old
//! server) and a proxy that refuses any `as=` parameter ([`PartialMetadata::Refused`]).

use serde_json::{json, Value};

use super::status::ApiError;
use super::ApiServer;

/// How the server answers a request for PartialObjectMetadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartialMetadata {
    /// Metadata only, as kube-apiserver does for every built-in resource and CRD.
    #[default]
    Served,
    /// The conversion is not available: the `Accept` fallback (full objects) if offered, else 406.
    Unsupported,
    /// 406 to any request asking for it, whatever else `Accept` offers.
    Refused,
}

/// The `as=` a list or a watch asks for.
fn wanted(list: bool) -> &'static str {
    if list {
        "PartialObjectMetadataList"
    } else {
        "PartialObjectMetadata"
    }
}

/// Whether the response is to be metadata-only, by `accept` and the server's `mode`.
pub fn negotiate(accept: &str, list: bool, mode: PartialMetadata) -> Result<bool, ApiError> {
    let mut asked = false;
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let json = matches!(base, "application/json" | "application/*" | "*/*");
        match param("as") {
            None if json => return Ok(false),
            Some(a) if json && a == wanted(list) => {
                let meta_v1 = param("g") == Some("meta.k8s.io") && param("v") == Some("v1");
                asked = true;
                match mode {
                    PartialMetadata::Served if meta_v1 => return Ok(true),
                    PartialMetadata::Refused => return Err(not_acceptable()),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    match accept.trim() {
        "" if !asked => Ok(false),
        _ => Err(not_acceptable()),
    }
}

fn not_acceptable() -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        None,
    )
}

/// `obj` as a PartialObjectMetadata.
pub fn cut(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

impl ApiServer {
    /// Sets how requests for PartialObjectMetadata are answered, from the next request on.
    pub fn set_partial_metadata(&self, mode: PartialMetadata) {
        super::lock(&self.shared.unkind).partial_metadata = mode;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str =
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json";
    const STRICT: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

    #[test]
    fn negotiates_as_kube_apiserver() {
        use PartialMetadata::*;
        assert_eq!(negotiate(LIST, true, Served).ok(), Some(true));
        assert_eq!(
            negotiate(LIST, false, Served).ok(),
            Some(false),
            "wrong as= for a watch"
        );
        assert_eq!(negotiate(LIST, true, Unsupported).ok(), Some(false));
        assert_eq!(
            negotiate(STRICT, true, Unsupported)
                .map_err(|e| e.code)
                .err(),
            Some(406)
        );
        assert_eq!(
            negotiate(LIST, true, Refused).map_err(|e| e.code).err(),
            Some(406)
        );
        assert_eq!(
            negotiate("application/json", true, Refused).ok(),
            Some(false)
        );
        assert_eq!(negotiate("", true, Served).ok(), Some(false));
    }
}
