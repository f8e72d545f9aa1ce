//! The term's deadline as the publishers read it (docs/replicas.md, "A paused holder").
//!
//! The elector ends a term when its renew deadline passes, but only once its timer has run: a
//! holder whose CPU was withheld (a container throttled at its CPU limit, a paused VM) resumes
//! with its timer and the watch's socket ready at once, and the runtime may run the watch first.
//! Whatever it published then would go out beside the next holder's messages. So every message
//! is published only while the term is in force by the clock itself: before the renew deadline
//! of the last successful renewal, as the elector counts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// No deadline: without leader election every message may go out.
const UNBOUNDED: u64 = u64::MAX;

/// How often a publisher past the deadline looks again (until its task is stopped, or a
/// renewal that began in time lands).
const RECHECK: Duration = Duration::from_millis(10);

/// The instant until which the term is in force; cheap to clone, shared by the elector (which
/// moves it) and every watch task of the process (which read it).
#[derive(Clone, Debug)]
pub(crate) struct TermClock(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    base: Instant,
    /// Nanoseconds after `base`; 0: no term; [`UNBOUNDED`]: no deadline.
    until: AtomicU64,
}

impl TermClock {
    /// A clock that is always in force (no leader election).
    pub(crate) fn unbounded() -> TermClock {
        TermClock::at(UNBOUNDED)
    }

    /// A clock of no term yet.
    pub(crate) fn ended() -> TermClock {
        TermClock::at(0)
    }

    fn at(until: u64) -> TermClock {
        TermClock(Arc::new(Inner {
            base: Instant::now(),
            until: AtomicU64::new(until),
        }))
    }

    /// The term is in force until `deadline`.
    pub(crate) fn hold_until(&self, deadline: Instant) {
        let nanos = deadline.saturating_duration_since(self.0.base).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(UNBOUNDED - 1).max(1);
        self.0.until.store(nanos, Ordering::Release);
    }

    /// The term is over.
    pub(crate) fn end(&self) {
        self.0.until.store(0, Ordering::Release);
    }

    /// Whether a message may go out now.
    pub(crate) fn in_force(&self) -> bool {
        let until = self.0.until.load(Ordering::Acquire);
        until == UNBOUNDED || self.nanos_now() < until
    }

    /// Returns once the term is in force; a publisher past the deadline waits here until its
    /// task is stopped (the term ended).
    pub(crate) async fn wait_in_force(&self) {
        while !self.in_force() {
            tokio::time::sleep(RECHECK).await;
        }
    }

    /// [`wait_in_force`](Self::wait_in_force), saying so in the log when `watch` has to wait.
    pub(crate) async fn hold(&self, watch: &str) {
        if !self.in_force() {
            tracing::warn!(watch, "the Lease's renew deadline has passed: not publishing until the term is renewed or ends");
            self.wait_in_force().await;
        }
    }

    fn nanos_now(&self) -> u64 {
        let nanos = Instant::now()
            .saturating_duration_since(self.0.base)
            .as_nanos();
        u64::try_from(nanos).unwrap_or(UNBOUNDED - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn in_force_until_the_deadline_then_not_until_renewed() {
        let clock = TermClock::ended();
        assert!(!clock.in_force(), "no term yet");
        clock.hold_until(Instant::now() + Duration::from_secs(2));
        assert!(clock.in_force());
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert!(clock.in_force());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!clock.in_force(), "at the deadline");
        clock.hold_until(Instant::now() + Duration::from_secs(2));
        assert!(clock.in_force(), "renewed");
        clock.end();
        assert!(!clock.in_force(), "ended");
        assert!(TermClock::unbounded().in_force());
    }

    #[tokio::test(start_paused = true)]
    async fn a_publisher_past_the_deadline_waits_for_a_renewal() {
        let clock = TermClock::ended();
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move { clock.wait_in_force().await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished());
        clock.hold_until(Instant::now() + Duration::from_secs(2));
        tokio::time::sleep(RECHECK * 2).await;
        assert!(waiting.is_finished());
    }
}
