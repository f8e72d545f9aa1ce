//! Reading: the TOML file and the `KUBE2NATS__…` environment merged by the `config` crate into a
//! [`RawConfig`]; every unknown key named with its path; where a value came from the environment,
//! the error says which variable; and the redacted copy `--check-config` prints.

use std::collections::HashMap;
use std::path::Path;

use super::error::ConfigError;
use super::error::ConfigErrors;
use super::nats::RawStream;
use super::raw::s;
use super::root::RawConfig;
use super::watches::RawWatch;

/// Prefix of the environment variables that override file keys: `KUBE2NATS__NATS__URL`.
pub(super) const ENV_PREFIX: &str = "KUBE2NATS";
/// Separator between the prefix and the key path segments in environment variable names.
pub(super) const ENV_SEPARATOR: &str = "__";
/// What a redacted secret is shown as by `--check-config`.
pub(super) const REDACTED: &str = "<redacted>";

/// Turns an error of the `config` crate into one line naming its key (or file).
fn from_source_error(err: config::ConfigError, file: Option<&Path>) -> ConfigError {
    let file_key = || file.map(|p| p.display().to_string()).unwrap_or_default();
    match err {
        config::ConfigError::Type {
            unexpected,
            expected,
            key,
            ..
        } => {
            // A string is not echoed: it may be a secret set under the wrong key.
            // (`Unexpected` is not exported: its text says which kind it is.)
            let unexpected = match unexpected.to_string() {
                text if text.starts_with("string") => "a string".to_owned(),
                text => text,
            };
            ConfigError::new(
                key.unwrap_or_default(),
                format!("invalid type: {unexpected}, expected {expected}"),
            )
        }
        config::ConfigError::At { error, key, .. } => {
            ConfigError::new(key.unwrap_or_default(), error.to_string())
        }
        config::ConfigError::FileParse { cause, .. } => ConfigError::new(
            file_key(),
            format!("not a valid TOML file: {}", one_line(&cause.to_string())),
        ),
        config::ConfigError::NotFound(key) => ConfigError::new(key, "missing"),
        other => ConfigError::new(file_key(), other.to_string()),
    }
}

/// The TOML parser draws the offending line with a caret over several lines; keep the position
/// (first line) and the reason (last line) so each problem stays one line.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.as_slice() {
        [] => String::new(),
        [only] => (*only).to_owned(),
        [first, .., last] => format!("{first}: {last}"),
    }
}

/// The variables of this process that could be overrides (non-Unicode ones cannot be).
pub(super) fn process_environment() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect()
}

/// The environment variable that overrides `key` (`kubernetes.watch_timeout` →
/// `KUBE2NATS__KUBERNETES__WATCH_TIMEOUT`).
pub(super) fn env_var_name(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{ENV_SEPARATOR}{}",
        key.replace('.', ENV_SEPARATOR).to_uppercase()
    )
}

/// A key's value may come from the environment rather than the file; say so, or the operator
/// looks for the mistake in the wrong place.
pub(super) fn name_env_sources(
    mut errors: ConfigErrors,
    env: &HashMap<String, String>,
) -> ConfigErrors {
    for e in &mut errors.0 {
        let vars: Vec<String> = e
            .key
            .split(", ")
            .map(env_var_name)
            .filter(|v| env.keys().any(|k| k.eq_ignore_ascii_case(v)))
            .collect();
        if !vars.is_empty() {
            e.message = format!(
                "{} (set by environment variable {})",
                e.message,
                vars.join(", ")
            );
        }
    }
    errors
}

/// What reading the file and the environment found: the configuration with every key that was
/// wrong (unknown, or of the wrong type) left out, so it holds its default, and the problems with
/// those keys. The value checks of `Config::try_from` then still run on the rest, and one run
/// reports the misspelt key and the bad value together.
pub(super) struct ReadConfig {
    pub(super) raw: RawConfig,
    pub(super) shape_errors: Vec<ConfigError>,
}

/// Reads `file` and the environment; `Err` only when nothing can be read (not TOML, not a file).
pub(super) fn read_raw(
    file: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<ReadConfig, ConfigErrors> {
    let mut builder = config::Config::builder();
    if let Some(path) = file {
        builder = builder.add_source(
            config::File::from(path)
                .format(config::FileFormat::Toml)
                .required(true),
        );
    }
    let environment = config::Environment::with_prefix(ENV_PREFIX)
        .prefix_separator(ENV_SEPARATOR)
        .separator(ENV_SEPARATOR)
        // Values stay strings (a token "007" must not become the number 7); typed fields convert.
        .try_parsing(false)
        .source(Some(env.clone()));
    let merged = builder
        .add_source(environment)
        .build()
        .map_err(|e| from_source_error(e, file))?;

    // serde's deny_unknown_fields stops at the first unknown key and does not say where it is;
    // walking the tree against the schema names every one with its path.
    let mut tree: serde_json::Value = merged
        .try_deserialize()
        .map_err(|e| from_source_error(e, file))?;
    let mut shape_errors = Vec::new();
    unknown_keys(&tree, &schema(), "", &mut shape_errors);
    for e in &shape_errors {
        remove_key(&mut tree, &e.key);
    }
    // serde stops at the first value of the wrong type: leave it out and read again, until the
    // rest reads. Each round removes one key, so this ends.
    let mut type_errors = Vec::new();
    let raw = loop {
        match reread(&tree, file)?.try_deserialize::<RawConfig>() {
            Ok(raw) => break raw,
            Err(e) => {
                let error = from_source_error(e, file);
                let removed = remove_key(&mut tree, &error.key);
                type_errors.push(error);
                if !removed {
                    shape_errors.append(&mut type_errors);
                    return Err(ConfigErrors(shape_errors));
                }
            }
        }
    };
    // serde meets a table's keys in no fixed order: sorted, the same file gives the same lines.
    type_errors.sort_by(|a, b| a.key.cmp(&b.key));
    shape_errors.append(&mut type_errors);
    Ok(ReadConfig { raw, shape_errors })
}

/// The merged tree as the `config` crate's value again, so that typed fields convert as they do
/// when read from the file and the environment (a variable's "42" reads as a number). Through
/// TOML text: `config::Config::try_from` would drop empty tables and lists, which mean something
/// (`subjects = []` is an error, `[nats.jetstream.stream]` asks for a stream).
fn reread(tree: &serde_json::Value, file: Option<&Path>) -> Result<config::Config, ConfigErrors> {
    let text = toml::to_string(tree).map_err(|e| {
        let file = file.map(|p| p.display().to_string()).unwrap_or_default();
        ConfigError::new(file, format!("cannot be read back: {e}"))
    })?;
    config::Config::builder()
        .add_source(config::File::from_str(&text, config::FileFormat::Toml))
        .build()
        .map_err(|e| from_source_error(e, file).into())
}

/// Removes `key` (`nats.url`, `watches[0].labels`) from `tree`; false if it is not there.
fn remove_key(tree: &mut serde_json::Value, key: &str) -> bool {
    let mut segments: Vec<Segment<'_>> = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if !name.is_empty() {
            segments.push(Segment::Key(name));
        }
        while let Some((index, after)) = rest.split_once(']') {
            match index.parse() {
                Ok(i) => segments.push(Segment::Index(i)),
                Err(_) => return false,
            }
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut node = tree;
    for segment in parents {
        let next = match (segment, node) {
            (Segment::Key(k), serde_json::Value::Object(map)) => map.get_mut(*k),
            (Segment::Index(i), serde_json::Value::Array(items)) => items.get_mut(*i),
            _ => None,
        };
        match next {
            Some(n) => node = n,
            None => return false,
        }
    }
    match (last, node) {
        (Segment::Key(k), serde_json::Value::Object(map)) => map.remove(*k).is_some(),
        (Segment::Index(i), serde_json::Value::Array(items)) if *i < items.len() => {
            items.remove(*i);
            true
        }
        _ => false,
    }
}

/// One step of a key path: a table's key or a list's index.
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Every key a configuration may have, as a JSON tree with every optional part present.
fn schema() -> serde_json::Value {
    let mut sample = RawConfig::default();
    sample.kubernetes.token_file = Some(String::new());
    sample.kubernetes.ca_file = Some(String::new());
    sample.kubernetes.namespace_file = Some(String::new());
    sample.nats.jetstream.stream = Some(RawStream::default());
    sample.watches.push(RawWatch {
        mirror: Some(false),
        ..RawWatch::default()
    });
    serde_json::to_value(sample)
        .expect("RawConfig serializes to JSON: it has only strings, numbers, lists and maps")
}

fn unknown_keys(
    value: &serde_json::Value,
    schema: &serde_json::Value,
    path: &str,
    out: &mut Vec<ConfigError>,
) {
    use serde_json::Value;
    match (value, schema) {
        (Value::Object(map), Value::Object(known)) => {
            for (key, v) in map {
                let full = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match known.get(key) {
                    Some(s) => unknown_keys(v, s, &full, out),
                    None => {
                        let allowed: Vec<&str> = known.keys().map(String::as_str).collect();
                        out.push(ConfigError::new(
                            full,
                            format!("unknown key (allowed here: {})", allowed.join(", ")),
                        ));
                    }
                }
            }
        }
        (Value::Array(items), Value::Array(known)) if known.len() == 1 => {
            for (i, v) in items.iter().enumerate() {
                unknown_keys(v, &known[0], &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

impl RawConfig {
    /// A copy with secrets replaced by [`REDACTED`]: `nats.token`, `nats.password` and credentials
    /// inside `nats.url`.
    pub(crate) fn redacted(&self) -> RawConfig {
        let mut raw = self.clone();
        if !raw.nats.token.is_empty() {
            raw.nats.token = s(REDACTED);
        }
        if !raw.nats.password.is_empty() {
            raw.nats.password = s(REDACTED);
        }
        raw.nats.url = raw
            .nats
            .url
            .split(',')
            .map(|u| crate::redact::url(u.trim()))
            .collect::<Vec<_>>()
            .join(",");
        raw
    }

    /// The effective configuration as TOML, secrets redacted: what `--check-config` prints.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string(&self.redacted())
            .expect("RawConfig serializes to TOML: plain tables, no None in arrays")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::testing::*;
    use crate::config::{load, load_raw, Config, NatsAuth};

    #[test]
    fn environment_overrides_file() {
        let f = file(&format!("[nats]\nurl = \"nats://file:4222\"\n{MINIMAL}"));
        let c = load(
            Some(f.path()),
            env(&[
                ("KUBE2NATS__NATS__URL", "nats://env:4222"),
                ("KUBE2NATS__NATS__TOKEN", "007"),
                ("KUBE2NATS__KUBERNETES__WATCH_TIMEOUT", "7m"),
                ("KUBE2NATS__KUBERNETES__LIST_PAGE_SIZE", "42"),
                ("KUBE2NATS__KUBERNETES__STREAMING_LIST", "true"),
                ("KUBE2NATS__KUBERNETES__BACKOFF__MULTIPLIER", "1.5"),
                ("KUBE2NATS_CONFIG", "/not/a/key"),
                ("OTHER__NATS__URL", "nats://other:4222"),
            ]),
        )
        .unwrap();
        assert_eq!(c.nats.servers, ["nats://env:4222"]);
        assert_eq!(c.nats.auth, NatsAuth::Token("007".into()));
        assert_eq!(c.kubernetes.watch_timeout, Duration::from_secs(420));
        assert_eq!(c.kubernetes.list_page_size, 42);
        assert!(c.kubernetes.streaming_list);
        assert_eq!(c.kubernetes.backoff.multiplier(), 1.5);
    }

    #[test]
    fn bad_environment_value_names_the_key() {
        let f = file(MINIMAL);
        let err = load(
            Some(f.path()),
            env(&[("KUBE2NATS__KUBERNETES__WATCH_TIMEOUT", "forever")]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubernetes.watch_timeout: invalid duration \"forever\" (expected humantime like 30s, 5m) (set by environment variable KUBE2NATS__KUBERNETES__WATCH_TIMEOUT)"
        );
        let err = load(Some(f.path()), env(&[("KUBE2NATS__NATS__NOPE", "x")])).unwrap_err();
        assert!(
            err.to_string().starts_with("nats.nope: unknown key"),
            "{err}"
        );
    }

    #[test]
    fn env_var_names() {
        assert_eq!(env_var_name("nats.url"), "KUBE2NATS__NATS__URL");
        assert_eq!(
            env_var_name("kubernetes.backoff.reset_after"),
            "KUBE2NATS__KUBERNETES__BACKOFF__RESET_AFTER"
        );
        let f = file(MINIMAL);
        let err = load(Some(f.path()), env(&[("KUBE2NATS__NATS__NOPE", "x")])).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("(set by environment variable KUBE2NATS__NATS__NOPE)"),
            "{err}"
        );
    }

    #[test]
    fn example_config_is_valid_and_lists_every_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let raw = load_raw(Some(&path), env(&[])).unwrap();
        let c = Config::try_from(raw).unwrap();
        let names: Vec<&str> = c.watches.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["pods", "deployments"]);
        // Every key of the schema appears in the example, written out or commented with its default.
        let text = std::fs::read_to_string(&path).unwrap();
        let mut keys = Vec::new();
        collect_keys(&schema(), &mut keys);
        for key in keys {
            assert!(
                text.contains(&format!("{key} = ")),
                "config.example.toml does not document {key}"
            );
        }
    }

    fn collect_keys(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if !v.is_object()
                        && !v
                            .as_array()
                            .is_some_and(|a| a.first().is_some_and(|x| x.is_object()))
                    {
                        out.push(k.clone());
                    }
                    collect_keys(v, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| collect_keys(x, out)),
            _ => {}
        }
    }

    #[test]
    fn redacts_secrets() {
        let f = file(&format!("[nats]\nurl = \"nats://u:hunter2@h:4222\"\nuser = \"u\"\npassword = \"hunter2\"\n{MINIMAL}"));
        let out = load_raw(Some(f.path()), env(&[]))
            .unwrap()
            .to_redacted_toml();
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains("password = \"<redacted>\""), "{out}");
        assert!(out.contains("user = \"u\""), "{out}");
        // The output is itself a valid configuration file.
        let again = file(&out);
        assert!(load_raw(Some(again.path()), env(&[])).is_ok());
    }

    #[test]
    fn unknown_keys() {
        assert_error(
            "[nats]\nurll = \"x\"",
            "nats.urll: unknown key (allowed here: ",
        );
        assert_error(
            "[kubernetes.backoff]\nfactor = 2",
            "kubernetes.backoff.factor: unknown key",
        );
        assert_error("[surprise]\nx = 1", "surprise: unknown key");
        let lines = errors("[[watches]]\nname = \"b\"\nresource = \"pods\"\nlabels = \"x\"");
        assert_eq!(lines, ["watches[0].labels: unknown key (allowed here: changes, events, field_selector, filter, format, ignore_paths, initial_state, label_selector, mirror, name, namespace_selector, namespaces, namespaces_exclude, payload, resource, strip_paths, subject)"]);
    }

    #[test]
    fn bad_types_name_the_key() {
        assert_error(
            "[kubernetes]\nlist_page_size = \"many\"",
            "kubernetes.list_page_size: invalid type",
        );
    }

    #[test]
    fn unknown_keys_wrong_types_and_bad_values_in_one_pass() {
        let lines = errors(
            "[nats]\nurll = \"x\"\nmode = \"sideways\"\nqueue_capacity = \"lots\"\n\
             [kubernetes]\nlist_page_size = \"many\"\nrequest_timeout = \"soon\"",
        );
        let keys: Vec<&str> = lines
            .iter()
            .map(|l| l.split(':').next().unwrap_or_default())
            .collect();
        assert_eq!(
            keys,
            [
                "nats.urll",
                "kubernetes.list_page_size",
                "nats.queue_capacity",
                "kubernetes.request_timeout",
                "nats.mode",
            ],
            "{lines:#?}"
        );
        // The same file gives the same lines, in the same order.
        assert_eq!(
            lines,
            errors(
                "[nats]\nurll = \"x\"\nmode = \"sideways\"\nqueue_capacity = \"lots\"\n\
                 [kubernetes]\nlist_page_size = \"many\"\nrequest_timeout = \"soon\""
            )
        );
    }

    #[test]
    fn a_key_of_the_wrong_type_is_not_also_reported_as_missing() {
        let f = file("watches = \"pods\"\n");
        let err = load(Some(f.path()), env(&[])).unwrap_err();
        let lines: Vec<String> = err.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(lines[0].starts_with("watches: invalid type"), "{lines:#?}");
    }

    #[test]
    fn not_toml() {
        let f = file("this is = = not toml");
        let err = load(Some(f.path()), env(&[])).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert!(
            err.to_string()
                .contains("not a valid TOML file: TOML parse error at line 1"),
            "{err}"
        );
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    }
}
