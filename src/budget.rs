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
//! A watch stream keeps only what the budget admits: it charges each chunk as it takes it, and
//! only if the total stays within the limit. A chunk that does not fit may still be kept by the
//! one stream holding the overdraft (the right to finish one line past the limit, one line at a
//! time); any other stream lets go of the chunk, of the line it was assembling and of its
//! connection, and reopens the watch from its last version (nothing is lost: the API server
//! keeps the history). The next overdraft waits until the total is back under the limit (the
//! line finished past it stays in memory until NATS has taken it). So `buffered_bytes` stays
//! within the limit plus one line (at most `kubernetes.max_line_bytes`), however many watches
//! there are. A line handed on takes its part of the stream's charge with it, and the outbox
//! that publishes it takes that charge over (made the message's size), so no other stream can
//! take its room in between.
//!
//! Streams wait rather than read while they may not keep more: at a line boundary until there
//! is room; in the middle of a line for one of a few read slots (one per [`SLOT_BYTES`] of the
//! budget), so that however many watches receive large objects at once, only that many grow
//! their line (and their connection's read buffer: hyper's grows to ~400 kB on a busy HTTP/1.1
//! connection); in the middle of a line with the budget spent they do not wait: they finish
//! the line under the overdraft or let go. Waiting is safe only because every watch has a
//! connection of its own (HTTP/1.1, see [`crate::kube::client`]): over HTTP/2 all watches
//! share one connection's flow-control window, a stream that waits holds its part of it, and a
//! few of them starve the stream finishing its line, a deadlock no room ever ends.
//!
//! Watches that let go reopen in turn, a few at a time (one per [`SLOT_BYTES`] of the budget,
//! first come first served), each once there is room: a reopened watch holds its resume slot
//! until its first line is complete (or nothing arrives for [`RESUME_IDLE`]). Without that, all
//! of them would reopen together, fill the budget with the start of each one's object, and let
//! go again, finishing one line a round.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::IntGauge;
use tokio::sync::{Notify, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// The budget has one read slot and one resume slot per this many bytes (at least two).
pub(crate) const SLOT_BYTES: usize = 1024 * 1024;

/// How long a reopened watch keeps its resume slot while nothing arrives: the API server replays
/// the history from the watch's version at once, so a watch that stays quiet has nothing to catch
/// up on and lets the next one in.
pub(crate) const RESUME_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// How many read slots, and how many resume slots, a budget of `limit` bytes has.
fn slots(limit: usize) -> usize {
    (limit / SLOT_BYTES).clamp(2, 4096)
}

/// A handle on the one budget of the process; cheap to clone.
#[derive(Clone)]
pub(crate) struct Budget(Arc<Shared>);

struct Shared {
    limit: usize,
    used: AtomicUsize,
    /// Woken whenever bytes are given back.
    freed: Notify,
    /// Held by the one stream that may finish its line past the limit.
    overdraft: Arc<tokio::sync::Mutex<()>>,
    /// Set when the overdraft is taken, cleared once the total is back under the limit: the
    /// line finished past the limit stays in memory until NATS has taken it, so the next
    /// overdraft waits until it is paid back (else one line after another would go past it).
    overdrawn: AtomicBool,
    /// Read slots of the streams in the middle of a line.
    readers: Arc<Semaphore>,
    /// Resume slots of the watches reopening after letting go for the budget.
    resumes: Arc<Semaphore>,
    /// `buffered_bytes`: `used`, exported.
    gauge: Option<IntGauge>,
}

impl Budget {
    /// A budget of `limit` bytes, reported in `gauge`.
    pub(crate) fn new(limit: usize, gauge: IntGauge) -> Budget {
        Budget::build(limit, Some(gauge))
    }

    /// No limit (tests, and tools that run one stage alone).
    pub(crate) fn unlimited() -> Budget {
        Budget::build(usize::MAX, None)
    }

    fn build(limit: usize, gauge: Option<IntGauge>) -> Budget {
        Budget(Arc::new(Shared {
            limit: limit.max(1),
            used: AtomicUsize::new(0),
            freed: Notify::new(),
            overdraft: Arc::new(tokio::sync::Mutex::new(())),
            overdrawn: AtomicBool::new(false),
            readers: Arc::new(Semaphore::new(slots(limit))),
            resumes: Arc::new(Semaphore::new(slots(limit))),
            gauge,
        }))
    }

    /// Takes `bytes` from the budget, whether or not there is room: the bytes are in memory
    /// already. Given back when the charge is dropped.
    pub(crate) fn charge(&self, bytes: usize) -> Charge {
        let mut charge = Charge {
            budget: Some(self.clone()),
            bytes: 0,
        };
        charge.set(bytes);
        charge
    }

    /// Bytes charged now.
    pub(crate) fn used(&self) -> usize {
        self.0.used.load(Ordering::Acquire)
    }

    /// Whether the budget is spent: readers must wait.
    pub(crate) fn exhausted(&self) -> bool {
        self.used() >= self.0.limit
    }

    /// Returns once the budget is not spent.
    pub(crate) async fn room(&self) {
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

    /// The right to finish one line past the limit, if no other stream holds it and the last
    /// line finished past the limit has been paid back.
    pub(crate) fn try_overdraft(&self) -> Option<OwnedMutexGuard<()>> {
        let overdraft = self.0.overdraft.clone().try_lock_owned().ok()?;
        let paid_back = self
            .0
            .overdrawn
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        paid_back.then_some(overdraft)
    }

    /// A read slot for a stream in the middle of a line; waits for one.
    pub(crate) async fn read_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.0.readers.clone().acquire_owned().await.ok()
    }

    /// A resume slot for a watch reopening after it let go for the budget; waits for one, in
    /// turn, and then for room.
    pub(crate) async fn resume_slot(&self) -> Option<OwnedSemaphorePermit> {
        let slot = self.0.resumes.clone().acquire_owned().await.ok();
        self.room().await;
        slot
    }

    /// Takes `delta` more bytes only if the total stays within the limit.
    fn try_add(&self, delta: usize) -> bool {
        let fits = self
            .0
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(delta)
                    .filter(|total| *total <= self.0.limit)
            })
            .is_ok();
        if fits {
            if let Some(gauge) = &self.0.gauge {
                gauge.add(i64::try_from(delta).unwrap_or(i64::MAX));
            }
        }
        fits
    }

    fn add(&self, bytes: usize) {
        self.0.used.fetch_add(bytes, Ordering::AcqRel);
        if let Some(gauge) = &self.0.gauge {
            gauge.add(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    fn release(&self, bytes: usize) {
        let before = self.0.used.fetch_sub(bytes, Ordering::AcqRel);
        if before - bytes < self.0.limit {
            self.0.overdrawn.store(false, Ordering::Release);
        }
        if let Some(gauge) = &self.0.gauge {
            gauge.sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        self.0.freed.notify_waiters();
    }
}

/// Bytes taken from a [`Budget`]; given back when dropped.
#[derive(Default)]
pub(crate) struct Charge {
    budget: Option<Budget>,
    bytes: usize,
}

impl Charge {
    /// A charge of nothing, against no budget.
    pub(crate) fn none() -> Charge {
        Charge::default()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Makes this charge `bytes`, taking or giving back the difference.
    pub(crate) fn set(&mut self, bytes: usize) {
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

    /// Makes this charge `bytes` if the budget's total stays within its limit; else leaves it.
    pub(crate) fn try_set(&mut self, bytes: usize) -> bool {
        let Some(budget) = &self.budget else {
            return true;
        };
        if bytes <= self.bytes {
            self.set(bytes);
            return true;
        }
        if !budget.try_add(bytes - self.bytes) {
            return false;
        }
        self.bytes = bytes;
        true
    }

    /// Moves `bytes` of this charge (at most all of it) to a new charge against the same
    /// budget; the budget's total does not change.
    pub(crate) fn split_off(&mut self, bytes: usize) -> Charge {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Charge {
            budget: self.budget.clone(),
            bytes,
        }
    }

    /// Adds `other` to this charge (both against the same budget).
    pub(crate) fn absorb(&mut self, mut other: Charge) {
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

    #[test]
    fn a_split_charge_moves_bytes_without_changing_the_total() {
        let budget = Budget::build(100, None);
        let mut held = budget.charge(60);
        let mut line = held.split_off(40);
        assert_eq!((held.bytes(), line.bytes(), budget.used()), (20, 40, 60));
        line.set(50);
        assert_eq!(budget.used(), 70);
        drop(held);
        drop(line);
        assert_eq!(budget.used(), 0);
        assert_eq!(
            budget.charge(5).split_off(9).bytes(),
            5,
            "at most what it holds"
        );
    }

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
    fn a_charge_tried_within_the_limit_is_taken_only_if_it_fits() {
        let gauge = IntGauge::new("b", "b").unwrap();
        let budget = Budget::new(100, gauge.clone());
        let mut a = budget.charge(0);
        assert!(a.try_set(60));
        let mut b = budget.charge(0);
        assert!(!b.try_set(41), "60 + 41 is over the limit");
        assert_eq!((b.bytes(), budget.used(), gauge.get()), (0, 60, 60));
        assert!(b.try_set(40), "60 + 40 fits exactly");
        assert!(budget.exhausted());
        assert!(a.try_set(10), "giving back always fits");
        assert_eq!((budget.used(), gauge.get()), (50, 50));
    }

    #[tokio::test]
    async fn watches_resume_in_turn_a_few_at_a_time() {
        let budget = Budget::new(2 * SLOT_BYTES, IntGauge::new("b", "b").unwrap());
        let first = budget.resume_slot().await;
        let second = budget.resume_slot().await;
        assert!(first.is_some() && second.is_some());
        let third = tokio::spawn({
            let budget = budget.clone();
            async move { budget.resume_slot().await.is_some() }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "two slots for a budget of 2 MiB");
        drop(first);
        assert!(third.await.unwrap());
    }

    #[test]
    fn one_overdraft_at_a_time_and_the_next_once_it_is_paid_back() {
        let budget = Budget::new(100, IntGauge::new("b", "b").unwrap());
        let mut line = budget.charge(100);
        let held = budget.try_overdraft();
        assert!(held.is_some());
        assert!(budget.try_overdraft().is_none(), "one at a time");
        line.set(150);
        drop(held);
        assert!(
            budget.try_overdraft().is_none(),
            "the line finished past the limit is still held"
        );
        line.set(120);
        assert!(budget.try_overdraft().is_none(), "still over the limit");
        line.set(99);
        assert!(budget.try_overdraft().is_some(), "paid back");
    }
}
