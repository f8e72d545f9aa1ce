//! Subject templates and the token escaping rule.
//!
//! A watch publishes each change to a subject built from a template such as the default
//! `{prefix}.{group}.{version}.{resource}.{namespace}.{name}.{type}`, or with `publish.cluster` set
//! `{prefix}.{cluster}.{group}.…` ([`DEFAULT_CLUSTER_TEMPLATE`]). The template is parsed once,
//! at start-up ([`SubjectTemplate::parse`]); on the hot path [`SubjectTemplate::render`] only appends
//! to a reused buffer.
//!
//! # Placeholders
//!
//! | placeholder   | value                                                           |
//! |---------------|-----------------------------------------------------------------|
//! | `{prefix}`    | `publish.subject_prefix`, inserted verbatim (may hold dots)     |
//! | `{cluster}`   | `publish.cluster`                                               |
//! | `{group}`     | the API group, `core` for the core group                        |
//! | `{version}`   | the API version (`v1`)                                          |
//! | `{resource}`  | the plural resource name (`pods`)                               |
//! | `{namespace}` | the object's namespace, `_` for cluster-scoped objects          |
//! | `{name}`      | the object's name                                               |
//! | `{type}`      | `added`, `modified` or `deleted`                                |
//! | `{label:KEY}` | the object's label `KEY` (e.g. `{label:app.kubernetes.io/name}`), `_` if it has none |
//! | `{annotation:KEY}` | the object's annotation `KEY`, `_` if it has none           |
//!
//! Only watches whose template uses `{label:…}` or `{annotation:…}` read the object's labels and
//! annotations (docs/filters.md, "Subjects from labels").
//!
//! # The escaping rule
//!
//! Every placeholder value except `{prefix}` and `{type}` becomes exactly one subject token, escaped
//! by [`escape_token`] so that distinct values always give distinct tokens (the rule is injective)
//! and no value can add a token or a wildcard:
//!
//! - `A`–`Z`, `a`–`z`, `0`–`9`, `-` and `:` pass through unchanged;
//! - `.` becomes `_` (dots are common in Kubernetes names, so they get a short, readable form);
//! - every other character — including `_` itself, `%`, `*`, `>`, whitespace and any non-ASCII
//!   character — becomes `%XX` for each byte of its UTF-8 encoding, `XX` in upper-case hex;
//! - the empty string becomes `%` alone (no other value produces a lone `%`, since every other `%` is
//!   followed by two hex digits; Kubernetes names are never empty, so this is a safety net).
//!
//! Examples:
//!
//! | value                 | token                     |
//! |-----------------------|---------------------------|
//! | `nginx`               | `nginx`                   |
//! | `web-7d4b9c`          | `web-7d4b9c`              |
//! | `example.com`         | `example_com`             |
//! | `system:node:worker1` | `system:node:worker1`     |
//! | `my_name`             | `my%5Fname`               |
//! | `a b`                 | `a%20b`                   |
//! | `50%`                 | `50%25`                   |
//! | `*` / `>`             | `%2A` / `%3E`             |
//! | `é`                   | `%C3%A9`                  |
//!
//! So the object `nginx` in namespace `default` of `pods` (core `v1`) is published, with the default
//! template and prefix, to `kube.core.v1.pods.default.nginx.modified`, and the cluster-scoped
//! `ClusterRole` `system:controller:foo.bar` to
//! `kube.rbac_authorization_k8s_io.v1.clusterroles._.system:controller:foo_bar.added`.
//!
//! A cluster-scoped object's `{namespace}` is `_`. That cannot collide with a real namespace: `_` is
//! the escape of `.` only, and a namespace is a DNS-1123 label, which never contains a dot
//! (nor an underscore), so no namespace escapes to `_`.
//!
//! To subscribe to one object, escape its fields with the rule above; to decode a token, read it
//! left to right: `_` is `.`, `%XX` is one byte, a lone `%` is the empty string, anything else is
//! itself.

use std::fmt;

use crate::event::EventType;

/// The default subject template.
pub const DEFAULT_TEMPLATE: &str =
    "{prefix}.{group}.{version}.{resource}.{namespace}.{name}.{type}";

/// The default subject template once `publish.cluster` is set: the cluster is the first token
/// after the prefix, so the clusters publishing into one NATS (leaf nodes into a hub) stay apart,
/// one subscription (`kube.eu-west.>`) takes one cluster, and `kube.>` still takes them all.
pub(crate) const DEFAULT_CLUSTER_TEMPLATE: &str =
    "{prefix}.{cluster}.{group}.{version}.{resource}.{namespace}.{name}.{type}";

/// One named slot of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Placeholder {
    Prefix,
    Cluster,
    Group,
    Version,
    Resource,
    Namespace,
    Name,
    Type,
    /// `{label:KEY}`
    Label(Box<str>),
    /// `{annotation:KEY}`
    Annotation(Box<str>),
}

impl Placeholder {
    fn from_name(name: &str) -> Option<Self> {
        if let Some(key) = name.strip_prefix("label:") {
            return Some(Placeholder::Label(key.into()));
        }
        if let Some(key) = name.strip_prefix("annotation:") {
            return Some(Placeholder::Annotation(key.into()));
        }
        Some(match name {
            "prefix" => Placeholder::Prefix,
            "cluster" => Placeholder::Cluster,
            "group" => Placeholder::Group,
            "version" => Placeholder::Version,
            "resource" => Placeholder::Resource,
            "namespace" => Placeholder::Namespace,
            "name" => Placeholder::Name,
            "type" => Placeholder::Type,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(Box<str>),
    Placeholder(Placeholder),
}

/// A parsed subject template such as `{prefix}.{group}.{version}.{resource}.{namespace}.{name}.{type}`.
///
/// A parsed template always renders a valid NATS subject for a publish: no empty token, no wildcard,
/// no whitespace (given a prefix checked by [`validate_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectTemplate {
    source: Box<str>,
    parts: Vec<Part>,
}

/// Why a template was rejected. Messages quote the template and say what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("empty subject template")]
    Empty,
    #[error("unknown placeholder {{{name}}} in {template:?} (allowed: {{prefix}}, {{cluster}}, {{group}}, {{version}}, {{resource}}, {{namespace}}, {{name}}, {{type}}, {{label:KEY}}, {{annotation:KEY}})")]
    UnknownPlaceholder { name: String, template: String },
    #[error("invalid key {key:?} in {{{name}}} of {template:?} (a label or annotation key: [A-Za-z0-9._-], optionally after a DNS prefix and one /, e.g. {{label:app.kubernetes.io/name}})")]
    InvalidKey {
        key: String,
        name: String,
        template: String,
    },
    #[error("unbalanced brace at byte {position} in {template:?}")]
    UnbalancedBrace { position: usize, template: String },
    #[error("empty token in {template:?} (no leading, trailing or doubled dots)")]
    EmptyToken { template: String },
    #[error("wildcard {wildcard:?} in {template:?} (a published subject cannot contain * or >)")]
    Wildcard { wildcard: char, template: String },
    #[error("whitespace or control character in {template:?}")]
    Whitespace { template: String },
}

impl SubjectTemplate {
    /// Parses a template: literal text and `{placeholder}`s, tokens separated by dots.
    pub fn parse(template: &str) -> Result<SubjectTemplate, TemplateError> {
        if template.is_empty() {
            return Err(TemplateError::Empty);
        }
        let err_template = || template.to_owned();
        let mut parts = Vec::new();
        let mut literal = String::new();
        // The template with every placeholder replaced by `x`, to check tokens afterwards: a
        // placeholder always renders at least one character (see `escape_token`).
        let mut shape = String::with_capacity(template.len());
        let mut chars = template.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' => {
                    let rest = &template[i + 1..];
                    let end = rest
                        .find(['{', '}'])
                        .filter(|&j| rest.as_bytes()[j] == b'}');
                    let Some(end) = end else {
                        return Err(TemplateError::UnbalancedBrace {
                            position: i,
                            template: err_template(),
                        });
                    };
                    let name = &rest[..end];
                    let Some(p) = Placeholder::from_name(name) else {
                        return Err(TemplateError::UnknownPlaceholder {
                            name: name.to_owned(),
                            template: err_template(),
                        });
                    };
                    if let Placeholder::Label(key) | Placeholder::Annotation(key) = &p {
                        if !is_metadata_key(key) {
                            return Err(TemplateError::InvalidKey {
                                key: key.to_string(),
                                name: name.to_owned(),
                                template: err_template(),
                            });
                        }
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal).into_boxed_str()));
                    }
                    parts.push(Part::Placeholder(p));
                    shape.push('x');
                    // Skip the name and the closing brace.
                    for _ in 0..name.chars().count() + 1 {
                        chars.next();
                    }
                }
                '}' => {
                    return Err(TemplateError::UnbalancedBrace {
                        position: i,
                        template: err_template(),
                    })
                }
                '*' | '>' => {
                    return Err(TemplateError::Wildcard {
                        wildcard: c,
                        template: err_template(),
                    })
                }
                c if c.is_whitespace() || c.is_control() => {
                    return Err(TemplateError::Whitespace {
                        template: err_template(),
                    })
                }
                c => {
                    literal.push(c);
                    shape.push(c);
                }
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal.into_boxed_str()));
        }
        if shape.split('.').any(str::is_empty) {
            return Err(TemplateError::EmptyToken {
                template: err_template(),
            });
        }
        Ok(SubjectTemplate {
            source: template.into(),
            parts,
        })
    }

    /// Whether the template uses `{cluster}` (which then must not be empty).
    pub(crate) fn uses_cluster(&self) -> bool {
        self.parts
            .contains(&Part::Placeholder(Placeholder::Cluster))
    }

    /// The tokens of every subject this template can render for `prefix` and `cluster`: a token
    /// made only of literal text, the prefix or the cluster is `Some(text)`; a token holding any
    /// other placeholder (whose value varies per object) is `None`, a single-token wildcard.
    pub(crate) fn token_pattern(&self, prefix: &str, cluster: &str) -> Vec<Option<String>> {
        // Placeholders that vary render as NUL, which no literal, prefix or escaped value holds.
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(s) => text.push_str(s),
                Part::Placeholder(Placeholder::Prefix) => text.push_str(prefix),
                Part::Placeholder(Placeholder::Cluster) => escape_token(cluster, &mut text),
                Part::Placeholder(_) => text.push('\0'),
            }
        }
        text.split('.')
            .map(|t| (!t.contains('\0')).then(|| t.to_owned()))
            .collect()
    }

    /// Appends the subject for `fields` to `out`. Allocates nothing beyond growing `out`.
    pub fn render(&self, fields: &SubjectFields<'_>, out: &mut String) {
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Placeholder(p) => match p {
                    Placeholder::Prefix => out.push_str(fields.watch.prefix),
                    Placeholder::Cluster => escape_token(fields.watch.cluster, out),
                    Placeholder::Group => escape_token(fields.watch.group, out),
                    Placeholder::Version => escape_token(fields.watch.version, out),
                    Placeholder::Resource => escape_token(fields.watch.resource, out),
                    Placeholder::Namespace => match fields.namespace {
                        Some(ns) => escape_token(ns, out),
                        None => out.push('_'),
                    },
                    Placeholder::Name => escape_token(fields.name, out),
                    Placeholder::Type => out.push_str(fields.event_type.as_subject_token()),
                    // No object here: rendered as for an object without the key.
                    Placeholder::Label(_) | Placeholder::Annotation(_) => out.push('_'),
                },
            }
        }
    }
}

impl SubjectTemplate {
    /// The template with the values that are the same for every object of one watch filled in
    /// and escaped once: what is left per message is the namespace, the name and the type.
    pub fn bind(&self, fields: &WatchFields<'_>) -> BoundTemplate {
        let mut parts: Vec<BoundPart> = Vec::new();
        let mut literal = String::new();
        for part in &self.parts {
            let piece = match part {
                Part::Literal(s) => Piece::Text(s),
                Part::Placeholder(p) => match p {
                    Placeholder::Prefix => Piece::Text(fields.prefix),
                    Placeholder::Cluster => Piece::Token(fields.cluster),
                    Placeholder::Group => Piece::Token(fields.group),
                    Placeholder::Version => Piece::Token(fields.version),
                    Placeholder::Resource => Piece::Token(fields.resource),
                    Placeholder::Namespace => Piece::Slot(BoundPart::Namespace),
                    Placeholder::Name => Piece::Slot(BoundPart::Name),
                    Placeholder::Type => Piece::Slot(BoundPart::Type),
                    Placeholder::Label(key) => Piece::Slot(BoundPart::Label(key.clone())),
                    Placeholder::Annotation(key) => Piece::Slot(BoundPart::Annotation(key.clone())),
                },
            };
            match piece {
                Piece::Text(s) => literal.push_str(s),
                Piece::Token(s) => escape_token(s, &mut literal),
                Piece::Slot(slot) => {
                    if !literal.is_empty() {
                        parts.push(BoundPart::Literal(
                            std::mem::take(&mut literal).into_boxed_str(),
                        ));
                    }
                    parts.push(slot);
                }
            }
        }
        if !literal.is_empty() {
            parts.push(BoundPart::Literal(literal.into_boxed_str()));
        }
        let reads_object = parts
            .iter()
            .any(|p| matches!(p, BoundPart::Label(_) | BoundPart::Annotation(_)));
        BoundTemplate {
            parts,
            reads_object,
        }
    }
}

/// What one part of a template becomes once bound to a watch.
enum Piece<'a> {
    /// Inserted as it is.
    Text(&'a str),
    /// Escaped as one token.
    Token(&'a str),
    /// Filled in per object.
    Slot(BoundPart),
}

/// The values of a template that are the same for every object of one watch.
#[derive(Debug, Clone, Copy)]
pub struct WatchFields<'a> {
    /// Inserted verbatim; checked by [`validate_prefix`] at start-up.
    pub prefix: &'a str,
    pub cluster: &'a str,
    /// Already `core` for the core group.
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
}

/// A template bound to one watch ([`SubjectTemplate::bind`]): literal text, with the watch's
/// values already escaped into it, around the per-object slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundTemplate {
    parts: Vec<BoundPart>,
    /// Whether it uses `{label:…}` or `{annotation:…}`.
    reads_object: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BoundPart {
    Literal(Box<str>),
    Namespace,
    Name,
    Type,
    Label(Box<str>),
    Annotation(Box<str>),
}

impl BoundTemplate {
    /// Whether the subject depends on the object's labels or annotations: only then are they
    /// read ([`ObjectFields::read`]).
    pub(crate) fn reads_object(&self) -> bool {
        self.reads_object
    }

    /// As [`Self::render`], with the object's labels and annotations for `{label:…}` and
    /// `{annotation:…}` (`None`: rendered as missing, `_`).
    pub(crate) fn render_object(
        &self,
        namespace: Option<&str>,
        name: &str,
        event_type: EventType,
        object: Option<&ObjectFields>,
        out: &mut String,
    ) {
        for part in &self.parts {
            let value = match (part, object) {
                (BoundPart::Label(key), Some(o)) => o.labels.get(&**key),
                (BoundPart::Annotation(key), Some(o)) => o.annotations.get(&**key),
                (BoundPart::Label(_) | BoundPart::Annotation(_), None) => None,
                _ => {
                    self.render_part(part, namespace, name, event_type, out);
                    continue;
                }
            };
            match value {
                Some(value) => escape_token(value, out),
                None => out.push('_'),
            }
        }
    }

    /// Appends the subject of one object to `out`, as [`SubjectTemplate::render`] would with
    /// the watch's values. Allocates nothing beyond growing `out`.
    pub fn render(
        &self,
        namespace: Option<&str>,
        name: &str,
        event_type: EventType,
        out: &mut String,
    ) {
        for part in &self.parts {
            self.render_part(part, namespace, name, event_type, out);
        }
    }

    #[inline]
    fn render_part(
        &self,
        part: &BoundPart,
        namespace: Option<&str>,
        name: &str,
        event_type: EventType,
        out: &mut String,
    ) {
        match part {
            BoundPart::Literal(s) => out.push_str(s),
            BoundPart::Namespace => match namespace {
                Some(ns) => escape_token(ns, out),
                None => out.push('_'),
            },
            BoundPart::Name => escape_token(name, out),
            BoundPart::Type => out.push_str(event_type.as_subject_token()),
            BoundPart::Label(_) | BoundPart::Annotation(_) => out.push('_'),
        }
    }
}

impl fmt::Display for SubjectTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Default for SubjectTemplate {
    fn default() -> Self {
        SubjectTemplate::parse(DEFAULT_TEMPLATE).expect("the default template is valid")
    }
}

impl SubjectTemplate {
    /// The template of a watch that sets none: [`DEFAULT_TEMPLATE`], or with a cluster name
    /// [`DEFAULT_CLUSTER_TEMPLATE`].
    pub fn default_for(cluster: &str) -> SubjectTemplate {
        if cluster.is_empty() {
            SubjectTemplate::default()
        } else {
            SubjectTemplate::parse(DEFAULT_CLUSTER_TEMPLATE)
                .expect("the default cluster template is valid")
        }
    }
}

/// The values a template is rendered with, borrowed from the event and the watch's config.
#[derive(Debug, Clone, Copy)]
pub struct SubjectFields<'a> {
    pub(crate) watch: WatchFields<'a>,
    /// `None` for cluster-scoped objects; renders as `_`.
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: &'a str,
    pub(crate) event_type: EventType,
}

/// The labels and annotations of one object, read only for a template that uses them.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ObjectFields {
    #[serde(default)]
    labels: std::collections::HashMap<String, String>,
    #[serde(default)]
    annotations: std::collections::HashMap<String, String>,
}

impl ObjectFields {
    /// Reads `metadata.labels` and `metadata.annotations` of an object (JSON); an object that
    /// cannot be read has none (its placeholders render `_`).
    pub(crate) fn read(object: &[u8]) -> ObjectFields {
        #[derive(serde::Deserialize)]
        struct Object {
            #[serde(default)]
            metadata: ObjectFields,
        }
        serde_json::from_slice::<Object>(object)
            .map(|o| o.metadata)
            .unwrap_or_default()
    }
}

/// A label or annotation key as Kubernetes allows it: an optional DNS subdomain prefix and `/`,
/// then a name of `[A-Za-z0-9._-]` (at most 63 bytes) that starts and ends alphanumeric.
fn is_metadata_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.')
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    });
    let edges = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    prefix_ok
        && name.len() <= 63
        && edges(name.bytes().next())
        && edges(name.bytes().last())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `b` stands for itself in a token.
#[inline]
fn passes_through(b: u8) -> bool {
    PASSES_THROUGH[usize::from(b)]
}

/// [`passes_through`] by byte: one load per byte of a name instead of five comparisons.
const PASSES_THROUGH: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || c == b'-' || c == b':';
        b += 1;
    }
    table
};

/// Appends `token` to `out` as exactly one subject token, by the rule in the module docs:
/// `[A-Za-z0-9-:]` as is, `.` as `_`, every other byte as `%XX`, and the empty string as `%`.
pub fn escape_token(token: &str, out: &mut String) {
    if token.is_empty() {
        out.push('%');
        return;
    }
    // Fast path: most names need no escaping at all.
    if token.bytes().all(passes_through) {
        out.push_str(token);
        return;
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(token.len());
    for b in token.bytes() {
        if passes_through(b) {
            out.push(b as char);
        } else if b == b'.' {
            out.push('_');
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xF)] as char);
        }
    }
}

/// Checks a subject prefix: one or more tokens of `[A-Za-z0-9_-]` separated by dots.
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err(
            "empty prefix (expected tokens of [A-Za-z0-9_-] separated by dots, e.g. kube)".into(),
        );
    }
    for token in prefix.split('.') {
        if token.is_empty() {
            return Err(format!(
                "empty token in {prefix:?} (expected tokens of [A-Za-z0-9_-] separated by dots)"
            ));
        }
        if !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("invalid token {token:?} in {prefix:?} (expected tokens of [A-Za-z0-9_-] separated by dots)"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn esc(s: &str) -> String {
        let mut out = String::new();
        escape_token(s, &mut out);
        out
    }

    // The inverse of `escape_token`, the proof that the rule is injective: one decoder, the fuzz
    // properties', shared with the fuzz targets and the proptests.
    use crate::fuzz_props::unescape;

    #[test]
    fn escape_table() {
        let table = [
            ("nginx", "nginx"),
            ("web-7d4b9c", "web-7d4b9c"),
            ("example.com", "example_com"),
            ("a..b", "a__b"),
            (".", "_"),
            ("_", "%5F"),
            ("my_name", "my%5Fname"),
            ("system:node:w1", "system:node:w1"),
            ("*", "%2A"),
            (">", "%3E"),
            ("a b", "a%20b"),
            ("tab\t", "tab%09"),
            ("50%", "50%25"),
            ("%2A", "%252A"),
            ("é", "%C3%A9"),
            ("日本", "%E6%97%A5%E6%9C%AC"),
            ("", "%"),
            ("UPPER", "UPPER"),
        ];
        for (input, want) in table {
            assert_eq!(esc(input), want, "escape of {input:?}");
            assert_eq!(
                unescape(want).as_deref(),
                Some(input),
                "unescape of {want:?}"
            );
        }
    }

    /// The shared vectors (clients/key-vectors.json): the subscriber kits build their subject
    /// filters by the same rule.
    #[test]
    fn tokens_follow_the_shared_vectors() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../clients/key-vectors.json"))
                .expect("clients/key-vectors.json parses");
        for v in vectors["tokens"].as_array().expect("tokens") {
            let text = v["text"].as_str().expect("text");
            let subject = v["subject"].as_str().expect("subject");
            assert_eq!(esc(text), subject, "escape of {text:?}");
            assert_eq!(
                unescape(subject).as_deref(),
                Some(text),
                "unescape of {subject:?}"
            );
        }
    }

    #[test]
    fn the_table_is_the_rule() {
        for b in 0..=u8::MAX {
            let rule = b.is_ascii_alphanumeric() || b == b'-' || b == b':';
            assert_eq!(passes_through(b), rule, "byte {b:#04x}");
        }
    }

    #[test]
    fn escape_appends() {
        let mut out = String::from("x.");
        escape_token("a.b", &mut out);
        assert_eq!(out, "x.a_b");
    }

    fn fields(namespace: Option<&str>) -> SubjectFields<'_> {
        SubjectFields {
            watch: WatchFields {
                prefix: "kube",
                cluster: "prod-eu",
                group: "core",
                version: "v1",
                resource: "pods",
            },
            namespace,
            name: "nginx.1",
            event_type: EventType::Modified,
        }
    }

    #[test]
    fn renders_default_template() {
        let t = SubjectTemplate::default();
        let mut out = String::new();
        t.render(&fields(Some("default")), &mut out);
        assert_eq!(out, "kube.core.v1.pods.default.nginx_1.modified");
        out.clear();
        t.render(&fields(None), &mut out);
        assert_eq!(out, "kube.core.v1.pods._.nginx_1.modified");
        assert!(!t.uses_cluster());
    }

    #[test]
    fn renders_literals_and_cluster() {
        let t = SubjectTemplate::parse("{prefix}.c-{cluster}.{resource}.x{name}y").unwrap();
        assert!(t.uses_cluster());
        let mut out = String::new();
        let mut f = fields(None);
        f.watch.prefix = "a.b";
        t.render(&f, &mut out);
        assert_eq!(out, "a.b.c-prod-eu.pods.xnginx_1y");
    }

    #[test]
    fn rejects_bad_templates() {
        let bad = [
            ("", "empty subject template"),
            ("kube.{kind}.{name}", "unknown placeholder {kind} in \"kube.{kind}.{name}\" (allowed: {prefix}, {cluster}, {group}, {version}, {resource}, {namespace}, {name}, {type}, {label:KEY}, {annotation:KEY})"),
            ("kube.{name", "unbalanced brace"),
            ("kube.name}", "unbalanced brace"),
            ("kube.{{name}}", "unbalanced brace"),
            ("kube..{name}", "empty token"),
            (".kube.{name}", "empty token"),
            ("kube.{name}.", "empty token"),
            ("kube.*.{name}", "wildcard '*'"),
            ("kube.{name}.>", "wildcard '>'"),
            ("kube {name}", "whitespace"),
        ];
        for (template, want) in bad {
            let err = SubjectTemplate::parse(template).unwrap_err().to_string();
            assert!(err.contains(want), "{template:?}: {err}");
        }
    }

    #[test]
    fn validates_prefix() {
        assert!(validate_prefix("kube").is_ok());
        assert!(validate_prefix("org_1.kube-a").is_ok());
        for bad in ["", "a..b", ".a", "a.", "a*", "a>", "a b", "é"] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// A template bound to a watch renders what the template renders with all its values.
        #[test]
        fn a_bound_template_renders_as_the_template(
            template in "(\\{prefix\\}|\\{cluster\\}|x\\{group\\}|\\{version\\}|\\{resource\\}|\\{namespace\\}y|\\{name\\}|\\{type\\}|lit)(\\.(\\{prefix\\}|\\{cluster\\}|\\{group\\}|\\{version\\}z|\\{resource\\}|\\{namespace\\}|\\{name\\}|\\{type\\}|l-t)){0,8}",
            cluster in "[a-z._%-]{0,6}",
            group in "[a-z.]{1,12}",
            namespace in proptest::option::of("[a-z0-9._%-]{1,8}"),
            name in "[a-z0-9._:%é -]{1,12}",
            deleted in proptest::bool::ANY,
        ) {
            let t = SubjectTemplate::parse(&template).unwrap();
            let event_type = if deleted { EventType::Deleted } else { EventType::Added };
            let watch = WatchFields {
                prefix: "kube.a",
                cluster: &cluster,
                group: &group,
                version: "v1",
                resource: "pods",
            };
            let all = SubjectFields {
                watch,
                namespace: namespace.as_deref(),
                name: &name,
                event_type,
            };
            let mut want = String::new();
            t.render(&all, &mut want);
            let bound = t.bind(&watch);
            let mut got = String::new();
            bound.render(namespace.as_deref(), &name, event_type, &mut got);
            prop_assert_eq!(got, want);
        }

        #[test]
        fn escape_is_injective_and_one_token(a in any::<String>(), b in any::<String>()) {
            let (ea, eb) = (esc(&a), esc(&b));
            prop_assert_eq!(unescape(&ea), Some(a.clone()));
            if a != b {
                prop_assert_ne!(&ea, &eb);
            }
            prop_assert!(!ea.is_empty());
            prop_assert!(ea.bytes().all(|c| passes_through(c) || c == b'_' || c == b'%'));
        }

        #[test]
        fn escape_of_tricky_alphabet_round_trips(s in "[a-z._%:*> -]{0,12}") {
            prop_assert_eq!(unescape(&esc(&s)), Some(s));
        }
    }
}

#[cfg(test)]
mod object_tests {
    use super::*;

    fn bound(template: &str) -> BoundTemplate {
        SubjectTemplate::parse(template)
            .unwrap()
            .bind(&WatchFields {
                prefix: "kube",
                cluster: "",
                group: "apps",
                version: "v1",
                resource: "deployments",
            })
    }

    #[test]
    fn labels_and_annotations_are_escaped_tokens_and_missing_is_underscore() {
        let t = bound("{prefix}.{label:team}.{label:app.kubernetes.io/name}.{annotation:example.com/owner}.{name}");
        assert!(t.reads_object());
        let object = ObjectFields::read(
            br#"{"metadata":{"name":"web","labels":{"team":"pay.ments","app.kubernetes.io/name":"web_1"},"annotations":{"example.com/owner":"a b"}}}"#,
        );
        let mut out = String::new();
        t.render_object(None, "web", EventType::Added, Some(&object), &mut out);
        assert_eq!(out, "kube.pay_ments.web%5F1.a%20b.web");
        let mut out = String::new();
        let bare = ObjectFields::read(br#"{"metadata":{"name":"web"}}"#);
        t.render_object(None, "web", EventType::Added, Some(&bare), &mut out);
        assert_eq!(out, "kube._._._.web");
        // An empty label value is `%`, never `_`.
        let empty = ObjectFields::read(br#"{"metadata":{"labels":{"team":""}}}"#);
        let mut out = String::new();
        t.render_object(None, "web", EventType::Added, Some(&empty), &mut out);
        assert_eq!(out, "kube.%._._.web");
        assert!(!bound("{prefix}.{name}").reads_object());
    }

    #[test]
    fn keys_are_checked_at_start() {
        for ok in ["team", "app.kubernetes.io/name", "a-b_c.d", "x/y"] {
            assert!(
                SubjectTemplate::parse(&format!("k.{{label:{ok}}}")).is_ok(),
                "{ok}"
            );
        }
        for bad in ["", "a b", "/x", "a/", "a/b/c", "-a", "a.", "ex_ample.com/x"] {
            let err = SubjectTemplate::parse(&format!("k.{{annotation:{bad}}}")).unwrap_err();
            assert!(
                matches!(err, TemplateError::InvalidKey { .. }),
                "{bad:?}: {err}"
            );
        }
        // The token pattern treats them as varying tokens.
        let t = SubjectTemplate::parse("{prefix}.{label:team}.x").unwrap();
        assert_eq!(
            t.token_pattern("kube", ""),
            vec![Some("kube".to_owned()), None, Some("x".to_owned())]
        );
    }
}
