//! Reloading the configuration (docs/configuration.md, "Reloading the configuration"): on SIGHUP,
//! and when the file's content changes, the file is read and checked again with the loader of the
//! start. An invalid file changes nothing (each problem logged, naming its key, and counted); a
//! valid one changes the watches, which the running term applies ([`super::term`]), while every
//! setting outside `[[watches]]` and `[publish]` keeps its running value until a restart, and the
//! log names the ones that differ.
//!
//! The file is polled for its content rather than watched: a mounted ConfigMap changes by swapping
//! a `..data` symlink in the directory, which a watch on the file's own path does not see, and
//! comparing what the path resolves to now needs no platform code.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};
use tokio::signal::unix::Signal;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config, ConfigErrors, LogFormat, Named as _, RawConfig, WatchConfig};
use crate::telemetry::metrics::{counter, opts};

/// The configured watches, as a reload hands them to the term.
pub(crate) type WatchSet = Arc<[Arc<WatchConfig>]>;

/// How often the file's content is compared with the last one read: a ConfigMap update reaches
/// the pod's volume within the kubelet's sync period (about a minute), so a second more is noise.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Where the configuration comes from: the file and the process environment, read as at start,
/// with the `--log-format` flag on top.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// `--config`; without it only the environment, which does not change while running.
    pub path: Option<PathBuf>,
    /// `--log-format`, which wins over the file and the environment.
    pub log_format: Option<LogFormat>,
}

impl ConfigSource {
    /// The file's content now (`None`: no file, or unreadable). Read before [`load`](Self::load),
    /// it lets the reloader see a change made while the configuration was being loaded.
    pub fn content(&self) -> Option<Vec<u8>> {
        self.path.as_deref().and_then(|p| std::fs::read(p).ok())
    }

    /// Reads and checks the configuration (every problem, one per key).
    pub fn load(&self) -> Result<(RawConfig, Config), ConfigErrors> {
        let (mut raw, mut config) = config::load_with_raw(self.path.as_deref(), None)?;
        if let Some(format) = self.log_format {
            raw.log.format = format.name().to_owned();
            config.log.format = format;
        }
        Ok((raw, config))
    }
}

/// What a running kube2nats needs to reload its configuration.
pub struct Reload {
    pub source: ConfigSource,
    /// The configuration in force, as read: the settings a reload compares.
    pub raw: RawConfig,
    /// [`ConfigSource::content`], read before the configuration in force was loaded.
    pub content: Option<Vec<u8>>,
    /// SIGHUP, its handler installed before the runtime could miss one (a SIGHUP without a
    /// handler ends the process).
    pub hangup: Option<Signal>,
}

/// The outcome counter, `kube2nats_config_reloads_total{result}`, and whether the last reload
/// was accepted, `kube2nats_config_last_reload_successful`.
#[derive(Clone)]
pub(crate) struct ReloadMetrics {
    applied: IntCounter,
    unchanged: IntCounter,
    invalid: IntCounter,
    successful: IntGauge,
}

impl ReloadMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<ReloadMetrics> {
        let reloads: IntCounterVec = counter(
            registry,
            "config_reloads_total",
            "Configuration reloads (SIGHUP or the file changed), by result: applied (watches added, removed or changed), unchanged (no watch changed; settings that need a restart are logged), invalid (the file was refused; the configuration in force stays).",
            &["result"],
        )?;
        let successful = IntGauge::with_opts(opts(
            "config_last_reload_successful",
            "1 while the file last read (at start, or by the last reload) was valid; 0 after a reload refused an invalid file, until a valid one is read.",
        ))?;
        registry.register(Box::new(successful.clone()))?;
        successful.set(1);
        Ok(ReloadMetrics {
            successful,
            applied: reloads.with_label_values(&["applied"]),
            unchanged: reloads.with_label_values(&["unchanged"]),
            invalid: reloads.with_label_values(&["invalid"]),
        })
    }
}

/// The watches a reload adds, removes and changes (a change is any difference in the watch's
/// configuration, compared by name).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct WatchDiff {
    pub(crate) added: Vec<Arc<WatchConfig>>,
    pub(crate) removed: Vec<String>,
    pub(crate) changed: Vec<Arc<WatchConfig>>,
}

impl WatchDiff {
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// The names of the watches whose tasks stop: removed and changed.
    pub(crate) fn leaving(&self) -> impl Iterator<Item = &str> {
        let changed = self.changed.iter().map(|w| w.name.as_str());
        self.removed.iter().map(String::as_str).chain(changed)
    }

    /// The watches that start: added and changed, in the new file's order.
    pub(crate) fn arriving(&self) -> Vec<Arc<WatchConfig>> {
        self.added.iter().chain(&self.changed).cloned().collect()
    }
}

/// Compares the watches in force with a new file's. Unchanged watches appear in no list.
pub(crate) fn diff_watches(old: &[Arc<WatchConfig>], new: &[Arc<WatchConfig>]) -> WatchDiff {
    let find = |set: &[Arc<WatchConfig>], name: &str| -> Option<Arc<WatchConfig>> {
        set.iter().find(|w| w.name == name).cloned()
    };
    let mut diff = WatchDiff::default();
    for watch in new {
        match find(old, &watch.name) {
            None => diff.added.push(watch.clone()),
            Some(before) if *before != **watch => diff.changed.push(watch.clone()),
            Some(_) => {}
        }
    }
    diff.removed = old
        .iter()
        .filter(|w| find(new, &w.name).is_none())
        .map(|w| w.name.clone())
        .collect();
    diff
}

/// The sections a reload applies: `[[watches]]`, and `[publish]`, whose values are the watches'
/// defaults (a change there is a change of the watches that use them).
const RELOADABLE: &[&str] = &["watches", "publish"];

/// Keys outside those sections that are watches' defaults too: `mirror.enabled` is each
/// watch's `mirror` unless it says.
const RELOADABLE_KEYS: &[&str] = &["mirror.enabled"];

/// The keys outside [`RELOADABLE`] whose values differ (`nats.url`, `http.listen`): they keep
/// their running values until kube2nats restarts. Only names, never values (some are secrets).
pub(crate) fn restart_needed(running: &RawConfig, new: &RawConfig) -> Vec<String> {
    let (Ok(running), Ok(new)) = (serde_json::to_value(running), serde_json::to_value(new)) else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    differing_keys("", &running, &new, &mut keys);
    keys.retain(|key| {
        let section = key.split('.').next().unwrap_or_default();
        !RELOADABLE.contains(&section) && !RELOADABLE_KEYS.contains(&key.as_str())
    });
    keys
}

/// Collects the dotted paths under which `a` and `b` differ: the deepest table key, or the key
/// of a value (a list compared whole).
fn differing_keys(at: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let key = match at {
                    "" => name.clone(),
                    _ => format!("{at}.{name}"),
                };
                match (a.get(name), b.get(name)) {
                    (Some(x), Some(y)) => differing_keys(&key, x, y, out),
                    _ => out.push(key),
                }
            }
        }
        _ if a != b => out.push(at.to_owned()),
        _ => {}
    }
}

/// Watches for reload triggers and hands each valid configuration's watches to the term.
pub(crate) struct Reloader {
    reload: Reload,
    /// The watches last handed on.
    watches: WatchSet,
    /// The file's content last read (`None`: unreadable or no file), to see when it changes.
    content: Option<Vec<u8>>,
    sender: watch::Sender<WatchSet>,
    metrics: ReloadMetrics,
}

impl Reloader {
    /// The reloader of `reload`, starting from `watches` (those of the configuration in force),
    /// and what the term receives from it.
    pub(crate) fn new(
        reload: Reload,
        watches: WatchSet,
        metrics: ReloadMetrics,
    ) -> (Reloader, watch::Receiver<WatchSet>) {
        let (sender, receiver) = watch::channel(watches.clone());
        let reloader = Reloader {
            content: reload.content.clone(),
            reload,
            watches,
            sender,
            metrics,
        };
        (reloader, receiver)
    }

    /// Reloads on every SIGHUP and every change of the file's content, until `shutdown`.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let trigger = tokio::select! {
                _ = shutdown.cancelled() => return,
                received = hangup(&mut self.reload.hangup) => match received {
                    true => "SIGHUP",
                    false => {
                        self.reload.hangup = None;
                        continue;
                    }
                },
                _ = poll.tick() => match self.file_changed().await {
                    true => "file changed",
                    false => continue,
                },
            };
            self.reload(trigger);
        }
    }

    /// Whether the file's content differs from the last read (kept as the new last read).
    async fn file_changed(&mut self) -> bool {
        let Some(path) = &self.reload.source.path else {
            return false;
        };
        let content = tokio::fs::read(path).await.ok();
        if content == self.content {
            return false;
        }
        self.content = content;
        true
    }

    fn reload(&mut self, trigger: &str) {
        let (raw, config) = match self.reload.source.load() {
            Ok(loaded) => loaded,
            Err(errors) => {
                self.metrics.invalid.inc();
                self.metrics.successful.set(0);
                for problem in &errors.0 {
                    tracing::error!(trigger, key = %problem.key, problem = %problem, "configuration reload refused: the file is invalid; the configuration in force stays");
                }
                return;
            }
        };
        self.metrics.successful.set(1);
        let restart = restart_needed(&self.reload.raw, &raw);
        if !restart.is_empty() {
            tracing::warn!(trigger, settings = %restart.join(", "), "configuration reload: these settings cannot change in place; they keep their running values until kube2nats restarts");
        }
        let watches: WatchSet = config.watches.into_iter().map(Arc::new).collect();
        let diff = diff_watches(&self.watches, &watches);
        if diff.is_empty() {
            self.metrics.unchanged.inc();
            tracing::info!(trigger, "configuration reloaded: no watch changed");
            return;
        }
        let names = |set: &[Arc<WatchConfig>]| -> Vec<String> {
            set.iter().map(|w| w.name.clone()).collect()
        };
        tracing::info!(trigger, added = ?names(&diff.added), removed = ?diff.removed, changed = ?names(&diff.changed), "configuration reloaded: applying the watch changes");
        self.metrics.applied.inc();
        self.watches = watches.clone();
        self.sender.send_replace(watches);
    }
}

/// The next SIGHUP: `false` once the signal stream has ended; never without a handler.
async fn hangup(signal: &mut Option<Signal>) -> bool {
    match signal {
        Some(signal) => signal.recv().await.is_some(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::load_str;

    fn watch(name: &str, resource: &str) -> String {
        format!("[[watches]]\nname = \"{name}\"\nresource = \"{resource}\"\n")
    }

    fn set(toml: &str) -> Vec<Arc<WatchConfig>> {
        load_str(toml)
            .unwrap()
            .watches
            .into_iter()
            .map(Arc::new)
            .collect()
    }

    fn raw(toml: &str) -> RawConfig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, toml).unwrap();
        config::load_raw(Some(&path), Some(Default::default())).unwrap()
    }

    fn names(set: &[Arc<WatchConfig>]) -> Vec<&str> {
        set.iter().map(|w| w.name.as_str()).collect()
    }

    #[test]
    fn diff_sorts_watches_into_added_removed_and_changed() {
        let old = set(&format!(
            "{}{}{}",
            watch("a", "pods"),
            watch("b", "configmaps"),
            watch("c", "deployments.apps")
        ));
        let new = set(&format!(
            "{}{}label_selector = \"app=web\"\n{}",
            watch("a", "pods"),
            watch("c", "deployments.apps"),
            watch("d", "secrets")
        ));
        let diff = diff_watches(&old, &new);
        assert_eq!(names(&diff.added), ["d"]);
        assert_eq!(diff.removed, ["b"]);
        assert_eq!(names(&diff.changed), ["c"]);
        assert_eq!(diff.leaving().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(names(&diff.arriving()), ["d", "c"]);
    }

    #[test]
    fn the_same_watches_in_another_order_are_no_change() {
        let old = set(&format!(
            "{}{}",
            watch("a", "pods"),
            watch("b", "configmaps")
        ));
        let new = set(&format!(
            "{}{}",
            watch("b", "configmaps"),
            watch("a", "pods")
        ));
        assert!(diff_watches(&old, &new).is_empty());
    }

    /// A `[publish]` default is part of each watch that uses it: a change there changes them.
    #[test]
    fn a_publish_default_changes_the_watches_using_it() {
        let old = set(&watch("a", "pods"));
        let new = set(&format!(
            "[publish]\nsubject_prefix = \"k8s\"\n{}",
            watch("a", "pods")
        ));
        assert_eq!(names(&diff_watches(&old, &new).changed), ["a"]);
    }

    #[test]
    fn settings_outside_the_watches_are_named_as_needing_a_restart() {
        let running = raw(&format!(
            "[nats]\nurl = \"nats://a:4222\"\npassword = \"one\"\n{}",
            watch("a", "pods")
        ));
        let new = raw(&format!(
            "[nats]\nurl = \"nats://b:4222\"\npassword = \"two\"\n[http]\nlisten = \"127.0.0.1:1\"\n\
             [kubernetes.backoff]\nmax = \"9s\"\n[publish]\ncluster = \"x\"\n\
             [mirror]\nenabled = true\nbucket = \"other\"\n{}{}",
            watch("a", "configmaps"),
            watch("b", "pods")
        ));
        assert_eq!(
            restart_needed(&running, &new),
            [
                "http.listen",
                "kubernetes.backoff.max",
                "mirror.bucket",
                "nats.password",
                "nats.url"
            ]
        );
        assert!(restart_needed(&running, &running).is_empty());
    }
}
