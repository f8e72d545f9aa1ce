//! What a watch knows of the bucket: for each object, the key it is under now, its resourceVersion
//! and its value. The value is kept as the bucket's JSON
//! bytes, read back only to report a deletion with the last object (a delete marker has no
//! value); a parsed object is usually larger than its JSON.
//!
//! An object has one current key. When kube2nats follows a CRD to another preferred version it
//! puts each object under the new version's key, then deletes the old key (docs/mirror.md, "Keys
//! when the version moves"); a watch of any version sees a put of an object it holds under
//! another key (a modification, if the version differs), then a deletion of a key that is no
//! longer the object's (nothing to report).

use std::collections::HashMap;

use bytes::Bytes;
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::entry::Entry;
use crate::error::Error;
use crate::key::{object_id, ObjectId};

/// What one message of the bucket changed, as a watch reports it.
#[derive(Debug)]
pub(crate) enum Change<K> {
    Added(K),
    Modified(K),
    Deleted(K),
    /// A repeat of the version held, or a marker of a key not held.
    Nothing,
}

#[derive(Debug)]
struct Held {
    key: String,
    resource_version: String,
    value: Bytes,
}

#[derive(Debug, Default)]
pub(crate) struct Cache {
    /// The resource's kind, for errors.
    kind: String,
    objects: HashMap<ObjectId, Held>,
}

impl Cache {
    pub(crate) fn new(kind: &str) -> Cache {
        Cache {
            kind: kind.to_owned(),
            ..Cache::default()
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// Applies one message under `key` (the KV key, past `$KV.{bucket}.`).
    pub(crate) fn apply<K>(&mut self, key: &str, entry: Entry<'_>) -> Result<Change<K>, Error>
    where
        K: Resource + DeserializeOwned,
    {
        let id = object_id(key).ok_or_else(|| Error::Key(key.to_owned()))?;
        let value = match entry {
            Entry::Value(value) => value,
            Entry::Deleted => return self.delete(key, &id),
        };
        let object: K = serde_json::from_slice(value).map_err(|source| Error::Decode {
            subject: key.to_owned(),
            kind: self.kind.clone(),
            source,
        })?;
        let resource_version = object.meta().resource_version.clone().unwrap_or_default();
        let change = match self.objects.get(&id) {
            None => Change::Added(object),
            Some(before) if before.resource_version == resource_version => Change::Nothing,
            Some(_) => Change::Modified(object),
        };
        let held = Held {
            key: key.to_owned(),
            resource_version,
            value: Bytes::copy_from_slice(value),
        };
        self.objects.insert(id, held);
        Ok(change)
    }

    fn delete<K>(&mut self, key: &str, id: &ObjectId) -> Result<Change<K>, Error>
    where
        K: Resource + DeserializeOwned,
    {
        // A key the object has left (or never had) names nothing the watch holds.
        if self.objects.get(id).is_none_or(|held| held.key != key) {
            return Ok(Change::Nothing);
        }
        let Some(held) = self.objects.remove(id) else {
            return Ok(Change::Nothing);
        };
        let object = serde_json::from_slice(&held.value).map_err(|source| Error::Decode {
            subject: key.to_owned(),
            kind: self.kind.clone(),
            source,
        })?;
        Ok(Change::Deleted(object))
    }

    /// The objects held, each taken from `parsed` (the objects as applied, by key) where it is
    /// there under the object's current key, else decoded from its value again.
    pub(crate) fn objects<K: DeserializeOwned>(&self, mut parsed: HashMap<String, K>) -> Vec<K> {
        self.objects
            .values()
            .filter_map(|held| match parsed.remove(&held.key) {
                Some(object) => Some(object),
                // Each value parsed as a K when it was applied.
                None => serde_json::from_slice(&held.value).ok(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(name: &str, rv: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "shop", "name": name, "resourceVersion": rv}
        }))
        .expect("json")
    }

    fn name(change: Change<Pod>) -> String {
        match change {
            Change::Added(p) => format!("added {}", p.metadata.name.unwrap_or_default()),
            Change::Modified(p) => format!("modified {}", p.metadata.name.unwrap_or_default()),
            Change::Deleted(p) => format!("deleted {}", p.metadata.name.unwrap_or_default()),
            Change::Nothing => "nothing".into(),
        }
    }

    #[test]
    fn puts_repeats_and_deletions() {
        let mut cache = Cache::new("Pod");
        let mut apply = |key: &str, value: &[u8]| {
            let entry = Entry::of(None, value);
            name(cache.apply::<Pod>(key, entry).expect("applies"))
        };
        assert_eq!(apply("core.v1.pods.shop.a", &pod("a", "1")), "added a");
        assert_eq!(apply("core.v1.pods.shop.a", &pod("a", "1")), "nothing");
        assert_eq!(apply("core.v1.pods.shop.a", &pod("a", "2")), "modified a");
        assert_eq!(apply("core.v1.pods.shop.a", b""), "deleted a");
        assert_eq!(apply("core.v1.pods.shop.a", b""), "nothing");
        assert_eq!(apply("core.v1.pods.shop.b", b""), "nothing");
    }

    #[test]
    fn an_object_moving_to_another_version_is_modified_not_deleted() {
        let mut cache = Cache::new("Pod");
        let mut apply = |key: &str, value: &[u8]| {
            name(
                cache
                    .apply::<Pod>(key, Entry::of(None, value))
                    .expect("applies"),
            )
        };
        assert_eq!(
            apply("example_com.v1.widgets.shop.a", &pod("a", "5")),
            "added a"
        );
        // The same version under the new key: nothing new for the object.
        assert_eq!(
            apply("example_com.v2.widgets.shop.a", &pod("a", "5")),
            "nothing"
        );
        assert_eq!(apply("example_com.v1.widgets.shop.a", b""), "nothing");
        assert_eq!(
            apply("example_com.v2.widgets.shop.a", &pod("a", "6")),
            "modified a"
        );
        assert_eq!(apply("example_com.v2.widgets.shop.a", b""), "deleted a");
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_value_that_is_not_the_resource_is_an_error_and_changes_nothing() {
        let mut cache = Cache::new("Pod");
        let err = cache
            .apply::<Pod>("core.v1.pods.shop.a", Entry::of(None, b"{not json"))
            .expect_err("not json");
        assert!(matches!(err, Error::Decode { .. }), "{err}");
        assert_eq!(cache.len(), 0);
        let err = cache
            .apply::<Pod>("pods.a", Entry::of(None, &pod("a", "1")))
            .expect_err("not a key");
        assert!(matches!(err, Error::Key(_)), "{err}");
    }
}
