//! One byte budget for the data kube2nats holds between the API server and NATS.
//!
//! A watch line is held from the moment its bytes are read until NATS has taken the message made
//! of it (acknowledged in JetStream mode, flushed to the socket in core mode). With hundreds of
//! watch targets and objects of a megabyte, a count of messages bounds nothing, so every stage
//! that holds such bytes charges them here: the watch stream for what it has read and not yet
//! handed on, the outbox for what NATS has not yet taken. When the total reaches the limit
//! (`nats.max_buffered_bytes`), the watch streams stop reading (the API server keeps the
//! history; a watch resumes from its last version) until NATS takes data again.
//!
//! A stream caught in the middle of a line when the budget runs out may finish that line only if
//! no other stream is doing so (the overdraft, one line at a time); otherwise it drops the line
//! and its connection and reopens the watch from its last version once there is room. That keeps
//! the total near the limit: the limit, plus one line, plus one read chunk per stream.
//!
//! A charge given back must mean the memory is free: so a stage hands bytes on without keeping a
//! reference to them (a `Bytes` slice, even an empty one, keeps its whole buffer alive). The line
//! decoder lets go of each line's buffer and of the received chunk once it has cut them.
//!
//! A read can return far more than it was asked for: hyper's HTTP/1.1 read buffer grows to
//! ~400 kB on a busy connection. So streams in the middle of a line read only while they hold one
//! of a few read slots (one per [`READ_SLOT_BYTES`] of the budget): however many watches receive
//! large objects at once, only that many large reads are under way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::IntGauge;
use tokio::sync::{Notify, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// The budget allows one stream in the middle of a line to read per this many bytes.
pub const READ_SLOT_BYTES: usize = 1024 * 1024;

/// A handle on the one budget of the process; cheap to clone.
#[derive(Clone)]
pub struct Budget(Arc<Shared>);

struct Shared {
    limit: usize,
    used: AtomicUsize,
    /// Woken whenever bytes are given back.
    freed: Notify,
    /// Held by the one stream that may finish its line past the limit.
    overdraft: Arc<tokio::sync::Mutex<()>>,
    /// Read slots of the streams in the middle of a line.
    readers: Arc<Semaphore>,
    /// `buffered_bytes`: `used`, exported.
    gauge: Option<IntGauge>,
}

impl Budget {
    /// A budget of `limit` bytes, reported in `gauge`.
    pub fn new(limit: usize, gauge: IntGauge) -> Budget {
        Budget::build(limit, Some(gauge))
    }

    /// No limit (tests, and tools that run one stage alone).
    pub fn unlimited() -> Budget {
        Budget::build(usize::MAX, None)
    }

    fn build(limit: usize, gauge: Option<IntGauge>) -> Budget {
        Budget(Arc::new(Shared {
            limit: limit.max(1),
            used: AtomicUsize::new(0),
            freed: Notify::new(),
            overdraft: Arc::new(tokio::sync::Mutex::new(())),
            readers: Arc::new(Semaphore::new((limit / READ_SLOT_BYTES).clamp(2, 4096))),
            gauge,
        }))
    }

    /// Takes `bytes` from the budget, whether or not there is room: the bytes are in memory
    /// already. Given back when the charge is dropped.
    pub fn charge(&self, bytes: usize) -> Charge {
        let mut charge = Charge {
            budget: Some(self.clone()),
            bytes: 0,
        };
        charge.set(bytes);
        charge
    }

    /// Bytes charged now.
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::Acquire)
    }

    /// Whether the budget is spent: readers must wait.
    pub fn exhausted(&self) -> bool {
        self.used() >= self.0.limit
    }

    /// Returns once the budget is not spent.
    pub async fn room(&self) {
        loop {
            let freed = self.0.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a release in between is not missed.
            freed.as_mut().enable();
            if !self.exhausted() {
                return;
            }
            freed.await;
        }
    }

    /// The right to finish one line past the limit, if no other stream holds it.
    pub fn try_overdraft(&self) -> Option<OwnedMutexGuard<()>> {
        self.0.overdraft.clone().try_lock_owned().ok()
    }

    /// A read slot for a stream in the middle of a line; waits for one.
    pub async fn read_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.0.readers.clone().acquire_owned().await.ok()
    }

    fn add(&self, bytes: usize) {
        self.0.used.fetch_add(bytes, Ordering::AcqRel);
        if let Some(gauge) = &self.0.gauge {
            gauge.add(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    fn release(&self, bytes: usize) {
        self.0.used.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(gauge) = &self.0.gauge {
            gauge.sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        self.0.freed.notify_waiters();
    }
}

/// Bytes taken from a [`Budget`]; given back when dropped.
#[derive(Default)]
pub struct Charge {
    budget: Option<Budget>,
    bytes: usize,
}

impl Charge {
    /// A charge of nothing, against no budget.
    pub fn none() -> Charge {
        Charge::default()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Makes this charge `bytes`, taking or giving back the difference.
    pub fn set(&mut self, bytes: usize) {
        let Some(budget) = &self.budget else {
            return;
        };
        if bytes > self.bytes {
            budget.add(bytes - self.bytes);
        } else if bytes < self.bytes {
            budget.release(self.bytes - bytes);
        }
        self.bytes = bytes;
    }

    /// Adds `other` to this charge (both against the same budget).
    pub fn absorb(&mut self, mut other: Charge) {
        if self.budget.is_none() {
            self.budget = other.budget.take();
        }
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.set(0);
    }
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Charge({} bytes)", self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn charges_are_given_back_when_dropped_and_wake_waiters() {
        let gauge = IntGauge::new("b", "b").unwrap();
        let budget = Budget::new(100, gauge.clone());
        let a = budget.charge(60);
        let mut b = budget.charge(50);
        assert!(budget.exhausted());
        assert_eq!(gauge.get(), 110);
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        b.set(30);
        assert!(!budget.exhausted());
        waiter.await.unwrap();
        let mut c = Charge::none();
        c.absorb(a);
        assert_eq!(budget.used(), 90, "absorbing moves, never double counts");
        drop(c);
        drop(b);
        assert_eq!(budget.used(), 0);
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn one_overdraft_at_a_time() {
        let budget = Budget::unlimited();
        let held = budget.try_overdraft();
        assert!(held.is_some());
        assert!(budget.try_overdraft().is_none());
        drop(held);
        assert!(budget.try_overdraft().is_some());
    }
}
