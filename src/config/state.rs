//! `[state]`: where the durable state (`crate::state`) is kept and how often it is checkpointed;
//! the section's raw form, defaults, check and typed value together.

use std::time::Duration;

use super::checker::{is_key_token, Checker};
use super::raw::s;

/// `state.bucket`: the JetStream key-value bucket; one per kube2nats deployment sharing a NATS.
pub(super) const DEFAULT_STATE_BUCKET: &str = "kube2nats-state";
/// `state.replicas`: one, as a single NATS server needs; three on a clustered JetStream.
pub(super) const DEFAULT_STATE_REPLICAS: usize = 1;
/// `state.checkpoint_interval`: a crash re-announces at most this much of the watch's history (in
/// JetStream mode the duplicate window drops even that); a checkpoint rewrites every object of a
/// changed target, so much shorter intervals cost CPU on large targets.
pub(super) const DEFAULT_CHECKPOINT_INTERVAL: &str = "5s";
/// `state.max_load_bytes`: 64 MiB. What loading a target's saved state may build up in memory,
/// estimated as its encoded size plus 48 bytes per object (`crate::state`) (~700k pods). The
/// shipped manifests limit the container to 128 MiB, of which `nats.max_buffered_bytes` takes 32
/// MiB and the process ~15 MiB; a watch's objects take ~62 bytes each once loaded.
pub(super) const DEFAULT_MAX_LOAD_BYTES: usize = 64 * 1024 * 1024;
/// `state.forget_unwatched_after`: a week. State of a target no configuration here watches is
/// removed at a start only once nothing has written it for this long: it may belong to another
/// deployment that shares the owner prefix, or to this one before a rollback.
pub(super) const DEFAULT_FORGET_UNWATCHED_AFTER: &str = "7d";
/// The smallest `state.forget_unwatched_after` accepted.
const MIN_FORGET_UNWATCHED_AFTER: Duration = Duration::from_secs(1);
/// The smallest `state.max_load_bytes` accepted.
const MIN_MAX_LOAD_BYTES: usize = 1024 * 1024;
/// The shortest `state.checkpoint_interval` accepted.
const MIN_CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);

/// The validated `[state]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateConfig {
    /// Checkpoint to JetStream; `false` keeps state in memory only (a restart re-announces all).
    pub(crate) enabled: bool,
    pub(crate) bucket: String,
    /// Replicas of the bucket when kube2nats creates it (an existing bucket is not changed).
    pub(crate) replicas: usize,
    /// Time between checkpoints of a watch target that changed.
    pub(crate) checkpoint_interval: Duration,
    /// The cluster part of the state's owner; `None`: the `kube-system` Namespace's uid.
    pub(crate) cluster_id: Option<String>,
    /// The instance part of the state's owner; `None`: derived (see `crate::state::owner`).
    pub(crate) instance: Option<String>,
    /// The most one target's saved state may take in memory when loaded; larger state is
    /// refused (the target starts fresh), so forged or runaway state cannot OOM every start.
    pub(crate) max_load_bytes: usize,
    /// How long the state of a target this configuration does not watch stays unwritten before
    /// a start removes it.
    pub(crate) forget_unwatched_after: Duration,
}

/// `[state]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawState {
    /// Default `true`.
    pub(crate) enabled: bool,
    /// `[A-Za-z0-9_-]+`. Default [`DEFAULT_STATE_BUCKET`].
    pub(crate) bucket: String,
    /// 1..=5. Default [`DEFAULT_STATE_REPLICAS`].
    pub(crate) replicas: usize,
    /// Duration, >= 100ms. Default [`DEFAULT_CHECKPOINT_INTERVAL`].
    pub(crate) checkpoint_interval: String,
    /// `[A-Za-z0-9_-]+`, or empty (the default): the `kube-system` Namespace's uid.
    pub(crate) cluster_id: String,
    /// `[A-Za-z0-9_-]+`, or empty (the default): the Lease, else the pod's namespace.
    pub(crate) instance: String,
    /// Bytes, >= 1 MiB. Default [`DEFAULT_MAX_LOAD_BYTES`].
    pub(crate) max_load_bytes: usize,
    /// Duration, >= 1s. Default [`DEFAULT_FORGET_UNWATCHED_AFTER`].
    pub(crate) forget_unwatched_after: String,
}

impl Default for RawState {
    fn default() -> Self {
        RawState {
            enabled: true,
            bucket: s(DEFAULT_STATE_BUCKET),
            replicas: DEFAULT_STATE_REPLICAS,
            checkpoint_interval: s(DEFAULT_CHECKPOINT_INTERVAL),
            cluster_id: String::new(),
            instance: String::new(),
            max_load_bytes: DEFAULT_MAX_LOAD_BYTES,
            forget_unwatched_after: s(DEFAULT_FORGET_UNWATCHED_AFTER),
        }
    }
}

pub(super) fn check_state(c: &mut Checker, raw: &RawState) -> Option<StateConfig> {
    let (bucket, replicas) = c.bucket("state", &raw.bucket, raw.replicas);
    let cluster_id = owner_part(c, "state.cluster_id", &raw.cluster_id);
    let instance = owner_part(c, "state.instance", &raw.instance);
    let interval = c.duration_min(
        "state.checkpoint_interval",
        &raw.checkpoint_interval,
        MIN_CHECKPOINT_INTERVAL,
    );
    let max_load_bytes = c.range(
        "state.max_load_bytes",
        raw.max_load_bytes,
        MIN_MAX_LOAD_BYTES,
        None,
    );
    let forget_unwatched_after = c.duration_min(
        "state.forget_unwatched_after",
        &raw.forget_unwatched_after,
        MIN_FORGET_UNWATCHED_AFTER,
    );
    Some(StateConfig {
        enabled: raw.enabled,
        bucket: bucket?,
        replicas: replicas?,
        checkpoint_interval: interval?,
        cluster_id: cluster_id?,
        instance: instance?,
        max_load_bytes: max_load_bytes?,
        forget_unwatched_after: forget_unwatched_after?,
    })
}

/// An optional part of the state keys' owner prefix: one key token.
fn owner_part(c: &mut Checker, key: &str, raw: &str) -> Option<Option<String>> {
    if raw.is_empty() {
        return Some(None);
    }
    if is_key_token(raw) {
        return Some(Some(raw.to_owned()));
    }
    c.fail(
        key,
        format!("invalid value {raw:?} (allowed: [A-Za-z0-9_-], or empty for the default)"),
    )
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_error, load_str, MINIMAL};
    use super::*;

    #[test]
    fn defaults() {
        let c = load_str(MINIMAL).unwrap();
        assert_eq!(
            c.state,
            StateConfig {
                enabled: true,
                bucket: "kube2nats-state".into(),
                replicas: 1,
                checkpoint_interval: Duration::from_secs(5),
                cluster_id: None,
                instance: None,
                max_load_bytes: 64 * 1024 * 1024,
                forget_unwatched_after: Duration::from_secs(7 * 24 * 3600),
            }
        );
    }

    #[test]
    fn overrides() {
        let c = load_str(&format!(
            "[state]\nenabled = false\nbucket = \"k2n_prod-1\"\nreplicas = 3\ncheckpoint_interval = \"500ms\"\n{MINIMAL}"
        ))
        .unwrap();
        assert!(!c.state.enabled);
        assert_eq!(c.state.bucket, "k2n_prod-1");
        assert_eq!(c.state.replicas, 3);
        assert_eq!(c.state.checkpoint_interval, Duration::from_millis(500));
    }

    #[test]
    fn invalid_values_name_their_key() {
        assert_error(
            "[state]\nbucket = \"a.b\"",
            "state.bucket: invalid bucket name",
        );
        assert_error(
            "[state]\ninstance = \"a.b\"",
            "state.instance: invalid value",
        );
        assert_error(
            "[state]\ncluster_id = \"x y\"",
            "state.cluster_id: invalid value",
        );
        assert_error(
            "[state]\nmax_load_bytes = 1000",
            "state.max_load_bytes: 1000 is out of range",
        );
        assert_error("[state]\nreplicas = 0", "state.replicas: 0 is out of range");
        assert_error("[state]\nreplicas = 7", "state.replicas: 7 is out of range");
        assert_error(
            "[state]\ncheckpoint_interval = \"10ms\"",
            "state.checkpoint_interval: \"10ms\" is too short",
        );
    }
}
