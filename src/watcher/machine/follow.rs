//! A watch that follows its group's preferred version (docs/configuration.md, "Versions that
//! move"). A CRD upgraded from `v1beta1` to `v1` and the old version no longer served: requests
//! on the old version's collection answer 404. For a watch whose configured name names no version,
//! a 404 first asks discovery of the resource's group where the resource is now; served at another
//! version, the watch goes on there from where it was. One storage backs every version of a
//! resource, so its objects keep their uid and resourceVersion: the watch resumes from its
//! resourceVersion (or, when the new version's watch cache starts later, relists and diffs), and
//! nothing is published again for the move. Not served at all, it is the unserved path
//! ([`Machine::not_served`]).
//!
//! A version added and preferred while the old one stays served is followed the same way, when
//! the server ends the watch (kube-apiserver ends a CRD's watches on every update of it): a
//! followed watch asks discovery before it reopens after a clean end.

use std::sync::Arc;
use std::time::Duration;

use super::{ListReason, Machine, Outcome, RestartError, RestartReason, State, VersionMove};
use crate::event::{ResourceInfo, ResourceVersion};
use crate::kube::client::{collection_path, Verb};
use crate::kube::discovery::{Discovery, DiscoveryError};
use crate::kube::ApiError;

/// How many 404s in a row a followed watch waits out while discovery still lists the version
/// watched, and the pause after the first (the next ones wait longer by as much): about 6 s in all
/// before the resource is taken as no longer served.
const DISCOVERY_LAG_TRIES: u32 = 3;
const DISCOVERY_LAG_PAUSE: Duration = Duration::from_secs(1);

/// Where discovery serves a followed resource.
enum Served {
    /// At another version than the one watched: the watch moves there.
    Elsewhere(ResourceInfo),
    /// At the version watched, which answered 404: discovery has not caught up yet.
    Here,
    /// Not at all (its group gone, or the resource not in it).
    Nowhere,
}

impl Machine {
    /// Lists after a move to another version of the resource, instead of resuming (a mirrored
    /// watch: docs/mirror.md).
    pub(crate) fn relist_on_move(&mut self) {
        self.relist_on_move = true;
    }

    /// The collection answered 404 to `verb`: the version moved, or the resource is not served.
    pub(super) async fn not_found(
        &mut self,
        verb: Verb,
        error: ApiError,
        retry: State,
    ) -> (Outcome, State) {
        match self.where_served().await {
            Ok(Served::Elsewhere(to)) => self.moved(to, retry),
            // kube-apiserver's handler and its discovery follow a CRD's changes each on its own:
            // discovery may still list the version a moment after it answers 404. Announcing the
            // objects deleted then would publish them all again once discovery catches up.
            Ok(Served::Here) if self.discovery_lag < DISCOVERY_LAG_TRIES => {
                self.discovery_lag += 1;
                let delay = DISCOVERY_LAG_PAUSE * self.discovery_lag;
                self.back_off(
                    RestartReason::UnexpectedResponse,
                    verb,
                    RestartError::DiscoveryBehind(error),
                    Some(delay),
                    retry,
                )
            }
            Ok(Served::Here | Served::Nowhere) => self.not_served(error),
            // Not knowing where the resource went is no reason to announce its objects deleted.
            Err(e) => {
                let reason = match &e {
                    DiscoveryError::Request {
                        source: ApiError::Transport(_),
                        ..
                    } => RestartReason::Transport,
                    _ => RestartReason::ServerError,
                };
                self.back_off(reason, verb, RestartError::Discovery(e), None, retry)
            }
        }
    }

    /// Reopens a followed watch the server ended cleanly: at the preferred version, if discovery
    /// now prefers another one. A failed discovery is no reason not to reopen where it was.
    pub(super) async fn reopen_followed(&mut self, rv: ResourceVersion) -> (Outcome, State) {
        match self.where_served().await {
            Ok(Served::Elsewhere(to)) => self.moved(to, State::Connecting { rv }),
            Ok(Served::Here | Served::Nowhere) | Err(_) => self.open_watch(rv).await,
        }
    }

    /// Where discovery of the resource's group serves a followed resource now (`Nowhere` for a
    /// resource the watch does not follow).
    async fn where_served(&self) -> Result<Served, DiscoveryError> {
        let Some(name) = &self.target.follow else {
            return Ok(Served::Nowhere);
        };
        let current = &self.target.resource;
        let Some(discovery) = Discovery::fetch_group(&self.client, &current.group).await? else {
            return Ok(Served::Nowhere);
        };
        Ok(match discovery.resolve(name) {
            Ok(to) if to.plural != current.plural => Served::Nowhere,
            Ok(to) if to.version != current.version => Served::Elsewhere(to),
            Ok(_) => Served::Here,
            Err(_) => Served::Nowhere,
        })
    }

    /// Watches `to` from now on; `retry`, the request that answered 404, is made again there
    /// (a paged list starts over: its `continue` token was the old version's). A mirrored watch
    /// lists instead, so that the list writes the keys at the new version and deletes the old.
    fn moved(&mut self, to: ResourceInfo, retry: State) -> (Outcome, State) {
        self.discovery_lag = 0;
        let mut target = (*self.target).clone();
        let from = std::mem::replace(&mut target.resource, to.clone());
        self.path = collection_path(&target.resource, target.namespace.as_deref());
        self.target = Arc::new(target);
        let resume = match &retry {
            State::Connecting { rv } => Some(rv.clone()),
            _ => None,
        };
        let next = match retry {
            _ if self.relist_on_move => self.list(ListReason::Mirror),
            State::Listing {
                reason,
                continue_token: Some(_),
            } => State::Listing {
                reason,
                continue_token: None,
            },
            other => other,
        };
        (
            Outcome::VersionMoved(VersionMove { from, to, resume }),
            next,
        )
    }
}
