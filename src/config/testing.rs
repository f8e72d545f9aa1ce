//! Helpers of the configuration tests: a configuration file on disk, an environment, and the
//! error lines a configuration produces.

use std::collections::HashMap;
use std::io::Write as _;

use super::{load, Config, ConfigErrors};

pub(crate) const MINIMAL: &str = "[[watches]]\nname = \"pods\"\nresource = \"pods\"\n";

pub(super) fn file(contents: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    f.write_all(contents.as_bytes()).expect("write temp file");
    f
}

pub(super) fn env(pairs: &[(&str, &str)]) -> Option<HashMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

pub(crate) fn load_str(contents: &str) -> Result<Config, ConfigErrors> {
    let f = file(contents);
    load(Some(f.path()), env(&[]))
}

/// The error lines of a configuration made of `MINIMAL` plus `extra` before it.
pub(super) fn errors(extra: &str) -> Vec<String> {
    let err =
        load_str(&format!("{extra}\n{MINIMAL}")).expect_err("configuration should be invalid");
    err.iter().map(ToString::to_string).collect()
}

pub(super) fn assert_error(extra: &str, want: &str) {
    assert_some_line(&errors(extra), want);
}

fn assert_some_line(lines: &[String], want: &str) {
    assert!(
        lines.iter().any(|l| l.contains(want)),
        "no line containing {want:?} in {lines:#?}"
    );
}

pub(super) fn watch_errors(body: &str) -> Vec<String> {
    let err = load_str(&format!(
        "[[watches]]\nname = \"w\"\nresource = \"pods\"\n{body}"
    ))
    .expect_err("invalid watch");
    err.iter().map(ToString::to_string).collect()
}

pub(super) fn assert_watch_error(body: &str, want: &str) {
    assert_some_line(&watch_errors(body), want);
}
