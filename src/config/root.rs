//! The whole validated configuration: one field per section of the file.

use super::leader::LeaderElectionConfig;
use super::mirror::MirrorConfig;
use super::state::StateConfig;
use super::values::{
    HttpConfig, KubernetesConfig, LogConfig, NatsConfig, ShutdownConfig, WatchConfig,
};

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
