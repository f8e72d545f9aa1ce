//! The raw forms' shared helpers: how a default is spelt in the file. Each section's raw form
//! (its file's `Raw…` struct, in which every key has its default and meaningful strings are still
//! strings) lives in the section's file, the root [`super::root::RawConfig`] in `root`.

use std::time::Duration;

/// A default string as the raw form holds it.
pub(super) fn s(v: &str) -> String {
    v.to_owned()
}

/// A default duration as the file spells it (`30s`, `800ms`).
pub(super) fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
