//! Credentials kept out of everything kube2nats prints: every log line, error and
//! `--check-config` output that shows a URL (NATS servers, the API server, a proxy) shows it
//! through [`url`] (docs/troubleshooting.md, "Secrets in logs").

/// What stands for the credentials taken out of a URL.
pub(crate) const HIDDEN: &str = "<redacted>";

/// `u` with everything before the last `@` after its scheme replaced by [`HIDDEN`]:
/// `nats://user:secret@host:4222` → `nats://<redacted>@host:4222`, `token@host` →
/// `<redacted>@host`. It works on the text, so a URL too broken to parse (where a password may
/// hold any character, `/` and `#` included) is redacted as well; an `@` later in a path hides
/// the host with it, which is better than showing a password.
pub(crate) fn url(u: &str) -> String {
    let (scheme, rest) = match u.find("://") {
        Some(i) => u.split_at(i + 3),
        None => ("", u),
    };
    match rest.rfind('@') {
        Some(at) => format!("{scheme}{HIDDEN}{}", &rest[at..]),
        None => u.to_owned(),
    }
}

/// Whether `u` carries credentials (a user part) that [`url`] would hide.
pub(crate) fn has_credentials(u: &str) -> bool {
    url(u) != u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_everything_before_the_last_at() {
        assert_eq!(url("nats://u:p@h:1"), "nats://<redacted>@h:1");
        assert_eq!(url("nats://tok@h:1"), "nats://<redacted>@h:1");
        assert_eq!(url("tok@h:1"), "<redacted>@h:1");
        assert_eq!(url("https://u:p@ss@h/api"), "https://<redacted>@h/api");
        assert_eq!(url("nats://h:1"), "nats://h:1");
        assert_eq!(url("https://10.0.0.1:6443"), "https://10.0.0.1:6443");
    }

    #[test]
    fn hides_credentials_of_urls_that_do_not_parse() {
        for broken in [
            "nats://me:hunter2/#x@[::1",
            "http://me:hunter2@:99999",
            "me:hunter2@",
            "://me:hunter2@h",
        ] {
            let shown = url(broken);
            assert!(!shown.contains("hunter2"), "{broken} -> {shown}");
            assert!(has_credentials(broken));
        }
        assert!(!has_credentials("https://h:1/p"));
    }
}
