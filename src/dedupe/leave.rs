//! An object that stopped matching its watch's filter (docs/filters.md).

use super::keys::UidKey;
use super::keys::Version;
use super::{Dedupe, Verdict};
use crate::event::ObjectMeta;

impl Dedupe {
    /// The object left the watch's filter at `meta`'s version: forgotten, as a deleted one is,
    /// but without a tombstone, since it may match again later and is then news (ADDED).
    /// [`Verdict::Stale`] when the version is older than the one published, or the object is
    /// not tracked.
    pub(crate) fn leave(&mut self, meta: &ObjectMeta) -> Verdict {
        let key = UidKey::new(&meta.uid);
        let Some((_, tracked)) = self.locate(&key) else {
            return Verdict::Stale;
        };
        let stored = self.stored_version(&key, tracked);
        if Version::new(&meta.resource_version).older_than(&stored) {
            return Verdict::Stale;
        }
        self.forget(&key);
        Verdict::Publish
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventType, ResourceVersion};

    fn meta(rv: &str) -> ObjectMeta {
        ObjectMeta {
            uid: "8f5c9a4e-1b2c-4d3e-9f00-0123456789ab".into(),
            resource_version: ResourceVersion::new(rv.to_owned()),
            name: "web".into(),
            namespace: Some("default".into()),
            generation: None,
        }
    }

    /// Unlike a deletion, leaving leaves no tombstone: the object's next change is news again.
    #[test]
    fn a_left_object_can_come_back() {
        let mut d = Dedupe::new();
        assert_eq!(d.observe(&meta("5"), EventType::Added, 0), Verdict::Publish);
        assert_eq!(d.leave(&meta("4")), Verdict::Stale);
        assert!(d.tracks(&meta("5").uid));
        assert_eq!(d.leave(&meta("6")), Verdict::Publish);
        assert!(!d.tracks(&meta("6").uid));
        assert_eq!(d.leave(&meta("7")), Verdict::Stale);
        assert_eq!(d.tombstones(), 0);
        assert_eq!(
            d.observe(&meta("8"), EventType::Modified, 0),
            Verdict::Publish
        );
        assert!(d.tracks(&meta("8").uid));
    }
}
