//! A request the API server refused (403). Usually RBAC lacks a rule, and the log line names the
//! rule to add; but a kube-apiserver that has just started refuses requests for a moment while
//! its authorizer's caches load, although the rule exists. So a refusal is first logged as a
//! warning that kube2nats retries, and the rule is named only once the refusal has lasted
//! [`REFUSAL_PERSISTS_AFTER`] (docs/troubleshooting.md, "403 Forbidden"). A missing rule is
//! still named at once by the RBAC check at start ([`crate::rbac`]).

use std::time::Duration;

use tokio::time::Instant;

/// How long a target's requests may be refused, with no success between, before the refusal is
/// taken for a missing RBAC rule: longer than a restarted kube-apiserver takes to load its
/// authorizer (about a second), short enough that a missing rule is named after a few retries
/// (about the fourth with the default backoff).
pub(crate) const REFUSAL_PERSISTS_AFTER: Duration = Duration::from_secs(5);

/// Since when a target's requests have been refused, with no success between.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    since: Option<Instant>,
}

/// How one refusal is reported.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The first since a success: a warning that kube2nats retries.
    First,
    /// Another, within [`REFUSAL_PERSISTS_AFTER`] of the first: debug.
    Again,
    /// Refusals for this long: an error naming the rule to add.
    Persisting(Duration),
}

impl Refusals {
    /// A request was refused now.
    pub(crate) fn refused(&mut self) -> Refusal {
        let now = Instant::now();
        let Some(since) = self.since else {
            self.since = Some(now);
            return Refusal::First;
        };
        let refused_for = now.duration_since(since);
        match refused_for >= REFUSAL_PERSISTS_AFTER {
            true => Refusal::Persisting(refused_for),
            false => Refusal::Again,
        }
    }

    /// A list page or a watch was served: the next refusal is a first one again.
    pub(crate) fn served(&mut self) {
        self.since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_refusal_persists_after_its_time_without_a_success() {
        let mut refusals = Refusals::default();
        assert_eq!(refusals.refused(), Refusal::First);
        tokio::time::advance(REFUSAL_PERSISTS_AFTER - Duration::from_millis(1)).await;
        assert_eq!(refusals.refused(), Refusal::Again);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            refusals.refused(),
            Refusal::Persisting(REFUSAL_PERSISTS_AFTER)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_makes_the_next_refusal_a_first_one() {
        let mut refusals = Refusals::default();
        assert_eq!(refusals.refused(), Refusal::First);
        tokio::time::advance(REFUSAL_PERSISTS_AFTER).await;
        refusals.served();
        assert_eq!(refusals.refused(), Refusal::First);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(refusals.refused(), Refusal::Again);
    }
}
