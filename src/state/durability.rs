//! Whether a target's saved state keeps up with what it publishes, and what kube2nats does when
//! the state bucket refuses writes (full: its `max_bytes`, or the account's JetStream storage,
//! is used up; or JetStream is failing).
//!
//! Delivery goes on: events matter more than restart bookkeeping. A journal write that has not
//! been stored after [`DEGRADE_AFTER`] is given up, and from then on messages no longer wait for
//! the journal (the target is *degraded*: `kube2nats_state_degraded` 1, a note in `/readyz`'s
//! body, the `Kube2natsStateDegraded` alert). Checkpoints are retried meanwhile; each one taken
//! while degraded holds every object, and the first such checkpoint stored makes the state
//! durable again, the journal included. Checkpoint writes failing for [`DEGRADE_AFTER`] degrade
//! the target too (nothing waits for them, but the saved state falls behind). What a crash while
//! degraded repeats or misses is in docs/durable-state.md.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long writes to the state bucket may fail before delivery stops waiting for them: long
/// enough to ride out a JetStream leader election or a NATS reconnect, short enough that a
/// full bucket costs seconds of delay, not a stalled watch.
pub(crate) const DEGRADE_AFTER: Duration = Duration::from_secs(10);

/// One target's durability, shared by its journal (in the watch task) and its checkpoint writer.
#[derive(Default)]
pub(crate) struct TargetDurability {
    /// The journal gave up on a write: messages no longer wait for it, until a checkpoint
    /// taken since is stored.
    journal_suspended: AtomicBool,
    failures: Mutex<Failures>,
}

#[derive(Default)]
struct Failures {
    /// The last error of a journal write.
    journal: Option<String>,
    /// Since when checkpoint writes fail, and the last error.
    checkpoint: Option<(Instant, String)>,
    /// The checkpoint failures' degradation was logged.
    checkpoint_said: bool,
}

impl TargetDurability {
    fn failures(&self) -> std::sync::MutexGuard<'_, Failures> {
        // Every writer leaves the record whole, so a poisoned lock still holds a valid one.
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A journal write failed (it is retried until [`DEGRADE_AFTER`]).
    pub(crate) fn journal_failed(&self, error: &dyn std::fmt::Display) {
        self.failures().journal = Some(error.to_string());
    }

    /// The journal gave up on a write.
    pub(crate) fn suspend_journal(&self) {
        self.journal_suspended.store(true, Ordering::Relaxed);
    }

    /// Whether messages go out without waiting for the journal.
    pub(crate) fn journal_suspended(&self) -> bool {
        self.journal_suspended.load(Ordering::Relaxed)
    }

    /// A checkpoint write failed. Returns the reason the first time the failures degrade the
    /// target (for one log line).
    pub(crate) fn checkpoint_failed(&self, error: &dyn std::fmt::Display) -> Option<String> {
        let mut failures = self.failures();
        let since = failures
            .checkpoint
            .as_ref()
            .map_or_else(Instant::now, |f| f.0);
        failures.checkpoint = Some((since, error.to_string()));
        if failures.checkpoint_said || since.elapsed() < DEGRADE_AFTER {
            return None;
        }
        failures.checkpoint_said = true;
        drop(failures);
        self.reason()
    }

    /// A checkpoint was stored; `restores`: it was taken while the journal was suspended, so it
    /// holds every object published meanwhile. Returns whether that made the state durable again.
    pub(crate) fn checkpoint_written(&self, restores: bool) -> bool {
        let was_degraded = self.reason().is_some();
        let mut failures = self.failures();
        failures.checkpoint = None;
        failures.checkpoint_said = false;
        if restores {
            failures.journal = None;
            self.journal_suspended.store(false, Ordering::Relaxed);
        }
        drop(failures);
        was_degraded && self.reason().is_none()
    }

    /// Why the saved state does not keep up, if it does not.
    pub(crate) fn reason(&self) -> Option<String> {
        let failures = self.failures();
        if self.journal_suspended() {
            let error = failures.journal.as_deref().unwrap_or("timed out");
            return Some(format!(
                "journal writes failed for {}s ({}); messages no longer wait for them",
                DEGRADE_AFTER.as_secs(),
                describe(error)
            ));
        }
        match &failures.checkpoint {
            Some((since, error)) if since.elapsed() >= DEGRADE_AFTER => Some(format!(
                "checkpoint writes have failed for {}s ({})",
                since.elapsed().as_secs(),
                describe(error)
            )),
            _ => None,
        }
    }
}

/// An error of a write to the state bucket, with the cause spelled out when the server said the
/// bucket or the account's storage is full.
fn describe(error: &str) -> String {
    // JetStream's errors for a stream at its max_bytes (10077) and for storage the account or
    // server does not have (10023, 10047, 10002).
    let full = [
        "maximum bytes exceeded",
        "insufficient resources",
        "insufficient storage",
        "resource limits exceeded",
    ]
    .iter()
    .any(|needle| error.to_ascii_lowercase().contains(needle));
    if full {
        format!("the state bucket is full: {error}")
    } else {
        error.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn checkpoint_failures_degrade_only_after_the_grace() {
        let d = TargetDurability::default();
        assert_eq!(d.checkpoint_failed(&"nats: maximum bytes exceeded"), None);
        assert_eq!(d.reason(), None);
        tokio::time::advance(DEGRADE_AFTER).await;
        let reason = d
            .checkpoint_failed(&"nats: maximum bytes exceeded")
            .unwrap();
        assert_eq!(d.checkpoint_failed(&"again"), None, "said once");
        assert!(reason.contains("the state bucket is full"), "{reason}");
        assert!(d.checkpoint_written(false));
        assert_eq!(d.reason(), None);
    }

    #[test]
    fn only_a_checkpoint_taken_while_suspended_resumes_the_journal() {
        let d = TargetDurability::default();
        d.journal_failed(&"timed out");
        d.suspend_journal();
        assert!(d.reason().unwrap().contains("journal writes failed"));
        assert!(!d.checkpoint_written(false));
        assert!(d.journal_suspended());
        assert!(d.checkpoint_written(true));
        assert!(!d.journal_suspended());
        assert_eq!(d.reason(), None);
    }
}
