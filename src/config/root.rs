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
    pub kubernetes: KubernetesConfig,
    pub nats: NatsConfig,
    pub http: HttpConfig,
    pub shutdown: ShutdownConfig,
    pub state: StateConfig,
    pub leader_election: LeaderElectionConfig,
    pub mirror: MirrorConfig,
    pub watches: Vec<WatchConfig>,
}
