//! The pause before a watch or consumer is opened again after an error: 500 ms, doubling to
//! 30 s, back to the start once one is open. kube-runtime leaves backing off to its caller
//! (`WatchStreamExt::default_backoff`); these streams pause by themselves, so that a caller that
//! adds no backoff never spins against a NATS server that is away.

use std::time::Duration;

const FIRST: Duration = Duration::from_millis(500);
const MAX: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { next: FIRST }
    }

    pub(crate) fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(MAX);
        now
    }

    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_a_cap_and_resets() {
        let mut b = Backoff::new();
        let pauses: Vec<u64> = (0..8).map(|_| b.next().as_millis() as u64).collect();
        assert_eq!(pauses, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        b.reset();
        assert_eq!(b.next(), FIRST);
    }
}
