//! Label and field selectors, parsed from query strings and matched against stored objects.
//!
//! The grammar is the one `kubectl` and client-go emit: comma-separated requirements, where a
//! label requirement is `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` or `!k`, and a
//! field requirement is `field=v`, `field==v` or `field!=v` over `metadata.name` and
//! `metadata.namespace` (what every resource supports). Parse errors become 400s, never panics.

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside parentheses (`in (a,b)` keeps its commas).
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// Parses `( a, b )` into its values.
fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{rest}', expected: '(' ... ')'"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses a selector; the error is the message of the 400 the real server would send.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top_level(s) {
            let part = part.trim();
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelReq::DoesNotExist(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEquals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Equals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Equals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelReq::NotIn(k.trim().to_string(), parse_set(rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelReq::In(k.trim().to_string(), parse_set(rest)?)
            } else {
                LabelReq::Exists(part.to_string())
            };
            let key = match &req {
                LabelReq::Equals(k, _)
                | LabelReq::NotEquals(k, _)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _)
                | LabelReq::Exists(k)
                | LabelReq::DoesNotExist(k) => k,
            };
            if !valid_key(key) {
                return Err(format!(
                    "unable to parse requirement: invalid label key \"{key}\""
                ));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether `obj`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            LabelReq::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::DoesNotExist(k) => get(k).is_none(),
        })
    }

    /// True when the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed `fieldSelector`: (JSON pointer, value, negated) triples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(&'static str, String, bool)>);

impl FieldSelector {
    /// Parses a selector; unknown fields are refused as the real server refuses them.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(reqs));
        }
        for part in s.split(',') {
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let pointer = match field.trim() {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                other => return Err(format!("field label not supported: {other}")),
            };
            reqs.push((pointer, value.trim().to_string(), negated));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether `obj` satisfies every requirement (a missing field reads as "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(pointer, value, negated)| {
            let actual = obj.pointer(pointer).and_then(Value::as_str).unwrap_or("");
            (actual == value) != *negated
        })
    }

    /// True when the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({ "metadata": { "name": "a", "namespace": "default", "labels": labels } })
    }

    #[test]
    fn label_selector_operators() {
        let p = pod(json!({ "app": "web", "tier": "front" }));
        let m = |s: &str| LabelSelector::parse(s).expect("valid selector").matches(&p);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, api),tier notin (back)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(!m("missing"));
        assert!(m(""));
    }

    #[test]
    fn bad_selectors_are_errors() {
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
        assert!(FieldSelector::parse("spec.nodeName=x").is_err());
        assert!(FieldSelector::parse("nonsense").is_err());
    }

    #[test]
    fn field_selector_name_and_namespace() {
        let p = pod(json!({}));
        let m = |s: &str| FieldSelector::parse(s).expect("valid selector").matches(&p);
        assert!(m("metadata.name=a"));
        assert!(m("metadata.namespace==default,metadata.name!=b"));
        assert!(!m("metadata.name!=a"));
    }
}
