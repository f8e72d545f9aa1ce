//! What every watch task of every term shares: the configuration read at start, the
//! connections, and the process-wide limits. One borrowed set, handed down from the term to each
//! task's parts.

use std::sync::Arc;

use crate::budget::Budget;
use crate::config::Config;
use crate::kube::ApiClient;
use crate::leader::TermClock;
use crate::publish::Nats;
use crate::state::StateStore;
use crate::watcher::ListSlots;

#[derive(Clone, Copy)]
pub(super) struct Shared<'a> {
    pub(super) config: &'a Config,
    pub(super) client: &'a Arc<ApiClient>,
    pub(super) nats: &'a Nats,
    /// `nats.max_buffered_bytes`, shared by every target.
    pub(super) budget: &'a Budget,
    /// `kubernetes.max_concurrent_lists`, shared by every target.
    pub(super) list_slots: &'a ListSlots,
    pub(super) state: &'a StateStore,
    /// The term's deadline: every message goes out only while it is in force.
    pub(super) term: &'a TermClock,
}
