//! What the watch task logs when its requests fail: a restart's one line, by its reason, and a
//! refused request's, which names the RBAC rule to add only once the refusal persists
//! ([`super::refused`]). The metrics count every restart; the log says what a person does next.

use std::time::Duration;

use super::machine::{Restart, RestartError, RestartReason};
use super::refused::Refusal;
use super::WatchTask;
use crate::kube::client::Verb;
use crate::rbac;
use crate::telemetry::logging::human;

impl WatchTask {
    pub(super) fn restarted(&mut self, restart: Restart) {
        let Restart {
            reason,
            verb,
            error,
            retry_in,
        } = restart;
        self.metrics.restart(reason.as_str());
        if let Some(refused @ RestartError::MetadataRefused(_)) = &error {
            // The one line of this fallback; the full objects that follow are cut silently.
            self.metadata_fallback_logged = true;
            tracing::warn!(watch = %self.metrics.watch, namespace = self.namespace(), error = %refused, "asking for full objects instead; kube2nats cuts them to their metadata (payloads unchanged, no bandwidth saved)");
            return;
        }
        let error = error.as_ref().map(ToString::to_string).unwrap_or_default();
        if reason == RestartReason::Forbidden {
            self.gauges.set_synced(false);
            return self.refused(verb, retry_in, error);
        }
        let watch = &*self.metrics.watch;
        let namespace = self.namespace();
        let list_failed = verb == Verb::List;
        let verb = verb.as_str();
        match reason {
            RestartReason::StreamEnded => {
                tracing::debug!(watch, namespace, "watch ended by the server; resuming")
            }
            RestartReason::BufferFull => {
                tracing::debug!(watch, namespace, error, "reopening the watch from its last resourceVersion once NATS has taken buffered data")
            }
            RestartReason::Unauthorized => {
                tracing::warn!(watch, namespace, verb, retry_in = retry_in.map(human), "the API server rejected the token (401); fetching the credentials again (token file, exec plugin) and retrying");
            }
            // A list page that does not parse is retried as a list, not "resumed": say so.
            RestartReason::DecodeError if list_failed => {
                self.metrics.decode_errors.inc();
                tracing::warn!(
                    watch,
                    namespace,
                    verb,
                    retry_in = retry_in.map(human),
                    error,
                    "malformed list response; retrying the list"
                );
            }
            RestartReason::LineTooLong => {
                self.metrics.decode_errors.inc();
                tracing::warn!(watch, namespace, reason = reason.as_str(), retry_in = retry_in.map(human), error, "relisting to learn which object changed (raise kubernetes.max_line_bytes to receive such objects whole)");
            }
            RestartReason::DecodeError => {
                self.metrics.decode_errors.inc();
                tracing::warn!(
                    watch,
                    namespace,
                    retry_in = retry_in.map(human),
                    error,
                    "malformed watch data; resuming from the last good resourceVersion"
                );
            }
            RestartReason::Expired | RestartReason::TooLargeResourceVersion => {
                tracing::info!(
                    watch,
                    namespace,
                    reason = reason.as_str(),
                    error,
                    "relisting"
                );
            }
            _ => {
                tracing::info!(
                    watch,
                    namespace,
                    verb,
                    reason = reason.as_str(),
                    retry_in = retry_in.map(human),
                    error,
                    "backing off"
                )
            }
        }
    }

    /// Logs a refused request (the task retries it after `retry_in`), naming the rule to add once
    /// the refusal persists.
    pub(super) fn refused(&mut self, verb: Verb, retry_in: Option<Duration>, error: String) {
        let refusal = self.refusals.refused();
        let target = self.machine.target();
        let watch = &*self.metrics.watch;
        let namespace = self.namespace();
        let (verb, resource) = (verb.as_str(), &target.resource.plural);
        let retry_in = retry_in.map(human);
        match refusal {
            Refusal::First => {
                tracing::warn!(watch, namespace, verb, resource = %resource, retry_in, error, "the API server refused the request (403); retrying (an API server that has just started refuses for a moment; the rule to add is named if the refusal persists)")
            }
            Refusal::Again => {
                tracing::debug!(watch, namespace, verb, resource = %resource, retry_in, error, "the API server refused the request again (403); retrying")
            }
            Refusal::Persisting(refused_for) => {
                let rule = rbac::rule_to_add(&target.resource, target.namespace.as_deref());
                tracing::error!(watch, namespace, verb, resource = %resource, refused_for = human(refused_for), retry_in, error, rule = %rule, "RBAC refused the request; add the rule")
            }
        }
    }
}
