//! Exponential backoff with jitter, as a value.
//!
//! Defaults follow client-go's reflector (0.8 s doubling to 30 s). A watch that has gone
//! `reset_after` without a failure starts again from the initial delay, so one blip after hours of
//! health is not punished like the tenth failure in a row.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::config::BackoffConfig;

/// Retries of a write to NATS (an event publish, a mirror write): short, since NATS usually
/// comes back quickly, and capped so a recovered NATS is used within seconds.
pub(crate) const NATS_WRITE_RETRY: BackoffConfig = BackoffConfig::checked(
    Duration::from_millis(100),
    Duration::from_secs(5),
    2.0,
    0.2,
    Duration::from_secs(30),
);

/// Retries of setting up a JetStream bucket (the state's, the mirror's) and of loading from it:
/// quick at first, capped low so a recovered NATS is used within seconds.
pub(crate) const NATS_SETUP_RETRY: BackoffConfig = BackoffConfig::checked(
    Duration::from_millis(100),
    Duration::from_secs(2),
    2.0,
    0.2,
    Duration::from_secs(60),
);

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    cfg: BackoffConfig,
    /// The delay before jitter that the next failure waits.
    next: Duration,
    last_failure: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(cfg: BackoffConfig) -> Backoff {
        Backoff {
            cfg,
            next: cfg.initial(),
            last_failure: None,
        }
    }

    /// The delay to wait after a failure now; each call doubles (by `multiplier`) the next one up to `max`.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last_failure
            .is_some_and(|t| now.duration_since(t) >= self.cfg.reset_after())
        {
            self.next = self.cfg.initial();
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = base.mul_f64(self.cfg.multiplier()).min(self.cfg.max());
        self.jittered(base)
    }

    /// The delay after a failure for which the server said how long to wait (`Retry-After`):
    /// the server's figure, clamped to the configured range, and the exponent still grows.
    pub(crate) fn next_delay_with_hint(&mut self, retry_after: Option<Duration>) -> Duration {
        let own = self.next_delay();
        match retry_after {
            Some(hint) => hint.clamp(self.cfg.initial(), self.cfg.max()),
            None => own,
        }
    }

    /// Forgets past failures.
    pub(crate) fn reset(&mut self) {
        self.next = self.cfg.initial();
        self.last_failure = None;
    }

    /// `base` spread over `[base * (1 - jitter), base]`, so many watches failing together do not
    /// retry in lock-step.
    fn jittered(&self, base: Duration) -> Duration {
        if self.cfg.jitter() <= 0.0 {
            return base;
        }
        let factor = 1.0 - self.cfg.jitter() * rand::rng().random::<f64>();
        base.mul_f64(factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(jitter: f64) -> BackoffConfig {
        BackoffConfig::checked(
            Duration::from_millis(800),
            Duration::from_secs(30),
            2.0,
            jitter,
            Duration::from_secs(120),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn doubles_up_to_the_cap_and_resets_after_a_quiet_period() {
        let mut b = Backoff::new(cfg(0.0));
        let delays: Vec<u64> = (0..7).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000]);
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_the_range() {
        let mut b = Backoff::new(cfg(0.5));
        for _ in 0..100 {
            b.reset();
            let d = b.next_delay();
            assert!(
                d >= Duration::from_millis(400) && d <= Duration::from_millis(800),
                "{d:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_clamped() {
        let mut b = Backoff::new(cfg(0.0));
        assert_eq!(
            b.next_delay_with_hint(Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(
            b.next_delay_with_hint(Some(Duration::from_secs(3600))),
            Duration::from_secs(30)
        );
        assert_eq!(
            b.next_delay_with_hint(Some(Duration::ZERO)),
            Duration::from_millis(800)
        );
    }
}
