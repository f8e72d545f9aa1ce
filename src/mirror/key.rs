//! The mirror's keys (docs/subscribers.md, "Key"): `{group}.{version}.{resource}.{namespace}.{name}`,
//! prefixed by `{cluster}.` when `publish.cluster` is set, each token escaped into the KV key
//! alphabet `[-/_=.A-Za-z0-9]` injectively: `A`–`Z`, `a`–`z`, `0`–`9` and `-` pass through, `.`
//! becomes `_`, every other byte of the UTF-8 encoding becomes `=XX` (upper-case hex), and the
//! empty string becomes `=` alone. A cluster-scoped object's namespace token is `_`, which no
//! escaped namespace can be (`_` itself escapes to `=5F`).

use crate::event::{ObjectMeta, ResourceInfo};

/// Appends `token` escaped by the key rule to `out`.
pub(crate) fn escape_key_token(token: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if token.is_empty() {
        out.push('=');
        return;
    }
    // Most names and namespaces need no escape: copied whole (every write builds a key).
    if token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        out.push_str(token);
        return;
    }
    for &b in token.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => out.push(char::from(b)),
            b'.' => out.push('_'),
            _ => {
                out.push('=');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xF)]));
            }
        }
    }
}

/// The part of a watch's keys that is the same for all its objects, with its closing dot:
/// `{cluster}.{group}.{version}.{resource}.`.
pub(crate) fn watch_prefix(cluster: &str, resource: &ResourceInfo) -> String {
    let mut prefix = String::with_capacity(64);
    if !cluster.is_empty() {
        escape_key_token(cluster, &mut prefix);
        prefix.push('.');
    }
    for token in [
        resource.group_token(),
        resource.version.as_str(),
        resource.plural.as_str(),
    ] {
        escape_key_token(token, &mut prefix);
        prefix.push('.');
    }
    prefix
}

/// The key of one object: `prefix` ([`watch_prefix`], or a subject ending in it), then its
/// namespace and name tokens.
pub(crate) fn object_key(prefix: &str, meta: &ObjectMeta) -> String {
    let mut key = String::with_capacity(prefix.len() + meta.name.len() + 24);
    key.push_str(prefix);
    match meta.namespace.as_deref() {
        Some(namespace) => escape_key_token(namespace, &mut key),
        None => key.push('_'),
    }
    key.push('.');
    escape_key_token(&meta.name, &mut key);
    key
}

/// The namespace token of a key made by [`object_key`] under `prefix` or under the same prefix at
/// another version of the resource (a watch that follows its resource's preferred version owns
/// its keys at every version: docs/mirror.md): `_` for a cluster-scoped object; `None` for a key
/// of another resource.
pub(crate) fn namespace_token<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    let tokens: Vec<&str> = prefix.trim_end_matches('.').split('.').collect();
    let version = tokens.len().checked_sub(2)?;
    let mut key_tokens = key.splitn(tokens.len() + 1, '.');
    for (i, token) in tokens.iter().enumerate() {
        let key_token = key_tokens.next()?;
        if i != version && key_token != *token {
            return None;
        }
    }
    Some(key_tokens.next()?.split_once('.')?.0)
}

/// `prefix` ([`watch_prefix`]) with its version token replaced by `version`: the prefix of the
/// same watch once its resource is served at `version`.
pub(crate) fn at_version(prefix: &str, version: &str) -> String {
    let mut token = String::new();
    escape_key_token(version, &mut token);
    with_version_token(prefix, &token)
}

/// `prefix` ([`watch_prefix`]) with `*` for its version token: a NATS subject filter over the
/// resource's keys at every version.
pub(crate) fn any_version(prefix: &str) -> String {
    with_version_token(prefix, "*")
}

/// `{cluster}.{group}.{version}.{resource}.` with `token` for `{version}` (the second token from
/// the end: no escaped token holds a dot).
fn with_version_token(prefix: &str, token: &str) -> String {
    let mut tokens: Vec<&str> = prefix.trim_end_matches('.').split('.').collect();
    if let Some(at) = tokens.len().checked_sub(2) {
        tokens[at] = token;
    }
    let mut out = tokens.join(".");
    out.push('.');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
        ObjectMeta {
            uid: "u".into(),
            resource_version: crate::event::ResourceVersion::new("1"),
            name: name.into(),
            namespace: namespace.map(Into::into),
            generation: None,
        }
    }

    fn escaped(token: &str) -> String {
        let mut out = String::new();
        escape_key_token(token, &mut out);
        out
    }

    #[test]
    fn tokens_escape_as_the_contract_shows() {
        assert_eq!(escaped("nginx"), "nginx");
        assert_eq!(escaped("kube-root-ca.crt"), "kube-root-ca_crt");
        assert_eq!(escaped("system:node:w1"), "system=3Anode=3Aw1");
        assert_eq!(escaped("my_name"), "my=5Fname");
        assert_eq!(escaped("é"), "=C3=A9");
        assert_eq!(escaped(""), "=");
        assert_eq!(escaped("a=b%c/d"), "a=3Db=25c=2Fd");
    }

    /// The shared vectors (clients/key-vectors.json), which every subscriber kit's tests read
    /// too, so that the writer and the readers of the keys cannot drift apart.
    fn shared_vectors() -> serde_json::Value {
        serde_json::from_str(include_str!("../../clients/key-vectors.json"))
            .expect("clients/key-vectors.json parses")
    }

    #[test]
    fn tokens_follow_the_shared_vectors() {
        let vectors = shared_vectors();
        let tokens = vectors["tokens"].as_array().expect("tokens");
        assert!(!tokens.is_empty());
        for v in tokens {
            let text = v["text"].as_str().expect("text");
            assert_eq!(escaped(text), v["key"].as_str().expect("key"), "{text:?}");
        }
    }

    #[test]
    fn keys_follow_the_shared_vectors() {
        for v in shared_vectors()["keys"].as_array().expect("keys") {
            let text = |field: &str| v[field].as_str().expect(field).to_owned();
            let resource = ResourceInfo {
                group: text("group"),
                version: text("version"),
                plural: text("resource"),
                kind: "Any".into(),
                namespaced: !v["namespace"].is_null(),
            };
            let object = meta(v["namespace"].as_str(), &text("name"));
            let prefix = watch_prefix(&text("cluster"), &resource);
            assert_eq!(object_key(&prefix, &object), text("key"));
        }
    }

    #[test]
    fn keys_as_the_contract_shows() {
        let pods = ResourceInfo::core("pods", "Pod", true);
        let pod = meta(Some("shop"), "web-0");
        assert_eq!(
            object_key(&watch_prefix("", &pods), &pod),
            "core.v1.pods.shop.web-0"
        );
        let roles = ResourceInfo {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            plural: "clusterroles".into(),
            kind: "ClusterRole".into(),
            namespaced: false,
        };
        let role = meta(None, "system:controller:foo.bar");
        let prefix = watch_prefix("", &roles);
        let key = object_key(&prefix, &role);
        assert_eq!(
            key,
            "rbac_authorization_k8s_io.v1.clusterroles._.system=3Acontroller=3Afoo_bar"
        );
        assert_eq!(namespace_token(&prefix, &key), Some("_"));
        assert_eq!(watch_prefix("eu-1.prod", &pods), "eu-1_prod.core.v1.pods.");
    }

    #[test]
    fn a_watch_owns_its_resource_at_every_version() {
        let prefix = "eu-1.example_com.v1beta1.widgets.";
        assert_eq!(at_version(prefix, "v1"), "eu-1.example_com.v1.widgets.");
        assert_eq!(any_version(prefix), "eu-1.example_com.*.widgets.");
        assert_eq!(any_version("core.v1.pods."), "core.*.pods.");
        let owned = |key| namespace_token(prefix, key);
        assert_eq!(
            owned("eu-1.example_com.v1beta1.widgets.shop.w1"),
            Some("shop")
        );
        assert_eq!(owned("eu-1.example_com.v1.widgets.shop.w1"), Some("shop"));
        assert_eq!(owned("eu-1.example_com.v1.gadgets._.g1"), None);
        assert_eq!(owned("eu-2.example_com.v1.widgets.shop.w1"), None);
        assert_eq!(owned("eu-1.example_com.v1.widgets"), None);
    }

    proptest::proptest! {
        /// Injective: two different tokens never escape alike, and every key byte is in the
        /// KV alphabet.
        #[test]
        fn escaping_is_injective(a in ".{0,12}", b in ".{0,12}") {
            let (ea, eb) = (escaped(&a), escaped(&b));
            proptest::prop_assert!(ea.bytes().all(|c| c.is_ascii_alphanumeric() || b"-/_=.".contains(&c)));
            proptest::prop_assert_eq!(a == b, ea == eb);
        }
    }
}
