//! Paths into a Kubernetes object, as `ignore_paths` and `strip_paths` name them.
//!
//! A path is a dot-separated list of object member names, from the object's root:
//! `status`, `metadata.managedFields`, `metadata.annotations."kubectl.kubernetes.io/last-applied-configuration"`.
//! A segment of letters, digits, `_` and `-` is written bare; any other name (dots and slashes are
//! common in annotation and label keys) is written in double quotes, with `\"` and `\\` for a
//! quote or backslash inside. Paths address object members only: a path that meets an array or a
//! scalar before its last segment matches nothing there.
//!
//! Parsed once, at start, by the configuration; the noise-control stage ([`crate::noise`]) walks
//! objects with the parsed segments.

use std::fmt;

/// Objects nest only a few levels where paths are useful; the bound keeps the walk that follows
/// a path (recursive along the path only) trivially shallow.
pub(crate) const MAX_SEGMENTS: usize = 32;

/// A parsed path: at least one segment, each a member name as it appears in the JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPath {
    segments: Vec<Box<str>>,
}

impl JsonPath {
    /// Parses the syntax in the module docs; the error says what is wrong, for the config check
    /// to prefix with the key.
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let mut segments = Vec::new();
        let mut rest = text;
        loop {
            let (segment, after) = if let Some(quoted) = rest.strip_prefix('"') {
                quoted_segment(quoted)?
            } else {
                let end = rest.find('.').unwrap_or(rest.len());
                let bare = &rest[..end];
                if bare.is_empty() {
                    return Err("empty segment (two dots, or a dot at either end)".into());
                }
                if let Some(c) = bare
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
                {
                    return Err(format!(
                        "{c:?} in segment {bare:?}: quote names holding anything but letters, digits, `_` and `-` (e.g. metadata.annotations.\"example.com/key\")"
                    ));
                }
                (bare.to_owned(), &rest[end..])
            };
            segments.push(segment.into_boxed_str());
            if segments.len() > MAX_SEGMENTS {
                return Err(format!("more than {MAX_SEGMENTS} segments"));
            }
            match after.strip_prefix('.') {
                Some(next) => rest = next,
                None if after.is_empty() => return Ok(JsonPath { segments }),
                None => return Err(format!("expected `.` after segment, found {after:?}")),
            }
        }
    }

    pub(crate) fn segments(&self) -> &[Box<str>] {
        &self.segments
    }
}

/// A quoted segment whose opening quote is consumed: its name and what follows the closing quote.
fn quoted_segment(s: &str) -> Result<(String, &str), String> {
    let mut name = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' if name.is_empty() => return Err("empty quoted segment".into()),
            '"' => return Ok((name, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => name.push(e),
                _ => return Err("only \\\" and \\\\ are escapes inside quotes".into()),
            },
            c => name.push(c),
        }
    }
    Err("unterminated quote".into())
}

/// The canonical spelling: bare where possible, quoted otherwise; parses back to the same path.
impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            let bare = segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if bare {
                f.write_str(segment)?;
            } else {
                f.write_str("\"")?;
                for c in segment.chars() {
                    if c == '"' || c == '\\' {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("\"")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(text: &str) -> Vec<String> {
        JsonPath::parse(text)
            .unwrap()
            .segments()
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn bare_and_quoted_segments() {
        assert_eq!(segments("status"), ["status"]);
        assert_eq!(
            segments("metadata.managedFields"),
            ["metadata", "managedFields"]
        );
        assert_eq!(
            segments(r#"metadata.annotations."kubectl.kubernetes.io/last-applied-configuration""#),
            [
                "metadata",
                "annotations",
                "kubectl.kubernetes.io/last-applied-configuration"
            ]
        );
        assert_eq!(segments(r#""a\"b\\c".x_y-z"#), ["a\"b\\c", "x_y-z"]);
    }

    #[test]
    fn malformed_paths_say_why() {
        let cases = [
            ("", "empty segment"),
            ("a..b", "empty segment"),
            (".a", "empty segment"),
            ("a.", "empty segment"),
            (
                "metadata.annotations.example.com/x",
                "'/' in segment \"com/x\"",
            ),
            ("a b", "' ' in segment"),
            (r#"a."b"#, "unterminated quote"),
            (r#"a."""#, "empty quoted segment"),
            (r#""a"b"#, "expected `.` after segment"),
            (r#""a\n""#, "only \\\" and \\\\ are escapes"),
            ("spec.containers[0]", "'[' in segment"),
        ];
        for (text, why) in cases {
            let err = JsonPath::parse(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn display_parses_back() {
        for text in [
            "status",
            r#"metadata.annotations."example.com/x""#,
            r#""a\"b\\c".d"#,
        ] {
            let path = JsonPath::parse(text).unwrap();
            assert_eq!(path.to_string(), text);
            assert_eq!(JsonPath::parse(&path.to_string()).unwrap(), path);
        }
    }
}
