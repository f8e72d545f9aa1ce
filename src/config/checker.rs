//! The [`Checker`] every check of stage two records its problems in, so that one run reports
//! every mistake of a file rather than the first.

use std::fmt;
use std::time::Duration;

use super::error::ConfigError;

/// Collects problems; each check returns `None` after recording why.
#[derive(Default)]
pub(super) struct Checker {
    pub(super) errors: Vec<ConfigError>,
}

impl Checker {
    pub(super) fn fail<T>(
        &mut self,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Option<T> {
        self.errors.push(ConfigError::new(key, message));
        None
    }

    pub(super) fn duration(&mut self, key: &str, value: &str) -> Option<Duration> {
        match humantime::parse_duration(value.trim()) {
            Ok(d) => Some(d),
            Err(_) => self.fail(
                key,
                format!("invalid duration {value:?} (expected humantime like 30s, 5m)"),
            ),
        }
    }

    /// A duration of at least `min`.
    pub(super) fn duration_min(
        &mut self,
        key: &str,
        value: &str,
        min: Duration,
    ) -> Option<Duration> {
        let d = self.duration(key, value)?;
        if d < min {
            let shown = if min == Duration::from_nanos(1) {
                "> 0".to_owned()
            } else {
                format!(">= {}", humantime::format_duration(min))
            };
            return self.fail(key, format!("{value:?} is too short (allowed: {shown})"));
        }
        Some(d)
    }

    /// A JetStream limit: `-1` is unlimited (`Some(None)`), a positive number that limit.
    pub(super) fn limit(&mut self, key: &str, value: i64) -> Option<Option<u64>> {
        match value {
            -1 => Some(None),
            1.. => Some(Some(value.unsigned_abs())),
            _ => self.fail(key, format!("{value} is not >= 1 or -1 (unlimited)")),
        }
    }

    pub(super) fn positive(&mut self, key: &str, value: &str) -> Option<Duration> {
        self.duration_min(key, value, Duration::from_nanos(1))
    }

    pub(super) fn one_of<T: Copy>(
        &mut self,
        key: &str,
        value: &str,
        allowed: &[(&str, T)],
    ) -> Option<T> {
        if let Some((_, t)) = allowed
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(value.trim()))
        {
            return Some(*t);
        }
        let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
        self.fail(
            key,
            format!("invalid value {value:?} (allowed: {})", names.join(", ")),
        )
    }

    /// `value` if `is_valid` accepts it; `allowed` says what would be.
    pub(super) fn valid<T: fmt::Display + Copy>(
        &mut self,
        key: &str,
        value: T,
        is_valid: impl Fn(T) -> bool,
        allowed: &str,
    ) -> Option<T> {
        if is_valid(value) {
            return Some(value);
        }
        self.fail(key, format!("{value} is out of range (allowed: {allowed})"))
    }

    pub(super) fn range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        key: &str,
        value: T,
        min: T,
        max: Option<T>,
    ) -> Option<T> {
        let ok = value >= min && max.is_none_or(|m| value <= m);
        if ok {
            return Some(value);
        }
        let allowed = match max {
            Some(m) => format!("{min}..={m}"),
            None => format!(">= {min}"),
        };
        self.fail(key, format!("{value} is out of range (allowed: {allowed})"))
    }
    /// A JetStream bucket name: `[A-Za-z0-9_-]`, not empty.
    pub(super) fn bucket_name(&mut self, key: &str, value: &str) -> Option<String> {
        if is_key_token(value) {
            return Some(value.to_owned());
        }
        self.fail(
            key,
            format!("invalid bucket name {value:?} (allowed: [A-Za-z0-9_-], not empty)"),
        )
    }

    /// A key-value bucket kube2nats creates for `section` (`state`, `mirror`): its name
    /// (`{section}.bucket`) and its replicas (`{section}.replicas`, 1..=5 as JetStream allows).
    pub(super) fn bucket(
        &mut self,
        section: &str,
        name: &str,
        replicas: usize,
    ) -> (Option<String>, Option<usize>) {
        let name = self.bucket_name(&format!("{section}.bucket"), name);
        let replicas = self.range(&format!("{section}.replicas"), replicas, 1, Some(5));
        (name, replicas)
    }
}

/// One token of a NATS subject or key that kube2nats names (a bucket, `state.cluster_id`,
/// `state.instance`, a cluster's uid): not empty, `[A-Za-z0-9_-]` only.
pub(crate) fn is_key_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(super) fn non_empty(v: &str) -> Option<&str> {
    let v = v.trim();
    (!v.is_empty()).then_some(v)
}
