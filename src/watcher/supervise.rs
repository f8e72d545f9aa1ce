//! Keeping watch tasks alive: a task that panics (a bug, since no input should reach a panic) is
//! noticed at once, reported, and started again from a fresh list after a growing pause.
//!
//! # Restart in the process, not exit
//!
//! The alternative, exiting non-zero so that the kubelet restarts the pod, would stop every other
//! watch with the broken one: with a deterministic crash (one object that trips a bug), the whole
//! cluster's events would stop for the length of a CrashLoopBackOff, again and again. Restarting
//! only the dead target keeps the healthy ones publishing, and costs what a pod restart costs that
//! target (a list, whose objects dedupe has forgotten and announces again; JetStream's duplicate
//! window drops the repeats). What the pod restart would give for free is kept:
//! - visibility: one `error` line naming the watch, namespace and panic; the counter
//!   `watch_restarts_total{reason="panic"}`; readiness false (the target is not synced) until the
//!   new task has listed;
//! - no hot loop: the pause grows from [`CRASH_BACKOFF`]'s 1 s to 5 min, as the kubelet's does,
//!   and only a task that has run 10 minutes since its last crash starts again from 1 s.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::metrics::WatchMetrics;
use crate::backoff::Backoff;
use crate::config::BackoffConfig;
use crate::telemetry::target::TargetGauges;

/// Pauses before a crashed task starts again: like the kubelet's CrashLoopBackOff (which caps at
/// 5 min and forgets after 10 min of running), but starting at 1 s, since a one-off crash should
/// cost seconds.
pub(crate) const CRASH_BACKOFF: BackoffConfig = BackoffConfig::checked(
    Duration::from_secs(1),
    Duration::from_secs(300),
    2.0,
    0.1,
    Duration::from_secs(600),
);

/// The `watch_restarts_total` reason of a task that died.
pub(crate) const RESTART_REASON: &str = "panic";

tokio::task_local! {
    /// Where the panic hook leaves the panic (message and location) of a supervised task.
    static PANIC_SLOT: Arc<Mutex<Option<String>>>;
}

/// Makes a panic inside a supervised task silent at the moment it happens, leaving its message
/// and location for the supervisor's one log line; panics anywhere else print as the default
/// hook prints them.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let kept = PANIC_SLOT.try_with(|slot| {
            if let Ok(mut slot) = slot.lock() {
                *slot = Some(info.to_string());
            }
        });
        if kept.is_err() {
            default(info);
        }
    }));
}

/// Aborts the task when dropped: a supervisor aborted at the end of the shutdown grace period
/// takes its task with it.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the task `start` makes until `shutdown`; whenever it dies first (a panic, or an end
/// that only shutdown should cause), reports it, waits, and starts a new one.
pub(crate) async fn supervise<F, Fut>(
    mut start: F,
    metrics: WatchMetrics,
    gauges: TargetGauges,
    namespace: String,
    shutdown: CancellationToken,
) where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut backoff = Backoff::new(CRASH_BACKOFF);
    loop {
        let slot = Arc::new(Mutex::new(None));
        let task = tokio::spawn(PANIC_SLOT.scope(slot.clone(), start(shutdown.child_token())));
        let _guard = AbortOnDrop(task.abort_handle());
        let died = match task.await {
            Ok(()) if shutdown.is_cancelled() => return,
            Ok(()) => "the task returned before shutdown".to_owned(),
            Err(e) if e.is_cancelled() => return,
            Err(e) => {
                let hooked = slot.lock().ok().and_then(|mut s| s.take());
                hooked.unwrap_or_else(|| panic_message(e.into_panic()))
            }
        };
        gauges.withdraw();
        metrics.restart(RESTART_REASON);
        let delay = backoff.next_delay();
        tracing::error!(watch = %metrics.watch, namespace = %namespace, panic = %died, restart_in = ?delay, "watch task died; restarting it from a fresh list (a bug: please report it with this line)");
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::telemetry::http::Readiness;
    use crate::telemetry::metrics::Metrics;
    use crate::watcher::metrics::WatchFamilies;

    /// A fresh registry with the watch stage's families, one watch of one target, and its gauges.
    fn one_target() -> (Metrics, WatchMetrics, TargetGauges) {
        let metrics = Metrics::new().unwrap();
        let watch = WatchFamilies::register(&metrics.registry)
            .unwrap()
            .for_watch("pods", 1);
        let queued = prometheus::IntGauge::new("queued", "queued").unwrap();
        let gauges = TargetGauges::new(watch.sync.clone(), watch.tracked_objects.clone(), queued);
        (metrics, watch, gauges)
    }

    /// A task that lists (target synced) and then panics, every time: each death is counted,
    /// takes the target's share out of the gauges (readiness false), and the restarts slow down
    /// (a deterministic crash is not a hot loop); shutdown ends the supervisor.
    #[tokio::test(start_paused = true)]
    async fn a_task_that_keeps_panicking_is_restarted_with_growing_pauses() {
        let (metrics, watch, gauges) = one_target();
        let shutdown = CancellationToken::new();
        let nats_connected = prometheus::IntGauge::new("connected", "connected").unwrap();
        nats_connected.set(1);
        let readiness = Readiness::new(nats_connected, shutdown.clone());
        readiness.set_watches(vec![watch.sync.clone()]);
        let starts = Arc::new(AtomicUsize::new(0));
        let start = {
            let (starts, gauges) = (starts.clone(), gauges.clone());
            move |_stop: CancellationToken| {
                let (starts, gauges) = (starts.clone(), gauges.clone());
                async move {
                    starts.fetch_add(1, Ordering::SeqCst);
                    gauges.set_tracked(5);
                    gauges.set_synced(true);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    panic!("a bug");
                }
            }
        };
        let supervisor = tokio::spawn({
            let (watch, gauges, shutdown) = (watch.clone(), gauges.clone(), shutdown.clone());
            async move { supervise(start, watch, gauges, "default".into(), shutdown).await }
        });

        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        assert!(
            readiness.check().is_err(),
            "not ready while the task is dead"
        );
        assert_eq!(watch.tracked_objects.get(), 0, "its objects withdrawn");
        let restarts = || {
            metrics
                .render()
                .lines()
                .find(|l| l.starts_with("kube2nats_watch_restarts_total{reason=\"panic\""))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        };
        assert_eq!(restarts(), Some(1.0));

        // Ten minutes of a task that dies every time: 1 + 2 + 4 + … + 256 s, capped at 300 s.
        tokio::time::sleep(Duration::from_secs(600)).await;
        let n = starts.load(Ordering::SeqCst);
        assert!((8..=12).contains(&n), "{n} starts in ten minutes");
        assert_eq!(restarts(), Some(n as f64));

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(1), supervisor)
            .await
            .expect("the supervisor stops at shutdown")
            .unwrap();
    }

    /// A task that stops at shutdown is not restarted and not reported.
    #[tokio::test(start_paused = true)]
    async fn a_task_that_stops_at_shutdown_is_left_alone() {
        let (metrics, watch, gauges) = one_target();
        let shutdown = CancellationToken::new();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        let start = move |stop: CancellationToken| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { stop.cancelled().await }
        };
        let supervisor = tokio::spawn(supervise(
            start,
            watch,
            gauges,
            "default".into(),
            shutdown.clone(),
        ));
        tokio::time::sleep(Duration::from_secs(5)).await;
        shutdown.cancel();
        supervisor.await.unwrap();
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        assert!(!metrics.render().contains("reason=\"panic\""));
    }
}
