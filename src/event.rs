//! The small typed values that travel between the stages of kube2nats.
//!
//! The watch stage produces them, de-duplication filters them and the publish stage turns them into
//! NATS messages. They are deliberately thin: an event carries the few metadata fields kube2nats
//! needs to route and de-duplicate it, and the object itself as the exact bytes the API server sent,
//! never parsed into a tree.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use bytes::Bytes;

/// The kind of change a watch event reports, as it is published.
///
/// `BOOKMARK` and `ERROR` lines of a watch stream are not changes; the decoder handles them
/// separately, so they never become an `EventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) const ALL: [EventType; 3] =
        [EventType::Added, EventType::Modified, EventType::Deleted];

    /// The spelling of the Kubernetes watch API (`ADDED`), used in payloads, headers and metrics labels.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }

    /// The lower-case spelling used as the `{type}` subject token (`added`).
    pub(crate) fn as_subject_token(self) -> &'static str {
        match self {
            EventType::Added => "added",
            EventType::Modified => "modified",
            EventType::Deleted => "deleted",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = String;

    /// Accepts the watch API's spelling in any case: `ADDED`, `added`, `Added`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown event type {s:?} (allowed: ADDED, MODIFIED, DELETED)"))
    }
}

/// A Kubernetes `metadata.resourceVersion`.
///
/// Opaque by contract: two versions can always be compared for equality. Since Kubernetes 1.35
/// (KEP-5504) they are also comparable integers, but aggregated APIs may not conform, so
/// [`ResourceVersion::newer_than`] answers only when both sides parse as integers.
///
/// Shared, not copied, when cloned: the watch keeps the version of every event it receives (to
/// resume from), and a copied string would cost an allocation and a copy per event.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResourceVersion(Arc<str>);

impl ResourceVersion {
    pub fn new(rv: impl Into<Arc<str>>) -> Self {
        ResourceVersion(rv.into())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The version as an integer, where it is one.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        self.0.parse().ok()
    }

    /// `Some(true)` if `self` is newer than `other`, `Some(false)` if it is not, `None` when the two
    /// cannot be ordered (either side is not an integer).
    pub(crate) fn newer_than(&self, other: &ResourceVersion) -> Option<bool> {
        Some(self.as_u64()? > other.as_u64()?)
    }
}

impl fmt::Debug for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a configured watch resolved to through API discovery: enough to build request paths,
/// subjects and the `Kube-Kind` / `Kube-Api-Version` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    /// The plural resource name used in URLs (`pods`).
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
}

impl ResourceInfo {
    /// A resource of the core API group (`v1`): pods, namespaces, configmaps, …
    pub fn core(plural: &str, kind: &str, namespaced: bool) -> ResourceInfo {
        ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
        }
    }

    /// `v1` for the core group, `apps/v1` otherwise, as objects spell their `apiVersion`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The `{group}` subject token: `core` for the core group.
    pub(crate) fn group_token(&self) -> &str {
        if self.group.is_empty() {
            "core"
        } else {
            &self.group
        }
    }
}

/// One change to one object, as received from the API server or derived from a list.
///
/// `object` holds the object's JSON exactly as the server sent it (for a list item, with
/// `apiVersion` and `kind` added, since the server omits them inside lists).
#[derive(Debug, Clone)]
pub struct ObjectEvent {
    pub event_type: EventType,
    pub meta: ObjectMeta,
    pub object: Bytes,
    /// The whole watch event line `{"type":…,"object":…}` as received; `None` for an event that
    /// kube2nats derived from a list.
    pub watch_line: Option<Bytes>,
}

/// The metadata fields kube2nats reads from an object; everything else stays in the raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub uid: String,
    pub resource_version: ResourceVersion,
    pub name: String,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.generation` where it is an integer (the API server bumps it on spec changes of
    /// most resources); `None` when absent or of another type.
    pub generation: Option<i64>,
}
