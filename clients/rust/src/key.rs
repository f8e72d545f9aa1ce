//! The key contract of kube2nats' object mirror, and the tokens of its event subjects
//! (docs/subscribers.md, "The key contract"; docs/messages.md, "Subjects").
//!
//! A key is `[{cluster}.]{group}.{version}.{resource}.{namespace}.{name}`; each token is escaped
//! into the KV key alphabet `[-/_=.A-Za-z0-9]` injectively: `A`–`Z`, `a`–`z`, `0`–`9` and `-`
//! pass through, `.` becomes `_`, every other byte of the UTF-8 encoding becomes `=XX` (upper-case
//! hex), and the empty string becomes `=` alone. The core group's token is `core`; a
//! cluster-scoped object's namespace token is `_`, which no escaped namespace can be (`_` escapes
//! to `=5F`). Subject tokens follow the same shape with `%` for `=`, and `:` passes through.

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `token` escaped by the key rule.
///
/// ```
/// use kube2nats_client::key::{escape_key_token, unescape_key_token};
/// assert_eq!(escape_key_token("system:node:w1"), "system=3Anode=3Aw1");
/// assert_eq!(escape_key_token("kube-root-ca.crt"), "kube-root-ca_crt");
/// assert_eq!(unescape_key_token("my=5Fname").as_deref(), Some("my_name"));
/// ```
pub fn escape_key_token(token: &str) -> String {
    escape(token, b'=', |b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `token` escaped by the subject rule: as the key rule, with `%` for `=`, and `:` kept.
///
/// ```
/// assert_eq!(kube2nats_client::key::escape_subject_token("my_name.v1"), "my%5Fname_v1");
/// ```
pub fn escape_subject_token(token: &str) -> String {
    escape(token, b'%', |b| {
        b.is_ascii_alphanumeric() || b == b'-' || b == b':'
    })
}

fn escape(token: &str, mark: u8, passes: impl Fn(u8) -> bool) -> String {
    if token.is_empty() {
        return char::from(mark).to_string();
    }
    let mut out = Vec::with_capacity(token.len());
    for b in token.bytes() {
        if passes(b) {
            out.push(b);
        } else if b == b'.' {
            out.push(b'_');
        } else {
            out.extend([mark, HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]]);
        }
    }
    // Every byte pushed is ASCII.
    String::from_utf8_lossy(&out).into_owned()
}

/// The text a key token stands for: `_` is `.`, `=XX` one byte, `=` alone the empty string.
/// `None` for what no escaping produces (a stray `=`, bytes that are not UTF-8 once unescaped).
pub fn unescape_key_token(token: &str) -> Option<String> {
    if token == "=" {
        return Some(String::new());
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'_' => {
                out.push(b'.');
                i += 1;
            }
            b'=' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Which objects a watch reads: one resource, in one namespace or all, of one deployment of
/// kube2nats (its `publish.cluster`), at one version or at whichever version kube2nats follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// kube2nats' `publish.cluster`, which leads every key and subject; `None` where unset.
    pub cluster: Option<String>,
    /// The API group; `""` for the core group.
    pub group: String,
    /// The version, or `None` for any: a watch of a CRD whose preferred version moves, whose keys
    /// move with it (docs/mirror.md, "Keys when the version moves").
    pub version: Option<String>,
    /// The resource's plural name, e.g. `pods`.
    pub plural: String,
    /// One namespace, or `None` for all (and for cluster-scoped resources).
    pub namespace: Option<String>,
}

impl Scope {
    /// The key filter of the watch: `[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}.*`.
    pub fn key_filter(&self) -> String {
        let mut tokens = self.tokens(escape_key_token);
        tokens.push("*".into());
        tokens.join(".")
    }

    /// The event stream's subject filter under `prefix`:
    /// `{prefix}.[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}.*.*` (name, event type).
    pub fn subject_filter(&self, prefix: &str) -> String {
        let mut tokens = vec![prefix.to_owned()];
        tokens.extend(self.tokens(escape_subject_token));
        tokens.push("*.*".into());
        tokens.join(".")
    }

    /// `[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}`, each escaped by `escape`.
    fn tokens(&self, escape: fn(&str) -> String) -> Vec<String> {
        let any = || "*".to_owned();
        let mut tokens = Vec::with_capacity(7);
        tokens.extend(self.cluster.as_deref().map(escape));
        tokens.push(group_token(&self.group, escape));
        tokens.push(self.version.as_deref().map_or_else(any, escape));
        tokens.push(escape(&self.plural));
        tokens.push(self.namespace.as_deref().map_or_else(any, escape));
        tokens
    }
}

fn group_token(group: &str, escape: fn(&str) -> String) -> String {
    if group.is_empty() {
        "core".into()
    } else {
        escape(group)
    }
}

/// An object's identity in the mirror: its namespace (`None`: cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

/// The object a key names, from its last two tokens; `None` for a key with fewer than five
/// tokens or tokens no escaping produces.
///
/// ```
/// use kube2nats_client::key::{object_id, ObjectId};
/// let key = "rbac_authorization_k8s_io.v1.clusterroles._.system=3Acontroller=3Afoo_bar";
/// let id = ObjectId { namespace: None, name: "system:controller:foo.bar".into() };
/// assert_eq!(object_id(key), Some(id));
/// ```
pub fn object_id(key: &str) -> Option<ObjectId> {
    let mut tokens = key.rsplit('.');
    let name = unescape_key_token(tokens.next()?)?;
    let namespace = match tokens.next()? {
        "_" => None,
        token => Some(unescape_key_token(token)?),
    };
    // group, version and resource precede them.
    if tokens.count() < 3 {
        return None;
    }
    Some(ObjectId { namespace, name })
}

/// The key of one object: `[{cluster}.]{group}.{version}.{plural}.{namespace}.{name}`.
pub fn object_key(
    cluster: Option<&str>,
    group: &str,
    version: &str,
    plural: &str,
    id: &ObjectId,
) -> String {
    let mut tokens = Vec::with_capacity(6);
    if let Some(cluster) = cluster {
        tokens.push(escape_key_token(cluster));
    }
    tokens.push(group_token(group, escape_key_token));
    tokens.push(escape_key_token(version));
    tokens.push(escape_key_token(plural));
    tokens.push(id.namespace.as_deref().map_or("_".into(), escape_key_token));
    tokens.push(escape_key_token(&id.name));
    tokens.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The shared vectors (clients/key-vectors.json): the daemon's tests and every kit's read
    /// the same table, so the implementations cannot drift apart.
    fn vectors() -> Value {
        serde_json::from_str(include_str!("../../key-vectors.json")).expect("the vectors parse")
    }

    fn text(v: &Value) -> &str {
        v.as_str().expect("a string")
    }

    #[test]
    fn tokens_follow_the_shared_vectors() {
        let vectors = vectors();
        let tokens = vectors["tokens"].as_array().expect("tokens");
        assert!(tokens.len() >= 20);
        for v in tokens {
            let (plain, key, subject) = (text(&v["text"]), text(&v["key"]), text(&v["subject"]));
            assert_eq!(escape_key_token(plain), key, "{plain:?}");
            assert_eq!(escape_subject_token(plain), subject, "{plain:?}");
            assert_eq!(unescape_key_token(key).as_deref(), Some(plain), "{key:?}");
        }
    }

    #[test]
    fn keys_follow_the_shared_vectors() {
        for v in vectors()["keys"].as_array().expect("keys") {
            let id = ObjectId {
                namespace: v["namespace"].as_str().map(str::to_owned),
                name: text(&v["name"]).to_owned(),
            };
            let cluster = Some(text(&v["cluster"])).filter(|c| !c.is_empty());
            let key = text(&v["key"]);
            let (group, version, plural) =
                (text(&v["group"]), text(&v["version"]), text(&v["resource"]));
            assert_eq!(object_key(cluster, group, version, plural, &id), key);
            assert_eq!(object_id(key).as_ref(), Some(&id), "{key}");
            let scope = Scope {
                cluster: cluster.map(str::to_owned),
                group: group.to_owned(),
                version: Some(version.to_owned()),
                plural: plural.to_owned(),
                namespace: None,
            };
            // The subject of the vector is one the watch's filter takes.
            let subject = text(&v["subject"]);
            let filter = scope.subject_filter("kube");
            assert_eq!(subject.split('.').count(), filter.split('.').count());
            for (s, f) in subject.split('.').zip(filter.split('.')) {
                assert!(f == "*" || f == s, "{subject} against {filter}");
            }
            assert!(scope.key_filter().ends_with(".*.*"));
        }
    }

    #[test]
    fn what_no_escaping_produces_names_no_object() {
        assert_eq!(unescape_key_token("a=4"), None);
        assert_eq!(unescape_key_token("a=ZZ"), None);
        assert_eq!(unescape_key_token("=FF"), None);
        assert_eq!(object_id("shop.web-0"), None);
    }

    #[test]
    fn filters_of_a_scope() {
        let scope = Scope {
            cluster: Some("eu-1.prod".into()),
            group: "example.com".into(),
            version: None,
            plural: "widgets".into(),
            namespace: Some("team_a".into()),
        };
        assert_eq!(
            scope.key_filter(),
            "eu-1_prod.example_com.*.widgets.team=5Fa.*"
        );
        assert_eq!(
            scope.subject_filter("kube"),
            "kube.eu-1_prod.example_com.*.widgets.team%5Fa.*.*"
        );
    }
}
