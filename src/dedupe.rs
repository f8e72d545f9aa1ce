//! De-duplication and the relist difference: the memory of what each watch has published.
//!
//! For every object a watch has published, kube2nats remembers its uid, the last published
//! resourceVersion and its name (to name it in a subject if it must later announce its deletion).
//! That is enough to
//! - drop an event already published (same uid and resourceVersion) or older than the one
//!   published (where versions compare as integers), and
//! - turn a relist into the difference against what subscribers last saw: new objects ADDED,
//!   changed ones MODIFIED, vanished ones DELETED (client-go's `DeletedFinalStateUnknown`).
//!
//! The state is per watch target and lives only in memory: a restart of kube2nats starts from an
//! empty state, and its first list re-announces every object (see `initial_state`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::event::{EventType, ObjectMeta, ResourceVersion};

/// What to do with one received watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Publish,
    /// This uid and resourceVersion were already published.
    Duplicate,
    /// Older than the version already published for this uid.
    Stale,
}

/// What a listed object means against the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// Not known: publish as ADDED.
    New,
    /// Known with another version: publish as MODIFIED.
    Changed,
    /// Known with this version: nothing to publish.
    Unchanged,
    /// Known with a newer version (the list came from a lagging server): nothing to publish.
    Stale,
}

/// An object that was tracked but is missing from a complete relist: it was deleted while the
/// watch could not see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vanished {
    pub meta: ObjectMeta,
}

/// A uid as a map key: 16 bytes for the UUIDs Kubernetes assigns, the string otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum UidKey {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl UidKey {
    fn new(uid: &str) -> UidKey {
        parse_uuid(uid).map_or_else(|| UidKey::Other(uid.into()), UidKey::Uuid)
    }

    fn to_uid_string(&self) -> String {
        match self {
            UidKey::Uuid(b) => format_uuid(b),
            UidKey::Other(s) => s.to_string(),
        }
    }
}

/// A resourceVersion as stored: an integer where it is one (every conforming server).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Version {
    Number(u64),
    Opaque(Box<str>),
}

impl Version {
    fn new(rv: &ResourceVersion) -> Version {
        match rv.as_u64() {
            // A leading zero would not survive the round trip through u64.
            Some(n) if n.to_string() == rv.as_str() => Version::Number(n),
            _ => Version::Opaque(rv.as_str().into()),
        }
    }

    /// Only integers are ordered; opaque versions are never "older".
    fn older_than(&self, other: &Version) -> bool {
        matches!((self, other), (Version::Number(a), Version::Number(b)) if a < b)
    }

    fn to_resource_version(&self) -> ResourceVersion {
        match self {
            Version::Number(n) => ResourceVersion::new(n.to_string()),
            Version::Opaque(s) => ResourceVersion::new(s.clone()),
        }
    }
}

#[derive(Debug)]
struct Tracked {
    version: Version,
    name: Box<str>,
    /// Shared between the objects of one namespace.
    namespace: Option<Arc<str>>,
    /// The list generation that last saw this object.
    list_epoch: u32,
}

/// The published state of one watch target.
#[derive(Debug, Default)]
pub struct Dedupe {
    objects: HashMap<UidKey, Tracked>,
    namespaces: HashMap<Arc<str>, ()>,
    list_epoch: u32,
}

impl Dedupe {
    pub fn new() -> Dedupe {
        Dedupe::default()
    }

    /// Objects currently tracked.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Judges a received event and, when it is to be published, records it.
    pub fn observe(&mut self, meta: &ObjectMeta, event_type: EventType) -> Verdict {
        let key = UidKey::new(&meta.uid);
        let version = Version::new(&meta.resource_version);
        if let Some(tracked) = self.objects.get_mut(&key) {
            if version.older_than(&tracked.version) {
                return Verdict::Stale;
            }
            if event_type != EventType::Deleted && version == tracked.version {
                return Verdict::Duplicate;
            }
        }
        match event_type {
            EventType::Deleted => {
                self.objects.remove(&key);
            }
            EventType::Added | EventType::Modified => self.track(key, version, meta),
        }
        Verdict::Publish
    }

    /// A new list begins: objects not seen by [`listed`](Self::listed) before
    /// [`end_list`](Self::end_list) count as vanished.
    pub fn begin_list(&mut self) {
        self.list_epoch = self.list_epoch.wrapping_add(1);
    }

    /// Compares one listed object with the state, and records it.
    pub fn listed(&mut self, meta: &ObjectMeta) -> Listed {
        let key = UidKey::new(&meta.uid);
        let version = Version::new(&meta.resource_version);
        let verdict = match self.objects.get_mut(&key) {
            None => Listed::New,
            Some(tracked) => {
                tracked.list_epoch = self.list_epoch;
                if version == tracked.version {
                    return Listed::Unchanged;
                }
                if version.older_than(&tracked.version) {
                    return Listed::Stale;
                }
                Listed::Changed
            }
        };
        self.track(key, version, meta);
        verdict
    }

    /// The list is complete: every tracked object it did not contain has vanished and is forgotten.
    /// The vanished come in namespace and name order, so the deletions a relist announces are
    /// reproducible.
    pub fn end_list(&mut self) -> Vec<Vanished> {
        let epoch = self.list_epoch;
        let gone: Vec<UidKey> = self
            .objects
            .iter()
            .filter(|(_, t)| t.list_epoch != epoch)
            .map(|(k, _)| k.clone())
            .collect();
        let mut vanished = gone
            .into_iter()
            .filter_map(|key| {
                let tracked = self.objects.remove(&key)?;
                Some(Vanished {
                    meta: ObjectMeta {
                        uid: key.to_uid_string(),
                        resource_version: tracked.version.to_resource_version(),
                        name: tracked.name.into(),
                        namespace: tracked.namespace.map(|ns| ns.to_string()),
                    },
                })
            })
            .collect::<Vec<_>>();
        self.namespaces.retain(|ns, _| Arc::strong_count(ns) > 1);
        vanished.sort_by(|a, b| {
            (&a.meta.namespace, &a.meta.name).cmp(&(&b.meta.namespace, &b.meta.name))
        });
        vanished
    }

    fn track(&mut self, key: UidKey, version: Version, meta: &ObjectMeta) {
        let namespace = meta.namespace.as_deref().map(|ns| self.intern(ns));
        self.objects.insert(
            key,
            Tracked {
                version,
                name: meta.name.as_str().into(),
                namespace,
                list_epoch: self.list_epoch,
            },
        );
    }

    fn intern(&mut self, namespace: &str) -> Arc<str> {
        if let Some((ns, _)) = self.namespaces.get_key_value(namespace) {
            return ns.clone();
        }
        let ns: Arc<str> = namespace.into();
        self.namespaces.insert(ns.clone(), ());
        ns
    }
}

/// Parses the canonical `8-4-4-4-12` hex form; anything else is not a UUID here.
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    let mut out = [0u8; 16];
    let mut hex = b.iter().filter(|&&c| c != b'-');
    for byte in &mut out {
        let hi = hex_value(*hex.next()?)?;
        let lo = hex_value(*hex.next()?)?;
        *byte = hi << 4 | lo;
    }
    Some(out)
}

/// Lower-case only: an upper-case UUID would not survive the round trip, so it stays a string.
fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn format_uuid(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(uid: &str, rv: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            uid: uid.into(),
            resource_version: ResourceVersion::new(rv),
            name: name.into(),
            namespace: Some("default".into()),
        }
    }

    const A: &str = "0b8e6c3a-1f2d-4e5f-9a0b-1c2d3e4f5a6b";
    const B: &str = "not-a-uuid";

    #[test]
    fn uuid_round_trip() {
        assert_eq!(format_uuid(&parse_uuid(A).unwrap()), A);
        assert_eq!(parse_uuid("0B8E6C3A-1F2D-4E5F-9A0B-1C2D3E4F5A6B"), None);
    }

    #[test]
    fn repeats_and_older_versions_are_dropped() {
        let mut d = Dedupe::new();
        assert_eq!(
            d.observe(&meta(A, "10", "a"), EventType::Added),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(A, "10", "a"), EventType::Added),
            Verdict::Duplicate
        );
        assert_eq!(
            d.observe(&meta(A, "12", "a"), EventType::Modified),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(A, "11", "a"), EventType::Modified),
            Verdict::Stale
        );
        assert_eq!(
            d.observe(&meta(A, "13", "a"), EventType::Deleted),
            Verdict::Publish
        );
        assert!(d.is_empty());
    }

    #[test]
    fn opaque_versions_compare_for_equality_only() {
        let mut d = Dedupe::new();
        assert_eq!(
            d.observe(&meta(B, "abc", "b"), EventType::Added),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "abc", "b"), EventType::Modified),
            Verdict::Duplicate
        );
        assert_eq!(
            d.observe(&meta(B, "abb", "b"), EventType::Modified),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "0042", "b"), EventType::Modified),
            Verdict::Publish
        );
        assert_eq!(
            d.observe(&meta(B, "0042", "b"), EventType::Modified),
            Verdict::Duplicate
        );
    }

    #[test]
    fn relist_diff_added_changed_unchanged_vanished() {
        let mut d = Dedupe::new();
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "5", "a")), Listed::New);
        assert_eq!(
            d.listed(&meta("11111111-2222-3333-4444-555555555555", "6", "gone")),
            Listed::New
        );
        assert_eq!(d.listed(&meta(B, "7", "same")), Listed::New);
        assert!(d.end_list().is_empty());

        d.begin_list();
        assert_eq!(d.listed(&meta(A, "9", "a")), Listed::Changed);
        assert_eq!(d.listed(&meta(B, "7", "same")), Listed::Unchanged);
        assert_eq!(
            d.listed(&meta("99999999-2222-3333-4444-555555555555", "8", "new")),
            Listed::New
        );
        let vanished = d.end_list();
        assert_eq!(
            vanished,
            vec![Vanished {
                meta: meta("11111111-2222-3333-4444-555555555555", "6", "gone")
            }]
        );
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn relist_from_a_lagging_server_is_stale_not_a_change() {
        let mut d = Dedupe::new();
        d.observe(&meta(A, "20", "a"), EventType::Added);
        d.begin_list();
        assert_eq!(d.listed(&meta(A, "15", "a")), Listed::Stale);
        assert!(
            d.end_list().is_empty(),
            "a stale listing still proves the object exists"
        );
        assert_eq!(
            d.observe(&meta(A, "20", "a"), EventType::Modified),
            Verdict::Duplicate
        );
    }

    #[test]
    fn deleted_and_recreated_name_is_two_objects() {
        let mut d = Dedupe::new();
        d.begin_list();
        d.listed(&meta(A, "5", "web"));
        d.end_list();
        d.begin_list();
        let new_uid = "22222222-2222-3333-4444-555555555555";
        assert_eq!(d.listed(&meta(new_uid, "9", "web")), Listed::New);
        let vanished = d.end_list();
        assert_eq!(vanished.len(), 1);
        assert_eq!(vanished[0].meta.uid, A);
        assert_eq!(vanished[0].meta.name, "web");
    }
}
