//! `watches[].changes`, `ignore_paths` and `strip_paths`: the per-watch noise control, checked
//! into typed values (paths parsed by [`crate::json_path`]).

use super::checker::{non_empty, Checker};
use super::named::Named;
use crate::json_path::JsonPath;

/// Most paths one watch may name in `ignore_paths` or `strip_paths` (each): the noise walks
/// ([`crate::noise`]) follow all of a watch's paths at once in a 64-bit set.
pub(crate) const MAX_PATHS: usize = 30;

/// `watches[].changes`: `any`, so every MODIFIED the API server reports is published.
pub(super) const DEFAULT_CHANGES: Changes = Changes::Any;

/// Which MODIFIED events a watch publishes (ADDED and DELETED always are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changes {
    /// Every one.
    Any,
    /// Only those where `metadata.generation` changed (or that have none to compare).
    Generation,
    /// Only those where the object changed outside the ignored paths.
    Content,
}

impl Named for Changes {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("any", Changes::Any),
        ("generation", Changes::Generation),
        ("content", Changes::Content),
    ];
}

/// A watch's noise control, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoiseConfig {
    pub changes: Changes,
    /// Ignored by `content` besides [`crate::noise::ALWAYS_IGNORED`]; empty under other modes.
    pub ignore_paths: Vec<JsonPath>,
    /// Removed from the published object.
    pub strip_paths: Vec<JsonPath>,
}

impl Default for NoiseConfig {
    fn default() -> Self {
        NoiseConfig {
            changes: DEFAULT_CHANGES,
            ignore_paths: Vec::new(),
            strip_paths: Vec::new(),
        }
    }
}

/// A watch's noise keys as written (`changes`, `ignore_paths`, `strip_paths` of its `RawWatch`).
pub(super) struct RawNoise<'a> {
    pub(super) changes: &'a str,
    pub(super) ignore_paths: &'a [String],
    pub(super) strip_paths: &'a [String],
}

/// `watches[i]`'s noise control; `None` if any part was invalid (each problem recorded).
pub(super) fn check_noise(c: &mut Checker, i: usize, w: RawNoise<'_>) -> Option<NoiseConfig> {
    let key = |field: &str| format!("watches[{i}].{field}");
    let changes = c.one_of(
        &key("changes"),
        non_empty(w.changes).unwrap_or("any"),
        Changes::NAMES,
    );
    let ignore_paths = check_paths(c, &key("ignore_paths"), w.ignore_paths);
    let strip_paths = check_paths(c, &key("strip_paths"), w.strip_paths);
    if changes.is_some_and(|m| m != Changes::Content) && !w.ignore_paths.is_empty() {
        return c.fail(
            key("ignore_paths"),
            "only used with changes = \"content\" (set it, or remove ignore_paths)",
        );
    }
    Some(NoiseConfig {
        changes: changes?,
        ignore_paths: ignore_paths?,
        strip_paths: strip_paths?,
    })
}

fn check_paths(c: &mut Checker, key: &str, paths: &[String]) -> Option<Vec<JsonPath>> {
    if paths.len() > MAX_PATHS {
        return c.fail(key, format!("at most {MAX_PATHS} paths"));
    }
    let before = c.errors.len();
    let mut out: Vec<JsonPath> = Vec::with_capacity(paths.len());
    for (i, text) in paths.iter().enumerate() {
        match JsonPath::parse(text) {
            Ok(path) if out.contains(&path) => {
                c.fail::<()>(format!("{key}[{i}]"), format!("duplicate path {text:?}"));
            }
            Ok(path) => out.push(path),
            Err(why) => {
                c.fail::<()>(
                    format!("{key}[{i}]"),
                    format!("invalid path {text:?}: {why}"),
                );
            }
        }
    }
    (c.errors.len() == before).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn defaults_publish_everything_as_received() {
        let c = load_str(MINIMAL).unwrap();
        assert_eq!(c.watches[0].noise, NoiseConfig::default());
    }

    #[test]
    fn modes_and_paths() {
        let c = load_str(&format!(
            "{MINIMAL}\nchanges = \"content\"\nignore_paths = [\"status\", 'metadata.annotations.\"example.com/beat\"']\nstrip_paths = [\"metadata.managedFields\"]"
        ))
        .unwrap();
        let noise = &c.watches[0].noise;
        assert_eq!(noise.changes, Changes::Content);
        assert_eq!(
            noise.ignore_paths[1].segments().last().map(|s| &**s),
            Some("example.com/beat")
        );
        assert_eq!(noise.strip_paths.len(), 1);
        let c = load_str(&format!("{MINIMAL}\nchanges = \"generation\"")).unwrap();
        assert_eq!(c.watches[0].noise.changes, Changes::Generation);
    }

    #[test]
    fn bad_values_name_their_key() {
        assert_watch_error(
            "changes = \"spec\"",
            "watches[0].changes: invalid value \"spec\" (allowed: any, generation, content)",
        );
        assert_watch_error(
            "strip_paths = [\"metadata.managedFields\", \"metadata.annotations.kubectl.kubernetes.io/last-applied-configuration\"]",
            "watches[0].strip_paths[1]: invalid path \"metadata.annotations.kubectl.kubernetes.io/last-applied-configuration\": '/' in segment",
        );
        assert_watch_error(
            "changes = \"content\"\nignore_paths = [\"status\", \"status\"]",
            "watches[0].ignore_paths[1]: duplicate path \"status\"",
        );
        assert_watch_error(
            "changes = \"content\"\nignore_paths = [\"a..b\"]",
            "watches[0].ignore_paths[0]: invalid path \"a..b\": empty segment",
        );
        assert_watch_error(
            "ignore_paths = [\"status\"]",
            "watches[0].ignore_paths: only used with changes = \"content\"",
        );
    }
}
