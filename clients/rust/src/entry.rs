//! One message of the mirror's bucket, read as the key contract says (docs/subscribers.md,
//! "The mirror's key contract"): a value, or a deletion.

use async_nats::HeaderMap;

/// What a message of the bucket's stream says about its key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry<'m> {
    /// The object's JSON.
    Value(&'m [u8]),
    /// The key was deleted: a KV delete or purge (`KV-Operation: DEL` or `PURGE`), or a marker
    /// the server put in place of an expired one (`Nats-Marker-Reason`). A message without a
    /// value is a deletion too: every object is a JSON document.
    Deleted,
}

impl<'m> Entry<'m> {
    pub(crate) fn of(headers: Option<&HeaderMap>, payload: &'m [u8]) -> Entry<'m> {
        let header = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str());
        let deleted = matches!(header("KV-Operation"), Some("DEL" | "PURGE"))
            || header("Nats-Marker-Reason").is_some()
            || payload.is_empty();
        if deleted {
            Entry::Deleted
        } else {
            Entry::Value(payload)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, *value);
        }
        h
    }

    #[test]
    fn deletions_and_values() {
        let object = br#"{"metadata":{"name":"a"}}"#.as_slice();
        assert_eq!(Entry::of(None, object), Entry::Value(object));
        let put = headers(&[("Kube-Resource-Version", "7")]);
        assert_eq!(Entry::of(Some(&put), object), Entry::Value(object));
        for marker in [
            headers(&[("KV-Operation", "DEL")]),
            headers(&[("KV-Operation", "PURGE")]),
            headers(&[("Nats-Marker-Reason", "MaxAge")]),
            // @nats-io/kv reads this one as a put; it is the server's marker of a removal.
            headers(&[("Nats-Marker-Reason", "Remove")]),
            headers(&[("Nats-Marker-Reason", "Purge")]),
        ] {
            assert_eq!(Entry::of(Some(&marker), b""), Entry::Deleted, "{marker:?}");
        }
        assert_eq!(Entry::of(None, b""), Entry::Deleted);
    }
}
