//! `[mirror]`: the key-value bucket that holds the current objects of the mirrored watches
//! (docs/mirror.md); the section's raw form, defaults, check and typed value together.

use std::time::Duration;

use super::checker::Checker;
use super::raw::s;
use super::watches::WatchConfig;

/// `mirror.bucket`: the key contract's default bucket (docs/subscribers.md).
pub(super) const DEFAULT_MIRROR_BUCKET: &str = "kube-objects";
/// `mirror.replicas`: one, as a single NATS server needs; three on a clustered JetStream.
pub(super) const DEFAULT_MIRROR_REPLICAS: usize = 1;
/// `mirror.delete_marker_ttl`: how long a deletion's marker stays in the bucket, so that a
/// client whose watch was away for less than this still sees the deletion; then the server
/// removes it (per-message TTL) and markers never pile up.
pub(super) const DEFAULT_DELETE_MARKER_TTL: &str = "15m";
/// The shortest `mirror.delete_marker_ttl` accepted: the server's per-message TTL is in whole
/// seconds.
const MIN_DELETE_MARKER_TTL: Duration = Duration::from_secs(1);
/// `mirror.max_in_flight`: unacknowledged bucket writes per watch target.
pub(super) const DEFAULT_MIRROR_MAX_IN_FLIGHT: usize = 256;

/// The validated `[mirror]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MirrorConfig {
    /// The default of every watch's `mirror`.
    pub(crate) enabled: bool,
    pub(crate) bucket: String,
    /// Replicas of the bucket when kube2nats creates it (an existing bucket is not changed).
    pub(crate) replicas: usize,
    /// The bucket's size limit; `None` = unlimited. When full, writes fail (counted and logged).
    pub(crate) max_bytes: Option<u64>,
    /// The per-message TTL of delete markers.
    pub(crate) delete_marker_ttl: Duration,
    /// Unacknowledged bucket writes per watch target.
    pub(crate) max_in_flight: usize,
}

/// `[mirror]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawMirror {
    /// Default `false`.
    pub(crate) enabled: bool,
    /// `[A-Za-z0-9_-]+`. Default [`DEFAULT_MIRROR_BUCKET`].
    pub(crate) bucket: String,
    /// 1..=5. Default [`DEFAULT_MIRROR_REPLICAS`].
    pub(crate) replicas: usize,
    /// Bytes, >= 1, or -1 = unlimited (the default).
    pub(crate) max_bytes: i64,
    /// Duration, >= 1s. Default [`DEFAULT_DELETE_MARKER_TTL`].
    pub(crate) delete_marker_ttl: String,
    /// 1..=65536. Default [`DEFAULT_MIRROR_MAX_IN_FLIGHT`].
    pub(crate) max_in_flight: usize,
}

impl Default for RawMirror {
    fn default() -> Self {
        RawMirror {
            enabled: false,
            bucket: s(DEFAULT_MIRROR_BUCKET),
            replicas: DEFAULT_MIRROR_REPLICAS,
            max_bytes: -1,
            delete_marker_ttl: s(DEFAULT_DELETE_MARKER_TTL),
            max_in_flight: DEFAULT_MIRROR_MAX_IN_FLIGHT,
        }
    }
}

pub(super) fn check_mirror(c: &mut Checker, raw: &RawMirror) -> Option<MirrorConfig> {
    let (bucket, replicas) = c.bucket("mirror", &raw.bucket, raw.replicas);
    let max_bytes = c.limit("mirror.max_bytes", raw.max_bytes);
    let ttl = c.duration_min(
        "mirror.delete_marker_ttl",
        &raw.delete_marker_ttl,
        MIN_DELETE_MARKER_TTL,
    );
    let max_in_flight = c.range("mirror.max_in_flight", raw.max_in_flight, 1, Some(1 << 16));
    Some(MirrorConfig {
        enabled: raw.enabled,
        bucket: bucket?,
        replicas: replicas?,
        max_bytes: max_bytes?,
        delete_marker_ttl: ttl?,
        max_in_flight: max_in_flight?,
    })
}

/// Each watch's `mirror`: as it says (`mirrored[i]`), else `mirror.enabled`.
pub(super) fn resolve_watches(
    watches: Vec<WatchConfig>,
    mirrored: &[Option<bool>],
    mirror: &MirrorConfig,
) -> Vec<WatchConfig> {
    watches
        .into_iter()
        .zip(mirrored)
        .map(|(watch, mirrored)| WatchConfig {
            mirror: mirrored.unwrap_or(mirror.enabled),
            ..watch
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_error, load_str, MINIMAL};
    use super::*;

    #[test]
    fn defaults() {
        let c = load_str(MINIMAL).unwrap();
        assert_eq!(
            c.mirror,
            MirrorConfig {
                enabled: false,
                bucket: "kube-objects".into(),
                replicas: 1,
                max_bytes: None,
                delete_marker_ttl: Duration::from_secs(15 * 60),
                max_in_flight: 256,
            }
        );
        assert!(!c.watches[0].mirror);
    }

    #[test]
    fn a_watch_follows_the_section_unless_it_says_otherwise() {
        let c = load_str(
            "[mirror]\nenabled = true\nbucket = \"objs\"\nmax_bytes = 1048576\ndelete_marker_ttl = \"2m\"\n\
             [[watches]]\nname = \"a\"\nresource = \"pods\"\n\
             [[watches]]\nname = \"b\"\nresource = \"secrets\"\nmirror = false\n",
        )
        .unwrap();
        assert_eq!(c.mirror.bucket, "objs");
        assert_eq!(c.mirror.max_bytes, Some(1 << 20));
        assert_eq!(c.mirror.delete_marker_ttl, Duration::from_secs(120));
        assert!(c.watches[0].mirror);
        assert!(!c.watches[1].mirror);
        let c =
            load_str("[[watches]]\nname = \"a\"\nresource = \"pods\"\nmirror = true\n").unwrap();
        assert!(c.watches[0].mirror);
    }

    #[test]
    fn invalid_values_name_their_key() {
        assert_error(
            "[mirror]\nbucket = \"a.b\"",
            "mirror.bucket: invalid bucket name",
        );
        assert_error(
            "[mirror]\nreplicas = 0",
            "mirror.replicas: 0 is out of range",
        );
        assert_error("[mirror]\nmax_bytes = 0", "mirror.max_bytes: 0 is not >= 1");
        assert_error(
            "[mirror]\ndelete_marker_ttl = \"10ms\"",
            "mirror.delete_marker_ttl: \"10ms\" is too short",
        );
        assert_error(
            "[mirror]\nmax_in_flight = 0",
            "mirror.max_in_flight: 0 is out of range",
        );
    }
}
