//! `[leader_election]`: whether replicas elect one publisher through a Kubernetes Lease, and the
//! Lease's timings; the section's raw form, defaults, check and typed value together.
//!
//! The timings are client-go's defaults and obey its rules: a holder stops publishing when it has
//! not renewed for `renew_deadline`, and another replica may take over only after the Lease went
//! unrenewed for `lease_duration`; the difference is the margin that keeps two publishers apart,
//! so `renew_deadline < lease_duration` is required, and `renew_deadline` must leave room for
//! more than one renewal attempt (`> 1.2 × retry_period`, the attempts' jitter).

use std::time::Duration;

use super::checker::{non_empty, Checker};
use super::nats::{NatsMode, StreamConfig};
use super::raw::s;
use super::selector::is_dns_label;
use super::state::StateConfig;

/// `leader_election.lease_name`.
pub(super) const DEFAULT_LEASE_NAME: &str = "kube2nats";
/// `leader_election.lease_duration`: client-go's `LeaseDuration`.
pub(super) const DEFAULT_LEASE_DURATION: &str = "15s";
/// `leader_election.renew_deadline`: client-go's `RenewDeadline`.
pub(super) const DEFAULT_RENEW_DEADLINE: &str = "10s";
/// `leader_election.retry_period`: client-go's `RetryPeriod`.
pub(super) const DEFAULT_RETRY_PERIOD: &str = "2s";
/// client-go's `JitterFactor`: attempts are spread over `[retry, retry × (1 + factor))`.
pub(crate) const RETRY_JITTER_FACTOR: f64 = 1.2;

/// The validated `[leader_election]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaderElectionConfig {
    /// Elect one publisher among replicas; off, this replica always publishes.
    pub(crate) enabled: bool,
    /// The Lease's name.
    pub(crate) lease_name: String,
    /// The Lease's namespace; `None`: the pod's own (resolved at start).
    pub(crate) namespace: Option<String>,
    /// How long a Lease is held without renewal before another replica may take it; whole seconds
    /// (the Lease records `leaseDurationSeconds`).
    pub(crate) lease_duration: Duration,
    /// How long the holder keeps publishing without a successful renewal.
    pub(crate) renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub(crate) retry_period: Duration,
}

/// `[leader_election]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawLeaderElection {
    /// Default `false` (one replica). The multi-replica manifests turn it on.
    pub(crate) enabled: bool,
    /// DNS-1123 subdomain. Default [`DEFAULT_LEASE_NAME`].
    pub(crate) lease_name: String,
    /// `""`: the pod's namespace (`POD_NAMESPACE`, else the service account's namespace file).
    pub(crate) namespace: String,
    /// Duration, whole seconds, > `renew_deadline`. Default [`DEFAULT_LEASE_DURATION`].
    pub(crate) lease_duration: String,
    /// Duration, > 1.2 × `retry_period`. Default [`DEFAULT_RENEW_DEADLINE`].
    pub(crate) renew_deadline: String,
    /// Duration. Default [`DEFAULT_RETRY_PERIOD`].
    pub(crate) retry_period: String,
}

impl Default for RawLeaderElection {
    fn default() -> Self {
        RawLeaderElection {
            enabled: false,
            lease_name: s(DEFAULT_LEASE_NAME),
            namespace: String::new(),
            lease_duration: s(DEFAULT_LEASE_DURATION),
            renew_deadline: s(DEFAULT_RENEW_DEADLINE),
            retry_period: s(DEFAULT_RETRY_PERIOD),
        }
    }
}

pub(super) fn check_leader_election(
    c: &mut Checker,
    raw: &RawLeaderElection,
) -> Option<LeaderElectionConfig> {
    let name_ok = raw.lease_name.len() <= 253 && raw.lease_name.split('.').all(is_dns_label);
    let lease_name = if name_ok {
        Some(raw.lease_name.clone())
    } else {
        c.fail(
            "leader_election.lease_name",
            format!(
                "invalid name {:?} (expected a DNS-1123 subdomain such as kube2nats)",
                raw.lease_name
            ),
        )
    };
    let namespace = match non_empty(&raw.namespace) {
        None => Some(None),
        Some(ns) if is_dns_label(ns) => Some(Some(ns.to_owned())),
        Some(ns) => c.fail(
            "leader_election.namespace",
            format!(
                "invalid namespace {ns:?} (expected a DNS-1123 label, or \"\" for the pod's own)"
            ),
        ),
    };
    let lease = c.duration_min(
        "leader_election.lease_duration",
        &raw.lease_duration,
        Duration::from_secs(1),
    );
    let lease = lease.and_then(|d| {
        if d.subsec_nanos() == 0 {
            Some(d)
        } else {
            c.fail(
                "leader_election.lease_duration",
                format!(
                    "{:?} is not a whole number of seconds (the Lease records leaseDurationSeconds)",
                    raw.lease_duration
                ),
            )
        }
    });
    let renew = c.positive("leader_election.renew_deadline", &raw.renew_deadline);
    let retry = c.positive("leader_election.retry_period", &raw.retry_period);
    if let (Some(lease), Some(renew)) = (lease, renew) {
        if renew >= lease {
            c.fail::<()>(
                "leader_election.renew_deadline",
                format!(
                    "{:?} must be shorter than leader_election.lease_duration ({:?}): the holder must stop publishing before another replica may take over",
                    raw.renew_deadline, raw.lease_duration
                ),
            );
        }
    }
    if let (Some(renew), Some(retry)) = (renew, retry) {
        if renew.as_secs_f64() <= RETRY_JITTER_FACTOR * retry.as_secs_f64() {
            c.fail::<()>(
                "leader_election.renew_deadline",
                format!(
                    "{:?} must be longer than {RETRY_JITTER_FACTOR} × leader_election.retry_period ({:?}), as client-go requires, so a renewal can be retried before the deadline",
                    raw.renew_deadline, raw.retry_period
                ),
            );
        }
    }
    Some(LeaderElectionConfig {
        enabled: raw.enabled,
        lease_name: lease_name?,
        namespace: namespace?,
        lease_duration: lease?,
        renew_deadline: renew?,
        retry_period: retry?,
    })
}

/// Room, in a takeover's replay, for the new holder to load the state and publish.
const REPLAY_MARGIN: Duration = Duration::from_secs(10);

/// With replicas, durable state and a stream kube2nats manages: the stream's duplicate window
/// must reach back over a takeover's replay. A holder killed just before a checkpoint leaves
/// `checkpoint_interval` of messages unrecorded, which the next holder publishes again (same
/// `Nats-Msg-Id`s) up to `lease_duration` + two jittered retries + loading later; a window
/// shorter than that stores them twice.
pub(super) fn check_replay_window(
    c: &mut Checker,
    mode: &NatsMode,
    state: &StateConfig,
    election: &LeaderElectionConfig,
) {
    let NatsMode::JetStream(js) = mode else {
        return;
    };
    let Some(StreamConfig {
        duplicate_window, ..
    }) = &js.stream
    else {
        return;
    };
    if !election.enabled || !state.enabled {
        return;
    }
    let replay = state.checkpoint_interval
        + election.lease_duration
        + election.retry_period.mul_f64(1.0 + RETRY_JITTER_FACTOR)
        + REPLAY_MARGIN;
    if *duplicate_window < replay {
        c.fail::<()>(
            "nats.jetstream.stream.duplicate_window",
            format!(
                "{duplicate_window:?} is shorter than a takeover's replay may reach back ({replay:?}: state.checkpoint_interval + leader_election.lease_duration + 2.2 × retry_period + {REPLAY_MARGIN:?}); the stream would store the replayed messages twice"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn defaults_are_client_go_s_and_off() {
        let c = load_str(MINIMAL).unwrap().leader_election;
        assert!(!c.enabled);
        assert_eq!(c.lease_name, "kube2nats");
        assert_eq!(c.namespace, None);
        assert_eq!(
            (c.lease_duration, c.renew_deadline, c.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
    }

    #[test]
    fn overrides() {
        let c = load_str(&format!(
            "[leader_election]\nenabled = true\nlease_name = \"k2n.prod\"\nnamespace = \"ops\"\nlease_duration = \"3s\"\nrenew_deadline = \"2s\"\nretry_period = \"500ms\"\n{MINIMAL}"
        ))
        .unwrap()
        .leader_election;
        assert!(c.enabled);
        assert_eq!(
            (c.lease_name.as_str(), c.namespace.as_deref()),
            ("k2n.prod", Some("ops"))
        );
        assert_eq!(c.retry_period, Duration::from_millis(500));
    }

    #[test]
    fn each_bad_value_names_its_key() {
        let lines = |section: &str| errors(&format!("[leader_election]\n{section}"));
        assert_eq!(
            lines("renew_deadline = \"15s\""),
            ["leader_election.renew_deadline: \"15s\" must be shorter than leader_election.lease_duration (\"15s\"): the holder must stop publishing before another replica may take over"]
        );
        assert_eq!(
            lines("retry_period = \"9s\"")[0],
            "leader_election.renew_deadline: \"10s\" must be longer than 1.2 × leader_election.retry_period (\"9s\"), as client-go requires, so a renewal can be retried before the deadline"
        );
        assert!(lines(
            "lease_duration = \"2500ms\"\nrenew_deadline = \"1s\"\nretry_period = \"200ms\""
        )[0]
        .starts_with(
            "leader_election.lease_duration: \"2500ms\" is not a whole number of seconds"
        ));
        assert!(lines("lease_duration = \"soon\"")[0]
            .starts_with("leader_election.lease_duration: invalid duration"));
        assert!(lines("retry_period = \"0s\"")[0]
            .starts_with("leader_election.retry_period: \"0s\" is too short"));
        assert!(lines("lease_name = \"Not_A_Name\"")[0]
            .starts_with("leader_election.lease_name: invalid name"));
        assert!(lines("namespace = \"a.b\"")[0]
            .starts_with("leader_election.namespace: invalid namespace"));
        assert!(lines("enable = true")[0].contains("leader_election.enable"));
    }

    #[test]
    fn the_duplicate_window_must_cover_a_takeover_s_replay() {
        let jetstream = |window: &str| {
            format!("[nats]\nmode = \"jetstream\"\n[nats.jetstream.stream]\nduplicate_window = \"{window}\"\n[leader_election]\nenabled = true\n")
        };
        // 5 s + 15 s + 2.2 × 2 s + 10 s.
        assert_eq!(
            errors(&jetstream("30s")),
            ["nats.jetstream.stream.duplicate_window: 30s is shorter than a takeover's replay may reach back (34.4s: state.checkpoint_interval + leader_election.lease_duration + 2.2 × retry_period + 10s); the stream would store the replayed messages twice"]
        );
        assert!(load_str(&format!("{}{MINIMAL}", jetstream("35s"))).is_ok());
        // No replicas, or no durable state: no replay to cover.
        let single = jetstream("30s").replace("enabled = true", "enabled = false");
        assert!(load_str(&format!("{single}{MINIMAL}")).is_ok());
        let stateless = format!("[state]\nenabled = false\n{}{MINIMAL}", jetstream("30s"));
        assert!(load_str(&stateless).is_ok());
    }
}
