//! Noise control: which MODIFIED events are news to subscribers, and which bytes they get.
//!
//! Per watch, opt-in (the defaults leave every event and every byte as received):
//! - `changes = "generation"` publishes a MODIFIED only when `metadata.generation` moved (the
//!   API server bumps it on spec changes of most resources); `changes = "content"` only when the
//!   object changed outside the ignored paths, judged by a [`fingerprint`]. The mark each mode
//!   compares is kept per object by [`crate::dedupe`] (and in the durable state), which makes the
//!   call; ADDED and DELETED are always published.
//! - `strip_paths` removes members from the published object ([`strip`]).
//!
//! Paths are parsed by [`crate::json_path`] at start.

mod fingerprint;
mod json;
mod strip;

use bytes::Bytes;

use crate::config::{Changes, NoiseConfig};
use crate::event::ObjectEvent;
use crate::json_path::JsonPath;

pub(crate) use json::Malformed;

/// Paths `changes = "content"` always ignores: they change on every write (or with every spec
/// change, which the content shows anyway) without saying anything about the object.
pub(crate) const ALWAYS_IGNORED: [&str; 3] = [
    "metadata.resourceVersion",
    "metadata.managedFields",
    "metadata.generation",
];

// The walks follow all of a watch's paths at once in a 64-bit set; the configuration enforces
// the bound on how many a watch may name (`config::noise::MAX_PATHS`).

/// A watch's noise control, built once from its configuration.
#[derive(Debug, Clone)]
pub struct NoiseControl {
    changes: Changes,
    /// Under `content`: the always ignored paths, `ignore_paths` and `strip_paths` (a change that
    /// only stripped members would show is no news to a subscriber).
    ignore: PathSet,
    strip: PathSet,
    /// Mixed into fingerprints, so fingerprints saved under other ignored paths never match.
    seed: u64,
}

impl NoiseControl {
    pub fn new(config: &NoiseConfig) -> NoiseControl {
        let mut ignore: Vec<JsonPath> = ALWAYS_IGNORED
            .iter()
            .filter_map(|p| JsonPath::parse(p).ok())
            .collect();
        for path in config.ignore_paths.iter().chain(&config.strip_paths) {
            if !ignore.contains(path) {
                ignore.push(path.clone());
            }
        }
        let mut spelled: Vec<String> = ignore.iter().map(ToString::to_string).collect();
        spelled.sort();
        NoiseControl {
            changes: config.changes,
            seed: xxhash_rust::xxh3::xxh3_64(spelled.join("\n").as_bytes()),
            ignore: PathSet::new(ignore),
            strip: PathSet::new(config.strip_paths.clone()),
        }
    }

    /// What de-duplication compares to tell whether a MODIFIED is news: the generation, or the
    /// content fingerprint. 0 means "nothing to compare" (no generation; `changes = "any"`; an
    /// object that could not be walked), and such an event is always published.
    pub fn mark(&self, event: &ObjectEvent) -> u64 {
        match self.changes {
            Changes::Any => 0,
            Changes::Generation => event.meta.generation.map_or(0, |g| g as u64),
            Changes::Content => match fingerprint::fingerprint(&event.object, &self.ignore) {
                Ok(hash) => (hash ^ self.seed).max(1),
                Err(_) => 0,
            },
        }
    }

    /// The object without the configured `strip_paths`; `None` when it holds none of them (or
    /// none are configured), so the received bytes go out as they are.
    pub fn stripped(&self, object: &Bytes) -> Result<Option<Bytes>, Malformed> {
        if self.strip.is_empty() {
            return Ok(None);
        }
        strip::strip(object, &self.strip)
    }
}

/// Up to 64 paths, followed together through an object: `active` bit sets name the paths still
/// matching along the way.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathSet {
    paths: Vec<JsonPath>,
}

/// What one member's key does to the paths followed into its object.
struct Step {
    /// A path ends at this member: it is ignored or stripped.
    matched: bool,
    /// The paths that continue into the member's value.
    child: u64,
}

impl PathSet {
    pub(crate) fn new(mut paths: Vec<JsonPath>) -> PathSet {
        paths.truncate(64);
        PathSet { paths }
    }

    fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Every path, at the object's root.
    fn all(&self) -> u64 {
        match self.paths.len() {
            64 => u64::MAX,
            n => (1u64 << n) - 1,
        }
    }

    /// The paths of `active` (matched for `depth` segments) that go on through `key`.
    fn step(&self, active: u64, depth: usize, key: &str) -> Step {
        let mut step = Step {
            matched: false,
            child: 0,
        };
        let mut rest = active;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            let segments = self.paths[i].segments();
            if segments.get(depth).is_some_and(|s| **s == *key) {
                if segments.len() == depth + 1 {
                    step.matched = true;
                } else {
                    step.child |= 1 << i;
                }
            }
        }
        step
    }
}
