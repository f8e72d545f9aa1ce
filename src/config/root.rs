//! The root of the configuration, in both stages: [`RawConfig`], the file as written (stage one:
//! shapes only, every key with its default), and [`Config`], the whole validated configuration;
//! each holds one field per section of the file, typed in the section's own file.

use super::http::{HttpConfig, RawHttp};
use super::kubernetes::{KubernetesConfig, RawKubernetes};
use super::leader::{LeaderElectionConfig, RawLeaderElection};
use super::log::{LogConfig, RawLog};
use super::mirror::{MirrorConfig, RawMirror};
use super::nats::{NatsConfig, RawNats};
use super::shutdown::{RawShutdown, ShutdownConfig};
use super::state::{RawState, StateConfig};
use super::watches::{RawPublish, RawWatch, WatchConfig};

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub log: LogConfig,
    pub(crate) kubernetes: KubernetesConfig,
    pub(crate) nats: NatsConfig,
    pub(crate) http: HttpConfig,
    pub(crate) shutdown: ShutdownConfig,
    pub(crate) state: StateConfig,
    pub(crate) leader_election: LeaderElectionConfig,
    pub(crate) mirror: MirrorConfig,
    pub watches: Vec<WatchConfig>,
}

/// The configuration file as written, plus environment overrides, before validation.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub(crate) log: RawLog,
    /// Absent: in-cluster with the defaults below.
    pub(crate) kubernetes: RawKubernetes,
    pub(crate) nats: RawNats,
    pub(crate) publish: RawPublish,
    pub(crate) http: RawHttp,
    pub(crate) shutdown: RawShutdown,
    pub(crate) state: RawState,
    pub(crate) leader_election: RawLeaderElection,
    pub(crate) mirror: RawMirror,
    /// At least one.
    pub(crate) watches: Vec<RawWatch>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::load_raw;
    use crate::config::testing::*;

    #[test]
    fn example_defaults_match_code_defaults() {
        // The example documents the defaults: the parts that are not watches must equal them.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let mut raw = load_raw(Some(&path), env(&[])).unwrap();
        raw.watches.clear();
        raw.nats.jetstream.stream = None;
        assert_eq!(raw, RawConfig::default());
    }
}
