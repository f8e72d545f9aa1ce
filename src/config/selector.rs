//! Syntax of the Kubernetes names and selectors a watch is configured with, checked as the API
//! server parses them, so a typo is a start-up error naming the key rather than a 400 at run time.

/// A DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending with an alphanumeric.
pub(super) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}
/// Checks a label selector as the API server parses it: comma-separated requirements `k=v`,
/// `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>n`, `k<n` (`n` an integer).
pub(super) fn check_label_selector(selector: &str) -> Result<(), String> {
    for requirement in split_top_level(selector)? {
        check_label_requirement(requirement.trim())?;
    }
    Ok(())
}

/// Splits at commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, ch) in s.char_indices() {
        match ch {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parenthesis".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("unbalanced ')'".into()),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn check_label_requirement(r: &str) -> Result<(), String> {
    if r.is_empty() {
        return Err("empty requirement (a stray comma?)".into());
    }
    if let Some(key) = r.strip_prefix('!') {
        return check_label_key(key.trim());
    }
    let key_end = r
        .find(|ch: char| ch.is_whitespace() || "=!(<>".contains(ch))
        .unwrap_or(r.len());
    let (key, rest) = (&r[..key_end], r[key_end..].trim_start());
    check_label_key(key)?;
    if rest.is_empty() {
        return Ok(());
    }
    for op in ["==", "!=", "="] {
        if let Some(value) = rest.strip_prefix(op) {
            return check_label_value(value.trim());
        }
    }
    // `k>n`, `k<n` (apimachinery's Gt and Lt): one value, a label value that is an integer.
    for op in [">", "<"] {
        if let Some(value) = rest.strip_prefix(op) {
            let value = value.trim();
            check_label_value(value)?;
            return match value.parse::<i64>() {
                Ok(_) => Ok(()),
                Err(_) => Err(format!("the value after {op} in {r:?} must be an integer")),
            };
        }
    }
    for op in ["notin", "in"] {
        if let Some(set) = rest.strip_prefix(op) {
            let set = set.trim();
            let Some(inner) = set.strip_prefix('(').and_then(|s| s.strip_suffix(')')) else {
                return Err(format!("expected a parenthesized list after {op} in {r:?}"));
            };
            if inner.trim().is_empty() {
                return Err(format!("empty value list in {r:?}"));
            }
            return inner
                .split(',')
                .try_for_each(|v| check_label_value(v.trim()));
        }
    }
    Err(format!(
        "unknown operator in {r:?} (allowed: =, ==, !=, in, notin, exists, !, >, <)"
    ))
}

/// `[prefix/]name`: prefix a DNS-1123 subdomain, name 1–63 of `[A-Za-z0-9-_.]` with alphanumeric ends.
fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !p.split('.').all(is_dns_label) {
            return Err(format!("invalid label key prefix {p:?} (expected a DNS subdomain such as app.kubernetes.io)"));
        }
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(format!("invalid label key {key:?} (expected [prefix/]name, name 1 to 63 of [A-Za-z0-9-_.] starting and ending alphanumeric)"));
    }
    Ok(())
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() <= 63
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_label_name(v) {
        Ok(())
    } else {
        Err(format!("invalid label value {v:?} (expected at most 63 of [A-Za-z0-9-_.] starting and ending alphanumeric, or empty)"))
    }
}

/// Checks a field selector: comma-separated `k=v`, `k==v`, `k!=v` (e.g. `status.phase=Running`).
pub(super) fn check_field_selector(selector: &str) -> Result<(), String> {
    for r in selector.split(',').map(str::trim) {
        if r.is_empty() {
            return Err("empty requirement (a stray comma?)".into());
        }
        let Some(i) = r.find(['=', '!']) else {
            return Err(format!("no operator in {r:?} (allowed: =, ==, !=)"));
        };
        let (key, rest) = (r[..i].trim(), &r[i..]);
        let value = ["==", "!=", "="]
            .iter()
            .find_map(|op| rest.strip_prefix(op));
        let Some(value) = value else {
            return Err(format!("unknown operator in {r:?} (allowed: =, ==, !=)"));
        };
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        {
            return Err(format!(
                "invalid field {key:?} in {r:?} (expected a field path such as metadata.name)"
            ));
        }
        if value.trim().contains(['=', '!']) && !value.contains('\\') {
            return Err(format!("unexpected operator in the value of {r:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn label_selectors() {
        for good in [
            "app=web",
            "app==web",
            "app!=web",
            "tier in (a,b)",
            "tier notin (a, b)",
            "app",
            "!app",
            "app.kubernetes.io/name=x,env",
            "a=",
            "a in (x),b!=y",
            "x>1",
            "x<3",
            "x > 10,app=web",
            "app.kubernetes.io/rev<007",
        ] {
            assert_eq!(check_label_selector(good), Ok(()), "{good:?}");
        }
        for bad in [
            "app=we b",
            "app in a,b",
            "app in ()",
            "in (a",
            ",app",
            "app=x,",
            "a b",
            "Ex@mple=1",
            "-a=b",
            "example.com/=x",
            "Example.com/a=b",
            "a<b",
            "x>",
            "x>1.5",
            "x>-1",
            "x>>1",
        ] {
            assert!(check_label_selector(bad).is_err(), "{bad:?}");
        }
        assert_watch_error(
            "label_selector = \"a in (b\"",
            "watches[0].label_selector: invalid label selector \"a in (b\": unbalanced '('",
        );
    }

    #[test]
    fn field_selectors() {
        for good in [
            "metadata.name=x",
            "status.phase!=Running",
            "spec.nodeName==n1,metadata.namespace!=kube-system",
            "metadata.name=",
        ] {
            assert_eq!(check_field_selector(good), Ok(()), "{good:?}");
        }
        for bad in ["metadata.name", "=x", "a=b,", "a<b", "a b=c"] {
            assert!(check_field_selector(bad).is_err(), "{bad:?}");
        }
        assert_watch_error(
            "field_selector = \"status.phase\"",
            "watches[0].field_selector: invalid field selector \"status.phase\": no operator",
        );
    }
}
