//! Configuration: read once at start from a TOML file and the environment, validated, and handed
//! to the rest of kube2nats as plain typed values.
//!
//! Past start-up no code looks at raw config strings or environment variables.
//!
//! Two stages, as ripgrep's low- and high-level arguments:
//!
//! 1. [`load_raw`] reads the TOML file and the `KUBE2NATS__…` environment with the `config` crate
//!    into [`RawConfig`], a mirror of the file in which every key has its default and meaningful
//!    strings (durations, URLs, enum names, selectors, templates) are still strings. Unknown keys
//!    and values of the wrong type are reported here, every one; each is left out (so it keeps
//!    its default) and the rest is read.
//! 2. `Config::try_from(RawConfig)` checks every value and builds the typed [`Config`],
//!    collecting every problem ([`ConfigErrors`], one line each, naming the key) rather than
//!    stopping at the first. [`load`] runs it even when stage one found problems, so one run of
//!    `--check-config` shows every mistake: a misspelt key and a bad value together.
//!
//! Every key can be overridden by `KUBE2NATS__<SECTION>__<KEY>` (see [`env_var_name`]); an error
//! about a key set that way names the variable. Lists and `[[watches]]` come from the file only.
//! [`load_with_raw`] also returns the effective raw configuration, which
//! [`RawConfig::to_redacted_toml`] prints for `--check-config`.
//!
//! The files: one per section, holding the section's raw form (its defaults beside its fields),
//! its check and its typed value — `log`, `kubernetes` (with `[kubernetes.backoff]`), `nats`
//! (with `[nats.jetstream]` and its stream), `http`, `shutdown`, `state`, `leader`
//! (`[leader_election]`), `mirror`, `watches` (`[publish]` and `[[watches]]`), `noise` (a
//! watch's noise control); a new section gets a file of its own the same way. Beside them the
//! shared machinery: `root` (the root [`RawConfig`] and [`Config`]), `raw` (how defaults are
//! spelt), `source` (file + environment, unknown keys,
//! redaction), `check` (the root check and the checks that span sections, such as `coverage`),
//! `checker` (the [`Checker`](checker::Checker) every check records its problems in), `named`
//! (enums by name), `selector` (label/field selector and name syntax) and `error`. This file holds the contract with the rest of the crate: the re-exports and
//! [`load`].

mod check;
mod checker;
mod coverage;
mod error;
mod http;
mod kubernetes;
mod leader;
mod log;
mod mirror;
mod named;
mod nats;
mod noise;
mod raw;
mod root;
mod selector;
mod shutdown;
mod source;
mod state;
mod watches;

#[cfg(test)]
pub(crate) mod testing;

use std::collections::HashMap;
use std::path::Path;

pub(crate) use checker::is_key_token;
pub use error::ConfigErrors;
pub(crate) use kubernetes::*;
pub(crate) use leader::{LeaderElectionConfig, RETRY_JITTER_FACTOR};
pub(crate) use mirror::MirrorConfig;
pub use named::*;
pub(crate) use nats::*;
pub use noise::{Changes, NoiseConfig};
pub use root::{Config, RawConfig};
pub(crate) use state::StateConfig;
pub(crate) use watches::*;

use source::{name_env_sources, process_environment, read_raw};

/// Loads and validates the configuration: `file` (TOML) if given, then the environment on top.
///
/// `env: None` reads the process environment; tests pass a map. Only variables named
/// `KUBE2NATS__SECTION__KEY` are read (`KUBE2NATS__NATS__URL`, `KUBE2NATS__KUBERNETES__BACKOFF__MAX`);
/// lists and `[[watches]]` come from the file only.
pub fn load(
    file: Option<&Path>,
    env: Option<HashMap<String, String>>,
) -> Result<Config, ConfigErrors> {
    load_with_raw(file, env).map(|(_, config)| config)
}

/// [`load`], also returning the effective [`RawConfig`] (defaults filled in, environment applied)
/// for `--check-config` to print with [`RawConfig::to_redacted_toml`].
pub(crate) fn load_with_raw(
    file: Option<&Path>,
    env: Option<HashMap<String, String>>,
) -> Result<(RawConfig, Config), ConfigErrors> {
    let env = env.unwrap_or_else(process_environment);
    let read = read_raw(file, &env).map_err(|errors| name_env_sources(errors, &env))?;
    let checked = Config::try_from(read.raw.clone());
    let mut errors = read.shape_errors;
    match checked {
        Ok(config) if errors.is_empty() => return Ok((read.raw, config)),
        Ok(_) => {}
        Err(values) => {
            // A key left out for its shape was checked with its default: say nothing of that.
            let shape_keys: Vec<String> = errors.iter().map(|e| e.key.clone()).collect();
            errors.extend(
                values
                    .0
                    .into_iter()
                    .filter(|e| !concerns_any(&e.key, &shape_keys)),
            );
        }
    }
    Err(name_env_sources(ConfigErrors(errors), &env))
}

/// Whether an error about `key` (or several, `a, b`) concerns one of `reported` or a key inside it.
fn concerns_any(key: &str, reported: &[String]) -> bool {
    key.split(", ").any(|k| {
        reported.iter().any(|r| {
            k == r
                || k.strip_prefix(r.as_str())
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        })
    })
}

/// Stage one of [`load`]: reads the file and the environment, checks the shape (unknown keys,
/// types), fills in defaults; meaning is checked by `Config::try_from`. The unit tests read a
/// configuration's shape with it; `load` does both stages itself, reporting both kinds of error.
#[cfg(test)]
pub(crate) fn load_raw(
    file: Option<&Path>,
    env: Option<HashMap<String, String>>,
) -> Result<RawConfig, ConfigErrors> {
    let env = env.unwrap_or_else(process_environment);
    match read_raw(file, &env) {
        Ok(read) if read.shape_errors.is_empty() => Ok(read.raw),
        Ok(read) => Err(name_env_sources(ConfigErrors(read.shape_errors), &env)),
        Err(errors) => Err(name_env_sources(errors, &env)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::event::EventType;
    use crate::subject::SubjectTemplate;

    use super::testing::*;
    use super::*;

    #[test]
    fn defaults() {
        let c = load_str(MINIMAL).unwrap();
        assert_eq!(c.log.filter, "info");
        assert_eq!(c.log.format, LogFormat::Text);
        assert_eq!(
            c.kubernetes.source,
            ApiSource::Auto {
                in_cluster: InClusterFiles {
                    token_file: DEFAULT_TOKEN_FILE.into(),
                    ca_file: DEFAULT_CA_FILE.into(),
                    namespace_file: DEFAULT_NAMESPACE_FILE.into()
                },
                context: None,
            }
        );
        assert_eq!(c.kubernetes.watch_timeout, Duration::from_secs(300));
        assert_eq!(c.kubernetes.list_page_size, 500);
        assert_eq!(c.kubernetes.max_line_bytes, 8 << 20);
        assert_eq!(c.kubernetes.rbac_check, RbacCheck::Warn);
        assert_eq!(
            c.kubernetes.backoff,
            BackoffConfig::checked(
                Duration::from_millis(800),
                Duration::from_secs(30),
                2.0,
                0.5,
                Duration::from_secs(120)
            )
        );
        assert_eq!(c.nats.servers, ["nats://127.0.0.1:4222"]);
        assert_eq!(c.nats.auth, NatsAuth::None);
        assert_eq!(c.nats.tls, None);
        assert_eq!(c.nats.mode, NatsMode::Core);
        assert_eq!(c.http.listen, "0.0.0.0:9090".parse().unwrap());
        assert_eq!(c.shutdown.grace_period, Duration::from_secs(10));
        let w = &c.watches[0];
        assert_eq!(w.events, EventType::ALL);
        assert_eq!(w.initial_state, InitialState::Added);
        assert_eq!(w.subject, SubjectTemplate::default());
        assert_eq!(w.subject_prefix, "kube");
        assert_eq!(w.payload, PayloadMode::Event);
        assert_eq!(w.format, MessageFormat::Native);
        assert_eq!(
            (w.label_selector.as_deref(), w.field_selector.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn backoff_config_checks_its_invariants() {
        let s = Duration::from_secs;
        let new = |initial, max, multiplier, jitter| {
            BackoffConfig::new(s(initial), s(max), multiplier, jitter, s(60)).map(|_| ())
        };
        assert_eq!(new(1, 30, 2.0, 0.5), Ok(()));
        assert_eq!(new(1, 1, 1.0, 0.0), Ok(()));
        assert_eq!(new(0, 30, 2.0, 0.5), Err(BackoffError::ZeroInitial));
        assert_eq!(new(31, 30, 2.0, 0.5), Err(BackoffError::InitialAboveMax));
        assert_eq!(new(1, 30, 0.5, 0.5), Err(BackoffError::MultiplierBelowOne));
        assert_eq!(
            new(1, 30, f64::INFINITY, 0.5),
            Err(BackoffError::MultiplierBelowOne)
        );
        assert_eq!(new(1, 30, 2.0, 1.5), Err(BackoffError::JitterOutOfRange));
        assert_eq!(
            new(1, 30, 2.0, f64::NAN),
            Err(BackoffError::JitterOutOfRange)
        );
    }

    #[test]
    fn no_file_means_defaults_and_needs_a_watch() {
        let err = load(None, env(&[])).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert!(
            err.to_string().starts_with("watches: no watch configured"),
            "{err}"
        );
    }

    #[test]
    fn file_overrides_defaults() {
        let c = load_str(&format!(
            "[kubernetes]\nwatch_timeout = \"10m\"\nlist_page_size = 50\n[kubernetes.backoff]\nmax = \"1m\"\n\
             [nats]\nmode = \"jetstream\"\nurl = \"nats://a:4222, tls://b:4222\"\n\
             [nats.jetstream.stream]\nname = \"K\"\n[publish]\npayload = \"object\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(c.kubernetes.watch_timeout, Duration::from_secs(600));
        assert_eq!(c.kubernetes.list_page_size, 50);
        assert_eq!(c.kubernetes.backoff.max(), Duration::from_secs(60));
        assert_eq!(c.nats.servers, ["nats://a:4222", "tls://b:4222"]);
        let NatsMode::JetStream(js) = &c.nats.mode else {
            panic!("expected jetstream: {:?}", c.nats.mode)
        };
        assert_eq!(js.max_ack_inflight, 256);
        let stream = js.stream.as_ref().expect("stream configured");
        assert_eq!(
            (stream.name.as_str(), stream.subjects.as_slice()),
            ("K", &["kube.>".to_owned()][..])
        );
        assert_eq!(c.watches[0].payload, PayloadMode::Object);
    }

    #[test]
    fn collects_every_problem() {
        let lines = errors("[kubernetes]\nwatch_timeout = \"x\"\nrequest_timeout = \"y\"\n[nats]\nurl = \"nats//x\"");
        assert_eq!(lines.len(), 3, "{lines:#?}");
    }

    /// `Debug` of the NATS configuration hides credentials in server URLs and in `auth`.
    #[test]
    fn nats_config_debug_shows_no_secret() {
        let c = load_str(&format!(
            "[nats]\nurl = \"nats://kube:s3cr3t@a:4222,tls://t0ken@b:4222\"\npassword = \"pw-x\"\nuser = \"u\"\n{MINIMAL}"
        ))
        .unwrap();
        let shown = format!("{:?}", c.nats);
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("t0ken") && !shown.contains("pw-x"),
            "{shown}"
        );
    }
}
